// What a sweep or calibrate run records about itself: git sha, compiler, command line,
// machine context, and the checks done before anything is written (output directory).
// Thread safety: not thread-safe; not async-signal-safe (runs git, reads /proc).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "machine/topology.hpp"

namespace crossmod::harness {
struct SweepConfig;
}

namespace crossmod::harness {

std::string git_sha();          // `git rev-parse HEAD` in CROSSMOD_SOURCE_DIR, or "unknown"
std::string compiler_version(); // __VERSION__
std::string command_line();     // this process's argv joined with spaces (/proc/self/cmdline)
std::string kernel_release();   // uname -r
std::string microcode();        // /proc/cpuinfo "microcode", "" if absent

// sysinfo's machine_context_json() (CPU, microcode, kernel, TSC, topology, c2c) with a
// "slug" key added, as the sweep context embeds it under "machine".
std::string sweep_machine_json(const Topology& topo);

// Throws UsageError if `dir` cannot be created or written; creates nothing.
void check_writable_dir(const std::string& dir, const char* what);
// Throws UsageError if the parent directory of `file` cannot be created or written.
void check_writable_file(const std::string& file, const char* what);
// mkdir -p; throws std::runtime_error.
void make_dirs(const std::string& dir);

}  // namespace crossmod::harness

namespace crossmod::harness {

// The JSON context file beside a sweep CSV (kind "crossmod-sweep-context", schema 1).
struct SweepContext {
  std::string run_kind;     // sweep | calibrate
  std::string config_key;   // --resume continues only a file with the same key
  std::string config_json;  // the resolved config
  std::string preset;       // name or file
  std::string results_csv;  // file name of the CSV beside it
  std::string git_sha, compiler, command;
  std::string started_utc, finished_utc, last_resumed_utc;
  std::string machine_json;
  std::vector<std::string> warnings;
  std::uint64_t cells_planned = 0, cells_run = 0, cells_resumed = 0;
  bool interrupted = false;
  std::string render() const;
};

// The result files of a sweep or calibrate run: on resume, the chosen CSV and its JSON,
// keeping the original start time; otherwise new DIR/sweep-<stamp>.csv/.json (with -2, -3
// ... when the stamp is taken). Sets ctx->started_utc and, on resume, last_resumed_utc.
struct ResultPaths {
  std::string csv, json;
};
ResultPaths choose_result_paths(const std::string& out_dir, const std::string& resume_csv,
                                SweepContext* ctx);

// The fields every run's context shares: run kind, resolved config and its key, preset,
// results file name, git sha, compiler, command line, machine context and warnings.
void describe_run(SweepContext* ctx, const std::string& run_kind, const SweepConfig& cfg,
                  const std::string& preset, const std::string& csv_path, const Topology& topo,
                  const std::vector<std::string>& warnings);


}  // namespace crossmod::harness
