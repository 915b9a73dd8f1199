// Engine-internal: the lock-free table of straddling sites shared by wordpatch (which
// locks and unlocks sites) and the SIGTRAP handler in trap.cpp (which looks them up).
// Thread safety: all functions lock-free; site_state() and trap_waiters() are
// async-signal-safe. Defined in trap.cpp.
#pragma once
#include <cstdint>

#include "crossmod/status.hpp"

namespace crossmod::detail {

enum class SiteState : std::uint8_t { absent = 0, locked = 1, unlocked = 2 };

// Claims `addr` for one patcher: ok (now locked), busy (another patcher holds it), or
// table_full. A slot, once given to an address, keeps it for the life of the process so
// that a late trap at the address is still recognised after the unlock.
Status site_lock(std::uintptr_t addr) noexcept;
// Marks a site locked by site_lock() as unlocked (release).
void site_unlock(std::uintptr_t addr) noexcept;
SiteState site_state(std::uintptr_t addr) noexcept;

// Number of threads currently waiting in the SIGTRAP handler for a locked site (tests use
// it to know an executor is parked before they unlock).
std::uint64_t trap_waiters() noexcept;

}  // namespace crossmod::detail
