// Probe-test helpers (see test_support.hpp). Not instrumented.
#include "test_support.hpp"

#include <cstring>
#include <vector>

#include "crossmod/x86.hpp"
#include "workload.hpp"

namespace workload {
std::uint64_t& fired() noexcept {
  thread_local std::uint64_t f = 0;
  return f;
}
}  // namespace workload

namespace probetest {
namespace {
std::atomic<std::uint64_t> g_hits[crossmod::probes::kMaxProbes];
std::atomic<std::uint64_t> g_hits_b[crossmod::probes::kMaxProbes];
std::atomic<std::uint64_t> g_tsc[crossmod::probes::kMaxProbes];
}  // namespace

void count_a(crossmod::probes::ProbeId id, std::uint64_t tsc) {
  ++workload::fired();
  g_hits[id].fetch_add(1, std::memory_order_relaxed);
  g_tsc[id].store(tsc, std::memory_order_relaxed);
}
void count_b(crossmod::probes::ProbeId id, std::uint64_t tsc) {
  g_hits_b[id].fetch_add(1, std::memory_order_relaxed);
  count_a(id, tsc);
}
std::uint64_t hits(crossmod::probes::ProbeId id) { return g_hits[id].load(); }
std::uint64_t hits_b(crossmod::probes::ProbeId id) { return g_hits_b[id].load(); }
std::uint64_t last_tsc(crossmod::probes::ProbeId id) { return g_tsc[id].load(); }
void reset_hits() {
  for (auto& h : g_hits) h.store(0);
  for (auto& h : g_hits_b) h.store(0);
}

bool make_manual_site(unsigned split, ManualSite* out) {
  // Kept for the process (see the header), reachable so LeakSanitizer does not flag it.
  static std::vector<crossmod::CodeBlock*>* blocks = new std::vector<crossmod::CodeBlock*>();
  out->block = new crossmod::CodeBlock();
  blocks->push_back(out->block);
  if (crossmod::CodeBlock::allocate(4096, nullptr, out->block) != crossmod::Status::ok) return false;
  std::uint8_t* p = out->block->data();
  std::memset(p, crossmod::x86::kInt3, out->block->size());
  const unsigned line = crossmod::x86::cache_line_size();
  // The entry sits `split` bytes before a line boundary (0: at a line start).
  std::uint8_t* entry = split == 0 ? p + line : p + 2 * line - split;
  constexpr std::uint8_t kNop1 = 0x90;  // GCC's sled byte
  std::memset(entry, kNop1, 5);
  entry[5] = crossmod::x86::kRet;
  out->site = entry;
  out->fn = reinterpret_cast<void (*)()>(entry);
  return true;
}

}  // namespace probetest
