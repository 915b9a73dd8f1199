// The tracepoint provider on functions built without instrumentation flags
// (tracepoint_workload.cpp): attach by pattern, probes start off and leave the code
// untouched, exact counts from 8 threads with every probe on, toggles while 8 threads run,
// exit probes with the entry TSC (recursion order, a tail call between two traced
// functions, longjmp out of traced frames), trap mode, and the refusal list.
// Each test attaches for itself (gtest_discover_tests runs one test per process; in one
// process the second attach finds the probes already made).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <csetjmp>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"
#include "tracepoint_workload.hpp"

namespace cp = crossmod::probes;

namespace {

constexpr std::size_t kIds = 4096;
std::atomic<std::uint64_t> g_calls[kIds];
std::atomic<std::uint64_t> g_zero_tsc[kIds];
std::atomic<std::uint64_t> g_ticks[kIds];
bool g_is_exit[kIds];

void count_fn(cp::ProbeId id, std::uint64_t tsc) {
  if (id >= kIds) return;
  g_calls[id].fetch_add(1, std::memory_order_relaxed);
  if (!g_is_exit[id]) return;
  if (tsc == 0)
    g_zero_tsc[id].fetch_add(1, std::memory_order_relaxed);
  else
    g_ticks[id].fetch_add(crossmod::x86::rdtsc() - tsc, std::memory_order_relaxed);
}

// Single-threaded recorder of exit TSCs (recursion order).
std::uint64_t g_exit_tsc[256];
std::atomic<unsigned> g_exit_n{0};
void record_exit(cp::ProbeId, std::uint64_t tsc) {
  const unsigned i = g_exit_n.fetch_add(1, std::memory_order_relaxed);
  if (i < 256) g_exit_tsc[i] = tsc;
}

struct Ids {
  cp::ProbeId entry = cp::kNoProbe, exit = cp::kNoProbe;
};

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// The tracepoint probes of the function called `name` (kNoProbe where there is none).
Ids find_ids(const char* name) {
  Ids ids;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) != cp::Status::ok || pi.provider != cp::Provider::tracepoint) continue;
    if (id < kIds) g_is_exit[id] = pi.kind == cp::Kind::exit;
    if (std::strcmp(pi.name, name) != 0) continue;
    (pi.kind == cp::Kind::entry ? ids.entry : ids.exit) = id;
  }
  return ids;
}

// Attaches "tpw_*" in this executable (idempotent) and returns the probes of `name`.
Ids attach_and_find(const char* name) {
  static const std::string exe = self_exe();
  std::size_t made = 0, refused = 0;
  EXPECT_EQ(cp::attach_tracepoints("tpw_*", exe.c_str(), &made, &refused), cp::Status::ok);
  EXPECT_EQ(refused, 0u);
  return find_ids(name);
}

std::uint64_t calls(cp::ProbeId id) { return g_calls[id].load(); }

// exclude_from_tracepoints: later attaches leave the object alone (its code untouched, no
// probe), whatever the patterns say; addresses outside every object are refused.
TEST(TracepointProvider, ExcludedObjectIsLeftAlone) {
  std::uint8_t before[8];
  std::memcpy(before, reinterpret_cast<const void*>(&tpw_work), sizeof before);
  int on_stack = 0;
  EXPECT_EQ(cp::exclude_from_tracepoints(nullptr), cp::Status::bad_argument);
  EXPECT_EQ(cp::exclude_from_tracepoints(&on_stack), cp::Status::bad_argument);
  ASSERT_EQ(cp::exclude_from_tracepoints(reinterpret_cast<const void*>(&tpw_work)), cp::Status::ok);
  ASSERT_EQ(cp::exclude_from_tracepoints(reinterpret_cast<const void*>(&tpw_leaf)), cp::Status::ok);  // twice: fine
  std::size_t made = 1, refused = 1;
  EXPECT_EQ(cp::attach_tracepoints("tpw_*", self_exe().c_str(), &made, &refused), cp::Status::ok);
  EXPECT_EQ(made, 0u);
  EXPECT_EQ(refused, 0u);
  EXPECT_EQ(cp::attach_tracepoints("tpw_*", nullptr, &made, &refused), cp::Status::ok);
  EXPECT_EQ(made, 0u);
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(id, &pi), cp::Status::ok);
    EXPECT_NE(pi.provider, cp::Provider::tracepoint) << pi.name;
  }
  EXPECT_EQ(std::memcmp(before, reinterpret_cast<const void*>(&tpw_work), sizeof before), 0);
}

