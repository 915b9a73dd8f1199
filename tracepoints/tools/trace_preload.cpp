// libcrossmod_trace.so: loaded with LD_PRELOAD by `crossmod-trace`. Its constructor puts an
// entry tracepoint on every function of every loaded object whose name matches
// CROSSMOD_TRACE_FUNCTIONS (fnmatch pattern, ':'-separated alternatives); each probe
// increments its function's counter. At exit it prints "calls function object" to
// CROSSMOD_TRACE_OUT (or stderr), never to the program's stdout, and the refused functions
// with their status to CROSSMOD_TRACE_REFUSED if set. A function whose jump has no place
// at its entry gets it after its leading pushes where that works; functions the jump
// cannot replace get a trap-mode tracepoint (int3 on byte 0) unless
// CROSSMOD_TRACE_JUMP_ONLY is set.
// Thread safety: setup runs in the constructor, before main and normally before any thread
// exists; the probe is one relaxed atomic increment (no allocation, no lock, async-signal-
// safe); the report runs in a destructor.
#include <dlfcn.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/elf_functions.hpp"
#include "crossmod/tracepoint.hpp"
#include "crossmod/wait.hpp"

namespace {

using crossmod::tp::ElfFunction;
using crossmod::tp::Status;
using crossmod::tp::Tracepoint;

struct Traced {
  std::vector<ElfFunction> fns;  // traced, index = counter index
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts;
  std::vector<Tracepoint> tps;
  std::vector<std::pair<const ElfFunction*, Status>> refused;
  std::vector<ElfFunction> all;
  bool active = false;
};

Traced* g_traced = nullptr;  // leaked on purpose: probes may fire after static destructors

void count(void* user) noexcept {
  static_cast<std::atomic<std::uint64_t>*>(user)->fetch_add(1, std::memory_order_relaxed);
}

bool matches(const std::string& patterns, const std::string& name) {
  std::size_t pos = 0;
  while (pos <= patterns.size()) {
    const std::size_t end = std::min(patterns.find(':', pos), patterns.size());
    const std::string p = patterns.substr(pos, end - pos);
    if (!p.empty() && fnmatch(p.c_str(), name.c_str(), 0) == 0) return true;
    pos = end + 1;
  }
  return false;
}

std::string own_path() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&count), &info) != 0 && info.dli_fname != nullptr)
    return info.dli_fname;
  return {};
}

bool single_threaded() {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return false;
  char line[256];
  bool one = false;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::strncmp(line, "Threads:", 8) == 0) one = std::atoi(line + 8) == 1;
  std::fclose(f);
  return one;
}

__attribute__((constructor)) void trace_setup() {
  const char* pat = std::getenv("CROSSMOD_TRACE_FUNCTIONS");
  if (pat == nullptr || *pat == '\0') return;
  auto* t = new Traced;
  g_traced = t;
  const std::string patterns = pat;
  const char* jump_only = std::getenv("CROSSMOD_TRACE_JUMP_ONLY");
  const bool trap_fallback = jump_only == nullptr || *jump_only == '\0';
  const std::string self = own_path();
  // Children (fork+exec) are not traced: their tables would overwrite ours in --out.
  if (const char* pre = std::getenv("LD_PRELOAD"); pre != nullptr) {
    std::string rest, item;
    const std::string all = pre;
    std::size_t pos = 0;
    while (pos <= all.size()) {
      const std::size_t end = std::min(all.find_first_of(": ", pos), all.size());
      item = all.substr(pos, end - pos);
      if (!item.empty() && item != self) rest += (rest.empty() ? "" : ":") + item;
      pos = end + 1;
    }
    if (rest.empty())
      unsetenv("LD_PRELOAD");
    else
      setenv("LD_PRELOAD", rest.c_str(), 1);
  }
  crossmod::tp::enumerate_functions(&t->all);
  std::vector<const ElfFunction*> wanted;
  for (const ElfFunction& f : t->all)
    if (f.object != self && matches(patterns, f.name)) wanted.push_back(&f);

  t->counts.reset(new std::atomic<std::uint64_t>[wanted.size()]);
  t->tps.reserve(wanted.size());
  t->fns.reserve(wanted.size());
  for (const ElfFunction* f : wanted) {
    Tracepoint tp;
    const std::size_t idx = t->fns.size();
    t->counts[idx].store(0, std::memory_order_relaxed);
    auto* fn = reinterpret_cast<void*>(f->addr);
    Status s = Tracepoint::prepare(fn, f->size, count, &t->counts[idx], &tp, nullptr, false);
    // No place for the jump at the entry: after the leading pushes (other boundaries), which
    // counts the same calls, before trap mode.
    const unsigned pushes = s == Status::no_trampoline_space ? Tracepoint::leading_pushes(fn, f->size) : 0;
    for (unsigned k = 1; k <= pushes && s != Status::ok; ++k)
      if (Tracepoint::prepare_after_pushes(fn, f->size, k, count, &t->counts[idx], &tp) == Status::ok) s = Status::ok;
    if (s != Status::ok && trap_fallback &&
        (s == Status::no_trampoline_space || s == Status::too_short || s == Status::branch_into_range))
      s = Tracepoint::prepare(fn, f->size, count, &t->counts[idx], &tp, nullptr, true);
    if (s != Status::ok) {
      t->refused.emplace_back(f, s);
      continue;
    }
    t->fns.push_back(*f);
    t->tps.push_back(std::move(tp));
  }
  if (t->tps.empty()) return;

  // Make the text of the objects involved writable for the install only.
  std::map<std::string, std::pair<std::uintptr_t, std::uintptr_t>> spans;
  for (const ElfFunction& f : t->fns) {
    auto [it, fresh] = spans.try_emplace(f.object, f.addr, f.addr + f.size);
    if (!fresh) {
      it->second.first = std::min(it->second.first, f.addr);
      it->second.second = std::max(it->second.second, f.addr + f.size);
    }
  }
  std::vector<crossmod::WritableRange> ranges(spans.size());
  std::size_t i = 0;
  for (const auto& [obj, span] : spans) {
    if (crossmod::WritableRange::make(reinterpret_cast<void*>(span.first), span.second - span.first,
                                      &ranges[i++]) != crossmod::Status::ok) {
      std::fprintf(stderr, "crossmod-trace: cannot make %s writable; nothing traced\n",
                   obj.c_str());
      return;
    }
  }
  // Before main there is normally one thread: no other core can be executing this code,
  // so no wait is needed. Otherwise the kernel-endorsed membarrier SYNC_CORE.
  const crossmod::WaitPolicy w =
      single_threaded() ? crossmod::WaitPolicy::None() : crossmod::WaitPolicy::SyncCore();
  const Status s = Tracepoint::install_all(t->tps, w);
  for (auto& r : ranges) (void)r.restore();
  if (s != Status::ok) {
    std::fprintf(stderr, "crossmod-trace: install failed: %s\n", crossmod::tp::to_string(s));
    return;
  }
  t->active = true;
}

