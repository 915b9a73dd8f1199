// The -fpatchable-function-entry provider on real compiler output
// (patchable_workload.cpp): sites found by the library constructor's scan, off at start,
// arguments preserved through the trampoline, batch by name.
#include <gtest/gtest.h>

#include <atomic>
#include <csetjmp>
#include <string>

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
  EXPECT_EQ(n, 8u);
  (void)workload::pfe_leaf(1, &c);
  EXPECT_EQ(g_quiet_hits.load() - h0, 4u);
}

std::uint64_t g_exit_tsc = 0, g_exit_now = 0, g_exits = 0;
void on_exit_probe(cp::ProbeId, std::uint64_t entry_tsc) {
  g_exit_tsc = entry_tsc;
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

}  // namespace
