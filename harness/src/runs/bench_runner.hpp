// The entry point of `crossmod bench` (bench_cmd.cpp parses the flags). The runner is
// harness code; the suites it drives are engine/bench/, which depends only on the engine.
// Thread safety: call run() once, from the main thread.
//
// Output contract (crossmod_schema_version 1), all in DIR/bench-<stamp>*:
//  .json          Google Benchmark JSON. context: crossmod_schema_version, machine_slug,
//                 tsc_hz, tsc_source, tmax_ticks, tmax_source, tmax_is_default,
//                 patcher_pu, executor_pus, rdtscp_bracket_ticks, topology, bench_mode...
//    latency/<op>/executors:<0|1>    ticks_mean ticks_p50 ticks_p90 ticks_p99 ns_mean
//                                    samples (wordpatch_async_batch16: ticks_batch_mean)
//      op: wordpatch_inline_activate, wordpatch_inline_deactivate,
//          wordpatch_straddle_s1..s4, wordpatch_async_batch16 (per site), callpatch_s0..s4,
//          synccore_straddle_s1..s4, stop_the_world, mprotect_callpatch,
//          mprotect_raw_callpatch
//    invoke/<variant>                ns_per_call ticks_per_call
//      variant: empty_loop, direct_call, flag_guard_off, flag_guard_on, active_site,
//               nop5_site, nop5_prefixed_site, callpatch_off_s0..s4
//    throughput/<callpatch|wordpatch>/rate:<hz>/executors:<n>
//                                    calls_per_s achieved_toggles_per_s state_a_fraction
//                                    imbalance calls_per_s_rel window_s straddle
//    A benchmark the machine cannot run has error_message "unsupported: ...".
//  -latency.csv   benchmark,op,executors,sample_ticks,count: the samples (<= 20000 per
//                 benchmark) as one row per distinct value with how often it occurred
//  -summary.json  with --summary: headline ratios, each with numerator and denominator.
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
  bool list = false;        // print the benchmark names (after --filter) and run nothing
};

// Runs the suites; returns the process exit code (0 ok, 1 some benchmark failed with an
// error that is not a documented "unsupported" skip). Throws harness::UsageError for bad
// input (unloadable Tmax config) and std::runtime_error for system errors.
int run(const Options& opts);

}  // namespace crossmod::bench
