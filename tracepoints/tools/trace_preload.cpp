// libcrossmod_trace.so: loaded with LD_PRELOAD by `crossmod-trace`. Its constructor puts an
// entry tracepoint on every function of every loaded object whose name matches
// CROSSMOD_TRACE_FUNCTIONS (fnmatch pattern, ':'-separated alternatives); each probe
// increments its function's counter. At exit it prints "calls function object" to
// CROSSMOD_TRACE_OUT (or stderr), never to the program's stdout, and the refused functions
// with their status to CROSSMOD_TRACE_REFUSED if set. A function whose jump has no place
// at its entry gets it after its leading pushes where that works; functions the jump
// cannot replace get a trap-mode tracepoint (int3 on byte 0) unless
// CROSSMOD_TRACE_JUMP_ONLY is set.
// Objects loaded later by dlopen get their tracepoints after the real dlopen returns (this
// library's dlopen), pinned first so that a dlclose cannot unmap traced code.
// Thread safety: setup runs in the constructor, before main and normally before any thread
// exists; a dlopen's attach may run on any thread (the list of attaches and of objects read
// is under a mutex, not held while the real dlopen or a pin runs); the probe is one relaxed
// atomic increment (no allocation, no lock, async-signal-safe); the report runs in a
// destructor.
#include <dlfcn.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
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

// One attach: the functions traced in the objects it read (start-up: all; later: those a
// dlopen added), their counters (the probes' user pointers) and tracepoints.
struct Batch {
  std::vector<ElfFunction> all;  // the matching functions read (refused ones point here)
  std::vector<ElfFunction> fns;  // traced, index = counter index
  std::unique_ptr<std::atomic<std::uint64_t>[]> counts;
  std::vector<Tracepoint> tps;
  std::vector<std::pair<const ElfFunction*, Status>> refused;
  bool late = false;  // objects a dlopen added
  bool active = false;
};

struct Traced {
  std::string patterns;
  std::string self;
  bool trap_fallback = true;
  std::mutex mu;                  // batches and seen
  std::vector<Batch*> batches;    // leaked on purpose, like the tracepoints
  std::vector<std::string> seen;  // objects read (or being read) by an attach
};

Traced* g_traced = nullptr;  // leaked on purpose: probes may fire after static destructors
thread_local bool t_in_dlopen = false;

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

// Traces the matching functions of the objects `want` accepts (which also claims them in
// t->seen), as one batch: prepare, make their text writable for the install only, install
// (no wait while the process has one thread, else membarrier SYNC_CORE).
void trace_objects(Traced* t, const crossmod::tp::ObjectFilter& want, bool late) {
  auto* b = new Batch;
  b->late = late;
  const crossmod::tp::FunctionFilter keep = [t](std::string_view name, const std::string& object) {
    return object != t->self && matches(t->patterns, std::string(name));
  };
  crossmod::tp::enumerate_functions(&b->all, nullptr, want, keep);
  if (b->all.empty()) {
    delete b;
    return;
  }
  b->counts.reset(new std::atomic<std::uint64_t>[b->all.size()]);
  b->tps.reserve(b->all.size());
  b->fns.reserve(b->all.size());
  for (const ElfFunction& f : b->all) {
    Tracepoint tp;
    const std::size_t idx = b->fns.size();
    b->counts[idx].store(0, std::memory_order_relaxed);
    auto* fn = reinterpret_cast<void*>(f.addr);
    Status s = Tracepoint::prepare(fn, f.size, count, &b->counts[idx], &tp, nullptr, false);
    // No place for the jump at the entry: after the leading pushes (other boundaries), which
    // counts the same calls, before trap mode.
    const unsigned pushes = s == Status::no_trampoline_space ? Tracepoint::leading_pushes(fn, f.size) : 0;
    for (unsigned k = 1; k <= pushes && s != Status::ok; ++k)
      if (Tracepoint::prepare_after_pushes(fn, f.size, k, count, &b->counts[idx], &tp) == Status::ok) s = Status::ok;
    if (s != Status::ok && t->trap_fallback &&
        (s == Status::no_trampoline_space || s == Status::too_short || s == Status::branch_into_range))
      s = Tracepoint::prepare(fn, f.size, count, &b->counts[idx], &tp, nullptr, true);
    if (s != Status::ok) {
      b->refused.emplace_back(&f, s);
      continue;
    }
    b->fns.push_back(f);
    b->tps.push_back(std::move(tp));
  }
  {
    std::lock_guard<std::mutex> lock(t->mu);
    t->batches.push_back(b);
  }
  if (b->tps.empty()) return;

  // Make the text of the objects involved writable for the install only.
  std::map<std::string, std::pair<std::uintptr_t, std::uintptr_t>> spans;
  for (const ElfFunction& f : b->fns) {
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
      std::fprintf(stderr, "crossmod-trace: cannot make %s writable; nothing traced there\n",
                   obj.c_str());
      return;
    }
  }
  // With one thread no other core can be executing this code, so no wait is needed (before
  // main there is normally one). Otherwise the kernel-endorsed membarrier SYNC_CORE.
  const crossmod::WaitPolicy w =
      single_threaded() ? crossmod::WaitPolicy::None() : crossmod::WaitPolicy::SyncCore();
  const Status s = Tracepoint::install_all(b->tps, w);
  for (auto& r : ranges) (void)r.restore();
  if (s != Status::ok) {
    std::fprintf(stderr, "crossmod-trace: install failed: %s\n", crossmod::tp::to_string(s));
    return;
  }
  std::lock_guard<std::mutex> lock(t->mu);  // the report reads it under the same mutex
  b->active = true;
}

