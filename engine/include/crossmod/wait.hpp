// The wait between the steps of the straddling protocol, injected into a WordPatcher at
// construction: TSC ticks (Tmax from config in production, any W in the harness), the
// kernel's membarrier SYNC_CORE, or none (characterisation only).
// Thread safety: WaitPolicy is a value; wait functions are thread-safe.
#pragma once
#include <cstdint>
#include <system_error>

#include "crossmod/status.hpp"

namespace crossmod {

struct WaitPolicy {
  enum class Kind : std::uint8_t { none, ticks, sync_core };
  Kind kind = Kind::ticks;
  std::uint64_t ticks = 0;

  static constexpr WaitPolicy None() noexcept { return {Kind::none, 0}; }
  static constexpr WaitPolicy Ticks(std::uint64_t t) noexcept { return {Kind::ticks, t}; }
  static constexpr WaitPolicy SyncCore() noexcept { return {Kind::sync_core, 0}; }
};

// Registers this process for MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE once (idempotent,
// thread-safe). unsupported when the kernel lacks the command; os_error with *ec otherwise.
Status sync_core_register(std::error_code* ec = nullptr) noexcept;

// Performs the wait that starts at TSC value `start`: for ticks, spins until
// rdtsc() - start >= ticks; for sync_core, issues membarrier SYNC_CORE (start unused);
// for none, returns at once. unsupported if sync_core is not registered/available.
Status wait_from(const WaitPolicy& policy, std::uint64_t start) noexcept;

}  // namespace crossmod
