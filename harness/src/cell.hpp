// One cell of a sweep: protocol x wait x straddle x executors x placement x rep. The
// sweep (sweep.cpp) builds CellSpecs; the runner (cell.cpp) runs each in a forked child
// with a watchdog and returns a CellResult even when the child crashes or hangs.
// Thread safety: run_cell is called from one thread; not async-signal-safe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "topology.hpp"

namespace crossmod::harness {

enum class Protocol {
  wordpatch,   // engine WordPatcher, WaitPolicy::Ticks(wait_ticks)
  naive,       // engine naive_split_write: front then back, no int3 (positive control)
  callpatch,   // engine CallSite activate/deactivate (must never fail)
  aligned,     // site inside one line at site_offset, one plain store (negative control)
  sync_core,   // engine WordPatcher, WaitPolicy::SyncCore()
  // Test-only, hidden from --help: exercise the watchdog and crash classification.
  selftest_hang,    // the child never finishes: must be recorded as `hang`
  selftest_crash,   // the child aborts: must be recorded as `crash`
  selftest_torn,    // the patcher deliberately writes a torn mix and restores it every
                    // toggle (even toggles A front + B back -> SIGSEGV in the PROT_NONE
                    // window, odd toggles B front + A back -> SIGILL): faults are certain
                    // and must be counted
};
// Every protocol, in CLI order; to_string gives the one spelling used everywhere (CLI,
// presets, CSV).
inline constexpr Protocol kAllProtocols[] = {
    Protocol::wordpatch,     Protocol::naive,          Protocol::callpatch,
    Protocol::aligned,       Protocol::sync_core,      Protocol::selftest_hang,
    Protocol::selftest_crash, Protocol::selftest_torn};
const char* to_string(Protocol p);
Protocol parse_protocol(const std::string& name);  // throws std::invalid_argument

struct CellSpec {
  Protocol protocol = Protocol::wordpatch;
  std::uint64_t wait_ticks = 0;
  unsigned straddle = 1;        // S in 0..4 bytes before the line boundary
  unsigned site_offset = 0;     // for aligned (S = 0): offset of the site in its line
  unsigned executors = 1;
  Placement placement = Placement::spread;
  unsigned rep = 0;
  std::uint64_t toggles = 100000;
  std::uint64_t dwell_ticks = 0;        // 0 = auto
  double watchdog_s = 30;               // per cell, wall clock
  std::uint64_t max_failures = 100;     // stop early after this many failing toggles
  std::string phase = "grid";           // grid | search | confirm | control | sentinel | soak
  std::int64_t round = -1;              // interleaved round, -1 when the run has none
  bool sample_c2c = true;               // measure c2c between patcher and executor first
};

// low_exposure is set when exposed_toggles < kLowExposureThreshold * toggles: fewer than
// half of the toggles were followed by any execution of the site, so the cell's
// zero-failure evidence is weaker than its toggle count suggests. (Addition.)
inline constexpr double kLowExposureThreshold = 0.5;

struct CellResult {
  CellSpec spec;
  std::string outcome = "ok";   // ok | crash | hang | error | blind
  std::string note;             // reason for crash/hang/error/blind, first fault detail
  std::uint64_t dwell_ticks = 0;        // the dwell actually used
  std::uint64_t toggles = 0;            // toggles performed
  std::uint64_t exposed_toggles = 0;    // toggles after which some executor ran the site
  std::uint64_t executions = 0;         // executor calls of the site entry
  std::uint64_t state_a = 0;            // executions that ran the call (eax == 1)
  std::uint64_t state_b = 0;            // executions that ran the NOP / deactivated form
  std::uint64_t traps = 0;              // engine locked-site traps (waited, re-executed)
  std::uint64_t late_traps = 0;         // engine late traps (site already unlocked)
  std::uint64_t sigill = 0, sigsegv = 0, sigbus = 0, stray_trap = 0;  // faults by class
  std::uint64_t failures = 0;           // toggles during which >= 1 fault happened
  bool stopped_early = false;           // max_failures reached
  bool low_exposure = false;            // exposed/toggles below the trust threshold
  double duration_s = 0;
  int patcher_pu = -1;
  std::vector<int> executor_pus;
  std::uint64_t first_fault_pc_offset = 0;  // fault pc - site address
  std::string first_fault_bytes;            // site bytes at the first fault, hex
  unsigned site_line_offset = 0;            // site address mod line size
  // The machine's state around the cell (schema 2): bursts of tearing come and go with
  // host placement and steal, so every row carries them.
  std::uint64_t start_utc_ms = 0;           // Unix time in ms at the cell's start
  double steal_ms = -1;                     // steal of the cell's PUs, -1 if unknown
  double c2c_ticks = -1;                    // c2c one-way sample before the cell, -1 if none
};

// What a cell runs on. Not the run's context file: that is SweepContext (run_context.hpp).
struct CellEnv {
  const Topology* topology = nullptr;
};

// Runs one cell in a forked child. Never throws for a failing cell: crashes, hangs and
// setup refusals (blind cell) are outcomes.
CellResult run_cell(const CellSpec& spec, const CellEnv& ctx);

}  // namespace crossmod::harness
