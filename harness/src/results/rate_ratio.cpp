// Rate ratio with an exact conditional interval (see rate_ratio.hpp).
#include "results/rate_ratio.hpp"

#include <limits>

#include "results/stats.hpp"

namespace crossmod::harness::stats {

RateRatio rate_ratio(std::uint64_t x_num, std::uint64_t n_num, std::uint64_t x_den,
                     std::uint64_t n_den, double alpha) {
  RateRatio r;
  const std::uint64_t x = x_num + x_den;
  if (x == 0 || n_num == 0 || n_den == 0) return r;
  r.defined = true;
  const double inf = std::numeric_limits<double>::infinity();
  const double nn = static_cast<double>(n_num), nd = static_cast<double>(n_den);
  auto theta = [&](double p) { return p >= 1 ? inf : p * nd / ((1 - p) * nn); };
  r.estimate = x_den == 0 ? inf : (static_cast<double>(x_num) / nn) / (static_cast<double>(x_den) / nd);
  const Interval ci = clopper_pearson(x_num, x, alpha);
  r.lower = x_num == 0 ? 0 : theta(ci.lower);
  r.upper = x_num == x ? inf : theta(ci.upper);
  return r;
}

}  // namespace crossmod::harness::stats
