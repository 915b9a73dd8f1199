// Dwell arithmetic (see dwell.hpp). Thread safety: none needed, no shared state.
#include "cell/dwell.hpp"

#include <algorithm>

namespace crossmod::harness::dwell {

std::uint64_t initial(std::uint64_t elapsed_ticks, std::uint64_t slowest_calls, std::uint64_t trap_cost_ticks) {
  if (slowest_calls == 0) return kMaxDwellTicks;  // some executor never ran: longest dwell
  const std::uint64_t period = elapsed_ticks / slowest_calls;
  const std::uint64_t d = std::max(period * kDwellRuns, kSignalRounds * trap_cost_ticks);
  return std::clamp(d, kMinDwellTicks, kMaxDwellTicks);
}

Adapter::Adapter(std::uint64_t start_ticks, bool adapt)
    : d_(start_ticks), cap_(std::min(kMaxDwellTicks, start_ticks * kMaxGrowth)), adapt_(adapt) {}

bool Adapter::record(bool exposed) {
  if (!adapt_) return false;
  ++win_toggles_;
  win_exposed_ += exposed ? 1 : 0;
  if (win_toggles_ != kAdaptWindow) return false;
  bool changed = false;
  if (static_cast<double>(win_exposed_) < kAdaptTarget * kAdaptWindow && d_ < cap_) {
    d_ = std::min(2 * d_, cap_);
    changed = true;
  }
  win_toggles_ = win_exposed_ = 0;
  return changed;
}

}  // namespace crossmod::harness::dwell
