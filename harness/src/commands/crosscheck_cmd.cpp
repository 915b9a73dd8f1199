// `crossmod crosscheck`: runs harness wordpatch cells and the independent reference
// detector (reference/) interleaved, at the same W, S, toggles, dwell and PUs, and
// compares their tear rates per exposed toggle (issue 9, item 7). Rounds visit every
// (W, S) in a fresh random order; within a (W, S) the two run back to back, the first
// alternating between pairs (H R, R H, H R, ...) so neither always runs first.
// Thread safety: runs on the main thread; installs sweep.hpp's SIGINT/SIGTERM handler.
//
// CSV (DIR/crosscheck-<stamp>.csv), schema 1: one header line, then one row per run,
// appended with write(2) + fsync as the run ends, so a killed run loses at most the
// running row. Columns, in this order:
//   schema_version  1
//   round           1-based round number
//   order           1-based position of the run in the whole schedule
//   impl            harness | reference
//   wait_ticks      W, TSC ticks between int3 and back, and between back and front
//   straddle        S, bytes of the site before the 64-byte line boundary (1..4)
//   toggles         toggles performed
//   exposed         exposed toggles (each implementation's own exposure rule)
//   tears           toggles during which >= 1 executor faulted; a crash or hang counts 1
//   executions      completed calls of the site
//   start_utc_ms    wall-clock start of the run, ms since the Unix epoch
//   duration_s      wall time of the run, including fork and set-up
//   outcome         ok | crash | hang | error | blind
//   dwell_ticks     the dwell (the harness's actual dwell; both are given it explicitly)
//   executors       N
//   state_a,state_b completed calls that ran the call / the NOP
//   traps           int3 hits at the site: for the harness the engine's locked and late
//                   traps together (a hit whose signal arrives after the front store is
//                   "late": under KVM delivery takes longer than a 2 x 1600-tick window)
//   sigill,sigsegv,sigbus,stray_trap   faults by class
//   patcher_pu      OS CPU of the patcher; executor_pus: ';'-joined
//   note            quoted; why for anything but ok
// JSON (DIR/crosscheck-<stamp>.json, kind "crossmod-crosscheck", schema 1): the context
// (git sha, command, machine, config, seed, start/finish), then "summary": one entry per
// (W, S) and per W over all S, each with harness and reference {tears, exposed, rate,
// ci95, runs, rounds_with_tears} and ratio {estimate, ci95} (reference / harness).
#include <CLI/CLI.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>

#include "cell/cell.hpp"
#include "commands/commands.hpp"
#include "crossmod/machine.hpp"
#include "results/rate_ratio.hpp"
#include "reference/reference_detector.hpp"
#include "results/results_io.hpp"
#include "results/run_context.hpp"
#include "results/stats.hpp"
#include "runs/sweep.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {
namespace {

// ordered: the file reads context first, summary last, as written.
using json = nlohmann::ordered_json;

constexpr int kCrosscheckSchema = 1;

struct Args {
  std::string waits = "800,1600", straddles = "3,4", out, for_, site_entry = "call", reference_entry = "call";
  std::uint64_t toggles = 300000, dwell = 5000;
  unsigned executors = 1;
  std::optional<unsigned> rounds;
  std::optional<std::uint64_t> seed;
  std::optional<double> watchdog;
  bool quiet = false;
};

std::vector<std::uint64_t> parse_list(const std::string& text, const char* what) {
  std::vector<std::uint64_t> v;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 15) {
      throw UsageError(fmt::format("{}: '{}' is not a comma list of non-negative integers", what, text));
    }
    v.push_back(std::stoull(item));
    pos = comma + 1;
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}


struct Run {
  unsigned round = 0;
  std::uint64_t order = 0;
  std::string impl;
  std::uint64_t wait = 0;
  unsigned straddle = 0;
  std::uint64_t toggles = 0, exposed = 0, tears = 0, executions = 0;
  std::int64_t start_utc_ms = 0;
  double duration_s = 0;
  std::string outcome;
  std::uint64_t dwell = 0;
  unsigned executors = 0;
  std::uint64_t state_a = 0, state_b = 0, traps = 0, sigill = 0, sigsegv = 0, sigbus = 0, stray = 0;
  int patcher_pu = -1;
  std::vector<int> executor_pus;
  std::string note;
};

