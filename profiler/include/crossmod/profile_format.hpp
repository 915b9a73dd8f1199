// The profiler's crash-proof data file: one MAP_SHARED, file-backed segment per process
// image (a new one after every execve), written by libcrossmod_profile.so while the
// program runs and read by `crossmod profile` after it ends, however it ends.
// Layout: Header | FuncRecord[max_funcs] | Hist[max_funcs] | ThreadRecord[max_threads] |
// TimelineEntry[cap] | string area. Every field the program writes concurrently is a lock-free 64-bit atomic
// (std::atomic_ref over plain integers, so the layout is the same in both processes).
// Thread safety: the writer side is lock-free; the reader runs after the writer is gone.
#pragma once
#include <cstddef>
#include <cstdint>

namespace crossmod::profile {

inline constexpr char kMagic[8] = {'C', 'M', 'P', 'R', 'O', 'F', '1', '\0'};
inline constexpr std::uint32_t kVersion = 14;  // 2: compensated samples, context-switch split; 3: nest_ticks;
                                               // 4: cold samples, per-window call estimate;
                                               // 5: daemon_cpu_ns; 6: refusals; 7: histograms
                                               // apart from the records; 8: records in lines,
                                               // walks/walked; 9: fixed_sum; 10: setup_cpu_ns,
                                               // setup_repaid_ticks; 11: extra_ticks;
                                               // 12: wakes, wake_cpu_ns, retract_wakes,
                                               // retract_skips; 13: frames_dropped; 14: forks,
                                               // alive_tsc, kFlagForkChild
// Latency histogram: 4 buckets per power of two ("log2-ish"), up to 2^kHistOctaves ticks.
inline constexpr unsigned kHistSub = 4;
inline constexpr unsigned kHistOctaves = 48;
inline constexpr unsigned kHistBuckets = kHistSub * kHistOctaves;

// A probe hit measured longer than this was preempted (or waited on a wordpatch); it is
// counted as this long in the instrumentation time, so the budget is not spent by the
// scheduler. Higher than any toggle we do in a probe function (callpatch: ~250-10,000 ticks).
inline constexpr std::uint64_t kMaxHitTicks = 50'000;

enum class Policy : std::uint32_t { none = 0, paper = 1, budget = 2, converge = 3, full = 4 };
enum class FnState : std::uint64_t {
  on = 0,
  off_sampled = 1,    // took its samples this epoch; back on at the next epoch
  off_budget = 2,     // switched off because a budget was spent; back on next period
  off_converged = 3,  // CI narrow enough: off for good (converge)
  off_focus = 4,      // outside --functions or policy none: never on
};

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_bytes;
  std::uint32_t max_funcs;
  std::uint32_t max_threads;
  std::uint32_t timeline_cap;
  std::uint32_t string_bytes;
  std::uint64_t total_bytes;
  std::uint64_t pid;
  std::uint64_t segment;  // 0 for the first image, n after the n-th execve
  // Policy as the runtime understood it.
  std::uint32_t policy;
  std::uint32_t samples;
  double budget;
  std::uint64_t epoch_ns;
  std::uint64_t period_ns;
  double ci;
  std::uint64_t calib_ticks;    // fixed cost of one active probe hit (0: not calibrated)
  // Per provider (crossmod::probes::Provider value): what an empty function's call measures
  // after compensation, taken off every sample of that provider's functions; negative when
  // the accounted cost of a hit exceeds what a hit adds to an interval (0: not calibrated;
  // tracepoints have no calibration site).
  std::int64_t self_ticks[4];
  // Per provider: what an active call adds to its caller's interval beyond what the
  // accounting charges for its two hits (the layer's path outside the probe functions'
  // rdtsc pairs, less the calibrated fixed cost); taken off a sample once per call of that
  // provider's functions made inside it, signed (0: not calibrated).
  std::int64_t nest_ticks[4];
  std::uint64_t start_tsc;
  // Written by the program while it runs (atomic_ref).
  std::uint64_t end_tsc;        // set at a clean exit (atexit), 0 otherwise
  std::uint64_t nfuncs;
  std::uint64_t nthreads;
  std::uint64_t ntimeline;
  std::uint64_t string_used;
  std::uint64_t probes;         // probes discovered
  std::uint64_t toggles;
  std::uint64_t toggle_ticks;
  // The daemon thread's own CPU time (CLOCK_THREAD_CPUTIME_ID, ns), stored after each wake:
  // everything it does, charged to the budget or not (folds, windows, switch-ons, retraction).
  std::uint64_t daemon_cpu_ns;
  std::uint64_t daemon_instr_ticks;  // budget: the daemon's switch-ons, charged to the budget
  // The runtime's own set-up on the program's threads (CLOCK_THREAD_CPUTIME_ID, ns): its
  // constructor (scan, --trace attach, calibration) and the attach after every dlopen.
  // Instrumentation time under every policy; under budget a debt that later periods repay.
  std::uint64_t setup_cpu_ns;
  std::uint64_t setup_repaid_ticks;  // budget: how much of that debt the periods repaid
  std::uint64_t hits;           // probe-function invocations
  std::uint64_t epochs;         // daemon folds done
  std::uint64_t budget_offs;    // times a spent budget switched a function off
  std::uint64_t capped_hits;    // probe hits whose measured time exceeded kMaxHitTicks
  std::uint64_t toggle_failures;  // activate/deactivate calls that did not return ok
  std::uint64_t last_failure;     // the last such crossmod::probes::Status
  std::uint64_t stale_exits;      // exits whose entry TSC predates the current window
  std::uint64_t retracts;         // tracepoint sites whose jump the daemon removed while off
  std::uint64_t walks;            // the daemon's walks over the function table (one per tick)
  std::uint64_t walked;           // records those walks looked at (the rest were skipped)
  std::uint64_t no_exit_funcs;    // patchable functions whose exit probe stays off (tail calls)
  // The daemon's sleeps: how many ended (tick wakes and retraction-pass wakes), and the CPU
  // time the kernel charged it for them (CLOCK_THREAD_CPUTIME_ID across each sleep, ns):
  // ~40-65 us a wake in the KVM guests here, most of the daemon's CPU time.
  std::uint64_t wakes;
  std::uint64_t wake_cpu_ns;
  std::uint64_t retract_wakes;    // second wakes in a tick, for a retraction pass
  std::uint64_t retract_skips;    // ticks whose retraction pass could not have paid its wake
  // Sampled calls in flight beyond a thread's 64 frames: the oldest frame was dropped (that
  // call's sample goes uncompensated).
  std::uint64_t frames_dropped;
  std::uint64_t dropped_funcs;  // functions beyond max_funcs (not profiled)
  std::uint64_t dropped_threads;
  // Processes forked from this image without an exec (fork, _Fork, clone without CLONE_VM).
  // A child of glibc's fork continues in a segment of its own (kFlagForkChild) with a
  // daemon of its own; one of _Fork or clone adds into this one, without (README, fork).
  std::uint64_t forks;
  // The daemon's last wake: where an image that never exited cleanly ended.
  std::uint64_t alive_tsc;
  std::uint64_t flags;          // kFlag*
  std::uint64_t switch_errno;   // why context switches are not detected (0: they are)
  char note[256];               // one line from the runtime (e.g. tracepoints unsupported)
  // --trace: why functions were not probed, most frequent first ("225 no_trampoline_space
  // (python3.11), ..."), rewritten after every attach; empty when none was refused.
  char refusals[256];
};
inline constexpr std::uint64_t kFlagDaemon = 1;       // the daemon thread started
inline constexpr std::uint64_t kFlagCalibrated = 2;
inline constexpr std::uint64_t kFlagTraceUnsupported = 4;
inline constexpr std::uint64_t kFlagSwitchDetect = 8;  // threads get a perf page (see runtime.cpp)
inline constexpr std::uint64_t kFlagSelfCalibrated = 16;  // << provider (16..128): self_ticks[provider] measured
inline constexpr std::uint64_t kFlagSwitchOff = 256;  // CROSSMOD_PROFILE_NO_SWITCHES: no perf pages
inline constexpr std::uint64_t kFlagNestCalibrated = 512;  // << provider (512..4096): nest_ticks[provider] measured
// The image began as a fork's child (no exec): own_segment_in_child.
inline constexpr std::uint64_t kFlagForkChild = 8192;

