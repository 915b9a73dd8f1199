// Round-as-unit tear statistics (see cluster_stats.hpp for the method and its coverage).
// Special functions come from Boost.Math; every call is guarded so its domain errors
// (which it reports by throwing) cannot arise. Thread safety: pure functions.
#include "results/cluster_stats.hpp"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <boost/math/special_functions/beta.hpp>
#include <boost/math/special_functions/gamma.hpp>
#include <cmath>
#include <numbers>
#include <vector>

namespace crossmod::harness::stats {
namespace {

// Sorted by round, equal rounds merged, rounds without exposure dropped. Tears are clamped
// to exposure: more tears than exposed toggles would be a bookkeeping error upstream, and a
// rate above 1 would break every formula below.
std::vector<RoundCount> normalise(std::span<const RoundCount> in) {
  std::vector<RoundCount> v(in.begin(), in.end());
  std::sort(v.begin(), v.end(),
            [](const RoundCount& a, const RoundCount& b) { return a.round < b.round; });
  std::vector<RoundCount> out;
  for (const RoundCount& r : v) {
    if (!out.empty() && out.back().round == r.round) {
      out.back().tears += r.tears;
      out.back().exposed += r.exposed;
      out.back().active = out.back().active || r.active;
    } else {
      out.push_back(r);
    }
  }
  std::erase_if(out, [](const RoundCount& r) { return r.exposed == 0; });
  for (RoundCount& r : out) r.tears = std::min(r.tears, r.exposed);
  return out;
}

// One-sided upper bound of Clopper-Pearson form: the 1 - a quantile of Beta(x + 1, n - x),
// for real x and n (the design-effect bound uses fractional trial counts).
double cp_upper(double x, double n, double a) {
  if (n <= 0 || x >= n) return 1;
  return boost::math::ibeta_inv(x + 1, n - x, 1 - a);
}

// The Bonferroni split of alpha between (b) and (c). (b) is an exact binomial bound; (c)'s
// t part is only approximate for a few skewed episode rates and covers less than its
// nominal level, so it gets the smaller share (the larger quantile). Simulated coverage with
// log-uniform burst rates: 0.964 at an even split, 0.972 at this one.
constexpr double kShareOfAlphaForTearingRounds = 0.8;

}  // namespace

double chi_squared_upper_tail(double x, double df) {
  if (!(df > 0)) return 1;
  if (!(x > 0)) return 1;
  if (std::isinf(x)) return 0;
  return boost::math::gamma_q(df / 2, x / 2);
}

Overdispersion overdispersion_test(std::span<const RoundCount> rounds, double alpha) {
  const std::vector<RoundCount> v = normalise(rounds);
  Overdispersion o;
  o.rounds = v.size();
  for (const RoundCount& r : v) {
    o.tears += r.tears;
    o.exposed += r.exposed;
  }
  o.pooled_rate = o.exposed ? static_cast<double>(o.tears) / static_cast<double>(o.exposed) : 0;
  if (o.rounds < 2) {
    o.reason = "fewer than 2 rounds with exposed toggles";
    return o;
  }
  if (o.tears == 0) {
    o.reason = "no tears: the spread across rounds cannot be tested";
    return o;
  }
  if (o.tears == o.exposed) {
    o.reason = "every exposed toggle tore: the spread across rounds cannot be tested";
    return o;
  }
  const double p = o.pooled_rate;
  for (const RoundCount& r : v) {
    const double n = static_cast<double>(r.exposed);
    const double d = static_cast<double>(r.tears) - n * p;
    o.chi2 += d * d / (n * p * (1 - p));
  }
  const double df = static_cast<double>(o.rounds - 1);
  o.dispersion = o.chi2 / df;
  o.p_value = chi_squared_upper_tail(o.chi2, df);
  o.testable = true;
  o.overdispersed = o.p_value < alpha;
  return o;
}

ClusterBound cluster_upper_bound(std::span<const RoundCount> rounds, double alpha) {
  const std::vector<RoundCount> v = normalise(rounds);
  ClusterBound b;
  b.rounds = v.size();
  if (v.empty()) return b;

  // Episodes: runs of consecutive tearing rounds in round order (a dropped round with no
  // exposure does not split a run: merging is the conservative side).
  std::vector<double> episode_rate;
  std::uint64_t tearing_tears = 0, tearing_exposed = 0;
  std::uint64_t ep_tears = 0, ep_exposed = 0;
  bool in_episode = false;
  double hidden_sum = 0;
  for (const RoundCount& r : v) {
    b.tears += r.tears;
    b.exposed += r.exposed;
    hidden_sum += 1 / (std::numbers::e * static_cast<double>(r.exposed));
    if (r.tears > 0) {
      ++b.tearing_rounds;
      tearing_tears += r.tears;
      tearing_exposed += r.exposed;
      ep_tears += r.tears;
      ep_exposed += r.exposed;
      in_episode = true;
    } else if (in_episode) {
      episode_rate.push_back(static_cast<double>(ep_tears) / static_cast<double>(ep_exposed));
      ep_tears = ep_exposed = 0;
      in_episode = false;
    }
  }
  if (in_episode)
    episode_rate.push_back(static_cast<double>(ep_tears) / static_cast<double>(ep_exposed));
  b.episodes = episode_rate.size();
  b.pooled_rate = static_cast<double>(b.tears) / static_cast<double>(b.exposed);
  b.hidden_rate = hidden_sum / static_cast<double>(b.rounds);

  const double R = static_cast<double>(b.rounds);
  const double alpha_b = kShareOfAlphaForTearingRounds * alpha;
  const double alpha_c = alpha - alpha_b;
  if (b.tearing_rounds == 0) {
    b.p_tearing_upper = cp_upper(0, R, alpha_b);
    b.rate_if_tearing_upper = 1;
  } else {
    const double K = static_cast<double>(b.tearing_rounds);
    const double E = static_cast<double>(b.episodes);
    const double units = R * E / K;  // R / mean episode length
    b.p_tearing_upper = cp_upper(E, units, alpha_b);
    double u =
        cp_upper(static_cast<double>(tearing_tears), static_cast<double>(tearing_exposed), alpha_c);
    if (b.episodes >= 2) {
      double mean = 0;
      for (double y : episode_rate) mean += y;
      mean /= E;
      double ss = 0;
      for (double y : episode_rate) ss += (y - mean) * (y - mean);
      const double sd = std::sqrt(ss / (E - 1));
      const boost::math::students_t t(E - 1);
      const double tq = boost::math::quantile(t, 1 - alpha_c);
      u = std::max(u, mean + tq * sd / std::sqrt(E));
      b.heterogeneity_assessed = true;
    }
    b.rate_if_tearing_upper = std::min(1.0, u);
  }
  b.upper = std::min(1.0, b.p_tearing_upper * b.rate_if_tearing_upper + b.hidden_rate);
  return b;
}

double active_round_tear_fraction_upper(std::uint64_t active_rounds, double alpha) {
  if (active_rounds == 0) return 1;
  return -std::expm1(std::log(alpha) / static_cast<double>(active_rounds));
}

double active_round_tear_fraction_upper(std::span<const RoundCount> rounds, double alpha) {
  std::uint64_t active = 0;
  for (const RoundCount& r : normalise(rounds)) active += r.active ? 1 : 0;
  return active_round_tear_fraction_upper(active, alpha);
}

std::optional<double> iid_upper_bound_if_supported(std::span<const RoundCount> rounds,
                                                   double alpha) {
  const Overdispersion o = overdispersion_test(rounds, alpha);
  if (!o.testable || o.overdispersed) return std::nullopt;
  return cp_upper(static_cast<double>(o.tears), static_cast<double>(o.exposed), alpha);
}

}  // namespace crossmod::harness::stats
