// libcrossmod_profile.so: the in-process half of `crossmod profile` (PLDI'16 section 9's
// rapid-toggling latency profiler, with a DIME*-style time budget). Preloaded after
// libcrossmod_probes.so; configured by the CROSSMOD_PROFILE_* environment (profiler/README.md).
// It times every call between an entry and an exit probe, switches a function's probes off
// when its sample quota or the budget is spent, and a daemon thread switches them back on
// once per epoch / period. Everything lands in a MAP_SHARED file (profile_format.hpp) so
// the launcher can read it however the program ends.
// Thread safety: the probe functions take no lock and allocate nothing (relaxed atomics
// on preallocated records, initial-exec TLS); discovery takes g_mutex (probes' discovery
// is not an invocation path). Nothing here is async-signal-safe; no signal handler is set.
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <fnmatch.h>
#include <pthread.h>
#include <sched.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include <Zydis/Zydis.h>

#include "crossmod/probes.hpp"
#include "crossmod/profile_format.hpp"
#include "runtime_internal.hpp"

namespace crossmod::profile {
namespace {

namespace cp = crossmod::probes;

inline std::uint64_t rdtsc() noexcept {
  std::uint32_t lo, hi;
  asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (std::uint64_t{hi} << 32) | lo;
}

template <class T>
inline std::atomic_ref<T> A(T& v) noexcept {
  return std::atomic_ref<T>(v);
}
inline void add(std::uint64_t& v, std::uint64_t d) noexcept {
  A(v).fetch_add(d, std::memory_order_relaxed);
}
inline std::uint64_t ld(std::uint64_t& v) noexcept { return A(v).load(std::memory_order_relaxed); }

// Stderr only: the profiler never writes to the program's stdout.
void warn(const char* what) noexcept {
  char buf[512];
  int n = std::snprintf(buf, sizeof buf, "crossmod profile: %s\n", what);
  if (n > 0) (void)!write(2, buf, static_cast<std::size_t>(std::min(n, 511)));
}

struct Config {
  Policy policy = Policy::budget;
  std::uint32_t samples = 10;
  double budget = 0.05;
  std::uint64_t epoch_ns = 10'000'000;
  std::uint64_t period_ns = 10'000'000;
  double ci = 0.05;
  double tsc_hz = 0;
  const char* functions = "*";
  const char* trace = nullptr;
  const char* trace_object = nullptr;
  const char* dir = nullptr;
  std::uint32_t max_funcs = 16384;  // the launcher's --max-functions
  std::uint32_t max_threads = 1024;
  std::uint32_t timeline_cap = 1u << 16;
  std::uint32_t string_bytes = 8u << 20;
  // Tests only (CROSSMOD_PROFILE_TEST_OFF_STALL_US): a switch-off sleeps this long between
  // its entry and its exit toggles, as a thread preempted there would (ProfileStats.
  // ExitsOfUnseenCallsWhileSwitchingOffAreNoSamples).
  std::uint64_t test_off_stall_ns = 0;
};

Config g_cfg;
Header* g_hdr = nullptr;
FuncRecord* g_funcs = nullptr;
Hist* g_hists = nullptr;  // g_hists[i]: g_funcs[i]'s latency histogram
ThreadRecord* g_threads = nullptr;
TimelineEntry* g_timeline = nullptr;
char* g_strings = nullptr;

// Probe id -> function slot + 1 (0: not ours). Written at discovery, read on every hit.
std::atomic<std::uint32_t> g_slot[cp::kMaxProbes];
// A function can have several probes of one kind: -finstrument-functions instruments every
// inlined copy of a function, and each copy's hook call is its own cyg site and probe
// (kvpipe_cyg: 107 entry sites for 23 functions). FuncRecord::entry_probe / exit_probe
// hold the newest; g_next_probe[id] is the probe of the same function and kind found before
// id (+ 1; 0 ends the list). Linked under g_mutex (the next link before the head), walked by
// the toggles under the function's toggle lock and by the daemon; never unlinked.
std::atomic<std::uint32_t> g_next_probe[cp::kMaxProbes];

template <class Fn>
inline void for_each_probe(std::uint32_t& head, Fn&& fn) {
  for (cp::ProbeId id = A(head).load(std::memory_order_acquire);
       id != cp::kNoProbe && id < cp::kMaxProbes;) {
    fn(id);
    const std::uint32_t next = g_next_probe[id].load(std::memory_order_acquire);
    id = next == 0 ? cp::kNoProbe : next - 1;
  }
}
inline std::uint32_t probe_count(std::uint32_t& head) noexcept {
  std::uint32_t n = 0;
  for_each_probe(head, [&](cp::ProbeId) { ++n; });
  return n;
}
inline bool in_list(std::uint32_t& head, cp::ProbeId id) noexcept {
  bool found = false;
  for_each_probe(head, [&](cp::ProbeId p) { found = found || p == id; });
  return found;
}
// Under g_mutex.
inline void link_probe(std::uint32_t& head, cp::ProbeId id) noexcept {
  const cp::ProbeId old = A(head).load(std::memory_order_relaxed);
  g_next_probe[id].store(old == cp::kNoProbe ? 0 : old + 1, std::memory_order_release);
  A(head).store(id, std::memory_order_release);
}
std::mutex g_mutex;  // discovery: slot allocation, string area, the map below
std::unordered_map<std::uintptr_t, std::uint32_t>* g_by_function = nullptr;

// Budget state: the period number (bumped by the daemon) and the time all threads spent
// in it; threads notice a new period by comparing with their TLS copy.
std::atomic<std::uint64_t> g_period{1};
std::atomic<std::uint64_t> g_period_spent{0};
// The runtime's set-up not yet repaid (ticks; charge_setup adds, the daemon repays).
std::atomic<std::uint64_t> g_setup_debt{0};
// The daemon's walk looks only at the functions marked here (one byte per slot, process
// memory): a function is marked when it is found, when it is switched off (it waits for a
// switch-on), and by the first call of each of its call-rate windows; the walk unmarks a
// function that is on and has neither calls in its window nor samples to fold. A big
// program's table is mostly functions that are on and not being called (java under
// --trace '*': 41,397 of 51,215 never called), and the walk used to read every record
// every tick (profiler/README.md, Known problems, big programs). nullptr: walk them all.
std::atomic<std::uint8_t>* g_attn = nullptr;
constexpr std::uint8_t kMarkLook = 1;  // walk it
constexpr std::uint8_t kMarkOff = 2;   // only a switch-on to do (set by the walk alone)
// The epoch the daemon last began (its TSC and the threads' accounted probe time then):
// a window that had no call when that epoch began starts there at its first call, as the
// walk used to restart windows without calls at every epoch.
std::atomic<std::uint64_t> g_epoch_tsc{0};
std::atomic<std::uint64_t> g_epoch_instr{0};
std::atomic<std::uint64_t> g_period_threads{0};
// Per thread: budget x period (wall). Process-wide: budget x the CPU time the process got in
// the previous period (budget x period x online CPUs in the first), so that on a loaded
// machine the process cap follows the CPU the program really gets. A thread over its cap
// switches off the function it hits for every thread (probes are process-wide), so the
// budget is an upper bound, not a target.
std::uint64_t g_thread_cap = 0;
std::atomic<std::uint64_t> g_process_cap{0};
std::atomic<bool> g_stopping{false};

cp::ProbeId g_calib_entry = cp::kNoProbe, g_calib_exit = cp::kNoProbe;          // patchable
cp::ProbeId g_calib_cyg_entry = cp::kNoProbe, g_calib_cyg_exit = cp::kNoProbe;  // cyg
cp::ProbeId g_calib_tp_entry = cp::kNoProbe, g_calib_tp_exit = cp::kNoProbe;    // tracepoint (--trace)
// The program has patchable-entry probes (found by the start-up scan, the only one: objects
// dlopened later are not scanned), so their provider's remainders are worth calibrating.
std::atomic<bool> g_patchable_probes{false};
// While calibrate_self runs, the calibration site's probes map to this record (g_slot value
// kCalibSlot), so it is timed by the real on_entry / on_exit.
constexpr std::uint32_t kCalibSlot = UINT32_MAX;
FuncRecord g_calib_rec{};
// Header::self_ticks, read on every sample: subtracted from the compensated duration.
std::int64_t g_self[4] = {};
// Header::nest_ticks, added to Tls::nest on every entry of a function with an exit probe.
std::int64_t g_nest[4] = {};
// Per provider: what finish() charges a hit beyond its measured time and calib_ticks,
// half of a positive nest_ticks (a call is two hits); 0 until calibrate_self has run.
std::uint64_t g_hit_extra[4] = {};
// calibrate_self: the signed sum of raw - accounted over the calibration site's samples
// (the stored durations are clamped at 0 and would hide an over-subtraction).
std::int64_t g_calib_signed = 0;

// While the constructor replays the probes found before main, patchable exit probes are
// held back here (slot, probe id) until every patchable function is known: see tail_calls.
bool g_defer_exits = false;
std::vector<std::pair<std::uint32_t, cp::ProbeId>>* g_pending_exits = nullptr;
// (slot, probe) of tracepoints found on during the start-up attach; null outside it.
std::vector<std::pair<std::uint32_t, cp::ProbeId>>* g_pending_tps = nullptr;

// The sampled calls a thread has in flight: on_entry pushes one, on_exit finds it by the
// entry TSC the probes layer hands back (unique per thread). Frames above the match are
// calls left by longjmp or an exception; they are dropped. A frame holds what the thread
// had accounted as instrumentation time at the entry (compensation: the exit takes off what
// was accounted in between) and its context-switch sequence (see switch_seq).
struct Frame {
  std::uint64_t tsc;
  std::uint64_t instr;
  std::uint64_t seq;
  std::int64_t nest;  // Tls::nest at the entry, before this call's own share
  std::uint64_t cold;  // Tls::cold after the entry's own check
  std::uint64_t hits;  // Tls::hits before the entry's own charge
  FuncRecord* fn;  // the call's function (see drop_stale_frames)
};
constexpr std::uint32_t kFrames = 64;
constexpr std::uint64_t kSeqUnknown = ~std::uint64_t{0};
Frame* g_frames = nullptr;  // max_threads x kFrames, mapped at start
// Per thread (index of its ThreadRecord): the mmap page of a perf software counter bound
// to the thread. The kernel rewrites the page, under its sequence word `lock`, every time
// the thread is scheduled in, so a changed `lock` between a call's entry and exit means the
// thread left the CPU in between (checked here: one change per context switch, as many as
// getrusage's ru_nvcsw + ru_nivcsw). The daemon opens them (no syscall on a probe path);
// a thread has none for its first epoch.
std::atomic<const std::uint32_t*>* g_seq_pages = nullptr;

struct Tls {
  ThreadRecord* rec;
  std::uint64_t period;
  std::uint64_t spent;
  std::uint64_t pending;  // budget: this period's cost not yet added process-wide (finish)
  Frame* frames;  // nullptr beyond max_threads: samples go uncompensated
  const std::uint32_t* seq_page;
  std::uint64_t discovered_tsc;  // TSC at the end of this thread's last discovery callback
  // Sum of nest_ticks over the thread's active entries (one per call with an exit probe):
  // the exit takes off what its callees added (see Header::nest_ticks).
  std::int64_t nest;
  std::uint64_t cold;  // first runs of just-activated sites by this thread (see cold_samples)
  std::uint64_t hits;  // hits charged (finish): each added calib_ticks to instr_ticks
  std::uint32_t index;
  std::uint32_t depth;  // frames in use: frames[(base + i) % kFrames], i < depth, oldest first
  std::uint32_t base;
  bool registered;
  bool shared_rec;  // another thread (or process) may add to *rec too: own_add locks
};
ThreadRecord g_spare_thread{};  // shared by threads beyond max_threads
__attribute__((tls_model("initial-exec"))) thread_local Tls t_tls{};

// The thread's frames are a ring: when all kFrames are in use the oldest is dropped
// (overhead.frames_dropped; that call's exit finds no frame and is timed raw). Frames of
// calls whose exit never comes (an exit probe switched off, or lost, while the call ran)
// sit under later ones until an older call's exit clears them; with a fixed stack they
// used to fill it, after which no call of the thread was compensated.
inline Frame& top_frame(Tls& t) noexcept { return t.frames[(t.base + t.depth - 1) % kFrames]; }
// The newest frames of calls that cannot give a sample any more: their function is off
// now (its exit probe went off while the call ran: a budget switch-off at the call's own
// entry hit, a switch-off by another thread, by converge), or it was switched on again
// since the call began (armed_tsc), which makes the call's exit stale if it comes at all.
// Left, such frames sat under the frames of later calls until an older call's exit: under
// a long-lived caller (sqlite3VdbeExec, python3's eval loop) the budget's filled the stack
// and every later sample went raw; kvpipe_cyg's 8 threads dropped ~600 frames a run under
// paper. Reads lines 0 and 1 of the function's record, which its hits
// read too.
inline void drop_stale_frames(Tls& t) noexcept {
  while (t.depth > 0) {
    const Frame& fr = top_frame(t);
    if (A(fr.fn->state).load(std::memory_order_relaxed) == static_cast<std::uint64_t>(FnState::on) &&
        A(fr.fn->armed_tsc).load(std::memory_order_relaxed) <= fr.tsc)
      return;
    --t.depth;
  }
}
inline void push_frame(Tls& t, const Frame& fr) noexcept {
  if (t.depth == kFrames) [[unlikely]] {
    t.base = (t.base + 1) % kFrames;
    --t.depth;
    add(g_hdr->frames_dropped, 1);
  }
  ++t.depth;
  top_frame(t) = fr;
}

Tls& tls() noexcept {
  Tls& t = t_tls;
  if (!t.registered) [[unlikely]] {
    t.registered = true;
    const std::uint64_t i = A(g_hdr->nthreads).fetch_add(1, std::memory_order_relaxed);
    if (i < g_cfg.max_threads) {
      t.rec = &g_threads[i];
      t.index = static_cast<std::uint32_t>(i);
      t.frames = g_frames != nullptr ? g_frames + i * kFrames : nullptr;
      A(t.rec->tid).store(static_cast<std::uint64_t>(syscall(SYS_gettid)), std::memory_order_release);
    } else {
      add(g_hdr->dropped_threads, 1);
      t.rec = &g_spare_thread;
      t.shared_rec = true;
      t.index = UINT32_MAX;
    }
  }
  return t;
}

// Adds to a field of the thread's own record. Only its thread writes there, so a load and
// a store do, without the lock prefix of a fetch_add (five such adds per sampled call;
// python3 under full took 0.888x the CPU time without them: profiler/README.md, How it
// works): except on a record shared with another thread or process (g_spare_thread; the
// forking thread's after a fork without exec).
inline void own_add(const Tls& t, std::uint64_t& v, std::uint64_t d) noexcept {
  if (t.shared_rec) [[unlikely]] {
    add(v, d);
    return;
  }
  A(v).store(A(v).load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
}

// fork: perf mappings are not inherited (the kernel marks them VM_DONTCOPY), so the child
// must forget every page its parent had, or its first sample reads an unmapped page
// (SIGSEGV, seen). The child runs only the forking thread; its calls in flight then count
// as unknown, and it gets no new pages (no daemon in a forked child).
// Until the child handler runs, the child already runs code: glibc's fork returns from
// _Fork and calls _IO_list_resetlock first, and with --trace '*' their probes fired and
// read the page (the child of every fork died of SIGSEGV: bash under --trace '*' 'full'
// through pyenv's shims). So from the prepare handler to the parent's or the child's
// handler no thread reads a page (g_forking; its samples in that window are unknown).
// The forking thread's record is the child's thread's too (the segment is MAP_SHARED), so
// from then on both add to it with locked adds (Tls::shared_rec, own_add).
std::atomic<bool> g_forking{false};
void forking_prepare() noexcept { g_forking.store(true, std::memory_order_relaxed); }
void forking_parent() noexcept {
  t_tls.shared_rec = true;
  g_forking.store(false, std::memory_order_relaxed);
}
void forget_switch_pages_in_child() noexcept {
  // Counted in the parent's segment, which the child still maps here (a lock-free add:
  // async-signal-safe, as the _Fork and clone paths need): the report's exit.forks.
  if (g_hdr != nullptr) add(g_hdr->forks, 1);
  t_tls.shared_rec = true;
  t_tls.seq_page = nullptr;
  if (g_seq_pages != nullptr)
    for (std::uint32_t i = 0; i < g_cfg.max_threads; ++i) g_seq_pages[i].store(nullptr, std::memory_order_relaxed);
  g_forking.store(false, std::memory_order_relaxed);
}

// The thread's context-switch sequence, kSeqUnknown while the daemon has not given it a page.
inline std::uint64_t switch_seq(Tls& t) noexcept {
  if (g_forking.load(std::memory_order_relaxed)) [[unlikely]] return kSeqUnknown;
  if (t.seq_page == nullptr) [[unlikely]] {
    if (t.index == UINT32_MAX || g_seq_pages == nullptr) return kSeqUnknown;
    t.seq_page = g_seq_pages[t.index].load(std::memory_order_acquire);
    if (t.seq_page == nullptr) return kSeqUnknown;
  }
  return __atomic_load_n(t.seq_page, __ATOMIC_ACQUIRE);
}

void check(cp::Status s) noexcept {
  if (s == cp::Status::ok) return;
  add(g_hdr->toggle_failures, 1);
  A(g_hdr->last_failure).store(static_cast<std::uint64_t>(s), std::memory_order_relaxed);
}

// Switches a function's probes off if it is on; the thread that wins the state change
// does the toggles. Entry first, so a call that starts now is not half-timed.
// State change and toggles of one function happen under its `toggling` flag, so the
// daemon's switch-on and a thread's switch-off cannot interleave (a switch-off whose
// toggles landed after the daemon's reactivation would leave the state on and the probes
// off). Probe functions only try the flag: when it is taken they skip, the next hit retries.
bool try_toggle_lock(FuncRecord& f) noexcept {
  std::uint64_t z = 0;
  return A(f.toggling).compare_exchange_strong(z, 1, std::memory_order_acquire);
}
void toggle_unlock(FuncRecord& f) noexcept { A(f.toggling).store(0, std::memory_order_release); }

// calls_estimated, window by window (FuncRecord::win_start). All under the toggle lock.

// The daemon's busy time (TSC ticks from a wake to its next sleep), counted only while the
// program has at least as many threads as CPUs: then the daemon's work takes a CPU that one
// of them would have run on, and a call-rate window measured while the daemon walks (it
// opens at the walk's switch-on: the windows of hot functions close within microseconds,
// inside the walk) sees the program on one CPU fewer. kvpipe_pfe (8 threads, 2 vCPUs)
// under paper: find_match 0.55 of its calls, make_value 0.67. A window takes this time
// off its length like the threads' probe time (window_instr), over the same CPUs. With
// fewer threads than CPUs the daemon runs beside them and takes nothing.
std::atomic<std::uint64_t> g_daemon_busy_total{0};
std::atomic<std::uint64_t> g_daemon_busy_since{0};  // 0: asleep, or not contended
std::uint64_t g_ncpus = 1;  // CPUs the process may run on (sched_getaffinity at start)
void daemon_busy_begin() noexcept {
  const bool contended = A(g_hdr->nthreads).load(std::memory_order_relaxed) >= g_ncpus;
  g_daemon_busy_since.store(contended ? rdtsc() : 0, std::memory_order_relaxed);
}
void daemon_busy_end() noexcept {
  const std::uint64_t since = g_daemon_busy_since.exchange(0, std::memory_order_relaxed);
  const std::uint64_t now = rdtsc();
  if (since != 0 && now > since) g_daemon_busy_total.fetch_add(now - since, std::memory_order_relaxed);
}

// The instrumentation time every thread has accounted so far.
std::uint64_t instr_sum() noexcept {
  const std::uint64_t nt = std::min<std::uint64_t>(A(g_hdr->nthreads).load(std::memory_order_relaxed), g_cfg.max_threads);
  std::uint64_t s = A(g_spare_thread.instr_ticks).load(std::memory_order_relaxed) +
                    A(g_spare_thread.extra_ticks).load(std::memory_order_relaxed);
  for (std::uint64_t i = 0; i < nt; ++i)
    s += A(g_threads[i].instr_ticks).load(std::memory_order_relaxed) + A(g_threads[i].extra_ticks).load(std::memory_order_relaxed);
  return s;
}

// The clock of a call-rate window's time that the program did not have: the threads'
// probe time and the daemon's contended busy time (above).
std::uint64_t window_instr() noexcept {
  const std::uint64_t since = g_daemon_busy_since.load(std::memory_order_relaxed);
  const std::uint64_t now = since != 0 ? rdtsc() : 0;
  return instr_sum() + g_daemon_busy_total.load(std::memory_order_relaxed) + (now > since ? now - since : 0);
}

// TSC at the end of the runtime's start-up (end_startup), 0 before: when the program's
// own code can first run.
std::uint64_t g_program_tsc = 0;
// Marks a function for the daemon's next walk (g_attn).
inline void attend(const FuncRecord& f) noexcept {
  if (g_attn == nullptr || &f < g_funcs || &f >= g_funcs + g_cfg.max_funcs) return;  // the calibration's
  g_attn[&f - g_funcs].store(kMarkLook, std::memory_order_release);
}

void open_window(FuncRecord& f, std::uint64_t now, std::uint64_t instr) noexcept {
  A(f.win_start).store(now, std::memory_order_relaxed);
  A(f.win_calls0).store(A(f.calls).load(std::memory_order_relaxed), std::memory_order_relaxed);
  A(f.win_instr0).store(instr, std::memory_order_relaxed);
}

// Counts the window's calls into est_calls and sets the call rate of the program without
// instrumentation for the stretch that follows (window_rate; the probe time inside it is
// the threads' accounted time over the CPUs they share). `at_call`: a switch-off by a hit.
void close_window(FuncRecord& f, std::uint64_t now, std::uint64_t instr, bool at_call) noexcept {
  const std::uint64_t start = A(f.win_start).load(std::memory_order_relaxed);
  if (start == 0 || now <= start) return;
  const std::uint64_t calls = A(f.calls).load(std::memory_order_relaxed);
  const std::uint64_t c0 = A(f.win_calls0).load(std::memory_order_relaxed);
  const double n = calls > c0 ? static_cast<double>(calls - c0) : 0.0;
  const double len = static_cast<double>(now - start);
  const std::uint64_t i0 = A(f.win_instr0).load(std::memory_order_relaxed);
  const double nrun = static_cast<double>(std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(A(g_hdr->nthreads).load(std::memory_order_relaxed), g_ncpus)));
  const double probes = instr > i0 ? static_cast<double>(instr - i0) / nrun : 0.0;
  A(f.est_calls).store(A(f.est_calls).load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  A(f.est_until).store(now, std::memory_order_relaxed);
  const double prev = A(f.off_rate).load(std::memory_order_relaxed);
  A(f.off_rate).store(window_rate(n, len, probes, at_call, prev), std::memory_order_relaxed);
  A(f.win_start).store(0, std::memory_order_relaxed);
}

// The switch-on's side: the stretch since est_until at the last window's rate.
void extrapolate(FuncRecord& f, std::uint64_t now) noexcept {
  const std::uint64_t until = A(f.est_until).load(std::memory_order_relaxed);
  if (until != 0 && now > until)
    A(f.est_calls).store(A(f.est_calls).load(std::memory_order_relaxed) +
                             A(f.off_rate).load(std::memory_order_relaxed) * static_cast<double>(now - until),
                         std::memory_order_relaxed);
  A(f.est_until).store(now, std::memory_order_relaxed);
}

void switch_off(FuncRecord& f, FnState why) noexcept {
  if (A(f.state).load(std::memory_order_relaxed) != static_cast<std::uint64_t>(FnState::on)) return;
  if (!try_toggle_lock(f)) return;
  std::uint64_t expected = static_cast<std::uint64_t>(FnState::on);
  if (!A(f.state).compare_exchange_strong(expected, static_cast<std::uint64_t>(why),
                                          std::memory_order_acq_rel)) {
    toggle_unlock(f);
    return;
  }
  const std::uint64_t t0 = rdtsc();
  std::uint64_t n = 0;  // no entry probe yet: only its exit is known
  for_each_probe(f.entry_probe, [&](cp::ProbeId id) { check(cp::deactivate(id)), ++n; });
  if (g_cfg.test_off_stall_ns != 0) [[unlikely]] {
    const timespec d{static_cast<time_t>(g_cfg.test_off_stall_ns / 1'000'000'000u),
                     static_cast<long>(g_cfg.test_off_stall_ns % 1'000'000'000u)};
    nanosleep(&d, nullptr);
  }
  for_each_probe(f.exit_probe, [&](cp::ProbeId id) { check(cp::deactivate(id)), ++n; });
  const std::uint64_t t1 = rdtsc();
  const std::uint64_t since = A(f.on_since).exchange(0, std::memory_order_relaxed);
  if (since != 0 && t1 > since) add(f.active_ticks, t1 - since);
  // The window closes at the decision (t0): the toggles' own cost is not the program's.
  close_window(f, t0, window_instr(), why != FnState::off_converged);
  add(f.offs, 1);
  add(f.toggles, n);
  add(g_hdr->toggles, n);
  add(g_hdr->toggle_ticks, t1 - t0);
  if (why == FnState::off_budget) add(g_hdr->budget_offs, 1);
  toggle_unlock(f);
  attend(f);  // off: the daemon switches it back on (or, converged, lets it go)
}

void on_entry(cp::ProbeId id, std::uint64_t) noexcept;
void on_exit(cp::ProbeId id, std::uint64_t tsc) noexcept;

// Exit then entry: every call whose entry is seen has its exit probe on.
bool switch_on(FuncRecord& f, FnState from) noexcept {
  if (A(f.state).load(std::memory_order_relaxed) != static_cast<std::uint64_t>(from)) return false;
  while (!try_toggle_lock(f)) sched_yield();  // the daemon may wait; a probe function never does
  std::uint64_t expected = static_cast<std::uint64_t>(from);
  A(f.epoch_samples).store(0, std::memory_order_relaxed);
  if (!A(f.state).compare_exchange_strong(expected, static_cast<std::uint64_t>(FnState::on),
                                          std::memory_order_acq_rel)) {
    toggle_unlock(f);
    return false;
  }
  const std::uint64_t t0 = rdtsc();
  A(f.entry_warm).store(0, std::memory_order_relaxed);
  A(f.exit_warm).store(0, std::memory_order_relaxed);
  std::uint64_t n = 0;
  for_each_probe(f.exit_probe, [&](cp::ProbeId id) { check(cp::activate(id, on_exit)), ++n; });
  for_each_probe(f.entry_probe, [&](cp::ProbeId id) { check(cp::activate(id, on_entry)), ++n; });
  const std::uint64_t t1 = rdtsc();
  // Armed once the entry probe is on: the exit probe goes on first, and the layer
  // redirects the return of every call that starts in between (a tracepoint's also while
  // its entry probe is off), calls whose entry hit never ran and which no frame times; a
  // daemon preempted there let ~150 of them through in one run, each a raw sample. (Also
  // a call whose own entry hit switched its function off, returning after this switch-on.)
  // A call that starts during the activation and is seen is lost as a sample: a few.
  A(f.armed_tsc).store(t1, std::memory_order_relaxed);
  A(f.on_since).store(t1, std::memory_order_relaxed);
  // The window starts after the patching: the threads' probe time read now (one pass over
  // the threads, beside the activation's own waits), not at the walk's start.
  extrapolate(f, t1);
  open_window(f, t1, window_instr());
  add(f.toggles, n);
  add(g_hdr->toggles, n);
  add(g_hdr->toggle_ticks, t1 - t0);
  toggle_unlock(f);
  return true;
}

// Accounts the probe function's own time plus the calibrated fixed cost of a hit, and
// enforces the budget: the per-thread cap and the process-wide cap of this period. The
// budget's work comes before the final reading, so that its time is charged: the
// process-wide add (a cache line every thread writes) gets the thread's previous hits'
// cost, and a switch-off (code writes, Tmax waits) is this hit's. After the reading there
// is only the add to the thread's own record, which self_ticks covers: work there used to
// land, unaccounted, in every sampled interval around the hit.
inline void finish(Tls& t, FuncRecord& f, std::uint64_t t0) noexcept {
  const std::uint64_t period = g_period.load(std::memory_order_relaxed);
  if (t.period != period) {
    // What the thread spent over its cap is a debt: each period that has begun since pays
    // off one cap (an overspent period no longer starts the next from zero). `pending` is
    // kept: it is charged process-wide below, in this period.
    const std::uint64_t gone = period - t.period;
    t.spent = g_thread_cap != 0 && gone <= t.spent / g_thread_cap ? t.spent - gone * g_thread_cap : 0;
    t.period = period;
    g_period_threads.fetch_add(1, std::memory_order_relaxed);
  }
  const bool budget = g_cfg.policy == Policy::budget;
  if (budget) {
    const std::uint64_t all = g_period_spent.fetch_add(t.pending, std::memory_order_relaxed) + t.pending;
    t.pending = 0;
    if (t.spent > g_thread_cap || all > g_process_cap.load(std::memory_order_relaxed)) {
      own_add(t, t.rec->budget_hits, 1);
      switch_off(f, FnState::off_budget);
    }
  }
  std::uint64_t spent = rdtsc() - t0;
  if (spent > kMaxHitTicks) [[unlikely]] {
    spent = kMaxHitTicks;
    add(g_hdr->capped_hits, 1);
  }
  const std::uint64_t cost = spent + g_hdr->calib_ticks;
  own_add(t, t.rec->instr_ticks, cost);
  // The provider's part of a hit's cost that neither rdtsc pair nor calib_ticks sees
  // (tracepoints: the trampoline and the redirected return; g_hit_extra). Kept apart from
  // instr_ticks, which the samples' compensation reads.
  const std::uint64_t extra = g_hit_extra[f.provider & 3];
  if (extra != 0) own_add(t, t.rec->extra_ticks, extra);
  ++t.hits;
  if (budget) {
    t.spent += cost + extra;
    t.pending += cost + extra;
  }
}

// A hit while the function is off: stale code (a thread past the site when it went off)
// when the probe is one of the function's, which every toggle switches; else a probe the
// toggles do not know (none since the lists above), switched off here. Walks the list only
// for hits while off.
inline bool stray(FuncRecord& f, cp::ProbeId id, bool entry) noexcept {
  if (A(f.state).load(std::memory_order_relaxed) == static_cast<std::uint64_t>(FnState::on)) return false;
  if (in_list(entry ? f.entry_probe : f.exit_probe, id)) return false;
  (void)cp::deactivate(id);
  add(g_hdr->toggles, 1);
  return true;
}

// Whether this thread runs the site for the first time since the probes went on (one load;
// the fetch_or once per thread and activation); counts it in Tls::cold.
inline void check_warm(Tls& t, std::uint64_t& warm) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << (t.index & 63);
  if ((A(warm).load(std::memory_order_relaxed) & bit) == 0) [[unlikely]] {
    A(warm).fetch_or(bit, std::memory_order_relaxed);
    ++t.cold;
  }
}

// The first call of a call-rate window (once per window, from the entry hit): a window
// that was still without calls when the current epoch began starts at that epoch (the
// walk no longer restarts such windows itself), and the daemon's walk is told. Only when
// the toggle lock is free (else the daemon is cutting this window, or a thread switching
// the function off): a probe function never waits.
void first_call(FuncRecord& f) noexcept {
  const std::uint64_t at = g_epoch_tsc.load(std::memory_order_acquire);
  const std::uint64_t instr = g_epoch_instr.load(std::memory_order_relaxed);
  if (at != 0 && try_toggle_lock(f)) {  // at stays 0 without the marks (full)
    const std::uint64_t ws = A(f.win_start).load(std::memory_order_relaxed);
    if (ws != 0 && ws < at) {
      A(f.win_start).store(at, std::memory_order_relaxed);
      A(f.win_instr0).store(instr, std::memory_order_relaxed);
    }
    toggle_unlock(f);
  }
  attend(f);
}

void on_entry(cp::ProbeId id, std::uint64_t tsc) noexcept {
  const std::uint64_t t0 = rdtsc();
  const std::uint32_t s = g_slot[id].load(std::memory_order_relaxed);
  if (s == 0) return;
  FuncRecord& f = s == kCalibSlot ? g_calib_rec : g_funcs[s - 1];
  if (stray(f, id, true)) [[unlikely]] return;
  Tls& t = tls();
  check_warm(t, f.entry_warm);
  // Entry only: kept off by the tail-call guard, or a tracepoint function that has no exit
  // probe (its tracepoint's exit was refused at attach: setjmp-like functions, a process
  // hosting V8 or HotSpot). Such a call pushes no frame: nothing would pop it, and a
  // thread that runs only them (java's threads in libjvm) filled its 64 frames, after which
  // no call of the thread could be compensated. And its entries count toward the epoch's
  // quota, since it has no samples: it used to stay on for whole epochs, every call a hit.
  const bool entry_only = (f.flags & kFuncNoExit) != 0 ||
                          (f.provider == static_cast<std::uint32_t>(cp::Provider::tracepoint) &&
                           A(f.exit_probe).load(std::memory_order_relaxed) == cp::kNoProbe);
  // The frame's instrumentation mark is moved back by what the layer spent between the
  // hook's TSC and this function (t0 - tsc): measured, where a cold site costs thousands of
  // ticks that no calibrated constant holds. (The calibrated remainder absorbs the overlap
  // with the fixed cost charged for this hit.)
  if (!entry_only) {
    if (t.frames != nullptr) {
      drop_stale_frames(t);
      push_frame(
          t,
          {tsc, A(t.rec->instr_ticks).load(std::memory_order_relaxed) - (t0 > tsc ? t0 - tsc : 0),
           switch_seq(t), t.nest, t.cold, t.hits, &f});
    }
    t.nest += g_nest[f.provider & 3];
  }
  const std::uint64_t before = A(f.calls).fetch_add(1, std::memory_order_relaxed);
  if (before == A(f.win_calls0).load(std::memory_order_relaxed) && &f != &g_calib_rec) [[unlikely]]
    first_call(f);
  own_add(t, t.rec->calls, 1);
  if (entry_only && g_cfg.policy != Policy::full && &f != &g_calib_rec &&
      A(f.epoch_samples).fetch_add(1, std::memory_order_relaxed) + 1 >= g_cfg.samples)
    switch_off(f, FnState::off_sampled);
  finish(t, f, t0);
}

void on_exit(cp::ProbeId id, std::uint64_t tsc) noexcept {
  const std::uint64_t t0 = rdtsc();
  const std::uint32_t s = g_slot[id].load(std::memory_order_relaxed);
  if (s == 0) return;
  FuncRecord& f = s == kCalibSlot ? g_calib_rec : g_funcs[s - 1];
  if (stray(f, id, false)) [[unlikely]] return;
  Tls& t = tls();
  check_warm(t, f.exit_warm);
  const std::uint64_t instr_now = A(t.rec->instr_ticks).load(std::memory_order_relaxed);
  const Frame* fr = nullptr;
  if (tsc != 0 && t.frames != nullptr) {
    while (t.depth > 0 && top_frame(t).tsc > tsc) --t.depth;
    if (t.depth > 0 && top_frame(t).tsc == tsc) {
      fr = &top_frame(t);
      --t.depth;
    }
  }
  if (tsc == 0) [[unlikely]] {
    add(f.blind_exits, 1);
  } else if (t.discovered_tsc > tsc) [[unlikely]] {
    add(f.discovery_exits, 1);  // see on_found
  } else if (tsc < A(f.armed_tsc).load(std::memory_order_relaxed)) [[unlikely]] {
    // An entry TSC from before this window's activation is not this window's call: the cyg
    // shadow stack can hand back a frame whose exit ran while the exit probe was off.
    add(g_hdr->stale_exits, 1);
  } else if (fr == nullptr && A(f.state).load(std::memory_order_relaxed) !=
                                  static_cast<std::uint64_t>(FnState::on)) [[unlikely]] {
    // A call that began while its function was being switched off: the entry probes go
    // off first, and a call that starts before its exit probes follow is seen by the layer
    // (it times the entry) but not counted. The switching thread can be preempted there
    // for milliseconds, and every such call came here as a raw sample of a call never
    // counted: latency_lab's lab_leaf_5k, 2,768 samples of 270 calls seen, 2,505 raw, in
    // one evaluation run; found in every evaluation, both providers. Not a sample.
    add(g_hdr->stale_exits, 1);
  } else if (t0 > tsc) {
    // The call ends where the layer's exit hook began (its work before on_exit is not the
    // call's); t0 when the layer cannot say.
    const std::uint64_t hook = cp::exit_hook_tsc();
    const std::uint64_t raw = (hook > tsc && hook <= t0 ? hook : t0) - tsc;
    std::uint64_t d = raw;
    if (fr != nullptr) {
      const std::int64_t left = static_cast<std::int64_t>(raw) - static_cast<std::int64_t>(instr_now - fr->instr);
      if (&f == &g_calib_rec) [[unlikely]] g_calib_signed += left;
      // Callees' calls: what their hits added beyond the accounting (this call's own share
      // is in self_ticks, not here).
      const std::int64_t nested = t.nest - fr->nest - g_nest[f.provider & 3];
      const std::int64_t net = left - g_self[f.provider & 3] - nested;
      d = net > 0 ? static_cast<std::uint64_t>(net) : 0;
      // What of that came from constants: the hits' calib_ticks (inside instr_now - fr->instr),
      // self and the callees' nest. Summed signed (two's complement).
      const std::int64_t fixed =
          static_cast<std::int64_t>((t.hits - fr->hits) * g_hdr->calib_ticks) + g_self[f.provider & 3] + nested;
      add(f.fixed_sum, static_cast<std::uint64_t>(fixed));
    } else {
      add(f.uncompensated, 1);
    }
    const std::uint64_t seq = fr != nullptr ? switch_seq(t) : kSeqUnknown;
    if (fr != nullptr && fr->cold != t.cold) {
      add(f.cold_samples, 1);
      add(f.cold_sum_ticks, d);
    } else if (seq == kSeqUnknown || fr->seq == kSeqUnknown) {
      add(f.unk_samples, 1);
      add(f.unk_sum_ticks, d);
    } else if (seq != fr->seq) {
      add(f.sw_samples, 1);
      add(f.sw_sum_ticks, d);
    }
    add(f.samples, 1);
    add(f.sum_ticks, d);
    add(f.raw_sum_ticks, raw);
    if (&f != &g_calib_rec) [[likely]] add(g_hists[s - 1].n[hist_bucket(d)], 1);
    own_add(t, t.rec->samples, 1);
    own_add(t, t.rec->sum_ticks, d);
    if (g_cfg.policy != Policy::full &&
        A(f.epoch_samples).fetch_add(1, std::memory_order_relaxed) + 1 >= g_cfg.samples)
      switch_off(f, FnState::off_sampled);
  }
  finish(t, f, t0);
}

void calib_probe(cp::ProbeId, std::uint64_t) noexcept {}

// Whether the code in [start, bound) has a jmp that leaves it (direct, to outside the range)
// or an indirect jmp: a possible tail call. The probes layer aborts when an exit-probed
// function tail-calls another exit-probed function (profiler/README.md, Known problems), so
// such functions keep their exit probe off. The bound is the next patchable function's
// entry (at most 16 KiB): cold parts and jump tables give false positives (a function loses
// its latency, never its calls); decoding stops at the first undecodable byte.
bool tail_calls(std::uintptr_t start, std::uintptr_t bound) noexcept {
  ZydisDecoder dec;
  if (!ZYAN_SUCCESS(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64))) return true;
  std::uintptr_t at = start;
  while (at < bound) {
    ZydisDecodedInstruction insn;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, reinterpret_cast<const void*>(at), bound - at, &insn, ops)))
      return false;
    if (insn.mnemonic == ZYDIS_MNEMONIC_JMP) {
      if (ops[0].type != ZYDIS_OPERAND_TYPE_IMMEDIATE) return true;
      const std::uintptr_t target =
          at + insn.length + static_cast<std::uintptr_t>(static_cast<std::intptr_t>(ops[0].imm.value.s));
      if (target < start || target >= bound) return true;
    }
    at += insn.length;
  }
  return false;
}

// After the replay (and after attach_tracepoints): the held-back exit probes (patchable,
// tracepoint: both redirect the return address) go on except for functions that may
// tail-call. A function's end: its dynamic symbol's size when dladdr1 finds one starting
// there, else the next known function's entry, at most 16 KiB on.
void resolve_pending_exits() {
  std::vector<std::uintptr_t> starts;
  const std::uint64_t nf = A(g_hdr->nfuncs).load(std::memory_order_acquire);
  for (std::uint64_t i = 0; i < nf; ++i) starts.push_back(g_funcs[i].function);
  std::sort(starts.begin(), starts.end());
  for (const auto& [slot, id] : *g_pending_exits) {
    FuncRecord& f = g_funcs[slot];
    auto next = std::upper_bound(starts.begin(), starts.end(), f.function);
    std::uintptr_t bound = f.function + 16384;
    if (next != starts.end()) bound = std::min<std::uintptr_t>(bound, *next);
    Dl_info dli{};
    void* extra = nullptr;
    const int found = dladdr1(reinterpret_cast<void*>(f.function), &dli, &extra, RTLD_DL_SYMENT);
    const auto* sym = static_cast<const ElfW(Sym)*>(extra);
    if (found != 0 &&
        sym != nullptr && dli.dli_saddr == reinterpret_cast<void*>(f.function) && sym->st_size > 0)
      bound = f.function + sym->st_size;
    if (tail_calls(f.function, bound)) {
      f.flags |= kFuncNoExit;
      add(g_hdr->no_exit_funcs, 1);
      continue;
    }
    while (!try_toggle_lock(f)) sched_yield();
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      link_probe(f.exit_probe, id);
    }
    g_slot[id].store(slot + 1, std::memory_order_release);
    if (A(f.state).load(std::memory_order_acquire) == static_cast<std::uint64_t>(FnState::on)) {
      const std::uint64_t t0 = rdtsc();
      check(cp::activate(id, on_exit));
      add(f.toggles, 1);
      add(g_hdr->toggles, 1);
      add(g_hdr->toggle_ticks, rdtsc() - t0);
    }
    toggle_unlock(f);
  }
  g_pending_exits->clear();
}

