// Calibration in interleaved rounds (see calibrate.hpp). All decisions are made from
// result rows, so a resumed run replays the same decisions from its file.
// Thread safety: not thread-safe; not async-signal-safe.
#include "runs/calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "results/cluster_stats.hpp"
#include "results/stats.hpp"
#include "runs/sweep.hpp"

namespace crossmod::harness {

TmaxDerivation derive_tmax(const std::vector<ResultRow>& rows, const std::string& protocol) {
  TmaxDerivation d;
  std::set<std::uint64_t> evidence_waits;
  std::set<std::uint64_t> failing_waits;
  for (const auto& r : rows) {
    if (r.protocol != protocol) continue;
    if (r.low_exposure) ++d.low_exposure_cells;
    if (r.failed()) {
      failing_waits.insert(r.wait_ticks);
    } else if (r.clean_evidence()) {
      evidence_waits.insert(r.wait_ticks);
    }
  }
  if (!failing_waits.empty()) d.max_failing_wait = *failing_waits.rbegin();
  for (std::uint64_t w : evidence_waits) {
    if (!failing_waits.count(w)) d.clean_waits.push_back(w);
  }
  for (std::uint64_t w : evidence_waits) {
    if (!d.max_failing_wait || w > *d.max_failing_wait) {
      d.observed_ticks = w;
      break;
    }
  }
  if (d.observed_ticks) {
    for (const auto& r : rows) {
      if (r.protocol != protocol || r.wait_ticks < *d.observed_ticks || !r.clean_evidence()) continue;
      ++d.cells_at_or_above;
      d.toggles_at_or_above += r.toggles;
      d.exposed_toggles_at_or_above += r.exposed_toggles;
    }
    d.failure_bound_95 = stats::zero_failure_upper_bound(d.exposed_toggles_at_or_above);
  }
  return d;
}

std::uint64_t recommend_tmax(std::uint64_t observed, std::uint64_t c2c) {
  const std::uint64_t raw = std::max({2 * observed, c2c, std::uint64_t{100}});
  return (raw + 49) / 50 * 50;
}

const char* margin_rule_text() {
  return "recommended = max(2 x observed, measured core-to-core one-way line transfer, 100 ticks), "
         "rounded up to a multiple of 50 ticks";
}

std::vector<ControlVerdict> control_verdicts(const std::vector<ResultRow>& rows) {
  std::vector<ControlVerdict> out;
  const std::set<std::int64_t> active = active_rounds(rows);
  for (const ProtocolInfo& p : all_protocols()) {
    if (p.role == ControlRole::none) continue;
    const std::string proto = p.name;
    ControlVerdict v;
    v.protocol = proto;
    v.positive = p.role == ControlRole::positive;
    std::set<std::int64_t> rounds;
    for (const auto& r : rows) {
      if (r.phase != to_string(Phase::control) || r.protocol != proto) continue;
      if (r.round >= 0) rounds.insert(r.round);
      ++v.cells;
      v.toggles += r.toggles;
      v.exposed_toggles += r.exposed_toggles;
      v.failures += r.failures;
      v.crash_or_hang += (r.crash || r.hang) ? 1 : 0;
      v.low_exposure_cells += r.low_exposure ? 1 : 0;
      if (r.outcome == to_string(Outcome::error) || r.outcome == to_string(Outcome::blind)) ++v.inconclusive_cells;
    }
    if (v.cells == 0) continue;
    std::size_t active_in = 0;
    for (std::int64_t r : rounds) active_in += active.count(r);
    const std::string low =
        v.low_exposure_cells ? fmt::format(" ({} low-exposure cells)", v.low_exposure_cells) : "";
    const std::string inc =
        v.inconclusive_cells ? fmt::format(" ({} cells error/blind)", v.inconclusive_cells) : "";
    const bool failed = v.failures > 0 || v.crash_or_hang > 0;
    if (v.positive) {
      v.ok = failed;
      v.verdict = failed
          ? fmt::format("failed as expected: {} failing toggles in {} exposed toggles{}{}",
                        v.failures, v.exposed_toggles, low, inc)
          : fmt::format("did not fail: 0 in {} exposed toggles; exposure may be too low or this "
                        "hardware did not tear within the budget{}{}",
                        v.exposed_toggles, low, inc);
    } else {
      v.ok = !failed;
      v.verdict = failed
          ? fmt::format("FAILED: {} failing toggles ({} crash/hang cells) in {} exposed toggles{}{}",
                        v.failures, v.crash_or_hang, v.exposed_toggles, low, inc)
          : v.exposed_toggles == 0
              ? fmt::format("inconclusive: no exposed toggles{}{}", low, inc)
              : rounds.empty()
                  ? fmt::format("0 failures in {} exposed toggles, p < {:.3g} if toggles were independent{}{}",
                                v.exposed_toggles, stats::zero_failure_upper_bound(v.exposed_toggles), low, inc)
                  // Tears come in bursts: zero failures count for what the active rounds show.
                  : fmt::format("0 failures in {} exposed toggles over {} rounds, {} of them active{}{}",
                                v.exposed_toggles, rounds.size(), active_in, low, inc);
    }
    out.push_back(v);
  }
  return out;
}

double ToggleRateModel::waits_per_toggle(Protocol p) const { return info(p).waits_per_toggle; }

void ToggleRateModel::add(const ResultRow& row) {
  if (row.outcome != to_string(Outcome::ok) || row.toggles < 100) return;
  const auto p = try_parse_protocol(row.protocol);
  if (!p) return;
  const double per = row.duration_s / static_cast<double>(row.toggles) -
                     waits_per_toggle(*p) * static_cast<double>(row.wait_ticks) / tsc_hz_;
  auto& b = base_[*p];
  b.first += std::max(per, 1e-8) * static_cast<double>(row.toggles);
  b.second += static_cast<double>(row.toggles);
}

void ToggleRateModel::add_overhead(double seconds) {
  // Moving average: the machine's load changes during a run.
  overhead_s_ = 0.7 * overhead_s_ + 0.3 * std::clamp(seconds, 0.0, 10.0);
}

bool ToggleRateModel::knows(Protocol p) const { return base_.count(p) != 0; }

double ToggleRateModel::base_for(Protocol p) const {
  if (const auto it = base_.find(p); it != base_.end() && it->second.second > 0) {
    return it->second.first / it->second.second;
  }
  // Unknown protocol: the slowest known one, or 1 us.
  double worst = 1e-6;
  for (const auto& [q, b] : base_) worst = std::max(worst, b.first / b.second);
  return worst;
}

double ToggleRateModel::seconds_for(Protocol p, std::uint64_t w, std::uint64_t toggles) const {
  const double per = base_for(p) + waits_per_toggle(p) * static_cast<double>(w) / tsc_hz_;
  return overhead_s_ + per * static_cast<double>(toggles);
}

void ToggleRateModel::size_cell(CellSpec* spec, double slot_s, const CalibrateParams& k,
                                double watchdog_floor_s) const {
  const std::uint64_t n = toggles_for(spec->protocol, spec->wait_ticks, slot_s, k.min_toggles, k.max_toggles);
  spec->toggles = knows(spec->protocol) ? n : std::min(k.probe_toggles, n);
  spec->watchdog_s = std::max(watchdog_floor_s, 3 * seconds_for(spec->protocol, spec->wait_ticks, spec->toggles) + 10);
}

std::uint64_t ToggleRateModel::toggles_for(Protocol p, std::uint64_t w, double slot_s,
                                           std::uint64_t min_toggles,
                                           std::uint64_t max_toggles) const {
  const double per = base_for(p) + waits_per_toggle(p) * static_cast<double>(w) / tsc_hz_;
  const double n = std::max(0.0, slot_s - overhead_s_) / per;
  if (!(n >= static_cast<double>(min_toggles))) return min_toggles;
  if (n >= static_cast<double>(max_toggles)) return max_toggles;
  return static_cast<std::uint64_t>(n);
}

namespace {

// TOML basic string.
std::string toml_string(std::string_view s) {
  std::string out(1, '"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
  return out;
}

// A TOML float that stays a float (fmt prints 600.0 as "600").
std::string toml_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
  return s;
}

double ns_1dp(std::uint64_t ticks, double hz) {
  return std::round(static_cast<double>(ticks) * 1e10 / hz) / 10;
}


}  // namespace

std::string render_tmax_toml(const TmaxFileInputs& in, const TmaxDerivation& d,
                             const std::vector<ControlVerdict>& controls) {
  std::string t;
  t += fmt::format("# Calibrated Tmax for this machine, written by `crossmod calibrate` on {}.\n", in.date);
  t += "# Rerun calibrate rather than editing. Loaded by crossmod::load_tmax_config_auto().\n";
  t += "# verdict: bounded | not-established | unbounded. The engine refuses a Tmax whose verdict\n";
  t += "# is not `bounded` unless its caller opts in. Tears come in bursts: the evidence counts\n";
  t += "# rounds (each visits every W) and the *active* ones, in which the sentinel W tore.\n";
  t += "# active_round_bound_95 bounds the probability that an active round tears at\n";
  t += "# observed_ticks; failure_bound_95 (1 - 0.05^(1/n) per exposed toggle) assumes\n";
  t += "# independent toggles, which bursts contradict: read it as a lower limit of ignorance.\n";
  t += "schema_version = 2\n";
  t += fmt::format("verdict = {}\n", toml_string(in.verdict));
  t += fmt::format("evidence_summary = {}\n\n[machine]\n", toml_string(in.evidence_sentence));
  t += fmt::format("slug = {}\n", toml_string(in.slug));
  t += fmt::format("vendor = {}\n", toml_string(in.vendor));
  t += fmt::format("brand = {}\n", toml_string(in.brand));
  t += fmt::format("family = {}\nmodel = {}\nstepping = {}\n", in.family, in.model, in.stepping);
  t += fmt::format("microcode = {}\n", toml_string(in.microcode));
  t += fmt::format("kernel = {}\n\n[tmax]\n", toml_string(in.kernel));
  t += fmt::format("observed_ticks = {}\n", in.observed_ticks);
  t += fmt::format("observed_ns = {}\n", toml_float(ns_1dp(in.observed_ticks, in.tsc_hz)));
  t += fmt::format("recommended_ticks = {}\n", in.recommended_ticks);
  t += fmt::format("recommended_ns = {}\n", toml_float(ns_1dp(in.recommended_ticks, in.tsc_hz)));
  t += fmt::format("tsc_hz = {}\n", toml_float(std::round(in.tsc_hz)));
  t += fmt::format("margin_rule = {}\n", toml_string(margin_rule_text()));
  t += fmt::format("c2c_one_way_ticks = {}\n\n[evidence]\n", in.c2c_one_way_ticks);
  t += fmt::format("toggles_at_or_above = {}\n", d.toggles_at_or_above);
  t += fmt::format("exposed_toggles_at_or_above = {}\n", d.exposed_toggles_at_or_above);
  t += fmt::format("failures_at_or_above = {}\n", d.failures_at_or_above);
  t += fmt::format("failure_bound_95 = {}\n", toml_float(d.failure_bound_95));
  t += fmt::format("rounds = {}\n", in.rounds);
  t += fmt::format("active_rounds_at_observed = {}\n", in.active_rounds_at_observed);
  t += fmt::format("active_round_bound_95 = {}\n", toml_float(in.active_round_bound));
  t += fmt::format("cells_at_or_above = {}\n", d.cells_at_or_above);
  t += fmt::format("low_exposure_cells_ignored = {}\n", d.low_exposure_cells);
  if (d.max_failing_wait) t += fmt::format("largest_failing_ticks = {}\n", *d.max_failing_wait);
  t += fmt::format("results = {}\n", toml_string(in.results));
  t += fmt::format("command = {}\n", toml_string(in.command));
  t += fmt::format("git_sha = {}\n", toml_string(in.git_sha));
  t += fmt::format("date = {}\n", toml_string(in.date));
  t += fmt::format("preset = {}\n", toml_string(in.preset));
  for (const auto& v : controls) {
    std::string key = "control_" + v.protocol;
    for (char& c : key) c = c == '-' ? '_' : c;
    t += fmt::format("{} = {}\n", key, toml_string(v.verdict));
  }
  t += "notes = [";
  for (std::size_t i = 0; i < in.notes.size(); ++i) t += (i ? ", " : "") + toml_string(in.notes[i]);
  t += "]\n";
  return t;
}

const char* to_string(Verdict v) {
  switch (v) {
    case Verdict::bounded: return "bounded";
    case Verdict::not_established: return "not-established";
    case Verdict::unbounded: return "unbounded";
  }
  return "?";
}

const char* verdict_phrase(Verdict v) {
  switch (v) {
    case Verdict::bounded: return "bounded";
    case Verdict::not_established: return "not established";
    case Verdict::unbounded: return "unbounded in the tested range";
  }
  return "?";
}

namespace {
// Rows without a round (schema 1) get a key of their own that no real round uses.
std::int64_t round_key(const ResultRow& r, std::size_t index) {
  return r.round >= 0 ? r.round : -1 - static_cast<std::int64_t>(index);
}
}  // namespace

std::set<std::int64_t> active_rounds(const std::vector<ResultRow>& rows) {
  std::set<std::int64_t> active;
  for (const auto& r : rows) {
    if (r.phase == to_string(Phase::sentinel) && r.round >= 0 && r.failed()) active.insert(r.round);
  }
  return active;
}

std::map<std::uint64_t, WaitRounds> wait_rounds(const std::vector<ResultRow>& rows) {
  const std::set<std::int64_t> active = active_rounds(rows);
  std::map<std::int64_t, std::uint64_t> sentinel_tears;  // per round
  for (const auto& r : rows) {
    if (r.phase == to_string(Phase::sentinel) && r.round >= 0) sentinel_tears[r.round] += r.failures;
  }
  std::map<std::uint64_t, std::map<std::int64_t, WaitRounds::Round>> per;
  std::map<std::uint64_t, std::set<std::int64_t>> evidence_rounds;
  std::map<std::uint64_t, WaitRounds> out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const ResultRow& r = rows[i];
    if (r.protocol != to_string(Protocol::wordpatch)) continue;
    if (r.outcome == to_string(Outcome::error) || r.outcome == to_string(Outcome::blind)) continue;
    const std::int64_t key = round_key(r, i);
    const bool act = r.round >= 0 && active.count(r.round);
    WaitRounds& w = out[r.wait_ticks];
    w.wait = r.wait_ticks;
    ++w.cells;
    if (r.low_exposure) ++w.low_exposure_cells;
    // A failure counts even in a low-exposure cell; exposure only from trusted cells.
    const std::uint64_t exposed = r.low_exposure ? 0 : std::max(r.exposed_toggles, r.failures);
    w.exposed += exposed;
    w.tears += r.failures;
    if (act) {
      w.active_exposed += exposed;
      w.active_tears += r.failures;
    }
    auto& round = per[r.wait_ticks][key];
    round.round = key;
    round.active = act;
    round.tears += r.failures;
    round.exposed += exposed;
    if (act && r.clean_evidence()) evidence_rounds[r.wait_ticks].insert(key);
  }
  for (auto& [wait, w] : out) {
    for (const auto& [key, round] : per[wait]) {
      w.per_round.push_back(round);
      ++w.rounds;
      if (round.active) ++w.active_rounds;
      if (round.tears) ++w.tearing_rounds;
      if (round.tears && round.active) ++w.active_tearing_rounds;
    }
    // Evidence of zero tears at W: active rounds in which W was measured and no cell at W
    // tore in that round.
    for (std::int64_t key : evidence_rounds[wait]) {
      if (per[wait][key].tears == 0) {
        ++w.evidence_active_rounds;
        w.sentinel_tears += sentinel_tears[key];
      }
    }
  }
  return out;
}

