// Tracepoint provider: probes on code nobody rebuilt (attach_tracepoints in probes.hpp).
// Each matching function of a loaded ELF object (tracepoints' enumerate_functions: .symtab,
// else .dynsym) gets a tp::Tracepoint at its first instruction, prepared here (nothing
// written into the code) with its trampoline's probe toggle OFF. The first activation of
// the entry or exit probe installs the jump (tp's int3 protocol, two waits); from then on
// every toggle is tp's one-store enable()/disable() of the trampoline.
//
// When the trampoline's probe fires, on_tracepoint() hands the function address (+5, as
// if a 5-byte call sat there) and the traced thread's stack pointer - the function's
// return-address slot - to the patchable provider's entry dispatcher, so entry probes,
// exit probes (return-address redirection, per-thread shadow stack, longjmp handling) and
// the entry TSC given to exit probes are exactly the patchable provider's.
//
// Thread safety: attach_tracepoints takes the registry mutex (it reads ELF files and
// allocates; never call it from a probe). tracepoint_set_code / tracepoint_install_batch
// run with the code owners' toggle locks held (registry.cpp). on_tracepoint is the
// invocation path: no allocation, no lock.
#include <cxxabi.h>
#include <dlfcn.h>
#include <fnmatch.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "crossmod/elf_functions.hpp"
#include "crossmod/tracepoint.hpp"
#include "crossmod/wait.hpp"
#include "crossmod/x86.hpp"
#include "objects.hpp"
#include "registry.hpp"

// registry.cpp: the patchable provider's entry dispatcher. `ret` - 5 names the site.
extern "C" __attribute__((visibility("hidden"))) void crossmod_probes_entry_dispatch(
    std::uintptr_t ret, std::uintptr_t* slot) noexcept;

