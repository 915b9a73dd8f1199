// Machine context for sysinfo and the results' context JSON (see sysinfo.hpp).
// Thread safety: see sysinfo.hpp.
#include "sysinfo.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <sys/utsname.h>

#include <fstream>
#include <string>

#include "crossmod/machine.hpp"
#include "crossmod/x86.hpp"

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

std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) o += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else o += c;
    }
  }
  return o + "\"";
}

std::string json_num(double v) { return fmt::format("{}", v); }

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
  std::string caches = "[";
  for (std::size_t i = 0; i < m.caches.size(); ++i) {
    const CacheLevel& c = m.caches[i];
    caches += fmt::format("{}{{\"name\": {}, \"size_bytes\": {}, \"line_bytes\": {}, \"instances\": {}}}",
                          i ? ", " : "", json_str(c.name), c.size_bytes, c.line_bytes, c.instances);
  }
  caches += "]";
  std::string c2c = "null";
  if (m.c2c_measured) {
    c2c = fmt::format(
        "{{\"pu_a\": {}, \"pu_b\": {}, \"ok\": {}, \"error\": {}, \"round_trips\": {}, "
        "\"one_way_ticks\": {}, \"one_way_ns\": {}, \"one_way_ticks_p10\": {}, "
        "\"one_way_ticks_p90\": {}}}",
        m.c2c.pu_a, m.c2c.pu_b, m.c2c.ok ? "true" : "false", json_str(m.c2c.error),
        m.c2c.round_trips, json_num(m.c2c.one_way_ticks), json_num(m.c2c.one_way_ns),
        json_num(m.c2c.one_way_ticks_p10), json_num(m.c2c.one_way_ticks_p90));
  }
  return fmt::format(
      "{{\"vendor\": {}, \"brand\": {}, \"family\": {}, \"model\": {}, \"stepping\": {}, "
      "\"microcode\": {}, \"kernel\": {}, \"hypervisor\": {}, \"hypervisor_vendor\": {}, "
      "\"tsc_hz\": {}, \"tsc_source\": {}, \"invariant_tsc\": {}, \"cache_line\": {}, "
      "\"topology\": {{\"packages\": {}, \"cores\": {}, \"pus\": {}, \"summary\": {}, "
      "\"caches\": {}}}, \"machine_slug\": {}, \"c2c\": {}}}",
      json_str(m.vendor), json_str(m.brand), m.family, m.model, m.stepping, json_str(m.microcode),
      json_str(m.kernel), m.hypervisor ? "true" : "false", json_str(m.hypervisor_vendor),
      json_num(m.tsc_hz), json_str(m.tsc_source), m.invariant_tsc ? "true" : "false",
      m.cache_line, m.packages, m.cores, m.pus, json_str(m.topology_summary), caches,
      json_str(m.machine_slug), c2c);
}

std::string machine_context_json(const Topology& topo) {
  return to_json(collect_machine_context(topo, true));
}

}  // namespace crossmod::harness