std::uint64_t choose_sentinel(const std::map<std::uint64_t, WaitRounds>& by_wait,
                              std::optional<std::uint64_t> below, std::uint64_t fallback) {
  // A wait that tears in (nearly) every round it was measured in tears in quiet times too:
  // as a sentinel it would call every round active. Prefer the wait that tore in the most
  // rounds among the others (ties: the larger wait), and fall back to an always-tearing
  // one only when nothing else tore in two rounds.
  std::optional<std::uint64_t> best, best_always;
  std::uint64_t best_n = 0, best_always_n = 0;
  for (const auto& [w, r] : by_wait) {
    if (below && w >= *below) continue;
    if (r.tearing_rounds < 2) continue;
    const bool always = r.rounds >= 3 && 10 * r.tearing_rounds >= 9 * r.rounds;
    if (always) {
      if (r.tearing_rounds >= best_always_n) best_always = w, best_always_n = r.tearing_rounds;
    } else if (r.tearing_rounds >= best_n) {
      best = w;
      best_n = r.tearing_rounds;
    }
  }
  if (best) return *best;
  return best_always.value_or(fallback);
}

RoundWaits plan_round_waits(const std::vector<ResultRow>& rows, const CalibrateParams& k,
                            unsigned round) {
  RoundWaits out;
  std::set<std::uint64_t> failing, clean;
  for (const auto& r : rows) {
    if (r.protocol != to_string(Protocol::wordpatch)) continue;
    if (r.failed()) failing.insert(r.wait_ticks);
    else if (r.clean_evidence()) clean.insert(r.wait_ticks);
  }
  for (std::uint64_t w : failing) clean.erase(w);
  if (!failing.empty()) out.largest_failing = *failing.rbegin();
  for (std::uint64_t w : clean) {
    if (!out.largest_failing || w > *out.largest_failing) {
      out.boundary = w;
      break;
    }
  }
  auto round_up = [&](double v) {
    const auto m = static_cast<std::uint64_t>(std::ceil(v / static_cast<double>(k.resolution_ticks)));
    return m * k.resolution_ticks;
  };
  std::set<std::uint64_t> waits;
  if (round < k.search_rounds || (!out.boundary && !out.largest_failing)) {
    waits.insert(k.ladder.begin(), k.ladder.end());
  }
  if (!out.boundary) {
    // Nothing clean above the failures: step up by doubling from the largest failing W.
    std::uint64_t top = k.ladder.empty() ? 50 : std::max<std::uint64_t>(k.ladder.back(), 50);
    if (out.largest_failing) {
      top = std::max(top, *out.largest_failing);
      while (top <= *out.largest_failing && top < k.max_wait_ticks) top *= 2;
      if (top <= *out.largest_failing) {
        out.above_range = true;
        top = *out.largest_failing;  // keep measuring the top of the range
      }
    }
    waits.insert(std::min(top, k.max_wait_ticks));
  } else if (round >= k.search_rounds) {
    const std::uint64_t b = *out.boundary;
    for (double m : k.confirm_multipliers) {
      waits.insert(std::min(k.max_wait_ticks, std::max(b, round_up(static_cast<double>(b) * m))));
    }
    if (out.largest_failing) {
      // The largest failing W stays in play: it shows each burst just below the boundary
      // and is the natural sentinel once it has torn in a few rounds.
      waits.insert(*out.largest_failing);
    }
    if (out.largest_failing && b - *out.largest_failing > k.resolution_ticks) {
      const std::uint64_t lo = *out.largest_failing;
      std::uint64_t mid = lo + (b - lo) / 2 / k.resolution_ticks * k.resolution_ticks;
      if (mid <= lo) mid = lo + k.resolution_ticks;
      if (mid < b) waits.insert(mid);
    }
  }
  out.waits.assign(waits.begin(), waits.end());
  return out;
}

