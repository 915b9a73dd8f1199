// `crossmod sweep`: runs a preset's grid cell by cell (each in a forked child via
// run_cell), appending each row to DIR/sweep-<stamp>.csv as it finishes, with a JSON
// context beside it. Everything is validated before any file is created.
// Thread safety: runs on the main thread; installs SIGINT/SIGTERM handlers (sweep.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <filesystem>
#include <optional>
#include <stdexcept>

#include "cell/cell.hpp"
#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "runs/preset.hpp"
#include "results/results_io.hpp"
#include "results/run_context.hpp"
#include "runs/sweep.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {
namespace {

struct SweepArgs {
  std::string preset, config, out;
  bool resume = false;
  bool quiet = false;
  bool inject_control_failure = false;  // hidden; tests only
  unsigned rounds = 0;
  Overrides ov;
};

void run_sweep(const SweepArgs& a) {
  // 1. Validate everything; nothing is written before this block ends.
  if (a.preset.empty() == a.config.empty()) throw UsageError("give exactly one of --preset NAME or --config FILE");
  if (a.out.empty()) throw UsageError("--out DIR is required");
  const std::string preset_path = a.config.empty() ? find_preset(a.preset) : a.config;
  SweepConfig cfg = load_preset_file(preset_path);
  apply_overrides(cfg, a.ov);
  if (a.rounds > 100000) throw UsageError(fmt::format("--rounds {} is too many (at most 100000)", a.rounds));
  cfg.rounds = a.rounds;
  const Topology topo = Topology::load();
  const auto warnings = placement_warnings(cfg, topo);
  check_writable_dir(a.out, "output directory");
  const std::vector<CellSpec> cells = cfg.expand(Phase::grid);

  Resumed resumed;
  if (a.resume) resumed = find_resume(a.out, "sweep", cfg.config_key(), "for this config");
  const std::optional<std::string>& resume_csv = resumed.csv;
  const std::vector<ResultRow>& resumed_rows = resumed.rows;

  // 2. Files.
  make_dirs(a.out);
  const double tsc_hz = tsc_info().hz;
  SweepContext ctx;
  const ResultPaths paths = choose_result_paths(a.out, resume_csv.value_or(""), &ctx);
  const std::string& csv_path = paths.csv;
  const std::string& json_path = paths.json;
  describe_run(&ctx, "sweep", cfg, a.config.empty() ? a.preset : a.config, csv_path, topo, warnings);
  ctx.cells_planned = cells.size();
  ResultsWriter writer(csv_path, resume_csv.has_value());
  write_file_atomic(json_path, ctx.render());

  for (const auto& w : warnings) fmt::print(stderr, "sweep: warning: {}\n", w);
  fmt::print(stderr, "sweep: {} cells ({}), results in {}\n", cells.size(), ctx.preset, csv_path);

  // 3. Cells.
  interrupt::install();
  CellEnv rc;
  rc.topology = &topo;
  Progress progress(!a.quiet);
  CellLoop loop(&writer, [&](const CellSpec& s) { return run_cell_for(s, rc, a.inject_control_failure); }, tsc_hz,
                resumed_rows, &progress);
  std::size_t skipped = 0;
  for (const auto& c : cells) skipped += loop.is_resumed(c) ? 1 : 0;
  if (resume_csv) fmt::print(stderr, "sweep: resuming: {} of {} cells already done\n", skipped, cells.size());
  EtaModel eta;
  for (const auto& r : resumed_rows) eta.add(r);
  for (std::size_t i = 0; i < cells.size(); ++i) {
    if (interrupt::requested()) break;
    std::optional<double> left = 0.0;
    for (std::size_t j = i; j < cells.size() && left; ++j) {
      if (loop.is_resumed(cells[j])) continue;
      const auto e = eta.estimate(cells[j]);
      left = e ? std::optional<double>(*left + *e) : std::nullopt;
    }
    const bool was_resumed = loop.is_resumed(cells[i]);
    auto row = loop.run(cells[i], fmt::format("{}/{}", i + 1, cells.size()), left);
    if (!row) break;
    if (!was_resumed) eta.add(*row);
  }
  progress.finish();

  // 4. Close the record.
  ctx.interrupted = interrupt::requested();
  ctx.finished_utc = ctx.interrupted ? "" : utc_iso8601();
  ctx.cells_run = loop.cells_run();
  ctx.cells_resumed = loop.cells_resumed();
  write_file_atomic(json_path, ctx.render());
  fmt::print("{}", summary_table(loop.rows()));
  if (ctx.interrupted) {
    fmt::print(stderr,
               "sweep: interrupted; {} finished cells are in {} (the running cell was dropped).\n"
               "sweep: continue with the same command plus --resume\n",
               writer.next_cell_id() - 1, csv_path);
    exit_code() = 128 + interrupt::signal_number();
    return;
  }
  fmt::print(stderr, "sweep: {} cells run, {} resumed; results: {} (context: {})\n", loop.cells_run(),
             loop.cells_resumed(), csv_path, json_path);
  // A negative control must never fail; when one does, nothing else this sweep measured
  // can be trusted, and scripts must see it.
  if (const auto bad = failed_negative_controls(loop.rows()); !bad.empty()) {
    print_negative_control_banner("sweep", bad, "nothing else this sweep measured can be trusted.", csv_path);
    exit_code() = 1;
  }
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "run a grid of cells (protocol x W x S x N x placement x rep)");
  cmd->add_option("--preset", args->preset, "preset name: configs/sweep/NAME.toml (smoke, quick, paper)");
  cmd->add_option("--config", args->config, "preset file path");
  cmd->add_option("--out", args->out, "output directory for sweep-<stamp>.csv/.json")->required();
  cmd->add_flag("--resume", args->resume, "continue the newest matching sweep in --out, skipping finished cells");
  cmd->add_flag("--quiet", args->quiet, "no progress line");
  cmd->add_option("--rounds", args->rounds,
                  "run the grid this many times, each round in a fresh random order (rep = round)");
  cmd->add_flag("--inject-control-failure", args->inject_control_failure)->group("");  // tests only
  auto opt = [&](const char* name, std::optional<std::string>& dst, const char* help) {
    cmd->add_option_function<std::string>(name, [&dst](const std::string& v) { dst = v; }, help);
  };
  opt("--protocols", args->ov.protocols, "comma list: wordpatch,naive,callpatch,aligned,sync-core");
  opt("--waits", args->ov.waits, "comma list of W in ticks; from:to:step ranges allowed");
  opt("--straddles", args->ov.straddles, "comma list of S in 0..4");
  opt("--executors", args->ov.executors, "comma list of executor counts");
  opt("--placements", args->ov.placements, "comma list: spread,smt,cross-package");
  opt("--aligned-offsets", args->ov.aligned_offsets, "comma list of site offsets for `aligned`");
  opt("--reps", args->ov.reps, "repetitions per cell");
  opt("--toggles", args->ov.toggles, "toggles per cell (all protocols)");
  opt("--dwell", args->ov.dwell, "dwell between toggles: auto or ticks");
  opt("--watchdog", args->ov.watchdog, "per-cell watchdog, seconds");
  opt("--max-failures", args->ov.max_failures, "stop a cell after this many failing toggles");
  cmd->callback([args] { run_sweep(*args); });
}

}  // namespace crossmod::harness
