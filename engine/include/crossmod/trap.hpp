// The engine's SIGTRAP handler. Installed once per process; recognises the int3 of a site
// that a WordPatcher has locked (lock-free site table), waits until that site is unlocked
// and re-executes it. Any other trap is passed to the handler that was installed before
// (SA_SIGINFO or plain handler; SIG_DFL/SIG_IGN are re-raised with the default action).
// Thread safety: install() is thread-safe and idempotent. The handler is async-signal-
// safe: lock-free atomics only, errno saved and restored.
#pragma once
#include <cstddef>
#include <cstdint>
#include <system_error>

#include "crossmod/status.hpp"

namespace crossmod::trap {

// Installs the handler (SA_SIGINFO | SA_ONSTACK | SA_RESTART), remembering the previous
// SIGTRAP disposition for chaining. A program that wants its own SIGTRAP handler to see
// foreign traps installs it BEFORE the first install() (WordPatcher calls install()).
Status install(std::error_code* ec = nullptr) noexcept;
bool installed() noexcept;

// Counters since process start (relaxed atomics; for the harness and tests).
struct Stats {
  std::uint64_t locked_hits;  // trap at a locked site: waited and re-executed
  std::uint64_t late_hits;    // trap at an engine site already unlocked (int3 fetched
                              // just before the unlock, or a stale fetch): re-executed
  std::uint64_t chained;      // any other trap, passed to the previous handler
};
Stats stats() noexcept;

// ---- Redirect sites (tracepoints: "jump with embedded int3") ----------------------------
// A third kind of site, separate from wordpatch's locked sites: an int3 at `from` sends
// the trapping thread to `to` (RIP = to) instead of re-executing `from`. The tracepoints
// library registers one per replaced instruction boundary, `to` being that instruction's
// out-of-line copy, so a thread that was about to execute a replaced instruction (it was
// preempted there, or a branch lands there) runs the copy and continues after it.
//
// Storage is a static open-addressed table of kRedirectSlots entries; an address, once
// registered, keeps its slot for the life of the process (a late trap after removal still
// finds it). An address probes at most kRedirectProbe slots from its hash: a set that
// finds none free there fails with table_full at once (it used to scan the whole table, and
// near full every set and every lookup cost ~190,000 ticks: java under --trace '*' spent
// 65% of its CPU toggling). The handler's lookup is lock-free and allocation-free.
// Concurrency: redirect_set/redirect_clear are thread-safe (lock-free CAS) and
// async-signal-safe; the caller must keep `to` executable for as long as any thread may
// still trap at `from` or run the code at `to` (tracepoints never free trampolines).
// Redirect sites are consulted AFTER wordpatch's locked sites. Order: redirect_set()
// before writing the int3 (it ends with a full barrier), restore the byte before
// redirect_clear(). The table is 12 MiB of zero-initialised static storage, of which only
// the pages of blocks in use are ever touched. 2^19 slots: the probes layer's 65,536
// probes, all tracepoints of up to 5 replaced instructions each, fill at most 62.5% of it
// (2^16 slots, until 25 Nov, held ~25,000 tracepoints).
inline constexpr std::size_t kRedirectSlots = std::size_t{1} << 19;
inline constexpr std::size_t kRedirectProbe = 4096;

// Registers or retargets `from` -> `to` (both non-null): ok, bad_address or table_full.
Status redirect_set(std::uintptr_t from, std::uintptr_t to) noexcept;
// Disables the redirect at `from` (the slot keeps the address; a later trap there whose
// byte is no longer int3 re-executes `from`, one that still sees int3 is chained).
// not_found if `from` was never registered.
Status redirect_clear(std::uintptr_t from) noexcept;
// The current target of `from`, 0 when absent or cleared.
std::uintptr_t redirect_target(std::uintptr_t from) noexcept;

struct RedirectStats {
  std::uint64_t redirected;  // int3 at a redirect site: RIP set to its target
  std::uint64_t reexecuted;  // cleared site whose int3 is gone: re-executed in place
};
RedirectStats redirect_stats() noexcept;

}  // namespace crossmod::trap