// The function's exit probe is left off: it may tail-call (see runtime.cpp, tail_calls).
inline constexpr std::uint32_t kFuncNoExit = 1;

// Batch means over the daemon's epochs: the samples a function took since the last fold
// form one batch (n_b, s_b); the sums give the ratio estimator's variance.
struct Batches {
  std::uint64_t folded_n;       // samples folded so far
  std::uint64_t folded_sum;
  std::uint64_t batches;        // epochs with at least one sample
  double sum_s2;                // sum over batches of s_b^2
  double sum_sn;                // s_b * n_b
  double sum_n2;                // n_b^2
};

// One function's record, laid out in cache lines by who reads them: the daemon's walk
// reads line 0 and `all.folded_n` (line 2) of a function without new calls or samples. In
// the old order (360 bytes, so records did not start at a line boundary) those fields lay
// in five lines. The walk's misses on records were most of its time (perf, java under
// --trace '*' with 51,215 functions); the walk now skips most records (runtime.cpp,
// g_attn), and this keeps the ones it reads to two lines.
struct alignas(64) FuncRecord {
  // Line 0: what the walk and every probe hit read.
  std::uint32_t provider;       // crossmod::probes::Provider value
  std::uint32_t entry_probe;
  std::uint32_t exit_probe;
  std::uint32_t flags;          // kFunc*
  std::uint64_t state;          // FnState
  std::uint64_t calls;          // entry-probe hits (calls observed)
  std::uint64_t samples;        // exit-probe hits with a known entry TSC
  // calls_estimated, window by window: a window runs from a switch-on (its end, win_start)
  // to the switch-off, or to the daemon's next epoch while the function stays on. Its calls
  // are counted; the time after it, while the function is off, gets the window's call rate
  // measured without the instrumentation (its length minus the probe time the threads
  // accounted inside it). est_calls covers the run up to est_until.
  std::uint64_t win_start;      // TSC the current window opened, 0 if none
  std::uint64_t win_calls0;     // `calls` then
  std::uint64_t win_instr0;     // the threads' instr_ticks summed then
  // Line 1: the rest of a hit's work.
  std::uint64_t toggling;       // 1 while a thread changes state + probes (try-lock)
  // Threads (bit: thread index mod 64) that have run the entry / the exit site since the
  // probes last went on; cleared before they go on. See cold_samples.
  std::uint64_t entry_warm;
  std::uint64_t exit_warm;
  std::uint64_t armed_tsc;      // TSC just after the probes last went on; an exit whose
                                // entry TSC is older belongs to an earlier window (stale)
  std::uint64_t sum_ticks;      // sum of sampled durations
  // Sampled durations are compensated: the instrumentation time the thread accounted
  // between the call's entry hit and its exit hit (its own entry hit, every probe hit of
  // the calls it made) is taken off. raw_sum_ticks keeps the durations as timed.
  std::uint64_t raw_sum_ticks;
  std::uint64_t epoch_samples;  // samples since the last reactivation
  std::uint64_t on_since;       // TSC when the entry probe was last switched on, 0 if off
  // Line 2: batch means over daemon epochs (written by the daemon only), all samples.
  Batches all;
  std::uint64_t active_ticks;   // closed active windows
  std::uint64_t toggles;
  // Line 3.
  std::uint64_t offs;           // times the function was switched off
  std::uint64_t est_until;      // TSC est_calls covers up to (0: none yet)
  double est_calls;
  double off_rate;              // calls per tick for the time since est_until, while off
  std::uint64_t uncompensated;  // samples without their entry frame (stack overflowed): raw
  std::uint64_t blind_exits;    // exit hits without an entry TSC (entry not seen: no sample)
  std::uint64_t discovery_exits;  // calls during which this thread discovered a probe (cyg:
                                  // a site's first execution runs the discovery, ~10^5
                                  // ticks, inside the call): not sampled
  std::uint64_t function;       // entry address in this image
  // Line 4. Context switches (the thread's perf page sequence changed between entry and exit):
  std::uint64_t sw_samples;     // samples during which the thread was switched out
  std::uint64_t sw_sum_ticks;
  std::uint64_t unk_samples;    // samples whose thread had no perf page yet (unknown)
  std::uint64_t unk_sum_ticks;
  // Cold samples: the interval held a thread's first run of a probe site switched on since
  // (this call's exit site, or a callee's entry or exit site). A site just written is not
  // in that core's instruction cache: the first run fetches the line from the writer's
  // core. Leaving them out took lab_leaf_200's bias from +23/+37 to +9/+16 ticks (cyg/pfe,
  // latency_lab, 8 threads, --samples 10; profiler/README.md, `cold_samples`). Counted
  // before the switch split: a cold sample is not in sw_ or unk_.
  std::uint64_t cold_samples;
  std::uint64_t cold_sum_ticks;
  std::uint32_t name_off;       // offsets into the string area (NUL-terminated)
  std::uint32_t object_off;
  // The part of the compensation made of calibrated constants, summed over the samples
  // with their entry frame (int64 in two's complement): per sample calib_ticks x the hits
  // charged inside the interval + self_ticks + the callees' nest_ticks. The report takes
  // its mean as the estimate's systematic term (mean_sys_ticks): constants measured hot at
  // start-up, known to move run to run by about their own size.
  std::uint64_t fixed_sum;
  // Line 5: batch means of the samples known to have run without a context switch (on
  // CPU) and not cold (daemon only).
  Batches oncpu;
};
static_assert(sizeof(FuncRecord) == 6 * 64);
static_assert(offsetof(FuncRecord, win_instr0) == 56 && offsetof(FuncRecord, toggling) == 64 &&
              offsetof(FuncRecord, all) == 128 && offsetof(FuncRecord, oncpu) == 320);