// attach_tracepoint_at: the one function at the address gets its two probes (off), no
// other; an address where no function symbol starts is refused, and so is this library.
TEST(TracepointProvider, AttachAtMakesTheProbesOfOneFunction) {
  int on_stack = 0;
  std::size_t made = 7, refused = 7;
  EXPECT_EQ(cp::attach_tracepoint_at(nullptr, &made, &refused), cp::Status::bad_argument);
  EXPECT_EQ(made, 0u);
  EXPECT_EQ(refused, 0u);
  EXPECT_EQ(cp::attach_tracepoint_at(&on_stack), cp::Status::bad_argument);
  EXPECT_EQ(cp::attach_tracepoint_at(reinterpret_cast<const char*>(&tpw_leaf) + 1), cp::Status::bad_argument);
  EXPECT_EQ(cp::attach_tracepoint_at(reinterpret_cast<const void*>(&cp::activate)), cp::Status::bad_argument);
  EXPECT_EQ(cp::count(), 0u);
  ASSERT_EQ(crossmod_probes_attach_tracepoint_at(reinterpret_cast<const void*>(&tpw_leaf), &made, &refused),
            CROSSMOD_PROBE_OK);
  EXPECT_EQ(made, 2u);
  EXPECT_EQ(refused, 0u);
  ASSERT_EQ(cp::count(), 2u);
  cp::ProbeId entry = cp::kNoProbe, exit = cp::kNoProbe;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(id, &pi), cp::Status::ok);
    EXPECT_EQ(pi.provider, cp::Provider::tracepoint);
    EXPECT_EQ(pi.function, reinterpret_cast<std::uintptr_t>(&tpw_leaf));
    EXPECT_STREQ(pi.name, "tpw_leaf");
    EXPECT_FALSE(pi.active);
    (pi.kind == cp::Kind::entry ? entry : exit) = id;
    if (id < kIds) g_is_exit[id] = pi.kind == cp::Kind::exit;
  }
  ASSERT_NE(entry, cp::kNoProbe);
  ASSERT_NE(exit, cp::kNoProbe);
  EXPECT_EQ(cp::attach_tracepoint_at(reinterpret_cast<const void*>(&tpw_leaf), &made), cp::Status::ok);
  EXPECT_EQ(made, 0u);  // already probed
  ASSERT_EQ(cp::activate(exit, count_fn), cp::Status::ok);
  ASSERT_EQ(cp::activate(entry, count_fn), cp::Status::ok);
  for (std::uint64_t i = 0; i < 100; ++i) ASSERT_EQ(tpw_leaf(i), i + 1);
  EXPECT_EQ(tpw_work(4), 13u);  // not traced: counts nothing
  EXPECT_EQ(calls(entry), 100u);
  EXPECT_EQ(calls(exit), 100u);
}

