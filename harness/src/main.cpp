// crossmod: entry point. Parses the command line and dispatches to a subcommand; turns
// exceptions into one clear line on stderr and a distinct exit code.
//   0 success, 1 a run completed but found a problem (e.g. a negative control failed),
//   2 bad input (usage, preset, config), 3 an internal or system error.
#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdio>
#include <exception>

#include "commands/commands.hpp"

int& crossmod::harness::exit_code() {
  static int code = 0;
  return code;
}

int main(int argc, char** argv) {
  CLI::App app{"crossmod: measure Tmax for x86-64 cross-modifying code and patch with it"};
  app.set_version_flag("--version", std::string("crossmod ") + CROSSMOD_VERSION);
  app.require_subcommand(1);
  crossmod::harness::register_sysinfo(app);
  crossmod::harness::register_sweep(app);
  crossmod::harness::register_calibrate(app);
  crossmod::harness::register_soak(app);
  crossmod::harness::register_bench(app);
  crossmod::harness::register_plot(app);
  crossmod::harness::register_crosscheck(app);
  crossmod::harness::register_trace(app);
  crossmod::harness::register_profile(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, like every other usage error (CLI11's own exit adds a second).
    fmt::print(stderr, "crossmod: error: {} (see --help)\n", e.what());
    return 2;
  } catch (const crossmod::harness::UsageError& e) {
    fmt::print(stderr, "crossmod: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "crossmod: internal error: {}\n", e.what());
    return 3;
  }
  return crossmod::harness::exit_code();
}
