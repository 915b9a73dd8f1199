// Tmax derivation on synthetic tables, the margin rule, control verdicts, and the
// adaptive calibration driven against a fake machine with a known boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include "runs/calibrate.hpp"
#include "crossmod/tmax_config.hpp"
#include "results/results_io.hpp"
#include "results/stats.hpp"
#include "runs/sweep.hpp"

namespace crossmod::harness {
namespace {

ResultRow row(std::uint64_t w, std::uint64_t failures, std::uint64_t exposed = 1000,
              unsigned s = 1, const char* proto = "wordpatch") {
  ResultRow r;
  r.protocol = proto;
  r.wait_ticks = w;
  r.straddle = s;
  r.failures = failures;
  r.toggles = exposed + 10;
  r.exposed_toggles = exposed;
  return r;
}

TEST(Tmax, MonotoneTable) {
  std::vector<ResultRow> rows = {row(0, 50), row(100, 3), row(200, 0), row(400, 0), row(800, 0)};
  const auto d = derive_tmax(rows);
  ASSERT_TRUE(d.observed_ticks);
  EXPECT_EQ(*d.observed_ticks, 200u);
  EXPECT_EQ(*d.max_failing_wait, 100u);
  EXPECT_EQ(d.cells_at_or_above, 3u);
  EXPECT_EQ(d.exposed_toggles_at_or_above, 3000u);
  EXPECT_EQ(d.toggles_at_or_above, 3030u);
  EXPECT_EQ(d.failures_at_or_above, 0u);
  EXPECT_NEAR(d.failure_bound_95, stats::zero_failure_upper_bound(3000), 1e-15);
}

TEST(Tmax, NonMonotoneFailureAboveACleanWaitPushesTmaxUp) {
  // 200 is clean, but 400 failed (on another S): every W' >= Tmax must be clean.
  std::vector<ResultRow> rows = {row(0, 5), row(200, 0), row(400, 0, 1000, 1), row(400, 1, 1000, 3),
                                 row(800, 0), row(1600, 0)};
  const auto d = derive_tmax(rows);
  ASSERT_TRUE(d.observed_ticks);
  EXPECT_EQ(*d.observed_ticks, 800u);
  EXPECT_EQ(d.exposed_toggles_at_or_above, 2000u);
}

TEST(Tmax, CrashAndHangCountAsFailures) {
  std::vector<ResultRow> rows = {row(0, 0), row(100, 0), row(200, 0), row(400, 0)};
  rows[2].crash = true;
  rows[2].outcome = "crash";
  auto d = derive_tmax(rows);
  EXPECT_EQ(*d.observed_ticks, 400u);
  rows[2] = row(200, 0);
  rows[3].hang = true;
  rows[3].outcome = "hang";
  d = derive_tmax(rows);
  EXPECT_FALSE(d.observed_ticks) << "a hang at the top wait leaves no clean wait above it";
  EXPECT_EQ(*d.max_failing_wait, 400u);
}

TEST(Tmax, LowExposureCellsAreNotEvidence) {
  std::vector<ResultRow> rows = {row(0, 4), row(100, 0, 5), row(200, 0), row(400, 0, 7)};
  rows[1].low_exposure = true;
  rows[3].low_exposure = true;
  const auto d = derive_tmax(rows);
  EXPECT_EQ(*d.observed_ticks, 200u);  // 100 was only low-exposure: not tested
  EXPECT_EQ(d.exposed_toggles_at_or_above, 1000u);  // the 400 cell's toggles do not count
  EXPECT_EQ(d.low_exposure_cells, 2u);
  // A failure in a low-exposure cell still counts as a failure.
  rows.push_back(row(300, 1, 3));
  rows.back().low_exposure = true;
  const auto d2 = derive_tmax(rows);
  EXPECT_EQ(*d2.max_failing_wait, 300u);
  EXPECT_FALSE(d2.observed_ticks) << "only low-exposure evidence above the failure";
}

TEST(Tmax, ErrorAndBlindCellsAreNeither) {
  std::vector<ResultRow> rows = {row(0, 1), row(100, 0), row(200, 0)};
  rows[1].outcome = "blind";
  const auto d = derive_tmax(rows);
  EXPECT_EQ(*d.observed_ticks, 200u);
}

TEST(Tmax, OtherProtocolsAreIgnoredAndNoFailuresMeansLowestWait) {
  std::vector<ResultRow> rows = {row(0, 9, 1000, 1, "naive"), row(50, 0), row(100, 0)};
  const auto d = derive_tmax(rows);
  EXPECT_EQ(*d.observed_ticks, 50u);
  EXPECT_FALSE(d.max_failing_wait);
}

TEST(Tmax, RecommendedRule) {
  EXPECT_EQ(recommend_tmax(300, 200), 600u);
  EXPECT_EQ(recommend_tmax(0, 0), 100u);
  EXPECT_EQ(recommend_tmax(10, 437), 450u);   // c2c dominates, rounded up to 50
  EXPECT_EQ(recommend_tmax(276, 0), 600u);    // 552 -> 600
  EXPECT_EQ(recommend_tmax(275, 0), 550u);
}

TEST(Tmax, ControlVerdicts) {
  std::vector<ResultRow> rows = {row(0, 3, 1000, 1, "naive"), row(0, 0, 1000, 1, "aligned"),
                                 row(0, 0, 1000, 1, "callpatch"), row(0, 0, 1000, 1, "sync-core")};
  for (auto& r : rows) r.phase = "control";
  auto v = control_verdicts(rows);
  ASSERT_EQ(v.size(), 4u);
  for (const auto& c : v) EXPECT_TRUE(c.ok) << c.protocol << ": " << c.verdict;
  rows[0].failures = 0;
  rows[2].hang = true;
  rows[2].outcome = "hang";
  v = control_verdicts(rows);
  EXPECT_FALSE(v[0].ok);
  EXPECT_NE(v[0].verdict.find("exposure may be too low"), std::string::npos);
  EXPECT_FALSE(v[2].ok);
  EXPECT_NE(v[2].verdict.find("FAILED"), std::string::npos);
}

// A fake machine with bursts: wordpatch tears for W < quiet_boundary in every round and
// for W < burst_boundary in burst rounds (round % burst_period == burst_phase); naive
// always tears. Time advances by each cell's modelled duration.
struct FakeMachine {
  std::uint64_t quiet_boundary = 100;
  std::uint64_t burst_boundary = 1200;
  unsigned burst_period = 3, burst_phase = 1;  // burst_period 0: never
  bool negative_control_fails = false;
  bool wordpatch_always_tears = false;
  std::uint64_t low_exposure_below = 0;  // clean wordpatch cells below this have low exposure
  double clock = 0;
  std::vector<CellSpec> specs;

