// x86-64 encodings the probe layer needs beyond engine/include/crossmod/x86.hpp: the
// compiler's NOP sleds, the tail-call form of an exit hook, PLT stubs and the far thunk.
// Thread safety: constants only.
#pragma once
#include <array>
#include <cstdint>

namespace crossmod::probes::enc {

inline constexpr std::uint8_t kNop1 = 0x90;          // NOP (GCC's patchable sled, N of them)
// Clang's 5-byte sled: NOP DWORD [rax+rax*1+disp8] (0F 1F 44 00 disp8), one instruction
// whatever disp8 is (it uses 08). The first four bytes identify it.
inline constexpr std::array<std::uint8_t, 4> kNop5Disp8Prefix = {0x0F, 0x1F, 0x44, 0x00};
inline constexpr std::uint8_t kJmpRel32 = 0xE9;      // JMP rel32 (a tail-called exit hook)
inline constexpr std::uint8_t kRet = 0xC3;           // RET: a deactivated tail-called hook
inline constexpr std::array<std::uint8_t, 4> kEndbr64 = {0xF3, 0x0F, 0x1E, 0xFA};
inline constexpr std::uint8_t kBndPrefix = 0xF2;     // MPX `bnd jmp` in old PLTs
// FF /4 with ModRM 00 100 101: JMP [rip + disp32], the PLT / .plt.got stub and our thunk.
inline constexpr std::array<std::uint8_t, 2> kJmpRipIndirect = {0xFF, 0x25};
inline constexpr std::size_t kThunkLen = 14;  // FF 25 00000000 <8-byte target>

}  // namespace crossmod::probes::enc
