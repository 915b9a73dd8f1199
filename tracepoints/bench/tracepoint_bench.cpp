// Tracepoint costs, measured side by side in one run (ratios are the claim; absolute times
// on a shared KVM guest are noisy): invocation through an enabled jump tracepoint, a
// disabled one, a trap-mode (int3) one, the same function called directly and after
// removal; install+remove latency under membarrier SYNC_CORE; probe toggle latency; pool
// memory per tracepoint. The traced function is `plus_k` of tests/test_code.hpp (push rbp;
// mov rbp,rsp; mov rax,[rip+K]; add rax,rdi; pop rbp; ret).
#include <benchmark/benchmark.h>

#include "crossmod/tracepoint.hpp"
#include "crossmod/wait.hpp"
#include "test_code.hpp"

namespace {

using crossmod::tp::Status;
using crossmod::tp::Tracepoint;
using crossmod::tp::test::TestCode;

void empty_probe(void*) noexcept {}

TestCode& code() {
  static TestCode* c = new TestCode;
  return *c;
}

crossmod::WaitPolicy wait_policy() {
  return crossmod::sync_core_register() == crossmod::Status::ok
             ? crossmod::WaitPolicy::SyncCore()
             : crossmod::WaitPolicy::Ticks(100000);
}

void run_calls(benchmark::State& state, crossmod::tp::test::Fn2 f) {
  std::uint64_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(f(n++, 0));
  }
}

void BM_DirectCall(benchmark::State& state) { run_calls(state, code().plus().fn()); }

void with_tracepoint(benchmark::State& state, bool enabled, bool remove_first) {
  Tracepoint tp;
  if (Tracepoint::prepare(code().plus().addr, code().plus().size, empty_probe, nullptr, &tp) !=
          Status::ok ||
      tp.install(wait_policy()) != Status::ok) {
    state.SkipWithError("prepare/install failed");
    return;
  }
  if (!enabled) (void)tp.disable();
  if (remove_first) (void)tp.remove(wait_policy());
  run_calls(state, code().plus().fn());
  if (tp.is_installed()) (void)tp.remove(wait_policy());
}
void BM_JumpTracepointEnabled(benchmark::State& s) { with_tracepoint(s, true, false); }
void BM_JumpTracepointDisabled(benchmark::State& s) { with_tracepoint(s, false, false); }
void BM_AfterRemove(benchmark::State& s) { with_tracepoint(s, true, true); }

void BM_DirectCallShort(benchmark::State& state) { run_calls(state, code().shortfn().fn()); }
void BM_TrapTracepointShort(benchmark::State& state) {
  Tracepoint tp;
  if (Tracepoint::prepare(code().shortfn().addr, code().shortfn().size, empty_probe, nullptr, &tp,
                          nullptr, true) != Status::ok ||
      tp.install(wait_policy()) != Status::ok) {
    state.SkipWithError("prepare/install failed");
    return;
  }
  run_calls(state, code().shortfn().fn());
  (void)tp.remove(wait_policy());
}

void BM_InstallRemove(benchmark::State& state) {
  Tracepoint tp;
  if (Tracepoint::prepare(code().sum().addr, code().sum().size, empty_probe, nullptr, &tp) !=
      Status::ok) {
    state.SkipWithError("prepare failed");
    return;
  }
  const crossmod::WaitPolicy w = wait_policy();
  for (auto _ : state) {
    (void)tp.install(w);
    (void)tp.remove(w);
  }
  state.SetLabel(w.kind == crossmod::WaitPolicy::Kind::sync_core ? "sync_core" : "ticks");
}

void BM_Toggle(benchmark::State& state) {
  Tracepoint tp;
  if (Tracepoint::prepare(code().jcc().addr, code().jcc().size, empty_probe, nullptr, &tp) !=
      Status::ok) {
    state.SkipWithError("prepare failed");
    return;
  }
  for (auto _ : state) {
    (void)tp.disable();
    (void)tp.enable();
  }
  const auto p = crossmod::tp::pool_stats();
  state.counters["trampolines"] = static_cast<double>(p.trampolines);
  state.counters["body_bytes_per_tp"] =
      static_cast<double>(p.body_bytes_used) / static_cast<double>(p.trampolines);
  state.counters["entry_pages"] = static_cast<double>(p.entry_pages);
  state.counters["entry_bytes_used"] = static_cast<double>(p.entry_bytes_used);
}

BENCHMARK(BM_DirectCall);
BENCHMARK(BM_JumpTracepointEnabled);
BENCHMARK(BM_JumpTracepointDisabled);
BENCHMARK(BM_AfterRemove);
BENCHMARK(BM_DirectCallShort);
BENCHMARK(BM_TrapTracepointShort);
BENCHMARK(BM_InstallRemove);
BENCHMARK(BM_Toggle);

}  // namespace

BENCHMARK_MAIN();