namespace crossmod::probes {

using namespace detail;

namespace {

// A tracepoint placed after the function's first `pushes` pushes: its probe's user.
struct PushedSite {
  std::uintptr_t function;
  unsigned pushes;
};

struct TpState {
  std::deque<tp::Tracepoint> tps;  // stable addresses: probes point at them
  std::deque<PushedSite> pushed;   // stable addresses: tracepoints' user pointers
  std::vector<TracepointRefusal> refusals;
  std::vector<std::string> excluded;  // objects never traced besides this one (exclude_from_tracepoints)
};
// Guarded by the registry mutex; never freed (trampolines and probes live for the process).
TpState* g_tp = nullptr;
std::atomic<bool> g_trap_fallback{true};

// The probe of every provider tracepoint: `user` is the function's entry address.
void on_tracepoint(void* user, std::uintptr_t* sp) noexcept {
  crossmod_probes_entry_dispatch(reinterpret_cast<std::uintptr_t>(user) + x86::kCallLen, sp);
}

// The same for a tracepoint after the function's leading pushes: the return address lies
// that many slots above sp.
void on_tracepoint_pushed(void* user, std::uintptr_t* sp) noexcept {
  const auto* ps = static_cast<const PushedSite*>(user);
  crossmod_probes_entry_dispatch(ps->function + x86::kCallLen, sp + ps->pushes);
}

Status from_tp(tp::Status s) noexcept {
  switch (s) {
    case tp::Status::ok: return Status::ok;
    case tp::Status::not_writable: return Status::not_writable;
    case tp::Status::bad_bytes: return Status::bytes_changed;
    case tp::Status::table_full: return Status::table_full;
    case tp::Status::out_of_range:
    case tp::Status::no_trampoline_space: return Status::out_of_range;
    case tp::Status::too_short:
    case tp::Status::decode_error:
    case tp::Status::unsupported_instruction:
    case tp::Status::branch_into_range: return Status::unsupported;
    default: return Status::engine_error;
  }
}

// Functions whose return address cannot be redirected: those that store it (setjmp,
// vfork, getcontext: a later longjmp / second return would reach the exit trampoline
// without a frame), those that identify their caller by it (dlopen and dlmopen search the
// caller's RUNPATH and namespace, dlsym and dlvsym resolve RTLD_NEXT after the caller's
// object: redirected, the caller is the exit stub in the probes library, and an
// interposer's dlsym(RTLD_NEXT, "dlopen") found itself and recursed until the stack ran
// out), and entry points with no ordinary return address at [rsp] or with a calling
// convention that preserves registers the exit dispatcher clobbers (ld.so's lazy binding
// and TLS descriptor stubs, the signal-return stub, _start).
bool reads_return_address(const char* name) noexcept {
  // Plain string tests, not fnmatch: 17 fnmatch calls per function were a tenth of
  // python3's attach ('Py*', 928 functions: ~2.8M instructions).
  const std::string_view n(name);
  for (const std::string_view part : {"setjmp", "vfork", "getcontext", "swapcontext"})
    if (n.find(part) != std::string_view::npos) return true;
  for (const std::string_view lead : {"__libc_start_main", "_dl_runtime_", "_dl_tlsdesc_"})
    if (n.substr(0, lead.size()) == lead) return true;
  for (const std::string_view whole :
       {"__restore_rt", "_start", "__morestack", "dlopen", "dlmopen", "dlsym", "dlvsym",
        // Stack walkers start from their own frame (unwind_interpose.cpp writes the
        // callers' frames back first).
        "backtrace", "__backtrace", "_Unwind_Backtrace"})
    if (n == whole) return true;
  return false;
}

// A process that hosts V8 (node, an embedding): V8 reads and rewrites the return
// addresses of native frames (its stack walker looks the return address of a C++ runtime
// function up in its code table; JIT code calls libc directly), so a return redirected to
// the exit trampoline made node abort ("Check failed: maybe_code.has_value()", or the
// trampoline found no frame: node 20, --trace '*'). No tracepoint gets an exit probe
// there. Recognised by v8::Isolate::New(const CreateParams&), V8's public entry point,
// in the global scope (the executable or a library loaded with it).
bool hosts_v8() noexcept { return dlsym(RTLD_DEFAULT, "_ZN2v87Isolate3NewERKNS0_12CreateParamsE") != nullptr; }

// A process that hosts HotSpot (OpenJDK's libjvm): a VM function called from compiled
// Java code finds its Java caller through its own return address (frame::sender), so a
// return redirected to the exit trampoline made java die of SIGSEGV in frame::sender
// under SharedRuntime::resolve_opt_virtual_call_C (OpenJDK 17, `java Hello.java` under
// --trace '*' --policy full, once the profiler's table held all of libjvm's functions).
// Recognised by JNI_CreateJavaVM, libjvm's entry point: in the global scope (the java
// launcher loads libjvm with RTLD_GLOBAL) or among the functions being attached (libjvm
// itself). Objects attached before libjvm was loaded keep their exit probes.
bool hosts_hotspot(const std::vector<tp::ElfFunction>& fns) noexcept {
  if (dlsym(RTLD_DEFAULT, "JNI_CreateJavaVM") != nullptr) return true;
  for (const tp::ElfFunction& f : fns)
    if (f.name == "JNI_CreateJavaVM") return true;
  return false;
}

// Why no tracepoint of this batch gets an exit probe (a refusal reason), or nullptr.
const char* return_address_reader(const std::vector<tp::ElfFunction>& fns) noexcept {
  if (hosts_v8()) return "exit: V8 reads return addresses";
  if (hosts_hotspot(fns)) return "exit: HotSpot reads return addresses";
  return nullptr;
}

// Never traced: what the engine's SIGTRAP handler runs (errno is a call of
// __errno_location; the kernel returns through __restore_rt) - a trap there, e.g. on an
// int3 of a tracepoint being installed, would arrive with SIGTRAP blocked and kill the
// process - and the dynamic loader, whose lazy binding the handler's first calls may need.
bool on_trap_path(const tp::ElfFunction& f) noexcept {
  if (f.name == "__errno_location" || f.name == "__restore_rt") return true;
  const std::size_t slash = f.object.rfind('/');
  return f.object.compare(slash == std::string::npos ? 0 : slash + 1, 3, "ld-") == 0;
}

// GCC's hot/cold splitting: `f.cold` (or `f.cold.N`) is the unlikely part of f, a local
// FUNC symbol that f's code jumps into, never calls. Its "entry" is no call, and at it
// [rsp] is a local of f, not a return address: an exit probe would overwrite it.
bool is_cold_fragment(const std::string& raw) noexcept {
  const std::size_t dot = raw.rfind(".cold");
  if (dot == std::string::npos || dot == 0) return false;
  const std::size_t rest = dot + 5;
  if (rest == raw.size()) return true;
  if (raw[rest] != '.' || rest + 1 == raw.size()) return false;
  return raw.find_first_not_of("0123456789", rest + 1) == std::string::npos;
}

std::string demangled(const std::string& raw) {
  if (raw.rfind("_Z", 0) != 0) return raw;
  int rc = 0;
  char* d = abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &rc);
  std::string out = rc == 0 && d != nullptr ? std::string(d) : raw;
  std::free(d);
  return out;
}

Probe& owner_of(Probe& p) noexcept {
  return (p.kind == Kind::exit && p.partner < kMaxProbes) ? probe(p.partner) : p;
}

}  // namespace

