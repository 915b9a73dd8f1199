// One cell of a sweep: protocol x wait x straddle x executors x placement x rep. The
// sweep (sweep.cpp) builds CellSpecs; the runner (cell.cpp) runs each in a forked child
// with a watchdog and returns a CellResult even when the child crashes or hangs.
// Thread safety: run_cell is called from one thread; not async-signal-safe.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cell/protocol.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {

// What became of a cell. to_string gives the CSV's spelling.
enum class Outcome {
  ok,     // the child finished its toggles (failing toggles are counted, not an outcome)
  crash,  // the child died of a signal or a non-zero exit
  hang,   // the watchdog killed it
  error,  // setup failed (bind, engine init, a protocol call returned an error)
  blind,  // the site could not be built as asked (e.g. no page for the straddle)
};
const char* to_string(Outcome o);
std::optional<Outcome> parse_outcome(std::string_view s);

// Why a cell was run; written to the CSV so analyses can tell the phases apart.
enum class Phase { grid, search, confirm, control, sentinel, soak, crosscheck };
const char* to_string(Phase p);
std::optional<Phase> parse_phase(std::string_view s);

// How an executor reaches the site. `call`: `xor eax,eax` in the executor, then a call
// whose target is the site itself, as the reference detector does. `fallthrough`: a call
// to the entry two bytes before the site (`xor eax,eax` in the site's first line), which
// then runs into the site. Until 2026-11-27 cells used fallthrough; on the Xeon guest at
// W = 1500 it saw 16x fewer tears than call at calibrate's dwell (10,200 ticks) and 3.4x
// more at 5000, while call's rate, like the reference's, hardly moved with the dwell
// (results/intel-fam6-mod207-step2-1pkg/README.md, section 3b). So call is the default and
// fallthrough stays for that comparison.
enum class SiteEntry { call, fallthrough };
const char* to_string(SiteEntry e);
std::optional<SiteEntry> parse_site_entry(std::string_view s);

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
  Phase phase = Phase::grid;
  std::int64_t round = -1;              // interleaved round, -1 when the run has none
  bool sample_c2c = true;               // measure c2c between patcher and executor first
  SiteEntry site_entry = SiteEntry::call;
};

// low_exposure is set when exposed_toggles < kLowExposureThreshold * toggles: fewer than
// half of the toggles were followed by any execution of the site, so the cell's
// zero-failure evidence is weaker than its toggle count suggests. (Addition.)
inline constexpr double kLowExposureThreshold = 0.5;

struct CellResult {
  CellSpec spec;
  Outcome outcome = Outcome::ok;
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
