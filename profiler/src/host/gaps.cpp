// The launcher's gap meter (profile_report.hpp, MachineGaps): a bare rdtsc loop in 1 ms
// chunks, each step longer than 1 us counted as a gap, chunks with a context switch dropped.
#include <sys/resource.h>
#include <x86intrin.h>

#include <algorithm>
#include <cmath>

#include "crossmod/profile_report.hpp"

namespace crossmod::profile {

void MachineGaps::add(const MachineGaps& o) {
  threshold_ticks = std::max(threshold_ticks, o.threshold_ticks);
  spin_ticks += o.spin_ticks;
  gap_ticks += o.gap_ticks;
  gap_sq += o.gap_sq;
  gaps += o.gaps;
  chunks += o.chunks;
  dropped += o.dropped;
}

namespace {
long switches() noexcept {
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return -1;
  return ru.ru_nvcsw + ru.ru_nivcsw;
}
}  // namespace

MachineGaps measure_gaps(unsigned chunks, double hz) noexcept {
  MachineGaps g;
  if (chunks == 0 || !(hz > 0)) return g;
  g.threshold_ticks = static_cast<std::uint64_t>(std::llround(hz / 1e6));
  const std::uint64_t chunk = static_cast<std::uint64_t>(std::llround(hz / 1e3));
  for (unsigned c = 0; c < chunks; ++c) {
    const long sw0 = switches();
    const std::uint64_t start = __rdtsc();
    std::uint64_t prev = start, n = 0, sum = 0;
    double sq = 0;
    // The loop's body: one rdtsc, a compare, a subtraction (tens of ticks a step).
    for (;;) {
      const std::uint64_t t = __rdtsc();
      if (t - prev > g.threshold_ticks) {
        ++n;
        sum += t - prev;
        sq += static_cast<double>(t - prev) * static_cast<double>(t - prev);
      }
      prev = t;
      if (t - start >= chunk) break;
    }
    ++g.chunks;
    if (sw0 < 0 || switches() != sw0) {
      ++g.dropped;
      continue;
    }
    g.spin_ticks += static_cast<double>(prev - start);
    g.gap_ticks += static_cast<double>(sum);
    g.gap_sq += sq;
    g.gaps += n;
  }
  return g;
}

double gap_term(double mean, const MachineGaps& g) {
  const double s = std::min(g.share_hi(), 0.9);
  return s > 0 ? mean * s / (1 - s) : 0.0;
}

}  // namespace crossmod::profile