  bool burst(const CellSpec& s) const {
    return burst_period != 0 && s.round >= 0 && static_cast<unsigned>(s.round) % burst_period == burst_phase;
  }
  std::optional<ResultRow> run(const CellSpec& s) {
    specs.push_back(s);
    CellResult r;
    r.spec = s;
    r.toggles = s.toggles;
    r.exposed_toggles = s.toggles;
    bool fail = false;
    if (s.protocol == Protocol::naive) fail = true;
    if (s.protocol == Protocol::wordpatch) {
      fail = wordpatch_always_tears || s.wait_ticks < quiet_boundary || (burst(s) && s.wait_ticks < burst_boundary);
    }
    if (s.protocol == Protocol::callpatch && negative_control_fails) fail = true;
    if (s.protocol == Protocol::wordpatch && !fail && s.wait_ticks < low_exposure_below) {
      r.low_exposure = true;
      r.exposed_toggles = s.toggles / 10;
    }
    if (fail) {
      r.failures = 3;
      r.sigill = 3;
    }
    r.duration_s = 0.05 + static_cast<double>(r.toggles) * 1e-6 +
                   (s.protocol == Protocol::wordpatch ? 2.0 * static_cast<double>(s.wait_ticks) / 2.6e9 * static_cast<double>(r.toggles) : 0);
    clock += r.duration_s + 0.05;
    return row_from_result(r, specs.size(), 2.6e9);
  }
};

SweepConfig calib_config() {
  SweepConfig cfg;
  cfg.protocols = {Protocol::wordpatch};
  cfg.waits = {0};
  cfg.straddles = {1, 2, 3, 4};
  cfg.aligned_offsets = {0, 13};
  cfg.executors = {1};
  cfg.calibrate.budget_s = 300;
  cfg.calibrate.cell_s = 0.3;
  cfg.calibrate.ladder = {0, 50, 100, 200, 400, 800, 1600, 3200};
  cfg.calibrate.min_active_rounds = 5;
  return cfg;
}

CalibrateOutcome calibrate_against(FakeMachine& m, const SweepConfig& cfg) {
  CalibrateEnv env;
  env.run = [&](const CellSpec& s, const std::string&, std::optional<double>) { return m.run(s); };
  env.elapsed_s = [&] { return m.clock; };
  return run_calibration(cfg, env);
}

std::map<std::int64_t, std::vector<CellSpec>> by_round(const std::vector<CellSpec>& specs) {
  std::map<std::int64_t, std::vector<CellSpec>> out;
  for (const auto& s : specs) out[s.round].push_back(s);
  return out;
}

TEST(Calibrate, EveryRoundHasSentinelControlsAndEveryWaitAtEveryStraddle) {
  FakeMachine m;
  const auto out = calibrate_against(m, calib_config());
  EXPECT_FALSE(out.interrupted);
  ASSERT_GE(out.rounds, 10u);
  EXPECT_LT(m.clock, 330);  // the budget, give or take half a round
  std::set<std::string> orders;
  for (const auto& [round, cells] : by_round(m.specs)) {
    std::map<std::string, unsigned> kinds;
    std::map<std::uint64_t, std::set<unsigned>> straddles_at;
    std::string order;
    for (const auto& c : cells) {
      ++kinds[std::string(to_string(c.phase)) + "/" + to_string(c.protocol)];
      if (c.protocol == Protocol::wordpatch && c.phase != Phase::sentinel) straddles_at[c.wait_ticks].insert(c.straddle);
      order += describe_cell(c) + ";";
    }
    orders.insert(order.substr(order.find(';')));  // cell order, not only the first
    EXPECT_EQ(kinds["sentinel/wordpatch"], 1u) << "round " << round;
    for (const char* p : {"naive", "callpatch", "sync-core", "aligned"})
      EXPECT_EQ(kinds[std::string("control/") + p], 1u) << "round " << round << " " << p;
    for (const auto& [w, ss] : straddles_at) EXPECT_EQ(ss.size(), 4u) << "round " << round << " W=" << w;
  }
  // Cells run in a fresh random order each round.
  EXPECT_GT(orders.size(), out.rounds / 2);
  // Every cell key is unique (resume relies on it).
  std::set<std::string> keys;
  for (const auto& s : m.specs) EXPECT_TRUE(keys.insert(resume_key(s)).second) << resume_key(s);
}

// The case issue 9 is about: in quiet rounds W >= 100 never tears, in bursts W < 1200
// does. A design that measures each W in one block of time lets the time of day decide;
// rounds put every W in play into the bursts, so the boundary lands at or above 1200.
TEST(Calibrate, BurstsMoveTheBoundaryToWhereBurstsStopTearing) {
  FakeMachine m;
  const auto out = calibrate_against(m, calib_config());
  const VerdictReport v = decide_verdict(out.rows, calib_config().calibrate, out.round_s);
  ASSERT_TRUE(v.tmax.observed_ticks);
  EXPECT_GE(*v.tmax.observed_ticks, 1200u);
  EXPECT_LE(*v.tmax.observed_ticks, 1600u);
  EXPECT_EQ(v.verdict, Verdict::bounded) << v.evidence;
  EXPECT_GE(v.at_observed.evidence_active_rounds, 5u);
  // The sentinel settles on a W that tears in bursts only, so quiet rounds are quiet.
  const auto active = active_rounds(out.rows);
  EXPECT_LT(active.size(), out.rounds);
  EXPECT_GT(active.size(), 0u);
}

TEST(Calibrate, NeverTearingMachineIsNotEstablished) {
  FakeMachine m;
  m.quiet_boundary = 0;
  m.burst_period = 0;
  const auto out = calibrate_against(m, calib_config());
  const VerdictReport v = decide_verdict(out.rows, calib_config().calibrate, out.round_s);
  EXPECT_EQ(v.verdict, Verdict::not_established);
  EXPECT_EQ(v.active, 0u);
  EXPECT_NE(v.advice.find("soak"), std::string::npos) << v.advice;
}

TEST(Calibrate, TearsEverywhereAreUnbounded) {
  FakeMachine m;
  m.wordpatch_always_tears = true;
  auto cfg = calib_config();
  cfg.calibrate.max_wait_ticks = 25600;
  const auto out = calibrate_against(m, cfg);
  const VerdictReport v = decide_verdict(out.rows, cfg.calibrate, out.round_s);
  EXPECT_EQ(v.verdict, Verdict::unbounded);
  EXPECT_FALSE(v.tmax.observed_ticks);
  std::uint64_t top = 0;
  for (const auto& s : m.specs)
    if (s.protocol == Protocol::wordpatch) top = std::max(top, s.wait_ticks);
  EXPECT_EQ(top, 25600u);  // it climbed to the top of the range
  EXPECT_NE(v.advice.find("callpatch"), std::string::npos);
}

TEST(Calibrate, LowExposureCleanCellsAreNotEvidence) {
  FakeMachine m;
  m.burst_period = 0;
  m.quiet_boundary = 300;
  m.low_exposure_below = 400;  // 300..399 clean but low exposure
  const auto out = calibrate_against(m, calib_config());
  const VerdictReport v = decide_verdict(out.rows, calib_config().calibrate, out.round_s);
  ASSERT_TRUE(v.tmax.observed_ticks);
  EXPECT_EQ(*v.tmax.observed_ticks, 400u);
  EXPECT_GT(v.tmax.low_exposure_cells, 0u);
}

TEST(Calibrate, NegativeControlFailureStopsAfterTheRound) {
  FakeMachine m;
  m.negative_control_fails = true;
  const auto out = calibrate_against(m, calib_config());
  EXPECT_TRUE(out.negative_control_failed);
  EXPECT_EQ(out.rounds, 1u);
  for (const auto& r : out.rows) EXPECT_EQ(r.round, 0);
}

TEST(Calibrate, EarlierRunsFailuresKeepTheBoundaryUp) {
  ResultRow prior;
  prior.protocol = "wordpatch";
  prior.phase = "confirm";
  prior.wait_ticks = 2400;
  prior.toggles = prior.exposed_toggles = 1000000;
  prior.failures = 1;
  prior.round = kPriorRoundStride + 3;
  FakeMachine m;
  CalibrateEnv env;
  env.run = [&](const CellSpec& s, const std::string&, std::optional<double>) { return m.run(s); };
  env.elapsed_s = [&] { return m.clock; };
  env.prior_rows = {prior};
  const auto out = run_calibration(calib_config(), env);
  std::uint64_t top = 0;
  for (const auto& s : m.specs)
    if (s.protocol == Protocol::wordpatch && s.round >= static_cast<std::int64_t>(calib_config().calibrate.search_rounds))
      top = std::max(top, s.wait_ticks);
  EXPECT_GT(top, 2400u);  // planning measured above the earlier run's failure
}

TEST(Calibrate, ResumedRowsReplayTheSameDecisions) {
  FakeMachine first;
  const auto a = calibrate_against(first, calib_config());
  // Serve the first 60 cells from "the file", run the rest.
  std::map<std::string, ResultRow> stored;
  for (std::size_t i = 0; i < 60; ++i) stored[resume_key(a.rows[i])] = a.rows[i];
  FakeMachine second;
  std::size_t served = 0;
  CalibrateEnv env;
  double resumed_s = 0;
  env.run = [&](const CellSpec& s, const std::string&, std::optional<double>) -> std::optional<ResultRow> {
    if (auto it = stored.find(resume_key(s)); it != stored.end()) {
      ++served;
      resumed_s += it->second.duration_s + 0.05;
      return it->second;
    }
    return second.run(s);
  };
  env.elapsed_s = [&] { return second.clock + resumed_s; };
  const auto b = run_calibration(calib_config(), env);
  EXPECT_EQ(served, 60u);
  const auto va = decide_verdict(a.rows, calib_config().calibrate, a.round_s);
  const auto vb = decide_verdict(b.rows, calib_config().calibrate, b.round_s);
  EXPECT_EQ(*va.tmax.observed_ticks, *vb.tmax.observed_ticks);
}

ResultRow round_row(const char* phase, std::uint64_t w, std::int64_t round, std::uint64_t tears,
                    std::uint64_t exposed = 1000) {
  ResultRow r;
  r.protocol = "wordpatch";
  r.phase = phase;
  r.wait_ticks = w;
  r.round = round;
  r.toggles = r.exposed_toggles = exposed;
  r.failures = tears;
  return r;
}

TEST(Rounds, ActiveRoundsAndEvidenceCountRoundsNotToggles) {
  // Round 0 quiet, rounds 1 and 2 active; W = 800 clean in all, W = 400 tore in round 2.
  std::vector<ResultRow> rows = {
      round_row("sentinel", 100, 0, 0), round_row("search", 800, 0, 0), round_row("search", 800, 0, 0),
      round_row("sentinel", 100, 1, 5), round_row("search", 800, 1, 0), round_row("search", 400, 1, 0),
      round_row("sentinel", 100, 2, 7), round_row("search", 800, 2, 0), round_row("search", 400, 2, 2),
  };
  EXPECT_EQ(active_rounds(rows), (std::set<std::int64_t>{1, 2}));
  const auto by = wait_rounds(rows);
  const WaitRounds& w800 = by.at(800);
  EXPECT_EQ(w800.rounds, 3u);
  EXPECT_EQ(w800.active_rounds, 2u);
  EXPECT_EQ(w800.evidence_active_rounds, 2u);
  EXPECT_EQ(w800.sentinel_tears, 12u);
  EXPECT_EQ(w800.exposed, 4000u);
  EXPECT_EQ(w800.active_exposed, 2000u);
  const WaitRounds& w400 = by.at(400);
  EXPECT_EQ(w400.tearing_rounds, 1u);
  EXPECT_EQ(w400.active_tearing_rounds, 1u);
  EXPECT_EQ(w400.evidence_active_rounds, 1u);  // round 1 only
  // Schema-1 rows (no round) are each a quiet round of their own.
  rows.push_back(round_row("confirm", 800, -1, 0));
  rows.push_back(round_row("confirm", 800, -1, 0));
  EXPECT_EQ(wait_rounds(rows).at(800).rounds, 5u);
  EXPECT_EQ(wait_rounds(rows).at(800).active_rounds, 2u);

  CalibrateParams k;
  k.min_active_rounds = 2;
  const VerdictReport v = decide_verdict(rows, k, 10);
  ASSERT_TRUE(v.tmax.observed_ticks);
  EXPECT_EQ(*v.tmax.observed_ticks, 800u);
  EXPECT_EQ(v.verdict, Verdict::bounded);
  EXPECT_NEAR(v.active_round_bound, 1 - std::sqrt(0.05), 1e-12);
  k.min_active_rounds = 3;
  const VerdictReport v3 = decide_verdict(rows, k, 10);
  EXPECT_EQ(v3.verdict, Verdict::not_established);
  EXPECT_NE(v3.advice.find("crossmod soak --for"), std::string::npos) << v3.advice;
}

TEST(Rounds, SentinelTearsInBurstsButNotAlways) {
  std::vector<ResultRow> rows;
  for (int r = 0; r < 10; ++r) {
    rows.push_back(round_row("search", 0, r, 1));                     // every round: quiet too
    rows.push_back(round_row("search", 100, r, r % 3 == 0 ? 1 : 0));  // 4 rounds
    rows.push_back(round_row("search", 200, r, r % 2 == 0 ? 1 : 0));  // 5 rounds
    rows.push_back(round_row("search", 400, r, r == 3 ? 1 : 0));      // 1 round: not enough
  }
  const auto by = wait_rounds(rows);
  EXPECT_EQ(choose_sentinel(by, std::nullopt, 0), 200u);
  EXPECT_EQ(choose_sentinel(by, std::uint64_t{200}, 50), 100u);
  EXPECT_EQ(choose_sentinel(by, std::uint64_t{100}, 50), 0u);  // only the always-tearing one
  EXPECT_EQ(choose_sentinel({}, std::nullopt, 50), 50u);
}

TEST(Rounds, PlanNarrowsToTheBoundaryAfterTheSearchRounds) {
  CalibrateParams k;
  k.ladder = {0, 100, 200, 400, 800};
  k.search_rounds = 1;
  k.resolution_ticks = 25;
  k.confirm_multipliers = {1.0, 2.0};
  std::vector<ResultRow> rows = {round_row("search", 0, 0, 1), round_row("search", 100, 0, 1),
                                 round_row("search", 200, 0, 0), round_row("search", 400, 0, 0)};
  EXPECT_EQ(plan_round_waits(rows, k, 0).waits, (std::vector<std::uint64_t>{0, 100, 200, 400, 800}));
  const RoundWaits p = plan_round_waits(rows, k, 1);
  EXPECT_EQ(*p.boundary, 200u);
  EXPECT_EQ(*p.largest_failing, 100u);
  EXPECT_EQ(p.waits, (std::vector<std::uint64_t>{100, 150, 200, 400}));
  rows.push_back(round_row("confirm", 400, 1, 1));  // a burst tore at 400: everything moves up
  const RoundWaits q = plan_round_waits(rows, k, 2);
  EXPECT_FALSE(q.boundary);
  EXPECT_EQ(q.waits, (std::vector<std::uint64_t>{800}));  // doubling up from 400
}

}  // namespace
}  // namespace crossmod::harness

