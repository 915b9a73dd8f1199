// `crossmod bench`: parses the flags and hands them to the benchmark runner
// (bench_runner.cpp), which drives the suites of engine/bench/ and runs the probes suite
// (probes/bench/probes_bench.cpp) as a child process.
// Thread safety: main thread only.
#include <CLI/CLI.hpp>

#include <memory>

#include "runs/bench_runner.hpp"
#include "commands/commands.hpp"

namespace crossmod::harness {

void register_bench(CLI::App& app) {
  auto opts = std::make_shared<bench::Options>();
  auto* cmd = app.add_subcommand(
      "bench",
      "Google Benchmark suites: patch latency (engine vs sync-core, stop-the-world, "
      "mprotect), invocation cost, executor throughput under toggling; the probe layer's "
      "suite (probes/..., a child process: init, toggle latency, throughput, invocation)");
  cmd->add_option("--tmax-config", opts->tmax_config,
                  "Tmax config file (default: $CROSSMOD_TMAX_CONFIG, then "
                  "configs/tmax/<machine>.toml, else the built-in default, flagged)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--filter", opts->filter, "regex over benchmark names, e.g. 'latency/callpatch_s[0-4]/executors:1$'");
  cmd->add_option("--out", opts->out_dir, "output directory (default: results/<machine>/)");
  cmd->add_flag("--summary", opts->summary,
                "print and store headline ratios (bench-<stamp>-summary.json)");
  cmd->add_option("--min-time", opts->min_time_s,
                  "minimum seconds per benchmark (Google Benchmark --benchmark_min_time)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--smoke", opts->smoke,
                "CI smoke: throughput rates 0, 100k, 1M Hz only and 0.05 s windows");
  cmd->add_option("--max-executors", opts->max_executors,
                  "throughput executors 1..N (default: PUs - 1, at least 1; more "
                  "oversubscribes, with a warning)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--throughput-window", opts->throughput_window_s,
                  "seconds per throughput measurement window (default 0.3)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--list", opts->list, "print the benchmark names (after --filter), run nothing");
  cmd->callback([opts] { exit_code() = bench::run(*opts); });
}

}  // namespace crossmod::harness