VerdictReport decide_verdict(const std::vector<ResultRow>& rows, const CalibrateParams& k,
                             double round_s) {
  VerdictReport v;
  v.tmax = derive_tmax(rows);
  const auto by_wait = wait_rounds(rows);
  std::set<std::int64_t> all_rounds;
  for (const auto& r : rows)
    if (r.round >= 0) all_rounds.insert(r.round);
  v.rounds = all_rounds.size();
  v.active = active_rounds(rows).size();
  const double active_share = v.rounds ? static_cast<double>(v.active) / static_cast<double>(v.rounds) : 0;
  if (!v.tmax.observed_ticks) {
    if (v.tmax.max_failing_wait) {
      v.verdict = Verdict::unbounded;
      v.evidence = fmt::format("wordpatch tore at every wait measured up to {} ticks", *v.tmax.max_failing_wait);
      v.advice = "no wordpatch Tmax can be recommended on this machine: use callpatch (one line per toggle) "
                 "or sync-core (membarrier SYNC_CORE) instead";
    } else {
      v.verdict = Verdict::not_established;
      v.evidence = "no wait was measured with enough exposure";
      v.advice = "rerun with a longer --budget on a less loaded machine";
    }
    return v;
  }
  const std::uint64_t w = *v.tmax.observed_ticks;
  if (const auto it = by_wait.find(w); it != by_wait.end()) v.at_observed = it->second;
  const WaitRounds& a = v.at_observed;
  v.sentinel_tears_in_active = a.sentinel_tears;
  const std::uint64_t ra = a.evidence_active_rounds;
  v.active_round_bound = stats::active_round_tear_fraction_upper(ra);
  v.evidence = fmt::format(
      "0 tears at W = {} in {} exposed toggles; {} of its {} rounds were active (the sentinel tore {} times in "
      "them): an active round tears at W = {} with probability < {:.2g} (95%)",
      w, a.exposed, ra, a.rounds, a.sentinel_tears, w, v.active_round_bound);
  if (ra >= k.min_active_rounds) {
    v.verdict = Verdict::bounded;
    return v;
  }
  v.verdict = Verdict::not_established;
  const double need = static_cast<double>(k.min_active_rounds - ra);
  if (active_share > 0 && round_s > 0) {
    const double more_s = need / active_share * round_s;
    v.advice = fmt::format(
        "only {} active round(s) at W = {} (need {}); at this run's share of active rounds ({:.0f}%) that takes about "
        "{:.0f} more minutes: `crossmod soak --for {}m` (it soaks the recommended Tmax), or calibrate with a "
        "larger --budget",
        ra, w, k.min_active_rounds, 100 * active_share, more_s / 60, std::ceil(more_s / 60));
  } else {
    v.advice = fmt::format(
        "the sentinel never tore: the machine was not seen in its tearing state, so 0 tears at W = {} says little; "
        "run `crossmod soak --for 2h` (it soaks the recommended Tmax) or calibrate again later with a larger "
        "--budget",
        w);
  }
  return v;
}

