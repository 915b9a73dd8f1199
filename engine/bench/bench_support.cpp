// Shared plumbing of the `crossmod bench` suites (see bench_support.hpp).
// Thread safety: patcher-thread only, except Executors::loop, which runs on executor
// threads and shares only atomics and its own cache-line-sized slot with the patcher.
// Signal safety: on_executor_fault is async-signal-safe (a TLS pointer, a relaxed atomic
// add, sigaction, siglongjmp; errno saved).
#include "bench_support.hpp"

#include <fmt/core.h>
#include <setjmp.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "crossmod/machine.hpp"
#include "crossmod/testsupport/alt_stack.hpp"
#include "crossmod/wordpatch.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::bench {

std::vector<std::string>& registered_names() {
  static std::vector<std::string> names;
  return names;
}

Env& env() {
  static Env e;
  return e;
}

const Placement& placement(unsigned executors) {
  static std::map<unsigned, Placement> cache;
  auto it = cache.find(executors);
  if (it == cache.end()) it = cache.emplace(executors, env().place(executors)).first;
  return it->second;
}

bool pin_patcher(std::string* err) {
  return env().bind_current_thread(placement(1).patcher_pu, err);
}

std::string status_message(const char* what, Status s) {
  std::string m = fmt::format("{}: {}", what, to_string(s));
  if (s == Status::unsupported) m = kUnsupportedPrefix + m;
  return m;
}

// --------------------------------------------------------------------------------
// Latency samples.

namespace {
struct SampleSet {
  std::string benchmark, op;
  unsigned executors = 0;
  std::vector<std::uint64_t> ticks;
};
std::vector<SampleSet>& sample_log() {
  static std::vector<SampleSet> log;
  return log;
}

std::uint64_t nearest_rank(const std::vector<std::uint64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  rank = std::clamp<std::size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}
}  // namespace

LatencyRecorder::LatencyRecorder(std::string benchmark, std::string op, unsigned executors)
    : benchmark_(std::move(benchmark)), op_(std::move(op)), executors_(executors) {
  reservoir_.reserve(kMaxSamples);
}

void LatencyRecorder::add(std::uint64_t ticks) noexcept {
  ++count_;
  sum_ += static_cast<double>(ticks);
  if (reservoir_.size() < kMaxSamples) {
    reservoir_.push_back(ticks);
    return;
  }
  // Algorithm R with a xorshift64 generator: deterministic, no allocation.
  rng_ ^= rng_ << 13;
  rng_ ^= rng_ >> 7;
  rng_ ^= rng_ << 17;
  std::uint64_t j = rng_ % count_;
  if (j < kMaxSamples) reservoir_[j] = ticks;
}

void LatencyRecorder::publish(benchmark::State& state) {
  if (count_ == 0 || state.error_occurred()) return;
  std::vector<std::uint64_t> sorted = reservoir_;
  std::sort(sorted.begin(), sorted.end());
  double mean = sum_ / static_cast<double>(count_);
  state.counters["ticks_mean"] = mean;
  state.counters["ticks_p50"] = static_cast<double>(nearest_rank(sorted, 0.50));
  state.counters["ticks_p90"] = static_cast<double>(nearest_rank(sorted, 0.90));
  state.counters["ticks_p99"] = static_cast<double>(nearest_rank(sorted, 0.99));
  state.counters["ns_mean"] = mean * 1e9 / env().tsc_hz;
  state.counters["samples"] = static_cast<double>(count_);

  auto& log = sample_log();
  auto it = std::find_if(log.begin(), log.end(),
                         [&](const SampleSet& s) { return s.benchmark == benchmark_; });
  if (it == log.end()) it = log.insert(log.end(), SampleSet{benchmark_, op_, executors_, {}});
  it->op = op_;
  it->executors = executors_;
  it->ticks = std::move(reservoir_);
  reservoir_.clear();
}

