// Core-to-core latency: one cache line ping-ponged between two threads pinned to two PUs.
// Calibrate uses it as a floor for Tmax_recommended (a wait shorter than one line
// transfer cannot be enough), measured between the PUs of a placement; sysinfo reports it.
// Thread safety: measure_c2c starts and joins two threads of its own; the calling
// thread's affinity is untouched. Not async-signal-safe.
#pragma once
#include <cstdint>
#include <string>

#include "machine/topology.hpp"

namespace crossmod::harness {

struct C2cLatency {
  int pu_a = -1, pu_b = -1;
  bool ok = false;
  std::string error;                // why ok is false ("" when ok)
  std::uint64_t round_trips = 0;    // timed round trips (after a discarded warm-up)
  double round_trip_ticks = 0;      // median
  double one_way_ticks = 0;         // median round trip / 2
  double one_way_ns = 0;            // one_way_ticks at the TSC frequency
  double one_way_ticks_p10 = 0, one_way_ticks_p90 = 0;
};

// Ping-pongs a line between PU pu_a and PU pu_b `round_trips` times (each round trip =
// two line transfers; fewer if ~2 s pass first, see round_trips in the result) and
// reports half the median round trip. Never throws: failures
// (same PU, bind failure, a partner thread that does not answer within ~1 s) are
// reported through ok/error.
C2cLatency measure_c2c(const Topology& topo, int pu_a, int pu_b, unsigned round_trips = 20000);

// What calibrate needs: the one-way time between the patcher's PU and the first
// executor's PU of `placement` with `executors` executors, rounded up to whole ticks.
struct C2cResult {
  std::uint64_t one_way_ticks = 0;  // 0 when not measured
  std::string note;                 // why not measured, or how
};
C2cResult measure_c2c_for(const Topology& topo, Placement placement, unsigned executors);

}  // namespace crossmod::harness
