// `crossmod sweep` (placeholder until its issue lands).
#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace crossmod::harness {
void register_sweep(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "not implemented yet");
  cmd->callback([] { throw UsageError("'sweep' is not implemented yet"); });
}
}  // namespace crossmod::harness
