// latency_lab: a multi-threaded program whose per-function latencies are known, so a
// profiler's estimates can be checked against ground truth (issue 12, accuracy).
//
// Every lab_* function spins until a known number of TSC ticks has passed (200 .. 100k),
// at a known call frequency, some nested (lab_outer calls lab_inner_3k). Each call times
// its own body with the same TSC the profiler uses (the spin's first and last rdtsc), so
// the program knows, in every run and with or without instrumentation, the true call
// count and the true mean latency of every function. It writes them to --truth FILE.json.
// The program knows nothing about crossmod; it is built with -finstrument-functions and
// with -fpatchable-function-entry=5 (profiler/workloads/CMakeLists.txt).
//
//   latency_lab [--threads 8] [--iterations N | --seconds S] [--truth FILE.json]
// Exit 0; bad options: one line on stderr, exit 2.
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "workload_args.hpp"

#if defined(__clang__)
#define LAB_NOIPA __attribute__((noinline))
#else
#define LAB_NOIPA __attribute__((noipa))
#endif

// The measurement helpers are neither instrumented nor separate functions: the probes must
// see only the lab_* functions' own entries and exits, not the spin loop's TSC reads
// (-finstrument-functions also instruments inlined functions, at every inlined call).
#define LAB_HELPER __attribute__((always_inline, no_instrument_function)) inline

namespace {

// Per-thread truth: calls and the sum of measured body ticks per function (plain
// thread-local counters, summed after join: no atomics on the measured path).
enum Fn : unsigned { kLeaf200, kLeaf1k, kLeaf5k, kLeaf20k, kLeaf100k, kOuter, kInner3k, kRare50k,
                     kTiny, kFnCount };
struct FnInfo {
  const char* name;
  std::uint64_t spin_ticks;  // 0: not a spinning function (kTiny, kOuter)
  const char* role;
};
constexpr FnInfo kFns[kFnCount] = {
    {"lab_leaf_200", 200, "leaf, 40 calls per iteration"},
    {"lab_leaf_1k", 1000, "leaf, 10 calls per iteration"},
    {"lab_leaf_5k", 5000, "leaf, 4 calls per iteration"},
    {"lab_leaf_20k", 20000, "leaf, 1 call per iteration"},
    {"lab_leaf_100k", 100000, "leaf, 1 call every 8 iterations"},
    {"lab_outer", 9000, "2k spin + 2 x lab_inner_3k + 1k spin, 1 call every 2 iterations"},
    {"lab_inner_3k", 3000, "nested: called only by lab_outer"},
    {"lab_rare_50k", 50000, "leaf, 1 call every 64 iterations"},
    {"lab_tiny", 0, "a few arithmetic instructions, 200 calls per iteration (not timed)"},
};

struct Truth {
  std::uint64_t calls[kFnCount] = {};
  std::uint64_t ticks[kFnCount] = {};
  double sumsq[kFnCount] = {};
  std::uint64_t preempted[kFnCount] = {};       // calls whose body took > 2 x nominal + 20k ticks
  std::uint64_t preempted_ticks[kFnCount] = {};
  std::uint64_t switched[kFnCount] = {};        // calls during which the thread left the CPU
  std::uint64_t switched_ticks[kFnCount] = {};
  // Of the calls that stayed on the CPU: the ticks the spin lost to stalls the thread did not
  // see as a switch (interrupts, the hypervisor taking the vCPU) and how many calls had one.
  std::uint64_t oncpu_stall_ticks[kFnCount] = {};
  std::uint64_t oncpu_stalled[kFnCount] = {};
  // lab_outer's calls that stayed on the CPU: what its inner calls cost beyond their spins.
  std::uint64_t oncpu_nested_ticks[kFnCount] = {};
  // Calls timed from their caller (timed_calls): what they cost beyond the ticks their
  // truth records, in this workload as it runs (a rare function's code and data are cold).
  std::uint64_t cost_ticks[kFnCount] = {};
  std::uint64_t cost_calls[kFnCount] = {};
};
thread_local Truth* t_truth = nullptr;
// The thread's context-switch sequence: the `lock` word of a perf software counter's mmap
// page, which the kernel rewrites whenever the thread is scheduled in (nullptr: no page, the
// kernel refused perf_event_open; then nothing counts as switched and the truth says so).
// The same kernel fact the profiler uses, read by the program itself around each spin.
thread_local const std::uint32_t* t_switch_page = nullptr;
std::atomic<bool> g_switch_pages{true};

const std::uint32_t* open_switch_page() noexcept {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_SOFTWARE;
  a.config = PERF_COUNT_SW_TASK_CLOCK;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  const long fd = syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return nullptr;
  void* p = mmap(nullptr, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), PROT_READ, MAP_SHARED,
                 static_cast<int>(fd), 0);
  close(static_cast<int>(fd));
  if (p == MAP_FAILED) return nullptr;
  return &static_cast<const perf_event_mmap_page*>(p)->lock;
}

