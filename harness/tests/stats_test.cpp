// Clopper-Pearson bounds against published values (R binom.test / scipy beta.ppf).
#include <gtest/gtest.h>

#include <cmath>

#include "results/stats.hpp"

namespace crossmod::harness::stats {
namespace {

TEST(Stats, IncompleteBetaKnownValues) {
  EXPECT_NEAR(incomplete_beta(1, 1, 0.3), 0.3, 1e-12);            // uniform
  EXPECT_NEAR(incomplete_beta(2, 3, 0.4), 0.5248, 1e-10);         // 1 - sum binom
  EXPECT_NEAR(incomplete_beta(1, 1000, 0.001), 1 - std::pow(0.999, 1000), 1e-10);
  EXPECT_NEAR(incomplete_beta(5, 5, 0.5), 0.5, 1e-12);            // symmetry
}

TEST(Stats, ClopperPearsonZeroOfTen) {
  const auto ci = clopper_pearson(0, 10);
  EXPECT_DOUBLE_EQ(ci.lower, 0);
  EXPECT_NEAR(ci.upper, 0.3085, 5e-5);
}

TEST(Stats, ClopperPearsonFiveOfTen) {
  const auto ci = clopper_pearson(5, 10);
  EXPECT_NEAR(ci.lower, 0.1871, 5e-5);
  EXPECT_NEAR(ci.upper, 0.8129, 5e-5);
}

TEST(Stats, ClopperPearsonOneOfHundredAndAllOfTen) {
  const auto ci = clopper_pearson(1, 100);
  EXPECT_NEAR(ci.lower, 0.000253, 1e-6);
  EXPECT_NEAR(ci.upper, 0.05446, 1e-5);
  const auto all = clopper_pearson(10, 10);
  EXPECT_NEAR(all.lower, 0.6915, 5e-5);
  EXPECT_DOUBLE_EQ(all.upper, 1);
}

TEST(Stats, ClopperPearsonLargeN) {
  // 3 failures in 10 million exposed toggles: bounds from scipy beta.ppf.
  const auto ci = clopper_pearson(3, 10000000);
  EXPECT_NEAR(ci.lower / 6.187e-8, 1, 1e-3);
  EXPECT_NEAR(ci.upper / 8.767e-7, 1, 1e-3);
}

TEST(Stats, ZeroFailureOneSided) {
  EXPECT_NEAR(zero_failure_upper_bound(1000), 0.002991, 1e-6);
  EXPECT_NEAR(zero_failure_upper_bound(1000000000) * 1e9, 2.9957, 1e-3);  // ~3/n
  EXPECT_DOUBLE_EQ(zero_failure_upper_bound(0), 1);
  EXPECT_DOUBLE_EQ(rate(0, 0), 0);
}

TEST(Stats, BetaQuantileInvertsIncompleteBeta) {
  for (double q : {0.025, 0.5, 0.975}) {
    const double x = beta_quantile(q, 3, 7);
    EXPECT_NEAR(incomplete_beta(3, 7, x), q, 1e-12);
  }
}

}  // namespace
}  // namespace crossmod::harness::stats
