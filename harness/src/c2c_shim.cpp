// See c2c_shim.hpp.
#include "c2c_shim.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "c2c.hpp"

namespace crossmod::harness {

C2cResult measure_c2c_for(const Topology& topo, Placement placement, unsigned executors) {
  Assignment a;
  try {
    a = topo.assign(placement, executors);
  } catch (const std::invalid_argument& e) {
    return {0, fmt::format("core-to-core latency not measured: {}", e.what())};
  }
  if (a.executor_pus.empty() || a.executor_pus.front() == a.patcher_pu) {
    return {0, "core-to-core latency not measured: patcher and executor share a PU"};
  }
  const C2cLatency c = measure_c2c(topo, a.patcher_pu, a.executor_pus.front());
  if (!c.ok) return {0, fmt::format("core-to-core latency not measured: {}", c.error)};
  return {static_cast<std::uint64_t>(std::ceil(c.one_way_ticks)),
          fmt::format("PU {} <-> PU {}: median of {} round trips / 2 (p10 {:.0f}, p90 {:.0f} ticks)", c.pu_a,
                      c.pu_b, c.round_trips, c.one_way_ticks_p10, c.one_way_ticks_p90)};
}

}  // namespace crossmod::harness
