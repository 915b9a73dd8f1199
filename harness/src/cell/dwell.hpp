// How long the patcher dwells between toggles: the starting value from a warm-up
// measurement, and its adaptation while a cell runs. Pure arithmetic, so it is tested
// without a fork (dwell_test.cpp); cell.cpp feeds it the measurements.
// Thread safety: a DwellAdapter belongs to the patcher thread; no shared state.
#pragma once
#include <cstdint>

namespace crossmod::harness::dwell {

// Auto dwell starts so that each executor could run the site about kDwellRuns times per
// toggle (measured in a quiet warm-up, at least kMinDwellTicks), and at least
// kSignalRounds int3 round trips long: an executor that hit the int3 or a fault spends
// microseconds in the kernel's signal delivery, and with a shorter dwell it stays
// phase-locked into the next toggle and sees nothing (observed here: 0.2% of toggles
// exposed for wordpatch at a 1000-tick dwell). The dwell then doubles whenever fewer than
// kAdaptTarget of the last kAdaptWindow toggles were exposed, at most kMaxGrowth times
// the start and never above kMaxDwellTicks; dwell_ticks reports the final value. An
// explicit spec.dwell_ticks is used as is. The growth is bounded because on a loaded
// machine (observed here: other processes spinning on both PUs) executors are
// descheduled for milliseconds at random, which no dwell fixes; the window is long
// (~1024 toggles, several ms) so that one such gap does not halve its exposure.
inline constexpr std::uint64_t kSignalRounds = 3;
inline constexpr std::uint64_t kMaxGrowth = 4;
inline constexpr std::uint64_t kDwellRuns = 20;
inline constexpr std::uint64_t kMinDwellTicks = 1000;
inline constexpr std::uint64_t kMaxDwellTicks = 2'000'000;
inline constexpr std::uint64_t kAdaptWindow = 1024;
inline constexpr double kAdaptTarget = 0.5;  // = kLowExposureThreshold (cell.hpp)

// The warm-up stops once the slowest executor made this many calls, or after
// kWarmupRounds rounds of kWarmupRoundTicks.
inline constexpr std::uint64_t kWarmupCalls = 1000;
inline constexpr int kWarmupRounds = 50;
inline constexpr std::uint64_t kWarmupRoundTicks = 1'000'000;

// The starting dwell: `slowest_calls` calls of the slowest executor in `elapsed_ticks` of
// warm-up, and the median cost of one int3 round trip on this thread (0 if unknown).
// An executor that never ran gets the longest dwell.
std::uint64_t initial(std::uint64_t elapsed_ticks, std::uint64_t slowest_calls, std::uint64_t trap_cost_ticks);

// Doubles the dwell after a window of poorly exposed toggles (see above). With adapt =
// false (an explicit dwell) it never changes.
class Adapter {
 public:
  Adapter(std::uint64_t start_ticks, bool adapt);
  std::uint64_t ticks() const { return d_; }
  // One toggle done; true when the dwell changed.
  bool record(bool exposed);

 private:
  std::uint64_t d_;
  std::uint64_t cap_;
  bool adapt_;
  std::uint64_t win_toggles_ = 0, win_exposed_ = 0;
};

}  // namespace crossmod::harness::dwell
