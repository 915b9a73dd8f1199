// The exact conditional interval of a rate ratio, against values computed independently
// (binomial tails summed exactly in Python, bisection; the 10-of-15 Clopper-Pearson
// interval [0.38380, 0.88176] is R's binom.test).
#include <gtest/gtest.h>

#include <cmath>

#include "results/rate_ratio.hpp"

namespace crossmod::harness::stats {
namespace {

TEST(RateRatio, TenVersusFiveInEqualExposure) {
  const RateRatio r = rate_ratio(10, 1000, 5, 1000);
  ASSERT_TRUE(r.defined);
  EXPECT_DOUBLE_EQ(r.estimate, 2.0);
  EXPECT_NEAR(r.lower, 0.62286, 5e-5);
  EXPECT_NEAR(r.upper, 7.45730, 5e-4);
}

TEST(RateRatio, IssueNineFigures) {
  // Reference 148 / 18.9M vs harness 16 / 17.2M at W = 1600 (issue 9, item 3).
  const RateRatio r = rate_ratio(148, 18'900'000, 16, 17'200'000);
  ASSERT_TRUE(r.defined);
  EXPECT_NEAR(r.estimate, 8.41799, 1e-4);
  EXPECT_NEAR(r.lower, 5.01492, 1e-3);
  EXPECT_NEAR(r.upper, 15.1123, 3e-3);
}

TEST(RateRatio, ZeroNumeratorHasZeroLowerBound) {
  const RateRatio r = rate_ratio(0, 1000, 3, 2000);
  ASSERT_TRUE(r.defined);
  EXPECT_EQ(r.estimate, 0);
  EXPECT_EQ(r.lower, 0);
  EXPECT_NEAR(r.upper, 4.83990, 5e-4);
}

TEST(RateRatio, ZeroDenominatorHasInfiniteUpperBound) {
  const RateRatio r = rate_ratio(4, 100, 0, 300);
  ASSERT_TRUE(r.defined);
  EXPECT_TRUE(std::isinf(r.estimate));
  EXPECT_NEAR(r.lower, 1.98037, 5e-4);
  EXPECT_TRUE(std::isinf(r.upper));
}

TEST(RateRatio, NoEventsOrNoExposureIsUndefined) {
  EXPECT_FALSE(rate_ratio(0, 1000, 0, 1000).defined);
  EXPECT_FALSE(rate_ratio(3, 0, 1, 1000).defined);
  EXPECT_FALSE(rate_ratio(3, 1000, 1, 0).defined);
}

TEST(RateRatio, SwappingArgumentsInvertsTheInterval) {
  const RateRatio a = rate_ratio(7, 5000, 19, 8000);
  const RateRatio b = rate_ratio(19, 8000, 7, 5000);
  EXPECT_NEAR(a.estimate * b.estimate, 1.0, 1e-12);
  EXPECT_NEAR(a.lower * b.upper, 1.0, 1e-6);
  EXPECT_NEAR(a.upper * b.lower, 1.0, 1e-6);
}

}  // namespace
}  // namespace crossmod::harness::stats