LAB_HELPER std::uint64_t tsc() noexcept { return __rdtsc(); }

LAB_HELPER std::uint32_t switch_seq() noexcept {
  return t_switch_page != nullptr ? __atomic_load_n(t_switch_page, __ATOMIC_ACQUIRE) : 0;
}

// A gap between two TSC reads of a spin longer than this is a stall: the loop's own step is
// a pause and an rdtsc (tens to a few hundred ticks), an interrupt or a vCPU the hypervisor
// took costs thousands.
constexpr std::uint64_t kStallGap = 2000;

// A spin's outcome: the elapsed ticks between its first and last rdtsc (the call's body
// time), whether the thread left the CPU meanwhile, and the ticks of the gaps longer than
// kStallGap (time the body lost without a switch).
struct Spun {
  std::uint64_t ticks;
  bool switched;
  std::uint64_t stall;
};

// Spins until `ticks` TSC ticks have passed since its first rdtsc.
LAB_HELPER Spun spin(std::uint64_t ticks) noexcept {
  const std::uint32_t seq = switch_seq();
  const std::uint64_t start = tsc();
  std::uint64_t now = start, stall = 0;
  while (now - start < ticks) {
    _mm_pause();
    const std::uint64_t prev = now;
    now = tsc();
    if (now - prev > kStallGap) stall += now - prev;
  }
  return {now - start, switch_seq() != seq, stall};
}

LAB_HELPER void record(Fn f, Spun s) noexcept {
  Truth& t = *t_truth;
  const std::uint64_t ticks = s.ticks;
  if (s.switched) {
    ++t.switched[f];
    t.switched_ticks[f] += ticks;
  } else if (s.stall != 0) {
    ++t.oncpu_stalled[f];
    t.oncpu_stall_ticks[f] += s.stall;
  }
  ++t.calls[f];
  t.ticks[f] += ticks;
  t.sumsq[f] += static_cast<double>(ticks) * static_cast<double>(ticks);
  // 8 threads on a few cores: a spin descheduled by the kernel lasts milliseconds. Such
  // calls are real latency (the mean keeps them) but are counted apart too.
  if (ticks > 2 * kFns[f].spin_ticks + 20000) {
    ++t.preempted[f];
    t.preempted_ticks[f] += ticks;
  }
}

}  // namespace

// k back-to-back calls of function f timed from the caller: what they cost beyond the
// ticks they recorded (and, for lab_outer, beyond what its nested calls cost: that is
// oncpu_nested_cost_ticks), counted when none of them left the CPU and the excess is no
// gap of the machine (over 20,000 + 1,000 k ticks: an interrupt or the hypervisor between
// two spins, not the calls' cost). The truth's call_overhead_ticks is the same quantity
// measured hot, on back-to-back lab_leaf_200 calls at start-up: a function called once in
// 64 iterations runs colder than that (oncpu_call_cost_ticks, per function).
template <class Call>
LAB_HELPER void timed_calls(Fn f, unsigned k, Call call) noexcept {
  Truth& t = *t_truth;
  const std::uint64_t ticks0 = t.ticks[f], nested0 = t.oncpu_nested_ticks[f], sw0 = t.switched[f];
  const std::uint64_t t0 = tsc();
  for (unsigned j = 0; j < k; ++j) call();
  const std::uint64_t t1 = tsc();
  if (t.switched[f] != sw0) return;
  const std::uint64_t inside = (t.ticks[f] - ticks0) + (t.oncpu_nested_ticks[f] - nested0);
  const std::uint64_t cost = t1 - t0 > inside ? t1 - t0 - inside : 0;
  if (cost > 20000 + 1000 * std::uint64_t{k}) return;
  t.cost_ticks[f] += cost;
  t.cost_calls[f] += k;
}