namespace crossmod::harness {
namespace {

TEST(TmaxFile, TheEngineLoadsWhatCalibrateWrites) {
  std::vector<ResultRow> rows = {row(0, 5), row(300, 0), row(600, 0)};
  const auto d = derive_tmax(rows);
  TmaxFileInputs in;
  in.slug = "amd-fam26-mod2-step1-1pkg";
  in.vendor = "AuthenticAMD";
  in.brand = "AMD \"EPYC\" \\ test";
  in.family = 26;
  in.model = 2;
  in.stepping = 1;
  in.microcode = "0x1000065";
  in.kernel = "6.1";
  in.observed_ticks = *d.observed_ticks;
  in.recommended_ticks = recommend_tmax(in.observed_ticks, 180);
  in.c2c_one_way_ticks = 180;
  in.tsc_hz = 2.6e9;
  in.results = "results/x/sweep-1.csv";
  in.command = "build/crossmod calibrate";
  in.git_sha = "abc";
  in.date = "2026-11-21T00:00:00Z";
  in.preset = "quick";
  in.notes = {"a note"};
  const std::string text = render_tmax_toml(in, d, control_verdicts({}));
  char path[] = "/tmp/crossmod-tmax-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  TmaxConfig cfg;
  ConfigError err;
  const Status st = load_tmax_config(path, &cfg, &err);
  unlink(path);
  ASSERT_EQ(st, Status::ok) << err.to_string() << "\n" << text;
  EXPECT_EQ(cfg.recommended_ticks, 600u);
  EXPECT_EQ(cfg.observed_ticks, 300u);
  EXPECT_EQ(cfg.machine, in.slug);
  EXPECT_FALSE(cfg.is_default);
  EXPECT_NEAR(cfg.tsc_hz, 2.6e9, 1);
  EXPECT_NEAR(cfg.recommended_ns, 230.8, 0.05);
  EXPECT_NE(text.find("failures_at_or_above = 0"), std::string::npos);
  EXPECT_NE(text.find("exposed_toggles_at_or_above = 2000"), std::string::npos);
}

}  // namespace
}  // namespace crossmod::harness

