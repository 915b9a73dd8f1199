// The -fpatchable-function-entry provider on real compiler output
// (patchable_workload.cpp): sites found by the library constructor's scan, off at start,
// arguments preserved through the trampoline, batch by name.
#include <gtest/gtest.h>

#include <atomic>
#include <csetjmp>
#include <string>
#include <thread>

#include <pthread.h>

#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"
#include "test_support.hpp"
#include "workload.hpp"

namespace cp = crossmod::probes;

namespace {

cp::ProbeId probe_for(std::uintptr_t function, cp::Kind kind = cp::Kind::entry) {
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) == cp::Status::ok && pi.function == function &&
        pi.provider == cp::Provider::patchable && pi.kind == kind)
      return id;
  }
  return cp::kNoProbe;
}

std::atomic<std::uint64_t> g_quiet_hits{0};
void count_quiet(cp::ProbeId, std::uint64_t) { g_quiet_hits.fetch_add(1); }

TEST(Patchable, ScanFoundTheSledsBeforeMainAndTheyStartOff) {
  std::size_t fresh = 99;
  ASSERT_EQ(cp::scan_loaded_objects(&fresh), cp::Status::ok);
  EXPECT_EQ(fresh, 0u) << "the constructor's scan should have found everything";
  for (auto fn : {reinterpret_cast<std::uintptr_t>(&workload::pfe_leaf),
                  reinterpret_cast<std::uintptr_t>(&workload::pfe_other),
                  reinterpret_cast<std::uintptr_t>(&workload::pfe_many_args)}) {
    const cp::ProbeId id = probe_for(fn);
    ASSERT_NE(id, cp::kNoProbe);
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(id, &pi), cp::Status::ok);
    EXPECT_FALSE(pi.active);
    EXPECT_EQ(pi.site, fn);  // N=5, M=0: the sled is the function's first bytes
    EXPECT_EQ(pi.kind, cp::Kind::entry);
  }
  cp::ProbeInfo pi;
  ASSERT_EQ(cp::info(probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_leaf)), &pi),
            cp::Status::ok);
  EXPECT_EQ(std::string(pi.name), "workload::pfe_leaf(int, workload::Counters*)");
}

TEST(Patchable, ActivationCallsTheProbeOncePerCall) {
  const cp::ProbeId id = probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_leaf));
  ASSERT_NE(id, cp::kNoProbe);
  workload::Counters c;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(workload::pfe_leaf(i, &c), i * 5 + 2);
  EXPECT_EQ(c.seen, 0u);
  ASSERT_EQ(cp::activate(id, probetest::count_a), cp::Status::ok);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(workload::pfe_leaf(i, &c), i * 5 + 2);
  EXPECT_EQ(c.calls, 10u);
  EXPECT_EQ(c.seen, 5u);
  EXPECT_EQ(c.doubled, 0u);
  ASSERT_EQ(cp::deactivate(id), cp::Status::ok);
  (void)workload::pfe_leaf(1, &c);
  EXPECT_EQ(c.seen, 5u);
}

TEST(Patchable, TrampolinePreservesEveryArgumentRegister) {
  const cp::ProbeId id = probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_many_args));
  ASSERT_NE(id, cp::kNoProbe);
  const double expect = workload::pfe_many_args(1, 2, 3, 4, 5, 6, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
  ASSERT_EQ(cp::activate(id, [](cp::ProbeId, std::uint64_t) {
              // Clobber what a probe function may: caller-saved integer and vector registers.
              volatile double d = 1e300;
              d = d * 3.0;
              ++workload::fired();
            }),
            cp::Status::ok);
  workload::fired() = 0;
  EXPECT_EQ(workload::pfe_many_args(1, 2, 3, 4, 5, 6, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5), expect);
  EXPECT_EQ(workload::fired(), 1u);
  workload::fired() = 0;  // the workload functions read and clear it
  ASSERT_EQ(cp::deactivate(id), cp::Status::ok);
}

TEST(Patchable, BatchByNamePatternTogglesOnlyMatchingFunctions) {
  std::size_t n = 0;
  // Entry and exit probes of pfe_leaf and pfe_other.
  ASSERT_EQ(cp::activate_matching("workload::pfe_[lo]*", count_quiet, &n), cp::Status::ok);
  EXPECT_EQ(n, 4u);
  workload::Counters c;
  const std::uint64_t h0 = g_quiet_hits.load();
  (void)workload::pfe_leaf(1, &c);
  (void)workload::pfe_other(1, &c);
  (void)workload::pfe_call_through(0, [] {});
  EXPECT_EQ(g_quiet_hits.load() - h0, 4u);
  ASSERT_EQ(cp::deactivate_matching("workload::pfe_*", &n), cp::Status::ok);
  EXPECT_EQ(n, 12u);  // pfe_leaf, pfe_other, pfe_many_args, pfe_call_through, pfe_exc, pfe_cleanup_work
  (void)workload::pfe_leaf(1, &c);
  EXPECT_EQ(g_quiet_hits.load() - h0, 4u);
}