// Claims `object` for one attach: false when an attach has read it already.
bool claim(Traced* t, const std::string& object) {
  std::lock_guard<std::mutex> lock(t->mu);
  if (std::find(t->seen.begin(), t->seen.end(), object) != t->seen.end()) return false;
  t->seen.push_back(object);
  return true;
}

__attribute__((constructor)) void trace_setup() {
  const char* pat = std::getenv("CROSSMOD_TRACE_FUNCTIONS");
  if (pat == nullptr || *pat == '\0') return;
  auto* t = new Traced;
  t->patterns = pat;
  const char* jump_only = std::getenv("CROSSMOD_TRACE_JUMP_ONLY");
  t->trap_fallback = jump_only == nullptr || *jump_only == '\0';
  t->self = own_path();
  // Children (fork+exec) are not traced: their tables would overwrite ours in --out.
  if (const char* pre = std::getenv("LD_PRELOAD"); pre != nullptr) {
    std::string rest, item;
    const std::string all = pre;
    std::size_t pos = 0;
    while (pos <= all.size()) {
      const std::size_t end = std::min(all.find_first_of(": ", pos), all.size());
      item = all.substr(pos, end - pos);
      if (!item.empty() && item != t->self) rest += (rest.empty() ? "" : ":") + item;
      pos = end + 1;
    }
    if (rest.empty())
      unsetenv("LD_PRELOAD");
    else
      setenv("LD_PRELOAD", rest.c_str(), 1);
  }
  trace_objects(t, [t](const std::string& object) { return claim(t, object); }, false);
  g_traced = t;
}

}  // namespace

// The program's dlopen (this library is preloaded, so its definition comes first): the
// real one, then the objects it added get their tracepoints, installed while the program
// runs. They are pinned first (RTLD_NODELETE), so a dlclose cannot unmap traced code.
// After a failure nothing else runs, so dlerror says why.
extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) {
  using Fn = void* (*)(const char*, int);
  static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dlopen"));
  if (real == nullptr) return nullptr;
  void* h = real(file, mode);
  Traced* t = g_traced;
  if (h == nullptr || t == nullptr || t_in_dlopen) return h;
  t_in_dlopen = true;  // the pins' own dlopen comes here too
  const int saved = errno;
  try {
    trace_objects(t, [t](const std::string& object) {
      if (!claim(t, object)) return false;
      if (real(object.c_str(), RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE) != nullptr) return true;
      (void)dlerror();  // the program's next dlerror() must not report our failed pin
      return false;
    }, true);
  } catch (...) {
  }
  errno = saved;
  t_in_dlopen = false;
  return h;
}

