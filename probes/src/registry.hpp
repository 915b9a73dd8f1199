// Probe-layer internals shared by the registry and the providers: the probe table, the
// site maps read on the invocation path, the per-thread state of the hooks, and the
// registration entry points the providers call.
// Thread safety: the table and maps are read lock-free on the invocation path; writers
// hold the registry mutex (registration) or a probe's toggle lock (state changes).
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "crossmod/callpatch.hpp"
#include "crossmod/probes.hpp"
#include "crossmod/wordpatch.hpp"
#include "site_map.hpp"

namespace crossmod::probes::detail {

enum class Form : std::uint8_t {
  call,     // E8 rel32 at the site: callpatch / wordpatch between call and NOP forms
  tailjmp,  // E9 rel32 (a tail-called exit hook): one byte toggles between E9 and C3
  tracepoint,  // unmodified code: a tp::Tracepoint at the function's entry, installed on
               // the first activation, then toggled in its trampoline (provider_tracepoint)
};

struct Probe {
  // Immutable once the probe is published (count() covers it).
  std::uintptr_t function = 0;
  std::uintptr_t site = 0;
  // nullptr, not "?": a pointer default needs a load-time relocation in each of the
  // kMaxProbes slots of the static table (131,072 of them, every page of its 9 MB written
  // before main). Registration always sets both.
  const char* name = nullptr;
  const char* object = nullptr;
  Kind kind = Kind::entry;
  Provider provider = Provider::manual;
  Form form = Form::call;
  unsigned split = 0;
  std::array<std::uint8_t, 5> active_bytes{};  // the call (or jmp) as found / written
  Status prepare_status = Status::ok;           // a site we could not prepare refuses toggles
  void* tracepoint = nullptr;  // Form::tracepoint: its tp::Tracepoint (provider-owned, immortal)

  // Read on the invocation path.
  std::atomic<ProbeFn> fn{nullptr};
  std::atomic<bool> active{false};
  // Set once announce() has run the discovery callback (or found none). A cyg probe starts
  // on with no fn; a thread reaching its site while another one still runs the callback
  // waits for this, so no call slips past before the client could choose its fn.
  std::atomic<bool> announced{false};

  // A patchable-entry site carries two probes: the entry probe owns the code (CallSite,
  // strategy, lock) and `partner` names its exit probe (and the exit probe its owner).
  // The call is in place while either is active. kNone otherwise.
  std::uint32_t partner = 0xFFFFFFFFu;

