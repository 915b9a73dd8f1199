// Cell runner (see cell.hpp): forks a child that builds the stress site, starts the
// executors and toggles the site through the ENGINE's code path; the parent watches it
// with a deadline and turns whatever happens (ok, crash, hang, refusal) into a CellResult.
// Thread safety: run_cell() is called from one thread of a single-threaded parent (it
// forks). The child is multi-threaded; its fault handling lives in executor.cpp.
#include "cell/cell.hpp"

#include <fmt/core.h>
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <new>
#include <optional>
#include <thread>
#include <vector>

#include "crossmod/machine.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"
#include "machine/c2c.hpp"
#include "cell/dwell.hpp"
#include "cell/executor.hpp"
#include "cell/site.hpp"

namespace crossmod::harness {

namespace {
constexpr const char* kOutcomeNames[] = {"ok", "crash", "hang", "error", "blind"};
constexpr const char* kPhaseNames[] = {"grid",     "search", "confirm",   "control",
                                       "sentinel", "soak",   "crosscheck"};
constexpr const char* kSiteEntryNames[] = {"call", "fallthrough"};
static_assert(std::size(kSiteEntryNames) == static_cast<std::size_t>(SiteEntry::fallthrough) + 1);
static_assert(std::size(kOutcomeNames) == static_cast<std::size_t>(Outcome::blind) + 1);
static_assert(std::size(kPhaseNames) == static_cast<std::size_t>(Phase::crosscheck) + 1);

template <typename E, std::size_t N>
std::optional<E> parse_enum(const char* const (&names)[N], std::string_view s) {
  for (std::size_t i = 0; i < N; ++i)
    if (s == names[i]) return static_cast<E>(i);
  return std::nullopt;
}
}  // namespace

const char* to_string(Outcome o) { return kOutcomeNames[static_cast<std::size_t>(o)]; }
std::optional<Outcome> parse_outcome(std::string_view s) { return parse_enum<Outcome>(kOutcomeNames, s); }
const char* to_string(Phase p) { return kPhaseNames[static_cast<std::size_t>(p)]; }
std::optional<Phase> parse_phase(std::string_view s) { return parse_enum<Phase>(kPhaseNames, s); }
const char* to_string(SiteEntry e) { return kSiteEntryNames[static_cast<std::size_t>(e)]; }
std::optional<SiteEntry> parse_site_entry(std::string_view s) { return parse_enum<SiteEntry>(kSiteEntryNames, s); }

namespace {

// See cell.hpp: rates are per exposed toggle anyway; the flag says the evidence is thin.
constexpr double kLowExposure = kLowExposureThreshold;
static_assert(dwell::kAdaptTarget == kLowExposure, "the dwell grows until toggles are no longer low-exposure");

enum ChildState : int { kNone = 0, kOk = 1, kBlind = 2, kError = 3 };

// Results shared with the parent: created before fork (MAP_SHARED), so whatever the child
// wrote before dying is still readable. Followed by one exec::Counters per executor.
struct alignas(64) Shared {
  std::atomic<std::uint64_t> toggles{0}, exposed{0}, failures{0}, dwell{0};
  std::atomic<std::uint64_t> traps{0}, late_traps{0};
  std::atomic<int> state{kNone};
  std::atomic<int> stopped_early{0};
  unsigned line_offset = 0;
  std::uint64_t site_addr = 0;
  exec::FirstFault first;
  char note[1024] = {};
  char phase[128] = {};  // where the child is, for hang and crash notes

  exec::Counters* counters() { return reinterpret_cast<exec::Counters*>(this + 1); }
};
static_assert(sizeof(Shared) % alignof(exec::Counters) == 0);

void set_text(char* dst, std::size_t cap, const std::string& s) {
  std::size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

std::string hex(const std::uint8_t* b, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += fmt::format("{}{:02x}", i ? " " : "", b[i]);
  return s;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGILL: return "SIGILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGKILL: return "SIGKILL";
    case SIGFPE: return "SIGFPE";
    case SIGTERM: return "SIGTERM";
    default: return "signal";
  }
}

// ---- child -----------------------------------------------------------------------------

class Child {
 public:
  Child(const CellSpec& spec, const Assignment& asg, const Topology& topo, Shared* sh)
      : spec_(spec), asg_(asg), topo_(topo), sh_(sh) {}