std::uint32_t intern(const char* s) noexcept {  // caller holds g_mutex
  const std::size_t n = std::strlen(s) + 1;
  const std::uint64_t used = A(g_hdr->string_used).load(std::memory_order_relaxed);
  if (used + n > g_cfg.string_bytes) return 0;  // offset 0 holds "" (see open_segment)
  std::memcpy(g_strings + used, s, n);
  A(g_hdr->string_used).store(used + n, std::memory_order_release);
  return static_cast<std::uint32_t>(used);
}

bool in_focus(const cp::ProbeInfo& p) noexcept {
  return p.name != nullptr && fnmatch(g_cfg.functions, p.name, 0) == 0;
}

void on_found_impl(const cp::ProbeInfo& p);

// Discovery runs on the thread that first executes a cyg site, inside that call (and inside
// every call in flight on that thread): the sample of such a call would hold the layer's
// and this callback's work (~10^5 ticks here, once per site: under a sampling policy one
// sample in a few hundred, and it made lab_leaf_200's mean 4x its true length). The exit
// drops calls that began before the thread's last discovery ended (discovery_exits).
void on_found(const cp::ProbeInfo& p, void* user) {
  (void)user;
  on_found_impl(p);
  t_tls.discovered_tsc = rdtsc();
}

void on_found_impl(const cp::ProbeInfo& p) {
  // A calibration site's probes: kept apart, off.
  const struct {
    void (*target)(volatile unsigned*);
    cp::ProbeId* entry;
    cp::ProbeId* exit;
  } calib[] = {{crossmod_profile_calib_target, &g_calib_entry, &g_calib_exit},
               {crossmod_profile_calib_target_cyg, &g_calib_cyg_entry, &g_calib_cyg_exit},
               {crossmod_profile_calib_target_tp, &g_calib_tp_entry, &g_calib_tp_exit}};
  for (const auto& c : calib) {
    if (p.function != reinterpret_cast<std::uintptr_t>(c.target)) continue;
    *(p.kind == cp::Kind::entry ? c.entry : c.exit) = p.id;
    if (p.active) (void)cp::deactivate(p.id);
    return;
  }
  add(g_hdr->probes, 1);  // the program's probes, in focus or not (not the calibration site)
  if (p.provider == cp::Provider::patchable) g_patchable_probes.store(true, std::memory_order_relaxed);
  if (!in_focus(p)) {
    if (p.active) (void)cp::deactivate(p.id);
    return;
  }
  std::uint32_t slot;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_by_function->find(p.function);
    if (it != g_by_function->end()) {
      slot = it->second;
    } else {
      const std::uint64_t i = A(g_hdr->nfuncs).load(std::memory_order_relaxed);
      if (i >= g_cfg.max_funcs) {
        add(g_hdr->dropped_funcs, 1);
        if (p.active) (void)cp::deactivate(p.id);
        return;
      }
      slot = static_cast<std::uint32_t>(i);
      FuncRecord& f = g_funcs[slot];
      f.function = p.function;
      f.name_off = intern(p.name);
      f.object_off = intern(p.object != nullptr ? p.object : "?");
      f.provider = static_cast<std::uint32_t>(p.provider);
      f.entry_probe = cp::kNoProbe;
      f.exit_probe = cp::kNoProbe;
      A(f.state).store(static_cast<std::uint64_t>(g_cfg.policy == Policy::none ? FnState::off_focus
                                                                                : FnState::on),
                       std::memory_order_relaxed);
      (*g_by_function)[p.function] = slot;
      A(g_hdr->nfuncs).store(i + 1, std::memory_order_release);
    }
    FuncRecord& f = g_funcs[slot];
    if (g_defer_exits && p.kind == cp::Kind::exit &&
        (p.provider == cp::Provider::patchable || p.provider == cp::Provider::tracepoint)) {
      g_pending_exits->emplace_back(slot, p.id);
      return;
    }
    link_probe(p.kind == cp::Kind::entry ? f.entry_probe : f.exit_probe, p.id);
  }
  FuncRecord& f = g_funcs[slot];
  g_slot[p.id].store(slot + 1, std::memory_order_release);
  attend(f);
  while (!try_toggle_lock(f)) sched_yield();  // discovery may wait (not an invocation path)
  const bool on = A(f.state).load(std::memory_order_acquire) == static_cast<std::uint64_t>(FnState::on);
  if (!on) {
    if (p.active) (void)cp::deactivate(p.id);
    toggle_unlock(f);
    return;
  }
  // A function found on: its probes go on now (a cyg probe is already on; this gives it
  // our probe function). A tracepoint found by the start-up attach goes on after it, with
  // the others (activate_pending_tracepoints).
  const bool later = g_pending_tps != nullptr && p.provider == cp::Provider::tracepoint && !p.active;
  if (later) {
    try {
      g_pending_tps->emplace_back(slot, p.id);
    } catch (...) {
      toggle_unlock(f);  // not switched on: on_found's caller sees the probe off
      return;
    }
  }
  const std::uint64_t t0 = rdtsc();
  if (!later) check(cp::activate(p.id, p.kind == cp::Kind::entry ? on_entry : on_exit));
  const std::uint64_t t1 = rdtsc();
  // On since it was found, and its first call-rate window opens then: found during the
  // runtime's start-up (patchable scan, --trace attach), at the segment's start, and
  // end_startup() moves the window to the program's start; found later (a cyg site's first
  // call, an object loaded by dlopen), now. (The window used to open at the segment's start
  // for all: a function of a library loaded 200 ms into the run had its first window's
  // calls spread over those 200 ms, and the off stretch after it that window's rate:
  // prof_dlopen's 20,000 calls in one burst were estimated at 10.)
  if (p.kind == cp::Kind::entry) {
    const std::uint64_t found = g_program_tsc != 0 ? t1 : g_hdr->start_tsc;
    std::uint64_t zero = 0;
    A(f.on_since).compare_exchange_strong(zero, found, std::memory_order_relaxed);
    if (A(f.win_start).load(std::memory_order_relaxed) == 0 && A(f.est_until).load(std::memory_order_relaxed) == 0)
      open_window(f, found, g_program_tsc != 0 ? window_instr() : 0);
  }
  if (!p.active && !later) {
    add(f.toggles, 1);
    add(g_hdr->toggles, 1);
    add(g_hdr->toggle_ticks, t1 - t0);
  }
  toggle_unlock(f);
}

