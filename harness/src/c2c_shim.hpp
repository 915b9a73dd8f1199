// The core-to-core line transfer used as the floor of Tmax_recommended, measured between
// the patcher's PU and the first executor's PU of a placement (c2c.hpp does the work).
// Thread safety: call from the main thread before cells run; binds the calling thread's
// helpers only for the measurement.
#pragma once
#include <cstdint>
#include <string>

#include "topology.hpp"

namespace crossmod::harness {

struct C2cResult {
  std::uint64_t one_way_ticks = 0;  // 0 when not measured
  std::string note;                 // why not measured, or how
};

C2cResult measure_c2c_for(const Topology& topo, Placement placement, unsigned executors);

}  // namespace crossmod::harness
