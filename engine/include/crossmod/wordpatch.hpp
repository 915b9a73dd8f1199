// wordpatch: replace up to 8 bytes of live code that other threads may be executing, as
// in "Living on the Edge" (PLDI'16) Figures 4, 6 and 7.
//
// Constraints the caller guarantees (paper section 4): the code is writable (checked:
// the range must be registered in code_memory, else not_writable); layout equivalence
// (old and new bytes are each ONE instruction starting at addr, so no thread's PC is ever
// inside the range); disjoint updates (no two concurrent patches overlap the same bytes
// or their 8-byte store windows; two patchers on ONE site are detected: busy).
//
// Non-straddling patch ([addr, addr+len) inside one cache line): one atomic in-line store
// (x86::store_locked), neighbouring bytes intact.
// Straddling patch (S bytes before the line boundary, len-S after):
//   1. lock: claim the site in the engine's site table (busy if taken), store int3 on
//      byte 0; executors that reach the site now trap and wait in trap.hpp's handler;
//   2. wait W (no core may still hold a fetched copy of the old front line);
//   3. write the back part (bytes S..len-1, one store in the second line);
//   4. wait W (no core may still hold the old back line);
//   5. write the front part (bytes 0..S-1, one store replacing the int3); unlock.
// W is the injected WaitPolicy: Tmax ticks in production, any W in the harness, or
// membarrier SYNC_CORE.
//
// Thread safety: a WordPatcher may be shared by threads patching disjoint sites. All
// calls are noexcept and return Status; none allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "crossmod/status.hpp"
#include "crossmod/wait.hpp"

namespace crossmod {

// State of an asynchronous patch (start_patch .. finish_patch). Plain data owned by the
// caller; many may be outstanding from one thread.
struct PatchHandle {
  std::uint8_t* addr = nullptr;
  std::uint8_t bytes[8] = {};
  std::uint8_t len = 0;
  std::uint8_t split = 0;   // bytes before the line boundary, 0 if not straddling
  std::uint8_t phase = 0;   // 0 idle, 1 locked (int3 written), 2 back written, 3 done
  std::uint64_t stamp = 0;  // TSC when the current phase began
};

enum class InlineStore : std::uint8_t { locked, plain };

class WordPatcher {
 public:
  // Installs the SIGTRAP handler (trap::install) on first construction. If the policy is
  // sync_core, registers membarrier SYNC_CORE; init_status() reports a failure.
  explicit WordPatcher(WaitPolicy wait, InlineStore store = InlineStore::locked) noexcept;

  Status init_status() const noexcept { return init_; }
  const WaitPolicy& wait_policy() const noexcept { return wait_; }

  // Synchronous: returns when the new bytes are in place and the site is unlocked.
  // busy if another patcher holds the site; not_writable, bad_length, bad_address.
  Status patch(void* addr, std::span<const std::uint8_t> bytes) noexcept;

  // Asynchronous. start_patch performs step 1 (or the whole patch if not straddling, in
  // which case the handle is already done) and returns without waiting.
  Status start_patch(void* addr, std::span<const std::uint8_t> bytes, PatchHandle* h) noexcept;
  // Completes steps 2..5 for one handle, waiting only for what remains of W since its
  // stamp.
  Status finish_patch(PatchHandle* h) noexcept;
  // Completes many handles with the waits amortised: one wait, all back parts, one wait,
  // all front parts. Returns the first non-ok status; every handle is still completed.
  Status finish_patches(std::span<PatchHandle> hs) noexcept;

 private:
  WaitPolicy wait_;
  InlineStore store_;
  Status init_ = Status::ok;
};

// Characterisation only (the harness's `naive` positive control): writes the front part
// then, after `between`, the back part, with no int3 lock. NOT safe for live code.
Status naive_split_write(void* addr, std::span<const std::uint8_t> bytes,
                         const WaitPolicy& between) noexcept;

}  // namespace crossmod