namespace crossmod::harness {

// A failure recorded by an earlier run of the same machine is not forgotten by a later,
// luckier run; files of another machine and unreadable files are skipped, not fatal.
TEST(PriorRows, PoolsWordpatchRowsOfThisMachineOnly) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("crossmod-pool-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto write_run = [&](const std::string& stem, const std::string& slug, std::uint64_t fail_wait,
                       const char* site_entry = "call") {
    {
      ResultsWriter w((dir / (stem + ".csv")).string(), false);
      for (std::uint64_t wait : {std::uint64_t{400}, std::uint64_t{800}, std::uint64_t{1600}}) {
        ResultRow r;
        r.protocol = "wordpatch";
        r.phase = "confirm";
        r.wait_ticks = wait;
        r.toggles = r.exposed_toggles = 1000000;
        r.failures = wait == fail_wait ? 1 : 0;
        w.append(r);
      }
      ResultRow c;
      c.protocol = "naive";
      c.toggles = c.exposed_toggles = 100;
      c.failures = 50;
      w.append(c);
    }
    const std::string grid = site_entry ? std::string(", \"config\": {\"grid\": {\"site_entry\": \"") +
                                              site_entry + "\"}}"
                                        : std::string();
    write_file_atomic((dir / (stem + ".json")).string(),
                      "{\"machine\": {\"slug\": \"" + slug + "\"}" + grid + "}\n");
  };
  write_run("sweep-20260101T000000Z", "this-machine", 800);   // earlier run: tear at 800
  write_run("sweep-20260102T000000Z", "other-machine", 1600);  // another machine
  write_run("sweep-20260103T000000Z", "this-machine", 0);      // the current run: clean
  write_file_atomic((dir / "sweep-20260104T000000Z.csv").string(), "not,a,results,file\n");

