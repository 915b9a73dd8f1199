// callpatch: wait-free activate/deactivate of a 5-byte `call rel32` probe site, changing
// exactly one cache line per toggle, for every split of the site across a line boundary.
//
//   split 0 (inside one line)  active  E8 r0 r1 r2 r3      inactive  0F 1F 44 00 00
//                              one in-line store of all 5 bytes.
//   split 1 (E8 | r0 r1 r2 r3) active  E8 <rel32 target>   inactive  E8 <rel32 ret-tramp>
//                              only the back line changes: rel32 retargeted to a `ret`
//                              trampoline allocated within rel32 reach (shared by sites).
//   split 2, 3, 4              active  E8 r0 ...           inactive  EB 03 ...
//                              only the first two bytes (in the front line) change: a
//                              short jump over the rest of the site.
// No int3, no wait: each toggle is a single atomic store into a single line, so a
// concurrent fetch sees either the old or the new line, and both combinations decode to
// a complete valid instruction.
//
// Thread safety: one thread toggles a given CallSite at a time (disjoint updates); other
// threads may execute the site concurrently. Calls are noexcept, never allocate except
// prepare() (trampoline page, first use per 2 GiB region).
#pragma once
#include <array>
#include <cstdint>

#include "crossmod/status.hpp"

namespace crossmod {

class CallSite {
 public:
  CallSite() noexcept = default;

  // Validates a site at `addr` whose call targets `target`: the current bytes must be the
  // active call to `target` or this split's inactive form (else bad_bytes); the range
  // must be writable (not_writable); rel32 must reach (out_of_range). Allocates the ret
  // trampoline for split 1.
  static Status prepare(void* addr, const void* target, CallSite* out) noexcept;

  Status activate() noexcept;
  Status deactivate() noexcept;

  unsigned split() const noexcept { return split_; }
  bool active() const noexcept;
  std::uint8_t* address() const noexcept { return addr_; }
  const std::array<std::uint8_t, 5>& active_bytes() const noexcept { return active_; }
  const std::array<std::uint8_t, 5>& inactive_bytes() const noexcept { return inactive_; }

 private:
  std::uint8_t* addr_ = nullptr;
  unsigned split_ = 0;
  std::array<std::uint8_t, 5> active_{};
  std::array<std::uint8_t, 5> inactive_{};
};

}  // namespace crossmod