// A function's latency histogram (its FuncRecord's index in the Hist array). Apart from
// the record, so that the records of a big --trace pattern are dense: discovery writes
// every function's record before the program starts, and each page it touches in this
// file-backed mapping is a page fault (python3 'Py*': 918 records of 1,896 bytes were ~430
// faults; 360 bytes without the histogram), while a histogram is written only by samples.
struct Hist {
  std::uint64_t n[kHistBuckets];
};

// Student's t quantile at 0.975 for df degrees of freedom (df >= 1), by the Cornish-Fisher
// expansion in 1/df to its third term (Abramowitz & Stegun 26.7.5): within 0.3% of the
// exact quantile from 4 degrees of freedom on (ProfileStats.StudentQuantileMatchesBoost),
// the fewest converge stops at. For the daemon, which must not allocate or throw; the
// launcher's intervals use Boost's exact quantile.
inline double t975(double df) noexcept {
  constexpr double z = 1.959963984540054;  // the normal quantile at 0.975
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4 * df) + (5 * z5 + 16 * z3 + 3 * z) / (96 * df * df) +
         (3 * z7 + 19 * z5 + 17 * z3 - 15 * z) / (384 * df * df * df);
}

// calls_estimated's arithmetic (FuncRecord::win_start), shared by the runtime and the
// reader. The call rate a closed window gives the stretch after it: n calls over its
// length minus the probe time inside it (`probes`, per CPU), n - 1 when it ended at a call
// (`at_call`: its end depends on the calls, its start does not). The accounting can
// overshoot a little, so the bare length is kept at >= 1/64 of the window.
// A window left with no call to count (one that a hit closed at its first call, or one
// closed by an exit before any entry) measured little but how soon it ended, and 1 /
// length is unbounded (infinite in the mean for a Poisson stream). Under budget such
// windows are common: a switch-on finds the period's budget spent and the function's
// first hit switches it off again; a window of 272 ticks, applied to the ~10 ms off
// stretch after it, put latency_lab_cyg's lab_leaf_100k at 4-57 times its calls (every run
// of both Xeon evaluations, 27 Nov). Such a window joins kRatePrior calls at `prev`, the
// rate the function's previous window left: (n + 5) / (bare + 5 / prev), the mean rate of
// a Poisson stream given the window and a prior worth five calls at that rate (its n,
// not n - 1: the likelihood of n calls in a length does not depend on what ended it).
// Only then: a prior on every window held bursty functions (python3's, ten calls in a few
// hundred ticks after a quiet stretch) near their first rate, 0.00-0.03 of their calls
// (calls_ab.py, a trial build, 28 Nov). Five, not fewer: in the simulation of
// report_test.cpp's CallsEstimateHoldsUnderBudgetWindows (redone in a trial script, not
// kept, 100 runs), a run's estimate was +8% off in the median with a prior of two calls,
// +3% with five, +1% with ten; the more, the slower the rate follows a change of phase.
inline constexpr double kRatePrior = 5;
inline double window_rate(double n, double len, double probes, bool at_call, double prev) noexcept {
  const double bare = len - probes > len / 64 ? len - probes : len / 64;
  const double e = at_call ? (n >= 1 ? n - 1 : 0) : n;
  if (e >= 1 || prev <= 0) return e / bare;
  return (n + kRatePrior) / (bare + kRatePrior / prev);
}
// The estimate at `end` of a function's calls: the calls observed if it was never
// switched off; else the closed windows' calls and stretches (est_calls, up to est_until)
// plus the tail (an open window's calls, or the last rate up to the end), never below the
// calls observed.
inline double calls_estimate(const FuncRecord& f, std::uint64_t end) noexcept {
  const double observed = static_cast<double>(f.calls);
  if (f.offs == 0) return observed;
  double e = f.est_calls;
  if (f.win_start != 0)
    e += f.calls > f.win_calls0 ? static_cast<double>(f.calls - f.win_calls0) : 0.0;
  else if (f.est_until != 0 && end > f.est_until)
    e += f.off_rate * static_cast<double>(end - f.est_until);
  return e > observed ? e : observed;
}