std::size_t write_latency_csv(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  // One row per distinct value with its count: TSC readings here are quantised (the
  // guest's TSC advances in steps of ~26 ticks), so the reservoir has few distinct values
  // and per-sample rows made a ~50 MB file for the same distribution.
  std::size_t rows = 0;
  fmt::print(f, "benchmark,op,executors,sample_ticks,count\n");
  for (const SampleSet& s : sample_log()) {
    std::vector<std::uint64_t> sorted(s.ticks.begin(), s.ticks.end());
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size();) {
      std::size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      fmt::print(f, "{},{},{},{},{}\n", s.benchmark, s.op, s.executors, sorted[i], j - i);
      rows += j - i;
      i = j;
    }
  }
  if (std::fclose(f) != 0)
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
  return rows;
}

// --------------------------------------------------------------------------------
// Executors.

namespace {
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Fault recovery. The stress site's torn mixes all fault (invalid opcode, or a call into
// its PROT_NONE window), so a tear during a wordpatch benchmark used to kill `crossmod
// bench` with SIGILL or SIGSEGV: seen on the Xeon guest (2026-11-27) at a Tmax of 4700
// ticks whose soak had torn too. Only executor threads recover; a fault anywhere else
// gets the disposition that was in place before ours.
struct Recovery {
  sigjmp_buf env;
  std::atomic<std::uint64_t>* faults = nullptr;
};
thread_local Recovery* t_recovery = nullptr;
constexpr int kFaultSignals[] = {SIGILL, SIGSEGV, SIGBUS};
struct sigaction g_prev_fault[3];  // written once before our handlers go in, then read-only

void on_executor_fault(int sig, siginfo_t*, void*) {
  const int saved_errno = errno;
  Recovery* r = t_recovery;
  if (r == nullptr) {
    // Not an executor: put back what was there and return; the faulting instruction runs
    // again and meets it (by default, the process dies as it would have without us).
    for (std::size_t i = 0; i < std::size(kFaultSignals); ++i)
      if (kFaultSignals[i] == sig) sigaction(sig, &g_prev_fault[i], nullptr);
    errno = saved_errno;
    return;
  }
  r->faults->fetch_add(1, std::memory_order_relaxed);
  errno = saved_errno;
  siglongjmp(r->env, 1);
}

bool install_fault_handlers(std::string* err) {
  static std::once_flag once;
  static int error = 0;
  std::call_once(once, [] {
    for (std::size_t i = 0; i < std::size(kFaultSignals); ++i)
      if (sigaction(kFaultSignals[i], nullptr, &g_prev_fault[i]) != 0) error = errno;
    struct sigaction sa {};
    sa.sa_sigaction = on_executor_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : kFaultSignals)
      if (error == 0 && sigaction(sig, &sa, nullptr) != 0) error = errno;
  });
  if (error != 0 && err) *err = fmt::format("sigaction: {}", std::strerror(error));
  return error == 0;
}
}  // namespace

bool Executors::start(unsigned n, std::vector<StressSite::EntryFn> entries,
                      bool hold, std::string* err) {
  stop();
  n_ = 0;
  if (n == 0) return true;
  if (!install_fault_handlers(err)) return false;
  entries_ = std::move(entries);
  slots_ = std::make_unique<Slot[]>(n);
  n_ = n;
  go_.store(!hold, std::memory_order_relaxed);
  stop_.store(false, std::memory_order_relaxed);
  const Placement& a = placement(n);
  for (unsigned i = 0; i < n; ++i) {
    int pu = a.executor_pus.at(i);
    threads_.emplace_back([this, i, pu] { loop(i, pu); });
  }
  for (unsigned i = 0; i < n; ++i) {
    Slot& s = slots_[i];
    // A held executor reports `running` once pinned, before go(); a free one after its
    // first round of calls, so latency measurements start with the site in use.
    while (!s.running.load(std::memory_order_acquire) &&
           !s.pin_failed.load(std::memory_order_acquire)) {
      x86::pause();
    }
    if (s.pin_failed.load(std::memory_order_acquire)) {
      if (err) *err = fmt::format("cannot pin executor {} to PU {}", i, a.executor_pus.at(i));
      stop();
      return false;
    }
  }
  return true;
}