TEST(TracepointProvider, AttachMakesOffProbesAndLeavesCodeAlone) {
  std::uint8_t before[8];
  std::memcpy(before, reinterpret_cast<const void*>(&tpw_work), sizeof before);
  const std::string exe = self_exe();
  std::size_t made = 0, refused = 0;
  ASSERT_EQ(cp::attach_tracepoints("tpw_*", exe.c_str(), &made, &refused), cp::Status::ok);
  // tpw_work, tpw_recurse, tpw_jump_down, tpw_tail_a, tpw_tail_b, tpw_leaf, tpw_ipa_caller
  // with entry and exit probes; tpw_fake_setjmp with an entry probe only.
  EXPECT_EQ(made, 15u);
  EXPECT_EQ(refused, 0u);
  std::size_t again = 1;
  EXPECT_EQ(cp::attach_tracepoints("tpw_*", exe.c_str(), &again, nullptr), cp::Status::ok);
  EXPECT_EQ(again, 0u);
  EXPECT_EQ(cp::attach_tracepoints(nullptr, nullptr), cp::Status::bad_argument);

  const Ids w = attach_and_find("tpw_work");
  ASSERT_NE(w.entry, cp::kNoProbe);
  ASSERT_NE(w.exit, cp::kNoProbe);
  cp::ProbeInfo pi;
  ASSERT_EQ(cp::info(w.entry, &pi), cp::Status::ok);
  EXPECT_EQ(pi.function, reinterpret_cast<std::uintptr_t>(&tpw_work));
  EXPECT_EQ(pi.site, pi.function);
  EXPECT_FALSE(pi.active);
  EXPECT_EQ(std::string(pi.object), exe);
  EXPECT_FALSE(cp::tracepoint_trap_mode(w.entry));
  EXPECT_EQ(std::memcmp(before, reinterpret_cast<const void*>(&tpw_work), sizeof before), 0)
      << "attach wrote code";
  EXPECT_EQ(tpw_work(4), 13u);

  // The exit probe of a function that reads its return address is refused, with a reason.
  const Ids fake = attach_and_find("tpw_fake_setjmp");
  EXPECT_NE(fake.entry, cp::kNoProbe);
  EXPECT_EQ(fake.exit, cp::kNoProbe);
  std::vector<cp::TracepointRefusal> r(cp::tracepoint_refusals(nullptr, 0));
  ASSERT_EQ(cp::tracepoint_refusals(r.data(), r.size()), r.size());
  bool listed = false;
  for (const auto& x : r)
    listed = listed || (std::strcmp(x.name, "tpw_fake_setjmp") == 0 && x.entry_probe);
  EXPECT_TRUE(listed);
}

// dlopen, dlmopen, dlsym and dlvsym find their caller by its return address (RUNPATH and
// namespace; RTLD_NEXT): an exit probe would make the caller the exit stub in the probes
// library. They get an entry probe only, and dlsym(RTLD_NEXT) answers the same with it on.
// (With the exit probe, a preloaded dlopen interposer's dlsym(RTLD_NEXT, "dlopen") found
// the interposer itself and recursed.)
TEST(TracepointProvider, CallerSensitiveDlFunctionsHaveNoExitProbe) {
  void* const before = dlsym(RTLD_NEXT, "malloc");
  ASSERT_NE(before, nullptr);
  std::size_t made = 0;
  ASSERT_EQ(cp::attach_tracepoints("dl[ovms]*", "*libc.so*", &made, nullptr), cp::Status::ok);
  int found = 0;
  cp::ProbeId dlsym_entry = cp::kNoProbe;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) != cp::Status::ok || pi.provider != cp::Provider::tracepoint) continue;
    for (const char* n : {"dlopen", "dlmopen", "dlsym", "dlvsym"}) {
      if (std::strcmp(pi.name, n) != 0) continue;
      EXPECT_EQ(pi.kind, cp::Kind::entry) << n << " has an exit probe";
      if (pi.kind == cp::Kind::entry) ++found;
      if (std::strcmp(n, "dlsym") == 0 && pi.kind == cp::Kind::entry) dlsym_entry = id;
    }
  }
  EXPECT_EQ(found, 4) << "made " << made;
  ASSERT_NE(dlsym_entry, cp::kNoProbe);
  ASSERT_LT(dlsym_entry, kIds);
  ASSERT_EQ(cp::activate_matching("dlsym", count_fn, nullptr), cp::Status::ok);
  const std::uint64_t c0 = calls(dlsym_entry);
  EXPECT_EQ(dlsym(RTLD_NEXT, "malloc"), before);
  EXPECT_EQ(calls(dlsym_entry), c0 + 1);
  ASSERT_EQ(cp::deactivate_matching("dlsym", nullptr), cp::Status::ok);
}

