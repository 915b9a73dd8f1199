// The SIGTRAP handler: foreign traps chain to the handler installed before (SA_SIGINFO,
// plain, SIG_IGN, SIG_DFL), and an executor that hits a locked site waits and continues.
// Chaining tests run in a fresh process each (threadsafe death-test style re-executes the
// binary) because the handler is installed once per process and remembers what was
// installed before it.
#include "crossmod/trap.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <set>
#include <string>

#include "crossmod/code_memory.hpp"
#include "crossmod/wordpatch.hpp"
#include "crossmod/x86.hpp"
#include "site_table.hpp"
#include "test_site.hpp"

namespace crossmod {
namespace {

volatile sig_atomic_t g_user_hits = 0;
void user_siginfo_handler(int, siginfo_t*, void*) { g_user_hits = g_user_hits + 1; }
void user_plain_handler(int) { g_user_hits = g_user_hits + 1; }

using VoidFn = void (*)();

// `int3; ret` in fresh code memory: a trap at an address the engine never locked.
VoidFn make_raw_int3(CodeBlock* block) {
  if (CodeBlock::allocate(4096, nullptr, block) != Status::ok) _exit(20);
  std::memset(block->data(), x86::kInvalid64, block->size());
  block->data()[0] = x86::kInt3;
  block->data()[1] = x86::kRet;
  return reinterpret_cast<VoidFn>(block->data());
}

enum class Prev { siginfo, plain, ignore, dfl };

[[noreturn]] void chain_child(Prev prev) {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  switch (prev) {
    case Prev::siginfo:
      sa.sa_sigaction = user_siginfo_handler;
      sa.sa_flags = SA_SIGINFO;
      break;
    case Prev::plain:
      sa.sa_handler = user_plain_handler;
      break;
    case Prev::ignore:
      sa.sa_handler = SIG_IGN;
      break;
    case Prev::dfl: {
      sa.sa_handler = SIG_DFL;
      const rlimit no_core{0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      break;
    }
  }
  if (sigaction(SIGTRAP, &sa, nullptr) != 0) _exit(10);
  if (trap::installed()) _exit(11);  // must be a fresh process
  if (trap::install() != Status::ok || !trap::installed()) _exit(12);
  if (trap::install() != Status::ok) _exit(13);  // idempotent
  CodeBlock block;
  VoidFn fn = make_raw_int3(&block);
  fn();  // SIG_DFL: the process dies here with SIGTRAP
  const int expected_hits = (prev == Prev::siginfo || prev == Prev::plain) ? 1 : 0;
  if (g_user_hits != expected_hits) _exit(14);
  if (trap::stats().chained != 1) _exit(15);
  if (trap::stats().locked_hits != 0 || trap::stats().late_hits != 0) _exit(16);
  // A SIGTRAP sent by a process (si_code <= 0) is never the engine's either.
  raise(SIGTRAP);
  if (g_user_hits != 2 * expected_hits) _exit(17);
  if (trap::stats().chained != 2) _exit(18);
  _exit(0);
}

class TrapDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(TrapDeathTest, ForeignInt3ChainsToSiginfoHandler) {
  EXPECT_EXIT(chain_child(Prev::siginfo), ::testing::ExitedWithCode(0), "");
}

TEST_F(TrapDeathTest, ForeignInt3ChainsToPlainHandler) {
  EXPECT_EXIT(chain_child(Prev::plain), ::testing::ExitedWithCode(0), "");
}

TEST_F(TrapDeathTest, ForeignInt3WithIgnoredSigtrapContinues) {
  EXPECT_EXIT(chain_child(Prev::ignore), ::testing::ExitedWithCode(0), "");
}

TEST_F(TrapDeathTest, ForeignInt3WithDefaultActionKillsTheProcess) {
  EXPECT_EXIT(chain_child(Prev::dfl), ::testing::KilledBySignal(SIGTRAP), "");
}

// An int3 that a completed patch itself wrote at a former site (bytes CC C3 ..) is not the
// engine's lock: it chains instead of re-executing forever.
[[noreturn]] void former_site_child() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = user_siginfo_handler;
  sa.sa_flags = SA_SIGINFO;
  if (sigaction(SIGTRAP, &sa, nullptr) != 0) _exit(10);
  test::TestSite ts(2);
  WordPatcher wp(WaitPolicy::Ticks(1000));
  if (wp.init_status() != Status::ok) _exit(11);
  const std::uint8_t bytes[5] = {x86::kInt3, x86::kRet, x86::kInvalid64, x86::kInvalid64,
                                 x86::kInvalid64};
  if (wp.patch(ts.site(), bytes) != Status::ok) _exit(12);
  if (detail::site_state(reinterpret_cast<std::uintptr_t>(ts.site())) !=
      detail::SiteState::unlocked)
    _exit(13);
  reinterpret_cast<VoidFn>(ts.site())();
  if (g_user_hits != 1 || trap::stats().chained != 1) _exit(14);
  _exit(0);
}

TEST_F(TrapDeathTest, Int3WrittenAtFormerSiteIsChained) {
  EXPECT_EXIT(former_site_child(), ::testing::ExitedWithCode(0), "");
}

// An executor reaching a site while a patcher holds the int3 lock parks in the handler
// and, after the unlock, runs the NEW instruction.
TEST(Trap, ExecutorAtLockedSiteWaitsAndContinues) {
  for (unsigned split = 1; split <= 4; ++split) {
    test::TestSite ts(split, testsupport::kNop5Prefixed, /*start_with_b=*/true);
    WordPatcher wp(WaitPolicy::Ticks(1000));
    ASSERT_EQ(wp.init_status(), Status::ok);
    ASSERT_EQ(ts.entry()(), 0);  // the NOP state runs before the patch
    PatchHandle h;
    ASSERT_EQ(wp.start_patch(ts.site(), ts.state_a(), &h), Status::ok);
    ASSERT_EQ(h.phase, 1);
    const trap::Stats before = trap::stats();
    const std::uint64_t waiters_before = detail::trap_waiters();

    std::atomic<int> result{-1};
    std::thread exec([&] { result.store(ts.entry()()); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (detail::trap_waiters() == waiters_before &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    ASSERT_GT(detail::trap_waiters(), waiters_before) << "executor never reached the site";
    EXPECT_EQ(result.load(), -1) << "executor passed a locked site";

    ASSERT_EQ(wp.finish_patch(&h), Status::ok);
    exec.join();
    EXPECT_EQ(result.load(), 1) << "after the unlock the call must run";
    const trap::Stats after = trap::stats();
    EXPECT_EQ(after.locked_hits, before.locked_hits + 1);
    EXPECT_EQ(after.chained, before.chained);
  }
}

// A patcher that re-locks a site right after unlocking it must still release the executor
// parked on the first lock (it re-executes, and may park again on the second): waiting
// for "unlocked" instead of for the release of the lock it trapped on could miss the
// ~100 ns unlocked window forever.
TEST(Trap, WaiterIsReleasedEvenIfTheSiteIsRelockedAtOnce) {
  test::TestSite ts(3, testsupport::kNop5Prefixed, /*start_with_b=*/true);
  WordPatcher wp(WaitPolicy::Ticks(1000));
  PatchHandle h1, h2;
  ASSERT_EQ(wp.start_patch(ts.site(), ts.state_a(), &h1), Status::ok);
  const std::uint64_t waiters_before = detail::trap_waiters();
  std::atomic<int> result{-1};
  std::thread exec([&] { result.store(ts.entry()()); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (detail::trap_waiters() == waiters_before && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_GT(detail::trap_waiters(), waiters_before);
  const std::uint64_t hits_before = trap::stats().locked_hits;

  ASSERT_EQ(wp.finish_patch(&h1), Status::ok);
  ASSERT_EQ(wp.start_patch(ts.site(), ts.state_b(), &h2), Status::ok);  // back to back
  while (trap::stats().locked_hits == hits_before && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_GT(trap::stats().locked_hits, hits_before) << "executor still parked on the first lock";

  ASSERT_EQ(wp.finish_patch(&h2), Status::ok);
  exec.join();
  EXPECT_TRUE(result.load() == 0 || result.load() == 1) << result.load();
}

TEST(Trap, StatusNamesAreDistinct) {
  // Every value of the enum's underlying type: each declared status (ok .. parse_error,
  // and any added later) has its own name, and only undeclared values read "unknown".
  std::set<std::string> names;
  for (unsigned v = 0; v <= 0xFF; ++v) {
    const std::string name = to_string(static_cast<Status>(v));
    if (v <= static_cast<unsigned>(Status::parse_error)) {
      EXPECT_NE(name, "unknown") << "status " << v << " has no name";
    }
    if (name != "unknown") {
      EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    }
  }
  EXPECT_GE(names.size(), static_cast<std::size_t>(Status::parse_error) + 1);
  EXPECT_STREQ(to_string(Status::ok), "ok");
  EXPECT_STREQ(to_string(Status::parse_error), "parse_error");
}

}  // namespace
}  // namespace crossmod
