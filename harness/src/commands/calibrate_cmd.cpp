// `crossmod calibrate`: interleaved rounds with a sentinel and the controls in every round
// (calibrate.hpp), all cells in one sweep CSV; then a verdict (bounded | not established |
// unbounded in the tested range), configs/tmax/<slug>.toml recording it with Tmax
// observed/recommended and the evidence, and results/<slug>/calibrate-<stamp>.json.
// Exit status: 0 bounded or not established; 1 unbounded or a negative control failed
// (no Tmax config written then); 2 bad input; 128+N on signal N.
// Thread safety: runs on the main thread; installs SIGINT/SIGTERM handlers (sweep.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "machine/c2c.hpp"
#include "runs/calibrate.hpp"
#include "cell/cell.hpp"
#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "runs/preset.hpp"
#include "results/results_io.hpp"
#include "results/run_context.hpp"
#include "results/stats.hpp"
#include "runs/sweep.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {
namespace {

struct CalibrateArgs {
  std::string preset = "quick", config, out, tmax_out;
  bool resume = false;
  bool quiet = false;
  bool no_pool = false;
  double budget_s = 0;
  unsigned min_active_rounds = 0;
  bool inject_control_failure = false;  // hidden; tests only
};

struct Summary {
  // bounded | not-established | unbounded | negative-control-failed | interrupted
  std::string status;
  std::uint64_t observed = 0, recommended = 0, c2c = 0;
  double tsc_hz = 0;
  std::string c2c_note;
};

std::string render_calibrate_json(const Summary& s, const CalibrateOutcome& out, const VerdictReport& v,
                                  const VerdictReport& this_run, const std::string& results_csv,
                                  const std::string& tmax_path, bool tmax_written, const SweepContext& ctx) {
  const auto& d = v.tmax;
  std::vector<std::string> controls;
  for (const auto& c : out.controls) {
    JsonObject o;
    o.str("protocol", c.protocol)
        .str("role", c.positive ? "positive" : "negative")
        .boolean("ok", c.ok)
        .num("cells", c.cells)
        .num("toggles", c.toggles)
        .num("exposed_toggles", c.exposed_toggles)
        .num("failures", c.failures)
        .num("crash_or_hang_cells", c.crash_or_hang)
        .num("low_exposure_cells", c.low_exposure_cells)
        .str("verdict", c.verdict);
    controls.push_back(o.render(4));
  }
  std::string controls_json = "[";
  for (std::size_t i = 0; i < controls.size(); ++i) controls_json += (i ? ", " : "") + controls[i];
  controls_json += "]";
  const bool has_tmax = s.recommended > 0;
  JsonObject tmax;
  tmax.raw("observed_ticks", d.observed_ticks ? std::to_string(*d.observed_ticks) : "null")
      .raw("observed_ns", d.observed_ticks ? fmt::format("{:.1f}", static_cast<double>(*d.observed_ticks) * 1e9 / s.tsc_hz) : "null")
      .raw("recommended_ticks", has_tmax ? std::to_string(s.recommended) : "null")
      .raw("recommended_ns", has_tmax ? fmt::format("{:.1f}", static_cast<double>(s.recommended) * 1e9 / s.tsc_hz) : "null")
      .num("tsc_hz", s.tsc_hz)
      .str("margin_rule", margin_rule_text())
      .num("c2c_one_way_ticks", s.c2c)
      .raw("largest_failing_ticks", d.max_failing_wait ? std::to_string(*d.max_failing_wait) : "null");
  JsonObject ev;
  ev.num("toggles_at_or_above", d.toggles_at_or_above)
      .num("exposed_toggles_at_or_above", d.exposed_toggles_at_or_above)
      .num("failures_at_or_above", d.failures_at_or_above)
      .num("failure_bound_95_iid", d.failure_bound_95)
      .num("cells_at_or_above", d.cells_at_or_above)
      .num("low_exposure_cells_ignored", d.low_exposure_cells)
      .num("rounds", v.rounds)
      .num("active_rounds", v.active)
      .num("rounds_at_observed", v.at_observed.rounds)
      .num("active_rounds_at_observed", v.at_observed.evidence_active_rounds)
      .num("sentinel_tears_in_those_rounds", v.sentinel_tears_in_active)
      .num("active_round_bound_95", v.active_round_bound);
  JsonObject verdict;
  verdict.str("verdict", to_string(v.verdict))
      .str("phrase", verdict_phrase(v.verdict))
      .str("evidence", v.evidence)
      .str("advice", v.advice)
      .str("this_run_alone", to_string(this_run.verdict))
      .raw("this_run_observed_ticks",
           this_run.tmax.observed_ticks ? std::to_string(*this_run.tmax.observed_ticks) : "null");
  std::vector<std::string> notes = out.notes;
  if (!out.positive_control_failed && !out.controls.empty()) {
    notes.push_back("positive control (naive) never failed: exposure may be too low, or this hardware did not tear within the budget");
  }
  if (!s.c2c_note.empty()) notes.push_back("c2c_one_way_ticks: " + s.c2c_note);
  JsonObject o;
  o.num("schema_version", std::int64_t{2})
      .str("kind", "crossmod-calibrate")
      .str("status", s.status)
      .str("machine_slug", machine_slug())
      .raw("machine", ctx.machine_json.empty() ? std::string("{}") : ctx.machine_json)
      .str("results", results_csv)
      .raw("tmax_config", tmax_written ? json_string(tmax_path) : "null")
      .str("preset", ctx.preset)
      .str("command", ctx.command)
      .str("git_sha", ctx.git_sha)
      .str("started_utc", ctx.started_utc)
      .str("finished_utc", utc_iso8601())
      .raw("verdict", verdict.render())
      .raw("tmax", tmax.render())
      .raw("evidence", ev.render())
      .raw("controls", controls_json)
      .num("rounds", static_cast<std::uint64_t>(out.rounds))
      .num("round_s", out.round_s)
      .num("cells", static_cast<std::uint64_t>(out.rows.size()))
      .raw("notes", json_array_of_strings(notes));
  return o.render() + "\n";
}

void run_calibrate(const CalibrateArgs& a) {
  // 1. Validate everything before writing anything.
  const std::string preset_path = a.config.empty() ? find_preset(a.preset) : a.config;
  SweepConfig cfg = load_preset_file(preset_path);
  if (a.budget_s < 0) throw UsageError("--budget must be > 0 seconds");
  if (a.budget_s > 0) cfg.calibrate.budget_s = a.budget_s;
  if (a.min_active_rounds > 0) cfg.calibrate.min_active_rounds = a.min_active_rounds;
  const Topology topo = Topology::load();
  const auto warnings = placement_warnings(cfg, topo);
  const std::string slug = machine_slug();
  const std::string out_dir = a.out.empty() ? "results/" + slug : a.out;
  const std::string tmax_path = a.tmax_out.empty() ? "configs/tmax/" + slug + ".toml" : a.tmax_out;
  check_writable_dir(out_dir, "output directory");
  check_writable_file(tmax_path, "Tmax config");
  Resumed resumed;
  if (a.resume) resumed = find_resume(out_dir, "calibrate", cfg.config_key(), "for this preset");
  const std::optional<std::string>& resume_csv = resumed.csv;
  const std::vector<ResultRow>& resumed_rows = resumed.rows;
  const double tsc_hz = tsc_info().hz;
  if (!(tsc_hz > 0)) throw std::runtime_error("TSC frequency unknown");

  // 2. Core-to-core line transfer between the PUs the cells use: the floor of Tmax.
  Summary sum;
  sum.tsc_hz = tsc_hz;
  {
    const C2cResult c = measure_c2c_for(topo, cfg.placements.front(), cfg.executors.front());
    sum.c2c = c.one_way_ticks;
    sum.c2c_note = c.note;
  }

  // 3. Files.
  make_dirs(out_dir);
  SweepContext ctx;
  const ResultPaths paths = choose_result_paths(out_dir, resume_csv.value_or(""), &ctx);
  const std::string& csv_path = paths.csv;
  const std::string& json_path = paths.json;
  const std::string stamp = std::filesystem::path(csv_path).stem().string().substr(6);
  const std::string calib_json = fmt::format("{}/calibrate-{}.json", out_dir, stamp);
  describe_run(&ctx, "calibrate", cfg, a.config.empty() ? a.preset : a.config, csv_path, topo, warnings);
  ResultsWriter writer(csv_path, resume_csv.has_value());
  write_file_atomic(json_path, ctx.render());
  for (const auto& w : warnings) fmt::print(stderr, "calibrate: warning: {}\n", w);
  fmt::print(stderr, "calibrate: {} ({}), TSC {:.3f} GHz, budget {} of cells, preset {}\n", slug,
             cpu_identity().brand, tsc_hz / 1e9, format_duration(cfg.calibrate.budget_s), ctx.preset);
  fmt::print(stderr, "calibrate: core-to-core one-way line transfer {} ticks{}\n", sum.c2c,
             sum.c2c_note.empty() ? "" : " (" + sum.c2c_note + ")");
  fmt::print(stderr, "calibrate: results in {}\n", csv_path);

  // 4. Cells.
  interrupt::install();
  CellEnv rc;
  rc.topology = &topo;
  Progress progress(!a.quiet);
  CellLoop loop(&writer, [&](const CellSpec& s) { return run_cell_for(s, rc, a.inject_control_failure); }, tsc_hz,
                resumed_rows, &progress);
  const auto t0 = std::chrono::steady_clock::now();
  double resumed_s = 0;
  CalibrateEnv env;
  env.tsc_hz = tsc_hz;
  env.run = [&](const CellSpec& s, const std::string& pos, std::optional<double> eta) {
    const bool was_resumed = loop.is_resumed(s);
    auto row = loop.run(s, pos, eta);
    if (row && was_resumed) resumed_s += row->duration_s;
    return row;
  };
  env.elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() + resumed_s;
  };
  env.log = [&](const std::string& line) { progress.message("calibrate: " + line); };
  std::vector<std::string> pooled_files, pool_skipped;
  if (!a.no_pool) env.prior_rows = read_prior_rows(out_dir, csv_path, slug, &pooled_files, &pool_skipped);
  env.seed = std::hash<std::string>{}(csv_path) | 1;
  CalibrateOutcome out = run_calibration(cfg, env);
  progress.finish();
  // The verdict from this run alone, and (unless --no-pool) from every run recorded for
  // this machine in out_dir: a failure any earlier run saw still counts, and earlier
  // active rounds are evidence too.
  const VerdictReport this_run = decide_verdict(out.rows, cfg.calibrate, out.round_s);
  VerdictReport v = this_run;
  std::vector<ResultRow> evidence_rows = out.rows;
  if (!a.no_pool && !out.interrupted) {
    if (!pooled_files.empty()) {
      evidence_rows.insert(evidence_rows.end(), env.prior_rows.begin(), env.prior_rows.end());
      v = decide_verdict(evidence_rows, cfg.calibrate, out.round_s);
      out.notes.push_back(fmt::format(
          "evidence pooled over this run and {} earlier sweep file(s) of this machine in {}; this run alone: {}, "
          "observed {} ticks, largest failing {}",
          pooled_files.size(), out_dir, verdict_phrase(this_run.verdict),
          this_run.tmax.observed_ticks ? std::to_string(*this_run.tmax.observed_ticks) : std::string("none"),
          this_run.tmax.max_failing_wait ? std::to_string(*this_run.tmax.max_failing_wait) : std::string("none")));
    }
    for (const auto& sk : pool_skipped) out.notes.push_back("not pooled: " + sk);
  }
  ctx.interrupted = out.interrupted;
  ctx.finished_utc = out.interrupted ? "" : utc_iso8601();
  ctx.cells_planned = out.rows.size();
  ctx.cells_run = loop.cells_run();
  ctx.cells_resumed = loop.cells_resumed();
  write_file_atomic(json_path, ctx.render());