// The other names whose return address must stay where it is, matched by substring
// (setjmp, vfork, getcontext, swapcontext), leading part (__libc_start_main) or whole
// (__backtrace): an entry probe only. Names that merely resemble them keep their exit
// probe. (vfork and backtrace are aliases at the same addresses: one probe each.)
TEST(TracepointProvider, ReturnAddressReadersHaveNoExitProbe) {
  const char* const readers[] = {"_setjmp",     "__sigsetjmp",       "__vfork",    "getcontext",
                                 "swapcontext", "__libc_start_main", "__backtrace"};
  const char* const others[] = {"dlerror", "_IO_vfprintf"};
  for (const char* n : readers) ASSERT_EQ(cp::attach_tracepoints(n, "*libc.so*", nullptr, nullptr), cp::Status::ok) << n;
  for (const char* n : others) ASSERT_EQ(cp::attach_tracepoints(n, "*libc.so*", nullptr, nullptr), cp::Status::ok) << n;
  for (const char* n : readers) {
    const Ids ids = find_ids(n);
    ASSERT_NE(ids.entry, cp::kNoProbe) << n;
    EXPECT_EQ(ids.exit, cp::kNoProbe) << n << " has an exit probe";
  }
  for (const char* n : others) {
    const Ids ids = find_ids(n);
    ASSERT_NE(ids.entry, cp::kNoProbe) << n;
    EXPECT_NE(ids.exit, cp::kNoProbe) << n << " lost its exit probe";
  }
}

