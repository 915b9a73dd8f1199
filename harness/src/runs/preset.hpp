// Sweep presets (configs/sweep/<name>.toml) and command-line overrides: parsing,
// validation with file:line messages, expansion into the cells of a grid.
// Thread safety: not thread-safe (plain values); not async-signal-safe.
//
// Preset format (schema_version 1):
//   schema_version = 1
//   name = "quick"
//   description = "..."
//   [grid]
//   protocols = ["wordpatch", "naive", "callpatch", "aligned", "sync-core"]
//   waits = [0, 100, 400]            # ticks; or { from = 0, to = 2400, step = 100 }
//   straddles = [1, 2, 3, 4]         # 0..4; ignored by `aligned` (always S = 0)
//   aligned_offsets = [0, 4, 8, 11, 13, 27]  # site offsets in the line for `aligned`
//   executors = [1]                  # >= 1
//   placements = ["spread"]          # spread | smt | cross-package
//   reps = 1
//   toggles = 200000                 # per cell
//   dwell = "auto"                   # or ticks
//   watchdog_s = 30
//   max_failures = 100               # stop a cell early after this many failing toggles
//   [grid.protocol_toggles]          # per-protocol toggles per cell
//   sync-core = 20000
//   [calibrate]                      # adaptive search (crossmod calibrate); see CalibrateParams
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cell/cell.hpp"

namespace crossmod::harness {

inline constexpr int kPresetSchemaVersion = 1;

// `crossmod calibrate` runs interleaved rounds (calibrate.hpp): every round visits every
// wait still in play and every S in a fresh random order with short cells, plus a
// sentinel cell and the negative and positive controls.
struct CalibrateParams {
  double budget_s = 480;              // total wall-clock budget for all cells
  double cell_s = 0.5;                // target wall time of one cell
  std::vector<std::uint64_t> ladder = {0, 50, 100, 200, 400, 800, 1600, 3200};
  std::uint64_t max_wait_ticks = 102400;    // the ladder doubles up to here if all tear
  std::uint64_t resolution_ticks = 25;      // bisection stops at this gap
  std::vector<double> confirm_multipliers = {1.0, 1.5, 2.0};  // waits in play above the boundary
  std::uint64_t control_wait_ticks = 0;     // W for naive (positive control) and callpatch
  std::uint64_t probe_toggles = 20000;      // first cell of a protocol, before its rate is known
  std::uint64_t min_toggles = 2000;         // never run a cell smaller than this
  std::uint64_t max_toggles = 200000000;
  unsigned search_rounds = 2;               // rounds over the whole ladder before narrowing
  unsigned min_active_rounds = 10;          // `bounded` needs this many active rounds at Tmax
};

struct SweepConfig {
  std::string name;
  std::string description;
  std::string source;  // file it came from
  std::vector<Protocol> protocols;
  std::vector<std::uint64_t> waits;
  std::vector<unsigned> straddles;
  std::vector<unsigned> aligned_offsets = {0, 4, 8, 11, 13, 27};
  std::vector<unsigned> executors = {1};
  std::vector<Placement> placements = {Placement::spread};
  unsigned reps = 1;
  // sweep --rounds R (0 = off): the grid R times, each round in a fresh random order with
  // rep = round = the round's index, so a burst of tearing lands on every cell in turn.
  unsigned rounds = 0;
  std::uint64_t toggles = 100000;
  std::map<Protocol, std::uint64_t> protocol_toggles;
  std::uint64_t dwell_ticks = 0;  // 0 = auto
  double watchdog_s = 30;
  std::uint64_t max_failures = 100;
  CalibrateParams calibrate;

  std::uint64_t toggles_for(Protocol p) const;
  // All cells of the grid, reps outermost (an interrupted sweep has covered the whole
  // grid evenly), then protocol, wait, straddle/offset, executors, placement. With
  // rounds > 0: rounds outermost instead of reps, each round shuffled (seeded by the
  // round index, so a resumed sweep plans the same cells).
  std::vector<CellSpec> expand(Phase phase = Phase::grid) const;
  // Canonical one-line text of everything that defines the cells (not the source path):
  // --resume only continues a file whose context has the same key.
  std::string config_key() const;
  std::string to_json() const;
};

// Largest offset of a 5-byte site inside one cache line of this machine (the line size
// from CPUID: 59 on a 64-byte line).
unsigned max_aligned_offset();

// Throws UsageError "file:line: key: message" for malformed or invalid presets.
SweepConfig load_preset_file(const std::string& path);
SweepConfig parse_preset(const std::string& text, const std::string& source_name);
// ./configs/sweep/NAME.toml, then CROSSMOD_SOURCE_DIR/configs/sweep/NAME.toml; throws
// UsageError naming both places if neither exists.
std::string find_preset(const std::string& name);

// Command-line overrides; each is the raw text of the flag (comma lists; waits also
// accept from:to:step ranges).
struct Overrides {
  std::optional<std::string> protocols, waits, straddles, executors, placements, reps,
      toggles, dwell, watchdog, max_failures, aligned_offsets;
};
void apply_overrides(SweepConfig& cfg, const Overrides& ov);  // throws UsageError

// Checks ranges (straddle 0..4, executors >= 1, reps >= 1, ...); throws UsageError.
void validate(const SweepConfig& cfg);

// List parsers used by both the TOML and the CLI paths; throw UsageError with `what`.
std::vector<std::uint64_t> parse_wait_list(const std::string& text, const std::string& what);
std::vector<unsigned> parse_unsigned_list(const std::string& text, const std::string& what);

}  // namespace crossmod::harness