extern "C" {
LAB_NOIPA void lab_leaf_200() { record(kLeaf200, spin(200)); }
LAB_NOIPA void lab_leaf_1k() { record(kLeaf1k, spin(1000)); }
LAB_NOIPA void lab_leaf_5k() { record(kLeaf5k, spin(5000)); }
LAB_NOIPA void lab_leaf_20k() { record(kLeaf20k, spin(20000)); }
LAB_NOIPA void lab_leaf_100k() { record(kLeaf100k, spin(100000)); }
LAB_NOIPA void lab_rare_50k() { record(kRare50k, spin(50000)); }
LAB_NOIPA void lab_inner_3k() { record(kInner3k, spin(3000)); }
// lab_outer's body is its own time plus the two inner calls' spins: what the inner calls
// cost beyond their spin (call, return and whatever probes are on them) is taken out, so
// that the truth is the same with and without instrumentation. A whole call of lab_outer
// lasts that plus 1 + kOuterNested call overheads (its own and the inner calls').
constexpr unsigned kOuterNested = 2;
LAB_HELPER std::uint64_t inner_call(std::uint64_t& stall) noexcept {
  Truth& t = *t_truth;
  const std::uint64_t spun0 = t.ticks[kInner3k], stall0 = t.oncpu_stall_ticks[kInner3k],
                      sw0 = t.switched[kInner3k];
  const std::uint64_t t0 = tsc();
  lab_inner_3k();
  const std::uint64_t t1 = tsc();
  stall += t.oncpu_stall_ticks[kInner3k] - stall0;
  const std::uint64_t spun = t.ticks[kInner3k] - spun0;
  const std::uint64_t beyond =
      t1 - t0 > spun ? t1 - t0 - spun : 0;               // the call's cost beyond its spin
  if (t.switched[kInner3k] == sw0 && beyond <= 21000) {  // as timed_calls
    t.cost_ticks[kInner3k] += beyond;
    ++t.cost_calls[kInner3k];
  }
  return beyond;
}
LAB_NOIPA void lab_outer() {
  const std::uint32_t seq = switch_seq();
  const std::uint64_t start = tsc();
  const Spun a = spin(2000);
  std::uint64_t stall = a.stall, beyond = 0;
  for (unsigned k = 0; k < kOuterNested; ++k) beyond += inner_call(stall);
  const Spun b = spin(1000);
  const std::uint64_t end = tsc();
  const bool switched = switch_seq() != seq;
  if (!switched) t_truth->oncpu_nested_ticks[kOuter] += beyond;
  record(kOuter, {end - start - beyond, switched, stall + b.stall});
}
LAB_NOIPA std::uint64_t lab_tiny(std::uint64_t x) {
  ++t_truth->calls[kTiny];
  return x * 0x9E3779B97F4A7C15ull + 7;
}
LAB_NOIPA std::uint64_t lab_iteration(std::uint64_t i, std::uint64_t acc) {
  for (int k = 0; k < 200; ++k) acc = lab_tiny(acc);
  timed_calls(kLeaf200, 40, [] { lab_leaf_200(); });
  timed_calls(kLeaf1k, 10, [] { lab_leaf_1k(); });
  timed_calls(kLeaf5k, 4, [] { lab_leaf_5k(); });
  timed_calls(kLeaf20k, 1, [] { lab_leaf_20k(); });
  if (i % 2 == 0) timed_calls(kOuter, 1, [] { lab_outer(); });
  if (i % 8 == 0) timed_calls(kLeaf100k, 1, [] { lab_leaf_100k(); });
  if (i % 64 == 63) timed_calls(kRare50k, 1, [] { lab_rare_50k(); });
  return acc;
}
}

namespace {

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "latency_lab: %s (usage: latency_lab [--threads N] [--iterations N | --seconds S] [--truth FILE.json])\n",
               msg.c_str());
  std::exit(2);
}

double measure_tsc_hz() {
  const auto w0 = std::chrono::steady_clock::now();
  const std::uint64_t t0 = tsc();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::uint64_t t1 = tsc();
  const auto w1 = std::chrono::steady_clock::now();
  return static_cast<double>(t1 - t0) / std::chrono::duration<double>(w1 - w0).count();
}

