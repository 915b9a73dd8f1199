// The reference detector: its setup proof of the torn mixes, a clean run with a generous
// wait, and the deliberately torn mode, which must count tears with certainty (it holds
// each torn mix until an executor has faulted on it). No test asserts a tear rate.
#include <gtest/gtest.h>

#include "reference/reference_detector.hpp"

namespace crossmod::harness::reference {
namespace {

constexpr std::uintptr_t kSitePage = 0x7f00'0000'0000;

TEST(ReferenceDetector, EveryTornMixFaultsForEverySplit) {
  for (unsigned s = 1; s <= 4; ++s) {
    const std::uintptr_t site = kSitePage + 2048 - s;
    EXPECT_EQ(check_torn_mixes(s, site, kSitePage - 0x7000'0000, kSitePage), "") << "S=" << s;
  }
}

TEST(ReferenceDetector, MixCheckRefusesAWindowThatMissesTheTornCall) {
  const std::uintptr_t site = kSitePage + 2048 - 4;
  // The torn call lands ~1.75 GiB below the site: a window starting 256 MiB below it
  // does not hold the target, so the check must refuse it. So must S outside 1..4.
  EXPECT_NE(check_torn_mixes(4, site, kSitePage - 0x1000'0000, kSitePage), "");
  EXPECT_NE(check_torn_mixes(0, site, kSitePage - 0x7000'0000, kSitePage), "");
  EXPECT_NE(check_torn_mixes(5, site, kSitePage - 0x7000'0000, kSitePage), "");
}

// Both ways into the site (Spec::fall_through) run both states and see torn mixes.
TEST(ReferenceDetector, GenerousWaitHasNoTearsAndSaneCounts) {
  for (bool fall_through : {false, true})
  for (unsigned s : {1u, 4u}) {
    SCOPED_TRACE(fall_through ? "fall-through" : "call");
    Spec spec;
    spec.fall_through = fall_through;
    spec.wait_ticks = 200000;
    spec.straddle = s;
    spec.toggles = 1000;  // ~0.15 s: long enough for a loaded scheduler to run the executor
    spec.dwell_ticks = 5000;
    spec.watchdog_s = 120;
    const Result r = run_reference(spec);
    ASSERT_EQ(r.outcome, "ok") << r.note;
    EXPECT_EQ(r.toggles, 1000u);
    EXPECT_EQ(r.tears, 0u);
    EXPECT_EQ(r.sigill + r.sigsegv + r.sigbus + r.stray_trap, 0u);
    EXPECT_GT(r.exposed, 0u) << "no toggle was exposed: the executor never ran";
    EXPECT_LE(r.exposed, r.toggles);
    EXPECT_GT(r.executions, 0u);
    EXPECT_EQ(r.state_a + r.state_b, r.executions);
    EXPECT_GT(r.state_b, 0u) << "the NOP state never ran";
    EXPECT_EQ(r.executor_cpus.size(), 1u);
  }
}

TEST(ReferenceDetector, DeliberatelyTornMixTearsForEverySplit) {
  for (bool fall_through : {false, true})
  for (unsigned s = 1; s <= 4; ++s) {
    SCOPED_TRACE(fall_through ? "fall-through" : "call");
    Spec spec;
    spec.fall_through = fall_through;
    spec.mode = Mode::selftest_torn;
    spec.straddle = s;
    spec.toggles = 20;
    spec.dwell_ticks = 5000;
    spec.watchdog_s = 120;
    const Result r = run_reference(spec);
    ASSERT_EQ(r.outcome, "ok") << r.note;
    EXPECT_GT(r.tears, 0u) << "S=" << s;
    // Even toggles hold "A front + B back" (a call into PROT_NONE), odd "B front + A back".
    EXPECT_GT(r.sigsegv, 0u) << "S=" << s;
    EXPECT_GT(r.sigill, 0u) << "S=" << s;
    EXPECT_EQ(r.stray_trap + r.sigbus, 0u);
    EXPECT_LE(r.tears, r.exposed);
  }
}

TEST(ReferenceDetector, BadSpecIsAnErrorNotACrash) {
  Spec spec;
  spec.straddle = 0;
  EXPECT_EQ(run_reference(spec).outcome, "error");
  spec.straddle = 4;
  spec.executors = 0;
  EXPECT_EQ(run_reference(spec).outcome, "error");
}

}  // namespace
}  // namespace crossmod::harness::reference