struct ThreadRecord {
  std::uint64_t tid;
  std::uint64_t calls;
  std::uint64_t samples;
  std::uint64_t sum_ticks;
  std::uint64_t instr_ticks;
  std::uint64_t budget_hits;  // hits that found this thread's budget spent
  // What the hits cost beyond instr_ticks: each hit's share of its provider's nest_ticks
  // (Header::nest_ticks: what a call adds to its caller beyond its two hits' charge).
  // Charged to the budget and reported with instr_ticks; not taken off samples (the
  // compensation takes nest_ticks off per nested call itself).
  std::uint64_t extra_ticks;
  // One cache line per thread: every probe hit adds to its thread's record, and with
  // records sharing lines those adds fetched the line from the core of another thread
  // (false sharing) inside sampled intervals, after the hit's accounting had stopped.
  std::uint64_t pad[1];
};
static_assert(sizeof(ThreadRecord) == 64);

struct TimelineEntry {
  std::uint64_t tsc;           // end of the period
  std::uint64_t instr_ticks;   // spent in the period, all threads
  std::uint64_t threads;       // threads that hit a probe in the period
  std::uint64_t active_probes;  // probes on at the end of the period
  std::uint64_t period_ticks;
  std::uint64_t cpu_ticks;     // process CPU time in the period (CLOCK_PROCESS_CPUTIME_ID)
};