void Executors::loop(unsigned index, int pu) {
  Slot& slot = slots_[index];
  if (!env().bind_current_thread(pu, nullptr)) {
    slot.pin_failed.store(true, std::memory_order_release);
    return;
  }
  const bool held = !go_.load(std::memory_order_acquire);
  if (held) {
    slot.running.store(true, std::memory_order_release);
    while (!go_.load(std::memory_order_acquire)) {
      if (stop_.load(std::memory_order_relaxed)) return;
      x86::pause();
    }
  }
  const double cpu0 = thread_cpu_seconds();
  testsupport::AltStack alt;  // the fault handler runs on it
  Recovery rec;
  rec.faults = &slot.faults;
  t_recovery = &rec;
  // A fault comes back here and spins again. Nothing of this frame changes between
  // sigsetjmp and siglongjmp: the counts live in spin()'s frame, then in the slot.
  (void)sigsetjmp(rec.env, 1);
  spin(slot);
  t_recovery = nullptr;
  slot.cpu_s = thread_cpu_seconds() - cpu0;
}

[[gnu::noinline]] void Executors::spin(Slot& slot) noexcept {
  std::uint64_t calls = 0, a = 0;
  const std::size_t k = entries_.size();
  bool announced = slot.running.load(std::memory_order_relaxed);
  for (;;) {
    for (std::size_t i = 0; i < k; ++i) a += static_cast<std::uint64_t>(entries_[i]() == 1);
    calls += k;
    if (!announced) {
      slot.running.store(true, std::memory_order_release);
      announced = true;
    }
    if (stop_.load(std::memory_order_relaxed)) break;
  }
  slot.calls += calls;
  slot.state_a += a;
}

void Executors::stop() noexcept {
  if (threads_.empty()) return;
  stop_.store(true, std::memory_order_relaxed);
  for (auto& t : threads_) t.join();  // join() publishes the slots' plain counters
  threads_.clear();
}

std::uint64_t Executors::calls() const noexcept {
  std::uint64_t c = 0;
  if (slots_)
    for (unsigned i = 0; i < n_; ++i) c += slots_[i].calls;
  return c;
}

std::uint64_t Executors::state_a() const noexcept {
  std::uint64_t c = 0;
  if (slots_)
    for (unsigned i = 0; i < n_; ++i) c += slots_[i].state_a;
  return c;
}

std::uint64_t Executors::faults() const noexcept {
  std::uint64_t c = 0;
  if (slots_)
    for (unsigned i = 0; i < n_; ++i) c += slots_[i].faults.load(std::memory_order_relaxed);
  return c;
}

double Executors::cpu_seconds() const noexcept {
  double c = 0;
  if (slots_)
    for (unsigned i = 0; i < n_; ++i) c += slots_[i].cpu_s;
  return c;
}

std::vector<pthread_t> Executors::handles() {
  std::vector<pthread_t> h;
  for (auto& t : threads_) h.push_back(t.native_handle());
  return h;
}

// --------------------------------------------------------------------------------
// Fixtures and sites.

namespace {
struct FixtureSlot {
  std::string key;
  std::unique_ptr<Fixture> fixture;
};
FixtureSlot& fixture_slot() {
  static FixtureSlot slot;
  return slot;
}
}  // namespace

Fixture* find_fixture(const std::string& key) {
  FixtureSlot& s = fixture_slot();
  return (s.fixture && s.key == key) ? s.fixture.get() : nullptr;
}

void store_fixture(const std::string& key, std::unique_ptr<Fixture> f) {
  FixtureSlot& s = fixture_slot();
  s.fixture = std::move(f);
  s.key = key;
}

void release_fixture() {
  FixtureSlot& s = fixture_slot();
  s.fixture.reset();
  s.key.clear();
}

Status set_quiescent(std::uint8_t* site, std::span<const std::uint8_t> bytes) {
  if (std::memcmp(site, bytes.data(), bytes.size()) == 0) return Status::ok;
  static WordPatcher setup_writer(WaitPolicy::None());
  return setup_writer.patch(site, bytes);
}

std::unique_ptr<StressSite> make_site(unsigned straddle, std::string* why,
                                               std::span<const std::uint8_t> state_b) {
  std::unique_ptr<StressSite> s =
      StressSite::create(straddle, kInlineOffset, why, state_b);
  if (!s) {
    *why = fmt::format("stress site S={}: {}", straddle, *why);
    return nullptr;
  }
  Status st = set_quiescent(s->site(), s->state_a());
  if (st != Status::ok) {
    *why = status_message("setting the site to state A", st);
    return nullptr;
  }
  return s;
}

}  // namespace crossmod::bench
