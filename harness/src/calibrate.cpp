// Adaptive calibration: controls, ladder + bisection for the wordpatch boundary, then a
// confirmation budget at and above it. All decisions are made from result rows, so a
// resumed run replays the same decisions from its file.
// Thread safety: not thread-safe; not async-signal-safe.
#include "calibrate.hpp"

#include <algorithm>
#include <filesystem>

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "stats.hpp"
#include "sweep.hpp"

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
  for (const char* proto : {"naive", "aligned", "callpatch", "sync-core"}) {
    ControlVerdict v;
    v.protocol = proto;
    v.positive = v.protocol == "naive";
    for (const auto& r : rows) {
      if (r.phase != "control" || r.protocol != proto) continue;
      ++v.cells;
      v.toggles += r.toggles;
      v.exposed_toggles += r.exposed_toggles;
      v.failures += r.failures;
      v.crash_or_hang += (r.crash || r.hang) ? 1 : 0;
      v.low_exposure_cells += r.low_exposure ? 1 : 0;
      if (r.outcome == "error" || r.outcome == "blind") ++v.inconclusive_cells;
    }
    if (v.cells == 0) continue;
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
              : fmt::format("0 failures in {} exposed toggles, p < {:.3g} at 95%{}{}",
                            v.exposed_toggles, stats::zero_failure_upper_bound(v.exposed_toggles),
                            low, inc);
    }
    out.push_back(v);
  }
  return out;
}

double ToggleRateModel::waits_per_toggle(Protocol p) const {
  switch (p) {
    case Protocol::wordpatch: return 2;
    case Protocol::naive: return 1;
    default: return 0;
  }
}

void ToggleRateModel::add(const ResultRow& row) {
  if (row.outcome != "ok" || row.toggles < 100) return;
  const auto p = protocol_from_name(row.protocol);
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

std::uint64_t round_up(std::uint64_t v, std::uint64_t m) { return (v + m - 1) / m * m; }

std::vector<std::uint64_t> plan_confirm_waits(std::uint64_t base, const CalibrateParams& k) {
  std::vector<std::uint64_t> waits;
  for (std::size_t i = 0; i < k.confirm_multipliers.size(); ++i) {
    const double scaled = std::ceil(static_cast<double>(base) * k.confirm_multipliers[i]);
    std::uint64_t w = std::max(static_cast<std::uint64_t>(scaled), base + i * 2 * k.resolution_ticks);
    if (i > 0) w = round_up(w, k.resolution_ticks);
    if (!waits.empty() && w <= waits.back()) w = waits.back() + k.resolution_ticks;
    waits.push_back(w);
  }
  return waits;
}

}  // namespace