  [[noreturn]] void run() {
    try {
      body();
    } catch (const std::exception& e) {
      finish(kError, std::string("child: ") + e.what());
    }
    finish(kError, "child: unexpected end");
  }

 private:
  void phase(const char* p) { set_text(sh_->phase, sizeof sh_->phase, p); }
  void phase(const std::string& p) { set_text(sh_->phase, sizeof sh_->phase, p); }

  [[noreturn]] void finish(ChildState st, const std::string& note) {
    stop_executors();
    if (!note.empty()) set_text(sh_->note, sizeof sh_->note, note);
    sh_->state.store(st, std::memory_order_release);
    _exit(0);
  }

  void stop_executors() {
    ctl_.stop.store(true, std::memory_order_relaxed);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

  std::uint64_t sum_activity() const {  // completed calls + faulted calls
    std::uint64_t s = 0;
    for (unsigned i = 0; i < spec_.executors; ++i) {
      s += sh_->counters()[i].executions.load(std::memory_order_relaxed);
      s += sh_->counters()[i].faults.load(std::memory_order_relaxed);
    }
    return s;
  }
  std::uint64_t sum_faults() const {
    std::uint64_t s = 0;
    for (unsigned i = 0; i < spec_.executors; ++i)
      s += sh_->counters()[i].faults.load(std::memory_order_acquire);
    return s;
  }

  void dwell(std::uint64_t ticks) const {
    const std::uint64_t t0 = x86::rdtsc();
    while (x86::rdtsc() - t0 < ticks) {
      if (ctl_.yield_when_idle) sched_yield();
      else x86::pause();
    }
  }

  // Warm-up: how long one site call takes on the slowest executor, so the dwell lets each
  // executor run the site ~dwell::kDwellRuns times per toggle.
  std::uint64_t auto_dwell() {
    const unsigned n = spec_.executors;
    std::vector<std::uint64_t> e0(n);
    for (unsigned i = 0; i < n; ++i) e0[i] = sh_->counters()[i].executions.load();
    const std::uint64_t t0 = x86::rdtsc();
    std::uint64_t slowest = 0;
    for (int round = 0; round < dwell::kWarmupRounds; ++round) {
      dwell(dwell::kWarmupRoundTicks);
      slowest = UINT64_MAX;
      for (unsigned i = 0; i < n; ++i)
        slowest = std::min(slowest, sh_->counters()[i].executions.load() - e0[i]);
      if (slowest >= dwell::kWarmupCalls) break;
    }
    return dwell::initial(x86::rdtsc() - t0, slowest, trap_cost_);
  }

  // Median ticks of one int3 trap taken and returned from on this thread, with a
  // temporary SIGTRAP handler: how long an executor that hits the engine's int3 is gone.
  // Measured before any other SIGTRAP handler is installed. (A #UD costs more under KVM,
  // ~18k vs ~5k ticks observed here, but after a fault the toggle has already failed.)
  static std::uint64_t measure_trap_cost() {
    struct sigaction sa {}, old {};
    sa.sa_handler = [](int) {};
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGTRAP, &sa, &old) != 0) return 0;
    std::vector<std::uint64_t> t(64);
    for (auto& x : t) {
      const std::uint64_t t0 = x86::rdtscp_ordered();
      asm volatile("int3" ::: "memory");
      x = x86::rdtscp_ordered() - t0;
    }
    sigaction(SIGTRAP, &old, nullptr);
    std::nth_element(t.begin(), t.begin() + 32, t.end());
    return t[32];
  }

