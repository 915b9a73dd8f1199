// Exact binomial bounds without an external math library. The incomplete beta function is
// evaluated by its continued fraction (modified Lentz), using the symmetry
// I_x(a,b) = 1 - I_{1-x}(b,a) where the fraction converges slowly.
// Thread safety: pure functions.
#include "results/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace crossmod::harness::stats {
namespace {

// Continued fraction for I_x(a,b) (without the prefactor); converges quickly for
// x < (a + 1) / (a + b + 2).
double beta_continued_fraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  constexpr double kEps = 1e-15;
  const double qab = a + b, qap = a + 1, qam = a - 1;
  double c = 1, d = 1 - qab * x / qap;
  if (std::fabs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double dm = m, m2 = 2 * dm;
    // Even step: d_{2m} = m (b - m) x / ((a + 2m - 1)(a + 2m)).
    double aa = dm * (b - dm) * x / ((qam + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    // Odd step: d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)).
    aa = -(a + dm) * (qab + dm) * x / ((a + m2) * (qap + m2));
    d = 1 + aa * d;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < kEps) break;
  }
  return h;
}

}  // namespace

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  // log of the prefactor x^a (1-x)^b / (a B(a,b)).
  const double log_front = std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                           a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) {
    return std::exp(log_front) * beta_continued_fraction(a, b, x) / a;
  }
  return 1 - std::exp(log_front) * beta_continued_fraction(b, a, 1 - x) / b;
}

double beta_quantile(double q, double a, double b) {
  if (q <= 0) return 0;
  if (q >= 1) return 1;
  double lo = 0, hi = 1;
  // 200 halvings reach below the smallest normal double's spacing near the small
  // quantiles we care about (bounds like 3e-9 for billions of toggles).
  for (int i = 0; i < 200 && hi > lo; ++i) {
    const double mid = lo + (hi - lo) / 2;
    if (mid <= lo || mid >= hi) break;
    if (incomplete_beta(a, b, mid) < q) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo + (hi - lo) / 2;
}

Interval clopper_pearson(std::uint64_t x, std::uint64_t n, double alpha) {
  Interval r;
  if (n == 0) return r;
  x = std::min(x, n);
  const double dx = static_cast<double>(x), dn = static_cast<double>(n);
  // Closed forms at the ends are exact and avoid the bisection's rounding there.
  if (x == 0) {
    r.lower = 0;
    r.upper = -std::expm1(std::log(alpha / 2) / dn);
  } else if (x == n) {
    r.lower = std::exp(std::log(alpha / 2) / dn);
    r.upper = 1;
  } else {
    r.lower = beta_quantile(alpha / 2, dx, dn - dx + 1);
    r.upper = beta_quantile(1 - alpha / 2, dx + 1, dn - dx);
  }
  return r;
}

double zero_failure_upper_bound(std::uint64_t n, double alpha) {
  if (n == 0) return 1;
  return -std::expm1(std::log(alpha) / static_cast<double>(n));
}

}  // namespace crossmod::harness::stats