const char* kHeader =
    "schema_version,round,order,impl,wait_ticks,straddle,toggles,exposed,tears,executions,"
    "start_utc_ms,duration_s,outcome,dwell_ticks,executors,state_a,state_b,traps,sigill,"
    "sigsegv,sigbus,stray_trap,patcher_pu,executor_pus,note";

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) {
    if (c == '"') q += "\"\"";
    else if (c == '\n' || c == '\r') q += ' ';
    else q += c;
  }
  return q + "\"";
}

std::string csv_row(const Run& r) {
  std::string pus;
  for (std::size_t i = 0; i < r.executor_pus.size(); ++i) pus += fmt::format("{}{}", i ? ";" : "", r.executor_pus[i]);
  return fmt::format("{},{},{},{},{},{},{},{},{},{},{},{:.3f},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                     kCrosscheckSchema, r.round, r.order, r.impl, r.wait, r.straddle, r.toggles, r.exposed,
                     r.tears, r.executions, r.start_utc_ms, r.duration_s, r.outcome, r.dwell, r.executors,
                     r.state_a, r.state_b, r.traps, r.sigill, r.sigsegv, r.sigbus, r.stray, r.patcher_pu, pus,
                     quoted(r.note));
}

// Appends rows; each row is one write(2) then fsync, so the file only ends with whole rows.
class CsvAppender {
 public:
  explicit CsvAppender(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
    write_all(std::string(kHeader) + "\n");
  }
  ~CsvAppender() {
    if (fd_ >= 0) ::close(fd_);
  }
  CsvAppender(const CsvAppender&) = delete;
  CsvAppender& operator=(const CsvAppender&) = delete;
  void append(const Run& r) { write_all(csv_row(r)); }

 private:
  void write_all(const std::string& s) {
    std::size_t done = 0;
    while (done < s.size()) {
      const ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error(fmt::format("write '{}': {}", path_, std::strerror(errno)));
      done += static_cast<std::size_t>(n);
    }
    if (::fsync(fd_) != 0) throw std::runtime_error(fmt::format("fsync '{}': {}", path_, std::strerror(errno)));
  }
  std::string path_;
  int fd_ = -1;
};

std::int64_t now_utc_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Run from_cell(const CellResult& c) {
  Run r;
  r.impl = "harness";
  r.toggles = c.toggles;
  r.exposed = c.exposed_toggles;
  const bool died = c.outcome == Outcome::crash || c.outcome == Outcome::hang;
  r.tears = std::max<std::uint64_t>(c.failures, died ? 1 : 0);
  r.executions = c.executions;
  r.duration_s = c.duration_s;
  r.outcome = to_string(c.outcome);
  r.dwell = c.dwell_ticks;
  r.state_a = c.state_a;
  r.state_b = c.state_b;
  r.traps = c.traps + c.late_traps;
  r.sigill = c.sigill;
  r.sigsegv = c.sigsegv;
  r.sigbus = c.sigbus;
  r.stray = c.stray_trap;
  r.patcher_pu = c.patcher_pu;
  r.executor_pus = c.executor_pus;
  r.note = c.note;
  return r;
}

Run from_reference(const reference::Result& x, std::uint64_t dwell) {
  Run r;
  r.impl = "reference";
  r.toggles = x.toggles;
  r.exposed = x.exposed;
  const bool died = x.outcome == "crash" || x.outcome == "hang";
  r.tears = std::max<std::uint64_t>(x.tears, died ? 1 : 0);
  r.executions = x.executions;
  r.duration_s = x.duration_s;
  r.outcome = x.outcome;
  r.dwell = dwell;
  r.state_a = x.state_a;
  r.state_b = x.state_b;
  r.traps = x.traps;
  r.sigill = x.sigill;
  r.sigsegv = x.sigsegv;
  r.sigbus = x.sigbus;
  r.stray = x.stray_trap;
  r.patcher_pu = x.patcher_cpu;
  r.executor_pus = x.executor_cpus;
  r.note = x.note;
  return r;
}

// ---- summary ---------------------------------------------------------------------------

struct Tally {
  std::uint64_t tears = 0, exposed = 0, runs = 0, died = 0, traps = 0;
  std::map<unsigned, std::uint64_t> tears_by_round;
  void add(const Run& r) {
    tears += r.tears;
    exposed += r.exposed;
    traps += r.traps;
    ++runs;
    died += (r.outcome == "crash" || r.outcome == "hang") ? 1 : 0;
    tears_by_round[r.round] += r.tears;
  }
  std::uint64_t rounds_with_tears() const {
    std::uint64_t k = 0;
    for (const auto& [round, t] : tears_by_round) k += t > 0 ? 1 : 0;
    return k;
  }
};