  // The child, in the protocol's order: build the site, start the executors, pick the
  // dwell, toggle.
  void body() {
    struct rlimit no_core {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // crashes are expected results, not debugging aids
    phase("setup");
    proto_ = make_site_protocol(spec_);
    proto_->enter([](void* self, const char* p) { static_cast<Child*>(self)->phase(p); }, this);
    setup_site();
    start_executors();
    phase("warm-up");
    const bool adapt = spec_.dwell_ticks == 0;
    dwell::Adapter dw(adapt ? auto_dwell() : spec_.dwell_ticks, adapt);
    sh_->dwell.store(dw.ticks());
    const trap::Stats trap0 = trap::stats();
    phase("toggling");
    const Status last = toggle_loop(dw, trap0);
    phase("stopping executors");
    stop_executors();
    // Executors that were inside the trap handler at the last toggle finish there first.
    const trap::Stats trap1 = trap::stats();
    sh_->traps.store(trap1.locked_hits - trap0.locked_hits);
    sh_->late_traps.store(trap1.late_hits - trap0.late_hits);
    if (last != Status::ok) {
      finish(kError, note_ + fmt::format("{} returned {} at toggle {}", to_string(spec_.protocol),
                                         to_string(last), sh_->toggles.load()));
    }
    finish(kOk, note_);
  }

  // Site setup: bind the patcher, build the site, install our fault handlers, then let the
  // protocol construct its engine objects.
  void setup_site() {
    std::string err;
    if (!topo_.bind_current_thread(asg_.patcher_pu, &err)) finish(kError, "patcher: " + err);

    const unsigned straddle = info(spec_.protocol).in_one_line ? 0 : spec_.straddle;
    std::string why;
    site_ = StressSite::create(straddle, spec_.site_offset, &why);
    if (!site_) finish(kBlind, why);
    sh_->line_offset = site_->line_offset();
    sh_->site_addr = reinterpret_cast<std::uintptr_t>(site_->site());

    if (spec_.dwell_ticks == 0 && !trap::installed()) trap_cost_ = measure_trap_cost();

    // Our handlers go in BEFORE any WordPatcher: the engine's trap handler chains traps
    // it does not own to the handler installed before it, i.e. ours (a stray trap).
    bool sigtrap_ours = true;
    if (!exec::install_fault_handlers(*site_, &ctl_, &sh_->first, &sigtrap_ours, &err)) {
      finish(kError, err);
    }
    if (!sigtrap_ours) {
      note_ += "engine SIGTRAP handler inherited from the parent: a stray trap crashes the "
               "child; ";
    }

    // The engine objects: constructed only now, after the handlers.
    if (std::string refused = proto_->prepare(*site_); !refused.empty()) finish(kError, refused);
  }

  // Executor start: one thread per executor on its PU; returns once all reached their loop.
  void start_executors() {
    phase("starting executors");
    ctl_.yield_when_idle = asg_.oversubscribed;
    for (unsigned i = 0; i < spec_.executors; ++i) {
      threads_.emplace_back(exec::executor_main, &topo_, asg_.executor_pus[i], site_.get(), &ctl_,
                            &sh_->counters()[i], spec_.site_entry == SiteEntry::call);
    }
    while (ctl_.ready.load(std::memory_order_acquire) < spec_.executors) sched_yield();
    if (ctl_.bind_failures.load() != 0) {
      finish(kError, fmt::format("{} executor(s) could not bind to their PU", ctl_.bind_failures.load()));
    }
  }

  // The toggle loop: patch, publish the toggle, dwell with one sample in its middle,
  // restore, count. Returns the first non-ok status of the protocol (the loop stops there).
  Status toggle_loop(dwell::Adapter& dw, const trap::Stats& trap0) {
    SiteProtocol& proto = *proto_;
    std::uint64_t toggles = 0, exposed = 0, failures = 0;
    std::uint64_t faults_seen = sum_faults();
    std::uint64_t activity_seen = sum_activity();
    Status last = Status::ok;
    for (std::uint64_t i = 0; i < spec_.toggles; ++i) {
      const bool to_b = (i % 2) == 0;  // the site starts in A
      const std::uint64_t d = dw.ticks();
      // The patch window: from the int3 store to the front store the patcher touches no
      // line an executor reads or writes (issue 9: the harness's own bookkeeping around
      // the int3 hid most tears). Everything it needs to know is sampled in the middle of
      // the dwell below.
      last = proto.patch(to_b);
      ctl_.toggle_seq.store(i + 1, std::memory_order_release);
      // One sample per toggle, in the middle of the dwell, as far from both patches as the
      // dwell allows. Exposure: some executor completed a call (or faulted) between the
      // previous toggle's sample and this one, an interval that contains this toggle's
      // patch window; an executor that took the int3 and is back by mid-dwell counts.
      // Faults happen in patch windows, so a fault counted since the previous sample
      // fails this toggle; one the kernel delivers later than mid-dwell (#UD under KVM:
      // ~18k ticks) lands on the next toggle, which still counts it once.
      dwell(d / 2);
      const std::uint64_t x1 = sum_activity();
      const std::uint64_t f1 = sum_faults();
      dwell(d - d / 2);
      if (last == Status::ok) last = proto.restore(to_b);
      ++toggles;
      // A fault proves exposure too (an executor that faulted waits for the toggle to
      // complete and may show no activity in this dwell), and failures must stay a subset
      // of exposed toggles.
      const bool failed = f1 > faults_seen;
      faults_seen = f1;
      const bool was_exposed = x1 > activity_seen || failed;
      activity_seen = x1;
      if (was_exposed) ++exposed;
      if (failed) ++failures;
      if (dw.record(was_exposed)) sh_->dwell.store(dw.ticks(), std::memory_order_relaxed);
      // Patcher-only lines: the parent reads them after the child ends (or is killed).
      sh_->toggles.store(toggles, std::memory_order_relaxed);
      sh_->exposed.store(exposed, std::memory_order_relaxed);
      sh_->failures.store(failures, std::memory_order_relaxed);
      if ((toggles & 255) == 0) {
        // The engine's trap counters are written by executors in its handler: read them
        // rarely, so a child killed by the watchdog still reports roughly how many.
        const trap::Stats tn = trap::stats();
        sh_->traps.store(tn.locked_hits - trap0.locked_hits, std::memory_order_relaxed);
        sh_->late_traps.store(tn.late_hits - trap0.late_hits, std::memory_order_relaxed);
      }
      if (last != Status::ok) break;
      if (spec_.max_failures != 0 && failures >= spec_.max_failures) {
        sh_->stopped_early.store(1);
        break;
      }
    }
    return last;
  }

  const CellSpec& spec_;
  const Assignment& asg_;
  const Topology& topo_;
  Shared* sh_;
  exec::Control ctl_;
  std::unique_ptr<SiteProtocol> proto_;
  std::unique_ptr<StressSite> site_;
  std::vector<std::thread> threads_;
  std::string note_;
  std::uint64_t trap_cost_ = 0;
};

// ---- parent ----------------------------------------------------------------------------

// Steal time of the given PUs from /proc/stat (field 8 of each cpuN line, in USER_HZ
// ticks), summed; -1 when unreadable. Host steal is how a KVM guest sees its vCPUs
// descheduled, one of the states that come and go with tearing bursts.
double steal_ms(const std::vector<int>& pus) {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  const long hz = sysconf(_SC_CLK_TCK);
  double total = 0;
  unsigned found = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    int cpu = -1;
    unsigned long long v[8] = {};
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu %llu %llu %llu", &cpu, &v[0], &v[1], &v[2],
                    &v[3], &v[4], &v[5], &v[6], &v[7]) != 9) {
      continue;
    }
    if (std::find(pus.begin(), pus.end(), cpu) == pus.end()) continue;
    total += static_cast<double>(v[7]) * 1000.0 / static_cast<double>(hz > 0 ? hz : 100);
    ++found;
  }
  std::fclose(f);
  return found ? total : -1;
}

