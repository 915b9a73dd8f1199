// `crossmod calibrate` logic without I/O: Tmax derivation from result rows, the margin
// rule, control verdicts, the interleaved rounds with their sentinel and the verdict,
// driven through a cell-running callback so tests can use a fake machine.
// Thread safety: not thread-safe; not async-signal-safe.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "results/cluster_stats.hpp"
#include "runs/preset.hpp"
#include "results/results_io.hpp"

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
                           const std::string& protocol = to_string(Protocol::wordpatch));

// Evidence accumulates across runs on one machine: the wordpatch rows of every other
// sweep-*.csv in `dir` whose context JSON names machine `slug` (files that cannot be read
// are listed in *skipped, not fatal). Rare tears (observed here: ~1e-7 per exposed toggle
// at waits up to 1200 ticks on KVM) can miss one run and hit the next; pooling keeps a
// failure seen once from being forgotten by a later, luckier run. Rounds stay units of
// their own file: file k's round r becomes (k + 1) * kPriorRoundStride + r.
inline constexpr std::int64_t kPriorRoundStride = 1'000'000;
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
  std::string verdict = "bounded";  // to_string(Verdict)
  std::string evidence_sentence;
  std::string slug, vendor, brand, microcode, kernel;
  unsigned family = 0, model = 0, stepping = 0;
  std::uint64_t observed_ticks = 0, recommended_ticks = 0, c2c_one_way_ticks = 0;
  double tsc_hz = 0;
  std::string results, command, git_sha, date, preset;
  std::vector<std::string> notes;
  std::uint64_t rounds = 0, active_rounds_at_observed = 0;
  double active_round_bound = 1;
};
std::string render_tmax_toml(const TmaxFileInputs& in, const TmaxDerivation& d,
                             const std::vector<ControlVerdict>& controls);

// ---- Rounds (issue 9). Tears come in bursts: quiet minutes, then minutes in which waits
// far above the quiet boundary tear. So calibrate never measures one W in one block of
// time: every round visits every W in play and every S in a fresh random order, with
// short cells, plus a *sentinel* (wordpatch at a low W known to tear when the machine is
// in its tearing state) and the controls. A round whose sentinel tore is *active*;
// evidence at a W is judged by the active rounds in which it was measured.

// Rounds of one W, the round as the unit. Rows without a round (results schema 1) are
// each their own quiet round.
struct WaitRounds {
  std::uint64_t wait = 0;
  std::uint64_t cells = 0, low_exposure_cells = 0;
  std::uint64_t exposed = 0, tears = 0;                 // failing toggles (crash/hang >= 1)
  std::uint64_t active_exposed = 0, active_tears = 0;
  std::uint64_t rounds = 0, active_rounds = 0;          // rounds with a row at this W
  std::uint64_t tearing_rounds = 0, active_tearing_rounds = 0;
  std::uint64_t evidence_active_rounds = 0;  // active rounds with clean evidence at this W
  std::uint64_t sentinel_tears = 0;          // the sentinel's tears in those active rounds
  struct Round {
    std::int64_t round;
    std::uint64_t tears, exposed;
    bool active;
  };
  std::vector<Round> per_round;
};

// Active rounds: those whose sentinel cell failed.
std::set<std::int64_t> active_rounds(const std::vector<ResultRow>& rows);
// Per W, wordpatch rows only (sentinel rows included: they are measurements too).
std::map<std::uint64_t, WaitRounds> wait_rounds(const std::vector<ResultRow>& rows);

// The sentinel for the next round: among the waits below `below` that tore in at least
// two rounds but not in (nearly) every round they were measured in, the one that tore in
// the most rounds (ties: the larger wait): a W that tears in bursts but not at every
// moment. An always-tearing wait only when nothing else qualifies; `fallback` when
// nothing tore twice yet.
std::uint64_t choose_sentinel(const std::map<std::uint64_t, WaitRounds>& by_wait,
                              std::optional<std::uint64_t> below, std::uint64_t fallback);