struct SummaryRow {
  std::uint64_t wait = 0;
  std::optional<unsigned> straddle;  // nullopt: all S
  Tally h, r;
};

std::vector<SummaryRow> summarize(const std::vector<Run>& runs, const std::vector<std::uint64_t>& waits,
                                  const std::vector<std::uint64_t>& straddles) {
  std::vector<SummaryRow> out;
  for (std::uint64_t w : waits) {
    std::vector<std::optional<unsigned>> keys;
    for (std::uint64_t s : straddles) keys.emplace_back(static_cast<unsigned>(s));
    if (straddles.size() > 1) keys.emplace_back(std::nullopt);
    for (const auto& key : keys) {
      SummaryRow row;
      row.wait = w;
      row.straddle = key;
      for (const Run& r : runs) {
        if (r.wait != w || (key && r.straddle != *key)) continue;
        (r.impl == "harness" ? row.h : row.r).add(r);
      }
      out.push_back(row);
    }
  }
  return out;
}

std::string fmt_rate(double v) { return std::isinf(v) ? "inf" : fmt::format("{:.2e}", v); }
std::string fmt_ratio(double v) { return std::isinf(v) ? "inf" : fmt::format("{:.2f}", v); }

std::string rate_cell(const Tally& t) {
  if (t.exposed == 0) return "-";
  const auto ci = stats::clopper_pearson(t.tears, t.exposed);
  return fmt::format("{} [{}, {}]", fmt_rate(stats::rate(t.tears, t.exposed)), fmt_rate(ci.lower), fmt_rate(ci.upper));
}

std::string table(const std::vector<SummaryRow>& rows, unsigned rounds) {
  std::string s = fmt::format("{:>6} {:>3}  {:>16} {:<31}  {:>16} {:<31}  {:<22} {:>9}  {:>11}\n", "W", "S",
                              "harness t/exp", "rate [95% CI]", "reference t/exp", "rate [95% CI]",
                              "ref/harness [95% CI]", "torn rnds", "traps/exp");
  for (const SummaryRow& row : rows) {
    const auto ratio = stats::rate_ratio(row.r.tears, row.r.exposed, row.h.tears, row.h.exposed);
    const std::string ratio_s = ratio.defined ? fmt::format("{} [{}, {}]", fmt_ratio(ratio.estimate),
                                                            fmt_ratio(ratio.lower), fmt_ratio(ratio.upper))
                                              : "- (no tears)";
    auto per_exposed = [](const Tally& t) {
      return t.exposed ? fmt::format("{:.2f}", static_cast<double>(t.traps) / static_cast<double>(t.exposed))
                       : std::string("-");
    };
    s += fmt::format("{:>6} {:>3}  {:>16} {:<31}  {:>16} {:<31}  {:<22} {:>9}  {:>11}\n", row.wait,
                     row.straddle ? fmt::format("{}", *row.straddle) : std::string("all"),
                     fmt::format("{}/{}", row.h.tears, row.h.exposed), rate_cell(row.h),
                     fmt::format("{}/{}", row.r.tears, row.r.exposed), rate_cell(row.r), ratio_s,
                     fmt::format("{}/{}", row.h.rounds_with_tears(), row.r.rounds_with_tears()),
                     per_exposed(row.h) + "/" + per_exposed(row.r));
  }
  s += fmt::format(
      "t/exp: toggles with >= 1 fault / exposed toggles, summed over {} round(s). Intervals are exact\n"
      "(Clopper-Pearson; the ratio conditional on the total) and assume independent toggles; tears come\n"
      "in bursts, so compare 'torn rnds' (rounds with >= 1 tear, harness/reference) before trusting them.\n"
      "traps/exp (harness/reference): int3 hits per exposed toggle, how often an executor was fetching the\n"
      "site while it was locked, the moment a stale line can tear.\n",
      rounds);
  return s;
}

json tally_json(const Tally& t) {
  const auto ci = stats::clopper_pearson(t.tears, t.exposed);
  return json{{"tears", t.tears},
              {"exposed", t.exposed},
              {"rate", stats::rate(t.tears, t.exposed)},
              {"ci95", {ci.lower, ci.upper}},
              {"traps", t.traps},
              {"runs", t.runs},
              {"crash_or_hang_runs", t.died},
              {"rounds_with_tears", t.rounds_with_tears()}};
}

