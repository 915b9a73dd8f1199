// What libcrossmod_probes.so does on its own when preloaded into a program that knows
// nothing about it: scan for patchable-entry sites before main, and, if asked through the
// environment, count every probe's calls and print a table to stderr at exit.
//   CROSSMOD_PROBES_REPORT=1      count calls of every discovered probe
//   CROSSMOD_PROBES_OFF=PATTERN   switch probes whose function matches fnmatch(3) PATTERN
//                                 off at discovery (cyg probes start on)
//   CROSSMOD_PROBES_ON=PATTERN    switch patchable-entry probes matching PATTERN on
//   CROSSMOD_PROBES_TRACE=PATTERN[:PATTERN...]  tracepoint provider: attach_tracepoints on
//                                 the functions matching any PATTERN and count their calls
//   CROSSMOD_PROBES_TRACE_OBJECT=PATTERN  only in objects whose path matches
//   CROSSMOD_PROBES_TRACE_EXIT=1  also their exit probes (calls and mean ticks per call)
//   CROSSMOD_PROBES_TRACE_JUMP_ONLY=1  no trap-mode fallback (those functions are refused)
//   CROSSMOD_PROBES_TRACE_REFUSED=FILE  the refused functions and why (tracepoint_refusals)
//   CROSSMOD_PROBES_OUT=FILE      the report goes to FILE instead of stderr
// With CROSSMOD_PROBES_TRACE, objects loaded later by dlopen get the same tracepoints, on
// (this library's dlopen: the real one, then attach_tracepoints_in_new_objects).
// Thread safety: the counting probe is one relaxed atomic add (no lock, no allocation).
#include <dlfcn.h>
#include <fnmatch.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::probes {
namespace {

std::atomic<std::uint64_t> g_hits[kMaxProbes];
std::atomic<bool> g_claimed[kMaxProbes];  // tracepoint probes already switched on by us
std::atomic<std::uint64_t> g_ticks[kMaxProbes];  // exit probes: sum of durations
const char* g_off = nullptr;
const char* g_on = nullptr;
std::atomic<bool> g_tracing{false};
// CROSSMOD_PROBES_TRACE's patterns, object pattern and exit flag, for objects loaded later.
std::vector<std::string>* g_patterns = nullptr;
const char* g_trace_object = nullptr;
bool g_trace_exits = false;
std::uint64_t g_tsc0 = 0;  // TSC and CLOCK_MONOTONIC at start: the TSC rate over the run
double g_ns0 = 0;

double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}
std::atomic<std::size_t> g_trace_refused{0};  // functions refused, at start-up and later

void count_hit(ProbeId id, std::uint64_t) { g_hits[id].fetch_add(1, std::memory_order_relaxed); }
void count_exit(ProbeId id, std::uint64_t tsc) {
  g_hits[id].fetch_add(1, std::memory_order_relaxed);
  if (tsc != 0) g_ticks[id].fetch_add(x86::rdtsc() - tsc, std::memory_order_relaxed);
}

void on_found(const ProbeInfo& info, void*) {
  if (g_off != nullptr && fnmatch(g_off, info.name, 0) == 0) {
    (void)deactivate(info.id);
    return;
  }
  if (info.active || (g_on != nullptr && fnmatch(g_on, info.name, 0) == 0))
    (void)activate(info.id, count_hit);
}

FILE* report_file() {
  const char* path = std::getenv("CROSSMOD_PROBES_OUT");
  if (path != nullptr && *path != '\0')
    if (FILE* f = std::fopen(path, "we")) return f;
  return stderr;
}