  std::vector<std::string> used, skipped;
  const auto prior = read_prior_rows(dir.string(), (dir / "sweep-20260103T000000Z.csv").string(),
                                     "this-machine", &used, &skipped);
  ASSERT_EQ(used.size(), 1u);
  EXPECT_NE(used[0].find("20260101"), std::string::npos);
  EXPECT_EQ(skipped.size(), 2u);  // other machine + unreadable
  ASSERT_EQ(prior.size(), 3u);    // wordpatch rows only
  for (const auto& r : prior) EXPECT_EQ(r.protocol, "wordpatch");

  const auto current = read_results_csv((dir / "sweep-20260103T000000Z.csv").string());
  EXPECT_EQ(*derive_tmax(current).observed_ticks, 400u);  // alone, the lucky run says 400
  std::vector<ResultRow> pooled = prior;
  pooled.insert(pooled.end(), current.begin(), current.end());
  EXPECT_EQ(*derive_tmax(pooled).observed_ticks, 1600u);  // pooled, the tear at 800 counts

  // A run whose cells fell through to the site (no site_entry: before 2026-11-27, or
  // "fallthrough"): its tears count, its clean cells are no evidence.
  write_run("sweep-20260100T000000Z", "this-machine", 400, nullptr);
  write_run("sweep-20260100T000001Z", "this-machine", 1600, "fallthrough");
  used.clear();
  skipped.clear();
  const auto prior2 = read_prior_rows(dir.string(), (dir / "sweep-20260103T000000Z.csv").string(),
                                      "this-machine", &used, &skipped);
  EXPECT_EQ(used.size(), 3u);
  ASSERT_EQ(prior2.size(), 3u + 1u + 1u);  // the call run's three rows + one tear of each other
  std::size_t fell_through_notes = 0;
  for (const auto& s : skipped) fell_through_notes += s.find("fell through") != std::string::npos;
  EXPECT_EQ(fell_through_notes, 2u);
  std::uint64_t tears_at_400 = 0, tears_at_1600 = 0;
  for (const auto& r : prior2) {
    tears_at_400 += r.wait_ticks == 400 ? r.failures : 0;
    tears_at_1600 += r.wait_ticks == 1600 ? r.failures : 0;
  }
  EXPECT_EQ(tears_at_400, 1u);
  EXPECT_EQ(tears_at_1600, 1u);
  fs::remove_all(dir);
}

}  // namespace crossmod::harness

