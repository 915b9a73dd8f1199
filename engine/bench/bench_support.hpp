// Shared plumbing of the `crossmod bench` suites: the run environment (Tmax, TSC rate,
// placement), per-operation latency samples, pinned executor threads, and fixtures kept
// alive across the repeated runs Google Benchmark makes of one benchmark.
// Thread safety: everything here is driven from the patcher (main) thread; Executors own
// their threads and talk to them through atomics only. Nothing is async-signal-safe.
#pragma once
#include <benchmark/benchmark.h>
#include <pthread.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "crossmod/status.hpp"
#include "crossmod/testsupport/stress_site.hpp"

namespace crossmod::bench {

using testsupport::StressSite;

// Where the patcher and n executors run: OS PU indexes, as the runner's placement policy
// ("spread") chose them.
struct Placement {
  int patcher_pu = -1;
  std::vector<int> executor_pus;
  bool oversubscribed = false;  // more threads than PUs
  std::string warning;          // why, for people
};

// What shapes every number of a run. Filled once by the runner (the harness's `crossmod
// bench`) before any benchmark runs. The suites know threads only through `place` and
// `bind_current_thread`, so they depend on the engine and not on the harness's topology
// code.
struct Env {
  std::uint64_t tmax_ticks = 0;
  std::string tmax_source;
  bool tmax_is_default = true;
  double tsc_hz = 0;
  std::function<Placement(unsigned executors)> place;
  // Binds the calling thread to PU `pu`; false with *err (err may be null). Called from
  // executor threads concurrently.
  std::function<bool(int pu, std::string* err)> bind_current_thread;
  bool smoke = false;
  unsigned max_executors = 1;       // throughput executors go 1..max_executors
  double min_time_s = 0.5;          // Google Benchmark's --benchmark_min_time
  double throughput_window_s = 0.3; // one throughput measurement window
};
Env& env();

// Patcher + executor PUs for n executors ("spread" placement), computed once per n.
const Placement& placement(unsigned executors);
// Pins the calling (patcher) thread to the patcher PU; false with *err on failure.
bool pin_patcher(std::string* err);

// Error messages that start with this prefix mark a benchmark the machine cannot run
// (kernel or CPU feature missing). The smoke test accepts those and nothing else.
inline constexpr const char* kUnsupportedPrefix = "unsupported: ";

// ---------------------------------------------------------------------------------
// Latency samples. Each benchmark run records every operation's TSC ticks; the mean is
// exact, percentiles come from a uniform reservoir of at most kMaxSamples, which is
// also what goes into bench-<stamp>-latency.csv. A later run of the same benchmark
// (Google Benchmark reruns with more iterations) replaces the earlier one, so the CSV
// matches the run reported in the JSON.
inline constexpr std::size_t kMaxSamples = 20000;

class LatencyRecorder {
 public:
  LatencyRecorder(std::string benchmark, std::string op, unsigned executors);
  void add(std::uint64_t ticks) noexcept;
  // Sets ticks_mean, ticks_p50, ticks_p90, ticks_p99, ns_mean, samples and stores the
  // reservoir in the sample log. Does nothing if the run had no samples.
  void publish(benchmark::State& state);

 private:
  std::string benchmark_, op_;
  unsigned executors_;
  std::vector<std::uint64_t> reservoir_;
  std::uint64_t count_ = 0;
  double sum_ = 0;
  std::uint64_t rng_ = 0x9E3779B97F4A7C15ull;
};

// Writes every published sample set as CSV (benchmark,op,executors,sample_ticks).
// Returns the number of rows; throws std::runtime_error if the file cannot be written.
std::size_t write_latency_csv(const std::string& path);

// ---------------------------------------------------------------------------------
// Executors: n threads pinned to placement(n).executor_pus, each calling `entries`
// round-robin until stop(). Counting is local to each thread and published at stop, so
// the loop costs one relaxed load per round beyond the calls themselves.
// A torn site (the machine tore at the configured Tmax) faults the executor: SIGILL,
// SIGSEGV or SIGBUS on an executor thread is counted (faults()) and the thread goes back
// to its loop (siglongjmp from a handler on an alternate stack) instead of killing the
// bench; the calls of the stretch it was in are not counted. The handlers are installed
// once and chain a fault on any other thread to the disposition they replaced.
class Executors {
 public:
  Executors() = default;
  ~Executors() { stop(); }
  Executors(const Executors&) = delete;
  Executors& operator=(const Executors&) = delete;