// The tracepoints the start-up attach found on, switched on together: their jumps go in
// as one batch (probes::install_many: the waits a jump across a cache line needs, twice
// for the whole batch instead of twice per such function), then each probe's toggle, exit
// probes first. Runs in the constructor, before the daemon and the program's threads.
void activate_pending_tracepoints() {
  std::vector<std::pair<std::uint32_t, cp::ProbeId>> todo;
  todo.swap(*g_pending_tps);
  delete g_pending_tps;
  g_pending_tps = nullptr;
  if (todo.empty()) return;
  std::vector<cp::ProbeId> ids;
  try {
    ids.reserve(todo.size());
    for (const auto& [slot, id] : todo) ids.push_back(id);
  } catch (...) {
    ids.clear();  // each activate installs its own jump
  }
  const std::uint64_t t0 = rdtsc();
  if (!ids.empty()) check(cp::install_many(ids.data(), ids.size()));
  std::uint64_t n = 0;
  for (const bool exits : {true, false}) {
    for (const auto& [slot, id] : todo) {
      FuncRecord& f = g_funcs[slot];
      const bool is_exit = in_list(f.exit_probe, id);
      if (is_exit != exits) continue;
      while (!try_toggle_lock(f)) sched_yield();
      if (A(f.state).load(std::memory_order_acquire) == static_cast<std::uint64_t>(FnState::on)) {
        check(cp::activate(id, is_exit ? on_exit : on_entry));
        add(f.toggles, 1);
        ++n;
      }
      toggle_unlock(f);
    }
  }
  add(g_hdr->toggles, n);
  add(g_hdr->toggle_ticks, rdtsc() - t0);
}