std::uint64_t g_exit_tsc = 0, g_exit_now = 0, g_exits = 0, g_exit_hook = 0;
void on_exit_probe(cp::ProbeId, std::uint64_t entry_tsc) {
  g_exit_tsc = entry_tsc;
  g_exit_hook = cp::exit_hook_tsc();
  g_exit_now = crossmod::x86::rdtsc();
  ++g_exits;
}

TEST(PatchableExit, ExitProbeGetsEntryTimestampAndKeepsReturnValues) {
  const auto fn = reinterpret_cast<std::uintptr_t>(&workload::pfe_many_args);
  const cp::ProbeId entry = probe_for(fn);
  const cp::ProbeId exit = probe_for(fn, cp::Kind::exit);
  ASSERT_NE(exit, cp::kNoProbe);
  const double expect = workload::pfe_many_args(1, 2, 3, 4, 5, 6, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5);
  ASSERT_EQ(cp::activate(exit, on_exit_probe), cp::Status::ok);
  cp::ProbeInfo pi;
  ASSERT_EQ(cp::info(entry, &pi), cp::Status::ok);
  EXPECT_FALSE(pi.active) << "the entry probe stays off; only the shared call is in place";
  g_exits = 0;
  const std::uint64_t t0 = crossmod::x86::rdtsc();
  EXPECT_EQ(workload::pfe_many_args(1, 2, 3, 4, 5, 6, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5), expect);
  EXPECT_EQ(g_exits, 1u);
  EXPECT_GE(g_exit_tsc, t0);
  EXPECT_GE(g_exit_now, g_exit_tsc);
  // The exit trampoline's own TSC lies between the entry's and the probe function's.
  EXPECT_GE(g_exit_hook, g_exit_tsc);
  EXPECT_LE(g_exit_hook, g_exit_now);
  EXPECT_EQ(cp::exit_hook_tsc(), 0u) << "only inside an exit probe function";
  workload::Counters c;
  const cp::ProbeId leaf_exit = probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_leaf), cp::Kind::exit);
  ASSERT_EQ(cp::activate(leaf_exit, on_exit_probe), cp::Status::ok);
  EXPECT_EQ(workload::pfe_leaf(7, &c), 37);
  EXPECT_EQ(g_exits, 2u);
  ASSERT_EQ(cp::deactivate(leaf_exit), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(exit), cp::Status::ok);
  EXPECT_EQ(workload::pfe_many_args(1, 2, 3, 4, 5, 6, 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5), expect);
  EXPECT_EQ(g_exits, 2u);
}

std::jmp_buf g_jump;
void jump_out() { std::longjmp(g_jump, 1); }

TEST(PatchableExit, LongjmpThroughRedirectedFramesIsSafe) {
  const cp::ProbeId exit =
      probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_call_through), cp::Kind::exit);
  ASSERT_NE(exit, cp::kNoProbe);
  ASSERT_EQ(cp::activate(exit, on_exit_probe), cp::Status::ok);
  // More abandoned frames than the shadow stack holds: each new entry drops the stale ones.
  for (int i = 0; i < 100; ++i) {
    volatile bool jumped = false;
    if (setjmp(g_jump) == 0) {
      (void)workload::pfe_call_through(5, jump_out);
    } else {
      jumped = true;
    }
    EXPECT_TRUE(jumped);
    g_exits = 0;
    EXPECT_EQ(workload::pfe_call_through(3, [] {}), 3);
    EXPECT_EQ(g_exits, 4u);
  }
  ASSERT_EQ(cp::deactivate(exit), cp::Status::ok);
}

std::uint64_t g_exc_exits = 0;
std::uint64_t g_exc_entries = 0;
std::uint64_t g_work_exits = 0;
void on_exc_exit(cp::ProbeId, std::uint64_t) { ++g_exc_exits; }
void on_exc_entry(cp::ProbeId, std::uint64_t) { ++g_exc_entries; }
void on_work_exit(cp::ProbeId, std::uint64_t) { ++g_work_exits; }
void throw_7() { throw 7; }

// What every case below checks after its throw: later calls are redirected and their exit
// probes fire once per call, including the helper run by destructors.
void expect_exit_probes_work() {
  g_exc_exits = 0;
  g_work_exits = 0;
  workload::cleanups() = 0;
  EXPECT_EQ(workload::pfe_exc(4, -1, workload::kReturn, [] {}), 4);
  EXPECT_EQ(g_exc_exits, 5u);
  EXPECT_EQ(g_work_exits, 5u);
  EXPECT_EQ(workload::cleanups(), 5u);
}

