// `crossmod sysinfo [--json] [--no-c2c]`: what shapes this machine's numbers, for people
// (aligned lines on stdout) or machines (the same JSON object the sweep embeds).
// Thread safety: runs on main; the c2c measurement starts its own threads.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <memory>

#include "commands/commands.hpp"
#include "machine/sysinfo.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {

void register_sysinfo(CLI::App& app) {
  struct Opts {
    bool json = false;
    bool no_c2c = false;
  };
  auto opts = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "sysinfo", "CPU, microcode, kernel, TSC, topology and core-to-core latency of this machine");
  cmd->add_flag("--json", opts->json, "print one JSON object (the sweep's machine context)");
  cmd->add_flag("--no-c2c", opts->no_c2c, "skip the core-to-core latency measurement");
  cmd->callback([opts] {
    const Topology topo = Topology::load();
    const MachineContext m = collect_machine_context(topo, !opts->no_c2c);
    if (opts->json) {
      fmt::print("{}\n", to_json(m));
      return;
    }
    auto row = [](const char* k, const std::string& v) { fmt::print("{:<18} {}\n", k, v); };
    row("machine", m.machine_slug);
    row("cpu", fmt::format("{} ({})", m.brand, m.vendor));
    row("family/model", fmt::format("{} / {} / stepping {}", m.family, m.model, m.stepping));
    row("microcode", m.microcode.empty() ? "unknown" : m.microcode);
    row("kernel", m.kernel);
    row("hypervisor", m.hypervisor ? (m.hypervisor_vendor.empty() ? "yes" : m.hypervisor_vendor)
                                   : "none");
    row("tsc", fmt::format("{:.3f} GHz ({}), {}", m.tsc_hz / 1e9, m.tsc_source,
                           m.invariant_tsc ? "invariant" : "NOT invariant"));
    row("cache line", fmt::format("{} bytes", m.cache_line));
    row("topology", m.topology_summary);
    if (m.c2c_measured) {
      if (m.c2c.ok) {
        row("core-to-core", fmt::format("PU {} <-> PU {}: {:.0f} ticks ({:.1f} ns) one way, median "
                                        "of {} round trips (p10 {:.0f}, p90 {:.0f} ticks)",
                                        m.c2c.pu_a, m.c2c.pu_b, m.c2c.one_way_ticks,
                                        m.c2c.one_way_ns, m.c2c.round_trips,
                                        m.c2c.one_way_ticks_p10, m.c2c.one_way_ticks_p90));
      } else {
        row("core-to-core", "not measured: " + m.c2c.error);
      }
    }
  });
}

}  // namespace crossmod::harness