  // 5. People: controls, tables, verdict.
  fmt::print("crossmod calibrate  {}  ({})  TSC {:.3f} GHz  preset {}  {} rounds\n\n", slug, cpu_identity().brand,
             tsc_hz / 1e9, ctx.preset, out.rounds);
  fmt::print("controls (every round)\n");
  for (const auto& c : out.controls) {
    fmt::print("  {:<10} {:<9} {:<4} {}\n", c.protocol, c.positive ? "positive" : "negative", c.ok ? "ok" : "BAD",
               c.verdict);
  }
  fmt::print("\n{}", summary_table(out.rows));
  fmt::print("\nwordpatch by round ({} rounds, {} active: the sentinel tore){}\n{}", v.rounds, v.active,
             pooled_files.empty() ? "" : ", with earlier runs", rounds_table(evidence_rows));
  if (out.interrupted) {
    fmt::print(stderr,
               "calibrate: interrupted; {} finished cells are in {}; no Tmax written.\n"
               "calibrate: continue with the same command plus --resume\n",
               writer.next_cell_id() - 1, csv_path);
    exit_code() = 128 + interrupt::signal_number();
    return;
  }
  const std::string results_rel = csv_path;
  if (out.negative_control_failed) {
    sum.status = "negative-control-failed";
    std::vector<std::string> failed;
    for (const auto& c : out.controls) {
      if (!c.positive && !c.ok) failed.push_back(fmt::format("{}: {}", c.protocol, c.verdict));
    }
    print_negative_control_banner("calibrate", failed, "a Tmax measured here would mean nothing. NO Tmax config was written.",
                                  fmt::format("{} and {}", csv_path, calib_json));
    write_file_atomic(calib_json, render_calibrate_json(sum, out, v, this_run, results_rel, tmax_path, false, ctx));
    exit_code() = 1;
    return;
  }
  sum.status = to_string(v.verdict);
  const auto& d = v.tmax;
  fmt::print("\nverdict           {}\n", verdict_phrase(v.verdict));
  fmt::print("evidence          {}\n", v.evidence);
  if (d.observed_ticks) {
    sum.observed = *d.observed_ticks;
    sum.recommended = recommend_tmax(sum.observed, sum.c2c);
    fmt::print("Tmax observed     {:>6} ticks ({:.1f} ns)\n", sum.observed,
               static_cast<double>(sum.observed) * 1e9 / tsc_hz);
    fmt::print("Tmax recommended  {:>6} ticks ({:.1f} ns): {}\n", sum.recommended,
               static_cast<double>(sum.recommended) * 1e9 / tsc_hz, margin_rule_text());
  }
  fmt::print("largest failing W {:>6}\n", d.max_failing_wait ? std::to_string(*d.max_failing_wait) : std::string("none"));
  if (!v.advice.empty()) fmt::print("next              {}\n", v.advice);
  if (!out.positive_control_failed) {
    fmt::print(stderr,
               "calibrate: note: the positive control (naive) never failed: exposure may be too low, or this\n"
               "calibrate: note: hardware did not tear within the budget.\n");
  }
  for (const auto& n : out.notes) fmt::print(stderr, "calibrate: note: {}\n", n);

