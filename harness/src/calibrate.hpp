// `crossmod calibrate` logic without I/O: Tmax derivation from result rows, the margin
// rule, control verdicts, and the adaptive search (controls -> ladder + bisection ->
// confirmation) driven through a cell-running callback so tests can use a fake machine.
// Thread safety: not thread-safe; not async-signal-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "preset.hpp"
#include "results_io.hpp"

namespace crossmod::harness {

// Tmax_observed is the smallest tested W such that every tested W' >= W had zero failures
// for wordpatch over all S, N and placements. A "tested" W has at least one row that is
// clean evidence (ok, no failure, not low exposure) or a failure; failures (faults,
// crashes, hangs) count even in low-exposure cells, but low-exposure cells are never
// evidence of zero failures and their toggles are not counted.
struct TmaxDerivation {
  std::optional<std::uint64_t> observed_ticks;     // nullopt: no clean W above all failures
  std::optional<std::uint64_t> max_failing_wait;   // nullopt: nothing failed
  std::vector<std::uint64_t> clean_waits;          // waits with evidence and no failure
  std::uint64_t cells_at_or_above = 0;             // evidence cells with W >= observed
  std::uint64_t toggles_at_or_above = 0;
  std::uint64_t exposed_toggles_at_or_above = 0;
  std::uint64_t failures_at_or_above = 0;          // 0 by construction
  std::uint64_t low_exposure_cells = 0;            // ignored as evidence
  double failure_bound_95 = 1;                     // 1 - 0.05^(1/exposed)
};
TmaxDerivation derive_tmax(const std::vector<ResultRow>& rows,
                           const std::string& protocol = "wordpatch");

// Evidence accumulates across runs on one machine: the wordpatch rows of every other
// sweep-*.csv in `dir` whose context JSON names machine `slug` (files that cannot be read
// are listed in *skipped, not fatal). Rare tears (observed here: ~1e-7 per exposed toggle
// at waits up to 1200 ticks on KVM) can miss one run and hit the next; pooling keeps a
// failure seen once from being forgotten by a later, luckier run.
std::vector<ResultRow> read_prior_rows(const std::string& dir, const std::string& exclude_csv,
                                       const std::string& slug, std::vector<std::string>* used,
                                       std::vector<std::string>* skipped);

// Tmax_recommended = max(2 x observed, c2c one-way ticks, 100) rounded up to a multiple
// of 50 ticks.
std::uint64_t recommend_tmax(std::uint64_t observed_ticks, std::uint64_t c2c_one_way_ticks);
const char* margin_rule_text();

struct ControlVerdict {
  std::string protocol;
  bool positive = false;  // naive: expected to fail somewhere
  std::uint64_t cells = 0, toggles = 0, exposed_toggles = 0, failures = 0, crash_or_hang = 0;
  std::uint64_t low_exposure_cells = 0, inconclusive_cells = 0;  // error/blind
  bool ok = true;         // negative: no failure; positive: failed somewhere
  std::string verdict;    // one line for people
};
std::vector<ControlVerdict> control_verdicts(const std::vector<ResultRow>& rows);

// configs/tmax/<slug>.toml in the engine's schema (engine/include/crossmod/tmax_config.hpp)
// plus the evidence behind it.
struct TmaxFileInputs {
  std::string slug, vendor, brand, microcode, kernel;
  unsigned family = 0, model = 0, stepping = 0;
  std::uint64_t observed_ticks = 0, recommended_ticks = 0, c2c_one_way_ticks = 0;
  double tsc_hz = 0;
  std::string results, command, git_sha, date, preset;
  std::vector<std::string> notes;
};
std::string render_tmax_toml(const TmaxFileInputs& in, const TmaxDerivation& d,
                             const std::vector<ControlVerdict>& controls);

// The adaptive calibration, independent of processes and files.
struct CalibrateEnv {
  // Runs (or serves from a resumed file) one cell; nullopt when interrupted.
  std::function<std::optional<ResultRow>(const CellSpec&, const std::string& position,
                                         std::optional<double> eta_s)>
      run;
  std::function<double()> elapsed_s;        // seconds of budget used so far
  std::function<void(const std::string&)> log;  // a line for people
  double tsc_hz = 2.6e9;
  // wordpatch rows of earlier runs of this machine (read_prior_rows). Confirmation starts
  // at the boundary they and this run's rows imply together, so repeated calibrates add
  // evidence at the Tmax that will be written rather than at this run's own boundary.
  std::vector<ResultRow> prior_rows;
};

struct CalibrateOutcome {
  std::vector<ResultRow> rows;
  TmaxDerivation tmax;
  std::vector<ControlVerdict> controls;
  bool interrupted = false;
  bool negative_control_failed = false;
  bool positive_control_failed = false;   // naive failed somewhere (expected)
  bool boundary_found = false;            // observed_ticks defined
  std::vector<std::uint64_t> confirm_waits;
  unsigned replans = 0;
  std::vector<std::string> notes;         // for people and the files
};

CalibrateOutcome run_calibration(const SweepConfig& cfg, CalibrateEnv& env);

// Seconds per toggle model used to size cells from a time slot: per protocol, a base cost
// per toggle plus the injected waits (2 per wordpatch toggle, 1 per naive toggle), plus a
// per-cell overhead (fork, thread start, site mapping).
class ToggleRateModel {
 public:
  explicit ToggleRateModel(double tsc_hz) : tsc_hz_(tsc_hz) {}
  void add(const ResultRow& row);
  bool knows(Protocol p) const;
  // Toggles that fit in `slot_s` seconds, clamped to [min, max].
  std::uint64_t toggles_for(Protocol p, std::uint64_t wait_ticks, double slot_s,
                            std::uint64_t min_toggles, std::uint64_t max_toggles) const;
  double seconds_for(Protocol p, std::uint64_t wait_ticks, std::uint64_t toggles) const;
  // Wall time of a cell beyond its own duration_s (fork, setup, dwell warm-up); learned.
  void add_overhead(double seconds);
  double overhead_s() const { return overhead_s_; }
  static constexpr double kCellOverheadS = 0.15;  // the first guess

 private:
  double waits_per_toggle(Protocol p) const;
  double base_for(Protocol p) const;
  double tsc_hz_;
  double overhead_s_ = kCellOverheadS;
  std::map<Protocol, std::pair<double, double>> base_;  // sum of base seconds, toggles
};

}  // namespace crossmod::harness
