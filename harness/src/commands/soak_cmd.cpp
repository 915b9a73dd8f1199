// `crossmod soak`: what a user runs before putting a Tmax into production. Wordpatch at
// one W (default: this machine's configured Tmax) at every S, in rounds with a sentinel
// cell, for a wall-clock duration. Rows are appended as they finish into an ordinary
// results CSV (run kind "soak"), so calibrate pools them as evidence for this machine;
// --resume continues the newest soak file of the same W and S, counting the time already
// spent. Exit status: 0 no tear at W; 1 a tear at W (or a crash/hang of a W cell); 2 bad
// input; 128+N on signal N.
// Thread safety: runs on the main thread; installs SIGINT/SIGTERM handlers (sweep.hpp).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <set>

#include "runs/calibrate.hpp"
#include "cell/cell.hpp"
#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "crossmod/tmax_config.hpp"
#include "runs/preset.hpp"
#include "results/results_io.hpp"
#include "results/run_context.hpp"
#include "results/stats.hpp"
#include "runs/sweep.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {
namespace {

struct SoakArgs {
  std::optional<std::uint64_t> wait, sentinel;
  std::string duration = "2h";
  std::string straddles = "1,2,3,4";
  std::string out;
  double cell_s = 0.5;
  unsigned executors = 1;
  bool resume = false;
  bool quiet = false;
};

void run_soak(const SoakArgs& a) {
  // 1. Validate; nothing is written before this block ends.
  const double for_s = parse_duration(a.duration, "--for");
  if (!(a.cell_s > 0) || a.cell_s > 60) throw UsageError("--cell-s must be in (0, 60] seconds");
  const std::string slug = machine_slug();
  std::uint64_t w = 0;
  std::string w_source;
  if (a.wait) {
    w = *a.wait;
    w_source = "--wait";
  } else {
    TmaxConfig tc;
    ConfigError err;
    const Status st = load_tmax_config_auto(&tc, &err);
    if (st != Status::ok && tc.is_default) {
      throw UsageError(fmt::format("no Tmax config for this machine ({}): give --wait TICKS", err.to_string()));
    }
    if (tc.is_default) throw UsageError("no calibrated Tmax for this machine: run `crossmod calibrate` or give --wait TICKS");
    w = tc.recommended_ticks;
    w_source = tc.source;
  }
  if (w == 0) throw UsageError("the wait to soak is 0 ticks (an unbounded verdict?): give --wait TICKS");
  SweepConfig cfg;
  cfg.name = "soak";
  cfg.protocols = {Protocol::wordpatch};
  cfg.waits = {w};
  cfg.straddles = parse_unsigned_list(a.straddles, "--straddles");
  for (unsigned s : cfg.straddles)
    if (s < 1 || s > 4) throw UsageError(fmt::format("--straddles: {} is not in 1..4", s));
  if (a.executors == 0) throw UsageError("--executors must be >= 1");
  cfg.executors = {a.executors};
  cfg.calibrate.cell_s = a.cell_s;
  const Topology topo = Topology::load();
  const auto warnings = placement_warnings(cfg, topo);
  const std::string out_dir = a.out.empty() ? "results/" + slug : a.out;
  check_writable_dir(out_dir, "output directory");
  // The sentinel: given, or chosen from this machine's earlier rows below W.
  std::vector<std::string> pooled, skipped;
  std::uint64_t sentinel = 0;
  if (a.sentinel) {
    sentinel = *a.sentinel;
  } else {
    const auto prior = read_prior_rows(out_dir, "", slug, &pooled, &skipped);
    sentinel = choose_sentinel(wait_rounds(prior), w, std::min<std::uint64_t>(w / 4, 400));
  }
  if (sentinel >= w) throw UsageError(fmt::format("--sentinel {} must be below the soaked wait {}", sentinel, w));
  cfg.waits = {sentinel, w};
  Resumed resumed;
  if (a.resume) resumed = find_resume(out_dir, "soak", cfg.config_key(), fmt::format("for W={} S={}", w, a.straddles));
  const std::optional<std::string>& resume_csv = resumed.csv;
  const std::vector<ResultRow>& resumed_rows = resumed.rows;
  const double tsc_hz = tsc_info().hz;

  // 2. Files.
  make_dirs(out_dir);
  SweepContext ctx;
  const ResultPaths paths = choose_result_paths(out_dir, resume_csv.value_or(""), &ctx);
  describe_run(&ctx, "soak", cfg, fmt::format("soak W={}", w), paths.csv, topo, warnings);
  ResultsWriter writer(paths.csv, resume_csv.has_value());
  write_file_atomic(paths.json, ctx.render());
  for (const auto& wn : warnings) fmt::print(stderr, "soak: warning: {}\n", wn);
  fmt::print(stderr, "soak: wordpatch W={} ticks ({}) at S={}, sentinel W={}, for {}; results in {}\n", w, w_source,
             a.straddles, sentinel, format_duration(for_s), paths.csv);

  // 3. Rounds until the time is spent (time already spent by resumed rows counts).
  interrupt::install();
  CellEnv rc;
  rc.topology = &topo;
  Progress progress(!a.quiet);
  double resumed_s = 0;
  std::int64_t first_round = 0;
  for (const auto& r : resumed_rows) {
    resumed_s += r.duration_s;
    first_round = std::max(first_round, r.round + 1);
  }
  // Resumed rows are not served again: rounds continue after the last one in the file.
  CellLoop loop(&writer, [&](const CellSpec& s) { return run_cell(s, rc); }, tsc_hz, {}, &progress);
  ToggleRateModel model(tsc_hz);
  for (const auto& r : resumed_rows) model.add(r);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() + resumed_s; };
  std::vector<ResultRow> rows = resumed_rows;
  std::uint64_t tears_at_w = 0;
  for (const auto& r : rows)
    if (r.phase == to_string(Phase::soak) && r.failed()) tears_at_w += r.failures;
  bool interrupted = false;
  for (std::int64_t round = first_round; elapsed() < for_s; ++round) {
    std::vector<CellSpec> cells;
    for (unsigned s : cfg.straddles) {
      CellSpec c;
      c.protocol = Protocol::wordpatch;
      c.wait_ticks = w;
      c.straddle = s;
      c.executors = a.executors;
      c.phase = Phase::soak;
      cells.push_back(c);
    }
    CellSpec sc = cells.front();
    sc.wait_ticks = sentinel;
    sc.straddle = cfg.straddles[static_cast<std::size_t>(round) % cfg.straddles.size()];
    sc.phase = Phase::sentinel;
    cells.push_back(sc);
    std::mt19937_64 rng(0x50A1ULL + static_cast<std::uint64_t>(round));
    std::shuffle(cells.begin(), cells.end(), rng);
    for (CellSpec& c : cells) {
      c.rep = static_cast<unsigned>(round);
      c.round = round;
      model.size_cell(&c, a.cell_s, cfg.calibrate, 30.0);
      c.max_failures = 100;
      const double left = std::max(0.0, for_s - elapsed());
      auto row = loop.run(c, fmt::format("round {} ({} at W={}, {} tears so far)", round, to_string(c.phase), c.wait_ticks,
                                         tears_at_w),
                          left);
      if (!row) {
        interrupted = true;
        break;
      }
      model.add(*row);
      rows.push_back(*row);
      if (row->phase == to_string(Phase::soak) && row->failed()) {
        tears_at_w += row->failures;
        progress.message(fmt::format("soak: TEAR at W={} S={} in round {}: {} failing toggles ({})", w, row->straddle,
                                     round, row->failures, row->note));
      }
    }
    if (interrupted) break;
  }
  progress.finish();
  ctx.interrupted = interrupted;
  ctx.finished_utc = interrupted ? "" : utc_iso8601();
  ctx.cells_planned = rows.size();
  ctx.cells_run = loop.cells_run();
  ctx.cells_resumed = resumed_rows.size();
  write_file_atomic(paths.json, ctx.render());

