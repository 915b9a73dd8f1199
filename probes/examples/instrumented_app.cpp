// An ordinary multi-threaded program that knows nothing about crossmod. Built twice:
// with -finstrument-functions (cyg_app) and with -fpatchable-function-entry=5 (pfe_app).
// Run it under the probe library:
//   CROSSMOD_PROBES_REPORT=1 LD_PRELOAD=build/probes/libcrossmod_probes.so build/probes/examples/cyg_app
//   CROSSMOD_PROBES_REPORT=1 CROSSMOD_PROBES_ON='*work*' LD_PRELOAD=... build/probes/examples/pfe_app
// It prints how many calls of work() it made, so the report's counts can be checked.
// noipa: no clones, no inlining, so work() has exactly one entry site and 8000 entries.
#include <cstdio>
#include <thread>
#include <vector>

// GCC: noipa (no clones, no IPA); Clang has no noipa, noinline is what it needs.
#if defined(__clang__)
#define EXAMPLE_NOIPA __attribute__((noinline))
#else
#define EXAMPLE_NOIPA __attribute__((noipa))
#endif

namespace {
EXAMPLE_NOIPA unsigned long work(unsigned n) { return n * n + 1; }
EXAMPLE_NOIPA unsigned long quiet(unsigned n) { return n * 7u; }
}  // namespace

int main() {
  constexpr unsigned kThreads = 4, kCalls = 2000;
  std::vector<std::thread> threads;
  std::vector<unsigned long> out(kThreads);
  for (unsigned t = 0; t < kThreads; ++t)
    threads.emplace_back([&out, t] {
      unsigned long acc = quiet(t);
      for (unsigned i = 0; i < kCalls; ++i) acc += work(i);
      out[t] = acc;
    });
  for (auto& th : threads) th.join();
  unsigned long sum = 0;
  for (unsigned long v : out) sum += v;
  std::printf("work calls %u sum %lu\n", kThreads * kCalls, sum);
  return 0;
}
