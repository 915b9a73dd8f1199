// Engine-internal x86 helpers that are not part of the public API: raw CPUID. Defined in
// x86.cpp so that every inline asm and intrinsic stays in one file.
// Thread safety: thread-safe and async-signal-safe (CPUID has no side effects).
#pragma once
#include <cstdint>

namespace crossmod::x86::detail {

struct CpuidRegs {
  std::uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// CPUID with EAX = leaf, ECX = subleaf. Leaves above the reported maximum return what
// the CPU returns (Intel: data of the highest basic leaf), so callers check the maximum.
CpuidRegs cpuid(std::uint32_t leaf, std::uint32_t subleaf = 0) noexcept;

}  // namespace crossmod::x86::detail
