// The bytes of an executable probe site and the one routine that lays them out:
//   entry:  31 C0            xor eax, eax
//   site:   <5 bytes>        state A (call rel32 -> stub) or state B (a 5-byte NOP)
//           C3               ret
//   stub:   B8 01 00 00 00   mov eax, 1      (how an executor tells that the call ran)
//           C3               ret
// with x86::kInvalid64 filler around both, so stray execution faults. Used by the
// harness's StressSite, the engine's tests and the bench suites; not part of the
// engine's public API (these encodings exist only to build sites to patch).
// Thread safety: the writers touch only the bytes they are given; callers make them
// writable and keep executors off them while writing. Not async-signal-safe.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "crossmod/x86.hpp"

namespace crossmod::testsupport {

inline constexpr std::array<std::uint8_t, 2> kXorEaxEax = {0x31, 0xC0};
inline constexpr std::uint8_t kMovEaxImm32 = 0xB8;  // MOV r32, imm32 (+rd, eax = 0)
inline constexpr std::array<std::uint8_t, 2> kUd2 = {0x0F, 0x0B};
// mov eax, 1; ret: the call target of state A.
inline constexpr std::array<std::uint8_t, 6> kReturnOneStub = {kMovEaxImm32, 1, 0, 0, 0,
                                                               x86::kRet};
// A 5-byte NOP whose length is decided by its LAST byte: four operand-size prefixes and
// 0x90. Every torn mix of it with a call is #UD at the first instruction, which the
// canonical x86::kNop5 cannot give at S = 3, 4 (see stress_site.hpp).
inline constexpr std::array<std::uint8_t, 5> kNop5Prefixed = {0x66, 0x66, 0x66, 0x66, 0x90};
// Single-byte opcodes that are invalid in 64-bit mode (SDM Vol 2 Appendix A, "i64").
// 0xC4/0xC5 are excluded: in 64-bit mode they are VEX prefixes.
inline constexpr std::array<std::uint8_t, 20> kInvalidIn64 = {
    0x06, 0x07, 0x0E, 0x16, 0x17, 0x1E, 0x1F, 0x27, 0x2F, 0x37,
    0x3F, 0x60, 0x61, 0x62, 0x82, 0x9A, 0xCE, 0xD4, 0xD5, 0xD6};

using Bytes5 = std::array<std::uint8_t, 5>;
// The entry's signature: returns 1 when the call ran (state A), 0 when the NOP ran.
using EntryFn = int (*)();

// Bytes the entry puts before the site.
inline constexpr std::size_t kEntryPrologueLen = kXorEaxEax.size();

// Fills `bytes` with x86::kInvalid64.
void fill_invalid(std::span<std::uint8_t> bytes) noexcept;
// Writes the entry around `site`: the prologue at site - kEntryPrologueLen, `state` at
// site, `ret` after it. [site - 2, site + 6) must be writable. Returns the entry.
EntryFn write_entry(std::uint8_t* site, const Bytes5& state) noexcept;
// Writes kReturnOneStub at `at` (6 writable bytes).
void write_stub(std::uint8_t* at) noexcept;
// The entry of a site laid out by write_entry.
EntryFn entry_of(const std::uint8_t* site) noexcept;

}  // namespace crossmod::testsupport