// Tracepoint probes: "calls mode function object" like crossmod-trace (non-zero entries,
// most called first), plus exit calls and mean ticks when exit probes were on.
void report_tracepoints(FILE* out) {
  struct Row {
    ProbeInfo entry;
    std::uint64_t calls = 0, exits = 0, ticks = 0;
    bool trap = false;
  };
  std::vector<Row> rows;
  std::vector<std::size_t> row_of(count(), SIZE_MAX);
  std::size_t traced = 0, trap = 0;
  for (ProbeId id = 0; id < count(); ++id) {
    ProbeInfo pi;
    if (info(id, &pi) != Status::ok || pi.provider != Provider::tracepoint) continue;
    if (pi.kind == Kind::entry) {
      ++traced;
      Row r;
      r.entry = pi;
      r.calls = g_hits[id].load(std::memory_order_relaxed);
      r.trap = tracepoint_trap_mode(id);
      trap += r.trap;
      row_of[id] = rows.size();
      rows.push_back(r);
    }
  }
  for (ProbeId id = 0; id < count(); ++id) {
    ProbeInfo pi;
    if (info(id, &pi) != Status::ok || pi.provider != Provider::tracepoint || pi.kind != Kind::exit)
      continue;
    for (ProbeId e = id; e-- > 0;) {  // its entry probe was registered just before it
      if (row_of[e] != SIZE_MAX && rows[row_of[e]].entry.function == pi.function) {
        rows[row_of[e]].exits = g_hits[id].load(std::memory_order_relaxed);
        rows[row_of[e]].ticks = g_ticks[id].load(std::memory_order_relaxed);
        break;
      }
    }
  }
  std::uint64_t total = 0;
  for (const Row& r : rows) total += r.calls;
  std::fprintf(out,
               "# crossmod probes: tracepoints on %zu functions (%zu jump, %zu trap-mode), %zu "
               "refused, %llu calls\n",
               traced, traced - trap, trap, g_trace_refused.load(), static_cast<unsigned long long>(total));
  const double ns = now_ns() - g_ns0;
  const double ticks_per_ns = ns > 0 ? static_cast<double>(x86::rdtsc() - g_tsc0) / ns : 0;
  std::fprintf(out, "# TSC %.3f ticks/ns (measured over the run); mean_ns = mean_ticks / that\n",
               ticks_per_ns);
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.calls != b.calls ? a.calls > b.calls : std::string(a.entry.name) < b.entry.name;
  });
  std::fprintf(out, "%12s  %-4s  %s  %s  %s\n", "calls", "mode", "function", "object",
               "[exits mean_ticks mean_ns]");
  for (const Row& r : rows) {
    if (r.calls == 0 && r.exits == 0) continue;
    std::fprintf(out, "%12llu  %-4s  %s  %s", static_cast<unsigned long long>(r.calls),
                 r.trap ? "trap" : "jump", r.entry.name, r.entry.object);
    if (r.exits != 0) {
      const double mean = static_cast<double>(r.ticks) / static_cast<double>(r.exits);
      std::fprintf(out, "  %llu %.1f %.1f", static_cast<unsigned long long>(r.exits), mean,
                   ticks_per_ns > 0 ? mean / ticks_per_ns : 0.0);
    }
    std::fputc('\n', out);
  }
}

void report() {
  FILE* out = report_file();
  const std::size_t n = count();
  std::fprintf(out, "crossmod probes: %zu probes\n", n);
  for (ProbeId id = 0; id < n; ++id) {
    ProbeInfo pi;
    if (info(id, &pi) != Status::ok) continue;
    if (pi.provider == Provider::tracepoint) continue;  // their own table below
    std::fprintf(out, "  %5u %-5s %-9s split %u %-3s %10llu  %s\n", id,
                 pi.kind == Kind::entry ? "entry" : "exit",
                 pi.provider == Provider::cyg ? "cyg" : pi.provider == Provider::patchable ? "patchable" : "manual",
                 pi.split, pi.active ? "on" : "off",
                 static_cast<unsigned long long>(g_hits[id].load(std::memory_order_relaxed)), pi.name);
  }
  if (g_tracing) report_tracepoints(out);
  if (out != stderr) std::fclose(out);
  const char* rpath = std::getenv("CROSSMOD_PROBES_TRACE_REFUSED");
  if (g_tracing && rpath != nullptr && *rpath != '\0') {
    if (FILE* r = std::fopen(rpath, "we")) {
      std::vector<TracepointRefusal> v(tracepoint_refusals(nullptr, 0));
      v.resize(tracepoint_refusals(v.data(), v.size()));
      for (const TracepointRefusal& x : v)
        std::fprintf(r, "%s  %s  %s\n", x.reason, x.name, x.object);
      std::fclose(r);
    }
  }
}

// Switches on the tracepoint probes nobody switched on yet (entries counting, exits timing
// when asked), in one batch per kind (their installs share two waits). Each id is claimed
// once, so concurrent dlopens never switch a probe on twice; ids below g_scanned were all
// claimed, so a dlopen looks at the new ones only.
std::atomic<std::size_t> g_scanned{0};
void activate_unclaimed_tracepoints() {
  std::vector<ProbeId> entries, exit_ids;
  std::size_t from = g_scanned.load(std::memory_order_acquire);
  const std::size_t to = count();
  for (ProbeId id = static_cast<ProbeId>(from); id < to; ++id) {
    ProbeInfo pi;
    if (info(id, &pi) != Status::ok || pi.provider != Provider::tracepoint) continue;
    if (g_claimed[id].exchange(true, std::memory_order_relaxed)) continue;
    (pi.kind == Kind::entry ? entries : exit_ids).push_back(id);
  }
  g_scanned.compare_exchange_strong(from, to, std::memory_order_acq_rel);  // lost: another scan moved it
  Status s = activate_many(entries.data(), entries.size(), count_hit);
  if (s == Status::ok && g_trace_exits) s = activate_many(exit_ids.data(), exit_ids.size(), count_exit);
  if (s != Status::ok) std::fprintf(stderr, "crossmod probes: activating tracepoints: %s\n", to_string(s));
}

