// `crossmod sysinfo` (placeholder until its issue lands).
#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace crossmod::harness {
void register_sysinfo(CLI::App& app) {
  auto* cmd = app.add_subcommand("sysinfo", "not implemented yet");
  cmd->callback([] { throw UsageError("'sysinfo' is not implemented yet"); });
}
}  // namespace crossmod::harness
