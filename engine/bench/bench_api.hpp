// The entry point of `crossmod bench` (harness/src/bench_cmd.cpp parses the flags; the
// suites and their runner live here, next to the benchmarks, in engine/bench/).
// Thread safety: call run() once, from the main thread.
#pragma once
#include <string>

namespace crossmod::bench {

struct Options {
  std::string tmax_config;  // empty: load_tmax_config_auto()
  std::string filter;       // Google Benchmark regex; empty: every benchmark
  std::string out_dir;      // empty: results/<machine slug>/ relative to the cwd
  bool summary = false;     // print and store the headline ratios
  double min_time_s = 0;    // --benchmark_min_time; 0: Google Benchmark's default (0.5)
  bool smoke = false;       // reduced throughput rate list and window (CI smoke test)
  unsigned max_executors = 0;  // throughput executors 1..N; 0: PUs - 1, at least 1
  double throughput_window_s = 0;  // 0: 0.3 s (0.05 s with smoke)
};

// Runs the suites; returns the process exit code (0 ok, 1 some benchmark failed with an
// error that is not a documented "unsupported" skip). Throws harness::UsageError for bad
// input (unloadable Tmax config) and std::runtime_error for system errors.
int run(const Options& opts);

}  // namespace crossmod::bench
