// Provider for -finstrument-functions: implements __cyg_profile_func_enter/exit. Each
// compiler-emitted `call __cyg_profile_func_*` becomes a probe, discovered from the return
// address on its first execution, and starts ON (the paper's setting; the discovery
// callback may switch it off before its first probe call). Exit hooks that the compiler
// tail-called (`jmp __cyg_profile_func_exit`, usual at -O2) are found by decoding the
// function and toggle by one byte, JMP <-> RET.
// Thread and signal safety: the hooks run on every instrumented thread. After a site's
// first execution they neither allocate nor lock (wait-free map lookups, atomics, TLS).
// The first execution takes the registry mutex and reads ELF files; other threads reaching
// the site meanwhile wait until its discovery callback has returned. Not async-signal-safe:
// an instrumented function called from a signal handler during discovery could deadlock.
#include <Zydis/Zydis.h>

#include <sched.h>

#include <cstring>
#include <vector>

#include "crossmod/x86.hpp"
#include "encodings.hpp"
#include "objects.hpp"
#include "registry.hpp"

extern "C" {
void __cyg_profile_func_enter(void* this_fn, void* call_site);
void __cyg_profile_func_exit(void* this_fn, void* call_site);
}

namespace crossmod::probes::detail {
namespace {

// The address a call to the hook lands on: our definition (what the program's PLT or GOT
// resolves to when this library is preloaded or linked ahead of libc).
std::uintptr_t hook_address(Kind k) noexcept {
  return k == Kind::entry ? reinterpret_cast<std::uintptr_t>(&__cyg_profile_func_enter)
                          : reinterpret_cast<std::uintptr_t>(&__cyg_profile_func_exit);
}

// True when a call/jmp to `target` reaches `hook`: directly, or through a PLT stub
// ([endbr64] [bnd] jmp [rip+disp32]) whose GOT slot holds `hook`. The GOT slot is bound:
// the hook is running through this very stub.
bool resolves_to(std::uintptr_t target, std::uintptr_t hook) noexcept {
  if (target == hook) return true;
  Segment* seg = nullptr;
  if (object_for_code(target, 16, &seg) == nullptr) return false;
  const auto* b = reinterpret_cast<const std::uint8_t*>(target);
  if (std::memcmp(b, enc::kEndbr64.data(), enc::kEndbr64.size()) == 0) b += enc::kEndbr64.size();
  if (*b == enc::kBndPrefix) ++b;
  if (b[0] != enc::kJmpRipIndirect[0] || b[1] != enc::kJmpRipIndirect[1]) return false;
  std::int32_t disp = 0;
  std::memcpy(&disp, b + 2, sizeof disp);
  const auto slot = reinterpret_cast<std::uintptr_t>(b + 6) + static_cast<std::uintptr_t>(
                                                                  static_cast<std::intptr_t>(disp));
  std::uintptr_t bound = 0;
  std::memcpy(&bound, reinterpret_cast<const void*>(slot), sizeof bound);
  return bound == hook;
}

bool is_hook_call(std::uintptr_t site, Kind k, std::uint8_t opcode) noexcept {
  const auto* b = reinterpret_cast<const std::uint8_t*>(site);
  if (b[0] != opcode) return false;
  std::int32_t rel = 0;
  std::memcpy(&rel, b + 1, sizeof rel);
  const std::uintptr_t target =
      site + x86::kCallLen + static_cast<std::uintptr_t>(static_cast<std::intptr_t>(rel));
  return resolves_to(target, hook_address(k));
}

// Every `jmp rel32` to the exit hook inside the function (linear decode from its symbol).
std::vector<std::uintptr_t> tail_exit_sites(Object* obj, std::uintptr_t function) {
  std::vector<std::uintptr_t> out;
  const Symbol* sym = symbol_for(obj, function);
  if (sym == nullptr || sym->addr != function || sym->size == 0) return out;
  ZydisDecoder dec;
  if (!ZYAN_SUCCESS(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)))
    return out;
  std::uintptr_t at = function;
  const std::uintptr_t end = function + sym->size;
  while (at < end) {
    ZydisDecodedInstruction insn;
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&dec, nullptr, reinterpret_cast<const void*>(at),
                                                    end - at, &insn)))
      break;
    if (insn.length == x86::kCallLen && is_hook_call(at, Kind::exit, enc::kJmpRel32))
      out.push_back(at);
    at += insn.length;
  }
  return out;
}

