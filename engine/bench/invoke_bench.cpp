// Invocation cost of a probe site: `invoke/<variant>` (PLDI'16 section 8.5): what a
// thread pays to pass a probe point that is active, deactivated in each of callpatch's
// forms, a NOP, or a flag-guarded static probe, against an empty loop and a direct call.
// Thread safety: benchmarks run on the pinned patcher thread, no other thread runs.
//
// Why this method: a single call costs a few cycles, less than rdtscp itself, so calls
// are not timed one by one. Each iteration makes kCalls calls (unrolled by the compiler,
// results kept alive with DoNotOptimize) and TSC ticks over the whole loop are divided
// by the number of calls; empty_loop measures what the loop itself costs. Calls go
// through the site's entry, which is itself called through a pointer, as a profiler
// trampoline would be; direct_call is a direct call of a noipa function, the floor.
#include <fmt/core.h>

#include <atomic>

#include "bench_support.hpp"
#include "crossmod/callpatch.hpp"
#include "crossmod/testsupport/site_code.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::bench {
namespace {


constexpr int kCalls = 16;

// noipa: no inlining, cloning or interprocedural constant propagation, so every call
// really happens and costs what an out-of-line probe handler's call costs.
[[gnu::noipa]] int probe_handler(int id) { return id & 1; }

std::atomic<bool> g_probe_flag{false};

void publish(benchmark::State& st, std::uint64_t ticks) {
  double calls = static_cast<double>(st.iterations()) * kCalls;
  if (calls <= 0) return;
  double per = static_cast<double>(ticks) / calls;
  st.counters["ticks_per_call"] = per;
  st.counters["ns_per_call"] = per * 1e9 / env().tsc_hz;
  st.SetItemsProcessed(static_cast<std::int64_t>(calls));
}

template <class Body>
void timed_loop(benchmark::State& st, Body&& body) {
  std::uint64_t t0 = x86::rdtscp_ordered();
  for (auto _ : st) {
#pragma GCC unroll 16
    for (int i = 0; i < kCalls; ++i) body(i);
  }
  std::uint64_t t1 = x86::rdtscp_ordered();
  publish(st, t1 - t0);
}

void bm_empty_loop(benchmark::State& st) {
  timed_loop(st, [](int i) { benchmark::DoNotOptimize(i); });
}

void bm_direct_call(benchmark::State& st) {
  timed_loop(st, [](int i) { benchmark::DoNotOptimize(probe_handler(i)); });
}

// The static-probe baseline: `if (flag) handler(id)`. The flag is an atomic so the load
// stays inside the loop, as it would in code that cannot see who sets it.
void bm_flag_guard(benchmark::State& st, bool on) {
  g_probe_flag.store(on, std::memory_order_relaxed);
  timed_loop(st, [](int i) {
    if (g_probe_flag.load(std::memory_order_relaxed)) benchmark::DoNotOptimize(probe_handler(i));
  });
  g_probe_flag.store(false, std::memory_order_relaxed);
}

struct SiteFixture : Fixture {
  std::unique_ptr<StressSite> site;
  CallSite cs;
};

// Runs the site's entry in state `bytes` (nullptr: keep state A).
void bm_site(benchmark::State& st, const std::string& name, unsigned straddle,
             std::span<const std::uint8_t> state_b, bool to_state_b) {
  std::string why;
  auto* fx = reuse_fixture<SiteFixture>(name, [&]() -> std::unique_ptr<SiteFixture> {
    auto f = std::make_unique<SiteFixture>();
    f->site = make_site(straddle, &why, state_b);
    if (!f->site) return nullptr;
    if (to_state_b) {
      if (Status s = set_quiescent(f->site->site(), f->site->state_b()); s != Status::ok) {
        why = status_message("setting state B", s);
        return nullptr;
      }
    }
    return f;
  });
  if (!fx) return st.SkipWithError(why.c_str());
  StressSite::EntryFn fn = fx->site->entry();
  timed_loop(st, [fn](int) { benchmark::DoNotOptimize(fn()); });
}

// A deactivated callpatch site: nop for S = 0, call to the ret trampoline for S = 1,
// short jump over the rest of the site for S = 2..4.
void bm_callpatch_off(benchmark::State& st, const std::string& name, unsigned straddle) {
  std::string why;
  auto* fx = reuse_fixture<SiteFixture>(name, [&]() -> std::unique_ptr<SiteFixture> {
    auto f = std::make_unique<SiteFixture>();
    f->site = make_site(straddle, &why);
    if (!f->site) return nullptr;
    Status s = CallSite::prepare(f->site->site(), f->site->call_target(), &f->cs);
    if (s == Status::ok) s = f->cs.deactivate();
    if (s != Status::ok) {
      why = status_message("CallSite prepare/deactivate", s);
      return nullptr;
    }
    return f;
  });
  if (!fx) return st.SkipWithError(why.c_str());
  StressSite::EntryFn fn = fx->site->entry();
  timed_loop(st, [fn](int) { benchmark::DoNotOptimize(fn()); });
}

template <class Fn>
void add(const std::string& variant, Fn fn) {
  std::string name = "invoke/" + variant;
  registered_names().push_back(name);
  benchmark::RegisterBenchmark(name.c_str(), [name, fn](benchmark::State& st) { fn(st, name); })
      ->UseRealTime();
}

}  // namespace

void register_invoke_benchmarks() {
  add("empty_loop", [](benchmark::State& st, const std::string&) { bm_empty_loop(st); });
  add("direct_call", [](benchmark::State& st, const std::string&) { bm_direct_call(st); });
  add("flag_guard_off", [](benchmark::State& st, const std::string&) { bm_flag_guard(st, false); });
  add("flag_guard_on", [](benchmark::State& st, const std::string&) { bm_flag_guard(st, true); });
  add("active_site", [](benchmark::State& st, const std::string& n) {
    bm_site(st, n, 0, {}, false);
  });
  add("nop5_site", [](benchmark::State& st, const std::string& n) {
    bm_site(st, n, 0, x86::kNop5, true);
  });
  add("nop5_prefixed_site", [](benchmark::State& st, const std::string& n) {
    bm_site(st, n, 0, testsupport::kNop5Prefixed, true);
  });
  for (unsigned s = 0; s <= 4; ++s) {
    add(fmt::format("callpatch_off_s{}", s), [s](benchmark::State& st, const std::string& n) {
      bm_callpatch_off(st, n, s);
    });
  }
}

}  // namespace crossmod::bench
