// x86-64 encodings and CPU primitives: the one place where the engine's opcodes, CPUID,
// RDTSC and the in-line store instructions live. No bare hex opcodes appear in engine
// logic outside this file and src/x86.cpp. Encodings used only to build sites for tests
// and measurements live in engine/testsupport (crossmod/testsupport/site_code.hpp).
// Thread safety: all functions are thread-safe; rdtsc/pause/store_* are async-signal-safe.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "crossmod/status.hpp"

namespace crossmod::x86 {

inline constexpr std::uint8_t kInt3 = 0xCC;       // INT3, SDM Vol 2A "INT n/INTO/INT3"
inline constexpr std::uint8_t kCallRel32 = 0xE8;  // CALL rel32
inline constexpr std::uint8_t kJmpRel8 = 0xEB;    // JMP rel8
inline constexpr std::uint8_t kRet = 0xC3;        // RET (near)
// 0x0E (PUSH CS) is invalid in 64-bit mode: any jump into a 0x0E-filled page faults with
// SIGILL at the first byte it lands on (SDM Vol 2 Appendix A, opcode map, "i64").
inline constexpr std::uint8_t kInvalid64 = 0x0E;
inline constexpr std::size_t kCallLen = 5;
inline constexpr std::size_t kMaxPatchLen = 8;
// The canonical 5-byte NOP (SDM Vol 2B "NOP", recommended multi-byte sequence).
inline constexpr std::array<std::uint8_t, 5> kNop5 = {0x0F, 0x1F, 0x44, 0x00, 0x00};

// Encodes `call rel32` at address `at` targeting `target`. out_of_range if the
// displacement does not fit in a signed 32-bit value (never truncates).
Status encode_call(std::uintptr_t at, std::uintptr_t target,
                   std::array<std::uint8_t, 5>* out) noexcept;
// Decodes `call rel32`; false if bytes[0] is not kCallRel32.
bool decode_call(const std::uint8_t* bytes, std::uintptr_t at, std::uintptr_t* target) noexcept;
// `jmp rel8` over the rest of a 5-byte site: EB 03.
std::array<std::uint8_t, 2> short_jump_over_call() noexcept;

// Cache-line size from CPUID leaf 1 EBX[15:8]*8 (CLFLUSH line size); 64 if CPUID
// reports 0. Never returns 0. Cached after the first call.
unsigned cache_line_size() noexcept;

// Time-stamp counter. RDTSC is not ordered with surrounding loads/stores; rdtscp_ordered
// waits for prior instructions (SDM Vol 2B "RDTSCP").
inline std::uint64_t rdtsc() noexcept {
  std::uint32_t lo, hi;
  asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
inline std::uint64_t rdtscp_ordered() noexcept {
  std::uint32_t lo, hi, aux;
  asm volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux)::"memory");
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
inline void pause() noexcept { asm volatile("pause" ::: "memory"); }
// Spins until rdtsc() - start >= ticks.
void spin_ticks_from(std::uint64_t start, std::uint64_t ticks) noexcept;

// In-line stores. Both replace `bytes` at `dst` and leave neighbouring bytes intact by
// writing an 8-byte window that contains [dst, dst+len) and lies inside ONE cache line
// (bad_address if no such window exists, bad_length if len is 0 or over 8).
//  - store_locked: LOCK CMPXCHG on the window; atomic on Intel and AMD for any window in
//    one line (SDM Vol 3A 9.1.2.2; AMD APM Vol 2 7.3.2). The engine's default.
//  - store_plain: one unaligned MOV of the window. Intel documents unaligned accesses
//    that fit in a line as atomic (SDM Vol 3A 9.1.1); AMD only those inside an aligned
//    quadword (APM Vol 2 7.3.2). On a Zen 4 guest a plain store across a quadword boundary
//    inside a line was fetched torn (once in 1.69M exposed toggles; the `aligned` control
//    used it until 2026-11-24 and now uses store_locked, harness/src/cell/protocol.cpp).
Status store_locked(std::uint8_t* dst, std::span<const std::uint8_t> bytes) noexcept;
Status store_plain(std::uint8_t* dst, std::span<const std::uint8_t> bytes) noexcept;
// Single-byte store (atomic on every x86).
void store_byte(std::uint8_t* dst, std::uint8_t value) noexcept;

// How many of the `len` bytes at addr lie before the next line boundary when the range
// crosses it (1..len-1); 0 when [addr, addr+len) is inside one line.
unsigned straddle_split(std::uintptr_t addr, std::size_t len) noexcept;

}  // namespace crossmod::x86
