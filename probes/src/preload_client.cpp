// What libcrossmod_probes.so does on its own when preloaded into a program that knows
// nothing about it: scan for patchable-entry sites before main, and, if asked through the
// environment, count every probe's calls and print a table to stderr at exit.
//   CROSSMOD_PROBES_REPORT=1      count calls of every discovered probe
//   CROSSMOD_PROBES_OFF=PATTERN   switch probes whose function matches fnmatch(3) PATTERN
//                                 off at discovery (cyg probes start on)
//   CROSSMOD_PROBES_ON=PATTERN    switch patchable-entry probes matching PATTERN on
// Thread safety: the counting probe is one relaxed atomic add (no lock, no allocation).
#include <fnmatch.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "crossmod/probes.hpp"

namespace crossmod::probes {
namespace {

std::atomic<std::uint64_t> g_hits[kMaxProbes];
const char* g_off = nullptr;
const char* g_on = nullptr;

void count_hit(ProbeId id, std::uint64_t) { g_hits[id].fetch_add(1, std::memory_order_relaxed); }

void on_found(const ProbeInfo& info, void*) {
  if (g_off != nullptr && fnmatch(g_off, info.name, 0) == 0) {
    (void)deactivate(info.id);
    return;
  }
  if (info.active || (g_on != nullptr && fnmatch(g_on, info.name, 0) == 0))
    (void)activate(info.id, count_hit);
}

void report() {
  const std::size_t n = count();
  std::fprintf(stderr, "crossmod probes: %zu probes\n", n);
  for (ProbeId id = 0; id < n; ++id) {
    ProbeInfo pi;
    if (info(id, &pi) != Status::ok) continue;
    std::fprintf(stderr, "  %5u %-5s %-9s split %u %-3s %10llu  %s\n", id,
                 pi.kind == Kind::entry ? "entry" : "exit",
                 pi.provider == Provider::cyg ? "cyg" : pi.provider == Provider::patchable ? "patchable" : "manual",
                 pi.split, pi.active ? "on" : "off",
                 static_cast<unsigned long long>(g_hits[id].load(std::memory_order_relaxed)), pi.name);
  }
}

__attribute__((constructor(101))) void preload_init() {
  const char* rep = std::getenv("CROSSMOD_PROBES_REPORT");
  g_off = std::getenv("CROSSMOD_PROBES_OFF");
  g_on = std::getenv("CROSSMOD_PROBES_ON");
  const bool reporting = rep != nullptr && rep[0] != '\0' && rep[0] != '0';
  if (reporting || g_off != nullptr || g_on != nullptr) (void)on_discovery(on_found, nullptr);
  if (reporting) std::atexit(report);
  (void)scan_loaded_objects();
}

}  // namespace
}  // namespace crossmod::probes
