// Running cells one after another for `sweep` and `calibrate`: the interrupt flag
// (SIGINT/SIGTERM), the progress line on stderr, appending each finished cell's row, and
// serving rows from a resumed file instead of re-running them.
// Thread safety: one CellLoop per thread; the signal handler is async-signal-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cell/cell.hpp"
#include "runs/preset.hpp"
#include "results/results_io.hpp"

namespace crossmod::harness {

using CellRunner = std::function<CellResult(const CellSpec&)>;

// SIGINT/SIGTERM handling for a run: the first signal sets a flag and SIGKILLs the
// running cell's child (found via /proc/<pid>/task/<pid>/children), so run_cell returns
// promptly; the loop then discards that cell and stops. A second signal exits at once.
// A forked child that inherited the handler simply _exits, like the default action.
namespace interrupt {
void install();
bool requested();
int signal_number();   // 0 if none
void reset_for_tests();
}  // namespace interrupt

// Human-readable duration: "4m12s", "37s", "1h02m".
std::string format_duration(double seconds);
// The inverse, for flags: "2h", "90m", "45s", "1h30m", "1.5h" or plain seconds ("600").
// Throws UsageError naming `what` for anything else or a duration <= 0.
// "2h", "90m", "45s", "1h30m", "10ms", "250us", "500ns", or a bare number of seconds ->
// seconds (> 0). Bad text: UsageError naming `what`.
double parse_duration(const std::string& text, const std::string& what);

// --resume for a command whose rows are a results CSV of run kind `kind` in `dir`: the
// newest file with this config key and its rows, or, when there is none, a line on stderr
// ("<kind>: nothing to resume in DIR <for_what>; starting afresh") and nothing. A file that
// does not read is a UsageError ("cannot resume: ...").
struct Resumed {
  std::optional<std::string> csv;
  std::vector<ResultRow> rows;
};
Resumed find_resume(const std::string& dir, const std::string& kind, const std::string& config_key,
                    const std::string& for_what);
// "wordpatch W=400 S=2 N=1 spread rep0" (aligned: "aligned off=11 ...").
std::string describe_cell(const CellSpec& spec);

class Progress {
 public:
  explicit Progress(bool enabled = true);
  // Shows `cell <position>  <cell> | failures so far F | ETA x`.
  void show(const std::string& position, const CellSpec& spec, std::uint64_t failures_so_far,
            std::optional<double> eta_s);
  void message(const std::string& line);  // a full line, keeping the progress line intact
  void finish();                          // ends a \r-redrawn line
 private:
  bool enabled_;
  bool tty_;
  bool dirty_ = false;
};

class CellLoop {
 public:
  // `resumed` rows are returned instead of running their cells again.
  CellLoop(ResultsWriter* writer, CellRunner runner, double tsc_hz,
           std::vector<ResultRow> resumed, Progress* progress);

  // Runs one cell (or serves it from the resumed rows) and appends its row. nullopt when
  // an interrupt arrived while it ran: that cell is dropped, nothing is written.
  std::optional<ResultRow> run(const CellSpec& spec, const std::string& position,
                               std::optional<double> eta_s);

  bool is_resumed(const CellSpec& spec) const;
  const std::vector<ResultRow>& rows() const { return rows_; }  // this run, incl. resumed
  std::uint64_t failures_so_far() const { return failures_; }
  std::size_t cells_run() const { return cells_run_; }
  std::size_t cells_resumed() const { return cells_resumed_; }

 private:
  ResultsWriter* writer_;
  CellRunner runner_;
  double tsc_hz_;
  std::map<std::string, ResultRow> resumed_;
  Progress* progress_;
  std::vector<ResultRow> rows_;
  std::uint64_t failures_ = 0;
  std::size_t cells_run_ = 0, cells_resumed_ = 0;
};

// Estimates the remaining time of a list of cells from the rows already run: seconds
// per toggle per protocol (overall when a protocol has no rows yet), plus per-cell
// overhead.
class EtaModel {
 public:
  void add(const ResultRow& row);
  std::optional<double> estimate(const CellSpec& spec) const;
 private:
  std::map<std::string, std::pair<double, double>> per_protocol_;  // seconds, toggles
  double seconds_ = 0, toggles_ = 0;
};

// Every placement x executor count of `cfg` must be possible on `topo` (UsageError
// otherwise, before anything is written); returns the oversubscription warnings.
std::vector<std::string> placement_warnings(const SweepConfig& cfg, const Topology& topo);

// Runs a cell; with `inject_control_failure` (a hidden test flag of sweep and calibrate)
// a callpatch cell runs the selftest-torn protocol instead, whose faults are certain, and
// is recorded as callpatch with a note saying so: the only way to drive the "negative
// control failed" paths of the real binary end to end.
CellResult run_cell_for(const CellSpec& spec, const CellEnv& ctx, bool inject_control_failure);

// Negative controls (callpatch, aligned, sync-core) that failed in `rows`, one line each
// ("callpatch: 3 failing toggles in 2 cells"); empty when none did.
std::vector<std::string> failed_negative_controls(const std::vector<ResultRow>& rows);
// The banner sweep and calibrate print on stderr when a negative control failed: every
// line prefixed with "<command>: ", the failed controls, what was (not) written, where the
// details are.
void print_negative_control_banner(const std::string& command, const std::vector<std::string>& failed,
                                   const std::string& consequence, const std::string& details);

// The stdout summary of a set of rows: one line per protocol x wait, with cells, toggles,
// exposed toggles, failures, crash/hang, rate and its 95% interval.
std::string summary_table(const std::vector<ResultRow>& rows);

}  // namespace crossmod::harness