std::string render_tmax_toml(const TmaxFileInputs& in, const TmaxDerivation& d,
                             const std::vector<ControlVerdict>& controls) {
  std::string t;
  t += fmt::format("# Calibrated Tmax for this machine, written by `crossmod calibrate` on {}.\n", in.date);
  t += "# Rerun calibrate rather than editing. Loaded by crossmod::load_tmax_config_auto().\n";
  t += "# Evidence: 0 failures in the exposed toggles below at every tested W >= observed_ticks;\n";
  t += "# failure_bound_95 is the one-sided 95% upper bound on the failure probability per\n";
  t += "# exposed toggle, 1 - 0.05^(1/n): observed on this machine, not guaranteed.\n";
  t += "schema_version = 1\n\n[machine]\n";
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

CalibrateOutcome run_calibration(const SweepConfig& cfg, CalibrateEnv& env) {
  CalibrateOutcome out;
  const CalibrateParams& k = cfg.calibrate;
  ToggleRateModel model(env.tsc_hz);
  std::set<std::string> used_keys;
  unsigned cell_no = 0;

  std::vector<unsigned> straddles;
  for (unsigned s : cfg.straddles) {
    if (s >= 1) straddles.push_back(s);
  }
  if (straddles.empty()) straddles = {1, 2, 3, 4};
  const unsigned n0 = cfg.executors.front();
  const Placement p0 = cfg.placements.front();
  const double controls_end = k.budget_s * k.controls_fraction;
  const double search_end = k.budget_s * (k.controls_fraction + k.search_fraction);
  const double confirm_end = k.budget_s * (k.controls_fraction + k.search_fraction + k.confirm_fraction);

  auto log = [&](const std::string& s) {
    if (env.log) env.log(s);
  };

  // Runs one cell sized to `slot_s`; false when interrupted.
  auto run_one = [&](CellSpec spec, double slot_s, std::uint64_t max_failures) -> std::optional<ResultRow> {
    spec.toggles = model.knows(spec.protocol)
                       ? model.toggles_for(spec.protocol, spec.wait_ticks, slot_s, k.min_toggles, k.max_toggles)
                       : std::min(k.probe_toggles,
                                  model.toggles_for(spec.protocol, spec.wait_ticks, slot_s, k.min_toggles, k.max_toggles));
    spec.max_failures = max_failures;
    spec.dwell_ticks = cfg.dwell_ticks;
    spec.watchdog_s =
        std::max(cfg.watchdog_s, 3 * model.seconds_for(spec.protocol, spec.wait_ticks, spec.toggles) + 10);
    while (used_keys.count(resume_key(spec))) ++spec.rep;
    used_keys.insert(resume_key(spec));
    ++cell_no;
    const double before = env.elapsed_s();
    const double left = std::max(0.0, k.budget_s - before);
    auto row = env.run(spec, fmt::format("{} ({})", cell_no, spec.phase), left);
    if (!row) {
      out.interrupted = true;
      return std::nullopt;
    }
    model.add(*row);
    const double wall = env.elapsed_s() - before;
    if (wall > row->duration_s) model.add_overhead(wall - row->duration_s);
    out.rows.push_back(*row);
    return row;
  };
  auto make = [&](Protocol p, std::uint64_t w, unsigned s, unsigned off, unsigned n, Placement pl,
                  const char* phase) {
    CellSpec spec;
    spec.protocol = p;
    spec.wait_ticks = w;
    spec.straddle = s;
    spec.site_offset = off;
    spec.executors = n;
    spec.placement = pl;
    spec.rep = 0;
    spec.phase = phase;
    return spec;
  };
  auto slot = [&](double phase_end, std::size_t cells_left) {
    return std::max(0.0, phase_end - env.elapsed_s()) / static_cast<double>(std::max<std::size_t>(cells_left, 1));
  };

  // (1) Controls.
  std::vector<CellSpec> controls;
  for (unsigned s : straddles) controls.push_back(make(Protocol::naive, k.control_wait_ticks, s, 0, n0, p0, "control"));
  for (unsigned off : cfg.aligned_offsets) controls.push_back(make(Protocol::aligned, 0, 0, off, n0, p0, "control"));
  for (unsigned s : straddles) controls.push_back(make(Protocol::callpatch, k.control_wait_ticks, s, 0, n0, p0, "control"));
  for (unsigned s : straddles) controls.push_back(make(Protocol::sync_core, 0, s, 0, n0, p0, "control"));
  log(fmt::format("controls: {} cells, ~{} budget", controls.size(), format_duration(controls_end)));
  for (std::size_t i = 0; i < controls.size(); ++i) {
    if (!run_one(controls[i], slot(controls_end, controls.size() - i), cfg.max_failures)) return out;
  }
  out.controls = control_verdicts(out.rows);
  for (const auto& v : out.controls) {
    if (v.positive) out.positive_control_failed = v.ok;
    if (!v.positive && !v.ok) out.negative_control_failed = true;
  }
  if (out.negative_control_failed) {
    out.notes.push_back("a negative control failed; search and confirmation skipped");
    out.tmax = derive_tmax(out.rows);
    return out;
  }

  // (2) Search: a coarse ladder, then bisection. One failure decides a wait, so search
  // cells stop at their first failing toggle and a failing wait skips its other S.
  auto wait_fails = [&](std::uint64_t w, std::size_t est_cells_left) -> std::optional<bool> {
    for (std::size_t i = 0; i < straddles.size(); ++i) {
      auto row = run_one(make(Protocol::wordpatch, w, straddles[i], 0, n0, p0, "search"),
                         slot(search_end, est_cells_left - std::min(i, est_cells_left - 1)), 1);
      if (!row) return std::nullopt;
      if (row->failed()) return true;
    }
    return false;
  };
  const std::size_t nS = straddles.size();
  const std::size_t bisect_est = 6;
  log(fmt::format("search: ladder {} ticks, bisect to {} ticks", fmt::join(k.ladder, ","), k.resolution_ticks));
  bool top_failed = false;
  for (std::size_t i = 0; i < k.ladder.size(); ++i) {
    const auto f = wait_fails(k.ladder[i], (k.ladder.size() - i + bisect_est) * nS);
    if (!f) return out;
    top_failed = *f;
  }
  for (std::uint64_t w = std::max<std::uint64_t>(k.ladder.back() * 2, 50); top_failed && w <= k.max_wait_ticks; w *= 2) {
    log(fmt::format("search: every ladder wait failed up to here; trying W={}", w));
    const auto f = wait_fails(w, (bisect_est + 1) * nS);
    if (!f) return out;
    top_failed = *f;
  }
  // The search decides on "any failure at W" only: a clean low-exposure cell still points
  // the search upward, but only confirmation cells with enough exposure become evidence
  // (derive_tmax at the end applies the evidence rules to every row).
  std::set<std::uint64_t> failing, clean;
  for (const auto& r : out.rows) {
    if (r.protocol != "wordpatch") continue;
    (r.failed() ? failing : clean).insert(r.wait_ticks);
  }
  for (std::uint64_t w : failing) clean.erase(w);
  std::optional<std::uint64_t> hi, lo;
  if (!failing.empty()) lo = *failing.rbegin();
  for (std::uint64_t w : clean) {
    if (!lo || w > *lo) {
      hi = w;
      break;
    }
  }
  if (!hi) {
    out.notes.push_back(fmt::format("no clean wait found up to {} ticks: the boundary is above the search range",
                                    k.max_wait_ticks));
    out.tmax = derive_tmax(out.rows);
    return out;
  }
  while (lo && *hi - *lo > k.resolution_ticks) {
    std::uint64_t mid = *lo + (*hi - *lo) / 2 / k.resolution_ticks * k.resolution_ticks;
    if (mid <= *lo) mid = *lo + k.resolution_ticks;
    if (mid >= *hi) break;
    // Out of search budget (with slack for the minimum cell size): confirm from hi.
    if (env.elapsed_s() > search_end + 0.05 * k.budget_s) {
      out.notes.push_back(fmt::format("search budget spent; bisection stopped between {} and {} ticks", *lo, *hi));
      break;
    }
    const auto steps = static_cast<std::size_t>(
        std::ceil(std::log2(static_cast<double>(*hi - *lo) / static_cast<double>(k.resolution_ticks))));
    const auto f = wait_fails(mid, std::max<std::size_t>(steps, 1) * nS);
    if (!f) return out;
    (*f ? lo : hi) = mid;
  }
  log(fmt::format("search: boundary at W={} ticks (largest failing: {})", *hi,
                  lo ? std::to_string(*lo) : std::string("none")));
  TmaxDerivation d;
  // Boundary decisions see earlier runs of this machine too (their failures still count).
  auto derive_all = [&]() {
    if (env.prior_rows.empty()) return derive_tmax(out.rows);
    std::vector<ResultRow> all = env.prior_rows;
    all.insert(all.end(), out.rows.begin(), out.rows.end());
    return derive_tmax(all);
  };

  // (3) Confirmation at W_obs and above, over every S, executor count and placement, in
  // rounds so that the budget is spread evenly whenever it runs out.
  std::uint64_t base = *hi;
  if (!env.prior_rows.empty()) {
    const TmaxDerivation pooled = derive_all();
    std::uint64_t pooled_base = 0;
    if (pooled.observed_ticks) {
      pooled_base = *pooled.observed_ticks;
    } else if (pooled.max_failing_wait) {
      pooled_base = round_up(2 * *pooled.max_failing_wait, k.resolution_ticks);
    }
    if (pooled_base > base) {
      log(fmt::format("confirm: earlier runs of this machine put the boundary at W={} (this run: {})",
                      pooled_base, base));
      out.notes.push_back(fmt::format(
          "confirmation starts at W={} ticks, the boundary implied by earlier runs of this machine "
          "together with this one (this run's search alone: {})",
          pooled_base, base));
      base = pooled_base;
    }
  }
  out.confirm_waits = plan_confirm_waits(base, k);
  bool stop_confirm = false;
  // After max_replans moves the boundary is frozen: failures are still recorded (Tmax is
  // derived from every row at the end) but the rest of the budget keeps confirming the
  // frozen waits instead of being left unspent, so the final Tmax has evidence.
  bool frozen = false;
  while (!stop_confirm) {
    const double left = confirm_end - env.elapsed_s();
    // A round must afford at least a minimal cell per cell slot; otherwise we are done.
    std::size_t cells_per_wait = nS * cfg.executors.size() * cfg.placements.size();
    const double min_round = static_cast<double>(cells_per_wait * out.confirm_waits.size()) *
                             (model.overhead_s() + 0.05);
    if (left < min_round) break;
    const double round_s = std::min(k.confirm_round_s, left);
    double wsum = 0;
    for (double w : k.confirm_weights) wsum += w;
    bool replanned = false;
    for (std::size_t wi = 0; wi < out.confirm_waits.size() && !replanned; ++wi) {
      const double cell_s = round_s * (wsum > 0 ? k.confirm_weights[wi] / wsum : 1.0 / static_cast<double>(out.confirm_waits.size())) /
                            static_cast<double>(cells_per_wait);
      for (unsigned s : straddles) {
        for (unsigned n : cfg.executors) {
          for (Placement pl : cfg.placements) {
            // Rounds are sized to fit; this only catches overruns (a hang's watchdog).
            if (env.elapsed_s() > confirm_end + 0.02 * k.budget_s) {
              out.notes.push_back("confirmation stopped at the end of the budget, mid-round");
              stop_confirm = replanned = true;
              break;
            }
            auto row = run_one(make(Protocol::wordpatch, out.confirm_waits[wi], s, 0, n, pl, "confirm"), cell_s,
                               cfg.max_failures);
            if (!row) return out;
            if (!row->failed() || frozen) continue;
            d = derive_all();
            // The next planned wait above the failure is confirmed from scratch; with
            // none left, the smallest clean wait above it, or twice the failing wait.
            std::uint64_t new_base = d.observed_ticks ? *d.observed_ticks
                                                      : round_up(2 * *d.max_failing_wait, k.resolution_ticks);
            for (std::uint64_t w : out.confirm_waits) {
              if (w > *d.max_failing_wait) {
                new_base = std::min(new_base, w);
                break;
              }
            }
            ++out.replans;
            log(fmt::format("confirm: failure at W={} (S={} N={}); boundary moves to W={}", row->wait_ticks, s, n,
                            new_base));
            out.notes.push_back(fmt::format("confirmation found a failure at W={} ticks; boundary moved to {}",
                                            row->wait_ticks, new_base));
            if (out.replans >= k.max_replans) {
              out.notes.push_back(fmt::format(
                  "the boundary moved {} times (max_replans); the rest of the budget confirms W={} and above",
                  out.replans, new_base));
              frozen = true;
            }
            base = new_base;
            out.confirm_waits = plan_confirm_waits(base, k);
            replanned = true;
            break;
          }
          if (replanned) break;
        }
        if (replanned) break;
      }
    }
  }
  out.tmax = derive_tmax(out.rows);
  out.boundary_found = out.tmax.observed_ticks.has_value();
  if (out.tmax.low_exposure_cells) {
    out.notes.push_back(fmt::format("{} wordpatch cells had low exposure and are not evidence", out.tmax.low_exposure_cells));
  }
  return out;
}

std::vector<ResultRow> read_prior_rows(const std::string& dir, const std::string& exclude_csv,
                                       const std::string& slug, std::vector<std::string>* used,
                                       std::vector<std::string>* skipped) {
  namespace fs = std::filesystem;
  std::vector<ResultRow> rows;
  std::error_code ec;
  std::vector<fs::path> csvs;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("sweep-", 0) == 0 && e.path().extension() == ".csv") csvs.push_back(e.path());
  }
  std::sort(csvs.begin(), csvs.end());
  for (const auto& csv : csvs) {
    if (!exclude_csv.empty() && fs::equivalent(csv, exclude_csv, ec)) continue;
    fs::path json = csv;
    json.replace_extension(".json");
    try {
      const std::string ctx = read_file(json.string());
      if (ctx.find("\"slug\": \"" + slug + "\"") == std::string::npos) {
        if (skipped) skipped->push_back(csv.string() + ": context names another machine");
        continue;
      }
      std::size_t n = 0;
      for (ResultRow& r : read_results_csv(csv.string())) {
        if (r.protocol != "wordpatch") continue;
        rows.push_back(std::move(r));
        ++n;
      }
      if (used && n) used->push_back(csv.string());
    } catch (const std::exception& e) {
      if (skipped) skipped->push_back(csv.string() + ": " + e.what());
    }
  }
  return rows;
}

}  // namespace crossmod::harness
