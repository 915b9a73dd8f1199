// Round-as-unit statistics: known values of the chi-square tail, the overdispersion test's
// false-positive rate and power, the zero-tear and i.i.d.-if-supported rules, and the
// coverage of cluster_upper_bound against the i.i.d. Clopper-Pearson bound on synthetic
// bursty data (fixed seeds, std::mt19937_64; the numbers are quoted in cluster_stats.hpp).
#include "results/cluster_stats.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "results/stats.hpp"

namespace crossmod::harness::stats {
namespace {

std::vector<RoundCount> rounds_of(const std::vector<std::uint64_t>& tears, std::uint64_t n,
                                  bool active = true) {
  std::vector<RoundCount> v;
  for (std::size_t i = 0; i < tears.size(); ++i) v.push_back({i, tears[i], n, active});
  return v;
}

TEST(ClusterStats, ChiSquaredUpperTailKnownValues) {
  EXPECT_NEAR(chi_squared_upper_tail(3.841458820694124, 1), 0.05, 1e-12);
  EXPECT_NEAR(chi_squared_upper_tail(18.307038053275146, 10), 0.05, 1e-12);
  EXPECT_NEAR(chi_squared_upper_tail(5.0, 2), std::exp(-2.5), 1e-14);  // df 2: e^(-x/2)
  EXPECT_NEAR(chi_squared_upper_tail(77.93052380523044, 59), 0.05, 1e-12);
  EXPECT_EQ(chi_squared_upper_tail(0, 5), 1);
  EXPECT_EQ(chi_squared_upper_tail(INFINITY, 5), 0);
}

TEST(ClusterStats, OverdispersionNotTestable) {
  const auto one = overdispersion_test(rounds_of({3}, 1000));
  EXPECT_FALSE(one.testable);
  EXPECT_FALSE(one.overdispersed);
  EXPECT_NE(one.reason.find("fewer than 2"), std::string::npos);

  const auto none = overdispersion_test(rounds_of({0, 0, 0}, 1000));
  EXPECT_FALSE(none.testable);
  EXPECT_NE(none.reason.find("no tears"), std::string::npos);

  const auto all = overdispersion_test(rounds_of({10, 10}, 10));
  EXPECT_FALSE(all.testable);

  // Rounds without exposure are not rounds; the same round listed twice (two straddles)
  // is one round.
  std::vector<RoundCount> v = {{0, 1, 1000, true}, {0, 2, 1000, true}, {1, 0, 0, true}};
  const auto merged = overdispersion_test(v);
  EXPECT_EQ(merged.rounds, 1u);
  EXPECT_EQ(merged.tears, 3u);
  EXPECT_EQ(merged.exposed, 2000u);
  EXPECT_FALSE(merged.testable);
}

TEST(ClusterStats, OverdispersionHandComputed) {
  // p = 6 / 3000; X^2 = (0-2)^2/v + (2-2)^2/v + (4-2)^2/v with v = 1000 p (1-p) = 1.996.
  const auto o = overdispersion_test(rounds_of({0, 2, 4}, 1000));
  ASSERT_TRUE(o.testable);
  const double var = 1000 * 0.002 * 0.998;
  EXPECT_NEAR(o.chi2, 8 / var, 1e-12);
  EXPECT_NEAR(o.dispersion, 4 / var, 1e-12);
  EXPECT_NEAR(o.p_value, std::exp(-o.chi2 / 2), 1e-12);  // df = 2
  EXPECT_NEAR(o.p_value, 0.1348, 5e-4);
  EXPECT_FALSE(o.overdispersed) << "three rounds cannot show much";
}

// Stationary binomial rounds: the test must reject at about alpha, no more.
TEST(ClusterStats, OverdispersionStationaryIsFlaggedAtAboutAlpha) {
  std::mt19937_64 rng(20261123);
  std::binomial_distribution<std::uint64_t> tears(100000, 1e-4);  // ~10 tears a round
  constexpr int kSets = 4000;
  int flagged = 0;
  for (int s = 0; s < kSets; ++s) {
    std::vector<RoundCount> v;
    for (std::uint64_t i = 0; i < 30; ++i) v.push_back({i, tears(rng), 100000, true});
    flagged += overdispersion_test(v, 0.05).overdispersed ? 1 : 0;
  }
  const double rate = static_cast<double>(flagged) / kSets;
  std::printf("stationary false-positive rate at alpha 0.05: %.4f\n", rate);
  // SE of the estimate at 0.05: 0.0034; the band allows the chi-square approximation's
  // small error at ~10 tears per round.
  EXPECT_GT(rate, 0.03);
  EXPECT_LT(rate, 0.07);
}

TEST(ClusterStats, OverdispersionBurstsAreFlagged) {
  // 54 quiet rounds and 6 at ~1e-4: the shape.
  std::vector<std::uint64_t> t(60, 0);
  t[7] = 31;
  t[8] = 25;
  t[20] = 36;
  t[33] = 28;
  t[41] = 30;
  t[59] = 33;
  const auto o = overdispersion_test(rounds_of(t, 300000));
  ASSERT_TRUE(o.testable);
  EXPECT_TRUE(o.overdispersed);
  EXPECT_GT(o.dispersion, 20);
  EXPECT_LT(o.p_value, 1e-12);

  // Even a sparse burst: 5 tears, all in one round of 40.
  std::vector<std::uint64_t> s(40, 0);
  s[12] = 5;
  EXPECT_TRUE(overdispersion_test(rounds_of(s, 300000)).overdispersed);
}

TEST(ClusterStats, ActiveRoundFractionForZeroTears) {
  EXPECT_EQ(active_round_tear_fraction_upper(std::uint64_t{0}), 1.0);
  EXPECT_NEAR(active_round_tear_fraction_upper(std::uint64_t{1}), 0.95, 1e-15);
  EXPECT_NEAR(active_round_tear_fraction_upper(std::uint64_t{59}), 1 - std::pow(0.05, 1.0 / 59),
              1e-15);
  // Counted from rounds: quiet rounds and rounds without exposure do not count.
  std::vector<RoundCount> v = {
      {0, 0, 1000, true}, {1, 0, 1000, false}, {2, 0, 1000, true}, {3, 0, 0, true}};
  EXPECT_NEAR(active_round_tear_fraction_upper(v), 1 - std::sqrt(0.05), 1e-15);
  const std::vector<RoundCount> quiet = rounds_of({0, 0, 0}, 1000, false);
  EXPECT_EQ(active_round_tear_fraction_upper(quiet), 1.0) << "nothing established";
}

TEST(ClusterStats, IidBoundOnlyWhenIndependenceIsNotContradicted) {
  std::vector<std::uint64_t> t(60, 0);
  t[3] = 30;
  t[40] = 28;
  EXPECT_FALSE(iid_upper_bound_if_supported(rounds_of(t, 300000)).has_value()) << "bursty";
  EXPECT_FALSE(iid_upper_bound_if_supported(rounds_of({0, 0, 0}, 300000)).has_value())
      << "zero tears";
  EXPECT_FALSE(iid_upper_bound_if_supported(rounds_of({4}, 300000)).has_value()) << "R < 2";
  const auto even = iid_upper_bound_if_supported(rounds_of({3, 2, 4, 3, 3, 2}, 300000));
  ASSERT_TRUE(even.has_value());
  // One-sided 95% = the upper end of the two-sided 90% interval.
  EXPECT_NEAR(*even, clopper_pearson(17, 1800000, 0.10).upper, 1e-12);
}

TEST(ClusterStats, BoundParts) {
  EXPECT_EQ(cluster_upper_bound({}).upper, 1.0);

  // Zero tears in 60 rounds: (b) is CP for 0 of 60 at 0.8 alpha and nothing bounds (c).
  const auto zero = cluster_upper_bound(rounds_of(std::vector<std::uint64_t>(60, 0), 300000));
  EXPECT_EQ(zero.tearing_rounds, 0u);
  EXPECT_NEAR(zero.p_tearing_upper, 1 - std::pow(0.04, 1.0 / 60), 1e-12);
  EXPECT_EQ(zero.rate_if_tearing_upper, 1.0);
  EXPECT_NEAR(zero.hidden_rate, 1 / (std::exp(1.0) * 300000), 1e-18);
  EXPECT_NEAR(zero.upper, zero.p_tearing_upper + zero.hidden_rate, 1e-15);

  // Tearing rounds 3, 4 (one episode) and 10: K = 3, E = 2, units = 20 * 2 / 3.
  std::vector<std::uint64_t> t(20, 0);
  t[3] = 10;
  t[4] = 20;
  t[10] = 40;
  const auto b = cluster_upper_bound(rounds_of(t, 100000));
  EXPECT_EQ(b.rounds, 20u);
  EXPECT_EQ(b.tearing_rounds, 3u);
  EXPECT_EQ(b.episodes, 2u);
  EXPECT_TRUE(b.heterogeneity_assessed);
  EXPECT_EQ(b.tears, 70u);
  EXPECT_NEAR(b.pooled_rate, 70.0 / 2e6, 1e-18);
  // (b) at alpha_b = 0.04: CP for 2 episodes in 40/3 units, wider than CP for 3 tearing
  // rounds in 20 independent rounds, what treating neighbouring rounds as independent gives.
  EXPECT_NEAR(b.p_tearing_upper, 0.41618814, 1e-7);  // scipy beta.ppf(0.96, 3, 40/3 - 2)
  EXPECT_GT(b.p_tearing_upper, clopper_pearson(3, 20, 0.08).upper);
  // (c) at alpha_c = 0.01: episode rates 1.5e-4 and 4e-4, mean 2.75e-4, sd 1.7678e-4,
  // t(1, 0.99) = 31.8205.
  EXPECT_NEAR(b.rate_if_tearing_upper,
              2.75e-4 + 31.82051595375758 * 1.767766953e-4 / std::sqrt(2.0), 1e-9);
  EXPECT_NEAR(b.upper, b.p_tearing_upper * b.rate_if_tearing_upper + b.hidden_rate, 1e-15);

  // Every round tears at an even rate: one episode covering all rounds, so (b) = 1 and the
  // bound is the pooled CP plus the hidden term.
  const auto all = cluster_upper_bound(rounds_of({3, 2, 4, 3, 3, 2}, 300000));
  EXPECT_EQ(all.episodes, 1u);
  EXPECT_FALSE(all.heterogeneity_assessed);
  EXPECT_EQ(all.p_tearing_upper, 1.0);
  EXPECT_NEAR(all.rate_if_tearing_upper, clopper_pearson(17, 1800000, 0.02).upper, 1e-12);
}

TEST(ClusterStats, BoundMergesCellsOfOneRoundAndIgnoresOrder) {
  // Round 5 reported as four cells (S = 1..4), given out of order: one tearing round.
  std::vector<RoundCount> cells = {{5, 1, 25000, true}, {2, 0, 100000, true},  {5, 0, 25000, true},
                                   {5, 2, 25000, true}, {9, 0, 100000, false}, {5, 0, 25000, true}};
  const auto b = cluster_upper_bound(cells);
  EXPECT_EQ(b.rounds, 3u);
  EXPECT_EQ(b.tearing_rounds, 1u);
  EXPECT_EQ(b.episodes, 1u);
  EXPECT_EQ(b.tears, 3u);
  EXPECT_EQ(b.exposed, 300000u);
  const auto same = cluster_upper_bound(rounds_of({0, 3, 0}, 100000));
  EXPECT_DOUBLE_EQ(b.upper, same.upper);
}

// ---- Coverage by simulation.

constexpr std::uint64_t kRounds = 60;
constexpr std::uint64_t kExposed = 300000;
constexpr double kAlpha = 0.05;

struct Draw {
  std::vector<double> lambda;  // per round
  double mu;                   // the true mean rate the bound must cover
};

struct Coverage {
  double iid = 0;           // fraction of replications the i.i.d. CP upper bound covered mu
  double cluster = 0;       // the same for cluster_upper_bound
  double median_ratio = 0;  // median of cluster upper / i.i.d. upper
};

Coverage measure(std::uint64_t seed, int reps, const std::function<Draw(std::mt19937_64&)>& gen) {
  std::mt19937_64 rng(seed);
  int iid_cover = 0, cluster_cover = 0;
  std::vector<double> ratio;
  std::vector<RoundCount> v(kRounds);
  for (int r = 0; r < reps; ++r) {
    const Draw d = gen(rng);
    std::uint64_t x = 0;
    for (std::uint64_t i = 0; i < kRounds; ++i) {
      std::binomial_distribution<std::uint64_t> b(kExposed, d.lambda[i]);
      v[i] = {i, d.lambda[i] > 0 ? b(rng) : 0, kExposed, true};
      x += v[i].tears;
    }
    // What the report prints today: one-sided 95% CP on the pooled count.
    const double iid = clopper_pearson(x, kRounds * kExposed, 2 * kAlpha).upper;
    const double ours = cluster_upper_bound(v, kAlpha).upper;
    iid_cover += iid >= d.mu ? 1 : 0;
    cluster_cover += ours >= d.mu ? 1 : 0;
    ratio.push_back(ours / iid);
  }
  std::sort(ratio.begin(), ratio.end());
  Coverage c;
  c.iid = static_cast<double>(iid_cover) / reps;
  c.cluster = static_cast<double>(cluster_cover) / reps;
  c.median_ratio = ratio[ratio.size() / 2];
  return c;
}

void report(const char* name, const Coverage& c) {
  std::printf("%-28s i.i.d. CP coverage %.4f  cluster bound %.4f  median width x%.2f\n", name,
              c.iid, c.cluster, c.median_ratio);
}

// Replications: coverage near 0.96 (the log-uniform case, 0.964 over 40000 replications)
// has a binomial SE of 0.0022 at 8000, so its >= 0.95 assert sits 6 SE below; the other
// >= 0.95 asserts face coverages near 1, and the i.i.d. asserts sit 30+ SE above their
// measured values. Each scenario takes well under a second.
constexpr int kReps = 4000;

double log_uniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  return std::exp(u(rng));
}
const double kLogUniformMean = (1e-3 - 1e-5) / std::log(100.0);  // of log-uniform 1e-5..1e-3

TEST(ClusterStatsCoverage, BurstsAtOneRate) {
  const Coverage c = measure(1, kReps, [](std::mt19937_64& rng) {
    std::bernoulli_distribution burst(0.1);
    Draw d{std::vector<double>(kRounds), 0.1 * 1e-4};
    for (double& l : d.lambda) l = burst(rng) ? 1e-4 : 0;
    return d;
  });
  report("bursts 10% at 1e-4", c);
  EXPECT_LT(c.iid, 0.75);
  EXPECT_GE(c.cluster, 0.95);
}

TEST(ClusterStatsCoverage, BurstsAtLogUniformRates) {
  const Coverage c = measure(2, 2 * kReps, [](std::mt19937_64& rng) {
    std::bernoulli_distribution burst(0.1);
    Draw d{std::vector<double>(kRounds), 0.1 * kLogUniformMean};
    for (double& l : d.lambda) l = burst(rng) ? log_uniform(rng, 1e-5, 1e-3) : 0;
    return d;
  });
  report("bursts 10% log-uniform", c);
  EXPECT_LT(c.iid, 0.75);
  EXPECT_GE(c.cluster, 0.95);
}

// A two-state Markov chain over rounds: stationary burst fraction 10%, mean burst length
// 2.5 rounds; the chain starts in its stationary distribution, so mu is 0.1 x rate.
Draw markov_bursts(std::mt19937_64& rng, const std::function<double(std::mt19937_64&)>& rate,
                   double mean_rate) {
  constexpr double kLeave = 1 / 2.5;
  constexpr double kEnter = kLeave * 0.1 / 0.9;
  std::uniform_real_distribution<double> u(0, 1);
  Draw d{std::vector<double>(kRounds), 0.1 * mean_rate};
  bool on = u(rng) < 0.1;
  double current = rate(rng);
  for (double& l : d.lambda) {
    l = on ? current : 0;
    const bool next = on ? u(rng) >= kLeave : u(rng) < kEnter;
    if (next && !on) current = rate(rng);
    on = next;
  }
  return d;
}

TEST(ClusterStatsCoverage, BurstsSpanningConsecutiveRounds) {
  const Coverage c = measure(3, kReps, [](std::mt19937_64& rng) {
    return markov_bursts(
        rng, [](std::mt19937_64&) { return 1e-4; }, 1e-4);
  });
  report("consecutive bursts at 1e-4", c);
  EXPECT_LT(c.iid, 0.75);
  EXPECT_GE(c.cluster, 0.95);
}

// The documented gap: consecutive bursts whose rate varies over two decades, with about two
// episodes per run. One observed episode says nothing about the spread of burst rates, so
// no bound without an assumption on that spread reaches 95% here; this pins how far short
// this one falls (measured ~0.88) so a change that makes it worse is seen.
TEST(ClusterStatsCoverage, ConsecutiveBurstsAtLogUniformRatesKnownGap) {
  const Coverage c = measure(4, kReps, [](std::mt19937_64& rng) {
    return markov_bursts(
        rng, [](std::mt19937_64& g) { return log_uniform(g, 1e-5, 1e-3); }, kLogUniformMean);
  });
  report("consecutive log-uniform", c);
  EXPECT_LT(c.iid, 0.60);
  EXPECT_GE(c.cluster, 0.85);
}

TEST(ClusterStatsCoverage, StationaryIid) {
  const Coverage c = measure(5, kReps, [](std::mt19937_64&) {
    return Draw{std::vector<double>(kRounds, 1e-5), 1e-5};
  });
  report("stationary 1e-5", c);
  EXPECT_GE(c.iid, 0.93);  // CP is exact here: the check that the harness is right
  EXPECT_GE(c.cluster, 0.95);
  EXPECT_LT(c.median_ratio, 2.0);
}

// The price of not assuming independence: at 1e-7 only ~2 of 60 rounds tear, so (b) and
// (c) are both wide; the median bound is many times the i.i.d. one (printed).
TEST(ClusterStatsCoverage, StationaryRare) {
  const Coverage c = measure(6, kReps, [](std::mt19937_64&) {
    return Draw{std::vector<double>(kRounds, 1e-7), 1e-7};
  });
  report("stationary 1e-7", c);
  EXPECT_GE(c.iid, 0.93);
  EXPECT_GE(c.cluster, 0.95);
}

}  // namespace
}  // namespace crossmod::harness::stats