namespace detail {

// SYNC_CORE is the kernel's guarantee; the Tmax wait is the engine's calibrated bound
// (measured to tear now and then on some VMs), used only where membarrier is missing.
WaitPolicy install_wait() noexcept {
  if (sync_core_register() == crossmod::Status::ok) return WaitPolicy::SyncCore();
  return WaitPolicy::Ticks(wait_ticks());
}

Status tracepoint_set_code(Probe& owner, bool on) noexcept {
  auto* t = static_cast<tp::Tracepoint*>(owner.tracepoint);
  if (t == nullptr) return Status::unsupported;
  if (on && !t->is_installed()) {
    // The trampoline's toggle is off: the jump starts as the original code, relocated.
    if (const tp::Status s = t->install(install_wait()); s != tp::Status::ok) return from_tp(s);
  }
  return from_tp(on ? t->enable() : t->disable());
}

Status tracepoint_install_batch(const ProbeId* ids, std::size_t n) noexcept {
  std::vector<tp::Tracepoint*> todo;
  try {
    for (std::size_t i = 0; i < n; ++i) {
      Probe& o = owner_of(probe(ids[i]));
      if (o.form != Form::tracepoint || o.prepare_status != Status::ok || o.tracepoint == nullptr)
        continue;
      auto* t = static_cast<tp::Tracepoint*>(o.tracepoint);
      if (!t->is_installed()) todo.push_back(t);
    }
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
  } catch (...) {
    return Status::engine_error;
  }
  if (todo.empty()) return Status::ok;
  // On a refusal nothing is written; the per-probe toggles then install one by one and
  // report their own status.
  (void)tp::Tracepoint::install_all(std::span<tp::Tracepoint* const>(todo), install_wait());
  return Status::ok;
}

Status tracepoint_remove_batch(const ProbeId* ids, std::size_t n, std::size_t* removed) noexcept {
  *removed = 0;
  std::vector<tp::Tracepoint*> todo;
  try {
    for (std::size_t i = 0; i < n; ++i) {
      Probe& o = owner_of(probe(ids[i]));
      if (o.form != Form::tracepoint || o.prepare_status != Status::ok || o.tracepoint == nullptr) continue;
      // Both probes of the site off (the exit probe is the owner's partner), and the
      // trampoline's toggle off with them: what runs through it is the original code.
      if (o.active.load(std::memory_order_acquire) || o.code_on) continue;
      if (o.partner < kMaxProbes && probe(o.partner).active.load(std::memory_order_acquire)) continue;
      auto* t = static_cast<tp::Tracepoint*>(o.tracepoint);
      if (t->is_installed()) todo.push_back(t);  // trap mode too: off, its int3 still traps
    }
    std::sort(todo.begin(), todo.end());
    todo.erase(std::unique(todo.begin(), todo.end()), todo.end());
  } catch (...) {
    return Status::engine_error;
  }
  if (todo.empty()) return Status::ok;
  const tp::Status s = tp::Tracepoint::remove_all(std::span<tp::Tracepoint* const>(todo), install_wait());
  if (s != tp::Status::ok) return from_tp(s);
  *removed = todo.size();
  return Status::ok;
}

}  // namespace detail