// The waits the next round visits. During the first search_rounds rounds: the ladder
// (doubled upward to max_wait_ticks while every tested wait tore). Afterwards: the
// boundary b (the smallest clean tested W above every failing W) times each confirm
// multiplier, the largest failing W, and the midpoint of (largest failing, b) while the
// gap exceeds the resolution. A failure at b in a later round moves everything up.
struct RoundWaits {
  std::vector<std::uint64_t> waits;            // sorted
  std::optional<std::uint64_t> boundary;       // b
  std::optional<std::uint64_t> largest_failing;
  bool above_range = false;                    // everything up to max_wait_ticks tore
};
RoundWaits plan_round_waits(const std::vector<ResultRow>& rows, const CalibrateParams& k,
                            unsigned round);

enum class Verdict { bounded, not_established, unbounded };
const char* to_string(Verdict v);      // "bounded" | "not-established" | "unbounded"
const char* verdict_phrase(Verdict v);  // "bounded" | "not established" | "unbounded in the tested range"

struct VerdictReport {
  Verdict verdict = Verdict::not_established;
  TmaxDerivation tmax;                   // over the rows given
  WaitRounds at_observed;                // rounds at Tmax_observed
  std::uint64_t sentinel_tears_in_active = 0;
  std::uint64_t rounds = 0, active = 0;  // rounds overall, active ones
  double active_round_bound = 1;         // 95% upper bound on P(an active round tears at W_obs)
  std::string evidence;                  // one sentence for people
  std::string advice;                    // what to do next (empty for bounded)
};
// `bounded`: Tmax_observed exists and was measured clean in >= min_active_rounds active
// rounds. `unbounded`: nothing clean above the largest failing W (tears up to the largest
// W tested). Otherwise `not established`. `round_s` (seconds per round) sizes the advice.
VerdictReport decide_verdict(const std::vector<ResultRow>& rows, const CalibrateParams& k,
                             double round_s);

// The calibration, independent of processes and files.
struct CalibrateEnv {
  // Runs (or serves from a resumed file) one cell; nullopt when interrupted.
  std::function<std::optional<ResultRow>(const CellSpec&, const std::string& position,
                                         std::optional<double> eta_s)>
      run;
  std::function<double()> elapsed_s;        // seconds of budget used so far
  std::function<void(const std::string&)> log;  // a line for people
  double tsc_hz = 2.6e9;
  std::uint64_t seed = 1;                   // cell order within rounds
  // wordpatch rows of earlier runs of this machine (read_prior_rows): a W that tore
  // there still counts as failing when the next round's waits are planned.
  std::vector<ResultRow> prior_rows;
};

struct CalibrateOutcome {
  std::vector<ResultRow> rows;
  std::vector<ControlVerdict> controls;
  bool interrupted = false;
  bool negative_control_failed = false;
  bool positive_control_failed = false;   // naive failed somewhere (expected)
  unsigned rounds = 0;
  double round_s = 0;                     // mean wall time of a round
  std::vector<std::string> notes;         // for people and the files
};

CalibrateOutcome run_calibration(const SweepConfig& cfg, CalibrateEnv& env);

// One W's rounds in the form cluster_stats.hpp takes.
std::vector<stats::RoundCount> round_counts(const WaitRounds& w);

// Per W: rounds (active), tearing rounds, tears/exposed in all and in active rounds, the
// overdispersion across rounds and a bound that holds under clustering.
std::string rounds_table(const std::vector<ResultRow>& rows);

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
  // Sizes a cell to fill `slot_s` seconds (k's min/max toggles; probe_toggles at most while
  // the protocol's rate is unknown) and sets its watchdog to 3x the expected time + 10 s,
  // at least `watchdog_floor_s`. Calibrate and soak size their cells with this.
  void size_cell(CellSpec* spec, double slot_s, const CalibrateParams& k, double watchdog_floor_s) const;
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