CalibrateOutcome run_calibration(const SweepConfig& cfg, CalibrateEnv& env) {
  CalibrateOutcome out;
  const CalibrateParams& k = cfg.calibrate;
  ToggleRateModel model(env.tsc_hz);
  std::vector<unsigned> straddles;
  for (unsigned s : cfg.straddles)
    if (s >= 1) straddles.push_back(s);
  if (straddles.empty()) straddles = {1, 2, 3, 4};
  std::vector<unsigned> offsets = cfg.aligned_offsets;
  if (offsets.empty()) offsets = {0};
  const unsigned n0 = cfg.executors.front();
  const Placement p0 = cfg.placements.front();
  auto log = [&](const std::string& s) {
    if (env.log) env.log(s);
  };
  auto make = [&](Protocol p, std::uint64_t w, unsigned s, unsigned off, Phase phase, unsigned round) {
    CellSpec spec;
    spec.protocol = p;
    spec.wait_ticks = w;
    spec.straddle = s;
    spec.site_offset = off;
    spec.executors = n0;
    spec.placement = p0;
    spec.rep = round;  // unique resume keys: one cell per (phase, protocol, W, S) per round
    spec.round = round;
    spec.phase = phase;
    spec.dwell_ticks = cfg.dwell_ticks;
    spec.max_failures = cfg.max_failures;
    return spec;
  };
  auto size = [&](CellSpec& spec) { model.size_cell(&spec, k.cell_s, k, cfg.watchdog_s); };
  // Planning sees earlier runs of this machine: a W that tore there is not a boundary.
  auto all_rows = [&]() {
    std::vector<ResultRow> all = env.prior_rows;
    all.insert(all.end(), out.rows.begin(), out.rows.end());
    return all;
  };

  unsigned cell_no = 0;
  std::uint64_t sentinel = k.ladder.empty() ? 0 : k.ladder.front();
  for (unsigned round = 0;; ++round) {
    const double start = env.elapsed_s();
    if (start >= k.budget_s) break;
    const std::vector<ResultRow> known = all_rows();
    const RoundWaits plan = plan_round_waits(known, k, round);
    if (round > 0) sentinel = choose_sentinel(wait_rounds(out.rows), plan.largest_failing.value_or(0) + 1,
                                              sentinel);
    std::vector<CellSpec> cells;
    const unsigned nS = static_cast<unsigned>(straddles.size());
    cells.push_back(make(Protocol::naive, k.control_wait_ticks, straddles[round % nS], 0, Phase::control, round));
    cells.push_back(make(Protocol::callpatch, k.control_wait_ticks, straddles[(round + 1) % nS], 0, Phase::control, round));
    cells.push_back(make(Protocol::sync_core, 0, straddles[(round + 2) % nS], 0, Phase::control, round));
    cells.push_back(make(Protocol::aligned, 0, 0, offsets[round % offsets.size()], Phase::control, round));
    cells.push_back(make(Protocol::wordpatch, sentinel, straddles[(round + 3) % nS], 0, Phase::sentinel, round));
    for (std::uint64_t w : plan.waits) {
      const Phase phase = plan.boundary && w >= *plan.boundary ? Phase::confirm : Phase::search;
      for (unsigned s : straddles) cells.push_back(make(Protocol::wordpatch, w, s, 0, phase, round));
    }
    std::mt19937_64 rng(env.seed * 0x9E3779B97F4A7C15ULL + round);
    std::shuffle(cells.begin(), cells.end(), rng);
    if (round == 0 || round == k.search_rounds) {
      log(fmt::format("round {}: {} cells, waits {} (sentinel W={})", round, cells.size(), fmt::join(plan.waits, ","),
                      sentinel));
    }
    for (CellSpec& spec : cells) {
      size(spec);
      ++cell_no;
      const double before = env.elapsed_s();
      auto row = env.run(spec, fmt::format("{} (round {}, {})", cell_no, round, to_string(spec.phase)),
                         std::max(0.0, k.budget_s - before));
      if (!row) {
        out.interrupted = true;
        out.rounds = round;
        return out;
      }
      model.add(*row);
      const double wall = env.elapsed_s() - before;
      if (wall > row->duration_s) model.add_overhead(wall - row->duration_s);
      out.rows.push_back(*row);
    }
    out.rounds = round + 1;
    out.round_s = env.elapsed_s() / out.rounds;
    out.controls = control_verdicts(out.rows);
    for (const auto& v : out.controls) {
      if (v.positive) out.positive_control_failed = v.ok;
      if (!v.positive && !v.ok) out.negative_control_failed = true;
    }
    if (out.negative_control_failed) {
      out.notes.push_back(fmt::format("a negative control failed in round {}; calibration stopped", round));
      return out;
    }
    // A round must fit: stop when the next one would overrun the budget by more than half.
    const double round_took = env.elapsed_s() - start;
    if (env.elapsed_s() + 0.5 * round_took > k.budget_s) break;
  }
  const auto d = derive_tmax(out.rows);
  if (d.low_exposure_cells) {
    out.notes.push_back(fmt::format("{} wordpatch cells had low exposure and are not evidence", d.low_exposure_cells));
  }
  return out;
}

