// `crossmod calibrate` (placeholder until its issue lands).
#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace crossmod::harness {
void register_calibrate(CLI::App& app) {
  auto* cmd = app.add_subcommand("calibrate", "not implemented yet");
  cmd->callback([] { throw UsageError("'calibrate' is not implemented yet"); });
}
}  // namespace crossmod::harness