json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json summary_json(const std::vector<SummaryRow>& rows) {
  json a = json::array();
  for (const SummaryRow& row : rows) {
    const auto ratio = stats::rate_ratio(row.r.tears, row.r.exposed, row.h.tears, row.h.exposed);
    json jr = ratio.defined ? json{{"estimate", num_or_null(ratio.estimate)},
                                   {"ci95", {num_or_null(ratio.lower), num_or_null(ratio.upper)}}}
                            : json(nullptr);
    a.push_back(json{{"wait_ticks", row.wait},
                     {"straddle", row.straddle ? json(*row.straddle) : json("all")},
                     {"harness", tally_json(row.h)},
                     {"reference", tally_json(row.r)},
                     {"ratio_reference_over_harness", jr}});
  }
  return a;
}

// ---- the command -----------------------------------------------------------------------

void progress(bool enabled, const std::string& line, bool final_line = false) {
  if (!enabled) return;
  static const bool tty = ::isatty(2) != 0;
  if (tty) fmt::print(stderr, "\r{}\033[K{}", line, final_line ? "\n" : "");
  else fmt::print(stderr, "{}\n", line);
}

void run_crosscheck(const Args& a) {
  // 1. Validate everything; nothing is written before this block ends.
  const auto waits = parse_list(a.waits, "--waits");
  const auto straddles = parse_list(a.straddles, "--straddles");
  for (std::uint64_t s : straddles)
    if (s < 1 || s > 4) throw UsageError(fmt::format("--straddles: {} is not in 1..4", s));
  if (a.toggles == 0) throw UsageError("--toggles must be at least 1");
  if (a.dwell == 0) throw UsageError("--dwell must be at least 1 tick (both detectors use it as given)");
  if (a.executors == 0) throw UsageError("--executors must be at least 1");
  const auto site_entry = parse_site_entry(a.site_entry);
  if (!site_entry) throw UsageError(fmt::format("--site-entry: '{}' is not call or fallthrough", a.site_entry));
  const auto reference_entry = parse_site_entry(a.reference_entry);
  if (!reference_entry)
    throw UsageError(fmt::format("--reference-entry: '{}' is not call or fallthrough", a.reference_entry));
  if (a.rounds && !a.for_.empty()) throw UsageError("give at most one of --rounds N and --for DURATION");
  if (a.rounds && *a.rounds == 0) throw UsageError("--rounds must be at least 1");
  // 0 = no time budget (a plain double: GCC 12 misreads an optional<double> here).
  const double budget = a.for_.empty() ? 0.0 : parse_duration(a.for_, "--for");
  const bool has_budget = budget > 0;
  const unsigned max_rounds = a.rounds.value_or(has_budget ? UINT32_MAX : 1u);
  if (a.watchdog && !(*a.watchdog > 0)) throw UsageError("--watchdog must be positive");
  const Topology topo = Topology::load();
  Assignment asg;
  try {
    asg = topo.assign(Placement::spread, a.executors);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  const std::string slug = machine_slug();
  const std::string out_dir = a.out.empty() ? "results/" + slug : a.out;
  check_writable_dir(out_dir, "output directory");
  const double tsc_hz = tsc_info().hz;
  // Per run: toggles x (two waits + dwell + ~20k ticks of traps and faults), x5, >= 30 s.
  const double expect_s = static_cast<double>(a.toggles) *
                          static_cast<double>(2 * waits.back() + a.dwell + 20000) / (tsc_hz > 0 ? tsc_hz : 1e9);
  const double watchdog_s = a.watchdog.value_or(std::max(30.0, 5 * expect_s));
  const std::uint64_t seed = a.seed.value_or(std::random_device{}());

  // 2. Files.
  make_dirs(out_dir);
  const std::string stamp = utc_stamp();
  std::string csv_path = fmt::format("{}/crosscheck-{}.csv", out_dir, stamp);
  for (int i = 2; std::filesystem::exists(csv_path); ++i) csv_path = fmt::format("{}/crosscheck-{}-{}.csv", out_dir, stamp, i);
  const std::string json_path = csv_path.substr(0, csv_path.size() - 4) + ".json";
  CsvAppender csv(csv_path);
  json ctx;
  ctx["schema_version"] = kCrosscheckSchema;
  ctx["kind"] = "crossmod-crosscheck";
  ctx["results"] = std::filesystem::path(csv_path).filename().string();
  ctx["git_sha"] = git_sha();
  ctx["compiler"] = compiler_version();
  ctx["crossmod_version"] = CROSSMOD_VERSION;
  ctx["command"] = command_line();
  ctx["started_utc"] = utc_iso8601();
  ctx["finished_utc"] = nullptr;
  ctx["interrupted"] = false;
  try {
    ctx["machine"] = json::parse(sweep_machine_json(topo));
  } catch (const json::exception&) {
    ctx["machine"] = sweep_machine_json(topo);
  }
  ctx["config"] = json{{"waits", waits},
                       {"straddles", straddles},
                       {"toggles", a.toggles},
                       {"dwell_ticks", a.dwell},
                       {"site_entry", to_string(*site_entry)},
                       {"reference_site_entry", to_string(*reference_entry)},
                       {"executors", a.executors},
                       {"placement", "spread"},
                       {"patcher_pu", asg.patcher_pu},
                       {"executor_pus", asg.executor_pus},
                       {"rounds", a.rounds ? json(*a.rounds) : json(nullptr)},
                       {"for_s", has_budget ? json(budget) : json(nullptr)},
                       {"watchdog_s", watchdog_s},
                       {"seed", seed},
                       {"order", "each round: every (W,S) in a fresh random order; per (W,S) one harness "
                                 "and one reference run, first alternating H,R / R,H"}};
  std::vector<std::string> warnings;
  if (!asg.warning.empty()) warnings.push_back(asg.warning);
  ctx["warnings"] = warnings;
  write_file_atomic(json_path, ctx.dump(2) + "\n");

  for (const auto& w : warnings) fmt::print(stderr, "crosscheck: warning: {}\n", w);
  fmt::print(stderr, "crosscheck: {}, TSC {:.3f} GHz, patcher PU {}, {} executor(s); results in {}\n", slug,
             tsc_hz / 1e9, asg.patcher_pu, a.executors, csv_path);

  // 3. Rounds.
  interrupt::install();
  std::mt19937_64 rng(seed);
  std::vector<std::pair<std::uint64_t, unsigned>> cells;
  for (std::uint64_t w : waits)
    for (std::uint64_t s : straddles) cells.emplace_back(w, static_cast<unsigned>(s));
  const std::size_t runs_per_round = 2 * cells.size();
  std::vector<Run> runs;
  std::uint64_t pair = 0, order = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::uint64_t tears_h = 0, tears_r = 0;
  bool warned_ref = false;
  unsigned rounds_done = 0;
  for (unsigned round = 1; round <= max_rounds && !interrupt::requested(); ++round) {
    // --for: start a round only if it is likely to end within the budget (the first
    // always runs).
    if (has_budget && round > 1 && elapsed() + elapsed() / (round - 1) > budget) break;
    std::shuffle(cells.begin(), cells.end(), rng);
    for (std::size_t c = 0; c < cells.size() && !interrupt::requested(); ++c) {
      const auto [w, s] = cells[c];
      const bool harness_first = pair++ % 2 == 0;
      for (int k = 0; k < 2 && !interrupt::requested(); ++k) {
        const bool harness = (k == 0) == harness_first;
        const double done = static_cast<double>(runs.size());
        const double per_run = done > 0 ? elapsed() / done : 0;
        std::string eta;
        if (done > 0) {
          const double left = has_budget ? std::max(0.0, budget - elapsed())
                                       : per_run * static_cast<double>(static_cast<std::uint64_t>(max_rounds) *
                                                                           runs_per_round - runs.size());
          eta = " | ETA " + format_duration(left);
        }
        progress(!a.quiet, fmt::format("crosscheck: round {}{} run {}/{} {} W={} S={} | tears harness {} reference {}{}",
                                       round, a.rounds ? fmt::format("/{}", max_rounds) : std::string(),
                                       c * 2 + static_cast<std::size_t>(k) + 1, runs_per_round,
                                       harness ? "harness  " : "reference", w, s, tears_h, tears_r, eta));
        const std::int64_t start_ms = now_utc_ms();
        Run r;
        if (harness) {
          CellSpec spec;
          spec.protocol = Protocol::wordpatch;
          spec.wait_ticks = w;
          spec.straddle = s;
          spec.executors = a.executors;
          spec.placement = Placement::spread;
          spec.rep = round;
          spec.toggles = a.toggles;
          spec.dwell_ticks = a.dwell;
          spec.watchdog_s = watchdog_s;
          spec.max_failures = 0;  // no early stop: both run every toggle
          spec.phase = Phase::crosscheck;
          spec.site_entry = *site_entry;
          CellEnv rc;
          rc.topology = &topo;
          r = from_cell(run_cell(spec, rc));
        } else {
          reference::Spec spec;
          spec.wait_ticks = w;
          spec.straddle = s;
          spec.toggles = a.toggles;
          spec.dwell_ticks = a.dwell;
          spec.executors = a.executors;
          spec.watchdog_s = watchdog_s;
          spec.patcher_cpu = asg.patcher_pu;
          spec.executor_cpus = asg.executor_pus;
          spec.fall_through = *reference_entry == SiteEntry::fallthrough;
          const reference::Result x = reference::run_reference(spec);
          if (!x.warning.empty() && !warned_ref) {
            warned_ref = true;
            progress(!a.quiet, "crosscheck: warning: " + x.warning, true);
          }
          r = from_reference(x, a.dwell);
        }
        if (interrupt::requested()) break;  // the run was killed: drop it
        r.round = round;
        r.order = ++order;
        r.wait = w;
        r.straddle = s;
        r.executors = a.executors;
        r.start_utc_ms = start_ms;
        csv.append(r);
        (harness ? tears_h : tears_r) += r.tears;
        runs.push_back(std::move(r));
      }
    }
    if (!interrupt::requested()) rounds_done = round;
  }
  progress(!a.quiet, fmt::format("crosscheck: {} runs in {}", runs.size(), format_duration(elapsed())), true);

  // 4. Summary.
  const auto rows = summarize(runs, waits, straddles);
  const bool interrupted = interrupt::requested();
  ctx["interrupted"] = interrupted;
  ctx["finished_utc"] = interrupted ? json(nullptr) : json(utc_iso8601());
  ctx["rounds_completed"] = rounds_done;
  ctx["runs"] = runs.size();
  ctx["summary"] = summary_json(rows);
  write_file_atomic(json_path, ctx.dump(2) + "\n");
  fmt::print("crossmod crosscheck  {}  TSC {:.3f} GHz  {} round(s)  {} toggles/run  dwell {}  {} executor(s)\n\n{}",
             slug, tsc_hz / 1e9, rounds_done, a.toggles, a.dwell, a.executors, table(rows, rounds_done));
  fmt::print(stderr, "crosscheck: results: {} (summary: {})\n", csv_path, json_path);
  if (interrupted) exit_code() = 128 + interrupt::signal_number();
}

}  // namespace