namespace crossmod::harness {
namespace {

TEST(ToggleRateModel, SizeCellFillsTheSlotWithinTheParamsAndProbesUnknownProtocolsSmall) {
  const double hz = 1e9;
  ToggleRateModel model(hz);
  CalibrateParams k;
  k.min_toggles = 1000;
  k.max_toggles = 1000000;
  k.probe_toggles = 5000;
  CellSpec spec;
  spec.protocol = Protocol::wordpatch;
  spec.wait_ticks = 1000;  // 2 waits per toggle: 2 us
  model.size_cell(&spec, 10.0, k, 30.0);
  EXPECT_EQ(spec.toggles, 5000u);  // unknown rate: at most probe_toggles
  EXPECT_GE(spec.watchdog_s, 30.0);

  // 1 s for 100000 toggles at W=1000: 10 us per toggle, of which 2 us are waits.
  ResultRow r;
  r.protocol = "wordpatch";
  r.wait_ticks = 1000;
  r.toggles = 100000;
  r.duration_s = 1.0;
  model.add(r);
  model.size_cell(&spec, 0.5, k, 30.0);
  EXPECT_NEAR(static_cast<double>(spec.toggles), (0.5 - model.overhead_s()) / 10e-6, 2.0);
  model.size_cell(&spec, 1e6, k, 30.0);
  EXPECT_EQ(spec.toggles, k.max_toggles);
  EXPECT_NEAR(spec.watchdog_s, 3 * model.seconds_for(Protocol::wordpatch, 1000, k.max_toggles) + 10, 1e-9);
  model.size_cell(&spec, 1e-6, k, 30.0);
  EXPECT_EQ(spec.toggles, k.min_toggles);
}

}  // namespace
}  // namespace crossmod::harness
