// `crossmod plot` (placeholder until its issue lands).
#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace crossmod::harness {
void register_plot(CLI::App& app) {
  auto* cmd = app.add_subcommand("plot", "not implemented yet");
  cmd->callback([] { throw UsageError("'plot' is not implemented yet"); });
}
}  // namespace crossmod::harness