void register_crosscheck(CLI::App& app) {
  auto args = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "crosscheck", "run harness wordpatch cells and the independent reference detector interleaved; compare tear rates");
  cmd->add_option("--waits", args->waits, "comma list of W in ticks")->capture_default_str();
  cmd->add_option("--straddles", args->straddles, "comma list of S in 1..4")->capture_default_str();
  cmd->add_option("--toggles", args->toggles, "toggles per run (both detectors)")->capture_default_str();
  cmd->add_option("--dwell", args->dwell, "dwell between toggles, ticks (both detectors)")->capture_default_str();
  cmd->add_option("--executors", args->executors, "executor threads (placement spread)")->capture_default_str();
  cmd->add_option("--site-entry", args->site_entry,
                  "how the harness's executors reach the site: call (a call to the site) or fallthrough "
                  "(a call to `xor eax,eax` just before it)")
      ->capture_default_str();
  cmd->add_option("--reference-entry", args->reference_entry,
                  "the same for the reference detector's executors: call or fallthrough")
      ->capture_default_str();
  cmd->add_option_function<unsigned>("--rounds", [args](unsigned v) { args->rounds = v; },
                                     "rounds (each visits every W and S); default 1");
  cmd->add_option("--for", args->for_, "run rounds for this long instead, e.g. 10m, 1h30m");
  cmd->add_option("--out", args->out, "output directory (default results/<slug>)");
  cmd->add_option_function<std::uint64_t>("--seed", [args](std::uint64_t v) { args->seed = v; },
                                          "seed of the random visiting order (default: random, recorded)");
  cmd->add_option_function<double>("--watchdog", [args](double v) { args->watchdog = v; },
                                   "per-run watchdog in seconds (default: 5x the expected time, >= 30)");
  cmd->add_flag("--quiet", args->quiet, "no progress line");
  cmd->callback([args] { run_crosscheck(*args); });
}

}  // namespace crossmod::harness