  // Starts the threads. If `hold` is set they wait for go() before calling anything
  // (throughput windows start together); otherwise start() returns once every thread
  // has run its entries at least once. False with *err if pinning fails.
  bool start(unsigned n, std::vector<StressSite::EntryFn> entries, bool hold,
             std::string* err);
  void go() noexcept { go_.store(true, std::memory_order_release); }
  void stop() noexcept;  // joins; idempotent

  std::uint64_t calls() const noexcept;    // after stop()
  std::uint64_t state_a() const noexcept;  // calls that returned 1 (the call ran)
  std::uint64_t faults() const noexcept;   // torn-site faults the executors survived, after stop()
  // CPU time the executor threads got while calling (CLOCK_THREAD_CPUTIME_ID), after
  // stop(). On a shared machine, calls / cpu_seconds is robust to descheduling where
  // calls / wall seconds is not.
  double cpu_seconds() const noexcept;
  std::vector<pthread_t> handles();        // while running (stop-the-world signals them)
  unsigned size() const noexcept { return n_; }

 private:
  struct alignas(64) Slot {
    std::atomic<bool> running{false};
    std::atomic<bool> pin_failed{false};
    std::uint64_t calls = 0;
    std::uint64_t state_a = 0;
    std::atomic<std::uint64_t> faults{0};  // added by this executor's fault handler
    double cpu_s = 0;
  };
  void loop(unsigned index, int pu);
  void spin(Slot& slot) noexcept;  // the calls, until stop; adds its counts to the slot

  std::vector<StressSite::EntryFn> entries_;
  std::unique_ptr<Slot[]> slots_;
  std::vector<std::thread> threads_;
  unsigned n_ = 0;
  alignas(64) std::atomic<bool> go_{false};
  alignas(64) std::atomic<bool> stop_{false};
};

// ---------------------------------------------------------------------------------
// Fixtures survive the repeated runs of ONE benchmark (site creation proves every torn
// mix with Zydis and maps address-space windows: too slow to redo per run) and are
// destroyed when another benchmark takes the slot, or by release_fixture().
struct Fixture {
  virtual ~Fixture() = default;
};
Fixture* find_fixture(const std::string& key);
void store_fixture(const std::string& key, std::unique_ptr<Fixture> f);
void release_fixture();

template <class T, class Make>
T* reuse_fixture(const std::string& key, Make&& make) {
  if (Fixture* f = find_fixture(key)) return static_cast<T*>(f);
  release_fixture();
  std::unique_ptr<T> made = make();
  if (!made) return nullptr;
  T* raw = made.get();
  store_fixture(key, std::move(made));
  return raw;
}

// Line offset of the S = 0 sites: inside the line, away from both of its ends.
inline constexpr unsigned kInlineOffset = 16;

// Creates a stress site (S in 0..4) and brings it to state A. nullptr with *why.
std::unique_ptr<StressSite> make_site(unsigned straddle, std::string* why,
                                               std::span<const std::uint8_t> state_b = {});
// Writes `bytes` over a site that NO thread is executing (setup only): the engine's
// WordPatcher with no wait, which is correct only because nobody fetches the site.
Status set_quiescent(std::uint8_t* site, std::span<const std::uint8_t> bytes);

std::string status_message(const char* what, Status s);

}  // namespace crossmod::bench

namespace crossmod::bench {
// Registration of the three families (latency_bench.cpp, invoke_bench.cpp,
// throughput_bench.cpp). Called once by run() after env() is filled.
void register_latency_benchmarks();
void register_invoke_benchmarks();
void register_throughput_benchmarks();
// Every name registered so far, in crossmod's scheme (for --list).
std::vector<std::string>& registered_names();
}  // namespace crossmod::bench