TEST(TracepointProvider, EightThreadsExactCountsAndDurations) {
  const Ids w = attach_and_find("tpw_work");
  ASSERT_NE(w.exit, cp::kNoProbe);
  const std::uint64_t e0 = calls(w.entry), x0 = calls(w.exit);
  std::size_t toggled = 0;
  ASSERT_EQ(cp::activate_matching("tpw_work", count_fn, &toggled), cp::Status::ok);
  EXPECT_EQ(toggled, 2u);
  EXPECT_EQ(*reinterpret_cast<const std::uint8_t*>(&tpw_work), 0xE9)
      << "activation installs the jump";
  constexpr unsigned kThreads = 8, kCalls = 20000;
  std::atomic<std::uint64_t> wrong{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < kThreads; ++t)
    ts.emplace_back([&wrong, t] {
      for (std::uint64_t i = 0; i < kCalls; ++i)
        if (tpw_work(i + t) != 3 * (i + t) + 1) wrong.fetch_add(1);
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_EQ(calls(w.entry) - e0, kThreads * kCalls);
  EXPECT_EQ(calls(w.exit) - x0, kThreads * kCalls);
  EXPECT_EQ(g_zero_tsc[w.exit].load(), 0u);
  EXPECT_GT(g_ticks[w.exit].load(), 0u);
  ASSERT_EQ(cp::deactivate_matching("tpw_work"), cp::Status::ok);
  const std::uint64_t e1 = calls(w.entry);
  EXPECT_EQ(tpw_work(1), 4u);
  EXPECT_EQ(calls(w.entry), e1);
}

TEST(TracepointProvider, ToggleWhileEightThreadsRun) {
  const Ids w = attach_and_find("tpw_work");
  ASSERT_NE(w.exit, cp::kNoProbe);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> wrong{0}, done{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < 8; ++t)
    ts.emplace_back([&] {
      std::uint64_t i = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        if (tpw_work(i) != 3 * i + 1) wrong.fetch_add(1);
        ++i;
      }
      done.fetch_add(i);
    });
  const std::uint64_t e0 = calls(w.entry);
  for (int k = 0; k < 2000; ++k) {
    ASSERT_EQ(cp::activate(w.entry, count_fn), cp::Status::ok);
    if (k % 2 == 0) {
      ASSERT_EQ(cp::activate(w.exit, count_fn), cp::Status::ok);
    }
    ASSERT_EQ(cp::deactivate(w.entry), cp::Status::ok);
    if (k % 3 == 0) {
      ASSERT_EQ(cp::deactivate(w.exit), cp::Status::ok);
    }
  }
  ASSERT_EQ(cp::deactivate(w.exit), cp::Status::ok);
  stop = true;
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_LE(calls(w.entry) - e0, done.load());
  // Off: nothing counted; on again: every call counted.
  const std::uint64_t e1 = calls(w.entry);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_EQ(tpw_work(i), 3 * i + 1);
  EXPECT_EQ(calls(w.entry), e1);
  ASSERT_EQ(cp::activate(w.entry, count_fn), cp::Status::ok);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_EQ(tpw_work(i), 3 * i + 1);
  EXPECT_EQ(calls(w.entry), e1 + 100);
  ASSERT_EQ(cp::deactivate(w.entry), cp::Status::ok);
}

TEST(TracepointProvider, RecursionExitsInnermostFirst) {
  const Ids r = attach_and_find("tpw_recurse");
  ASSERT_NE(r.exit, cp::kNoProbe);
  ASSERT_EQ(cp::activate(r.entry, count_fn), cp::Status::ok);
  ASSERT_EQ(cp::activate(r.exit, record_exit), cp::Status::ok);
  g_exit_n = 0;
  const std::uint64_t e0 = calls(r.entry);
  EXPECT_EQ(tpw_recurse(40), 820u);
  EXPECT_EQ(calls(r.entry) - e0, 41u);
  ASSERT_EQ(g_exit_n.load(), 41u);
  // Exits arrive innermost first; the innermost call entered last: entry TSCs decrease.
  for (unsigned i = 0; i < 41; ++i) EXPECT_NE(g_exit_tsc[i], 0u) << i;
  for (unsigned i = 1; i < 41; ++i) EXPECT_LT(g_exit_tsc[i], g_exit_tsc[i - 1]) << i;
  ASSERT_EQ(cp::deactivate(r.entry), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(r.exit), cp::Status::ok);
}

TEST(TracepointProvider, TailCallBetweenTracedFunctions) {
  const Ids a = attach_and_find("tpw_tail_a");
  const Ids b = attach_and_find("tpw_tail_b");
  ASSERT_NE(a.exit, cp::kNoProbe);
  ASSERT_NE(b.exit, cp::kNoProbe);
  const cp::ProbeId ids[] = {a.entry, a.exit, b.entry, b.exit};
  ASSERT_EQ(cp::activate_many(ids, 4, count_fn), cp::Status::ok);
  std::uint64_t before[4];
  for (int i = 0; i < 4; ++i) before[i] = calls(ids[i]);
  for (std::uint64_t x = 0; x < 1000; ++x) ASSERT_EQ(tpw_tail_a(x), 2 * (x + 1));
  for (std::uint64_t x = 0; x < 500; ++x) ASSERT_EQ(tpw_tail_b(x), 2 * x);
  EXPECT_EQ(calls(a.entry) - before[0], 1000u);
  EXPECT_EQ(calls(a.exit) - before[1], 1000u);
  EXPECT_EQ(calls(b.entry) - before[2], 1500u);
  EXPECT_EQ(calls(b.exit) - before[3], 1500u);
  EXPECT_EQ(g_zero_tsc[a.exit].load() + g_zero_tsc[b.exit].load(), 0u);
  ASSERT_EQ(cp::deactivate_many(ids, 4), cp::Status::ok);
}

TEST(TracepointProvider, LongjmpOutOfTracedFrames) {
  const Ids j = attach_and_find("tpw_jump_down");
  const Ids w = attach_and_find("tpw_work");
  const cp::ProbeId ids[] = {j.entry, j.exit, w.entry, w.exit};
  ASSERT_EQ(cp::activate_many(ids, 4, count_fn), cp::Status::ok);
  const std::uint64_t je = calls(j.entry), jx = calls(j.exit), wx = calls(w.exit);
  // 300 x 21 abandoned frames: far more than the 128-deep redirect stack holds, so the
  // exits of tpw_work are seen only if abandoned frames are dropped.
  for (int round = 0; round < 300; ++round) {
    std::jmp_buf env;
    if (setjmp(env) == 0) tpw_jump_down(20, &env);
    ASSERT_EQ(tpw_work(7), 22u);
  }
  EXPECT_EQ(calls(j.entry) - je, 300u * 21);
  EXPECT_EQ(calls(j.exit) - jx, 0u);
  EXPECT_EQ(calls(w.exit) - wx, 300u);
  EXPECT_EQ(g_zero_tsc[w.exit].load(), 0u);
  ASSERT_EQ(cp::deactivate_many(ids, 4), cp::Status::ok);
}

// Code nobody rebuilt may call a leaf with the stack unaligned and keep caller-saved
// registers across the call (GCC's IPA): the exit trampoline must cope with both.
TEST(TracepointProvider, ExitKeepsRegistersAndCopesWithUnalignedStack) {
  const Ids leaf = attach_and_find("tpw_leaf");
  ASSERT_NE(leaf.exit, cp::kNoProbe);
  const cp::ProbeId ids[] = {leaf.entry, leaf.exit};
  ASSERT_EQ(cp::activate_many(ids, 2, count_fn), cp::Status::ok);
  const std::uint64_t x0 = calls(leaf.exit);
  for (std::uint64_t x = 0; x < 1000; ++x) ASSERT_EQ(tpw_ipa_caller(x), 2 * x);
  EXPECT_EQ(calls(leaf.exit) - x0, 1000u);
  EXPECT_EQ(g_zero_tsc[leaf.exit].load(), 0u);
  ASSERT_EQ(cp::deactivate_many(ids, 2), cp::Status::ok);
}

TEST(TracepointProvider, TrapModeAndJumpOnlyRefusal) {
  const std::string exe = self_exe();
  std::size_t made = 0, refused = 0;
  cp::set_tracepoint_trap_fallback(false);
  ASSERT_EQ(cp::attach_tracepoints("tpx_short", exe.c_str(), &made, &refused), cp::Status::ok);
  EXPECT_EQ(made, 0u);
  EXPECT_EQ(refused, 1u);
  std::vector<cp::TracepointRefusal> r(cp::tracepoint_refusals(nullptr, 0));
  ASSERT_EQ(cp::tracepoint_refusals(r.data(), r.size()), r.size());
  ASSERT_FALSE(r.empty());
  EXPECT_STREQ(r.back().name, "tpx_short");
  EXPECT_STREQ(r.back().reason, "too_short");
  EXPECT_FALSE(r.back().entry_probe);
  // The C form lists the same.
  std::vector<crossmod_tracepoint_refusal> c(r.size());
  ASSERT_EQ(crossmod_probes_tracepoint_refusals(c.data(), c.size()), r.size());
  EXPECT_STREQ(c.back().name, "tpx_short");
  EXPECT_STREQ(c.back().reason, "too_short");
  EXPECT_EQ(c.back().entry_probe, 0);

  cp::set_tracepoint_trap_fallback(true);
  ASSERT_EQ(cp::attach_tracepoints("tpx_short", exe.c_str(), &made, &refused), cp::Status::ok);
  EXPECT_EQ(made, 2u);
  EXPECT_EQ(refused, 0u);
  cp::ProbeId entry = cp::kNoProbe, exit = cp::kNoProbe;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(id, &pi), cp::Status::ok);
    if (std::strcmp(pi.name, "tpx_short") != 0) continue;
    (pi.kind == cp::Kind::entry ? entry : exit) = id;
    if (id < kIds) g_is_exit[id] = pi.kind == cp::Kind::exit;
  }
  ASSERT_NE(exit, cp::kNoProbe);
  EXPECT_TRUE(cp::tracepoint_trap_mode(entry));
  EXPECT_EQ(crossmod_probe_tracepoint_trap_mode(exit), 1);
  ASSERT_EQ(cp::activate(entry, count_fn), cp::Status::ok);
  ASSERT_EQ(cp::activate(exit, count_fn), cp::Status::ok);
  const std::uint64_t e0 = calls(entry), x0 = calls(exit);
  for (std::uint64_t x = 0; x < 200; ++x) ASSERT_EQ(tpx_short(x), x + 1);
  EXPECT_EQ(calls(entry) - e0, 200u);
  EXPECT_EQ(calls(exit) - x0, 200u);
  EXPECT_EQ(g_zero_tsc[exit].load(), 0u);
  ASSERT_EQ(cp::deactivate(entry), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(exit), cp::Status::ok);
  for (std::uint64_t x = 0; x < 10; ++x) ASSERT_EQ(tpx_short(x), x + 1);
  EXPECT_EQ(calls(entry) - e0, 200u);
  // Off, the int3 still traps every call: retract_many takes it out (one byte), and the
  // next activation puts it back.
  const auto first_byte = [] { return *reinterpret_cast<const volatile std::uint8_t*>(&tpx_short); };
  EXPECT_EQ(first_byte(), 0xCC);
  const cp::ProbeId both[] = {entry, exit};
  std::size_t removed = 0;
  ASSERT_EQ(cp::retract_many(both, 2, &removed), cp::Status::ok);
  EXPECT_EQ(removed, 1u);
  EXPECT_NE(first_byte(), 0xCC);
  for (std::uint64_t x = 0; x < 10; ++x) ASSERT_EQ(tpx_short(x), x + 1);
  ASSERT_EQ(cp::activate(entry, count_fn), cp::Status::ok);
  EXPECT_EQ(first_byte(), 0xCC);
  ASSERT_EQ(tpx_short(5), 6u);
  EXPECT_EQ(calls(entry) - e0, 201u);
  ASSERT_EQ(cp::deactivate(entry), cp::Status::ok);
}