  // Guarded by the code owner's `lock` (the toggle path).
  std::atomic<bool> lock{false};
  bool code_on = false;  // the site holds the active form
  Strategy strategy = Strategy::callpatch;
  CallSite cs;
  PatchHandle pending{};
  bool has_pending = false;
};

// The table: constant-initialised (zero) storage, so hooks that run before any
// constructor or after static destructors still find valid memory.
Probe& probe(ProbeId id) noexcept;
std::uint32_t published_count() noexcept;

// Invocation-path lookups (wait-free).
inline constexpr std::uint32_t kNone = 0xFFFFFFFFu;
inline constexpr std::uint32_t kKnownNone = 0xFFFFFFFEu;  // looked at, no probe
std::uint32_t find_site(std::uintptr_t site) noexcept;
std::uint32_t find_tail_exit(std::uintptr_t function) noexcept;

std::mutex& registry_mutex() noexcept;

// Registration, with registry_mutex() held. Fills the immutable fields from `proto`,
// prepares the site for its form and initial state, publishes the id and returns it (or
// kNone with *status set). The discovery callback is NOT called here: call
// announce(id) after releasing the mutex.
struct NewProbe {
  std::uintptr_t function = 0;
  std::uintptr_t site = 0;
  const char* name = "?";
  const char* object = "?";
  Kind kind = Kind::entry;
  Provider provider = Provider::manual;
  Form form = Form::call;
  bool start_active = false;
  // For Form::call whose current bytes are a NOP sled: the call target to write while
  // the site is still private (patchable / manual sites, single-threaded precondition).
  std::uintptr_t call_target = 0;
  void* tracepoint = nullptr;  // Form::tracepoint: the prepared tp::Tracepoint
  // Bytes written at site: 5 (a call), a tracepoint's jump_len() (5..8; 1 in trap mode).
  std::uint8_t site_len = 5;
  // Form::tracepoint: the jump lies this many bytes after site (past the function's
  // leading pushes; site stays the function's entry, the probe's key).
  std::uint8_t site_skip = 0;
};
std::uint32_t register_probe_locked(const NewProbe& np, Status* status) noexcept;
void set_tail_exit_locked(std::uintptr_t function, std::uint32_t id) noexcept;
// Remembers that a hook's return address is not a site we can toggle (e.g. an indirect
// `call *GOT` under -fno-plt), so later calls take the fast path.
void mark_no_probe_locked(std::uintptr_t site) noexcept;
// Adds the exit probe of a patchable entry site (return-address redirection); kNone on
// failure.
std::uint32_t register_exit_partner_locked(std::uint32_t entry_id, Status* status) noexcept;
void announce(ProbeId id) noexcept;

// True if `a` is one of the exit trampolines a redirected return-address slot may hold
// (trampoline_x86_64.S's, or tracepoint_exit_x86_64.S's for tracepoint probes): code that
// restores redirected slots (e.g. before unwinding) must accept both.
bool is_exit_trampoline(std::uintptr_t a) noexcept;

// Tracepoint provider (provider_tracepoint.cpp), with the code owner's lock held: makes a
// Form::tracepoint site's code on (install once, then enable) or off (disable).
Status tracepoint_set_code(Probe& owner, bool on) noexcept;
// Installs together (two waits for all) the not-yet-installed tracepoints among the code
// owners of `ids` that are about to be switched on; owners' locks held.
Status tracepoint_install_batch(const ProbeId* ids, std::size_t n) noexcept;
// Removes together (two waits for all) the installed tracepoints among the code owners of
// `ids` whose probes are all off; owners' locks held. `removed`: how many.
Status tracepoint_remove_batch(const ProbeId* ids, std::size_t n, std::size_t* removed) noexcept;
// pthread_cancel's unwind (unwind_interpose.cpp): a tracepoint on libgcc_s's
// _Unwind_ForcedUnwind writes the unwinding thread's redirected frames back. Made by the
// first call (the first pthread_cancel), which returns how that went; later calls return
// the same at once.
enum class ForcedUnwindHook : int { hooked = 1, no_libgcc = 2, refused = 3 };
ForcedUnwindHook hook_forced_unwind() noexcept;

// The wait of tracepoint installs and removals: membarrier SYNC_CORE where the kernel has
// it, else the Tmax wait (wait_ticks()).
WaitPolicy install_wait() noexcept;

// Per-thread state of the hooks: a recursion guard and the shadow stack of entry
// timestamps for exit probes. Initial-exec TLS: no allocation on first touch (the
// library is preloaded or linked, so its TLS is in the static block).
struct Frame {
  std::uintptr_t function;
  std::uint64_t tsc;
  std::uintptr_t sp;  // a stack address inside the entry hook: orders frames by depth
};
inline constexpr unsigned kShadowDepth = 256;
// A redirected return: the function's return-address slot, what it held, the exit probe
// and the entry TSC.
struct RetFrame {
  std::uintptr_t slot;
  std::uintptr_t ret;
  std::uint64_t tsc;
  std::uint32_t exit_id;
};
inline constexpr unsigned kRetDepth = 128;
// Two return-address slots at most this far apart are taken to lie on one stack: a record
// deeper than a new or returning frame by at most this much belongs to a frame longjmp
// skipped, and is dropped; one farther away to a frame on another stack (a coroutine's,
// swapcontext), still live, and is kept. Coroutine stacks of 64 KiB and more are told
// apart; a longjmp over more than this leaves its skipped records behind (their calls
// were never timed; a full table means later calls on the thread are not redirected).
inline constexpr std::uintptr_t kSameStackSpan = 32 * 1024;
struct ThreadState {
  unsigned in_hook;  // 1 inside a hook; plus the open quiet_begin() calls (probes.hpp)
  std::uint64_t exit_tsc;  // TSC at the start of the exit hook dispatching now (exit_hook_tsc)
  unsigned depth;  // <= kShadowDepth
  Frame frames[kShadowDepth];
  unsigned ret_depth;  // never exceeds kRetDepth: a full stack means "do not redirect"
  RetFrame rets[kRetDepth];
};
ThreadState& thread_state() noexcept;

// The trampoline entry used by patchable/manual sites (defined in trampoline_x86_64.S)
// and the far thunk reaching it from a site (one per 2 GiB neighbourhood).
std::uintptr_t entry_trampoline_near(std::uintptr_t site, Status* status) noexcept;

}  // namespace crossmod::probes::detail