// Fixed cost of an active probe hit: calls of the calibration target with its probes off
// and on (empty probe function), interleaved A/B, minimum of each over the rounds.
void calibrate() noexcept {
  if (g_calib_entry == cp::kNoProbe) return;
  constexpr int kCalls = 500, kRounds = 7;
  volatile unsigned counter = 0;
  std::uint64_t best_off = UINT64_MAX, best_on = UINT64_MAX;
  for (int r = 0; r < kRounds; ++r) {
    for (int on = 0; on < 2; ++on) {
      if (on) {
        if (g_calib_exit != cp::kNoProbe && cp::activate(g_calib_exit, calib_probe) != cp::Status::ok) return;
        if (cp::activate(g_calib_entry, calib_probe) != cp::Status::ok) return;
      }
      const std::uint64_t t0 = rdtsc();
      for (int i = 0; i < kCalls; ++i) crossmod_profile_calib_target(&counter);
      const std::uint64_t d = rdtsc() - t0;
      if (on) {
        (void)cp::deactivate(g_calib_entry);
        if (g_calib_exit != cp::kNoProbe) (void)cp::deactivate(g_calib_exit);
        best_on = std::min(best_on, d);
      } else {
        best_off = std::min(best_off, d);
      }
    }
  }
  const unsigned hits = g_calib_exit != cp::kNoProbe ? 2 : 1;
  if (best_on > best_off) {
    g_hdr->calib_ticks = (best_on - best_off) / (std::uint64_t{kCalls} * hits);
    g_hdr->flags |= kFlagCalibrated;
  }
}

// Compensation's remainder: what a call of an empty function (a volatile increment, a few
// ticks) measures through on_entry / on_exit once the instrumentation time accounted inside
// it is taken off. The accounting charges a hit its measured probe-function time plus the
// fixed cost calibrate() found (on the patchable site); what a hit really adds to an
// interval differs by provider (the layer's work before on_entry's first rdtsc and after
// the function returns, before on_exit's): positive, the accounting misses some; negative,
// it takes off too much. Taken signed, so that an empty function measures ~0 either way.
// Runs in the constructor, before the daemon and any thread of the program; the policy is
// `full` meanwhile so that no sample quota or budget switches the site off, and the
// thread's counters are put back so the calibration is not charged to the program.
void calibrate_self(cp::ProbeId entry, cp::ProbeId exit, void (*target)(volatile unsigned*),
                    cp::Provider provider) noexcept {
  if (entry == cp::kNoProbe || exit == cp::kNoProbe) return;
  constexpr int kCalls = 500, kRounds = 7;
  Tls& t = tls();
  const ThreadRecord saved = *t.rec;
  const Policy policy = g_cfg.policy;
  g_cfg.policy = Policy::full;
  g_calib_rec = FuncRecord{};
  g_calib_rec.provider = static_cast<std::uint32_t>(provider);
  g_calib_rec.entry_probe = entry;
  g_calib_rec.exit_probe = exit;
  g_slot[entry].store(kCalibSlot, std::memory_order_release);
  g_slot[exit].store(kCalibSlot, std::memory_order_release);
  volatile unsigned counter = 0;
  double means[kRounds], nests[kRounds];
  int rounds = 0;
  for (int r = 0; r < kRounds; ++r) {
    // The same calls with the probes off, then on: what the hits add to the loop beyond
    // what the accounting charged is what a call adds to a caller's interval (nest).
    const std::uint64_t off0 = rdtsc();
    for (int i = 0; i < kCalls; ++i) target(&counter);
    const std::uint64_t off = rdtsc() - off0;
    if (cp::activate(exit, on_exit) != cp::Status::ok || cp::activate(entry, on_entry) != cp::Status::ok) break;
    const std::uint64_t n0 = g_calib_rec.samples - g_calib_rec.uncompensated;
    g_calib_signed = 0;
    const std::uint64_t instr0 = A(t.rec->instr_ticks).load(std::memory_order_relaxed);
    const std::uint64_t on0 = rdtsc();
    for (int i = 0; i < kCalls; ++i) target(&counter);
    const std::uint64_t on = rdtsc() - on0;
    const std::uint64_t charged = A(t.rec->instr_ticks).load(std::memory_order_relaxed) - instr0;
    (void)cp::deactivate(entry);
    (void)cp::deactivate(exit);
    const std::uint64_t n = g_calib_rec.samples - g_calib_rec.uncompensated - n0;
    if (n > 0) {
      means[rounds] = static_cast<double>(g_calib_signed) / static_cast<double>(n);
      nests[rounds++] = (static_cast<double>(on) - static_cast<double>(off) - static_cast<double>(charged)) / kCalls;
    }
  }
  g_slot[entry].store(0, std::memory_order_release);
  g_slot[exit].store(0, std::memory_order_release);
  g_cfg.policy = policy;
  *t.rec = saved;
  t.depth = 0;
  t.base = 0;
  t.nest = 0;
  if (rounds == 0) return;
  // The median round: an interrupt makes a round's mean larger, a lucky cache state
  // smaller; neither extreme is the typical hit.
  const auto median = [rounds](double* v) {
    for (int a = 1; a < rounds; ++a)  // insertion sort: seven values
      for (int b = a; b > 0 && v[b - 1] > v[b]; --b) std::swap(v[b - 1], v[b]);
    return static_cast<std::int64_t>(std::llround(v[rounds / 2]));
  };
  const unsigned k = static_cast<unsigned>(provider) & 3;
  g_hdr->self_ticks[k] = g_self[k] = median(means);
  g_hdr->nest_ticks[k] = g_nest[k] = median(nests);
  g_hdr->flags |= (kFlagSelfCalibrated | kFlagNestCalibrated) << k;
}

// --trace: a tracepoint on this library's tracepoint calibration site (its only function
// ever traced; jump-only, found by on_found), then the library is excluded from every later
// attach: its functions run inside the probe functions, and a probe on them would time the
// profiler, or call itself.
void attach_calib_tracepoint() noexcept {
  const void* target = reinterpret_cast<const void*>(&crossmod_profile_calib_target_tp);
  cp::set_tracepoint_trap_fallback(false);
  (void)cp::attach_tracepoint_at(target);
  if (cp::exclude_from_tracepoints(target) != cp::Status::ok)
    warn("--trace: cannot exclude the profiler's own library from tracing");
}

// Batch means over epochs: the samples a function took since the last fold form one batch.
void fold(Batches& b, std::uint64_t n, std::uint64_t s) noexcept {
  if (n <= b.folded_n || s < b.folded_sum) return;
  const double bn = static_cast<double>(n - b.folded_n), bs = static_cast<double>(s - b.folded_sum);
  b.sum_s2 += bs * bs;
  b.sum_sn += bs * bn;
  b.sum_n2 += bn * bn;
  A(b.batches).fetch_add(1, std::memory_order_relaxed);
  A(b.folded_n).store(n, std::memory_order_relaxed);
  A(b.folded_sum).store(s, std::memory_order_relaxed);
}
// The counters are read one by one while threads add to them: a batch can be off by the
// samples that landed in between; the next fold takes them.
void fold(FuncRecord& f) noexcept {
  const std::uint64_t n = ld(f.samples);
  // No sample since the last fold (most functions at most ticks): neither batch has one,
  // and the walk reads no more of the record (lines 0 and 2). An on-CPU sample's split
  // counters are added before `samples`, so one seen early is folded with its sample.
  if (n == ld(f.all.folded_n)) return;
  const std::uint64_t s = ld(f.sum_ticks);
  fold(f.all, n, s);
  const std::uint64_t off_n = ld(f.sw_samples) + ld(f.unk_samples) + ld(f.cold_samples);
  const std::uint64_t off_s = ld(f.sw_sum_ticks) + ld(f.unk_sum_ticks) + ld(f.cold_sum_ticks);
  if (n >= off_n && s >= off_s) fold(f.oncpu, n - off_n, s - off_s);
}

// Whether the mean's 95% interval (ratio estimator over batches, the t quantile: the
// interval the launcher reports) is narrow enough: its
// half-width under --ci of the mean, or under the function's systematic term (the mean
// constant part of its compensation, FuncRecord::fixed_sum; the report's mean_sys_ticks):
// more samples narrow only the sampling error, and a function of a few dozen ticks never
// gets to 5% of its mean while the constants leave it uncertain by ~25-60 ticks.
bool narrow_enough(FuncRecord& f) noexcept {
  const Batches& a = f.all;
  const std::uint64_t b = a.batches;
  if (b < 5 || a.folded_n < 30 || a.folded_sum == 0) return false;
  const double n = static_cast<double>(a.folded_n), m = static_cast<double>(a.folded_sum) / n;
  const double nbar = n / static_cast<double>(b);
  const double ss = a.sum_s2 - 2 * m * a.sum_sn + m * m * a.sum_n2;
  if (ss < 0) return false;
  const double var = ss / (static_cast<double>(b) * static_cast<double>(b - 1) * nbar * nbar);
  // The t quantile, as the launcher's interval has: with 1.96 a function stopped at five
  // batches with a reported interval 1.4 times the --ci it was stopped for.
  const double half = t975(static_cast<double>(b - 1)) * std::sqrt(var);
  if (half / m < g_cfg.ci) return true;
  const std::uint64_t all = ld(f.samples);
  const std::uint64_t nc = all - std::min(all, ld(f.uncompensated));
  if (nc == 0) return false;
  const double sys = std::fabs(static_cast<double>(static_cast<std::int64_t>(ld(f.fixed_sum))) / static_cast<double>(nc));
  return half < sys;
}

std::uint64_t ns_to_ticks(std::uint64_t ns) {
  return static_cast<std::uint64_t>(static_cast<double>(ns) * g_cfg.tsc_hz / 1e9);
}

bool env_set(const char* name) noexcept;

// Gives every registered thread its perf page (g_seq_pages). Called by the daemon only.
// The fd is closed at once: the mapping keeps the counter alive, and the program's fd
// table stays as it was. The first failure other than "that thread is gone" ends the
// attempt for the run (kFlagSwitchDetect stays clear, switch_errno says why);
// CROSSMOD_PROFILE_NO_SWITCHES skips it (kFlagSwitchOff).
std::uint64_t g_switch_next = 0;  // attach_switch_pages: the next thread record to give a page
bool g_switch_failed = false;
void attach_switch_pages() noexcept {
  std::uint64_t& next = g_switch_next;
  bool& failed = g_switch_failed;
  if (failed || g_seq_pages == nullptr) return;
  if (next == 0 && env_set("CROSSMOD_PROFILE_NO_SWITCHES")) {
    A(g_hdr->flags).fetch_or(kFlagSwitchOff, std::memory_order_relaxed);
    failed = true;
    return;
  }
  const std::uint64_t nt = std::min<std::uint64_t>(A(g_hdr->nthreads).load(std::memory_order_relaxed),
                                                   g_cfg.max_threads);
  for (; next < nt; ++next) {
    const std::uint64_t tid = A(g_threads[next].tid).load(std::memory_order_acquire);
    if (tid == 0) return;  // registered, tid not stored yet: next tick
    perf_event_attr a{};
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    const long fd = syscall(SYS_perf_event_open, &a, static_cast<pid_t>(tid), -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
      if (errno == ESRCH) continue;
      A(g_hdr->switch_errno).store(static_cast<std::uint64_t>(errno), std::memory_order_relaxed);
      A(g_hdr->flags).fetch_and(~kFlagSwitchDetect, std::memory_order_relaxed);
      failed = true;
      return;
    }
    void* p = mmap(nullptr, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), PROT_READ, MAP_SHARED,
                   static_cast<int>(fd), 0);
    const int err = errno;
    close(static_cast<int>(fd));
    if (p == MAP_FAILED) {
      A(g_hdr->switch_errno).store(static_cast<std::uint64_t>(err), std::memory_order_relaxed);
      A(g_hdr->flags).fetch_and(~kFlagSwitchDetect, std::memory_order_relaxed);
      failed = true;
      return;
    }
    A(g_hdr->flags).fetch_or(kFlagSwitchDetect, std::memory_order_relaxed);
    g_seq_pages[next].store(&static_cast<const perf_event_mmap_page*>(p)->lock, std::memory_order_release);
  }
}