// A function too short for the jump gets it over the alignment fill after it, through
// the provider as through the tracepoint layer: jump-only, both probes, every call seen.
TEST(TracepointProvider, ShortFunctionJumpsOverItsPadding) {
  const std::string exe = self_exe();
  std::size_t made = 0, refused = 0;
  cp::set_tracepoint_trap_fallback(false);
  ASSERT_EQ(cp::attach_tracepoints("tpx_padded", exe.c_str(), &made, &refused), cp::Status::ok);
  EXPECT_EQ(made, 2u);
  EXPECT_EQ(refused, 0u);
  const auto [entry, exit] = find_ids("tpx_padded");
  ASSERT_NE(entry, cp::kNoProbe);
  ASSERT_NE(exit, cp::kNoProbe);
  EXPECT_FALSE(cp::tracepoint_trap_mode(entry));
  ASSERT_EQ(cp::activate(exit, count_fn), cp::Status::ok);
  ASSERT_EQ(cp::activate(entry, count_fn), cp::Status::ok);
  const std::uint8_t b0 = *reinterpret_cast<const volatile std::uint8_t*>(&tpx_padded);
  EXPECT_TRUE(b0 == 0xE9 || b0 == 0x2E) << int{b0};  // the jump (maybe prefixed), no int3
  const std::uint64_t e0 = calls(entry), x0 = calls(exit);
  for (std::uint64_t x = 0; x < 200; ++x) ASSERT_EQ(tpx_padded(x), x + 1);
  EXPECT_EQ(calls(entry) - e0, 200u);
  EXPECT_EQ(calls(exit) - x0, 200u);
  ASSERT_EQ(cp::deactivate(entry), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(exit), cp::Status::ok);
  for (std::uint64_t x = 0; x < 10; ++x) ASSERT_EQ(tpx_padded(x), x + 1);
  EXPECT_EQ(calls(entry) - e0, 200u);
  EXPECT_EQ(tpx_short_next(1), 3u);
}

}  // namespace

