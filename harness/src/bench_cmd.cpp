// `crossmod bench` (placeholder until its issue lands).
#include <CLI/CLI.hpp>

#include "commands.hpp"

namespace crossmod::harness {
void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "not implemented yet");
  cmd->callback([] { throw UsageError("'bench' is not implemented yet"); });
}
}  // namespace crossmod::harness
