// Tear statistics with the round as the unit: tears on KVM guests come in bursts, so the
// toggles of one round are not independent and an i.i.d. binomial bound undercovers.
// Thread safety: pure functions, thread-safe; not async-signal-safe (allocates, libm, Boost).
//
// Input per wait W: one RoundCount per round (tears and exposed toggles at W summed over
// S, executors and placements; entries with the same `round` are merged). Rounds with no
// exposed toggles carry no evidence and are dropped. Leave out low-exposure cells as
// calibrate already does: a round of n toggles adds 1/(e n) to the bound below.
// The rate bound uses every round (its estimand is the mean over time); `active` matters
// for the zero-tear claim. To bound the rate during active rounds only, pass only those.
//
// The upper bound on the mean tear rate per exposed toggle (cluster_upper_bound), and why:
//   The estimand is mu = E[lambda], the mean over rounds of the round's tear rate lambda,
//   i.e. the long-run rate per toggle on a machine that alternates quiet and tearing
//   stretches as it did during the rounds. Split it by whether a round showed a tear (T):
//     mu = P(T) E[lambda | T] + E[lambda 1{no tear}].
//   (a) E[lambda 1{no tear}] = E[lambda (1-lambda)^n] <= max_l l e^(-n l) = 1/(e n): the
//       rate a round can hide behind zero tears, whatever lambda's distribution. We add the
//       mean of 1/(e n_i) over rounds (deterministic, no confidence spent).
//   (b) P(T): a Clopper-Pearson upper bound at alpha_b = 0.8 alpha on the count of tearing
//       rounds. Bursts that span consecutive rounds make neighbouring rounds dependent, so
//       the unit is the *episode* (a maximal run of consecutive tearing rounds): with K
//       tearing rounds in E episodes the mean episode length is L = K/E, and the bound is CP
//       for E successes in R/L trials (a Kish design-effect correction; L = 1 when no two
//       tearing rounds touch).
//   (c) E[lambda | T]: per-episode rates y_e = sum x / sum n. Given a tear, E[x/n] >= lambda
//       (E[x | x > 0] = n lambda / (1 - (1-lambda)^n)), so y_e errs high. Upper bound at
//       alpha_c = 0.2 alpha: the larger of the one-sided CP bound on the pooled count of the
//       tearing rounds (right when every burst has one rate) and mean(y_e) +
//       t_{E-1} sd(y_e)/sqrt(E) (the episode-to-episode spread when burst rates differ;
//       needs E >= 2). With E = 0 nothing bounds it but 1. The t part covers less than its
//       nominal level for a few skewed rates, hence the smaller share of alpha.
//   upper = min(1, (b) * (c) + (a)); by Bonferroni it covers mu with probability >= 1 - alpha
//   when (b) and (c) are valid.
// Why not the alternatives: a t or Wald bound over all rounds' rates is in effect a Wald
// bound on the fraction of tearing rounds, which undercovers when few rounds tear (about
// 86% at 60 rounds with 10% tearing, by exact binomial sum); a cluster bootstrap fails
// the same way and is random. No bound is distribution-free: a burst rate so rare that no
// round caught it, or one observed episode of a widely varying burst rate, cannot be
// bounded from the data.
// Coverage of the one-sided 95% bound, measured by cluster_stats_test.cpp (60 rounds of
// 300000 exposed toggles; "i.i.d." is the one-sided 95% Clopper-Pearson bound on the pooled
// count; width = median of this bound / the i.i.d. one):
//   bursts in 10% of rounds at 1e-4                i.i.d. 0.60  this 0.9995  width x2.3
//   bursts in 10% of rounds, log-uniform 1e-5..1e-3 i.i.d. 0.49  this 0.966   width x4.8
//   bursts of mean 2.5 consecutive rounds, 1e-4    i.i.d. 0.50  this 0.999   width x4.3
//   stationary i.i.d. 1e-5 per toggle              i.i.d. 0.96  this 1.000   width x1.4
//   stationary i.i.d. 1e-7 per toggle (~2 tears)   i.i.d. 1.00  this 1.000   width x7.8
// The known gap: consecutive bursts (mean 2.5 rounds) whose rates vary log-uniformly over
// two decades, about two episodes per run: i.i.d. 0.36, this 0.87 (0.886 over 40000 runs).
// One episode cannot show the spread of burst rates; `heterogeneity_assessed` is false then
// so the report can say so.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace crossmod::harness::stats {

// One round's evidence at one wait W. `active`: the round's sentinel tore.
struct RoundCount {
  std::uint64_t round = 0;
  std::uint64_t tears = 0;
  std::uint64_t exposed = 0;
  bool active = false;
};

// P(X >= x) for X ~ chi-square(df), df > 0 (Boost.Math's regularized gamma Q(df/2, x/2)).
double chi_squared_upper_tail(double x, double df);

// Pearson's test of the binomial model across rounds: X^2 = sum (x_i - n_i p)^2 /
// (n_i p (1-p)) with the pooled p = sum x / sum n, against chi-square(R-1). Large-sample:
// with a handful of tears in total the chi-square tail is only approximate.
struct Overdispersion {
  bool testable = false;
  std::string reason;      // why not testable; empty when testable
  std::size_t rounds = 0;  // R: rounds with exposed toggles
  std::uint64_t tears = 0;
  std::uint64_t exposed = 0;
  double pooled_rate = 0;      // p
  double chi2 = 0;             // X^2
  double dispersion = 0;       // X^2 / (R-1); about 1 for binomial data
  double p_value = 1;          // chi-square(R-1) upper tail at X^2
  bool overdispersed = false;  // testable && p_value < alpha
};
Overdispersion overdispersion_test(std::span<const RoundCount> rounds, double alpha = 0.05);

// The one-sided 1 - alpha upper bound described above, with its parts for the report.
struct ClusterBound {
  std::size_t rounds = 0;          // R
  std::size_t tearing_rounds = 0;  // K: rounds with at least one tear
  std::size_t episodes = 0;        // E: maximal runs of consecutive tearing rounds
  std::uint64_t tears = 0;
  std::uint64_t exposed = 0;
  double pooled_rate = 0;               // tears / exposed (point estimate)
  double p_tearing_upper = 1;           // (b)
  double rate_if_tearing_upper = 1;     // (c)
  double hidden_rate = 0;               // (a)
  double upper = 1;                     // min(1, (b) (c) + (a)); 1 when R = 0
  bool heterogeneity_assessed = false;  // E >= 2: the episode-to-episode spread entered (c)
};
ClusterBound cluster_upper_bound(std::span<const RoundCount> rounds, double alpha = 0.05);

// For a W with zero tears, the one thing the data support: with 0 tearing rounds among
// R_active active rounds, the fraction of active rounds in which W tears is below
// 1 - alpha^(1/R_active) (one-sided). R_active = 0 gives 1: nothing established.
double active_round_tear_fraction_upper(std::uint64_t active_rounds, double alpha = 0.05);
// The same, counting the active rounds in `rounds` with exposed toggles (merged by round).
double active_round_tear_fraction_upper(std::span<const RoundCount> rounds, double alpha = 0.05);

// The i.i.d. one-sided 1 - alpha Clopper-Pearson upper bound on the pooled count, returned
// only when the data do not contradict independence: the overdispersion test is testable
// and does not reject at alpha. nullopt otherwise, including zero tears (independence
// cannot be checked; report active_round_tear_fraction_upper instead) and R < 2.
std::optional<double> iid_upper_bound_if_supported(std::span<const RoundCount> rounds,
                                                   double alpha = 0.05);

}  // namespace crossmod::harness::stats