// retract_many / install_many: an off site gets its original bytes back (retract), only
// when every probe of it is off; activation after a retract re-installs it; install_many
// installs with the probes still off. Four threads call the function throughout: every
// result stays right, and the probes count exactly the calls made while they were on.
TEST(TracepointProvider, RetractRestoresTheCodeAndActivationReinstalls) {
  const Ids w = attach_and_find("tpw_work");
  ASSERT_NE(w.exit, cp::kNoProbe);
  const cp::ProbeId both[] = {w.entry, w.exit};
  // Earlier tests of this process may have installed it: off and retracted first, so that
  // the bytes read are the function's own.
  ASSERT_EQ(cp::deactivate_many(both, 2), cp::Status::ok);
  ASSERT_EQ(cp::retract_many(both, 2), cp::Status::ok);
  std::uint8_t original[5];
  std::memcpy(original, reinterpret_cast<const void*>(&tpw_work), sizeof original);
  ASSERT_NE(original[0], 0xE9);
  const auto first_byte = [] { return *reinterpret_cast<const volatile std::uint8_t*>(&tpw_work); };

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> wrong{0}, made{0};
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (std::uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        if (tpw_work(i + t) != 3 * (i + t) + 1) wrong.fetch_add(1);
        made.fetch_add(1, std::memory_order_relaxed);
      }
    });
  // The rounds take a few milliseconds: on a loaded machine (ctest -j2 on two CPUs) the
  // callers might not have run yet by their end. Calls are under way before they start.
  while (made.load(std::memory_order_relaxed) < 4) std::this_thread::yield();
  std::size_t removed = 9;
  for (int round = 0; round < 20; ++round) {
    ASSERT_EQ(cp::activate_many(both, 2, count_fn), cp::Status::ok);
    EXPECT_EQ(first_byte(), 0xE9);
    // A site with a probe on is left alone.
    ASSERT_EQ(cp::retract_many(both, 2, &removed), cp::Status::ok);
    EXPECT_EQ(removed, 0u);
    EXPECT_EQ(first_byte(), 0xE9);
    ASSERT_EQ(cp::deactivate(w.entry), cp::Status::ok);
    ASSERT_EQ(cp::retract_many(both, 2, &removed), cp::Status::ok);
    EXPECT_EQ(removed, 0u) << "the exit probe is still on";
    ASSERT_EQ(cp::deactivate(w.exit), cp::Status::ok);
    ASSERT_EQ(cp::retract_many(both, 2, &removed), cp::Status::ok);
    EXPECT_EQ(removed, 1u);
    EXPECT_EQ(std::memcmp(original, reinterpret_cast<const void*>(&tpw_work), sizeof original), 0)
        << "retract did not put the original bytes back";
    ASSERT_EQ(cp::retract_many(both, 2, &removed), cp::Status::ok);
    EXPECT_EQ(removed, 0u) << "nothing left to remove";
    if (round % 2 == 0) {
      ASSERT_EQ(cp::install_many(both, 2), cp::Status::ok);
      EXPECT_EQ(first_byte(), 0xE9) << "install_many did not install";
    }
  }
  ASSERT_EQ(cp::activate_many(both, 2, count_fn), cp::Status::ok);
  const std::uint64_t e0 = calls(w.entry), x0 = calls(w.exit);
  ASSERT_EQ(cp::deactivate_many(both, 2), cp::Status::ok);
  const std::uint64_t e1 = calls(w.entry), x1 = calls(w.exit);
  stop.store(true);
  for (auto& t : ts) t.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(made.load(), 0u);
  // Once off, no new hit: at most the one each thread had in flight when it returned.
  EXPECT_LE(calls(w.entry) - e1, 4u);
  EXPECT_LE(calls(w.exit) - x1, 4u);
  EXPECT_GE(e1, e0);
  EXPECT_GE(x1, x0);
  ASSERT_EQ(cp::retract_many(both, 2, &removed), cp::Status::ok);
  EXPECT_EQ(removed, 1u);
  EXPECT_EQ(cp::retract_many(nullptr, 1, nullptr), cp::Status::bad_argument);
  const auto bogus = static_cast<cp::ProbeId>(cp::count() + 5);
  EXPECT_EQ(cp::retract_many(&bogus, 1, nullptr), cp::Status::unknown_id);
  EXPECT_EQ(tpw_work(4), 13u);
}
