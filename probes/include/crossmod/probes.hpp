// crossmod::probes: the fastinst layer (PLDI'16 sections 3 and 7). Providers find probe
// sites (compiler-emitted calls or NOP sleds); this layer gives each a stable ProbeId and
// metadata, calls the discovery callback, and switches sites on and off with the engine's
// wait-free callpatch (default) or int3-locked wordpatch (sync or async).
//
// Thread safety: every function here is thread-safe and noexcept, and returns Status.
// Any thread may toggle any probe; two toggles of one probe serialize (a per-probe
// spinlock on the toggle path only). The invocation path (a site calling the probe
// function) neither allocates nor locks. Nothing here is async-signal-safe.
#pragma once
#include <cstddef>
#include <cstdint>

#include "crossmod/probes.h"

namespace crossmod::probes {

using ProbeId = std::uint32_t;
inline constexpr ProbeId kNoProbe = CROSSMOD_NO_PROBE;

// The probe function. For an entry probe `tsc` is the TSC at the hook; for an exit probe
// it is the TSC taken at the matching entry (0 when unknown: the entry site was off, or
// the frame was lost to longjmp / an exception), so duration = rdtsc() - tsc.
// Runs on the instrumented thread; must not throw. Probes nested inside a probe function
// on the same thread are suppressed (no recursion).
using ProbeFn = crossmod_probe_fn;

enum class [[nodiscard]] Status : std::uint8_t {
  ok = CROSSMOD_PROBE_OK,
  unknown_id = CROSSMOD_PROBE_UNKNOWN_ID,          // no probe with this id
  bytes_changed = CROSSMOD_PROBE_BYTES_CHANGED,    // site bytes are neither of our two states
  outside_code = CROSSMOD_PROBE_OUTSIDE_CODE,      // site not in a known executable mapping
  not_writable = CROSSMOD_PROBE_NOT_WRITABLE,      // could not make the code writable
  out_of_range = CROSSMOD_PROBE_OUT_OF_RANGE,      // no trampoline within rel32 reach
  busy = CROSSMOD_PROBE_BUSY,                      // the engine's int3 lock is held elsewhere
  bad_argument = CROSSMOD_PROBE_BAD_ARGUMENT,      // null fn / out-pointer, bad pattern
  unsupported = CROSSMOD_PROBE_UNSUPPORTED,        // site form or strategy not supported
  table_full = CROSSMOD_PROBE_TABLE_FULL,          // kMaxProbes reached
  engine_error = CROSSMOD_PROBE_ENGINE_ERROR,      // any other engine failure
};
const char* to_string(Status s) noexcept;

enum class Kind : std::uint8_t { entry = CROSSMOD_PROBE_ENTRY, exit = CROSSMOD_PROBE_EXIT };
enum class Provider : std::uint8_t {
  cyg = CROSSMOD_PROVIDER_CYG,              // -finstrument-functions hooks, start on
  patchable = CROSSMOD_PROVIDER_PATCHABLE,  // -fpatchable-function-entry sleds, start off
  manual = CROSSMOD_PROVIDER_MANUAL,        // register_entry_site (tests, JITs)
  tracepoint = CROSSMOD_PROVIDER_TRACEPOINT,  // unmodified code: jump with embedded int3
};
enum class Strategy : std::uint8_t {
  callpatch = CROSSMOD_STRATEGY_CALLPATCH,            // wait-free, one line per toggle
  wordpatch_sync = CROSSMOD_STRATEGY_WORDPATCH_SYNC,  // int3 + 2 waits if straddling
  wordpatch_async = CROSSMOD_STRATEGY_WORDPATCH_ASYNC,  // int3 now, rest at flush()
};

struct ProbeInfo {
  ProbeId id = kNoProbe;
  std::uintptr_t function = 0;  // entry address of the instrumented function
  const char* name = nullptr;   // demangled ELF symbol name, "?" if none; lives forever
  const char* object = nullptr;  // path of the ELF object holding the site; lives forever
  Kind kind = Kind::entry;
  std::uintptr_t site = 0;  // address of the 5-byte site
  // Site bytes before a cache-line boundary, 0 if inside one (a tracepoint: of its jump,
  // 5..8 bytes; 0 means retract_many / install_many write it in one store, no wait).
  unsigned split = 0;
  Provider provider = Provider::manual;
  Strategy strategy = Strategy::callpatch;
  bool active = false;
  bool pending = false;  // a wordpatch_async toggle awaits flush()
  ProbeFn fn = nullptr;
};

inline constexpr std::size_t kMaxProbes = 1u << 16;

// Called once for every probe: at registration, or, for probes found before the callback
// was set, from inside on_discovery itself. It may activate/deactivate the probe. For the
// cyg provider it runs on the thread that first executed the site, before the probe
// function; deactivate(id) there switches the site off before its first probe call.
using DiscoveryFn = void (*)(const ProbeInfo& info, void* user);
Status on_discovery(DiscoveryFn cb, void* user) noexcept;

// Scans every loaded object for providers that find sites at load time
// (-fpatchable-function-entry); idempotent, new objects (dlopen) are picked up by a later
// call. The shared library runs it from a constructor; call it again after dlopen.
// Precondition for a NEW object: no thread executes its code during the call (the
// compiler's single-byte NOP sleds are rewritten into one instruction).
Status scan_loaded_objects(std::size_t* new_probes = nullptr) noexcept;

Status info(ProbeId id, ProbeInfo* out) noexcept;
// Whether the probe is on (ProbeInfo::active) without info's lock: one atomic load; false
// for an unknown id.
bool is_active(ProbeId id) noexcept;
std::size_t count() noexcept;  // ids are 0 .. count()-1

// Inactive -> active: the fn is published, then the site is patched. Active -> active
// with another fn: one atomic store, no code patch. Deactivate: the site is patched back;
// a thread already past the site may still call the old fn once (it stays valid).
Status activate(ProbeId id, ProbeFn fn) noexcept;
Status deactivate(ProbeId id) noexcept;
// Changes the patch strategy, rewriting the site into the new strategy's form of its
// current state if they differ.
Status set_strategy(ProbeId id, Strategy s) noexcept;
// Completes every pending wordpatch_async toggle with two waits in total.
Status flush() noexcept;

// Batch forms: every selected probe is toggled; straddling wordpatch sites share two
// waits. `toggled` (optional) receives how many probes were selected. The first non-ok
// status is returned; the rest are still attempted.
Status activate_function(std::uintptr_t function, ProbeFn fn, std::size_t* toggled = nullptr) noexcept;
Status deactivate_function(std::uintptr_t function, std::size_t* toggled = nullptr) noexcept;
// fnmatch(3) pattern over the demangled name, e.g. "ns::*" or "work_*".
Status activate_matching(const char* pattern, ProbeFn fn, std::size_t* toggled = nullptr) noexcept;
Status deactivate_matching(const char* pattern, std::size_t* toggled = nullptr) noexcept;
Status activate_all(ProbeFn fn, std::size_t* toggled = nullptr) noexcept;
Status deactivate_all(std::size_t* toggled = nullptr) noexcept;

// Manual provider: registers a 5-byte entry site that is either a NOP form this layer
// knows (5 x 0x90 or 0F 1F 44 00 00) or already our call; it then behaves like a
// patchable-entry probe (off until activated, calls fn through the shared trampoline).
// The caller guarantees what scan_loaded_objects requires for 5 x 0x90.
Status register_entry_site(void* site, std::uintptr_t function, const char* name,
                           ProbeId* out) noexcept;

// Wait used by wordpatch strategies; default: the engine's Tmax config (load_tmax_config_auto).
Status set_wait_ticks(std::uint64_t ticks) noexcept;
std::uint64_t wait_ticks() noexcept;  // loads the config on first use

// Batch forms over explicit ids (e.g. a profiler's probe set): no scan of the table.
Status activate_many(const ProbeId* ids, std::size_t n, ProbeFn fn) noexcept;
Status deactivate_many(const ProbeId* ids, std::size_t n) noexcept;

// Tracepoint sites only (others are left alone): a tracepoint is installed at its first
// activation and then switched by one store in its trampoline, so an off function's calls
// still take the trampoline's detour (a trap-mode site: its int3, a signal per call).
// retract_many removes the jump (or int3) of every listed site whose probes are all off
// (the function runs its own code again); the next activation
// installs it again. install_many installs the listed sites that are not installed, with
// their probes still off, so that activating them is one store each. Each is one batch:
// two waits for all the sites, none when every listed jump lies inside one cache line
// (ProbeInfo::split 0: one store each). `removed` (optional): sites whose jump was removed.
Status retract_many(const ProbeId* ids, std::size_t n, std::size_t* removed = nullptr) noexcept;
Status install_many(const ProbeId* ids, std::size_t n) noexcept;

// Tracepoint provider (unmodified binaries, no compiler flags): an entry probe at every
// function of the loaded ELF objects (.symtab when present, .dynsym otherwise) whose
// demangled name matches fnmatch(3) `pattern` and whose object path matches
// `object_pattern` (nullptr: any object), and an exit probe for each by return-address
// redirection. Probes start off. `new_probes` (optional) receives the number of probes
// made, `refused` (optional) the number of functions the relocator refused.
Status attach_tracepoints(const char* pattern, const char* object_pattern,
                          std::size_t* new_probes = nullptr, std::size_t* refused = nullptr) noexcept;
// The same for the one function whose symbol starts at `function`, in whatever loaded
// object holds it; this library's are never traced and exclude_from_tracepoints does not
// apply (the caller names the function). bad_argument when no function symbol starts
// there. E.g. a profiler putting a tracepoint on its own calibration function.
Status attach_tracepoint_at(const void* function, std::size_t* new_probes = nullptr,
                            std::size_t* refused = nullptr) noexcept;
// Objects loaded after start-up (dlopen: plugins, Python's extension modules). After
// mark_objects_seen(), each call of attach_tracepoints_in_new_objects attaches each of
// the `n` patterns (as attach_tracepoints) in every object loaded since the previous call
// (or the mark) whose path matches `object_pattern` (nullptr: any); `objects` (optional)
// receives how many such objects there were. Call it after a dlopen returned: the new
// object's constructors have run. Before any mark it does nothing. A call made on a thread
// already inside one (the layer pins an object it probes with a dlopen of its own, which a
// caller's dlopen interposer sees) returns ok at once. The list of objects is guarded by
// its own mutex, not held during the attaches (a constructor's nested dlopen holds the
// loader lock, which the pin's dlopen needs).
void mark_objects_seen() noexcept;
Status attach_tracepoints_in_new_objects(const char* const* patterns, std::size_t n, const char* object_pattern,
                                         std::size_t* objects = nullptr, std::size_t* new_probes = nullptr,
                                         std::size_t* refused = nullptr) noexcept;
// Details of the tracepoint provider (provider_tracepoint.cpp):
// - A function is skipped (neither probed nor refused) when its object is this library,
//   or a probe already sits at its entry (another provider, or an earlier attach).
// - Where the jump is impossible (too short, a branch into the replaced range, no
//   trampoline address within reach), the probe is a trap-mode tracepoint (int3 on the
//   first byte: one SIGTRAP per call) unless the fallback is switched off (then refused).
// - Activation installs the tracepoint once (membarrier SYNC_CORE waits when the kernel
//   has them, else the Tmax wait of wait_ticks()); later toggles are one store in its
//   trampoline. Exit probes reuse the patchable provider's return-address redirection.
struct TracepointRefusal {
  std::uintptr_t function = 0;
  const char* name = nullptr;    // demangled; lives forever
  const char* object = nullptr;  // lives forever
  const char* reason = nullptr;  // a tp::Status name ("too_short", ...), or for a function
                                 // probed without exit probe "exit: return address not
                                 // redirectable" (setjmp-like, ld.so stubs, _start: see
                                 // provider_tracepoint.cpp), "on the SIGTRAP handler's
                                 // path", "not a function entry (a .cold fragment)"
  bool entry_probe = false;      // true: the entry probe exists, only the exit probe was refused
};
// Copies up to `capacity` refusals (oldest first) into `out` (may be null when capacity is
// 0) and returns how many there are in total.
std::size_t tracepoint_refusals(TracepointRefusal* out, std::size_t capacity) noexcept;
// Later attach_tracepoints calls leave alone the loaded ELF object that holds `address`, as
// they leave this library: e.g. a profiler's runtime, whose functions run inside probe
// functions. bad_argument when no loaded object holds it. Probes made before stay.
Status exclude_from_tracepoints(const void* address) noexcept;
// Probe hits on the calling thread are not dispatched from quiet_begin() to the matching
// quiet_end() (nestable; an exit probe still restores its return address): for a tool's
// own threads and its own work on the program's threads, whose calls of traced functions
// (malloc, fnmatch) would otherwise count as the program's. Async-signal-safe; TLS only.
void quiet_begin() noexcept;
void quiet_end() noexcept;
// Trap-mode fallback for later attach_tracepoints calls (default on).
void set_tracepoint_trap_fallback(bool on) noexcept;
// True if `id` (entry or exit) is a tracepoint probe in trap mode.
bool tracepoint_trap_mode(ProbeId id) noexcept;

// Inside an exit probe function: the TSC the layer took when the exit hook that calls it
// began (cyg: __cyg_profile_func_exit; patchable and tracepoint: the exit trampoline), so
// that `exit_hook_tsc() - tsc` is the call from the entry hook's TSC to the return, without
// the layer's exit work. 0 outside an exit probe function. Thread: the calling thread's.
std::uint64_t exit_hook_tsc() noexcept;

}  // namespace crossmod::probes