std::vector<stats::RoundCount> round_counts(const WaitRounds& w) {
  std::vector<stats::RoundCount> out;
  for (const auto& r : w.per_round) {
    stats::RoundCount c;
    // Rows without a round (schema 1) have negative keys: park them far from real rounds
    // so they never form an episode with one.
    c.round = r.round >= 0 ? static_cast<std::uint64_t>(r.round)
                           : (std::uint64_t{1} << 62) + static_cast<std::uint64_t>(-r.round);
    c.tears = r.tears;
    c.exposed = r.exposed;
    c.active = r.active;
    out.push_back(c);
  }
  return out;
}

std::string rounds_table(const std::vector<ResultRow>& rows) {
  std::string out = fmt::format("{:>7} {:>6} {:>6} {:>7} {:>20} {:>20} {:>10}  {}\n", "W", "rounds", "active",
                                "tearing", "tears/exposed", "in active rounds", "dispersion",
                                "95% upper bound (rounds as units)");
  for (const auto& [w, r] : wait_rounds(rows)) {
    const auto counts = round_counts(r);
    // Pearson X^2 / (R - 1) across rounds: ~1 when tears are independent of the round,
    // >> 1 when they come in bursts (cluster_stats.hpp).
    const stats::Overdispersion od = stats::overdispersion_test(counts);
    const std::string disp = od.testable ? fmt::format("{:.1f}{}", od.dispersion, od.overdispersed ? "*" : "") : "-";
    std::string bound;
    if (r.tears == 0) {
      bound = fmt::format("P(an active round tears) < {:.2g}",
                          stats::active_round_tear_fraction_upper(r.evidence_active_rounds));
    } else {
      const stats::ClusterBound cb = stats::cluster_upper_bound(counts);
      bound = fmt::format("rate < {:.3g} per exposed toggle{}", cb.upper,
                          cb.heterogeneity_assessed ? "" : " (one burst: spread unknown)");
    }
    out += fmt::format("{:>7} {:>6} {:>6} {:>7} {:>20} {:>20} {:>10}  {}\n", w, r.rounds, r.active_rounds,
                       r.tearing_rounds, fmt::format("{}/{}", r.tears, r.exposed),
                       fmt::format("{}/{}", r.active_tears, r.active_exposed), disp, bound);
  }
  out += "  dispersion: Pearson X^2/(R-1) across rounds, ~1 if tears were independent of time; * = overdispersed "
         "(p < 0.05)\n";
  return out;
}

