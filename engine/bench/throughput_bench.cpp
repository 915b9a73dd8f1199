// Executor throughput while a probe is toggled: `throughput/<protocol>/rate:<hz>/
// executors:<n>` for protocol in {callpatch, wordpatch}: n executors call one S = 2 site
// in a loop while the patcher toggles it `rate` times per second (0 = never).
// Thread safety: the patcher is the pinned benchmark thread; executors are Executors
// threads; they share only atomics.
//
// Why this method: the cost of toggling lands on the executors (int3 traps while a
// wordpatch straddler is locked, line invalidations, pipeline flushes on modified code),
// so it is measured where it lands: calls completed per second, over a fixed window
// whose start is a common go signal. Toggles are deadline-spaced on the TSC rather than
// slept for, because sleeping cannot hit 1 MHz and oversleeps on a VM; when the patcher
// falls behind (a wordpatch toggle takes >= 2 Tmax) it does not burst to catch up, and
// achieved_toggles_per_s says what rate was really applied. The patcher spins even at
// rate 0 so every run has the same number of busy threads.
// S = 2 straddles the line, so wordpatch pays its full int3 + 2 waits protocol and
// callpatch uses its short-jump form; both toggle the same kind of site.
// calls_per_s mixes the costs of the two states: a deactivated site (short jump) is
// cheaper than the active call, so calls_per_s_rel above 1 under toggling is expected
// (observed here); state_a_fraction gives the mix, executor_cpu_share says whether the
// executors had their PUs at all (on a shared VM they often did not).
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "bench_support.hpp"
#include "crossmod/callpatch.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/wordpatch.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::bench {
namespace {


constexpr unsigned kThroughputStraddle = 2;

enum class Protocol { callpatch, wordpatch };
const char* name_of(Protocol p) { return p == Protocol::callpatch ? "callpatch" : "wordpatch"; }

struct Spec {
  std::string name;
  Protocol protocol;
  std::uint64_t rate_hz;
  unsigned executors;
};

struct ThroughputFixture : Fixture {
  std::unique_ptr<StressSite> site;
  CallSite cs;
  std::unique_ptr<WordPatcher> patcher;
  bool at_a = true;
};

// calls_per_s of the rate:0 run per protocol/executors, for calls_per_s_rel.
std::map<std::string, double>& baselines() {
  static std::map<std::string, double> b;
  return b;
}

void bm_throughput(benchmark::State& st, const Spec& spec) {
  std::string why;
  if (!pin_patcher(&why)) return st.SkipWithError(why.c_str());
  auto* fx = reuse_fixture<ThroughputFixture>(spec.name, [&]() -> std::unique_ptr<ThroughputFixture> {
    auto f = std::make_unique<ThroughputFixture>();
    f->site = make_site(kThroughputStraddle, &why);
    if (!f->site) return nullptr;
    if (spec.protocol == Protocol::callpatch) {
      if (Status s = CallSite::prepare(f->site->site(), f->site->call_target(), &f->cs);
          s != Status::ok) {
        why = status_message("CallSite::prepare", s);
        return nullptr;
      }
    } else {
      f->patcher = std::make_unique<WordPatcher>(WaitPolicy::Ticks(env().tmax_ticks));
      if (Status s = f->patcher->init_status(); s != Status::ok) {
        why = status_message("WordPatcher", s);
        return nullptr;
      }
    }
    return f;
  });
  if (!fx) return st.SkipWithError(why.c_str());

  const double hz = env().tsc_hz;
  // One window per iteration, and one iteration (registered with Iterations(1)).
  const double window_s = env().throughput_window_s;
  const auto window = static_cast<std::uint64_t>(window_s * hz);
  const std::uint64_t period =
      spec.rate_hz ? std::max<std::uint64_t>(1, static_cast<std::uint64_t>(hz / static_cast<double>(spec.rate_hz)))
                   : 0;
  std::uint64_t calls = 0, state_a = 0, toggles = 0, ticks = 0;
  double executor_cpu_s = 0;
  const trap::Stats traps0 = trap::stats();
  Status bad = Status::ok;
  for (auto _ : st) {
    Executors ex;
    if (!ex.start(spec.executors, {fx->site->entry()}, /*hold=*/true, &why)) {
      st.SkipWithError(why.c_str());
      break;
    }
    const std::uint64_t t0 = x86::rdtsc();
    ex.go();
    const std::uint64_t end = t0 + window;
    std::uint64_t next = t0 + period;
    std::uint64_t now;
    while ((now = x86::rdtsc()) < end) {
      if (period == 0 || now < next) {
        x86::pause();
        continue;
      }
      Status s;
      if (spec.protocol == Protocol::callpatch) {
        s = fx->cs.active() ? fx->cs.deactivate() : fx->cs.activate();
      } else {
        s = fx->patcher->patch(fx->site->site(), fx->at_a ? fx->site->state_b() : fx->site->state_a());
        if (s == Status::ok) fx->at_a = !fx->at_a;
      }
      if (s != Status::ok) {
        bad = s;
        break;
      }
      ++toggles;
      next += period;
      if (now > next) next = now + period;  // behind schedule: skip, never burst
    }
    ex.stop();
    ticks += x86::rdtsc() - t0;
    calls += ex.calls();
    state_a += ex.state_a();
    executor_cpu_s += ex.cpu_seconds();
    if (bad != Status::ok) {
      st.SkipWithError(status_message("toggle", bad).c_str());
      break;
    }
  }
  if (st.error_occurred() || ticks == 0) return;

  const double seconds = static_cast<double>(ticks) / hz;
  const double a = static_cast<double>(state_a);
  const double b = static_cast<double>(calls - state_a);
  const double calls_per_s = static_cast<double>(calls) / seconds;
  st.counters["calls_per_s"] = calls_per_s;
  st.counters["achieved_toggles_per_s"] = static_cast<double>(toggles) / seconds;
  st.counters["state_a_fraction"] = calls ? a / static_cast<double>(calls) : 0.0;
  // max/min of executions in each state; 0 when one state never ran (rate 0), because
  // JSON has no infinity.
  st.counters["imbalance"] = std::min(a, b) > 0 ? std::max(a, b) / std::min(a, b) : 0.0;
  st.counters["window_s"] = seconds;
  // Quality flags for a shared machine: the share of the window the executors really ran
  // (1.0 = each had its PU), and throughput per executor CPU-second, which descheduling
  // by other tenants does not dilute.
  st.counters["executor_cpu_share"] =
      executor_cpu_s / (seconds * static_cast<double>(spec.executors));
  st.counters["calls_per_executor_cpu_s"] =
      executor_cpu_s > 0 ? static_cast<double>(calls) / executor_cpu_s : 0.0;
  st.counters["straddle"] = kThroughputStraddle;
  const trap::Stats traps1 = trap::stats();
  // Executions that met a locked wordpatch site and waited in the engine's trap handler.
  st.counters["executor_traps"] = static_cast<double>(
      (traps1.locked_hits - traps0.locked_hits) + (traps1.late_hits - traps0.late_hits));

  const std::string key = fmt::format("{}/{}", name_of(spec.protocol), spec.executors);
  if (spec.rate_hz == 0) {
    baselines()[key] = calls_per_s;
    st.counters["calls_per_s_rel"] = 1.0;
  } else if (auto it = baselines().find(key); it != baselines().end() && it->second > 0) {
    st.counters["calls_per_s_rel"] = calls_per_s / it->second;
  }
}

}  // namespace

void register_throughput_benchmarks() {
  std::vector<std::uint64_t> rates = {0, 10, 100, 1000, 10000, 100000, 1000000};
  if (env().smoke) rates = {0, 100000, 1000000};  // what the summary needs
  for (Protocol p : {Protocol::callpatch, Protocol::wordpatch}) {
    for (unsigned n = 1; n <= env().max_executors; ++n) {
      const Placement& a = placement(n);
      if (a.oversubscribed)
        fmt::print(stderr, "crossmod bench: warning: throughput with {} executors: {}\n", n,
                   a.warning.empty() ? "more threads than PUs" : a.warning);
      for (std::uint64_t r : rates) {
        Spec spec{fmt::format("throughput/{}/rate:{}/executors:{}", name_of(p), r, n), p, r, n};
        registered_names().push_back(spec.name);
        benchmark::RegisterBenchmark(spec.name.c_str(),
                                     [spec](benchmark::State& st) { bm_throughput(st, spec); })
            ->Unit(benchmark::kMillisecond)
            ->Iterations(1)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace crossmod::bench