TEST(PatchableExit, ExceptionsUnwindThroughRedirectedFrames) {
  const cp::ProbeId entry = probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_exc));
  const cp::ProbeId exit = probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_exc), cp::Kind::exit);
  const cp::ProbeId work_exit =
      probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_cleanup_work), cp::Kind::exit);
  ASSERT_NE(exit, cp::kNoProbe);
  ASSERT_NE(work_exit, cp::kNoProbe);
  ASSERT_EQ(cp::activate(entry, on_exc_entry), cp::Status::ok);
  ASSERT_EQ(cp::activate(exit, on_exc_exit), cp::Status::ok);
  ASSERT_EQ(cp::activate(work_exit, on_work_exit), cp::Status::ok);
  expect_exit_probes_work();
  constexpr int kDepth = 6;  // frames 6..0 of pfe_exc, all redirected when cb throws
  for (int round = 0; round < 3; ++round) {  // more throws than one: state left behind
    for (int catch_at = 1; catch_at <= kDepth; ++catch_at) {
      SCOPED_TRACE(testing::Message() << "catch_at " << catch_at << " round " << round);
      // Caught inside, returned from: 1007 at the catcher, +1 per frame above it.
      g_exc_exits = 0;
      g_exc_entries = 0;
      g_work_exits = 0;
      workload::cleanups() = 0;
      EXPECT_EQ(workload::pfe_exc(kDepth, catch_at, workload::kReturn, throw_7),
                1007 + (kDepth - catch_at));
      EXPECT_EQ(g_exc_entries, kDepth + 1u);
      // Every frame was live at the throw: written back, none fires its exit probe.
      EXPECT_EQ(g_exc_exits, 0u);
      // Every guard ran once; the helper its destructor calls (entered during unwinding
      // or after the catch) got its exit probe each time.
      EXPECT_EQ(workload::cleanups(), kDepth + 1u);
      EXPECT_EQ(g_work_exits, kDepth + 1u);
      expect_exit_probes_work();
      // Rethrown three ways from the catcher, caught here (uninstrumented).
      for (int mode : {workload::kRethrow, workload::kThrowNew, workload::kRethrowPtr}) {
        SCOPED_TRACE(testing::Message() << "mode " << mode);
        workload::cleanups() = 0;
        int caught = -1;
        try {
          (void)workload::pfe_exc(kDepth, catch_at, mode, throw_7);
        } catch (int v) {
          caught = v;
        }
        EXPECT_EQ(caught, mode == workload::kThrowNew ? 1007 : 7);
        EXPECT_EQ(workload::cleanups(), kDepth + 1u);
        expect_exit_probes_work();
      }
    }
  }
  // Not caught by instrumented code at all.
  int caught = -1;
  try {
    (void)workload::pfe_exc(kDepth, -1, workload::kReturn, throw_7);
  } catch (int v) {
    caught = v;
  }
  EXPECT_EQ(caught, 7);
  expect_exit_probes_work();
  ASSERT_EQ(cp::deactivate(work_exit), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(exit), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(entry), cp::Status::ok);
}

void exit_thread() { pthread_exit(nullptr); }

void cancel_thread() {
  pthread_cancel(pthread_self());
  pthread_testcancel();
}

// A thread that ends by `leave` (a forced unwind) inside pfe_exc's 5 redirected frames,
// `rounds` times: every destructor runs (each cleanup's probed call fires its exit), the
// thread ends, and the exit probes still work on the next calls.
void expect_forced_unwind_runs_every_cleanup(void (*leave)(), int rounds) {
  const cp::ProbeId exit = probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_exc), cp::Kind::exit);
  const cp::ProbeId work_exit =
      probe_for(reinterpret_cast<std::uintptr_t>(&workload::pfe_cleanup_work), cp::Kind::exit);
  ASSERT_EQ(cp::activate(exit, on_exc_exit), cp::Status::ok);
  ASSERT_EQ(cp::activate(work_exit, on_work_exit), cp::Status::ok);
  for (int round = 0; round < rounds; ++round) {
    workload::cleanups() = 0;
    g_work_exits = 0;
    std::thread t([leave] { (void)workload::pfe_exc(5, 2, workload::kReturn, leave); });
    t.join();
    EXPECT_EQ(workload::cleanups(), 6u) << round;
    EXPECT_EQ(g_work_exits, 6u) << round;
  }
  expect_exit_probes_work();
  ASSERT_EQ(cp::deactivate(work_exit), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(exit), cp::Status::ok);
}

// pthread_exit is a forced unwind through the same frames.
TEST(PatchableExit, PthreadExitUnwindsThroughRedirectedFrames) {
  expect_forced_unwind_runs_every_cleanup(exit_thread, 1);
}

// pthread_cancel's forced unwind starts inside libc and reaches libgcc_s through glibc's
// own handle; the tracepoint on _Unwind_ForcedUnwind (unwind_interpose.cpp) writes the
// frames back first (without it the unwind stops at the first redirected frame: 1 of 6
// cleanups). Three rounds: the first cancel makes the hook, later ones use it.
TEST(PatchableExit, PthreadCancelUnwindsThroughRedirectedFrames) {
  expect_forced_unwind_runs_every_cleanup(cancel_thread, 3);
}

}  // namespace