namespace {

// This library's name as the enumeration gives it: never traced (the dispatch path).
// Computed once (a dl_iterate_phdr pass); may throw bad_alloc, callers catch.
const std::string& own_object() {
  static const std::string name = tp::object_of(reinterpret_cast<std::uintptr_t>(&on_tracepoint));
  return name;
}

// Makes the entry and exit probes of each of `fns` (off), or refuses it with a reason; then
// announces the new probes. Takes the registry lock. The first failure other than a
// refusal is returned (the rest are still attached).
Status attach_functions(const std::vector<tp::ElfFunction>& fns, std::size_t* new_probes,
                        std::size_t* refused) noexcept {
  const bool trap_fallback = g_trap_fallback.load(std::memory_order_relaxed);
  const char* const walker = return_address_reader(fns);
  std::vector<std::uint32_t> fresh;
  std::size_t n_refused = 0;
  Status first = Status::ok;
  auto note = [&first](Status s) {
    if (first == Status::ok) first = s;
  };
  try {
    fresh.reserve(2 * fns.size());
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (g_tp == nullptr) g_tp = new TpState;
    for (const tp::ElfFunction& f : fns) {
      const std::string name = demangled(f.name);
      if (find_site(f.addr) < kMaxProbes) continue;
      if (on_trap_path(f)) {
        g_tp->refusals.push_back({f.addr, intern(name), intern(f.object),
                                  "on the SIGTRAP handler's path", false});
        ++n_refused;
        continue;
      }
      if (is_cold_fragment(f.name)) {
        g_tp->refusals.push_back({f.addr, intern(name), intern(f.object),
                                  "not a function entry (a .cold fragment)", false});
        ++n_refused;
        continue;
      }
      if (published_count() + 2 > kMaxProbes) {
        note(Status::table_full);
        break;
      }
      // push_back below cannot throw. Grown geometrically: reserve(size() + 1) reallocated
      // and copied the whole list for every function once it was full (quadratic: with
      // 44,000 HotSpot exit refusals java spent a fifth of its run here).
      if (g_tp->refusals.size() == g_tp->refusals.capacity())
        g_tp->refusals.reserve(2 * g_tp->refusals.capacity() + 64);
      tp::Tracepoint& t = g_tp->tps.emplace_back();
      auto* fn = reinterpret_cast<void*>(f.addr);
      tp::Status ts = tp::Tracepoint::prepare_sp(fn, f.size, on_tracepoint, fn, &t, nullptr, false);
      // No place for the jump's entry: a jump after the leading pushes has other boundaries
      // (tp::Tracepoint::prepare_sp_after_pushes), and beats trap mode.
      if (ts == tp::Status::no_trampoline_space) {
        const unsigned n = tp::Tracepoint::leading_pushes(fn, f.size);
        for (unsigned k = 1; k <= n && ts != tp::Status::ok; ++k) {
          PushedSite& ps = g_tp->pushed.emplace_back(PushedSite{f.addr, k});
          const tp::Status s = tp::Tracepoint::prepare_sp_after_pushes(fn, f.size, k, on_tracepoint_pushed, &ps, &t);
          if (s == tp::Status::ok)
            ts = s;
          else
            g_tp->pushed.pop_back();
        }
      }
      if (ts != tp::Status::ok && trap_fallback &&
          (ts == tp::Status::no_trampoline_space || ts == tp::Status::too_short ||
           ts == tp::Status::branch_into_range))
        ts = tp::Tracepoint::prepare_sp(fn, f.size, on_tracepoint, fn, &t, nullptr, true);
      if (ts != tp::Status::ok) {
        g_tp->tps.pop_back();
        g_tp->refusals.push_back({f.addr, intern(name), intern(f.object), tp::to_string(ts), false});
        ++n_refused;
        continue;
      }
      (void)t.disable();  // probes start off
      NewProbe np;
      np.function = f.addr;
      np.site = f.addr;
      np.name = intern(name);
      np.object = intern(f.object);
      np.kind = Kind::entry;
      np.provider = Provider::tracepoint;
      np.form = Form::tracepoint;
      np.start_active = false;
      np.tracepoint = &t;
      np.site_len = static_cast<std::uint8_t>(t.jump_len());
      np.site_skip = static_cast<std::uint8_t>(t.address() - f.addr);
      Status rs = Status::ok;
      const std::uint32_t id = register_probe_locked(np, &rs);
      if (id == kNone) {
        note(rs);
        continue;
      }
      fresh.push_back(id);
      if (reads_return_address(np.name) || walker != nullptr) {
        g_tp->refusals.push_back({f.addr, np.name, np.object,
                                  walker != nullptr ? walker : "exit: return address not redirectable", true});
        continue;
      }
      const std::uint32_t x = register_exit_partner_locked(id, &rs);
      if (x != kNone)
        fresh.push_back(x);
      else
        note(rs);
    }
  } catch (...) {
    return Status::engine_error;
  }
  if (new_probes != nullptr) *new_probes = fresh.size();
  if (refused != nullptr) *refused = n_refused;
  for (std::uint32_t id : fresh) announce(id);
  return first;
}

}  // namespace