namespace {

__attribute__((destructor)) void trace_report() {
  Traced* t = g_traced;
  if (t == nullptr) return;
  FILE* out = stderr;
  const char* path = std::getenv("CROSSMOD_TRACE_OUT");
  if (path != nullptr && *path != '\0') {
    out = std::fopen(path, "we");
    if (out == nullptr) out = stderr;
  }
  struct Row {
    std::uint64_t calls;
    const Tracepoint* tp;
    const ElfFunction* fn;
  };
  std::vector<Row> rows;
  std::vector<std::pair<const ElfFunction*, Status>> refused;
  std::size_t late = 0, not_installed = 0;
  {
    std::lock_guard<std::mutex> lock(t->mu);
    for (const Batch* b : t->batches) {
      for (std::size_t i = 0; i < b->fns.size(); ++i) rows.push_back({b->counts[i].load(), &b->tps[i], &b->fns[i]});
      refused.insert(refused.end(), b->refused.begin(), b->refused.end());
      late += b->late ? b->fns.size() : 0;
      not_installed += !b->tps.empty() && !b->active;
    }
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.calls != b.calls ? a.calls > b.calls : a.fn->name < b.fn->name;
  });
  std::uint64_t total = 0;
  std::size_t traps = 0, prefixed = 0, pushed = 0;
  for (const Row& r : rows) {
    total += r.calls;
    traps += r.tp->trap_mode();
    prefixed += r.tp->jump_len() > 5;
    pushed += r.tp->address() != r.fn->addr;
  }
  std::string tail;
  if (late != 0) tail += " (" + std::to_string(late) + " in objects loaded later)";
  if (not_installed != 0) tail += " (NOT installed: " + std::to_string(not_installed) + " attaches)";
  std::fprintf(out,
               "# crossmod-trace: %zu functions traced (%zu jump of which %zu prefixed and %zu after "
               "pushes, %zu trap-mode), %zu refused, %llu calls%s\n",
               rows.size(), rows.size() - traps, prefixed, pushed, traps, refused.size(),
               static_cast<unsigned long long>(total), tail.c_str());
  const crossmod::tp::PoolStats ps = crossmod::tp::pool_stats();
  std::fprintf(out,
               "# trampolines: %zu (%zu with a direct body); entry pages %zu (%zu KiB) holding %zu "
               "bytes of entry slots and %zu of direct bodies; arena bodies %zu of %zu KiB mapped; "
               "%zu mmap attempts\n",
               ps.trampolines, ps.direct_bodies, ps.entry_pages, ps.entry_pages * 4, ps.entry_bytes_used,
               ps.direct_body_bytes, ps.body_bytes_used, ps.body_bytes_mapped / 1024, ps.mmap_attempts);
  std::fprintf(out, "%12s  %-4s  %s  %s\n", "calls", "mode", "function", "object");
  for (const Row& r : rows)
    if (r.calls != 0)
      std::fprintf(out, "%12llu  %-4s  %s  %s\n", static_cast<unsigned long long>(r.calls),
                   r.tp->trap_mode() ? "trap" : "jump", r.fn->name.c_str(), r.fn->object.c_str());
  if (out != stderr) std::fclose(out);

  const char* rpath = std::getenv("CROSSMOD_TRACE_REFUSED");
  if (rpath != nullptr && *rpath != '\0') {
    if (FILE* r = std::fopen(rpath, "we")) {
      std::map<std::string, std::size_t> by_status;
      for (const auto& [f, s] : refused) ++by_status[crossmod::tp::to_string(s)];
      for (const auto& [s, n] : by_status) std::fprintf(r, "# %s: %zu\n", s.c_str(), n);
      for (const auto& [f, s] : refused)
        std::fprintf(r, "%s  %s  %s\n", crossmod::tp::to_string(s), f->name.c_str(), f->object.c_str());
      std::fclose(r);
    }
  }
}

}  // namespace
