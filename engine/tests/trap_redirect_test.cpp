// Redirect sites (trap.hpp): an int3 registered with redirect_set() sends the thread to
// the registered target; a cleared site whose byte is restored re-executes in place; an
// unregistered int3 is still chained. Deterministic, single-threaded.
#include <gtest/gtest.h>

#include <cstring>

#include "crossmod/code_memory.hpp"
#include "crossmod/testsupport/site_code.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"

namespace crossmod {
namespace {

using IntFn = int (*)();

// block: [0] int3 ; mov eax,1 ; ret      [32] mov eax,2 ; ret
struct Code {
  CodeBlock block;
  std::uint8_t* site = nullptr;
  std::uint8_t* target = nullptr;
  Code() {
    EXPECT_EQ(CodeBlock::allocate(4096, nullptr, &block), Status::ok);
    std::memset(block.data(), x86::kInvalid64, block.size());
    site = block.data();
    target = block.data() + 32;
    const std::uint8_t one[6] = {testsupport::kMovEaxImm32, 1, 0, 0, 0, x86::kRet};
    const std::uint8_t two[6] = {testsupport::kMovEaxImm32, 2, 0, 0, 0, x86::kRet};
    std::memcpy(site + 1, one, sizeof one);
    std::memcpy(target, two, sizeof two);
    site[0] = x86::kInt3;
  }
  IntFn fn() const { return reinterpret_cast<IntFn>(site); }
};

TEST(TrapRedirect, RedirectsToTargetAndCounts) {
  ASSERT_EQ(trap::install(), Status::ok);
  Code c;
  const auto from = reinterpret_cast<std::uintptr_t>(c.site);
  ASSERT_EQ(trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)), Status::ok);
  EXPECT_EQ(trap::redirect_target(from), reinterpret_cast<std::uintptr_t>(c.target));
  const auto before = trap::redirect_stats();
  EXPECT_EQ(c.fn()(), 2);
  EXPECT_EQ(c.fn()(), 2);
  EXPECT_EQ(trap::redirect_stats().redirected, before.redirected + 2);
}

TEST(TrapRedirect, RetargetTakesEffect) {
  ASSERT_EQ(trap::install(), Status::ok);
  Code c;
  const auto from = reinterpret_cast<std::uintptr_t>(c.site);
  ASSERT_EQ(trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)), Status::ok);
  EXPECT_EQ(c.fn()(), 2);
  // Retarget to the `mov eax,1; ret` right after the int3.
  ASSERT_EQ(trap::redirect_set(from, from + 1), Status::ok);
  EXPECT_EQ(c.fn()(), 1);
}

// After clear the slot keeps its address (clear again is ok, not not_found), and once the
// original byte is back the code runs without trapping. (The re-execute path itself needs a
// trap fetched before the restore; the tracepoint stress test exercises it.)
TEST(TrapRedirect, ClearKeepsSlotAndRestoredCodeRuns) {
  ASSERT_EQ(trap::install(), Status::ok);
  Code c;
  const auto from = reinterpret_cast<std::uintptr_t>(c.site);
  ASSERT_EQ(trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)), Status::ok);
  ASSERT_EQ(trap::redirect_clear(from), Status::ok);
  EXPECT_EQ(trap::redirect_target(from), 0u);
  EXPECT_EQ(trap::redirect_clear(from), Status::ok);
  const auto before = trap::redirect_stats();
  c.site[0] = 0x90;  // NOP: the int3 is gone
  EXPECT_EQ(c.fn()(), 1);
  EXPECT_EQ(trap::redirect_stats().redirected, before.redirected);
}

TEST(TrapRedirect, RejectsNullAndUnknown) {
  EXPECT_EQ(trap::redirect_set(0, 1), Status::bad_address);
  EXPECT_EQ(trap::redirect_set(1, 0), Status::bad_address);
  EXPECT_EQ(trap::redirect_clear(0x12345), Status::not_found);
  EXPECT_EQ(trap::redirect_target(0x12345), 0u);
}

// A cleared site that still holds int3 is not ours any more: chained to the previous
// disposition (SIG_DFL here, so the child dies of SIGTRAP).
TEST(TrapRedirectDeathTest, ClearedSiteStillInt3IsChained) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (trap::install() != Status::ok) _exit(3);
        Code c;
        const auto from = reinterpret_cast<std::uintptr_t>(c.site);
        if (trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)) != Status::ok)
          _exit(4);
        if (c.fn()() != 2) _exit(5);
        if (trap::redirect_clear(from) != Status::ok) _exit(6);
        c.fn()();
        _exit(0);
      },
      testing::KilledBySignal(SIGTRAP), "");
}

}  // namespace
}  // namespace crossmod
