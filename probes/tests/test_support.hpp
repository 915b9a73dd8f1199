// Shared pieces of the probe tests: the probe functions that count, code blocks holding
// manual sites at a chosen cache-line split, and a wait small enough for unit tests.
#pragma once
#include <atomic>
#include <cstdint>

#include "crossmod/code_memory.hpp"
#include "crossmod/probes.hpp"

namespace probetest {

inline constexpr std::uint64_t kTestWaitTicks = 3000;  // the paper's production wait

// Probe functions: bump the thread's workload::fired() and a global per-probe count.
void count_a(crossmod::probes::ProbeId id, std::uint64_t tsc);
void count_b(crossmod::probes::ProbeId id, std::uint64_t tsc);
std::uint64_t hits(crossmod::probes::ProbeId id);  // count_a + count_b calls
std::uint64_t hits_b(crossmod::probes::ProbeId id);
void reset_hits();
std::uint64_t last_tsc(crossmod::probes::ProbeId id);

// A function in an engine code block: `<5-byte NOP sled at split S>; ret`. The block is
// never freed: probes live for the process, so a site address must never be reused.
struct ManualSite {
  crossmod::CodeBlock* block = nullptr;
  std::uint8_t* site = nullptr;
  void (*fn)() = nullptr;
};
bool make_manual_site(unsigned split, ManualSite* out);

}  // namespace probetest