// The slow path of a hook: first execution of a site. Returns the probe id, or kKnownNone.
std::uint32_t discover(std::uintptr_t ret, std::uintptr_t function, Kind kind) noexcept {
  const std::uintptr_t site = ret - x86::kCallLen;
  std::vector<std::uint32_t> fresh;
  std::uint32_t result = kKnownNone;
  try {
    std::lock_guard<std::mutex> lock(registry_mutex());
    if (const std::uint32_t id = find_site(site); id != kNone && id != kKnownNone) return id;
    NewProbe np;
    np.function = function;
    np.kind = kind;
    np.provider = Provider::cyg;
    np.start_active = true;
    Segment* seg = nullptr;
    Object* obj = object_for_code(site, x86::kCallLen, &seg);
    if (obj != nullptr && is_hook_call(site, kind, x86::kCallRel32)) {
      np.site = site;
      np.form = Form::call;
      Status s = Status::ok;
      result = register_probe_locked(np, &s);
      if (result != kNone) fresh.push_back(result);
      else result = kKnownNone;
    } else if (kind == Kind::exit && find_tail_exit(function) == kNone) {
      // Tail-called exit hook: `ret` is in the caller. Register every `jmp hook` of the
      // function; calls through any of them dispatch to the first (documented).
      std::uint32_t first = kKnownNone;
      Segment* fseg = nullptr;
      if (Object* fobj = object_for_code(function, 1, &fseg)) {
        for (std::uintptr_t t : tail_exit_sites(fobj, function)) {
          np.site = t;
          np.form = Form::tailjmp;
          Status s = Status::ok;
          const std::uint32_t id = register_probe_locked(np, &s);
          if (id == kNone) continue;
          fresh.push_back(id);
          if (first == kKnownNone) first = id;
        }
      }
      set_tail_exit_locked(function, first);
      result = first;
    } else if (kind == Kind::exit) {
      result = find_tail_exit(function);
    } else {
      // An entry hook reached other than by `call rel32` (-fno-plt's `call *GOT(%rip)`,
      // a call through a pointer): the hook still runs its shadow stack, but there is no
      // site to toggle. Remember that, so later calls do not take this path again.
      mark_no_probe_locked(site);
    }
  } catch (...) {
    result = kKnownNone;  // still announce what was registered: threads wait for that
  }
  for (std::uint32_t id : fresh) announce(id);
  return result;
}

// A thread that reached a site while its discovering thread still runs the discovery
// callback (at most once per site and thread): wait for the callback to finish.
__attribute__((noinline, cold)) void wait_announced(const Probe& p) noexcept {
  while (!p.announced.load(std::memory_order_acquire)) sched_yield();
}

inline void dispatch(std::uint32_t id, std::uint64_t tsc) noexcept {
  if (id >= kMaxProbes) return;
  Probe& p = probe(id);
  if (!p.announced.load(std::memory_order_acquire)) [[unlikely]] wait_announced(p);
  if (!p.active.load(std::memory_order_acquire)) return;
  if (const auto fn = p.fn.load(std::memory_order_acquire)) fn(id, tsc);
}

// Shadow stack: the TSC of each executed entry hook, matched by function at exit.
// An exit hook may never run for a frame (its exit site is off, longjmp, an exception):
// before pushing, frames whose entry hook ran below this one's stack address are dropped -
// they cannot be live callers. At the same address the frame is a live caller when the
// new entry is a copy inlined into it (GCC calls the hook of every inlined copy from the
// containing function's frame: dropping it lost the exit timing of every function that
// inlines an instrumented one, kvpipe_cyg's put, get, worker, ...), and stale when it is
// the same function entered again from that frame (a sibling call whose exit was missed).
// Only frames at most kSameStackSpan below: one farther away ran on another stack (a
// coroutine's), is live, and stays, as in the redirection stack (registry.hpp).
// The stack never holds more than kShadowDepth frames: deeper entries are not recorded,
// and their exits may get an outer recursive frame's timestamp or 0 (wrong timing, never
// a crash).
inline void push_frame(ThreadState& ts, std::uintptr_t fn, std::uint64_t tsc,
                       std::uintptr_t sp) noexcept {
  while (ts.depth > 0) {
    const Frame& top = ts.frames[ts.depth - 1];
    if (top.sp < sp ? sp - top.sp > kSameStackSpan : (top.sp != sp || top.function != fn)) break;
    --ts.depth;
  }
  if (ts.depth < kShadowDepth) ts.frames[ts.depth++] = {fn, tsc, sp};
}

inline std::uint64_t pop_frame(ThreadState& ts, std::uintptr_t fn) noexcept {
  for (unsigned i = ts.depth; i-- > 0;) {
    if (ts.frames[i].function == fn) {
      ts.depth = i;
      return ts.frames[i].tsc;
    }
  }
  return 0;
}

}  // namespace
}  // namespace crossmod::probes::detail

using namespace crossmod::probes::detail;

extern "C" __attribute__((no_instrument_function, noinline)) void __cyg_profile_func_enter(
    void* this_fn, void*) {
  ThreadState& ts = thread_state();
  if (ts.in_hook != 0) return;
  ts.in_hook = 1;
  const std::uint64_t tsc = crossmod::x86::rdtsc();
  const auto fn = reinterpret_cast<std::uintptr_t>(this_fn);
  push_frame(ts, fn, tsc, reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0)));
  const auto ret = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
  std::uint32_t id = find_site(ret - crossmod::x86::kCallLen);
  if (id == kNone) id = discover(ret, fn, crossmod::probes::Kind::entry);  // first call only
  dispatch(id, tsc);
  ts.in_hook = 0;
}

extern "C" __attribute__((no_instrument_function, noinline)) void __cyg_profile_func_exit(
    void* this_fn, void*) {
  ThreadState& ts = thread_state();
  if (ts.in_hook != 0) return;
  ts.in_hook = 1;
  const std::uint64_t exit_tsc = crossmod::x86::rdtsc();
  const auto fn = reinterpret_cast<std::uintptr_t>(this_fn);
  const std::uint64_t entry_tsc = pop_frame(ts, fn);
  const auto ret = reinterpret_cast<std::uintptr_t>(__builtin_return_address(0));
  std::uint32_t id = find_site(ret - crossmod::x86::kCallLen);
  if (id == kNone || id == kKnownNone) {
    id = find_tail_exit(fn);
    if (id == kNone) id = discover(ret, fn, crossmod::probes::Kind::exit);
  }
  ts.exit_tsc = exit_tsc;
  dispatch(id, entry_tsc);
  ts.exit_tsc = 0;
  ts.in_hook = 0;
}