Status attach_tracepoints(const char* pattern, const char* object_pattern, std::size_t* new_probes,
                          std::size_t* refused) noexcept {
  if (new_probes != nullptr) *new_probes = 0;
  if (refused != nullptr) *refused = 0;
  if (pattern == nullptr) return Status::bad_argument;
  std::vector<tp::ElfFunction> fns;
  try {
    // Never traced: this library (the dispatch path) and the objects excluded by name.
    std::vector<std::string> excluded{own_object()};
    {
      std::lock_guard<std::mutex> lock(registry_mutex());
      if (g_tp != nullptr) excluded.insert(excluded.end(), g_tp->excluded.begin(), g_tp->excluded.end());
    }
    // Only the functions the patterns select are copied out of the symbol tables (a
    // process has tens of thousands; python3 with 'Py*' keeps 939).
    const tp::ObjectFilter want = [&](const std::string& object) {
      return std::find(excluded.begin(), excluded.end(), object) == excluded.end() &&
             (object_pattern == nullptr || fnmatch(object_pattern, object.c_str(), 0) == 0);
    };
    std::string raw_name;  // reused: no allocation per rejected name
    const tp::DemangledMatchTest demangled_test(pattern);
    // fnmatch (flags 0) matches the characters before the pattern's first special one
    // literally: a plain name that does not start with them is out without a call ('Py*'
    // over python3's ~20,000 symbols: ~3M instructions of fnmatch, a tenth of the attach).
    const std::string_view literal(pattern, std::strcspn(pattern, "*?[\\"));
    const tp::FunctionFilter keep = [&](std::string_view raw, const std::string&) {
      const bool mangled = raw.substr(0, 2) == "_Z";
      if (!mangled && raw.substr(0, literal.size()) != literal) return false;
      raw_name.assign(raw);
      if (mangled) {
        // Demangling every C++ name costs ~1.5 us each (libstdc++'s alone: ~6 ms per
        // process); most can be ruled out from the mangled name ('Py*', 'sqlite3_*').
        if (demangled_test.cannot_match(raw)) return false;
        return fnmatch(pattern, demangled(raw_name).c_str(), 0) == 0;
      }
      return fnmatch(pattern, raw_name.c_str(), 0) == 0;
    };
    if (!tp::enumerate_functions(&fns, nullptr, want, keep)) return Status::engine_error;
  } catch (...) {
    return Status::engine_error;
  }
  return attach_functions(fns, new_probes, refused);
}

Status attach_tracepoint_at(const void* function, std::size_t* new_probes, std::size_t* refused) noexcept {
  if (new_probes != nullptr) *new_probes = 0;
  if (refused != nullptr) *refused = 0;
  const auto addr = reinterpret_cast<std::uintptr_t>(function);
  std::vector<tp::ElfFunction> fns;
  try {
    if (addr == 0) return Status::bad_argument;
    const std::string object = tp::object_of(addr);
    if (object.empty() || object == own_object()) return Status::bad_argument;
    // The symbol's name narrows the copy when the dynamic table has it; else every
    // function of the object is read and the address picks.
    Dl_info info{};
    const char* sname = dladdr(function, &info) != 0 && info.dli_saddr == function ? info.dli_sname : nullptr;
    const tp::ObjectFilter want = [&](const std::string& o) { return o == object; };
    const tp::FunctionFilter keep = [sname](std::string_view raw, const std::string&) {
      return sname == nullptr || raw == sname;
    };
    if (!tp::enumerate_functions(&fns, nullptr, want, keep)) return Status::engine_error;
    std::erase_if(fns, [addr](const tp::ElfFunction& f) { return f.addr != addr; });
    if (fns.size() > 1) fns.resize(1);  // aliases: one symbol is enough
  } catch (...) {
    return Status::engine_error;
  }
  if (fns.empty()) return Status::bad_argument;  // no function symbol starts there
  return attach_functions(fns, new_probes, refused);
}