// What a call costs besides the spin its truth records (call and return, the spin's
// rdtsc latency, the recording): K calls of lab_leaf_200 timed from the caller, minus the
// spin ticks those calls recorded, per call; the minimum over rounds (an interrupt or a
// preemption only adds). Without instrumentation this is the functions' own fixed cost, so
// a call of lab_leaf_N lasts about mean_unpreempted_ticks + call_overhead_ticks; in a
// profiled run it also holds whatever probes were on (use an uninstrumented run's value).
double measure_call_overhead() {
  Truth scratch;
  t_truth = &scratch;
  constexpr int kCalls = 2000, kRounds = 10;
  double best = 1e300;
  for (int r = 0; r < kRounds; ++r) {
    const std::uint64_t s0 = scratch.ticks[kLeaf200];
    const std::uint64_t t0 = tsc();
    for (int k = 0; k < kCalls; ++k) lab_leaf_200();
    const std::uint64_t t1 = tsc();
    const double per = (static_cast<double>(t1 - t0) - static_cast<double>(scratch.ticks[kLeaf200] - s0)) / kCalls;
    if (scratch.switched[kLeaf200] != 0) {  // the round left the CPU: not a clean round
      scratch.switched[kLeaf200] = 0;
      continue;
    }
    best = std::min(best, per);
  }
  t_truth = nullptr;
  return best;
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t threads = 8, iterations = 0;
  double seconds = 0;
  const char* truth_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--threads") {
      if (!workload::parse_u64(v, threads) || threads == 0 || threads > 256) usage_error("--threads wants 1..256");
      ++i;
    } else if (a == "--iterations") {
      if (!workload::parse_u64(v, iterations) || iterations == 0) usage_error("--iterations wants a positive integer");
      ++i;
    } else if (a == "--seconds") {
      char* end = nullptr;
      seconds = v ? std::strtod(v, &end) : 0;
      if (v == nullptr || *end != '\0' || !(seconds > 0 && seconds < 86400)) usage_error("--seconds wants a positive number");
      ++i;
    } else if (a == "--truth") {
      if (v == nullptr || *v == '\0') usage_error("--truth wants a file name");
      truth_path = v;
      ++i;
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (iterations != 0 && seconds != 0) usage_error("give --iterations or --seconds, not both");
  if (iterations == 0 && seconds == 0) iterations = 2000;
  FILE* out = nullptr;
  if (truth_path != nullptr) {
    out = std::fopen(truth_path, "w");
    if (out == nullptr) usage_error(std::string("cannot write ") + truth_path + ": " + std::strerror(errno));
  }

  const double tsc_hz = measure_tsc_hz();
  t_switch_page = open_switch_page();
  const double call_overhead = measure_call_overhead();
  const std::uint64_t deadline_ticks = static_cast<std::uint64_t>(seconds * tsc_hz);
  std::vector<Truth> truths(threads);
  std::vector<std::uint64_t> iters_done(threads), accs(threads);
  std::vector<std::thread> pool;
  const auto w0 = std::chrono::steady_clock::now();
  for (std::uint64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      t_truth = &truths[t];
      t_switch_page = open_switch_page();
      if (t_switch_page == nullptr) g_switch_pages.store(false, std::memory_order_relaxed);
      std::uint64_t acc = t + 1, i = 0;
      const std::uint64_t start = tsc();
      for (;; ++i) {
        if (iterations != 0 ? i >= iterations : tsc() - start >= deadline_ticks) break;
        acc = lab_iteration(i, acc);
      }
      iters_done[t] = i;
      accs[t] = acc;
    });
  }
  for (auto& th : pool) th.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();

  Truth total;
  std::uint64_t all_iters = 0, acc = 0;
  for (std::uint64_t t = 0; t < threads; ++t) {
    for (unsigned f = 0; f < kFnCount; ++f) {
      total.calls[f] += truths[t].calls[f];
      total.ticks[f] += truths[t].ticks[f];
      total.sumsq[f] += truths[t].sumsq[f];
      total.preempted[f] += truths[t].preempted[f];
      total.preempted_ticks[f] += truths[t].preempted_ticks[f];
      total.switched[f] += truths[t].switched[f];
      total.switched_ticks[f] += truths[t].switched_ticks[f];
      total.oncpu_stall_ticks[f] += truths[t].oncpu_stall_ticks[f];
      total.oncpu_stalled[f] += truths[t].oncpu_stalled[f];
      total.oncpu_nested_ticks[f] += truths[t].oncpu_nested_ticks[f];
      total.cost_ticks[f] += truths[t].cost_ticks[f];
      total.cost_calls[f] += truths[t].cost_calls[f];
    }
    all_iters += iters_done[t];
    acc ^= accs[t];
  }
  std::printf("latency_lab: %" PRIu64 " threads, %" PRIu64 " iterations, %.3f s, acc %016" PRIx64 "\n",
              threads, all_iters, wall, acc);
  if (out != nullptr) {
    std::fprintf(out, "{\n  \"schema\": 1,\n  \"tool\": \"latency_lab\",\n  \"method\": \"self-timed: each call's body "
                      "time between the first and last rdtsc of its spin, summed per thread without instrumentation "
                      "of the measurement\",\n");
    std::fprintf(out, "  \"threads\": %" PRIu64 ",\n  \"iterations\": %" PRIu64 ",\n  \"wall_s\": %.6f,\n  \"tsc_hz\": %.1f,\n",
                 threads, all_iters, wall, tsc_hz);
    if (call_overhead < 1e299)
      std::fprintf(out, "  \"call_overhead_ticks\": %.1f,\n", call_overhead);
    else  // every round left the CPU
      std::fprintf(out, "  \"call_overhead_ticks\": null,\n");
    const bool sw = g_switch_pages.load(std::memory_order_relaxed);
    std::fprintf(out, "  \"switch_detection\": \"%s\",\n", sw ? "perf" : "unavailable");
    std::fprintf(out, "  \"functions\": [\n");
    for (unsigned f = 0; f < kFnCount; ++f) {
      const bool timed = f != kTiny;
      const double n = static_cast<double>(total.calls[f]);
      std::fprintf(out, "    {\"name\": \"%s\", \"spin_ticks\": %" PRIu64 ", \"role\": \"%s\", \"calls\": %" PRIu64,
                   kFns[f].name, kFns[f].spin_ticks, json_escape(kFns[f].role).c_str(), total.calls[f]);
      if (timed && n > 0) {
        const double mean = static_cast<double>(total.ticks[f]) / n;
        const double var = n > 1 ? std::max(0.0, (total.sumsq[f] - n * mean * mean) / (n - 1)) : 0.0;
        const std::uint64_t quiet = total.calls[f] - total.preempted[f];
        std::fprintf(out, ", \"mean_ticks\": %.3f, \"sd_ticks\": %.3f, \"preempted_calls\": %" PRIu64, mean,
                     std::sqrt(var), total.preempted[f]);
        if (quiet > 0)
          std::fprintf(out, ", \"mean_unpreempted_ticks\": %.3f",
                       static_cast<double>(total.ticks[f] - total.preempted_ticks[f]) / static_cast<double>(quiet));
        else
          std::fprintf(out, ", \"mean_unpreempted_ticks\": null");
        const std::uint64_t oncpu = total.calls[f] - total.switched[f];
        if (sw)
          std::fprintf(out, ", \"switched_calls\": %" PRIu64, total.switched[f]);
        else
          std::fprintf(out, ", \"switched_calls\": null");
        if (sw && oncpu > 0) {
          const double on = static_cast<double>(oncpu);
          std::fprintf(out, ", \"mean_oncpu_ticks\": %.3f, \"oncpu_stalled_calls\": %" PRIu64
                            ", \"oncpu_stall_ticks_per_call\": %.3f",
                       static_cast<double>(total.ticks[f] - total.switched_ticks[f]) / on, total.oncpu_stalled[f],
                       static_cast<double>(total.oncpu_stall_ticks[f]) / on);
        } else {
          std::fprintf(out, ", \"mean_oncpu_ticks\": null, \"oncpu_stalled_calls\": null, "
                            "\"oncpu_stall_ticks_per_call\": null");
        }
        std::fprintf(out, ", \"nested_calls\": %u", f == kOuter ? kOuterNested : 0u);
        if (sw && oncpu > 0 && f == kOuter)
          std::fprintf(
              out, ", \"oncpu_nested_cost_ticks\": %.3f",
              static_cast<double>(total.oncpu_nested_ticks[f]) / static_cast<double>(oncpu));
        else
          std::fprintf(out, ", \"oncpu_nested_cost_ticks\": null");
        if (sw && total.cost_calls[f] > 0)
          std::fprintf(
              out, ", \"oncpu_call_cost_ticks\": %.3f, \"cost_timed_calls\": %" PRIu64 "}",
              static_cast<double>(total.cost_ticks[f]) / static_cast<double>(total.cost_calls[f]),
              total.cost_calls[f]);
        else
          std::fprintf(out, ", \"oncpu_call_cost_ticks\": null, \"cost_timed_calls\": 0}");
      } else {
        std::fprintf(out,
                     ", \"mean_ticks\": null, \"sd_ticks\": null, \"preempted_calls\": null, "
                     "\"mean_unpreempted_ticks\": null, \"switched_calls\": null, "
                     "\"mean_oncpu_ticks\": null, "
                     "\"oncpu_stalled_calls\": null, \"oncpu_stall_ticks_per_call\": null, "
                     "\"nested_calls\": 0, "
                     "\"oncpu_nested_cost_ticks\": null, \"oncpu_call_cost_ticks\": null, "
                     "\"cost_timed_calls\": 0}");
      }
      std::fprintf(out, "%s\n", f + 1 < kFnCount ? "," : "");
    }
    std::fprintf(out, "  ]\n}\n");
    if (std::fclose(out) != 0) {
      std::fprintf(stderr, "latency_lab: writing %s failed\n", truth_path);
      return 1;
    }
  }
  return 0;
}
