// The reference detector's only machine code: TSC reads, the patcher's stores, and the
// executor loop (assembly, so that what an executor does between two calls of the site is
// exactly what is written here and no compiler version can add to it).
// Kept apart from the engine's x86.hpp on purpose: the reference must not share code
// with the implementation it checks. Signal safety: every function here is
// async-signal-safe (no memory but its arguments, no locks).
#pragma once
#include <cstddef>
#include <cstdint>

namespace crossmod::harness::reference {

// Opcodes the reference writes or checks, named once (SDM Vol 2, opcode map A.3).
inline constexpr std::uint8_t kOpInt3 = 0xCC;
inline constexpr std::uint8_t kOpCallRel32 = 0xE8;
inline constexpr std::uint8_t kOpRet = 0xC3;
inline constexpr std::uint8_t kOpMovEaxImm32 = 0xB8;
inline constexpr std::uint8_t kOpOperandSize = 0x66;   // prefix
// PUSH ES: invalid in 64-bit mode (#UD), one byte, so a jump landing on any byte of a
// page filled with it faults at once. Deliberately not the harness's 0x0E filler.
inline constexpr std::uint8_t kOpInvalidFill = 0x06;

inline std::uint64_t rdtsc() {
  std::uint32_t lo, hi;
  asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

// TSC read after every earlier store is globally visible: MFENCE drains the store buffer
// (SDM Vol 3A 9.2.2), and LFENCE keeps RDTSC from executing before MFENCE completes (SDM
// Vol 2B "RDTSC"; on AMD LFENCE is dispatch-serialising under Linux's default MSR setting).
// The protocol's W is counted from here, i.e. from when other cores can see the store.
inline std::uint64_t rdtsc_after_stores() {
  std::uint32_t lo, hi;
  asm volatile("mfence\n\tlfence\n\trdtsc" : "=a"(lo), "=d"(hi) : : "memory");
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

inline void cpu_pause() { asm volatile("pause" ::: "memory"); }

inline void spin_until(std::uint64_t tsc_deadline) {
  while (static_cast<std::int64_t>(rdtsc() - tsc_deadline) < 0) cpu_pause();
}

// One plain MOV of 1 byte: the int3 lock and the front byte.
inline void store1(std::uint8_t* dst, std::uint8_t v) {
  asm volatile("movb %1, (%0)" : : "r"(dst), "q"(v) : "memory");
}
// One plain MOV of 4 bytes at any alignment: the back part (site bytes 1..4). When it
// crosses the line boundary (S >= 2) it is a split store whose halves may become visible
// separately; that is harmless because byte 0 holds the int3 while it lands.
inline void store4(std::uint8_t* dst, std::uint32_t v) {
  asm volatile("movl %1, (%0)" : : "r"(dst), "r"(v) : "memory");
}
// One plain MOV of an aligned quadword: atomic (SDM Vol 3A 9.1.1). The test-only torn
// mode writes a whole half of the site with it, so no other intermediate mix appears.
inline void store8_aligned(std::uint64_t* dst, std::uint64_t v) {
  asm volatile("movq %1, (%0)" : : "r"(dst), "r"(v) : "memory");
}
inline std::uint8_t load1(const std::uint8_t* p) {
  std::uint8_t v;
  asm volatile("movb (%1), %0" : "=q"(v) : "r"(p) : "memory");
  return v;
}

// Cache line size from CPUID.01H:EBX[15:8] x 8 (SDM Vol 2A "CPUID"); 64 when a hypervisor
// reports nothing usable.
unsigned line_size();

// Arguments and results of one executor loop. The offsets are used by the assembly.
struct LoopArgs {
  std::uintptr_t entry = 0;        // +0   address the loop calls (the site itself)
  std::uint64_t* published = nullptr;  // +8   the executor's own line: (executions << 1) | last eax
  const volatile std::uint8_t* stop = nullptr;  // +16  non-zero: leave the loop
  std::uint64_t loop_rsp = 0;      // +24  written by the loop: RSP inside it (for recovery)
  std::uint64_t executions = 0;    // +32  written on exit: completed calls
  std::uint64_t state_a = 0;       // +40  written on exit: calls that returned 1 (the call ran)
};
static_assert(offsetof(LoopArgs, entry) == 0 && offsetof(LoopArgs, published) == 8 &&
              offsetof(LoopArgs, stop) == 16 && offsetof(LoopArgs, loop_rsp) == 24 &&
              offsetof(LoopArgs, executions) == 32 && offsetof(LoopArgs, state_a) == 40,
              "offsets used by the assembly in ref_x86.cpp");

// Executions between two loads of the stop flag; see ref_x86.cpp.
inline constexpr unsigned kStopCheckEvery = 64;

extern "C" {
// Calls args->entry with eax = 0 until *args->stop (checked every kStopCheckEvery calls),
// counting calls in registers and publishing (executions << 1 | eax) after every call. Callee-saved registers hold the counters, so a
// signal handler that resumes at crossmod_ref_recover with RSP = args->loop_rsp (and every
// other register as the fault left it) continues the loop without losing a count.
void crossmod_ref_exec_loop(LoopArgs* args);
extern const char crossmod_ref_recover[];
}

}  // namespace crossmod::harness::reference