// Tracepoint functions that stay off keep their jump (one store in the trampoline turns
// them off), and every call pays the detour, which no budget sees (on sqlite3 most of the
// difference between `none` and the sampling policies). So the daemon removes the jump of
// the hot ones soon after they switch off and installs them again in one batch before it
// switches them on (probes::retract_many / install_many). A jump inside one cache line
// (nearly every function entry: they start 16-aligned) is removed and installed in one
// store each, with no wait and nothing trapping, so that is the default; a straddling jump
// takes two waits per batch, during which every call of its site traps, and is retracted
// only with CROSSMOD_PROFILE_RETRACT=1 (=0: no retraction). Hot: at the call rate of its
// last window, the function would make kRetractCalls calls while off. Daemon-private, one
// entry per function slot.
struct Retract {
  std::uint64_t calls = 0, active = 0;  // FuncRecord calls / active_ticks when last observed
  double off_calls = 0;  // calls it would make while off in a tick, at its latest call rate
  bool hot = false, retracted = false;
  std::int8_t in_line = -1;  // the jump lies inside one cache line (-1: not looked up yet)
};
constexpr double kRetractCalls = 256;
// What the detour of an installed, off tracepoint may cost a call, at most: meant as a
// ceiling, so that only passes that cannot pay are skipped. Hot, the detour is ~2-6 ticks
// (tracepoints/README.md; a start-up calibration that alternated the jump in and out, not
// kept, measured 0-3); cold, two taken branches that miss the predictors and two lines
// from L2 come to a few tens; and on sqlite3 retraction saved more than the hot figure
// explains (1.8% of the CPU time in an A/B of 24 Nov, profiler/README.md, Known problems;
// its passes spared ~1.3 million calls in one run of 28 Nov: ~35 ticks a call, if the
// detours were all of it).
constexpr double kDetourCeilingTicks = 64;
enum class RetractMode : std::uint8_t { none, in_line, all };
RetractMode retract_mode() noexcept {
  const char* v = std::getenv("CROSSMOD_PROFILE_RETRACT");
  if (v == nullptr || *v == '\0') return RetractMode::in_line;
  return std::strcmp(v, "0") == 0 ? RetractMode::none : RetractMode::all;
}
// Whether a tick's retraction pass, a second wake, happens whenever the walk switched a
// tracepoint function on (CROSSMOD_PROFILE_RETRACT_WAKE=always, the rule before 28 Nov) or
// only when it may pay (default): when the detours it would spare (the candidates' calls
// while off, at their latest rates) at kDetourCeilingTicks each outweigh what the wake
// and the pass cost the daemon, both measured as it runs. A wake costs ~40-65 us of CPU in
// the KVM guests here (a bare clock_nanosleep loop: profiler/README.md, Known problems),
// so a pass must spare some 2,000 calls; python3's 'Py*' passes, in nearly every tick,
// spared a median of ~1,200.
bool retract_wake_always() noexcept {
  const char* v = std::getenv("CROSSMOD_PROFILE_RETRACT_WAKE");
  return v != nullptr && std::strcmp(v, "always") == 0;
}

// Updates r from f's counters since it was last observed: when a window has closed since,
// its call rate over the ticks it was active, and what that rate makes while the function
// is off for the rest of an epoch.
void observe(Retract& r, const FuncRecord& f, std::uint64_t epoch_ticks) noexcept {
  const std::uint64_t calls = A(f.calls).load(std::memory_order_relaxed);
  const std::uint64_t active = A(f.active_ticks).load(std::memory_order_relaxed);
  if (calls > r.calls && active > r.active) {  // a window closed since
    const double rate = static_cast<double>(calls - r.calls) / static_cast<double>(active - r.active);
    const double off = epoch_ticks > active - r.active ? static_cast<double>(epoch_ticks - (active - r.active)) : 0.0;
    r.off_calls = rate * off;
    r.hot = r.off_calls >= kRetractCalls;
  }
  r.calls = calls;
  r.active = active;
}

// Whether this retraction mode removes r's jump: inside one cache line (or not looked up
// yet), or any with CROSSMOD_PROFILE_RETRACT=1.
bool retractable(const Retract& r, RetractMode mode) noexcept {
  return r.in_line != 0 || mode == RetractMode::all;
}

// A moving average that follows x by an eighth of the difference (the first x sets it).
void follow(double& avg, double x) noexcept { avg = avg == 0 ? x : avg + (x - avg) / 8; }

bool is_tracepoint(const FuncRecord& f) noexcept {
  return f.provider == static_cast<std::uint32_t>(cp::Provider::tracepoint);
}

// The function's entry and exit probes (those it has) onto ids.
void push_probe_ids(FuncRecord& f, std::vector<cp::ProbeId>& ids) {
  for_each_probe(f.entry_probe, [&](cp::ProbeId id) { ids.push_back(id); });
  for_each_probe(f.exit_probe, [&](cp::ProbeId id) { ids.push_back(id); });
}

// Charges a batch's time like the daemon's switch-ons (toggles; budget: instrumentation).
void charge_daemon(std::uint64_t ticks) noexcept {
  add(g_hdr->toggle_ticks, ticks);
  if (g_cfg.policy == Policy::budget) {
    g_period_spent.fetch_add(ticks, std::memory_order_relaxed);
    add(g_hdr->daemon_instr_ticks, ticks);
  }
}

// After the switch-offs of an epoch: removes the jumps of the hot tracepoint functions
// among `cand` (those the walk just switched on) that are off again. Only those: a pass over
// every function each tick cost python3 (774 functions) ~0.8% of its CPU in daemon time.
void retract_pass(std::vector<Retract>& rs, const std::vector<std::uint32_t>& cand,
                  std::vector<cp::ProbeId>& ids, std::uint64_t epoch_ticks, RetractMode mode) {
  ids.clear();
  for (const std::uint32_t i : cand) {
    if (i >= rs.size()) continue;
    FuncRecord& f = g_funcs[i];
    Retract& r = rs[i];
    if (!is_tracepoint(f) || A(f.state).load(std::memory_order_acquire) == static_cast<std::uint64_t>(FnState::on))
      continue;
    observe(r, f, epoch_ticks);
    if (!r.hot || r.retracted) continue;
    if (r.in_line < 0) {
      cp::ProbeInfo pi;
      r.in_line = cp::info(A(f.entry_probe).load(std::memory_order_acquire), &pi) == cp::Status::ok && pi.split == 0;
    }
    if (!retractable(r, mode)) continue;
    push_probe_ids(f, ids);
    r.retracted = true;
  }
  if (ids.empty()) return;
  const std::uint64_t t0 = rdtsc();
  std::size_t removed = 0;
  check(cp::retract_many(ids.data(), ids.size(), &removed));
  add(g_hdr->retracts, removed);
  charge_daemon(rdtsc() - t0);
}

// Before the switch-ons: installs the retracted functions about to go on, in one batch.
void reinstall_pass(std::vector<Retract>& rs, std::vector<cp::ProbeId>& ids, bool epoch, bool period) {
  const std::uint64_t nf = std::min<std::uint64_t>(A(g_hdr->nfuncs).load(std::memory_order_acquire), rs.size());
  ids.clear();
  for (std::uint64_t i = 0; i < nf; ++i) {
    Retract& r = rs[i];
    if (!r.retracted) continue;
    FuncRecord& f = g_funcs[i];
    const std::uint64_t st = A(f.state).load(std::memory_order_acquire);
    const bool due = (epoch && st == static_cast<std::uint64_t>(FnState::off_sampled)) ||
                     (period && st == static_cast<std::uint64_t>(FnState::off_budget));
    if (!due) continue;
    push_probe_ids(f, ids);
    r.retracted = false;
  }
  if (ids.empty()) return;
  const std::uint64_t t0 = rdtsc();
  check(cp::install_many(ids.data(), ids.size()));
  charge_daemon(rdtsc() - t0);
}

// t + ns, normalized.
timespec plus_ns(timespec t, std::uint64_t ns) noexcept {
  t.tv_sec += static_cast<time_t>(ns / 1'000'000'000);
  t.tv_nsec += static_cast<long>(ns % 1'000'000'000);
  if (t.tv_nsec >= 1'000'000'000) {
    t.tv_nsec -= 1'000'000'000;
    ++t.tv_sec;
  }
  return t;
}

// The daemon's sleeps: what lies between two of them is its busy time (daemon_busy_*).
void daemon_sleep_until(const timespec& t) noexcept {
  daemon_busy_end();
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, nullptr) == EINTR) {
  }
  daemon_busy_begin();
}

std::uint64_t ns_of(const timespec& t) noexcept {
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<std::uint64_t>(t.tv_nsec);
}

// A clock's reading (ns; 0 if the clock fails): the thread's or the process's CPU time.
std::uint64_t clock_ns(clockid_t id) noexcept {
  timespec c{};
  return clock_gettime(id, &c) == 0 ? ns_of(c) : 0;
}

// The daemon's whole CPU time so far (the report's overhead.daemon_cpu_s): what it costs
// the program besides the probe hits. Returns it (ns; 0 if the clock fails).
std::uint64_t store_daemon_cpu() noexcept {
  const std::uint64_t ns = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (ns != 0) A(g_hdr->daemon_cpu_ns).store(ns, std::memory_order_relaxed);
  return ns;
}

// The runtime's set-up on a program thread since `cpu0` (clock_ns): the constructor's
// scan, --trace attach and calibration, or the attach after a dlopen. It is the
// instrumentation's own time like a probe hit's (overhead.setup_s, in instr_ticks; python3
// with --trace 'Py*': 13-15 ms, 1.3-1.5% of a 1 s run, used to be outside it). Under
// budget it becomes a debt (g_setup_debt) that the periods after it repay, each with up
// to half of what its process-wide cap leaves (daemon_main), so that the budget holds
// over a run long enough to repay it while sampling goes on meanwhile; charged whole at
// once, the debt of a short run kept every function off to its end (profiler/README.md,
// Budget accounting).
void charge_setup(std::uint64_t cpu0) noexcept {
  const std::uint64_t cpu1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  if (cpu0 == 0 || cpu1 <= cpu0) return;
  add(g_hdr->setup_cpu_ns, cpu1 - cpu0);
  if (g_cfg.policy == Policy::budget) g_setup_debt.fetch_add(ns_to_ticks(cpu1 - cpu0), std::memory_order_relaxed);
}

