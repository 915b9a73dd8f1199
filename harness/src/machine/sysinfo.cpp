// Machine context for sysinfo and the results' context JSON (see sysinfo.hpp).
// Thread safety: see sysinfo.hpp.
#include "machine/sysinfo.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <sys/utsname.h>

#include <cmath>
#include <fstream>
#include <string>

#include "crossmod/machine.hpp"
#include "crossmod/x86.hpp"
#include "results/results_io.hpp"

namespace crossmod::harness {
namespace {

std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.pop_back();
    if (k != key) continue;
    std::string v = line.substr(colon + 1);
    const auto b = v.find_first_not_of(" \t");
    return b == std::string::npos ? "" : v.substr(b);
  }
  return "";
}

using Json = nlohmann::ordered_json;

// fmt's shortest text for a double ("3", not "3.0"), as this file always wrote it;
// null for NaN or infinity, which JSON cannot hold.
Json json_num(double v) {
  if (!std::isfinite(v)) return nullptr;
  return Json::parse(fmt::format("{}", v));
}

}  // namespace

MachineContext collect_machine_context(const Topology& topo, bool measure_c2c_now) {
  MachineContext m;
  const CpuIdentity id = cpu_identity();
  m.vendor = id.vendor;
  m.brand = id.brand;
  m.family = id.family;
  m.model = id.model;
  m.stepping = id.stepping;
  m.hypervisor = id.hypervisor;
  m.hypervisor_vendor = id.hypervisor_vendor;
  m.invariant_tsc = id.invariant_tsc;
  m.microcode = cpuinfo_field("microcode");
  struct utsname u {};
  if (uname(&u) == 0) m.kernel = fmt::format("{} {} {} {}", u.sysname, u.release, u.version, u.machine);
  const TscInfo tsc = tsc_info();
  m.tsc_hz = tsc.hz;
  m.tsc_source = tsc.source;
  m.cache_line = x86::cache_line_size();
  m.packages = topo.packages();
  m.cores = topo.cores();
  m.pus = static_cast<int>(topo.pus().size());
  m.topology_summary = topo.summary();
  m.caches = topo.caches();
  m.machine_slug = machine_slug();
  if (measure_c2c_now) {
    const Assignment a = topo.assign(Placement::spread, 1);
    m.c2c_measured = true;
    m.c2c = measure_c2c(topo, a.patcher_pu, a.executor_pus.front());
  }
  return m;
}

std::string to_json(const MachineContext& m) {
  Json caches = Json::array();
  for (const CacheLevel& c : m.caches) {
    caches.push_back(Json{{"name", c.name},
                          {"size_bytes", c.size_bytes},
                          {"line_bytes", c.line_bytes},
                          {"instances", c.instances}});
  }
  Json c2c = nullptr;
  if (m.c2c_measured) {
    c2c = Json{{"pu_a", m.c2c.pu_a},
               {"pu_b", m.c2c.pu_b},
               {"ok", m.c2c.ok},
               {"error", m.c2c.error},
               {"round_trips", m.c2c.round_trips},
               {"one_way_ticks", json_num(m.c2c.one_way_ticks)},
               {"one_way_ns", json_num(m.c2c.one_way_ns)},
               {"one_way_ticks_p10", json_num(m.c2c.one_way_ticks_p10)},
               {"one_way_ticks_p90", json_num(m.c2c.one_way_ticks_p90)}};
  }
  const Json j{{"vendor", m.vendor},
               {"brand", m.brand},
               {"family", m.family},
               {"model", m.model},
               {"stepping", m.stepping},
               {"microcode", m.microcode},
               {"kernel", m.kernel},
               {"hypervisor", m.hypervisor},
               {"hypervisor_vendor", m.hypervisor_vendor},
               {"tsc_hz", json_num(m.tsc_hz)},
               {"tsc_source", m.tsc_source},
               {"invariant_tsc", m.invariant_tsc},
               {"cache_line", m.cache_line},
               {"topology", Json{{"packages", m.packages},
                                 {"cores", m.cores},
                                 {"pus", m.pus},
                                 {"summary", m.topology_summary},
                                 {"caches", caches}}},
               {"machine_slug", m.machine_slug},
               {"c2c", c2c}};
  return json_one_line(j);  // as `sysinfo --json` has always printed it
}

std::string machine_context_json(const Topology& topo) {
  return to_json(collect_machine_context(topo, true));
}

}  // namespace crossmod::harness