std::vector<ResultRow> read_prior_rows(const std::string& dir, const std::string& exclude_csv,
                                       const std::string& slug, std::vector<std::string>* used,
                                       std::vector<std::string>* skipped) {
  namespace fs = std::filesystem;
  std::vector<ResultRow> rows;
  std::error_code ec;
  std::int64_t file_no = 0;
  for (const std::string& csv : list_sweep_csvs(dir)) {
    if (!exclude_csv.empty() && fs::equivalent(csv, exclude_csv, ec)) continue;
    try {
      const std::string context = read_file(context_json_path(csv));
      const auto machine = context_machine_slug(context);
      if (machine != slug) {
        if (skipped) skipped->push_back(csv + ": context names another machine");
        continue;
      }
      // Cells that fell through to the site (runs before 2026-11-27) saw up to ~16x fewer
      // tears than cells that call it, at calibrate's dwell on the Xeon guest
      // (results/intel-fam6-mod207-step2-1pkg/README.md, section 3b): their tears are
      // real and still count, their clean cells are no evidence.
      const bool tears_only = context_site_entry(context) != to_string(SiteEntry::call);
      std::size_t n = 0, dropped = 0;
      ++file_no;
      for (ResultRow& r : read_results_csv(csv)) {
        if (r.protocol != to_string(Protocol::wordpatch)) continue;
        if (tears_only && !r.failed()) {
          ++dropped;
          continue;
        }
        if (r.round >= 0) r.round += file_no * kPriorRoundStride;
        rows.push_back(std::move(r));
        ++n;
      }
      if (used && n) used->push_back(csv);
      if (skipped && dropped)
        skipped->push_back(fmt::format("{} cells of {} without a tear: its cells fell through to the site "
                                       "(before 2026-11-27); only its tears count", dropped, csv));
    } catch (const std::exception& e) {
      if (skipped) skipped->push_back(csv + ": " + e.what());
    }
  }
  return rows;
}

}  // namespace crossmod::harness