void* daemon_main(void*) {
  // Nothing this thread calls is the program's: with --trace on libc its clock_gettime,
  // nanosleep and malloc calls were counted as the program's calls, and charged.
  cp::quiet_begin();
  const std::uint64_t tick_ns =
      g_cfg.policy == Policy::budget ? std::min(g_cfg.epoch_ns, g_cfg.period_ns) : g_cfg.epoch_ns;
  timespec next{};
  clock_gettime(CLOCK_MONOTONIC, &next);
  std::uint64_t last_epoch_ns = 0, last_period_ns = 0, elapsed_ns = 0;
  std::uint64_t last_tsc = rdtsc(), last_instr = 0, last_cpu_ns = 0, period_cpu_ticks = 0;
  std::uint64_t rotate = 0;
  std::uint64_t jitter = rdtsc() | 1;  // xorshift64 state
  const bool no_jitter = env_set("CROSSMOD_PROFILE_NO_JITTER");
  // Retraction (Retract above) with --trace and a sampling policy (full keeps everything
  // on, none never installs). The pass runs 1/32 of a tick after the wake: the hottest
  // functions, which it is for, took their samples by then, and until it runs every call
  // of theirs pays the detour.
  const RetractMode retract_how = retract_mode();
  const bool retract = g_cfg.trace != nullptr && g_cfg.policy != Policy::full &&
                       g_cfg.policy != Policy::none && retract_how != RetractMode::none;
  std::vector<Retract> rs;
  std::vector<cp::ProbeId> ids;
  std::vector<std::uint32_t> cand;  // tracepoint functions this tick's walk switched on
  if (retract) {
    try {
      rs.resize(g_cfg.max_funcs);
      ids.reserve(2 * static_cast<std::size_t>(g_cfg.max_funcs));
      cand.reserve(static_cast<std::size_t>(g_cfg.max_funcs));
    } catch (...) {
      rs.clear();
    }
  }
  // converge with --trace: a function that converged stays off for good, so its jump is
  // removed once, in a batch after the walk that found it (its detour would cost every
  // later call and buy nothing). Daemon-private, one flag per function slot.
  std::vector<std::uint8_t> gone;
  std::vector<cp::ProbeId> gone_ids;
  if (g_cfg.trace != nullptr && g_cfg.policy == Policy::converge) {
    try {
      gone.resize(g_cfg.max_funcs);
    } catch (...) {
      gone.clear();
    }
  }
  const std::uint64_t epoch_ticks = ns_to_ticks(g_cfg.epoch_ns);
  // With the marks (g_attn) the walk skips functions: the probes on (the timeline's
  // active_probes) are kept as a sum of per-function counts, updated when one is walked.
  std::uint64_t active = 0, seen_nf = 0;
  std::vector<std::uint32_t> on_probes;
  if (g_attn != nullptr) {
    try {
      on_probes.resize(g_cfg.max_funcs);
    } catch (...) {
      on_probes.clear();
    }
  }
  const bool marks = !on_probes.empty();
  last_cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
  // budget: all of the daemon's CPU time is instrumentation time. Its switch-ons and
  // removals are charged as they happen (wall ticks); after each wake the rest of the CPU
  // time it used since the last one (folds, rate windows, the walk itself) is charged too.
  // From the thread's start: its set-up above (the retraction tables) is the daemon's cost too.
  std::uint64_t daemon_cpu_last = 0;
  std::uint64_t daemon_charged_last = A(g_hdr->daemon_instr_ticks).load(std::memory_order_relaxed);
  // Stores the daemon's CPU time; under budget charges what the switch-ons and removals
  // (charged as they happened) left out of it since the last call.
  const auto settle_daemon_cpu = [&]() noexcept {
    const std::uint64_t daemon_cpu = store_daemon_cpu();
    if (g_cfg.policy == Policy::budget && daemon_cpu > daemon_cpu_last) {
      const std::uint64_t used = ns_to_ticks(daemon_cpu - daemon_cpu_last);
      const std::uint64_t charged = A(g_hdr->daemon_instr_ticks).load(std::memory_order_relaxed) - daemon_charged_last;
      if (used > charged) {
        g_period_spent.fetch_add(used - charged, std::memory_order_relaxed);
        add(g_hdr->daemon_instr_ticks, used - charged);
      }
      daemon_charged_last = A(g_hdr->daemon_instr_ticks).load(std::memory_order_relaxed);
    }
    if (daemon_cpu != 0) daemon_cpu_last = daemon_cpu;
  };
  settle_daemon_cpu();
  // What a wake costs this thread (CPU time across a sleep: the kernel's way in and out) and
  // what a retraction pass takes, both in ticks and as moving averages: the price of a pass.
  const bool wake_always = retract_wake_always();
  double wake_ticks_est = 0, pass_ticks_est = 0;
  // After a sleep that began at the thread's CPU time c0 (0: unknown).
  const auto note_wake = [&](std::uint64_t c0) noexcept {
    add(g_hdr->wakes, 1);
    const std::uint64_t c1 = c0 != 0 ? clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
    if (c1 <= c0) return;
    add(g_hdr->wake_cpu_ns, c1 - c0);
    follow(wake_ticks_est, static_cast<double>(ns_to_ticks(c1 - c0)));
  };
  while (!g_stopping.load(std::memory_order_relaxed)) {
    next = plus_ns(next, tick_ns);
    // The wake is a random offset into the tick (the grid `next` stays): windows opened at
    // a fixed phase of the grid see periodic stalls (a host's 1 kHz tick: 10 ms is ten of
    // its periods) always or never, and the samples' mean with them.
    if (!no_jitter) {
      jitter ^= jitter << 13;
      jitter ^= jitter >> 7;
      jitter ^= jitter << 17;
    }
    const timespec wake = no_jitter ? next : plus_ns(next, jitter % tick_ns);
    daemon_sleep_until(wake);
    note_wake(daemon_cpu_last);
    A(g_hdr->alive_tsc).store(rdtsc(), std::memory_order_relaxed);
    if (g_stopping.load(std::memory_order_relaxed)) break;
    attach_switch_pages();
    // Woken late by more than a tick (a loaded machine): drop the missed ticks instead of
    // running them back to back, which would make periods of no length and reset budgets.
    timespec now_ts{};
    clock_gettime(CLOCK_MONOTONIC, &now_ts);
    if (ns_of(now_ts) > ns_of(next) + tick_ns) next = now_ts;
    elapsed_ns += tick_ns;
    const bool epoch = elapsed_ns - last_epoch_ns >= g_cfg.epoch_ns;
    const bool period = g_cfg.policy == Policy::budget ? elapsed_ns - last_period_ns >= g_cfg.period_ns
                                                       : epoch;
    const std::uint64_t nf = A(g_hdr->nfuncs).load(std::memory_order_acquire);
    if (period) {
      const std::uint64_t cap_before = g_process_cap.load(std::memory_order_relaxed);
      last_period_ns = elapsed_ns;
      // Next period's process cap: budget x the CPU time the process got in this one.
      const std::uint64_t cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
      period_cpu_ticks = cpu_ns > last_cpu_ns ? ns_to_ticks(cpu_ns - last_cpu_ns) : 0;
      if (last_cpu_ns != 0 && cpu_ns > last_cpu_ns && g_cfg.policy == Policy::budget)
        g_process_cap.store(static_cast<std::uint64_t>(g_cfg.budget * static_cast<double>(ns_to_ticks(cpu_ns - last_cpu_ns))),
                            std::memory_order_relaxed);
      last_cpu_ns = cpu_ns;
      g_period.fetch_add(1, std::memory_order_relaxed);
      // The new period starts with what the last one spent over its cap (a debt), not from
      // zero: hits that find the budget spent switch their functions off, and those
      // switch-offs cost a toggle each, so a period with many functions on ends over its
      // cap by a storm of them. Forgiven each period, that excess was the overspend:
      // gen_many.py 3000 programs (4 threads) under --budget 1% charged 2.5-3.7%, java
      // under --trace '*' --budget 5% 7.8% (profiler/README.md, Budget accounting). The
      // subtraction leaves the hits added since the load in place.
      const std::uint64_t spent = g_period_spent.load(std::memory_order_relaxed);
      g_period_spent.fetch_sub(std::min(spent, cap_before), std::memory_order_relaxed);
      // The set-up's debt (charge_setup): up to half of what the new period's cap leaves
      // after the debt carried into it repays it, so that the repayment never puts a
      // period in debt by itself (taken from the whole cap, it deepened the debt of
      // periods that began overspent, and prof_many's 1% budget charged 1.8%). Only this
      // thread takes from it; program threads may add (a dlopen's attach).
      if (const std::uint64_t debt = g_setup_debt.load(std::memory_order_relaxed); debt > 0) {
        const std::uint64_t cap = g_process_cap.load(std::memory_order_relaxed);
        const std::uint64_t carried = g_period_spent.load(std::memory_order_relaxed);
        const std::uint64_t pay = std::min(debt, cap > carried ? (cap - carried) / 2 : 0);
        g_setup_debt.fetch_sub(pay, std::memory_order_relaxed);
        g_period_spent.fetch_add(pay, std::memory_order_relaxed);
        add(g_hdr->setup_repaid_ticks, pay);
      }
    }
    if (epoch) {
      last_epoch_ns = elapsed_ns;
      A(g_hdr->epochs).fetch_add(1, std::memory_order_relaxed);
    }
    // Budget: the daemon's switch-ons are instrumentation time too. They are charged to
    // the process-wide budget (and counted in daemon_instr_ticks); once it is spent, the
    // remaining functions stay off until the next period. The walk starts where the last
    // one stopped, so the same functions do not always wait.
    const bool budget = g_cfg.policy == Policy::budget;
    if (!rs.empty()) reinstall_pass(rs, ids, epoch, period && budget);
    if (!marks) active = 0;  // no per-function counts: every function is walked
    if (rotate >= nf) rotate = 0;
    std::uint64_t resume = rotate;
    bool spent = false;
    // The walk's clock. rdtsc costs ~25 cycles in this KVM guest (10 ns), and the walk read
    // it four times per function (python3 'Py*': 918 functions every wake; the readings were
    // a third of the walk's samples in `perf annotate`). One reading now serves 16
    // functions: a window cut by a clock up to 16 functions stale (a few microseconds of a
    // 10 ms window) counts the same calls, and a toggle's charge starts at the stale
    // reading, i.e. it charges a little more, never less.
    std::uint64_t clock = rdtsc();
    unsigned clock_uses = 0;
    const auto walk_now = [&]() noexcept {
      if (++clock_uses >= 16) {
        clock = rdtsc();
        clock_uses = 0;
      }
      return clock;
    };
    // The threads' accounted probe time for the call-rate windows the walk cuts: one pass
    // over the threads serves the next 2,000 ticks (a snapshot older than the cut counts
    // probe time from before it into the next window).
    std::uint64_t walk_instr = 0, walk_instr_tsc = 0;
    const auto fresh_instr = [&](std::uint64_t now) noexcept {
      if (now - walk_instr_tsc > 2000 || walk_instr_tsc == 0) {
        walk_instr = window_instr();
        walk_instr_tsc = now;
      }
      return walk_instr;
    };
    if (epoch && marks) {  // windows without calls start here at their first call
      g_epoch_instr.store(window_instr(), std::memory_order_relaxed);
      g_epoch_tsc.store(rdtsc(), std::memory_order_release);
    }
    // Budget: the first function the walk reaches once the period's budget is spent is
    // where the next walk starts.
    const auto note_spent = [&](std::uint64_t i) noexcept {
      if (budget && !spent && g_period_spent.load(std::memory_order_relaxed) > g_process_cap.load(std::memory_order_relaxed)) {
        spent = true;
        resume = i;
      }
    };
    // Calls the tracepoint functions switched on in this walk would make while off again
    // in this tick: what a retraction pass could spare their detours.
    double spare = 0;
    // Functions found since the last walk are looked at once without a mark.
    const std::uint64_t walked_nf = seen_nf;
    std::uint64_t walked = 0;
    seen_nf = nf;
    for (std::uint64_t j = 0; j < nf; ++j) {
      const std::uint64_t i = rotate + j < nf ? rotate + j : rotate + j - nf;
      if (marks && i < walked_nf) {
        const std::uint8_t m = g_attn[i].load(std::memory_order_relaxed);
        if (m == 0) continue;
        // Off and waiting for a switch-on, nothing else to do: not walked in a tick that
        // switches nothing on (java under budget: thousands of functions wait in every
        // tick while the budget is spent).
        if (m == kMarkOff) {
          note_spent(i);
          if (spent || (!epoch && !(period && budget))) continue;
        }
        // Unmarked before the look: a mark set after this exchange is seen next tick.
        if (g_attn[i].exchange(0, std::memory_order_acq_rel) == 0) continue;
      }
      FuncRecord& f = g_funcs[i];
      ++walked;
      // Counted again below when it is on (a function the walk skips keeps its count).
      if (marks) {
        active -= on_probes[i];
        on_probes[i] = 0;
      }
      if (A(f.entry_probe).load(std::memory_order_acquire) == cp::kNoProbe) continue;
      note_spent(i);
      const std::uint64_t t0 = walk_now();
      bool toggled = false;
      if (epoch) {
        fold(f);
        // Still on with a window: cut it here (its calls counted, its rate the latest), so
        // that one window never spans more than an epoch. Not under full (never switched
        // off, its estimate is the calls observed). A window without calls just starts
        // again here, without the toggle lock and the cut; the compare-exchange fails when
        // a hit has closed it meanwhile. With the marks (g_attn) such windows are mostly
        // not walked: their first call moves their start to the epoch's (first_call).
        std::uint64_t ws = A(f.win_start).load(std::memory_order_relaxed);
        if (g_cfg.policy == Policy::full || ws == 0) {
        } else if (A(f.calls).load(std::memory_order_relaxed) == A(f.win_calls0).load(std::memory_order_relaxed)) {
          const std::uint64_t now = walk_now();
          const std::uint64_t instr = fresh_instr(now);
          if (A(f.win_start).compare_exchange_strong(ws, now, std::memory_order_relaxed))
            A(f.win_instr0).store(instr, std::memory_order_relaxed);
        } else if (try_toggle_lock(f)) {
          if (A(f.state).load(std::memory_order_relaxed) == static_cast<std::uint64_t>(FnState::on) &&
              A(f.win_start).load(std::memory_order_relaxed) != 0) {
            const std::uint64_t now = walk_now();
            const std::uint64_t instr = fresh_instr(now);
            close_window(f, now, instr, false);
            open_window(f, now, instr);
          }
          toggle_unlock(f);
        }
        if (g_cfg.policy == Policy::converge && narrow_enough(f)) {
          switch_off(f, FnState::off_converged);
          std::uint64_t st = static_cast<std::uint64_t>(FnState::off_sampled);
          A(f.state).compare_exchange_strong(st, static_cast<std::uint64_t>(FnState::off_converged));
          if (i < gone.size() && gone[i] == 0 && is_tracepoint(f) &&
              A(f.state).load(std::memory_order_acquire) == static_cast<std::uint64_t>(FnState::off_converged)) {
            gone[i] = 1;
            try {
              push_probe_ids(f, gone_ids);
            } catch (...) {
              gone[i] = 0;  // next epoch
            }
          }
        }
        if (g_cfg.policy != Policy::full && g_cfg.policy != Policy::none && !spent)
          toggled = switch_on(f, FnState::off_sampled);
      }
      if (period && budget && !spent) toggled = switch_on(f, FnState::off_budget) || toggled;
      if (toggled && !rs.empty() && is_tracepoint(f) && cand.size() < cand.capacity()) {
        cand.push_back(static_cast<std::uint32_t>(i));
        Retract& r = rs[i];
        observe(r, f, epoch_ticks);
        if (retractable(r, retract_how)) spare += r.off_calls;
      }
      if (toggled) {  // the switch-on took time: the clock is stale by it
        clock = rdtsc();
        clock_uses = 0;
      }
      if (toggled && budget) {
        const std::uint64_t cost = clock - t0;
        g_period_spent.fetch_add(cost, std::memory_order_relaxed);
        add(g_hdr->daemon_instr_ticks, cost);
      }
      const std::uint64_t st = A(f.state).load(std::memory_order_relaxed);
      if (st == static_cast<std::uint64_t>(FnState::on)) {
        const std::uint32_t n = probe_count(f.entry_probe) + probe_count(f.exit_probe);
        active += n;
        if (marks) on_probes[i] = n;
      }
      // Marked again if the next tick has work here: calls in its open window (a cut at
      // the next epoch), samples to fold, or off and waiting for a switch-on. The fence orders
      // the exchange above and the reads below against a hit's add and its mark (a first
      // call that read the old win_calls0 before a cut's new one is seen here).
      if (marks) {
        std::atomic_thread_fence(std::memory_order_seq_cst);
        const bool off_for_now = st == static_cast<std::uint64_t>(FnState::off_sampled) ||
                                 st == static_cast<std::uint64_t>(FnState::off_budget);
        if ((A(f.win_start).load(std::memory_order_relaxed) != 0 &&
             A(f.calls).load(std::memory_order_relaxed) != A(f.win_calls0).load(std::memory_order_relaxed)) ||
            A(f.samples).load(std::memory_order_relaxed) != A(f.all.folded_n).load(std::memory_order_relaxed))
          g_attn[i].store(kMarkLook, std::memory_order_relaxed);
        else if (off_for_now)
          g_attn[i].store(kMarkOff, std::memory_order_relaxed);
      }
    }
    rotate = spent ? resume : 0;
    add(g_hdr->walks, 1);
    add(g_hdr->walked, walked);
    if (!gone_ids.empty()) {
      const std::uint64_t t0 = rdtsc();
      std::size_t removed = 0;
      check(cp::retract_many(gone_ids.data(), gone_ids.size(), &removed));
      add(g_hdr->retracts, removed);
      charge_daemon(rdtsc() - t0);
      gone_ids.clear();
    }
    if (period) {
      // Timeline: instrumentation time of all threads in the period just ended.
      const std::uint64_t instr = instr_sum() + A(g_hdr->daemon_instr_ticks).load(std::memory_order_relaxed);
      const std::uint64_t now = rdtsc();
      const std::uint64_t k = A(g_hdr->ntimeline).load(std::memory_order_relaxed);
      if (k < g_cfg.timeline_cap) {
        TimelineEntry& e = g_timeline[k];
        e.tsc = now;
        e.instr_ticks = instr - last_instr;
        e.threads = g_period_threads.exchange(0, std::memory_order_relaxed);
        e.active_probes = active;
        e.period_ticks = now - last_tsc;
        e.cpu_ticks = period_cpu_ticks;
        A(g_hdr->ntimeline).store(k + 1, std::memory_order_release);
      }
      last_instr = instr;
      last_tsc = now;
    }
    // The retraction pass: a second wake, in a tick that switched a tracepoint function
    // on, when the detours it would spare may outweigh the wake and the pass (unless
    // CROSSMOD_PROFILE_RETRACT_WAKE=always). The pass is paid twice: its removals now,
    // the installs before the next switch-on. Before a wake has been measured, it runs.
    if (!cand.empty()) {
      const bool pays = wake_always || wake_ticks_est == 0 ||
                        spare * kDetourCeilingTicks > wake_ticks_est + 2 * pass_ticks_est;
      if (pays) {
        const std::uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        daemon_sleep_until(plus_ns(wake, tick_ns / 32));
        note_wake(c0);
        add(g_hdr->retract_wakes, 1);
        if (g_stopping.load(std::memory_order_relaxed)) break;
        const std::uint64_t p0 = rdtsc();
        retract_pass(rs, cand, ids, epoch_ticks, retract_how);
        follow(pass_ticks_est, static_cast<double>(rdtsc() - p0));
      } else {
        add(g_hdr->retract_skips, 1);
      }
      cand.clear();
    }
    settle_daemon_cpu();
  }
  // The last tick's work too (a stop can come between a walk and its settling): under
  // budget the report's instrumentation time must hold all of the daemon's CPU time.
  settle_daemon_cpu();
  return nullptr;
}

void at_exit() {
  g_stopping.store(true, std::memory_order_relaxed);
  // A forked child shares the parent's segment: only the image that made it ends it.
  if (g_hdr != nullptr && g_hdr->pid == static_cast<std::uint64_t>(getpid()))
    A(g_hdr->end_tsc).store(rdtsc(), std::memory_order_release);
}

