// Per-cell statistics: failure probability per exposed toggle with exact (Clopper-Pearson)
// binomial confidence bounds, computed from the regularized incomplete beta function.
// Thread safety: pure functions, thread-safe; not async-signal-safe (uses libm).
#pragma once
#include <cstdint>

namespace crossmod::harness::stats {

// I_x(a, b), the regularized incomplete beta function, for a, b > 0 and x in [0, 1].
double incomplete_beta(double a, double b, double x);

// The q-quantile of Beta(a, b): the x with I_x(a, b) = q, found by bisection (I_x is
// monotone in x, so bisection cannot fail; it is slow but these are tens of calls per run).
double beta_quantile(double q, double a, double b);

struct Interval {
  double lower = 0;
  double upper = 1;
};

// Two-sided Clopper-Pearson interval for x successes in n trials at confidence
// 1 - alpha (alpha = 0.05 for 95%). n = 0 gives [0, 1].
Interval clopper_pearson(std::uint64_t x, std::uint64_t n, double alpha = 0.05);

// One-sided upper bound for zero events in n trials: 1 - alpha^(1/n), about 3/n at 95%
// ("rule of three"). n = 0 gives 1.
double zero_failure_upper_bound(std::uint64_t n, double alpha = 0.05);

// Point estimate x / n (0 when n = 0).
inline double rate(std::uint64_t x, std::uint64_t n) {
  return n == 0 ? 0.0 : static_cast<double>(x) / static_cast<double>(n);
}

}  // namespace crossmod::harness::stats
