// An independent minimal reference detector for torn cross-modification: its own site
// layout, fault handler, executor loop (ref_x86.cpp) and patcher, sharing no code with
// the engine's patch path or the harness's cell/executor/site. `crossmod crosscheck` runs
// it interleaved with harness cells to check the harness's sensitivity (issue 9, item 7).
// Thread safety: run_reference() is called from one thread of a single-threaded process
// (it forks); each run happens in a forked child watched by a deadline.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace crossmod::harness::reference {

enum class Mode {
  // int3 on byte 0; wait W; bytes 1..4 (one 4-byte store); wait W; byte 0; dwell D.
  protocol,
  // Test-only: the patcher writes a torn mix on purpose and holds it until an executor
  // faults on it (at most a few seconds), then restores A and dwells (even toggles: A
  // front + B back, a call into the PROT_NONE reservation: SIGSEGV; odd toggles: B front
  // + A back, #UD: SIGILL). Every toggle tears unless no executor runs for seconds.
  selftest_torn,
};

struct Spec {
  std::uint64_t wait_ticks = 0;
  unsigned straddle = 4;             // S in 1..4 bytes before the line boundary
  std::uint64_t toggles = 100000;
  std::uint64_t dwell_ticks = 5000;  // explicit; the reference never adapts it
  unsigned executors = 1;
  double watchdog_s = 60;
  Mode mode = Mode::protocol;
  // false: the loop calls the site itself. true: `xor eax,eax` (31 C0) goes in the two
  // bytes before the site and the loop calls those, so the site is reached by falling
  // through, as the harness's cells did until 2026-11-27 (crosscheck --reference-entry).
  bool fall_through = false;
  // OS CPU numbers; empty: the patcher takes the first CPU of this process's affinity
  // mask and the executors the following ones (wrapping, with a warning).
  int patcher_cpu = -1;
  std::vector<int> executor_cpus;
};

struct Result {
  std::string outcome = "ok";        // ok | crash | hang | error
  std::string note;                  // why, for anything but ok
  std::string warning;               // oversubscription
  std::uint64_t toggles = 0;
  std::uint64_t exposed = 0;         // toggles exposed (see exposure rule in the .cpp)
  std::uint64_t tears = 0;           // toggles during which >= 1 executor faulted
  std::uint64_t executions = 0;      // completed calls of the site
  std::uint64_t state_a = 0, state_b = 0;
  std::uint64_t traps = 0;           // int3 hits on the locked site (waited, re-executed)
  std::uint64_t sigill = 0, sigsegv = 0, sigbus = 0, stray_trap = 0;  // faults by class
  double duration_s = 0;
  int patcher_cpu = -1;
  std::vector<int> executor_cpus;
};

// Runs one reference run in a forked child. Never throws for a failing run: a crash, a
// hang or a setup refusal is an outcome.
Result run_reference(const Spec& spec);

// The two states of the site: A = call rel32 to the stub (mov eax,1; ret), with every
// rel32 byte invalid in 64-bit mode; B = 66 66 66 66 90. The same bytes the harness
// toggles, so the two detectors differ only in how they toggle and watch them.
inline constexpr std::array<std::uint8_t, 5> kStateA = {0xE8, 0x0E, 0x1E, 0x16, 0x06};
inline constexpr std::array<std::uint8_t, 5> kStateB = {0x66, 0x66, 0x66, 0x66, 0x90};

// The setup check, exposed for tests: for split S (1..4) of A and B placed at site_addr,
// "" when "B front + A back" is #UD at its first opcode byte and "A front + B back" is a
// call whose 6-byte target lies in [none_begin, none_end) (reserved PROT_NONE); else why.
std::string check_torn_mixes(unsigned straddle, std::uintptr_t site_addr,
                             std::uintptr_t none_begin, std::uintptr_t none_end);

}  // namespace crossmod::harness::reference
