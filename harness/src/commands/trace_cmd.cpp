// `crossmod trace --functions PATTERN [--out FILE] [--refused FILE] [--jump-only] [--latency]
//  -- PROGRAM ARGS...`: runs PROGRAM with tracepoints' libcrossmod_trace.so preloaded
// (entry tracepoints on every matching function of every loaded object; a call-count table
// at exit on stderr or in --out). exec keeps the program's pid, output and exit status.
// --latency preloads libcrossmod_probes.so instead: its tracepoint provider adds exit
// probes (return-address redirection) and the table the mean time per call.
// Objects the program dlopens later are traced too (both preload libraries define dlopen).
// Main thread only (this command; the preloaded libraries handle the program's threads).
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands/commands.hpp"

namespace crossmod::harness {
namespace {

struct TraceOptions {
  std::string functions;
  std::string out;
  std::string refused;
  bool jump_only = false;
  bool latency = false;
  std::vector<std::string> command;
};

[[noreturn]] void run_trace(const TraceOptions& o) {
  if (o.command.empty()) throw UsageError("trace: name a program after --");
  const std::string lib = o.latency ? CROSSMOD_PROBES_LIB : CROSSMOD_TRACE_LIB;
  if (access(lib.c_str(), R_OK) != 0)
    throw UsageError(fmt::format("trace: {} is missing; build target {}", lib,
                                 o.latency ? "crossmod_probes" : "crossmod_trace"));
  std::string preload = lib;
  if (const char* old = std::getenv("LD_PRELOAD"); old != nullptr && *old != '\0')
    preload += std::string(":") + old;
  setenv("LD_PRELOAD", preload.c_str(), 1);
  if (o.latency) {
    setenv("CROSSMOD_PROBES_TRACE", o.functions.c_str(), 1);
    setenv("CROSSMOD_PROBES_TRACE_EXIT", "1", 1);
    if (!o.out.empty()) setenv("CROSSMOD_PROBES_OUT", o.out.c_str(), 1);
    if (!o.refused.empty()) setenv("CROSSMOD_PROBES_TRACE_REFUSED", o.refused.c_str(), 1);
    if (o.jump_only) setenv("CROSSMOD_PROBES_TRACE_JUMP_ONLY", "1", 1);
  } else {
    setenv("CROSSMOD_TRACE_FUNCTIONS", o.functions.c_str(), 1);
    if (!o.out.empty()) setenv("CROSSMOD_TRACE_OUT", o.out.c_str(), 1);
    if (!o.refused.empty()) setenv("CROSSMOD_TRACE_REFUSED", o.refused.c_str(), 1);
    if (o.jump_only) setenv("CROSSMOD_TRACE_JUMP_ONLY", "1", 1);
  }
  std::vector<char*> argv;
  for (const std::string& a : o.command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  fmt::print(stderr, "crossmod: trace: cannot execute {}: {}\n", o.command[0],
             std::strerror(errno));
  std::_Exit(127);
}

}  // namespace

void register_trace(CLI::App& app) {
  auto opt = std::make_shared<TraceOptions>();
  auto* cmd = app.add_subcommand(
      "trace", "count calls per function of an unmodified program (LD_PRELOAD tracepoints)");
  cmd->add_option("--functions", opt->functions,
                  "fnmatch pattern(s) of function names, ':'-separated")
      ->required();
  cmd->add_option("--out", opt->out, "write the table here instead of stderr");
  cmd->add_option("--refused", opt->refused, "write refused functions and why here");
  cmd->add_flag("--jump-only", opt->jump_only, "no trap-mode fallback for refused functions");
  cmd->add_flag("--latency", opt->latency,
                "also exit probes (probe layer's tracepoint provider): exits and mean time "
                "per call");
  cmd->add_option("command", opt->command, "-- PROGRAM ARGS...")->required();
  cmd->callback([opt] { run_trace(*opt); });
}

}  // namespace crossmod::harness
