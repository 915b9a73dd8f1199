// The engine's SIGTRAP handler. Installed once per process; recognises the int3 of a site
// that a WordPatcher has locked (lock-free site table), waits until that site is unlocked
// and re-executes it. Any other trap is passed to the handler that was installed before
// (SA_SIGINFO or plain handler; SIG_DFL/SIG_IGN are re-raised with the default action).
// Thread safety: install() is thread-safe and idempotent. The handler is async-signal-
// safe: lock-free atomics only, errno saved and restored.
#pragma once
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

}  // namespace crossmod::trap