  // 4. Report: rounds, active rounds, the evidence at W.
  const auto by = wait_rounds(rows);
  const std::set<std::int64_t> active = active_rounds(rows);
  std::set<std::int64_t> all;
  for (const auto& r : rows) all.insert(r.round);
  fmt::print("crossmod soak  {}  wordpatch W={} ticks ({:.1f} ns)  {} rounds in {}, {} active (sentinel W={} tore)\n\n",
             slug, w, static_cast<double>(w) * 1e9 / tsc_hz, all.size(), format_duration(elapsed()), active.size(),
             sentinel);
  fmt::print("{}", rounds_table(rows));
  const auto it = by.find(w);
  const WaitRounds at = it == by.end() ? WaitRounds{} : it->second;
  if (tears_at_w > 0) {
    const stats::ClusterBound cb = stats::cluster_upper_bound(round_counts(at));
    fmt::print("\nTEARS at W={}: {} failing toggles in {} exposed ({} of {} rounds tore, {} of them active); "
               "rate {:.3g} per exposed toggle, < {:.3g} at 95% with rounds as units\n",
               w, at.tears, at.exposed, at.tearing_rounds, at.rounds, at.active_tearing_rounds,
               stats::rate(at.tears, at.exposed), cb.upper);
    fmt::print(stderr, "soak: W={} is NOT safe on this machine; calibrate again (its evidence now includes this soak)\n",
               w);
  } else {
    const double bound = stats::active_round_tear_fraction_upper(at.evidence_active_rounds);
    fmt::print("\n0 tears at W={} in {} exposed toggles over {} rounds; {} were active (the sentinel tore {} times "
               "in them): an active round tears at W={} with probability < {:.2g} (95%)\n",
               w, at.exposed, at.rounds, at.evidence_active_rounds, at.sentinel_tears, w, bound);
    if (at.evidence_active_rounds == 0) {
      fmt::print(stderr, "soak: the sentinel never tore: the machine was not seen in its tearing state; this soak "
                         "says little\n");
    }
  }
  fmt::print("results {}\n", paths.csv);
  if (interrupted) {
    fmt::print(stderr, "soak: interrupted; continue with the same command plus --resume\n");
    exit_code() = 128 + interrupt::signal_number();
    return;
  }
  if (tears_at_w > 0) exit_code() = 1;
}

}  // namespace

void register_soak(CLI::App& app) {
  auto args = std::make_shared<SoakArgs>();
  auto* cmd = app.add_subcommand("soak", "run wordpatch at one W for a long time, in rounds with a sentinel; "
                                         "exit 1 on any tear at W");
  cmd->add_option("--wait", args->wait, "W in ticks (default: this machine's configured Tmax)");
  cmd->add_option("--for", args->duration, "how long: 2h, 90m, 45s, 1h30m (default 2h)");
  cmd->add_option("--straddles", args->straddles, "comma list of S in 1..4 (default 1,2,3,4)");
  cmd->add_option("--sentinel", args->sentinel,
                  "sentinel W (default: chosen from this machine's earlier runs, else min(W/4, 400))");
  cmd->add_option("--executors", args->executors, "executor threads per cell (default 1)");
  cmd->add_option("--cell-s", args->cell_s, "target seconds per cell (default 0.5)");
  cmd->add_option("--out", args->out, "results directory (default results/<slug>)");
  cmd->add_flag("--resume", args->resume, "continue the newest soak of the same W and S in --out");
  cmd->add_flag("--quiet", args->quiet, "no progress line");
  cmd->callback([args] { run_soak(*args); });
}

}  // namespace crossmod::harness