__attribute__((destructor)) void trace_report() {
  Traced* t = g_traced;
  if (t == nullptr) return;
  FILE* out = stderr;
  const char* path = std::getenv("CROSSMOD_TRACE_OUT");
  if (path != nullptr && *path != '\0') {
    out = std::fopen(path, "we");
    if (out == nullptr) out = stderr;
  }
  std::vector<std::size_t> order(t->fns.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::vector<std::uint64_t> c(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) c[i] = t->counts[i].load();
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return c[a] != c[b] ? c[a] > c[b] : t->fns[a].name < t->fns[b].name;
  });
  std::uint64_t total = 0;
  for (std::uint64_t v : c) total += v;
  std::size_t traps = 0, prefixed = 0, pushed = 0;
  for (std::size_t i = 0; i < t->tps.size(); ++i) {
    const Tracepoint& tp = t->tps[i];
    traps += tp.trap_mode();
    prefixed += tp.jump_len() > 5;
    pushed += tp.address() != t->fns[i].addr;
  }
  std::fprintf(out,
               "# crossmod-trace: %zu functions traced (%zu jump of which %zu prefixed and %zu after "
               "pushes, %zu trap-mode), %zu refused, %llu calls%s\n",
               t->fns.size(), t->fns.size() - traps, prefixed, pushed, traps, t->refused.size(),
               static_cast<unsigned long long>(total), t->active ? "" : " (NOT installed)");
  const crossmod::tp::PoolStats ps = crossmod::tp::pool_stats();
  std::fprintf(out,
               "# trampolines: %zu (%zu with a direct body); entry pages %zu (%zu KiB) holding %zu "
               "bytes of entry slots and %zu of direct bodies; arena bodies %zu of %zu KiB mapped; "
               "%zu mmap attempts\n",
               ps.trampolines, ps.direct_bodies, ps.entry_pages, ps.entry_pages * 4, ps.entry_bytes_used,
               ps.direct_body_bytes, ps.body_bytes_used, ps.body_bytes_mapped / 1024, ps.mmap_attempts);
  std::fprintf(out, "%12s  %-4s  %s  %s\n", "calls", "mode", "function", "object");
  for (std::size_t i : order)
    if (c[i] != 0)
      std::fprintf(out, "%12llu  %-4s  %s  %s\n", static_cast<unsigned long long>(c[i]),
                   t->tps[i].trap_mode() ? "trap" : "jump", t->fns[i].name.c_str(),
                   t->fns[i].object.c_str());
  if (out != stderr) std::fclose(out);

  const char* rpath = std::getenv("CROSSMOD_TRACE_REFUSED");
  if (rpath != nullptr && *rpath != '\0') {
    if (FILE* r = std::fopen(rpath, "we")) {
      std::map<std::string, std::size_t> by_status;
      for (const auto& [f, s] : t->refused) ++by_status[crossmod::tp::to_string(s)];
      for (const auto& [s, n] : by_status) std::fprintf(r, "# %s: %zu\n", s.c_str(), n);
      for (const auto& [f, s] : t->refused)
        std::fprintf(r, "%s  %s  %s\n", crossmod::tp::to_string(s), f->name.c_str(),
                     f->object.c_str());
      std::fclose(r);
    }
  }
}

}  // namespace
