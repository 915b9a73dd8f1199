// Subcommand registration. Each command's module adds itself to the CLI11 app; main.cpp
// only dispatches. Errors in CLI or config input are thrown as UsageError (exit 2).
// Thread safety: called from main only.
#pragma once
#include <stdexcept>
#include <string>

namespace CLI {
class App;
}

namespace crossmod::harness {

// Bad input from the user (flags, presets, config files): one clear line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Exit code a command's callback sets for a completed run (0 ok, 1 a run completed but
// found a problem, e.g. a negative control failed). main() returns it.
int& exit_code();

void register_sysinfo(CLI::App& app);
void register_sweep(CLI::App& app);
void register_calibrate(CLI::App& app);
void register_soak(CLI::App& app);
void register_bench(CLI::App& app);
void register_plot(CLI::App& app);
void register_crosscheck(CLI::App& app);
void register_trace(CLI::App& app);
void register_profile(CLI::App& app);

}  // namespace crossmod::harness
