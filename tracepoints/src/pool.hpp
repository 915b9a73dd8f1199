// The trampoline pool (pool.cpp): constrained entry slots and relocated bodies.
// Thread safety: reserve() and pool_stats() take a mutex (install path only; never on an
// invocation path). Memory is never returned: trampolines are immortal.
#pragma once
#include <cstddef>
#include <cstdint>
#include <system_error>

#include "crossmod/tracepoint.hpp"

namespace crossmod::tp::detail {

// A rel32 (as the signed distance from the end of the 5-byte jump) with byte b-1 == 0xCC
// for every bit b (1..4) of boundary_mask. In the domain s = rel + 2^31 (unsigned order =
// signed order) the constraint is a fixed (mask, value) pair over the 4 bytes.
struct RelConstraint {
  std::uint32_t mask = 0;
  std::uint32_t value = 0;
  static RelConstraint from_boundaries(std::uint8_t boundary_mask) noexcept;
  bool ok(std::int64_t rel) const noexcept;
};
// Smallest s' >= s with (s' & mask) == value, or UINT64_MAX; s in [0, 2^32).
std::uint64_t next_ge(std::uint64_t s, std::uint32_t mask, std::uint32_t value) noexcept;
// Largest s' <= s with (s' & mask) == value, or UINT64_MAX.
std::uint64_t prev_le(std::uint64_t s, std::uint32_t mask, std::uint32_t value) noexcept;

// Whether any address an entry slot may take (mappable: above mmap_min_addr, below the
// 47-bit user top) has a rel32 from addr+5 satisfying the boundary constraint. False:
// reserve() with want_entry cannot succeed, whatever is mapped (python3.11 is not PIE, at
// 4 MiB: a boundary at byte 4 asks for rel32 in [-832, -816] MiB, below address 0; 359 of
// its 939 Py* functions, 149 when 0x2E prefixes may shift the rel32: prefixed_mask).
bool entry_possible(std::uintptr_t addr, std::uint8_t boundary_mask) noexcept;

// The jump `2E`*prefix + `E9 rel32` at addr is, for the constraint, the 5-byte jmp at
// addr+prefix: its boundary mask is the replaced boundaries (bits 1..7, offsets from addr)
// shifted down by prefix. False when a boundary sits on a prefix or the opcode (offsets
// 1..prefix) or beyond the rel32 (cannot come from analyze_head).
bool prefixed_mask(std::uint8_t boundary_mask, unsigned prefix, std::uint8_t* rel_mask) noexcept;
// entry_possible() for that jump: reserve(addr + prefix, *rel_mask, ...) can succeed.
bool entry_possible_prefixed(std::uintptr_t addr, std::uint8_t boundary_mask,
                             unsigned prefix) noexcept;

struct Reservation {
  std::uintptr_t entry = 0;   // the jump at addr targets it (0: no jump, trap mode)
  std::size_t entry_len = 0;  // entry slot: 5 (jmp rel32 to body) or 14 (jmp [rip]; abs64);
                              // 0: direct body
  bool direct = false;        // the body is at entry (after a pad NOP of body - entry bytes)
  std::uint8_t* body = nullptr;
};

// Reserves `body_len` bytes of body within rel32 reach of addr (bodies hold RIP-relative
// operands relocated from addr), 8-aligned so that its first 8 bytes (the toggle slot)
// lie in one cache line, and, with want_entry, the target of a jmp rel32 ending at addr+5
// whose rel32 satisfies the boundary constraint:
//  - direct: the body itself sits at the constrained address e (in an entry page), after
//    one NOP of (-e)&7 bytes; the jump lands on it (entry = e, body = e + pad);
//  - else (no such place found cheaply): a 5- or 14-byte entry slot at e, written
//    (`jmp body`) before return, and a 16-aligned body in an arena.
// With want_entry false only an arena body is reserved (trap-mode tracepoints).
// no_trampoline_space or os_error.
Status reserve(std::uintptr_t addr, std::uint8_t boundary_mask, std::size_t body_len,
               bool want_entry, Reservation* out, std::error_code* ec) noexcept;
// Returns unused tail bytes of the body reservation at `body` (bodies are reserved with
// an upper bound, then trimmed to what relocation emitted): the most recent one of an
// arena, or any direct body in an entry page (its tail bytes become free for later slots).
void trim_body(std::uint8_t* body, std::size_t reserved, std::size_t used) noexcept;
// Whether `at` lies in an entry page and the pool holds it (an entry slot, a direct body
// or its pad); for tests.
bool entry_page_byte_used(std::uintptr_t at) noexcept;
// How many times reserve() has read /proc/self/maps (it keeps a snapshot; for tests).
std::size_t maps_reads() noexcept;

}  // namespace crossmod::tp::detail
