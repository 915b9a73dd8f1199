// x86-64 encodings the tracepoint trampolines are built from: the one place in this
// library with opcode bytes (SDM Vol 2 references beside each). Every emitter range-checks
// a rel32 and reports false instead of truncating.
// Thread safety: pure functions on caller buffers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace crossmod::tp::enc {

inline constexpr std::uint8_t kJmpRel32 = 0xE9;     // JMP rel32
inline constexpr std::uint8_t kJccRel8Base = 0x70;  // Jcc rel8: 70+cc
inline constexpr std::uint8_t kTwoByte = 0x0F;
inline constexpr std::uint8_t kJccRel32Base = 0x80;  // Jcc rel32: 0F 80+cc
inline constexpr std::uint8_t kPushRax = 0x50;
inline constexpr std::uint8_t kPopRax = 0x58;
inline constexpr std::uint8_t kInt3 = 0xCC;
inline constexpr std::uint8_t kNop = 0x90;
// CS segment override: ignored in 64-bit mode (SDM Vol 1 3.3.7.1); pads a jmp rel32 so
// that its rel32 starts later (tracepoint.hpp, Analysis).
inline constexpr std::uint8_t kCsPrefix = 0x2E;
// JMP [RIP+0] followed by the 8-byte absolute target (FF /4, ModRM 00 100 101).
inline constexpr std::uint8_t kJmpRipIndirect[6] = {0xFF, 0x25, 0, 0, 0, 0};
inline constexpr std::size_t kJmpAbsLen = 14;
// CALL [RIP+disp32] (FF /2, ModRM 00 010 101); disp32 follows.
inline constexpr std::uint8_t kCallRipIndirect[2] = {0xFF, 0x15};
// MOV RAX, imm64 (REX.W B8+r).
inline constexpr std::uint8_t kMovRaxImm64[2] = {0x48, 0xB8};
// XCHG [RSP], RAX (REX.W 87 /r, ModRM 00 000 100, SIB 24).
inline constexpr std::uint8_t kXchgRspRax[4] = {0x48, 0x87, 0x04, 0x24};
// LEA RSP, [RSP-128] / [RSP+128]: step over the System V red zone (ABI 3.2.2) without
// touching flags. disp8 -128 fits; +128 needs disp32.
inline constexpr std::uint8_t kLeaRspMinus128[5] = {0x48, 0x8D, 0x64, 0x24, 0x80};
inline constexpr std::uint8_t kLeaRspPlus128[8] = {0x48, 0x8D, 0xA4, 0x24, 0x80, 0, 0, 0};
inline constexpr std::size_t kRel32JmpLen = 5;

inline bool fits_rel32(std::int64_t d) noexcept { return d >= INT32_MIN && d <= INT32_MAX; }
inline std::int64_t rel_from(std::uintptr_t next_ip, std::uintptr_t target) noexcept {
  return static_cast<std::int64_t>(target - next_ip);
}
inline void put32(std::uint8_t* p, std::int64_t v) noexcept {
  const auto u = static_cast<std::uint32_t>(static_cast<std::int32_t>(v));
  std::memcpy(p, &u, 4);
}
inline void put64(std::uint8_t* p, std::uint64_t v) noexcept { std::memcpy(p, &v, 8); }

// `jmp rel32` at `at`; false if out of reach.
inline bool jmp_rel32(std::uint8_t* p, std::uintptr_t at, std::uintptr_t target) noexcept {
  const std::int64_t d = rel_from(at + kRel32JmpLen, target);
  if (!fits_rel32(d)) return false;
  p[0] = kJmpRel32;
  put32(p + 1, d);
  return true;
}

// A jump that always reaches: rel32 when it fits, else JMP [RIP+0] + abs64.
// Returns the bytes written (5 or 14).
inline std::size_t jmp_any(std::uint8_t* p, std::uintptr_t at, std::uintptr_t target) noexcept {
  if (jmp_rel32(p, at, target)) return kRel32JmpLen;
  std::memcpy(p, kJmpRipIndirect, sizeof kJmpRipIndirect);
  put64(p + sizeof kJmpRipIndirect, target);
  return kJmpAbsLen;
}

}  // namespace crossmod::tp::enc