struct Layout {
  std::size_t funcs, hists, threads, timeline, strings, total;
};
constexpr std::size_t align64(std::size_t n) { return (n + 63) & ~std::size_t{63}; }
constexpr Layout layout(std::uint32_t max_funcs, std::uint32_t max_threads,
                        std::uint32_t timeline_cap, std::uint32_t string_bytes) {
  Layout l{};
  l.funcs = align64(sizeof(Header));
  l.hists = align64(l.funcs + sizeof(FuncRecord) * max_funcs);
  l.threads = align64(l.hists + sizeof(Hist) * max_funcs);
  l.timeline = align64(l.threads + sizeof(ThreadRecord) * max_threads);
  l.strings = align64(l.timeline + sizeof(TimelineEntry) * timeline_cap);
  l.total = align64(l.strings + string_bytes);
  return l;
}

// Bucket of a duration: octave o = floor(log2(d)), sub-bucket from the next two bits.
// Lower edge of bucket b: (4 + b%4) << (b/4) >> 2 for b >= 8; buckets 0..7 hold 0..7 exactly
// in effect (d < 8 maps to bucket d with the formula below).
constexpr unsigned hist_bucket(std::uint64_t d) {
  if (d < 8) return static_cast<unsigned>(d);
  unsigned o = 63u - static_cast<unsigned>(__builtin_clzll(d));  // >= 3
  unsigned sub = static_cast<unsigned>((d >> (o - 2)) & 3u);
  unsigned b = o * kHistSub + sub - 4;  // o=3 -> 8..11
  return b < kHistBuckets ? b : kHistBuckets - 1;
}
constexpr std::uint64_t hist_lower(unsigned b) {
  if (b < 8) return b;
  unsigned o = (b + 4) / kHistSub;
  unsigned sub = (b + 4) % kHistSub;
  return (std::uint64_t{4} + sub) << (o - 2);
}
static_assert(hist_bucket(7) == 7 && hist_bucket(8) == 8 && hist_bucket(10) == 9);
static_assert(hist_lower(hist_bucket(1000)) <= 1000 && hist_lower(hist_bucket(1000) + 1) > 1000);
static_assert(hist_lower(9) == 10 && hist_lower(12) == 16);

}  // namespace crossmod::profile