bool parse_u64(const char* s, std::uint64_t* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}
bool parse_double(const char* s, double* out) {
  if (s == nullptr || *s == '\0') return false;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (*end != '\0' || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// Reads CROSSMOD_PROFILE_*; false (and a line on stderr) when the environment is unusable.
bool read_config() {
  g_cfg.dir = std::getenv("CROSSMOD_PROFILE_DIR");
  if (g_cfg.dir == nullptr || *g_cfg.dir == '\0') {
    warn("CROSSMOD_PROFILE_DIR is not set; not profiling (use `crossmod profile`)");
    return false;
  }
  if (const char* p = std::getenv("CROSSMOD_PROFILE_POLICY")) {
    const std::string s = p;
    if (s == "none") g_cfg.policy = Policy::none;
    else if (s == "paper") g_cfg.policy = Policy::paper;
    else if (s == "budget") g_cfg.policy = Policy::budget;
    else if (s == "converge") g_cfg.policy = Policy::converge;
    else if (s == "full") g_cfg.policy = Policy::full;
    else {
      warn("CROSSMOD_PROFILE_POLICY is not one of none|paper|budget|converge|full; not profiling");
      return false;
    }
  }
  std::uint64_t u = 0;
  double d = 0;
  if (parse_u64(std::getenv("CROSSMOD_PROFILE_SAMPLES"), &u) && u > 0) g_cfg.samples = static_cast<std::uint32_t>(u);
  if (parse_u64(std::getenv("CROSSMOD_PROFILE_EPOCH_NS"), &u) && u > 0) g_cfg.epoch_ns = u;
  if (parse_u64(std::getenv("CROSSMOD_PROFILE_PERIOD_NS"), &u) && u > 0) g_cfg.period_ns = u;
  if (parse_u64(std::getenv("CROSSMOD_PROFILE_MAX_FUNCS"), &u) && u > 0 && u <= cp::kMaxProbes)
    g_cfg.max_funcs = static_cast<std::uint32_t>(u);
  if (parse_double(std::getenv("CROSSMOD_PROFILE_BUDGET"), &d) && d > 0 && d <= 1) g_cfg.budget = d;
  if (parse_double(std::getenv("CROSSMOD_PROFILE_CI"), &d) && d > 0) g_cfg.ci = d;
  if (parse_double(std::getenv("CROSSMOD_PROFILE_TSC_HZ"), &d) && d > 1e6) g_cfg.tsc_hz = d;
  if (parse_double(std::getenv("CROSSMOD_PROFILE_TEST_OFF_STALL_US"), &d) && d > 0 && d < 1e6)
    g_cfg.test_off_stall_ns = static_cast<std::uint64_t>(d * 1e3);
  if (const char* f = std::getenv("CROSSMOD_PROFILE_FUNCTIONS"); f != nullptr && *f != '\0') g_cfg.functions = f;
  if (const char* t = std::getenv("CROSSMOD_PROFILE_TRACE"); t != nullptr && *t != '\0') g_cfg.trace = t;
  if (const char* t = std::getenv("CROSSMOD_PROFILE_TRACE_OBJECT"); t != nullptr && *t != '\0')
    g_cfg.trace_object = t;
  if (g_cfg.tsc_hz == 0) {  // launched by hand: measure it (20 ms)
    timespec a{}, b{};
    clock_gettime(CLOCK_MONOTONIC, &a);
    const std::uint64_t t0 = rdtsc();
    timespec sl{0, 20'000'000};
    nanosleep(&sl, nullptr);
    clock_gettime(CLOCK_MONOTONIC, &b);
    const std::uint64_t t1 = rdtsc();
    const double s = static_cast<double>(b.tv_sec - a.tv_sec) + static_cast<double>(b.tv_nsec - a.tv_nsec) * 1e-9;
    g_cfg.tsc_hz = static_cast<double>(t1 - t0) / s;
  }
  return true;
}

// CROSSMOD_PROFILE_DIR/segment-N.bin into `path`; false when it does not fit.
bool segment_path(char (&path)[4096], unsigned seg) noexcept {
  return std::snprintf(path, sizeof path, "%s/segment-%u.bin", g_cfg.dir, seg) <
         static_cast<int>(sizeof path);
}

// The run's next segment number, shared by all its processes: a word in
// CROSSMOD_PROFILE_DIR/segments.next, mapped MAP_SHARED by each image at its first segment
// (a forked child inherits the mapping). Without it every new segment tried 0, 1, 2, ...
// until an O_EXCL open succeeded, so the opens grew with the square of the images: bash
// running profiler/workloads/shell_loop.sh under --trace '*' (60 forks, 30 execs) made
// 4,871 failing opens in all, 776 with it (strace -c), and its set-up took 0.949x the
// CPU time (profiler/README.md, Crash-proof data path).
// The number only orders the images; the O_EXCL loop below still decides. Null when the
// file cannot be made: the loop then starts at 0, as before.
std::atomic<std::uint32_t>* g_next_segment = nullptr;

std::atomic<std::uint32_t>* map_next_segment() noexcept {
  char path[4096];
  if (std::snprintf(path, sizeof path, "%s/segments.next", g_cfg.dir) >=
      static_cast<int>(sizeof path))
    return nullptr;
  const int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  struct stat st {};
  // Growing it is idempotent, so two images racing here both see a whole page.
  if (fstat(fd, &st) != 0 || (st.st_size < 4096 && ftruncate(fd, 4096) != 0)) {
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  return p == MAP_FAILED ? nullptr : static_cast<std::atomic<std::uint32_t>*>(p);
}

// The next free segment-N.bin in CROSSMOD_PROFILE_DIR, created and sized: its fd (-1 and
// a line on stderr, ending with `otherwise`, when it cannot be made) and N.
int create_segment_file(std::size_t total, unsigned* seg_out, const char* otherwise) noexcept {
  if (g_next_segment == nullptr) g_next_segment = map_next_segment();
  int fd = -1;
  unsigned seg =
      g_next_segment != nullptr ? g_next_segment->fetch_add(1, std::memory_order_relaxed) : 0;
  char path[4096];
  for (; seg < 10000; ++seg) {
    if (!segment_path(path, seg)) break;
    fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  if (fd < 0) {
    char line[200];
    std::snprintf(line, sizeof line, "cannot create a segment file in CROSSMOD_PROFILE_DIR; %s",
                  otherwise);
    warn(line);
    return -1;
  }
  if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
    close(fd);
    unlink(path);
    char line[200];
    std::snprintf(line, sizeof line, "cannot size the segment file; %s", otherwise);
    warn(line);
    return -1;
  }
  if (g_next_segment != nullptr) {  // past the numbers the loop found taken
    std::uint32_t next = g_next_segment->load(std::memory_order_relaxed);
    while (next < seg + 1 &&
           !g_next_segment->compare_exchange_weak(next, seg + 1, std::memory_order_relaxed)) {
    }
  }
  *seg_out = seg;
  return fd;
}

// What every segment's header says of the run's configuration and of this image: the
// image's pid, its segment number, its start. The caller writes the magic last.
void init_header(Header& h, unsigned seg, std::size_t total) noexcept {
  h.version = kVersion;
  h.header_bytes = sizeof(Header);
  h.max_funcs = g_cfg.max_funcs;
  h.max_threads = g_cfg.max_threads;
  h.timeline_cap = g_cfg.timeline_cap;
  h.string_bytes = g_cfg.string_bytes;
  h.total_bytes = total;
  h.pid = static_cast<std::uint64_t>(getpid());
  h.segment = seg;
  h.policy = static_cast<std::uint32_t>(g_cfg.policy);
  h.samples = g_cfg.samples;
  h.budget = g_cfg.budget;
  h.epoch_ns = g_cfg.epoch_ns;
  h.period_ns = g_cfg.period_ns;
  h.ci = g_cfg.ci;
  h.start_tsc = rdtsc();
}

// A new segment file per process image: segment-0.bin, then -1 after an execve, ...
bool open_segment() {
  const Layout l =
      layout(g_cfg.max_funcs, g_cfg.max_threads, g_cfg.timeline_cap, g_cfg.string_bytes);
  unsigned seg = 0;
  const int fd = create_segment_file(l.total, &seg, "not profiling");
  if (fd < 0) return false;
  void* p = mmap(nullptr, l.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    warn("cannot map the segment file; not profiling");
    return false;
  }
  // The file is sparse and we touch it a page here and there: without this, the first
  // touch of a region (the header, a thread's record) read ahead a large folio of holes
  // and zeroed it, ~1-3 ms of CPU each (perf: filemap_fault -> page_cache_ra_order ->
  // zero_user_segments), 4-6 ms of a python3 -c pass. Advice only: ignored if refused.
  (void)madvise(p, l.total, MADV_RANDOM);
  auto* base = static_cast<char*>(p);
  g_hdr = reinterpret_cast<Header*>(base);
  g_funcs = reinterpret_cast<FuncRecord*>(base + l.funcs);
  g_hists = reinterpret_cast<Hist*>(base + l.hists);
  g_threads = reinterpret_cast<ThreadRecord*>(base + l.threads);
  g_timeline = reinterpret_cast<TimelineEntry*>(base + l.timeline);
  g_strings = base + l.strings;
  Header& h = *g_hdr;
  init_header(h, seg, l.total);
  {
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0) g_ncpus = static_cast<std::uint64_t>(std::max(1, CPU_COUNT(&cpus)));
  }
  h.string_used = 1;  // offset 0 is the empty string
  // The magic last: a reader that sees it sees an initialised header.
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  return true;
}

// The tail-call guard (resolve_pending_exits) was needed while the probes layer aborted on
// tail calls between exit-probed functions; it chains them now, so the guard is opt-in.
bool env_set(const char* name) noexcept {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}
bool tailcall_guard() noexcept { return env_set("CROSSMOD_PROFILE_TAILCALL_GUARD"); }

void set_note(const char* s) {
  std::snprintf(g_hdr->note, sizeof g_hdr->note, "%s", s);
}

// --trace in objects loaded after start-up (dlopen: Python's extension modules, plugins, a
// BLAS a module pulls in). The runtime's dlopen (below) attaches the tracepoints of every
// object the real one added, after it returned (probes::attach_tracepoints_in_new_objects:
// the new object's constructors have run, and the attach, with the probes off, and later
// installs are safe while its code runs). The probes layer pins an object that got a probe
// site, so a dlclose cannot unmap it. The counts for the note: guarded by g_late_mutex.
std::mutex g_late_mutex;
std::atomic<bool> g_late_on{false};  // set at start-up once the objects loaded then are marked seen
std::size_t g_late_objects = 0, g_late_made = 0, g_late_refused = 0;
char g_trace_note[200] = "";  // the start-up attach's note; the late attaches' counts follow it
cp::Status g_late_status = cp::Status::ok;  // attach_late_objects: the first failure

// Header::refusals from the probes layer's list: count per reason and object (its file
// name), most frequent first, as many as fit. After every attach (start-up, dlopen).
void write_refusals() noexcept {
  try {
    std::vector<cp::TracepointRefusal> r(cp::tracepoint_refusals(nullptr, 0));
    r.resize(std::min(r.size(), cp::tracepoint_refusals(r.data(), r.size())));
    std::vector<std::pair<std::string, std::size_t>> by;
    for (const cp::TracepointRefusal& x : r) {
      const char* slash = x.object != nullptr ? std::strrchr(x.object, '/') : nullptr;
      const std::string key = std::string(x.reason != nullptr ? x.reason : "?") + " (" +
                              (slash != nullptr ? slash + 1 : (x.object != nullptr ? x.object : "?")) + ")";
      auto it = std::find_if(by.begin(), by.end(), [&](const auto& p) { return p.first == key; });
      if (it == by.end()) by.emplace_back(key, 1);
      else ++it->second;
    }
    std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string text = by.empty() ? std::string() : "--trace refused:";
    for (std::size_t i = 0; i < by.size(); ++i) {
      const std::string item = (i == 0 ? " " : ", ") + std::to_string(by[i].second) + " " + by[i].first;
      if (text.size() + item.size() + 5 >= sizeof g_hdr->refusals) {
        text += ", ...";
        break;
      }
      text += item;
    }
    std::snprintf(g_hdr->refusals, sizeof g_hdr->refusals, "%s", text.c_str());
  } catch (...) {
  }
}

// At start-up, after the first attach: every object loaded now counts as seen.
void remember_loaded_objects() noexcept {
  cp::mark_objects_seen();
  g_late_on = true;
}

// After a dlopen that succeeded: attaches the tracepoints of the objects not seen before,
// and updates the note.
void attach_late_objects() noexcept {
  if (!g_late_on) return;
  std::size_t objects = 0, made = 0, refused = 0;
  const char* patterns[] = {g_cfg.trace};
  const cp::Status s = cp::attach_tracepoints_in_new_objects(patterns, 1, g_cfg.trace_object, &objects, &made, &refused);
  if (objects == 0) return;
  std::lock_guard<std::mutex> lock(g_late_mutex);
  g_late_objects += objects;
  g_late_made += made;
  g_late_refused += refused;
  // The first failure stays in the note: table_full means the probes layer's table
  // (probes::kMaxProbes) is full and the functions found after it have no tracepoint
  // (java under --trace '*': libjvm.so alone has 155,102 function symbols in .symtab).
  if (g_late_status == cp::Status::ok) g_late_status = s;
  char buf[sizeof g_hdr->note];
  std::snprintf(buf, sizeof buf, "%s; loaded later: %zu objects, %zu probes, %zu refused%s%s", g_trace_note,
                g_late_objects, g_late_made, g_late_refused, g_late_status == cp::Status::ok ? "" : ", status ",
                g_late_status == cp::Status::ok ? "" : cp::to_string(g_late_status));
  set_note(buf);
  write_refusals();
}

// The program's own code runs after the runtime's constructor. The functions found during
// it have their first window open since the segment's start (on_found): it moves to now,
// and the calls they had meanwhile (the calibration's, which is not quiet, and other
// constructors') count as they are, exactly, since they were on. Then the program's calls
// get a window of their own, not one that holds the start-up's milliseconds.
void end_startup() noexcept {
  const std::uint64_t now = rdtsc();
  const std::uint64_t instr = window_instr();
  const std::uint64_t nf = A(g_hdr->nfuncs).load(std::memory_order_acquire);
  for (std::uint64_t i = 0; i < nf; ++i) {
    FuncRecord& f = g_funcs[i];
    if (A(f.win_start).load(std::memory_order_relaxed) != g_hdr->start_tsc) continue;
    A(f.est_calls).store(static_cast<double>(A(f.calls).load(std::memory_order_relaxed)), std::memory_order_relaxed);
    A(f.est_until).store(now, std::memory_order_relaxed);
    open_window(f, now, instr);
  }
  g_program_tsc = now;
}

// The first period's process-wide cap, before the daemon has measured a period: budget x
// period x online CPUs (g_process_cap).
void set_first_process_cap() noexcept {
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  g_process_cap.store(g_thread_cap * static_cast<std::uint64_t>(cpus > 0 ? cpus : 1),
                      std::memory_order_relaxed);
}

void start_daemon() noexcept {
  if (g_cfg.policy == Policy::none) return;
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&th, &attr, daemon_main, nullptr) == 0) {
    A(g_hdr->flags).fetch_or(kFlagDaemon, std::memory_order_relaxed);
    pthread_setname_np(th, "crossmod-prof");
  } else {
    warn("cannot start the daemon thread; probes that switch off stay off");
  }
  pthread_attr_destroy(&attr);
}

