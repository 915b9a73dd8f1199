// The ratio of two Poisson-like event rates (events per exposed toggle) with an exact
// conditional interval, for `crossmod crosscheck`: reference rate / harness rate.
// Thread safety: pure functions, thread-safe; not async-signal-safe (libm).
#pragma once
#include <cstdint>

namespace crossmod::harness::stats {

struct RateRatio {
  bool defined = false;   // false when x_num + x_den == 0 or an n is 0: nothing to compare
  double estimate = 0;    // (x_num / n_num) / (x_den / n_den); +inf when x_den == 0
  double lower = 0;       // 95% (1 - alpha) bounds; upper may be +inf
  double upper = 0;
};

// Exact conditional interval for theta = r_num / r_den. Given the total x = x_num + x_den,
// x_num is Binomial(x, p) with p = theta n_num / (theta n_num + n_den) (the usual
// conditioning for two Poisson counts, which two small binomial rates approximate).
// A Clopper-Pearson interval [pL, pU] for p maps to theta = p n_den / ((1 - p) n_num),
// which is increasing in p, so [theta(pL), theta(pU)] is the interval.
// Assumes independent events; tears come in bursts, so read it with the per-round counts.
RateRatio rate_ratio(std::uint64_t x_num, std::uint64_t n_num, std::uint64_t x_den,
                     std::uint64_t n_den, double alpha = 0.05);

}  // namespace crossmod::harness::stats