namespace {
// The objects loaded when mark_objects_seen ran or that a later call found (dl_iterate_phdr
// names, as enumerate_functions gives them). Never freed.
std::mutex g_seen_mutex;
std::vector<std::string>* g_seen = nullptr;
thread_local bool t_in_new_objects = false;

int collect_object_names(dl_phdr_info* info, std::size_t, void* data) {
  auto* v = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0') v->emplace_back(info->dlpi_name);
  return 0;
}

// `s` as an fnmatch(3) pattern that matches exactly `s` (flags 0: backslash quotes).
std::string fnmatch_literal(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (const char c : s) {
    if (c == '*' || c == '?' || c == '[' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}
}  // namespace

void mark_objects_seen() noexcept {
  try {
    std::lock_guard<std::mutex> lock(g_seen_mutex);
    if (g_seen == nullptr) g_seen = new std::vector<std::string>();
    g_seen->clear();
    dl_iterate_phdr(collect_object_names, g_seen);
  } catch (...) {
  }
}

Status attach_tracepoints_in_new_objects(const char* const* patterns, std::size_t n, const char* object_pattern,
                                         std::size_t* objects, std::size_t* new_probes,
                                         std::size_t* refused) noexcept {
  if (objects != nullptr) *objects = 0;
  if (new_probes != nullptr) *new_probes = 0;
  if (refused != nullptr) *refused = 0;
  if (patterns == nullptr && n != 0) return Status::bad_argument;
  if (t_in_new_objects) return Status::ok;
  t_in_new_objects = true;
  Status first = Status::ok;
  try {
    std::vector<std::string> fresh;
    {
      std::lock_guard<std::mutex> lock(g_seen_mutex);
      if (g_seen != nullptr) {
        std::vector<std::string> now;
        dl_iterate_phdr(collect_object_names, &now);
        for (std::string& o : now) {
          if (std::find(g_seen->begin(), g_seen->end(), o) != g_seen->end()) continue;
          g_seen->push_back(o);
          if (object_pattern == nullptr || fnmatch(object_pattern, o.c_str(), 0) == 0)
            fresh.push_back(std::move(o));
        }
      }
    }
    for (const std::string& o : fresh) {
      const std::string exact = fnmatch_literal(o);
      for (std::size_t i = 0; i < n; ++i) {
        std::size_t made = 0, ref = 0;
        const Status s = attach_tracepoints(patterns[i], exact.c_str(), &made, &ref);
        if (s != Status::ok && first == Status::ok) first = s;
        if (new_probes != nullptr) *new_probes += made;
        if (refused != nullptr) *refused += ref;
      }
    }
    if (objects != nullptr) *objects = fresh.size();
  } catch (...) {
    first = Status::engine_error;
  }
  t_in_new_objects = false;
  return first;
}

std::size_t tracepoint_refusals(TracepointRefusal* out, std::size_t capacity) noexcept {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (g_tp == nullptr) return 0;
  const std::size_t n = g_tp->refusals.size();
  if (out != nullptr)
    std::copy_n(g_tp->refusals.begin(), std::min(n, capacity), out);
  return n;
}

Status exclude_from_tracepoints(const void* address) noexcept {
  try {
    // The name attach's object test sees (dladdr would say argv[0] for the main program).
    std::string name = tp::object_of(reinterpret_cast<std::uintptr_t>(address));
    if (address == nullptr || name.empty()) return Status::bad_argument;
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (g_tp == nullptr) g_tp = new TpState;
    if (std::find(g_tp->excluded.begin(), g_tp->excluded.end(), name) == g_tp->excluded.end())
      g_tp->excluded.push_back(std::move(name));
    return Status::ok;
  } catch (...) {
    return Status::engine_error;  // no memory
  }
}

void set_tracepoint_trap_fallback(bool on) noexcept {
  g_trap_fallback.store(on, std::memory_order_relaxed);
}

bool tracepoint_trap_mode(ProbeId id) noexcept {
  if (id >= count()) return false;
  Probe& o = owner_of(probe(id));
  if (o.form != Form::tracepoint || o.tracepoint == nullptr) return false;
  return static_cast<const tp::Tracepoint*>(o.tracepoint)->trap_mode();
}

}  // namespace crossmod::probes