// CROSSMOD_PROBES_TRACE: attach per ':'-separated pattern, then switch the new tracepoint
// probes on; objects loaded later get the same (the dlopen below).
void attach_from_env(const char* patterns) {
  const char* object = std::getenv("CROSSMOD_PROBES_TRACE_OBJECT");
  if (object != nullptr && *object == '\0') object = nullptr;
  const char* with_exit = std::getenv("CROSSMOD_PROBES_TRACE_EXIT");
  g_trace_exits = with_exit != nullptr && *with_exit != '\0' && *with_exit != '0';
  const char* jump_only = std::getenv("CROSSMOD_PROBES_TRACE_JUMP_ONLY");
  if (jump_only != nullptr && *jump_only != '\0' && *jump_only != '0')
    set_tracepoint_trap_fallback(false);
  g_trace_object = object;
  g_patterns = new std::vector<std::string>();
  const std::string all = patterns;
  std::size_t pos = 0;
  while (pos <= all.size()) {
    const std::size_t end = std::min(all.find(':', pos), all.size());
    const std::string p = all.substr(pos, end - pos);
    std::size_t refused = 0;
    if (!p.empty()) {
      g_patterns->push_back(p);
      const Status s = attach_tracepoints(p.c_str(), object, nullptr, &refused);
      if (s != Status::ok)
        std::fprintf(stderr, "crossmod probes: attach_tracepoints(%s): %s\n", p.c_str(), to_string(s));
      g_trace_refused += refused;
    }
    pos = end + 1;
  }
  activate_unclaimed_tracepoints();
  mark_objects_seen();
  g_tracing = true;
}

__attribute__((constructor(101))) void preload_init() {
  g_tsc0 = x86::rdtsc();
  g_ns0 = now_ns();
  const char* rep = std::getenv("CROSSMOD_PROBES_REPORT");
  g_off = std::getenv("CROSSMOD_PROBES_OFF");
  g_on = std::getenv("CROSSMOD_PROBES_ON");
  const char* trace = std::getenv("CROSSMOD_PROBES_TRACE");
  const bool tracing = trace != nullptr && trace[0] != '\0';
  const bool reporting = (rep != nullptr && rep[0] != '\0' && rep[0] != '0') || tracing;
  if (reporting || g_off != nullptr || g_on != nullptr) (void)on_discovery(on_found, nullptr);
  if (reporting) std::atexit(report);
  (void)scan_loaded_objects();
  if (tracing) attach_from_env(trace);
}

// After a dlopen that succeeded, with CROSSMOD_PROBES_TRACE: the patterns' tracepoints in
// the objects it added, switched on. (Not for the layer's own pinning dlopen, which comes
// here too: attach_tracepoints_in_new_objects returns at once on that thread.)
void trace_objects_loaded_later() noexcept {
  if (!g_tracing.load(std::memory_order_acquire) || g_patterns == nullptr) return;
  try {
    std::vector<const char*> p;
    for (const std::string& s : *g_patterns) p.push_back(s.c_str());
    std::size_t objects = 0, refused = 0;
    const Status s = attach_tracepoints_in_new_objects(p.data(), p.size(), g_trace_object, &objects, nullptr, &refused);
    if (s != Status::ok) std::fprintf(stderr, "crossmod probes: attaching in objects loaded later: %s\n", to_string(s));
    if (objects == 0) return;
    g_trace_refused.fetch_add(refused, std::memory_order_relaxed);
    activate_unclaimed_tracepoints();
  } catch (...) {
  }
}

}  // namespace
}  // namespace crossmod::probes

// The program's dlopen when this library is preloaded (its definition comes before libc's;
// a program that links the library gets it too, as a plain forwarder): the real one, then
// with CROSSMOD_PROBES_TRACE the new objects' tracepoints. After a failure nothing else
// runs, so dlerror says why.
extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using Fn = void* (*)(const char*, int);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dlopen"));
  if (real == nullptr) return nullptr;
  void* h = real(file, mode);
  if (h != nullptr) crossmod::probes::trace_objects_loaded_later();
  return h;
}