  make_dirs(std::filesystem::path(tmax_path).parent_path().empty() ? "." : std::filesystem::path(tmax_path).parent_path().string());
  TmaxFileInputs in;
  const CpuIdentity id = cpu_identity();
  in.verdict = to_string(v.verdict);
  in.evidence_sentence = v.evidence;
  in.slug = slug;
  in.vendor = id.vendor;
  in.brand = id.brand;
  in.family = id.family;
  in.model = id.model;
  in.stepping = id.stepping;
  in.microcode = microcode();
  in.kernel = kernel_release();
  // unbounded: the file records the verdict and no wordpatch Tmax (0 ticks; the engine
  // refuses it).
  in.observed_ticks = sum.observed;
  in.recommended_ticks = sum.recommended;
  in.c2c_one_way_ticks = sum.c2c;
  in.tsc_hz = tsc_hz;
  in.results = results_rel;
  in.command = ctx.command;
  in.git_sha = ctx.git_sha;
  in.date = utc_iso8601();
  in.preset = ctx.preset;
  in.notes = out.notes;
  in.rounds = v.rounds;
  in.active_rounds_at_observed = v.at_observed.evidence_active_rounds;
  in.active_round_bound = v.active_round_bound;
  if (!v.advice.empty()) in.notes.push_back(v.advice);
  if (!out.positive_control_failed) {
    in.notes.push_back("positive control (naive) never failed: exposure may be too low, or this hardware did not "
                       "tear within the budget; treat Tmax with caution");
  }
  if (!sum.c2c_note.empty()) in.notes.push_back("c2c_one_way_ticks: " + sum.c2c_note);
  write_file_atomic(tmax_path, render_tmax_toml(in, d, out.controls));
  write_file_atomic(calib_json, render_calibrate_json(sum, out, v, this_run, results_rel, tmax_path, true, ctx));
  fmt::print("\nwrote {} (verdict {})\n      {}\n      {}\n", tmax_path, to_string(v.verdict), csv_path, calib_json);
  if (v.verdict == Verdict::unbounded) {
    fmt::print(stderr, "calibrate: wordpatch is UNBOUNDED in the tested range on this machine: {}\n", v.advice);
    exit_code() = 1;
  }
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  auto* cmd = app.add_subcommand("calibrate", "find Tmax on this machine and write configs/tmax/<slug>.toml");
  cmd->add_option("--preset", args->preset, "preset name in configs/sweep (default quick)");
  cmd->add_option("--config", args->config, "preset file path instead of --preset");
  cmd->add_option("--out", args->out, "results directory (default results/<slug>)");
  cmd->add_option("--tmax-out", args->tmax_out, "Tmax config to write (default configs/tmax/<slug>.toml)");
  cmd->add_option("--budget", args->budget_s, "override the preset's cell budget, seconds");
  cmd->add_option("--min-active-rounds", args->min_active_rounds,
                  "active rounds at Tmax needed for the verdict `bounded` (default: the preset's)");
  cmd->add_flag("--resume", args->resume, "continue the newest matching calibrate run in --out");
  cmd->add_flag("--quiet", args->quiet, "no progress line");
  cmd->add_flag("--inject-control-failure", args->inject_control_failure)->group("");  // tests only
  cmd->add_flag("--no-pool", args->no_pool,
                "derive Tmax from this run only, not from every sweep of this machine in --out");
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace crossmod::harness
