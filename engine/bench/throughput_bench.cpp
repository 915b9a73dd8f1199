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
// cheaper than the active call. So the rate:0 run measures each state for half its
// window (one toggle between the halves, with the executors stopped), and a toggling
// run is compared with the 0 Hz rate at its own state mix: with f the fraction of its
// calls in state A, baseline = 1 / (f / rate_A + (1 - f) / rate_B), the calls per second
// the same calls would have run at without toggling. calls_per_s_rel = calls_per_s /
// baseline: 1.0 means toggling costs nothing (issue 10: the old ratio, against an
// always-active 0 Hz run, read 1.2-1.4 at 10-1000 Hz, which was the cheaper state, not a
// speed-up). executor_cpu_share says whether the executors had their PUs at all (on a
// shared VM they often did not).
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

// Per-state rates of the rate:0 run per protocol/executors: calls per wall second and
// per executor CPU second in state A and in state B.
struct Baseline {
  double a_per_s = 0, b_per_s = 0, a_per_cpu_s = 0, b_per_cpu_s = 0;
};
std::map<std::string, Baseline>& baselines() {
  static std::map<std::string, Baseline> b;
  return b;
}

// The rate of calls split f : (1 - f) between two states of rates ra and rb.
double same_mix(double f, double ra, double rb) {
  if (!(ra > 0) || !(rb > 0)) return 0;
  return 1.0 / (f / ra + (1 - f) / rb);
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
  std::uint64_t calls = 0, state_a = 0, toggles = 0, ticks = 0, faults = 0;
  double executor_cpu_s = 0;
  const trap::Stats traps0 = trap::stats();
  Status bad = Status::ok;
  auto toggle = [&]() -> Status {
    if (spec.protocol == Protocol::callpatch) return fx->cs.active() ? fx->cs.deactivate() : fx->cs.activate();
    const Status s = fx->patcher->patch(fx->site->site(), fx->at_a ? fx->site->state_b() : fx->site->state_a());
    if (s == Status::ok) fx->at_a = !fx->at_a;
    return s;
  };
  // rate 0: each state for half the window, executors stopped for the one toggle between.
  Baseline base;
  auto run_baseline = [&]() -> bool {
    for (int half = 0; half < 2; ++half) {
      Executors ex;
      if (!ex.start(spec.executors, {fx->site->entry()}, /*hold=*/true, &why)) {
        st.SkipWithError(why.c_str());
        return false;
      }
      const std::uint64_t t0 = x86::rdtsc();
      ex.go();
      while (x86::rdtsc() - t0 < window / 2) x86::pause();
      ex.stop();
      const std::uint64_t dt = x86::rdtsc() - t0;
      ticks += dt;
      calls += ex.calls();
      state_a += ex.state_a();
      faults += ex.faults();
      executor_cpu_s += ex.cpu_seconds();
      const double per_s = static_cast<double>(ex.calls()) / (static_cast<double>(dt) / hz);
      const double per_cpu = ex.cpu_seconds() > 0 ? static_cast<double>(ex.calls()) / ex.cpu_seconds() : 0;
      (half == 0 ? base.a_per_s : base.b_per_s) = per_s;
      (half == 0 ? base.a_per_cpu_s : base.b_per_cpu_s) = per_cpu;
      if (const Status s = toggle(); s != Status::ok) {  // A -> B, then B -> A
        st.SkipWithError(status_message("toggle", s).c_str());
        return false;
      }
    }
    baselines()[fmt::format("{}/{}", name_of(spec.protocol), spec.executors)] = base;
    st.counters["calls_per_s_state_a"] = base.a_per_s;
    st.counters["calls_per_s_state_b"] = base.b_per_s;
    return true;
  };
  for (auto _ : st) {
    if (spec.rate_hz == 0) {
      if (!run_baseline()) break;
      continue;
    }
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
      const Status s = toggle();
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
    faults += ex.faults();
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
  st.counters["executor_faults"] = static_cast<double>(faults);  // torn sites survived (Executors)

  const std::string key = fmt::format("{}/{}", name_of(spec.protocol), spec.executors);
  const double f = calls ? a / static_cast<double>(calls) : 0.0;
  if (auto it = baselines().find(key); it != baselines().end()) {
    const Baseline& zero = it->second;
    const double mix = same_mix(f, zero.a_per_s, zero.b_per_s);
    const double mix_cpu = same_mix(f, zero.a_per_cpu_s, zero.b_per_cpu_s);
    st.counters["calls_per_s_same_mix_0hz"] = mix;
    st.counters["calls_per_executor_cpu_s_same_mix_0hz"] = mix_cpu;
    if (mix > 0) st.counters["calls_per_s_rel"] = calls_per_s / mix;
    if (mix_cpu > 0 && executor_cpu_s > 0) {
      st.counters["calls_per_executor_cpu_s_rel"] = static_cast<double>(calls) / executor_cpu_s / mix_cpu;
    }
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
