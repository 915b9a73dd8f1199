// The install/remove stress scenario shared by the unit test (a few thousand cycles) and
// the `stress` label binary (1M cycles): executor threads call the test functions in a
// tight loop and check every result against its oracle while one thread installs and
// removes (and toggles) tracepoints on all of them. A fault kills the process.
#pragma once
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "crossmod/tracepoint.hpp"
#include "crossmod/wait.hpp"
#include "crossmod/x86.hpp"
#include "test_code.hpp"

namespace crossmod::tp::test {

// membarrier SYNC_CORE where the kernel has it (no timing assumption); else a wait far
// above any Tmax measured on the reference machines.
inline WaitPolicy stress_wait() {
  static const WaitPolicy w = sync_core_register() == crossmod::Status::ok
                                  ? WaitPolicy::SyncCore()
                                  : WaitPolicy::Ticks(100000);
  return w;
}

struct StressResult {
  std::uint64_t cycles = 0;
  std::uint64_t exposed_cycles = 0;  // cycles during which some probe fired
  std::uint64_t calls = 0;
  std::uint64_t wrong = 0;
  std::uint64_t probe_hits = 0;
};

inline std::atomic<std::uint64_t> g_stress_hits{0};
inline void stress_probe(void*) noexcept { g_stress_hits.fetch_add(1, std::memory_order_relaxed); }

inline StressResult run_stress(std::uint64_t cycles, unsigned executors, bool batched) {
  TestCode code;
  LowCode low;
  if (!low.ok()) return {};
  // shortfn is too short for a jump: a trap-mode tracepoint. sum4 lies below 816 MiB: a
  // 6-byte 0x2E-prefixed jump, with the loop's back edge on its 0xCC.
  // plus_straddling's jump crosses a line: the int3 protocol with waits; the others are
  // in-line (one store each).
  const TestFn* fns[] = {&code.sum(), &code.plus(), &code.call(), &code.jcc(), &code.shortfn(),
                         &low.sum4(), &code.plus_straddling()};
  constexpr std::size_t kN = sizeof fns / sizeof fns[0];
  std::vector<Tracepoint> tps(kN);
  for (std::size_t i = 0; i < kN; ++i) {
    const Status s = Tracepoint::prepare(fns[i]->addr, fns[i]->size, stress_probe, nullptr, &tps[i],
                                         nullptr, /*trap_fallback=*/true);
    EXPECT_EQ(s, Status::ok) << i << " " << to_string(s);
    if (s != Status::ok) return {};
  }
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> calls{0}, wrong{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < executors; ++t) {
    threads.emplace_back([&, t] {
      std::uint64_t n = t, local_calls = 0, local_wrong = 0;
      const Fn2 sum = code.sum().fn(), plus = code.plus().fn(), call = code.call().fn(),
                jcc = code.jcc().fn(), inc32 = code.shortfn().fn(), sum4 = low.sum4().fn(),
                plus_x = code.plus_straddling().fn();
      while (!stop.load(std::memory_order_relaxed)) {
        n = (n + 1) & 7;
        const std::uint64_t k = n + 1;
        local_wrong += sum(k, 0) != TestCode::sum_oracle(k);
        local_wrong += plus(n, 0) != TestCode::kK + n;
        local_wrong += call(n, 0) != 2 * n + 1;
        local_wrong += jcc(n, 0) != (n == 0 ? 0 : n + 1);
        local_wrong += inc32(n, 0) != n + 1;
        local_wrong += plus_x(n, 0) != TestCode::kK + n;
        local_calls += 6;
        if (n == 1) {  // one back edge (one trap) per 8 rounds: the others stay hot
          local_wrong += sum4(k, 0) != TestCode::sum_oracle(k);
          ++local_calls;
        }
      }
      wrong.fetch_add(local_wrong);
      calls.fetch_add(local_calls);
    });
  }
  StressResult r;
  const WaitPolicy w = stress_wait();
  for (std::uint64_t c = 0; c < cycles; ++c) {
    const std::uint64_t h0 = g_stress_hits.load(std::memory_order_relaxed);
    if (batched) {
      EXPECT_EQ(Tracepoint::install_all(tps, w), Status::ok);
    } else {
      for (auto& tp : tps) EXPECT_EQ(tp.install(w), Status::ok);
    }
    // Dwell until a probe fired (bounded), so that removals happen under execution.
    for (int i = 0; i < 20000 && g_stress_hits.load(std::memory_order_relaxed) == h0; ++i)
      x86::pause();
    if ((c & 15) == 0) {
      for (auto& tp : tps) EXPECT_EQ(tp.disable(), Status::ok);
      for (auto& tp : tps) EXPECT_EQ(tp.enable(), Status::ok);
    }
    if (batched) {
      EXPECT_EQ(Tracepoint::remove_all(tps, w), Status::ok);
    } else {
      for (auto& tp : tps) EXPECT_EQ(tp.remove(w), Status::ok);
    }
    if (g_stress_hits.load(std::memory_order_relaxed) != h0) ++r.exposed_cycles;
    ++r.cycles;
  }
  stop.store(true);
  for (auto& th : threads) th.join();
  r.calls = calls.load();
  r.wrong = wrong.load();
  r.probe_hits = g_stress_hits.load();
  return r;
}

}  // namespace crossmod::tp::test