// The child of glibc's fork (its atfork child handler, after forget_switch_pages_in_child):
// a segment of its own and a daemon of its own. Sharing the parent's segment, the child's
// functions that switched off stayed off (no daemon: a multiprocessing pool's workers gave
// a sample or ten per function), its switch-offs changed the state the parent's probes
// read, and its calls were the parent's. The new segment is a copy of what describes the
// functions (names, probes, provider, state: the child's code is the parent's as it was
// at the fork) with every count at zero, mapped over the parent's in the child's address
// space, so every pointer into the records stays valid. The child has one thread (this
// one): it registers again at its next hit. Calls it had in flight lose their frames (no
// sample). On any failure the child keeps sharing the parent's segment, as before.
// glibc resets malloc and its thread-stack locks in the child before the handlers run,
// and the probes layer's fork handler made sure no toggle lock was held; not for _Fork or
// clone children, which must stay async-signal-safe.
void own_segment_in_child() noexcept {
  if (g_hdr == nullptr || env_set("CROSSMOD_PROFILE_FORK_SHARED")) return;
  const std::uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  const Layout l =
      layout(g_cfg.max_funcs, g_cfg.max_threads, g_cfg.timeline_cap, g_cfg.string_bytes);
  unsigned seg = 0;
  const int fd = create_segment_file(l.total, &seg, "this forked child adds into its parent's");
  if (fd < 0) return;
  // Written with pwrite (the rest of the file is a hole, zeros): a mapping of the new file
  // touched here would fault in and zero what it touches twice, in this process and after
  // the remap.
  const auto put = [fd](const void* data, std::size_t n, std::size_t at) noexcept {
    const auto* b = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = pwrite(fd, b, n, static_cast<off_t>(at));
      if (w <= 0) return false;
      b += w;
      at += static_cast<std::size_t>(w);
      n -= static_cast<std::size_t>(w);
    }
    return true;
  };
  const Header& old = *g_hdr;
  Header h{};
  init_header(h, seg, l.total);
  const std::uint64_t now = h.start_tsc;
  // What the parent's start-up measured and found, which the child inherits.
  h.calib_ticks = old.calib_ticks;
  std::memcpy(h.self_ticks, old.self_ticks, sizeof h.self_ticks);
  std::memcpy(h.nest_ticks, old.nest_ticks, sizeof h.nest_ticks);
  const std::uint64_t nf =
      std::min<std::uint64_t>(A(old.nfuncs).load(std::memory_order_acquire), old.max_funcs);
  h.nfuncs = nf;
  h.string_used = std::min<std::uint64_t>(old.string_used, old.string_bytes);
  h.flags = (old.flags & ~kFlagDaemon) | kFlagForkChild;
  h.switch_errno = old.switch_errno;
  std::memcpy(h.note, old.note, sizeof h.note);
  std::memcpy(h.refusals, old.refusals, sizeof h.refusals);
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  bool ok = put(g_strings, h.string_used, l.strings);
  FuncRecord batch[16];
  for (std::uint64_t i = 0; ok && i < nf; i += 16) {
    const std::uint64_t n = std::min<std::uint64_t>(16, nf - i);
    for (std::uint64_t k = 0; k < n; ++k) {
      FuncRecord& o = g_funcs[i + k];  // the parent's, still mapped here (for_each_probe)
      FuncRecord& f = batch[k];
      f = FuncRecord{};
      f.provider = o.provider;
      f.entry_probe = o.entry_probe;
      f.exit_probe = o.exit_probe;
      f.flags = o.flags;
      f.state = o.state;
      f.function = o.function;
      f.name_off = o.name_off;
      f.object_off = o.object_off;
      // A switch the parent had half done stays half done here: the probes layer let no
      // toggle be in flight at the fork, but a switch is several (the daemon's switch-on
      // had set the state and waited at the layer's fork gate for its first activation:
      // with --epoch 1ms most forks of prof_mt found leaf_a on with its probes off, and the
      // child never sampled it). The probes' own state decides: a function on with a probe
      // off is off_sampled (the daemon switches it on whole at its first epoch), one off
      // with a probe on has them switched off here.
      bool all_on = true, any_on = false;
      const auto look = [&](cp::ProbeId id) {
        const bool on = cp::is_active(id);
        all_on = all_on && on;
        any_on = any_on || on;
      };
      for_each_probe(o.entry_probe, look);
      for_each_probe(o.exit_probe, look);
      if (f.state == static_cast<std::uint64_t>(FnState::on) && !all_on &&
          g_cfg.policy != Policy::full)
        f.state = static_cast<std::uint64_t>(FnState::off_sampled);
      if (f.state != static_cast<std::uint64_t>(FnState::on) && any_on) {
        for_each_probe(o.entry_probe, [](cp::ProbeId id) { (void)cp::deactivate(id); });
        for_each_probe(o.exit_probe, [](cp::ProbeId id) { (void)cp::deactivate(id); });
      }
      // On at the fork: its window opens now (the child's calls from here are counted in it).
      if (f.state == static_cast<std::uint64_t>(FnState::on) && o.win_start != 0) {
        f.win_start = now;
        f.armed_tsc = now;
        f.on_since = now;
      }
    }
    ok = put(batch, n * sizeof(FuncRecord), l.funcs + i * sizeof(FuncRecord));
  }
  ok = ok && put(&h, sizeof h, 0);  // the header (its magic) last
  // The parent's mapping is replaced in place: same address, the child's file.
  void* at =
      ok ? mmap(g_hdr, l.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) : MAP_FAILED;
  close(fd);
  if (at == MAP_FAILED) {  // the parent's mapping is still there: shared, as before
    char path[4096];
    if (segment_path(path, seg)) unlink(path);  // no half-written segment for the report
    return;
  }
  (void)madvise(at, l.total, MADV_RANDOM);  // as open_segment's
  // Process state of the parent's daemon and threads, for this process alone now.
  g_period.store(1, std::memory_order_relaxed);
  g_period_spent.store(0, std::memory_order_relaxed);
  g_setup_debt.store(0, std::memory_order_relaxed);
  g_period_threads.store(0, std::memory_order_relaxed);
  g_epoch_tsc.store(0, std::memory_order_relaxed);
  g_epoch_instr.store(0, std::memory_order_relaxed);
  g_daemon_busy_total.store(0, std::memory_order_relaxed);
  g_daemon_busy_since.store(0, std::memory_order_relaxed);
  set_first_process_cap();
  g_spare_thread = ThreadRecord{};
  g_switch_next = 0;
  if (g_attn != nullptr)
    for (std::uint32_t i = 0; i < g_cfg.max_funcs; ++i)
      g_attn[i].store(kMarkLook, std::memory_order_relaxed);
  t_tls = Tls{};
  g_program_tsc = now;
  g_stopping.store(false, std::memory_order_relaxed);
  charge_setup(cpu0);  // the child's set-up: this split
  start_daemon();
}

// glibc fork's handlers (pthread_atfork in profile_init) also hold g_mutex across the
// fork: a discovery in another thread (on_found) at the fork left the child's copy held
// for good, and the child's first discovery waited forever
// (ProfileFork.ChildDiscoversWhileAnotherThreadWasDiscovering: 3 of 5 runs had a child
// stuck before), and own_segment_in_child copied a record half made. These run before the
// probes layer's (registered after them), so the order is g_mutex, then the registry
// mutex and the toggle locks: the order on_found takes them in (it may deactivate under
// g_mutex; no probes lock is held around a discovery). The _Fork and clone wrappers
// (below) must stay async-signal-safe and take no lock: their children still share.
void atfork_prepare() noexcept {
  g_mutex.lock();
  forking_prepare();
}
void atfork_parent() noexcept {
  forking_parent();
  g_mutex.unlock();
}
void atfork_child() noexcept {
  g_mutex.unlock();  // atfork_prepare's: the child has no other thread to hold it
  forget_switch_pages_in_child();
  own_segment_in_child();
}

// The real _Fork, for the runtime's _Fork (below): looked up here, so that the wrapper
// stays async-signal-safe like the function it wraps.
using ForkFn = pid_t (*)();
using CloneFn = int (*)(int (*)(void*), void*, int, void*, ...);
ForkFn g_real_fork = nullptr;

__attribute__((constructor(200))) void profile_init() {
  const std::uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  g_real_fork = reinterpret_cast<ForkFn>(dlsym(RTLD_NEXT, "_Fork"));
  if (!read_config() || !open_segment()) return;
  g_thread_cap = static_cast<std::uint64_t>(g_cfg.budget * static_cast<double>(ns_to_ticks(g_cfg.period_ns)));
  set_first_process_cap();
  g_by_function = new std::unordered_map<std::uintptr_t, std::uint32_t>();
  // The walk's marks, for the policies that switch functions on again (full walks every
  // function to fold its samples; none has no daemon).
  if (g_cfg.policy == Policy::paper || g_cfg.policy == Policy::budget || g_cfg.policy == Policy::converge)
    g_attn = new (std::nothrow) std::atomic<std::uint8_t>[g_cfg.max_funcs]();
  g_seq_pages = new std::atomic<const std::uint32_t*>[g_cfg.max_threads]();
  (void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
  if (void* fr = mmap(nullptr, sizeof(Frame) * kFrames * g_cfg.max_threads, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      fr != MAP_FAILED)
    g_frames = static_cast<Frame*>(fr);
  (void)cp::scan_loaded_objects();
  g_pending_exits = new std::vector<std::pair<std::uint32_t, cp::ProbeId>>();
  g_defer_exits = tailcall_guard();
  (void)cp::on_discovery(on_found, nullptr);  // replays every probe found so far
  if (g_defer_exits) {
    g_defer_exits = false;  // exits found later (none for patchable today) go on directly
    resolve_pending_exits();
  }
  if (g_cfg.trace != nullptr) {
    std::size_t made = 0, refused = 0;
    g_defer_exits = tailcall_guard();
    // Jump-only unless asked: a trap-mode tracepoint (int3 at the entry, where the jump is
    // impossible) raises a SIGTRAP on every call whether its probe is on or off, so no
    // policy could make it cheap (python3 with 'Py*': 375 of 939 functions, sys time 5.5 of
    // 6.3 s under paper). Such functions are refused and counted in the note.
    const bool traps = env_set("CROSSMOD_PROFILE_TRACE_TRAPS");
    attach_calib_tracepoint();
    cp::set_tracepoint_trap_fallback(traps);
    g_pending_tps = new (std::nothrow) std::vector<std::pair<std::uint32_t, cp::ProbeId>>();
    // Once the batch is in, traced functions the runtime calls (libc's) hit their probes:
    // none of the rest of the attach is the program's.
    cp::quiet_begin();
    const cp::Status s = cp::attach_tracepoints(g_cfg.trace, g_cfg.trace_object, &made, &refused);
    if (g_pending_tps != nullptr) activate_pending_tracepoints();
    if (g_defer_exits) {
      g_defer_exits = false;
      resolve_pending_exits();
    }
    char buf[200];
    if (s == cp::Status::unsupported) {
      g_hdr->flags |= kFlagTraceUnsupported;
      set_note("--trace: this probes build does not support tracepoints yet (attach_tracepoints: unsupported)");
    } else {
      std::snprintf(buf, sizeof buf, "--trace: %zu tracepoint probes, %zu functions refused (%s), status %s",
                    made, refused,
                    traps ? "trap mode allowed" : "jump-only: trap-mode sites refused, CROSSMOD_PROFILE_TRACE_TRAPS=1 allows them",
                    cp::to_string(s));
      set_note(buf);
      std::snprintf(g_trace_note, sizeof g_trace_note, "%s", buf);
      write_refusals();
      remember_loaded_objects();
    }
    cp::quiet_end();
  }
  calibrate();
  {
    volatile unsigned c = 0;
    crossmod_profile_calib_target_cyg(&c);  // the cyg site is found on its first call
  }
  // self_ticks / nest_ticks per provider the program can have (cyg sites are found on first
  // execution, in any object, any time: always): ~0.3-0.5 ms each here.
  if (g_patchable_probes.load(std::memory_order_relaxed))
    calibrate_self(g_calib_entry, g_calib_exit, crossmod_profile_calib_target, cp::Provider::patchable);
  calibrate_self(g_calib_cyg_entry, g_calib_cyg_exit, crossmod_profile_calib_target_cyg, cp::Provider::cyg);
  if (g_calib_tp_entry != cp::kNoProbe && !cp::tracepoint_trap_mode(g_calib_tp_entry))
    calibrate_self(g_calib_tp_entry, g_calib_tp_exit, crossmod_profile_calib_target_tp, cp::Provider::tracepoint);
  for (unsigned k = 0; k < 4; ++k) g_hit_extra[k] = g_nest[k] > 0 ? static_cast<std::uint64_t>(g_nest[k]) / 2 : 0;
  std::atexit(at_exit);
  end_startup();
  charge_setup(cpu0);
  start_daemon();
}

}  // namespace

// For the dlopen and _Fork below (outside this namespace).
void after_dlopen() noexcept {
  if (g_cfg.trace == nullptr) return;
  // The attach's own calls (fnmatch on every symbol, malloc) are not the program's.
  cp::quiet_begin();
  const std::uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
  attach_late_objects();
  charge_setup(cpu0);
  cp::quiet_end();
}
pid_t fork_without_handlers() noexcept {
  if (g_real_fork == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  forking_prepare();
  const pid_t pid = g_real_fork();
  if (pid == 0)
    forget_switch_pages_in_child();
  else
    forking_parent();
  return pid;
}

// clone without CLONE_VM: the child gets a copy of the address space, as from fork, but no
// atfork handler runs; it forgets the parent's perf pages before the program's function.
struct CloneCall {
  int (*fn)(void*);
  void* arg;
};
int clone_child(void* p) {
  const CloneCall c = *static_cast<const CloneCall*>(p);  // the child's copy of the caller's frame
  forget_switch_pages_in_child();
  return c.fn(c.arg);
}
int clone_copy(CloneFn real, int (*fn)(void*), void* stack, int flags, void* arg, pid_t* ptid, void* tls,
               pid_t* ctid) noexcept {
  CloneCall c{fn, arg};
  forking_prepare();
  const int pid = real(clone_child, stack, flags, &c, ptid, tls, ctid);
  forking_parent();  // the child runs clone_child on its own copy, never this
  return pid;
}

}  // namespace crossmod::profile

// The program's dlopen (this library is preloaded, so its definition comes first): the
// real one, then, with --trace, the tracepoints of the objects it loaded. After a failure
// nothing else runs, so dlerror says why; after a success the probes layer's pinning
// dlopen calls succeed too.
extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using Fn = void* (*)(const char*, int);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dlopen"));
  if (real == nullptr) return nullptr;
  void* h = real(file, mode);
  if (h != nullptr) crossmod::profile::after_dlopen();
  return h;
}

// A program's own _Fork (glibc 2.34: fork without the atfork handlers, async-signal-safe)
// gets the runtime's fork handling here: without it the child kept the parent's perf page
// addresses, which the kernel does not copy, and its first sample died of SIGSEGV. glibc's
// fork calls _Fork inside libc, not through this symbol.
extern "C" __attribute__((visibility("default"))) pid_t _Fork() noexcept {
  return crossmod::profile::fork_without_handlers();
}

// A program's own clone (glibc's wrapper; a raw clone system call is not seen). With
// CLONE_VM the child shares the memory, perf pages included, and is passed on untouched;
// without it the child is a copy, like fork's, and the kernel did not copy the perf pages:
// its first sample died of SIGSEGV (ProfileFork.CloneWithoutSharedMemoryKeepsTheChildAlive).
extern "C" __attribute__((visibility("default"))) int clone(int (*fn)(void*), void* stack, int flags, void* arg,
                                                            ...) noexcept {
  static const crossmod::profile::CloneFn real =
      reinterpret_cast<crossmod::profile::CloneFn>(dlsym(RTLD_NEXT, "clone"));
  if (real == nullptr) {
    errno = ENOSYS;
    return -1;
  }
  pid_t* ptid = nullptr;
  void* tls = nullptr;
  pid_t* ctid = nullptr;
  // The optional arguments are read only when a flag says they were passed.
  if ((flags & (CLONE_PARENT_SETTID | CLONE_SETTLS | CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | CLONE_PIDFD)) != 0) {
    va_list ap;
    va_start(ap, arg);
    ptid = va_arg(ap, pid_t*);
    tls = va_arg(ap, void*);
    ctid = va_arg(ap, pid_t*);
    va_end(ap);
  }
  if ((flags & CLONE_VM) != 0) return real(fn, stack, flags, arg, ptid, tls, ctid);
  return crossmod::profile::clone_copy(real, fn, stack, flags, arg, ptid, tls, ctid);
}
