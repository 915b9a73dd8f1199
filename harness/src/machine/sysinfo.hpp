// Machine context: what shapes the numbers (CPU identity, microcode, kernel, hypervisor,
// TSC, cache line, topology, core-to-core latency). `crossmod sysinfo` prints it; the
// sweep embeds machine_context_json() in the context JSON beside its results.
// Thread safety: collect_machine_context() starts threads of its own for the c2c
// measurement (the caller's affinity is untouched); not async-signal-safe.
#pragma once
#include <string>
#include <vector>

#include "machine/c2c.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {

struct MachineContext {
  std::string vendor, brand;
  unsigned family = 0, model = 0, stepping = 0;
  std::string microcode;          // /proc/cpuinfo "microcode", "" if absent
  std::string kernel;             // uname: sysname release version machine
  bool hypervisor = false;
  std::string hypervisor_vendor;  // CPUID 0x40000000 signature
  double tsc_hz = 0;
  std::string tsc_source;         // cpuid-0x15 | hypervisor-0x40000010 | measured
  bool invariant_tsc = false;
  unsigned cache_line = 0;        // bytes, from CPUID
  int packages = 0, cores = 0, pus = 0;
  std::string topology_summary;
  std::vector<CacheLevel> caches;
  std::string machine_slug;
  bool c2c_measured = false;
  C2cLatency c2c;                 // between the PUs a default sweep uses (spread, 1 executor)
};

// Gathers everything; with measure_c2c, also ping-pongs a line between the patcher PU and
// the first executor PU of Placement::spread (~20 ms).
MachineContext collect_machine_context(const Topology& topo, bool measure_c2c = true);

// One JSON object (no trailing newline), keys in a fixed order; schema documented by the
// field names of MachineContext.
std::string to_json(const MachineContext& m);

// collect_machine_context(topo, true) as JSON: what the sweep embeds under "machine".
std::string machine_context_json(const Topology& topo);

}  // namespace crossmod::harness
