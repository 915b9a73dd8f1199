// Core-to-core latency by cache-line ping-pong (see c2c.hpp). The median of many round
// trips is used, not the mean: on a shared or virtualised machine a few round trips
// include a preemption or a VM exit and would dominate a mean.
// Thread safety: each call uses its own line and threads.
#include "machine/c2c.hpp"

#include <fmt/core.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "crossmod/machine.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::harness {
namespace {

// The line being transferred, alone in its 128 bytes (adjacent-line prefetch pairs lines).
struct alignas(128) PingLine {
  std::atomic<std::uint64_t> seq{0};
  char pad[128 - sizeof(std::atomic<std::uint64_t>)];
};
struct alignas(128) Flags {
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::atomic<bool> bind_failed{false};
};

constexpr std::uint64_t kTimeoutTicks = 3'000'000'000ull;  // ~1 s at 3 GHz
// On a loaded machine every round trip can cost a scheduler slice; stop after this much
// time with the samples taken so far (at least kMinSamples).
constexpr std::uint64_t kBudgetTicks = 6'000'000'000ull;   // ~2 s
constexpr std::size_t kMinSamples = 100;
constexpr unsigned kWarmup = 1000;

}  // namespace

namespace {
C2cLatency measure_once(const Topology& topo, int pu_a, int pu_b, unsigned round_trips);
}  // namespace

// A partner that does not answer for a whole second has been seen here on a loaded
// shared VM (the vCPU itself descheduled, observed, not explained); one such stall should
// not cost the measurement, so a timed-out attempt is retried twice.
C2cLatency measure_c2c(const Topology& topo, int pu_a, int pu_b, unsigned round_trips) {
  C2cLatency r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = measure_once(topo, pu_a, pu_b, round_trips);
    if (r.ok || r.error.find("did not answer") == std::string::npos) break;
  }
  return r;
}

namespace {
C2cLatency measure_once(const Topology& topo, int pu_a, int pu_b, unsigned round_trips) {
  C2cLatency r;
  r.pu_a = pu_a;
  r.pu_b = pu_b;
  if (pu_a == pu_b) {
    r.error = fmt::format("both ends on PU {}: no line transfer to measure", pu_a);
    return r;
  }
  if (round_trips == 0) round_trips = 1;
  auto line = std::make_unique<PingLine>();
  auto flags = std::make_unique<Flags>();
  std::vector<std::uint64_t> samples;
  samples.reserve(round_trips);
  bool timed_out = false;

  // Responder: turns every odd value into the next even one.
  std::thread responder([&] {
    if (!topo.bind_current_thread(pu_b)) flags->bind_failed = true;
    flags->ready.fetch_add(1);
    std::uint64_t expect = 1;
    while (!flags->stop.load(std::memory_order_relaxed)) {
      if (line->seq.load(std::memory_order_acquire) == expect) {
        line->seq.store(expect + 1, std::memory_order_release);
        expect += 2;
      } else {
        x86::pause();
      }
    }
  });
  std::thread initiator([&] {
    if (!topo.bind_current_thread(pu_a)) flags->bind_failed = true;
    flags->ready.fetch_add(1);
    while (flags->ready.load() < 2) x86::pause();
    std::uint64_t v = 1;
    const std::uint64_t start = x86::rdtsc();
    for (unsigned i = 0; i < kWarmup + round_trips && !timed_out; ++i, v += 2) {
      if (samples.size() >= kMinSamples && x86::rdtsc() - start > kBudgetTicks) break;
      const std::uint64_t t0 = x86::rdtsc();
      line->seq.store(v, std::memory_order_release);
      while (line->seq.load(std::memory_order_acquire) != v + 1) {
        if (x86::rdtsc() - t0 > kTimeoutTicks) {
          timed_out = true;
          break;
        }
      }
      const std::uint64_t t = x86::rdtsc() - t0;
      if (i >= kWarmup && !timed_out) samples.push_back(t);
    }
    flags->stop.store(true);
  });
  initiator.join();
  responder.join();

  if (flags->bind_failed) {
    r.error = fmt::format("could not bind to PU {} or PU {}", pu_a, pu_b);
    return r;
  }
  if (timed_out || samples.empty()) {
    r.error = "the partner thread did not answer within ~1 s (PU busy or descheduled)";
    return r;
  }
  std::sort(samples.begin(), samples.end());
  auto pct = [&](double p) {
    return static_cast<double>(samples[static_cast<std::size_t>(p * static_cast<double>(samples.size() - 1))]);
  };
  r.ok = true;
  r.round_trips = samples.size();
  r.round_trip_ticks = pct(0.5);
  r.one_way_ticks = r.round_trip_ticks / 2;
  r.one_way_ticks_p10 = pct(0.1) / 2;
  r.one_way_ticks_p90 = pct(0.9) / 2;
  const double hz = tsc_info().hz;
  r.one_way_ns = hz > 0 ? r.one_way_ticks * 1e9 / hz : 0;
  return r;
}
}  // namespace

C2cResult measure_c2c_for(const Topology& topo, Placement placement, unsigned executors) {
  Assignment a;
  try {
    a = topo.assign(placement, executors);
  } catch (const std::invalid_argument& e) {
    return {0, fmt::format("core-to-core latency not measured: {}", e.what())};
  }
  if (a.executor_pus.empty() || a.executor_pus.front() == a.patcher_pu) {
    return {0, "core-to-core latency not measured: patcher and executor share a PU"};
  }
  const C2cLatency c = measure_c2c(topo, a.patcher_pu, a.executor_pus.front());
  if (!c.ok) return {0, fmt::format("core-to-core latency not measured: {}", c.error)};
  return {static_cast<std::uint64_t>(std::ceil(c.one_way_ticks)),
          fmt::format("PU {} <-> PU {}: median of {} round trips / 2 (p10 {:.0f}, p90 {:.0f} ticks)", c.pu_a,
                      c.pu_b, c.round_trips, c.one_way_ticks_p10, c.one_way_ticks_p90)};
}

}  // namespace crossmod::harness
