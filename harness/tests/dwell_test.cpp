// Dwell arithmetic without a fork: the starting dwell from a warm-up and its bounded
// doubling under low exposure.
#include <gtest/gtest.h>

#include "cell/dwell.hpp"

namespace crossmod::harness {
namespace {

using namespace dwell;

TEST(Dwell, InitialFromWarmup) {
  // 1000 calls in 1M ticks: 1000 ticks per call, x kDwellRuns.
  EXPECT_EQ(initial(1'000'000, 1000, 0), 1000 * kDwellRuns);
  // A slow int3 round trip dominates: kSignalRounds of them.
  EXPECT_EQ(initial(1'000'000, 1000, 50'000), kSignalRounds * 50'000);
  // Clamped to the bounds.
  EXPECT_EQ(initial(1000, 1000, 0), kMinDwellTicks);
  EXPECT_EQ(initial(50'000'000, 10, 0), kMaxDwellTicks);
  // An executor that never ran: the longest dwell.
  EXPECT_EQ(initial(50'000'000, 0, 0), kMaxDwellTicks);
}

void window(Adapter& a, std::uint64_t exposed) {
  for (std::uint64_t i = 0; i < kAdaptWindow; ++i) a.record(i < exposed);
}

TEST(Dwell, DoublesOnlyAfterAPoorlyExposedWindow) {
  Adapter a(10'000, true);
  for (std::uint64_t i = 0; i + 1 < kAdaptWindow; ++i) EXPECT_FALSE(a.record(false));
  EXPECT_TRUE(a.record(false));  // the window closes
  EXPECT_EQ(a.ticks(), 20'000u);
  window(a, kAdaptWindow / 2);  // exactly the target: enough
  EXPECT_EQ(a.ticks(), 20'000u);
  window(a, kAdaptWindow / 2 - 1);
  EXPECT_EQ(a.ticks(), 40'000u);
}

TEST(Dwell, GrowthIsBounded) {
  Adapter a(10'000, true);
  for (int i = 0; i < 10; ++i) window(a, 0);
  EXPECT_EQ(a.ticks(), 10'000 * kMaxGrowth);
  Adapter near_max(kMaxDwellTicks / 2 + 1, true);
  for (int i = 0; i < 10; ++i) window(near_max, 0);
  EXPECT_EQ(near_max.ticks(), kMaxDwellTicks);
}

TEST(Dwell, ExplicitDwellNeverChanges) {
  Adapter a(10'000, false);
  for (int i = 0; i < 4; ++i) window(a, 0);
  EXPECT_EQ(a.ticks(), 10'000u);
}

}  // namespace
}  // namespace crossmod::harness
