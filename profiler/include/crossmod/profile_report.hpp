// The launcher's half of `crossmod profile`: metric description files (TOML), reading and
// merging the runtime's segment files, statistics, and the report writers (JSON, CSV,
// folded, the stderr table). Used by harness/src/commands/profile_cmd.cpp.
// Thread safety: none needed (the launcher's main thread). Errors: status + message, no throw.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "crossmod/profile_format.hpp"

namespace crossmod::profile {

// One metric of a description file (Paradyn-MDL style: what, per what, over which focus).
struct MetricSpec {
  std::string name;
  std::string kind = "count";  // count | latency | histogram
  std::string per = "function";  // function | thread | total
  std::string functions = "*";  // fnmatch over the demangled name
  std::string object = "*";     // fnmatch over the object path
  std::string thread = "*";     // fnmatch over the decimal thread id (per = thread)
  std::string description;
  std::string file;
};
// Parses one file and appends its metrics. false + one line in *err on any problem:
// syntax (with the line), an unknown key, a bad value, a duplicate name (across files too).
bool load_metrics(const std::string& path, std::vector<MetricSpec>* out, std::string* err);

struct PolicyInfo {
  std::string name = "budget";
  double budget = 0.05, period_s = 0.01, epoch_s = 0.01, ci = 0.05;
  unsigned samples = 10;
};

// The machine's gaps: stretches in which a thread that neither slept nor was switched out
// still did not run (a hypervisor that took the vCPU, an interrupt), measured by the
// launcher in a bare rdtsc loop on its own thread, before the program starts and after it
// ends (so never beside it). A function's sampled calls hold a Poisson number of them: when
// their expected number is small (on the Intel guest 6-49 us on average a gap, 1.5-5% of
// the time, 500-5,400 a second: 5th-95th percentile of 532 evaluation runs; calls of
// 10^2-10^5 ticks), a run often draws fewer
// than the truth holds, its mean is short by their share, and the samples' spread, with no
// gap among them to widen it, gives an interval that misses (profiler/README.md, Known
// problems 1). The bounds add that share of the mean to their upper end (gap_term).
struct MachineGaps {
  std::uint64_t threshold_ticks = 0;  // a step of the loop longer than this is a gap (1 us)
  double spin_ticks = 0;              // elapsed ticks of the chunks kept (gaps included)
  double gap_ticks = 0;               // summed length of the gaps in them
  double gap_sq = 0;                  // summed squares of those lengths
  std::uint64_t gaps = 0;
  unsigned chunks = 0, dropped = 0;  // 1 ms chunks measured; dropped: the thread was switched out
  double share() const { return spin_ticks > 0 ? gap_ticks / spin_ticks : 0.0; }
  // The share's upper 97.5% bound: the summed lengths of a Poisson number of gaps have
  // variance rate x E[length^2], estimated by gap_sq (40 ms hold ~20-200 gaps here, so the
  // share alone is uncertain by ~10-30%: taken as it is, a short function's bound, which
  // the term decides, covered in 71% of the simulated runs; report_test.cpp).
  double share_hi() const {
    return spin_ticks > 0 ? (gap_ticks + 1.959963984540054 * std::sqrt(gap_sq)) / spin_ticks : 0.0;
  }
  void add(const MachineGaps& o);
};
// Spins `chunks` chunks of 1 ms on the calling thread (hz: TSC ticks per second). A chunk
// in which getrusage(RUSAGE_THREAD) counts a context switch is dropped: a switch is not a
// gap of the kind on-CPU samples hold. Never fails; chunks == 0 or hz <= 0 measures nothing.
MachineGaps measure_gaps(unsigned chunks, double hz) noexcept;
// What a bound adds to its upper end for a mean `mean`: the gaps' share of the running
// time it would have held, s / (1 - s) x mean with s = share_hi() (the measured share is of
// elapsed time, gaps included); 0 when nothing was measured.
double gap_term(double mean, const MachineGaps& g);

struct RunInfo {
  std::vector<std::string> command;
  PolicyInfo policy;
  std::string exit_kind = "exit";  // exit | signal | spawn_failed
  int status = 0;                  // exit status, or 128 + signal
  int signal = 0;
  double wall_s = 0, user_s = 0, sys_s = 0, tsc_hz = 0;
  std::uint64_t start_tsc = 0, end_tsc = 0;  // the launcher's, around the child's life
  MachineGaps gaps;                          // before the program and after it
  std::vector<std::string> notes;
};

// Batch sums of one mean (see profile_format.hpp, Batches) and the estimate made from them.
struct MeanEstimate {
  std::uint64_t n = 0, sum = 0, batches = 0;
  double s2 = 0, sn = 0, n2 = 0;
  double mean = 0, lo = 0, hi = 0;
  bool has_ci = false;
  // Adds one segment's record: its folded batches `b` plus what came after the last fold
  // (the record's n_total samples summing to sum_total).
  void add(std::uint64_t n_total, std::uint64_t sum_total, const Batches& b);
  void finish();  // mean and the batch-means t interval (>= 2 batches)
};

struct FunctionStats {
  std::string name, object, provider;
  std::uint64_t address = 0;
  std::uint64_t calls_observed = 0, samples = 0, toggles = 0;  // samples == all.n
  std::uint64_t raw_sum_ticks = 0, uncompensated = 0, blind_exits = 0, discovery_exits = 0;
  std::uint64_t sw_samples = 0, unk_samples = 0;  // switched out during the call / unknown
  std::uint64_t cold_samples = 0;  // a site run for the first time since switched on (FuncRecord)
  double calls_estimated = 0, active_ticks = 0, run_ticks = 0;
  // FuncRecord::fixed_sum over the compensated samples (samples - uncompensated). sys():
  // the mean of it, unsigned, the systematic term of the intervals (mean_sys_ticks).
  std::int64_t fixed_sum = 0;
  bool has_sys() const { return samples > uncompensated; }
  double sys() const {
    const double m = has_sys() ? static_cast<double>(fixed_sum) / static_cast<double>(samples - uncompensated) : 0.0;
    return m < 0 ? -m : m;
  }
  double mean = 0, ci_lo = 0, ci_hi = 0, p50 = 0, p99 = 0, share = 0;
  bool has_ci = false, converged = false, exit_probe = true;
  // In every image: an entry probe that was on from the function's discovery to the end
  // (never switched off, state on): a call would have been seen (never_called below).
  bool always_on = true;
  MeanEstimate all;    // every sample (compensated); mean/ci_* above are its results
  MeanEstimate oncpu;  // samples known to have run without a context switch
  std::vector<std::uint64_t> hist;
};
struct ThreadStats {
  std::uint64_t tid = 0, segment = 0, calls = 0, samples = 0, sum_ticks = 0, instr_ticks = 0, budget_hits = 0;
};
struct TimelinePoint {
  double t_s = 0, instr_share = 0;
  std::uint64_t active_probes = 0, threads = 0;
};
struct ProfileData {
  unsigned segments = 0;
  std::uint64_t probes = 0, toggles = 0, toggle_ticks = 0, instr_ticks = 0, calib_ticks = 0;
  std::uint64_t dropped_funcs = 0, dropped_threads = 0, threads = 0, budget_offs = 0, capped_hits = 0, stale_exits = 0;
  std::uint64_t frames_dropped = 0;  // Header::frames_dropped, summed
  // Header::forks, summed (children forked without an exec), and how many of them had a
  // segment of their own (kFlagForkChild); the rest shared their parent's.
  std::uint64_t forks = 0;
  unsigned fork_segments = 0;
  std::uint64_t retracts = 0;  // Header::retracts
  std::uint64_t walks = 0, walked = 0;  // Header::walks, walked (summed over segments)
  std::uint64_t daemon_cpu_ns = 0;  // Header::daemon_cpu_ns, summed over segments
  std::uint64_t setup_cpu_ns = 0;   // Header::setup_cpu_ns, summed over segments (also in instr_ticks)
  std::uint64_t setup_repaid_ticks = 0;  // Header::setup_repaid_ticks, summed over segments
  std::uint64_t extra_ticks = 0;    // ThreadRecord::extra_ticks, summed (also in instr_ticks)
  std::uint64_t wakes = 0, wake_cpu_ns = 0, retract_wakes = 0, retract_skips = 0;  // Header's, summed
  std::int64_t self_ticks[4] = {};  // per provider (Header::self_ticks)
  bool self_calibrated[4] = {};
  std::int64_t nest_ticks[4] = {};  // per provider (Header::nest_ticks)
  bool nest_calibrated[4] = {};
  bool switch_off = false;           // CROSSMOD_PROFILE_NO_SWITCHES
  bool switch_detect = false;        // some segment's threads had perf pages
  std::uint64_t switch_errno = 0;    // why not, when not
  std::vector<FunctionStats> functions;  // merged over segments by (object, name)
  // Functions found whose entry probe was on the whole time and saw no call (set_aside_never_called).
  std::uint64_t never_called = 0;
  bool never_called_listed = true;  // still in `functions` (--all-functions)
  std::vector<std::pair<std::string, std::uint64_t>> never_called_by_object;  // sorted by object
  std::vector<ThreadStats> threads_list;
  std::vector<TimelinePoint> timeline;
  std::vector<std::string> notes;
};

// "perf" when samples were split by context switches, else "unavailable: <why>".
std::string switch_detection(const ProfileData& d);

// Reads raw/segment-N.bin of `dir` in order; never fails (problems become notes).
ProfileData read_segments(const std::string& raw_dir, const RunInfo& run);

// A function is never called when its entry probe was on from its discovery to the end
// and saw no call: no calls observed or estimated, no sample, no exit of any kind. Counts
// them (per object) and, unless `list`, takes them out of d->functions: a big program
// under --trace '*' finds tens of thousands that it never calls (java: 41,509 of 51,215,
// 50 of the report's 68 MB). A function ever switched off, or off from the start (policy
// none, out of the focus), stays listed: its calls may have gone unseen.
void set_aside_never_called(ProfileData* d, bool list);
bool never_called(const FunctionStats& s);

// Statistics over merged counters: estimates, batch-means interval, percentiles, shares.
void finish_stats(ProfileData* d, const RunInfo& run);

nlohmann::json report_json(const ProfileData& d, const RunInfo& run, const std::vector<MetricSpec>& metrics);
std::string report_csv(const ProfileData& d);
std::string report_folded(const ProfileData& d);
std::string report_table(const ProfileData& d, const RunInfo& run, std::size_t top);

// Paths of the two libraries the launcher preloads (build tree).
const char* probes_library();
const char* profile_library();

}  // namespace crossmod::profile
