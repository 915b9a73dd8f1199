// `crossmod calibrate`: controls, adaptive boundary search and confirmation for wordpatch
// (calibrate.hpp), all cells in one sweep CSV; then configs/tmax/<slug>.toml with Tmax
// observed/recommended and its evidence, and results/<slug>/calibrate-<stamp>.json.
// Thread safety: runs on the main thread; installs SIGINT/SIGTERM handlers (sweep.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "c2c_shim.hpp"
#include "calibrate.hpp"
#include "cell.hpp"
#include "commands.hpp"
#include "crossmod/machine.hpp"
#include "preset.hpp"
#include "results_io.hpp"
#include "run_context.hpp"
#include "stats.hpp"
#include "sweep.hpp"
#include "topology.hpp"

namespace crossmod::harness {
namespace {

struct CalibrateArgs {
  std::string preset = "quick", config, out, tmax_out;
  bool resume = false;
  bool quiet = false;
  bool no_pool = false;
  double budget_s = 0;
};

struct Summary {
  std::string status;  // ok | negative-control-failed | no-boundary | interrupted
  std::uint64_t observed = 0, recommended = 0, c2c = 0;
  double tsc_hz = 0;
  std::string c2c_note;
};

std::string render_calibrate_json(const Summary& s, const CalibrateOutcome& out, const std::string& results_csv,
                                  const std::string& tmax_path, const SweepContext& ctx) {
  const auto& d = out.tmax;
  std::vector<std::string> controls;
  for (const auto& v : out.controls) {
    JsonObject c;
    c.str("protocol", v.protocol)
        .str("role", v.positive ? "positive" : "negative")
        .boolean("ok", v.ok)
        .num("cells", v.cells)
        .num("toggles", v.toggles)
        .num("exposed_toggles", v.exposed_toggles)
        .num("failures", v.failures)
        .num("crash_or_hang_cells", v.crash_or_hang)
        .num("low_exposure_cells", v.low_exposure_cells)
        .str("verdict", v.verdict);
    controls.push_back(c.render(4));
  }
  std::string controls_json = "[";
  for (std::size_t i = 0; i < controls.size(); ++i) controls_json += (i ? ", " : "") + controls[i];
  controls_json += "]";
  std::string waits = "[";
  for (std::size_t i = 0; i < out.confirm_waits.size(); ++i) waits += (i ? ", " : "") + std::to_string(out.confirm_waits[i]);
  waits += "]";
  JsonObject tmax;
  tmax.raw("observed_ticks", d.observed_ticks ? std::to_string(*d.observed_ticks) : "null")
      .raw("observed_ns", d.observed_ticks ? fmt::format("{:.1f}", static_cast<double>(*d.observed_ticks) * 1e9 / s.tsc_hz) : "null")
      .raw("recommended_ticks", s.status == "ok" ? std::to_string(s.recommended) : "null")
      .raw("recommended_ns", s.status == "ok" ? fmt::format("{:.1f}", static_cast<double>(s.recommended) * 1e9 / s.tsc_hz) : "null")
      .num("tsc_hz", s.tsc_hz)
      .str("margin_rule", margin_rule_text())
      .num("c2c_one_way_ticks", s.c2c)
      .raw("largest_failing_ticks", d.max_failing_wait ? std::to_string(*d.max_failing_wait) : "null");
  JsonObject ev;
  ev.num("toggles_at_or_above", d.toggles_at_or_above)
      .num("exposed_toggles_at_or_above", d.exposed_toggles_at_or_above)
      .num("failures_at_or_above", d.failures_at_or_above)
      .num("failure_bound_95", d.failure_bound_95)
      .num("cells_at_or_above", d.cells_at_or_above)
      .num("low_exposure_cells_ignored", d.low_exposure_cells);
  std::vector<std::string> notes = out.notes;
  if (!out.positive_control_failed && !out.controls.empty()) {
    notes.push_back("positive control (naive) never failed: exposure may be too low, or this hardware did not tear within the budget");
  }
  if (!s.c2c_note.empty()) notes.push_back("c2c_one_way_ticks: " + s.c2c_note);
  JsonObject o;
  o.num("schema_version", std::int64_t{1})
      .str("kind", "crossmod-calibrate")
      .str("status", s.status)
      .str("machine_slug", machine_slug())
      .raw("machine", ctx.machine_json.empty() ? std::string("{}") : ctx.machine_json)
      .str("results", results_csv)
      .raw("tmax_config", s.status == "ok" ? json_string(tmax_path) : "null")
      .str("preset", ctx.preset)
      .str("command", ctx.command)
      .str("git_sha", ctx.git_sha)
      .str("started_utc", ctx.started_utc)
      .str("finished_utc", utc_iso8601())
      .raw("tmax", tmax.render())
      .raw("evidence", ev.render())
      .raw("controls", controls_json)
      .raw("confirm_waits", waits)
      .num("replans", static_cast<std::uint64_t>(out.replans))
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
  const Topology topo = Topology::load();
  const auto warnings = placement_warnings(cfg, topo);
  const std::string slug = machine_slug();
  const std::string out_dir = a.out.empty() ? "results/" + slug : a.out;
  const std::string tmax_path = a.tmax_out.empty() ? "configs/tmax/" + slug + ".toml" : a.tmax_out;
  check_writable_dir(out_dir, "output directory");
  check_writable_file(tmax_path, "Tmax config");
  std::optional<std::string> resume_csv;
  std::vector<ResultRow> resumed_rows;
  if (a.resume) {
    resume_csv = find_resumable(out_dir, "calibrate", cfg.config_key());
    if (!resume_csv) {
      fmt::print(stderr, "calibrate: nothing to resume in {} for this preset; starting afresh\n", out_dir);
    } else {
      try {
        resumed_rows = read_results_csv(*resume_csv);
      } catch (const std::exception& e) {
        throw UsageError(fmt::format("cannot resume: {}", e.what()));
      }
    }
  }
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
  RunContext rc;
  rc.topology = &topo;
  Progress progress(!a.quiet);
  CellLoop loop(&writer, [&](const CellSpec& s) { return run_cell(s, rc); }, tsc_hz, resumed_rows, &progress);
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
  CalibrateOutcome out = run_calibration(cfg, env);
  progress.finish();
  // Tmax from this run alone, and (unless --no-pool) from every run recorded for this
  // machine in out_dir: a failure any earlier run saw still counts.
  const TmaxDerivation this_run = out.tmax;
  if (!a.no_pool && !out.interrupted) {
    if (!pooled_files.empty()) {
      std::vector<ResultRow> pooled = env.prior_rows;
      pooled.insert(pooled.end(), out.rows.begin(), out.rows.end());
      out.tmax = derive_tmax(pooled);
      out.notes.push_back(fmt::format(
          "Tmax evidence pooled over this run and {} earlier sweep file(s) of this machine in {}; this run alone: "
          "observed {} ticks, largest failing {}",
          pooled_files.size(), out_dir,
          this_run.observed_ticks ? std::to_string(*this_run.observed_ticks) : std::string("none"),
          this_run.max_failing_wait ? std::to_string(*this_run.max_failing_wait) : std::string("none")));
    }
    for (const auto& sk : pool_skipped) out.notes.push_back("not pooled: " + sk);
  }
  ctx.interrupted = out.interrupted;
  ctx.finished_utc = out.interrupted ? "" : utc_iso8601();
  ctx.cells_planned = out.rows.size();
  ctx.cells_run = loop.cells_run();
  ctx.cells_resumed = loop.cells_resumed();
  write_file_atomic(json_path, ctx.render());

  // 5. People: controls, per-phase table, Tmax.
  fmt::print("crossmod calibrate  {}  ({})  TSC {:.3f} GHz  preset {}\n\n", slug, cpu_identity().brand, tsc_hz / 1e9,
             ctx.preset);
  fmt::print("controls\n");
  for (const auto& v : out.controls) {
    fmt::print("  {:<10} {:<9} {:<4} {}\n", v.protocol, v.positive ? "positive" : "negative", v.ok ? "ok" : "BAD",
               v.verdict);
  }
  fmt::print("\n{}", summary_table(out.rows));
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
    fmt::print(stderr, "\n");
    fmt::print(stderr, "calibrate: ************************************************************\n");
    fmt::print(stderr, "calibrate: A NEGATIVE CONTROL FAILED. Protocols that must never fail did:\n");
    for (const auto& v : out.controls) {
      if (!v.positive && !v.ok) fmt::print(stderr, "calibrate:   {}: {}\n", v.protocol, v.verdict);
    }
    fmt::print(stderr, "calibrate: The engine, the harness or this machine is broken; a Tmax measured\n");
    fmt::print(stderr, "calibrate: here would mean nothing. NO Tmax config was written.\n");
    fmt::print(stderr, "calibrate: Details: {} and {}\n", csv_path, calib_json);
    fmt::print(stderr, "calibrate: ************************************************************\n");
    write_file_atomic(calib_json, render_calibrate_json(sum, out, results_rel, tmax_path, ctx));
    exit_code() = 1;
    return;
  }
  if (!out.tmax.observed_ticks) {
    sum.status = "no-boundary";
    fmt::print(stderr, "calibrate: no wait W had zero failures at and above it ({}). NO Tmax config was written.\n",
               out.notes.empty() ? std::string("every trusted cell failed or had low exposure") : out.notes.back());
    write_file_atomic(calib_json, render_calibrate_json(sum, out, results_rel, tmax_path, ctx));
    exit_code() = 1;
    return;
  }
  sum.status = "ok";
  sum.observed = *out.tmax.observed_ticks;
  sum.recommended = recommend_tmax(sum.observed, sum.c2c);
  const auto& d = out.tmax;
  fmt::print("\nTmax observed     {:>6} ticks ({:.1f} ns): 0 failures in {} exposed toggles at W >= {}, p < {:.3g} at 95%\n",
             sum.observed, static_cast<double>(sum.observed) * 1e9 / tsc_hz, d.exposed_toggles_at_or_above,
             sum.observed, d.failure_bound_95);
  fmt::print("Tmax recommended  {:>6} ticks ({:.1f} ns): {}\n", sum.recommended,
             static_cast<double>(sum.recommended) * 1e9 / tsc_hz, margin_rule_text());
  fmt::print("largest failing W {:>6}\n", d.max_failing_wait ? std::to_string(*d.max_failing_wait) : std::string("none"));
  if (!pooled_files.empty()) {
    fmt::print("evidence          this run + {} earlier sweep file(s) of this machine (this run alone: observed {})\n",
               pooled_files.size(),
               this_run.observed_ticks ? std::to_string(*this_run.observed_ticks) + " ticks" : std::string("none"));
  }
  if (!out.positive_control_failed) {
    fmt::print(stderr,
               "calibrate: note: the positive control (naive) never failed: exposure may be too low, or this\n"
               "calibrate: note: hardware did not tear within the budget. Tmax is written but weakly supported.\n");
  }
  for (const auto& n : out.notes) fmt::print(stderr, "calibrate: note: {}\n", n);
  make_dirs(std::filesystem::path(tmax_path).parent_path().empty() ? "." : std::filesystem::path(tmax_path).parent_path().string());
  TmaxFileInputs in;
  const CpuIdentity id = cpu_identity();
  in.slug = slug;
  in.vendor = id.vendor;
  in.brand = id.brand;
  in.family = id.family;
  in.model = id.model;
  in.stepping = id.stepping;
  in.microcode = microcode();
  in.kernel = kernel_release();
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
  if (!out.positive_control_failed) {
    in.notes.push_back("positive control (naive) never failed: exposure may be too low, or this hardware did not "
                       "tear within the budget; treat Tmax with caution");
  }
  if (!sum.c2c_note.empty()) in.notes.push_back("c2c_one_way_ticks: " + sum.c2c_note);
  write_file_atomic(tmax_path, render_tmax_toml(in, out.tmax, out.controls));
  write_file_atomic(calib_json, render_calibrate_json(sum, out, results_rel, tmax_path, ctx));
  fmt::print("\nwrote {}\n      {}\n      {}\n", tmax_path, csv_path, calib_json);
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
  cmd->add_flag("--resume", args->resume, "continue the newest matching calibrate run in --out");
  cmd->add_flag("--quiet", args->quiet, "no progress line");
  cmd->add_flag("--no-pool", args->no_pool,
                "derive Tmax from this run only, not from every sweep of this machine in --out");
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace crossmod::harness
