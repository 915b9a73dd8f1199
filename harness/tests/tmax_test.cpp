// Tmax derivation on synthetic tables, the margin rule, control verdicts, and the
// adaptive calibration driven against a fake machine with a known boundary.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include "calibrate.hpp"
#include "crossmod/tmax_config.hpp"
#include "results_io.hpp"
#include "stats.hpp"

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

// A fake machine: wordpatch tears for W < boundary; naive always tears; optional extra
// one-off failures at given waits. Time advances by each cell's modelled duration.
struct FakeMachine {
  std::uint64_t boundary = 300;
  std::map<std::uint64_t, int> one_off_failures;  // wait -> failures left to inject
  bool negative_control_fails = false;
  std::uint64_t low_exposure_below = 0;  // wordpatch cells in [boundary, this) have low exposure
  double clock = 0;
  std::vector<CellSpec> specs;

  std::optional<ResultRow> run(const CellSpec& s) {
    specs.push_back(s);
    CellResult r;
    r.spec = s;
    r.toggles = s.toggles;
    r.exposed_toggles = s.toggles;
    bool fail = false;
    if (s.protocol == Protocol::naive) fail = true;
    if (s.protocol == Protocol::wordpatch && s.wait_ticks < boundary) fail = true;
    if (s.protocol == Protocol::wordpatch) {
      auto it = one_off_failures.find(s.wait_ticks);
      if (it != one_off_failures.end() && it->second > 0) {
        --it->second;
        fail = true;
      }
    }
    if (s.protocol == Protocol::callpatch && negative_control_fails) fail = true;
    if (s.protocol == Protocol::wordpatch && !fail && s.wait_ticks < low_exposure_below) {
      r.low_exposure = true;
      r.exposed_toggles = s.toggles / 10;
    }
    if (fail) {
      r.failures = 1;
      r.sigill = 1;
      r.toggles = r.exposed_toggles = std::min<std::uint64_t>(s.toggles, 10);
      r.stopped_early = true;
    }
    r.duration_s = 0.15 + static_cast<double>(r.toggles) * 1e-6 +
                   (s.protocol == Protocol::wordpatch ? 2.0 * static_cast<double>(s.wait_ticks) / 2.6e9 * static_cast<double>(r.toggles) : 0);
    clock += r.duration_s;
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
  cfg.calibrate.budget_s = 120;
  return cfg;
}

CalibrateOutcome calibrate_against(FakeMachine& m, const SweepConfig& cfg) {
  CalibrateEnv env;
  env.run = [&](const CellSpec& s, const std::string&, std::optional<double>) { return m.run(s); };
  env.elapsed_s = [&] { return m.clock; };
  return run_calibration(cfg, env);
}

TEST(Calibrate, FindsTheBoundaryAndConfirmsAboveIt) {
  FakeMachine m;
  const auto out = calibrate_against(m, calib_config());
  EXPECT_FALSE(out.interrupted);
  EXPECT_FALSE(out.negative_control_failed);
  EXPECT_TRUE(out.positive_control_failed);
  ASSERT_TRUE(out.tmax.observed_ticks);
  EXPECT_EQ(*out.tmax.observed_ticks, 300u);  // bisection 200..400 at 25-tick resolution
  EXPECT_EQ(*out.tmax.max_failing_wait, 275u);
  EXPECT_EQ(out.confirm_waits, (std::vector<std::uint64_t>{300, 450, 600}));
  EXPECT_GT(out.tmax.exposed_toggles_at_or_above, 0u);
  // Budget: within 10% of 120 s, and most of it spent confirming.
  EXPECT_LT(m.clock, 132);
  double confirm_s = 0;
  for (const auto& r : out.rows) {
    if (r.phase == "confirm") confirm_s += r.duration_s;
  }
  EXPECT_GT(confirm_s, 0.5 * m.clock);
  // Every cell key is unique (resume relies on it).
  std::set<std::string> keys;
  for (const auto& s : m.specs) EXPECT_TRUE(keys.insert(resume_key(s)).second) << resume_key(s);
}

TEST(Calibrate, ConfirmationFailureMovesTheBoundaryUp) {
  FakeMachine m;
  m.one_off_failures[450] = 1;
  const auto out = calibrate_against(m, calib_config());
  ASSERT_TRUE(out.tmax.observed_ticks);
  EXPECT_EQ(*out.tmax.observed_ticks, 600u);
  EXPECT_EQ(out.replans, 1u);
  EXPECT_EQ(out.confirm_waits.front(), 600u);
}

// Rare failures that keep moving the boundary (seen on the KVM reference machine) must
// not leave the budget unspent: after max_replans moves the waits freeze and the rest of
// the budget confirms them; a failure there still counts in the derived Tmax.
TEST(Calibrate, BoundaryFrozenAfterMaxReplansStillSpendsTheBudget) {
  FakeMachine m;
  // Confirmation starts at {300, 450, 600}: 450 moves it to {600, 900, 1200}, 900 to
  // {1200, 1800, 2400}, which is then frozen; 1800 fails inside the frozen waits.
  m.one_off_failures[450] = 1;
  m.one_off_failures[900] = 1;
  m.one_off_failures[1800] = 1;
  auto cfg = calib_config();
  cfg.calibrate.max_replans = 2;
  const auto out = calibrate_against(m, cfg);
  EXPECT_EQ(out.replans, 2u);
  EXPECT_EQ(out.confirm_waits, (std::vector<std::uint64_t>{1200, 1800, 2400}));
  EXPECT_GT(m.clock, 0.9 * cfg.calibrate.budget_s);
  std::uint64_t frozen_confirm_cells = 0;
  for (const auto& r : out.rows)
    if (r.phase == "confirm" && r.wait_ticks >= 1200) ++frozen_confirm_cells;
  EXPECT_GT(frozen_confirm_cells, 12u);  // more than one round of 3 waits x 4 straddles
  ASSERT_TRUE(out.tmax.observed_ticks);
  EXPECT_EQ(*out.tmax.observed_ticks, 2400u);  // the failure at 1800 was not ignored
}

// With earlier runs of this machine on record, confirmation is spent at the boundary they
// imply together with this run, i.e. at the Tmax calibrate will write, not only at this
// run's own (luckier) boundary.
TEST(Calibrate, ConfirmationStartsAtTheBoundaryOfEarlierRuns) {
  auto prior_row = [](std::uint64_t wait, std::uint64_t failures) {
    ResultRow r;
    r.protocol = "wordpatch";
    r.phase = "confirm";
    r.wait_ticks = wait;
    r.toggles = r.exposed_toggles = 1000000;
    r.failures = failures;
    return r;
  };
  FakeMachine m;  // this run alone: boundary 300
  auto cfg = calib_config();
  CalibrateEnv env;
  env.run = [&](const CellSpec& s, const std::string&, std::optional<double>) { return m.run(s); };
  env.elapsed_s = [&] { return m.clock; };
  env.prior_rows = {prior_row(1650, 1), prior_row(2400, 0)};
  const auto out = run_calibration(cfg, env);
  ASSERT_FALSE(out.confirm_waits.empty());
  EXPECT_EQ(out.confirm_waits.front(), 2400u);
  std::uint64_t confirm_cells_at_or_above = 0;
  for (const auto& r : out.rows)
    if (r.phase == "confirm" && r.wait_ticks >= 2400) ++confirm_cells_at_or_above;
  EXPECT_GT(confirm_cells_at_or_above, 0u);
  // Without earlier runs the same machine confirms at its own boundary.
  FakeMachine alone;
  EXPECT_EQ(calibrate_against(alone, calib_config()).confirm_waits.front(), 300u);
}

TEST(Calibrate, LowExposureCleanCellsGuideTheSearchButAreNotEvidence) {
  FakeMachine m;
  m.low_exposure_below = 400;  // 300..399 clean but low exposure
  const auto out = calibrate_against(m, calib_config());
  ASSERT_TRUE(out.tmax.observed_ticks);
  EXPECT_EQ(out.confirm_waits.front(), 300u);
  EXPECT_EQ(*out.tmax.observed_ticks, 400u);  // 300 was never trusted; 400 (ladder) was
  EXPECT_GT(out.tmax.low_exposure_cells, 0u);
  EXPECT_LT(m.clock, 132);
}

TEST(Calibrate, NegativeControlFailureStopsBeforeTheSearch) {
  FakeMachine m;
  m.negative_control_fails = true;
  const auto out = calibrate_against(m, calib_config());
  EXPECT_TRUE(out.negative_control_failed);
  for (const auto& r : out.rows) EXPECT_EQ(r.phase, "control");
}

TEST(Calibrate, ResumedRowsReplayTheSameDecisions) {
  FakeMachine first;
  const auto a = calibrate_against(first, calib_config());
  // Serve the first 20 cells from "the file", run the rest.
  std::map<std::string, ResultRow> stored;
  for (std::size_t i = 0; i < 20; ++i) stored[resume_key(a.rows[i])] = a.rows[i];
  FakeMachine second;
  std::size_t served = 0;
  CalibrateEnv env;
  double resumed_s = 0;
  env.run = [&](const CellSpec& s, const std::string&, std::optional<double>) -> std::optional<ResultRow> {
    if (auto it = stored.find(resume_key(s)); it != stored.end()) {
      ++served;
      resumed_s += it->second.duration_s;
      return it->second;
    }
    return second.run(s);
  };
  env.elapsed_s = [&] { return second.clock + resumed_s; };
  const auto b = run_calibration(calib_config(), env);
  EXPECT_EQ(served, 20u);
  EXPECT_EQ(*b.tmax.observed_ticks, *a.tmax.observed_ticks);
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
  auto write_run = [&](const std::string& stem, const std::string& slug, std::uint64_t fail_wait) {
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
    write_file_atomic((dir / (stem + ".json")).string(),
                      "{\"machine\": {\"slug\": \"" + slug + "\"}}\n");
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
  fs::remove_all(dir);
}

}  // namespace crossmod::harness