const Topology& fallback_topology() {
  static Topology t = Topology::load();
  return t;
}

std::string describe_first_fault(const exec::FirstFault& f, std::uint64_t site) {
  const std::int64_t off = static_cast<std::int64_t>(f.pc - site);
  std::string where = off >= 0 && off < 5 ? fmt::format("site+{}", off)
                      : off < 0           ? fmt::format("site-{:#x}", -off)
                                          : fmt::format("site+{:#x}", off);
  return fmt::format("first fault: {} at {} (toggle {}), site bytes {}", signal_name(f.signal),
                     where, f.toggle, hex(f.bytes, 8));
}

}  // namespace

CellResult run_cell(const CellSpec& spec, const CellEnv& ctx) {
  CellResult r;
  r.spec = spec;
  auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };

  const Topology* topo = ctx.topology;
  Assignment asg;
  try {
    if (!topo) topo = &fallback_topology();
    asg = topo->assign(spec.placement, spec.executors);
  } catch (const std::exception& e) {
    r.outcome = Outcome::error;
    r.note = e.what();
    return r;
  }
  r.patcher_pu = asg.patcher_pu;
  r.executor_pus = asg.executor_pus;
  if (asg.oversubscribed || !asg.warning.empty()) {
    static bool warned = false;
    if (!warned) {
      warned = true;
      fmt::print(stderr, "crossmod: warning: {}\n", asg.warning);
    }
  }
  if (spec.executors == 0 && info(spec.protocol).runs_site) {
    r.outcome = Outcome::error;
    r.note = "a cell needs at least one executor";
    return r;
  }

  // The machine's state, before the child exists: a short c2c sample between the
  // patcher's and the first executor's PU (a few hundred microseconds), and steal so far.
  if (spec.sample_c2c && !asg.executor_pus.empty() && asg.executor_pus[0] != asg.patcher_pu) {
    const C2cLatency c = measure_c2c(*topo, asg.patcher_pu, asg.executor_pus[0], 1000);
    if (c.ok) r.c2c_ticks = c.one_way_ticks;
  }
  std::vector<int> cell_pus = asg.executor_pus;
  cell_pus.push_back(asg.patcher_pu);
  const double steal0 = steal_ms(cell_pus);
  t_start = std::chrono::steady_clock::now();  // duration_s and the watchdog: the cell only
  r.start_utc_ms = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());

  const std::size_t bytes = sizeof(Shared) + spec.executors * sizeof(exec::Counters);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    r.outcome = Outcome::error;
    r.note = fmt::format("mmap of the shared results block: {}", std::strerror(errno));
    return r;
  }
  auto* sh = new (mem) Shared();
  for (unsigned i = 0; i < spec.executors; ++i) new (&sh->counters()[i]) exec::Counters();

  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    r.outcome = Outcome::error;
    r.note = fmt::format("fork: {}", std::strerror(errno));
    munmap(mem, bytes);
    return r;
  }
  if (pid == 0) {
    Child child(spec, asg, *topo, sh);
    child.run();
  }

  // Watchdog: poll every millisecond; past the deadline the child is killed as a hang.
  int status = 0;
  bool hung = false;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (elapsed() > spec.watchdog_s) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      hung = true;
      break;
    }
    struct timespec ts {0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  r.duration_s = elapsed();
  if (const double steal1 = steal_ms(cell_pus); steal0 >= 0 && steal1 >= steal0) {
    r.steal_ms = steal1 - steal0;
  }

  // Counters survive whatever happened to the child.
  r.dwell_ticks = sh->dwell.load();
  r.toggles = sh->toggles.load();
  r.exposed_toggles = sh->exposed.load();
  r.failures = sh->failures.load();
  r.traps = sh->traps.load();
  r.late_traps = sh->late_traps.load();
  r.stopped_early = sh->stopped_early.load() != 0;
  r.site_line_offset = sh->line_offset;
  for (unsigned i = 0; i < spec.executors; ++i) {
    const exec::Counters& c = sh->counters()[i];
    r.executions += c.executions.load();
    r.state_a += c.state_a.load();
    r.state_b += c.state_b.load();
    r.sigill += c.sigill.load();
    r.sigsegv += c.sigsegv.load();
    r.sigbus += c.sigbus.load();
    r.stray_trap += c.stray_trap.load();
  }
  r.low_exposure =
      r.toggles > 0 && static_cast<double>(r.exposed_toggles) < kLowExposure * static_cast<double>(r.toggles);

  const std::string phase(sh->phase);
  std::string note(sh->note);
  const int state = sh->state.load();
  if (hung) {
    r.outcome = Outcome::hang;
    note = fmt::format("no result within the {} s watchdog (child was in: {}); killed", spec.watchdog_s,
                       phase.empty() ? "?" : phase);
  } else if (WIFSIGNALED(status)) {
    r.outcome = Outcome::crash;
    const int sig = WTERMSIG(status);
    note = fmt::format("child killed by {} ({}) during {}", signal_name(sig), strsignal(sig),
                       phase.empty() ? "?" : phase);
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    r.outcome = Outcome::crash;
    note = fmt::format("child exited with status {} during {}", WEXITSTATUS(status), phase);
  } else if (state == kBlind) {
    r.outcome = Outcome::blind;
  } else if (state == kError) {
    r.outcome = Outcome::error;
  } else if (state == kOk) {
    r.outcome = Outcome::ok;
  } else {
    r.outcome = Outcome::error;
    note = "child exited without a result during " + phase;
  }
  if (sh->first.ready.load(std::memory_order_acquire)) {
    const exec::FirstFault& f = sh->first;
    r.first_fault_pc_offset = f.pc - sh->site_addr;  // modulo 2^64 when before the site
    r.first_fault_bytes = hex(f.bytes, x86::kCallLen);
    const std::string ff = describe_first_fault(f, sh->site_addr);
    note = note.empty() ? ff : note + "; " + ff;
  }
  r.note = note;
  sh->~Shared();
  munmap(mem, bytes);
  return r;
}

}  // namespace crossmod::harness
