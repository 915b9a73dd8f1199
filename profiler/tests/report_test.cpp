// The launcher's statistics and readers on synthetic data: batch-means interval against a
// hand computation, the call-rate estimator on simulated windows, percentiles inside histogram buckets, CSV quoting, and segment files
// that are missing or corrupt (a note, never a crash).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "crossmod/profile_format.hpp"
#include "crossmod/profile_report.hpp"

namespace {

namespace fs = std::filesystem;
using namespace crossmod::profile;

TEST(ProfileStats, BatchMeansInterval) {
  // Three batches (n_b, s_b): (10, 1000), (10, 1200), (20, 1800): m = 4000/40 = 100.
  ProfileData d;
  FunctionStats f;
  f.name = "f";
  f.samples = 40;
  f.all.n = 40;
  f.all.sum = 4000;
  f.calls_estimated = 40;
  f.hist.assign(kHistBuckets, 0);
  f.hist[hist_bucket(100)] = 40;
  const double b[3][2] = {{10, 1000}, {10, 1200}, {20, 1800}};
  for (const auto& x : b) {
    ++f.all.batches;
    f.all.s2 += x[1] * x[1];
    f.all.sn += x[1] * x[0];
    f.all.n2 += x[0] * x[0];
  }
  d.functions.push_back(f);
  RunInfo run;
  run.tsc_hz = 1e9;
  run.user_s = 1e-5;  // 10,000 ticks of CPU
  finish_stats(&d, run);
  const FunctionStats& s = d.functions[0];
  EXPECT_DOUBLE_EQ(s.mean, 100.0);
  // residuals s_b - m n_b: 0, 200, -200; sum of squares 80,000; nbar = 40/3.
  const double se = std::sqrt(80000.0 / (3.0 * 2.0 * (40.0 / 3) * (40.0 / 3)));
  const double t975_df2 = 4.302652729911275;  // Student t, 2 degrees of freedom
  ASSERT_TRUE(s.has_ci);
  EXPECT_NEAR(s.ci_lo, 100 - t975_df2 * se, 1e-6);
  EXPECT_NEAR(s.ci_hi, 100 + t975_df2 * se, 1e-6);
  // Every sample is in 100's bucket: both percentiles lie inside it.
  const unsigned k = hist_bucket(100);
  for (double p : {s.p50, s.p99}) {
    EXPECT_GE(p, static_cast<double>(hist_lower(k)));
    EXPECT_LE(p, static_cast<double>(hist_lower(k + 1)));
  }
  EXPECT_DOUBLE_EQ(s.share, 100.0 * 40 / 10000.0);
}

// The batch-means interval on clustered, skewed samples, simulated: each batch (an epoch's
// samples, 1-10 of them) shares a factor exp(sb Z - sb^2/2) (a state of the machine or the
// program that lasts the epoch) and each sample has its own exp(sw W - sw^2/2), so every
// sample's mean is 100 and samples in one batch are correlated. Fixed seed, 4,000 runs
// each. With 30 batches, moderate clustering and skew (sb 0.2, sw 0.5) the interval covers
// the mean in 94.3% of the runs (checked: 93-96.5%); the interval the same samples would
// give as if independent (1.96 x their standard deviation / sqrt(n)) in 86.2% (checked:
// under 90%). It is short of 95% where the batches are few and the samples very skewed
// (5 batches, sb 0.3, sw 1.0: 87.4%; the t quantile assumes symmetric batch residuals):
// at least 85% is what this checks there (profiler/README.md, What the numbers mean).
TEST(ProfileStats, BatchMeansIntervalCoversClusteredSamples) {
  struct Case {
    int batches;
    double sb, sw, lo, hi;
  };
  for (const Case c : {Case{30, 0.2, 0.5, 0.93, 0.965}, Case{5, 0.3, 1.0, 0.85, 1.0}}) {
    std::mt19937_64 rng(2026);
    std::normal_distribution<double> z(0, 1);
    std::uniform_int_distribution<int> size(1, 10);
    int covered = 0, naive = 0;
    const int runs = 4000;
    for (int r = 0; r < runs; ++r) {
      MeanEstimate m;
      double sum = 0, sumsq = 0;
      std::uint64_t n = 0;
      for (int b = 0; b < c.batches; ++b) {
        const int nb = size(rng);
        const double f = std::exp(c.sb * z(rng) - c.sb * c.sb / 2);
        double sb = 0;
        for (int i = 0; i < nb; ++i) {
          const double x = 100 * f * std::exp(c.sw * z(rng) - c.sw * c.sw / 2);
          sb += x;
          sumsq += x * x;
        }
        ++m.batches;
        m.s2 += sb * sb;
        m.sn += sb * nb;
        m.n2 += static_cast<double>(nb) * nb;
        sum += sb;
        n += static_cast<std::uint64_t>(nb);
      }
      // MeanEstimate keeps integer sums of ticks: the simulated samples' sum, rounded, and
      // the batch sums above (what fold() stores, as doubles).
      m.n = n;
      m.sum = static_cast<std::uint64_t>(std::llround(sum));
      m.finish();
      ASSERT_TRUE(m.has_ci);
      covered += m.lo <= 100 && 100 <= m.hi ? 1 : 0;
      const double mean = sum / static_cast<double>(n);
      const double sd = std::sqrt(std::max(0.0, (sumsq - static_cast<double>(n) * mean * mean) / static_cast<double>(n - 1)));
      naive += std::abs(mean - 100) <= 1.96 * sd / std::sqrt(static_cast<double>(n)) ? 1 : 0;
    }
    const double cov = static_cast<double>(covered) / runs;
    EXPECT_GE(cov, c.lo) << c.batches << " batches";
    EXPECT_LE(cov, c.hi) << c.batches << " batches";
    if (c.batches == 30) {
      EXPECT_LT(static_cast<double>(naive) / runs, 0.90);
    }
  }
}

// The gap term of the bounds (profile_report.hpp, MachineGaps), simulated: the machine
// takes gaps as a Poisson process in running time (one per 1.6 M ticks, exponential sizes
// of mean 39,000 ticks: ~2.4% of the time, ~1,440 a second at 2.3 GHz, about the median
// run of the meter in the Intel guest's evaluation, profiler/README.md) and a call of d
// running ticks holds a Poisson number of them, so its true mean is
// d (1 + 39,000 / 1.6 M). A run: 40 batches of 1-10 samples (d with 2% noise, plus their
// gaps) and the launcher's 40 ms meter on the same process. Fixed seed, 2,000 runs per d.
// Where a run's samples hold a few gaps in expectation (d 20,000: ~2.7), the interval alone
// misses whenever they drew fewer: it covered in 71.1% of the runs, and a short function's
// tight interval (d 200) almost never holds the 2.4% at all (2.7%); with the term (the
// meter's upper share) added to the upper end, 99.8% and 98.3% (5,000: 43.2% -> 99.5%;
// 100,000: 91.0% -> 99.7%; 10^6: 93.5% -> 97.9%). With the meter's share as it is rather
// than its upper bound, d 200 got 71.0% and 5,000 86.3%. Checked: at least 95% with the
// term for every d; under 80% without it at d 20,000 and under 10% at d 200.
TEST(ProfileStats, GapTermRestoresCoverage) {
  constexpr double kRate = 1.0 / 1.6e6, kGap = 39000, kMeter = 40 * 2.3e6;
  std::mt19937_64 rng(2811);
  std::exponential_distribution<double> gap(1.0 / kGap);
  std::normal_distribution<double> z(0, 1);
  std::uniform_int_distribution<int> size(1, 10);
  double sq = 0;  // the squares of the last gaps_in's gaps
  auto gaps_in = [&](double running) {
    std::poisson_distribution<int> k(kRate * running);
    double sum = 0;
    sq = 0;
    for (int i = k(rng); i > 0; --i) {
      const double g = gap(rng);
      sum += g;
      sq += g * g;
    }
    return sum;
  };
  for (const double d : {200.0, 5000.0, 20000.0, 100000.0, 1000000.0}) {
    const double truth = d * (1 + kRate * kGap);
    int with = 0, without = 0;
    const int runs = 2000;
    for (int r = 0; r < runs; ++r) {
      MachineGaps meter;
      meter.gap_ticks = gaps_in(kMeter);
      meter.gap_sq = sq;
      meter.spin_ticks = kMeter + meter.gap_ticks;
      MeanEstimate m;
      double sum = 0;
      for (int b = 0; b < 40; ++b) {
        const int nb = size(rng);
        double sb = 0;
        for (int i = 0; i < nb; ++i) sb += d * (1 + 0.02 * z(rng)) + gaps_in(d);
        ++m.batches;
        m.s2 += sb * sb;
        m.sn += sb * nb;
        m.n2 += static_cast<double>(nb) * nb;
        sum += sb;
        m.n += static_cast<std::uint64_t>(nb);
      }
      m.sum = static_cast<std::uint64_t>(std::llround(sum));
      m.finish();
      ASSERT_TRUE(m.has_ci);
      without += m.lo <= truth && truth <= m.hi ? 1 : 0;
      with += m.lo <= truth && truth <= m.hi + gap_term(m.mean, meter) ? 1 : 0;
    }
    const double cov = static_cast<double>(with) / runs, bare = static_cast<double>(without) / runs;
    std::printf("d %.0f: covered %.3f with the gap term, %.3f without\n", d, cov, bare);
    EXPECT_GE(cov, 0.95) << d;
    if (d == 20000.0) {
      EXPECT_LT(bare, 0.80);
    }
    if (d == 200.0) {
      EXPECT_LT(bare, 0.10);
    }
  }
}

// The daemon's t quantile (converge's stopping rule) against Boost's, which the launcher's
// intervals use: within 0.3% from 4 degrees of freedom (converge's fewest) on.
TEST(ProfileStats, StudentQuantileMatchesBoost) {
  for (int df = 4; df <= 400; ++df) {
    const double exact = boost::math::quantile(boost::math::students_t(df), 0.975);
    EXPECT_NEAR(t975(df), exact, 0.003 * exact) << df;
  }
}

TEST(ProfileStats, OneBatchHasNoInterval) {
  ProfileData d;
  FunctionStats f;
  f.samples = 5;
  f.all.n = 5;
  f.all.sum = 50;
  f.all.batches = 1;
  f.hist.assign(kHistBuckets, 0);
  f.hist[hist_bucket(10)] = 5;
  d.functions.push_back(f);
  finish_stats(&d, RunInfo{});
  EXPECT_FALSE(d.functions[0].has_ci);
  EXPECT_DOUBLE_EQ(d.functions[0].mean, 10.0);
}

// A segment's record: 2 folded batches (10, 1000) and (10, 1200), then 20 samples summing to
// 1800 after the last fold, which add() must take as a third batch: the same three batches
// as BatchMeansInterval, so the same interval.
TEST(ProfileStats, MeanEstimateTakesTheUnfoldedTailAsABatch) {
  MeanEstimate e;
  e.add(40, 4000, Batches{20, 2200, 2, 1000.0 * 1000 + 1200.0 * 1200, 1000.0 * 10 + 1200.0 * 10, 200});
  e.finish();
  EXPECT_EQ(e.batches, 3u);
  EXPECT_DOUBLE_EQ(e.mean, 100.0);
  const double se = std::sqrt(80000.0 / (3.0 * 2.0 * (40.0 / 3) * (40.0 / 3)));
  ASSERT_TRUE(e.has_ci);
  EXPECT_NEAR(e.hi - e.mean, 4.302652729911275 * se, 1e-6);
  MeanEstimate none;
  none.add(0, 0, Batches{});
  none.finish();
  EXPECT_FALSE(none.has_ci);
  EXPECT_EQ(none.n, 0u);
}

// calls_estimate / window_rate (FuncRecord::win_start) on hand-made records.
TEST(ProfileStats, CallsEstimateAddsTheTail) {
  FuncRecord f{};
  f.calls = 30;
  EXPECT_EQ(calls_estimate(f, 5000), 30.0);  // never switched off: what was observed
  f.offs = 2;
  f.est_calls = 100;
  f.est_until = 1000;
  f.off_rate = 0.5;
  EXPECT_EQ(calls_estimate(f, 1200), 200.0);  // off since 1000: 200 ticks at 0.5
  f.win_start = 1100;
  f.win_calls0 = 22;
  EXPECT_EQ(calls_estimate(f, 1200), 108.0);  // on since 1100: its 8 calls, no rate
  f.est_calls = 1;
  EXPECT_EQ(calls_estimate(f, 1200), 30.0);  // never below the calls observed
}

TEST(ProfileStats, WindowRateTakesOffTheProbes) {
  EXPECT_EQ(window_rate(10, 1000, 500, false, 0), 10.0 / 500);
  EXPECT_EQ(window_rate(10, 1000, 500, true, 0), 9.0 / 500);  // ended at its 10th call
  EXPECT_EQ(window_rate(10, 640, 5000, false, 0), 10.0 / 10);  // overshoot: 1/64 of the window
  EXPECT_EQ(window_rate(10, 1000, 500, true, 0.01), 9.0 / 500);  // a previous rate changes nothing
}

// A window a hit closed at its first call measured little more than how soon it came: no
// rate of its own (0 without a previous one); with one, the previous rate with the
// window's call and length added to kRatePrior calls of it (it used to be 1 / length: a
// window of 272 ticks gave 1/272 a tick). Likewise a window an exit closed before any call.
TEST(ProfileStats, AWindowOfOneCallKeepsThePreviousRate) {
  EXPECT_EQ(window_rate(1, 272, 0, true, 0), 0.0);
  const double prev = 3e-6;
  EXPECT_DOUBLE_EQ(window_rate(1, 272, 0, true, prev), (1 + kRatePrior) / (272 + kRatePrior / prev));
  EXPECT_NEAR(window_rate(1, 272, 0, true, prev), 1.2 * prev, 0.01 * prev);
  EXPECT_NEAR(window_rate(0, 272, 0, true, prev), prev, 0.01 * prev);
  EXPECT_EQ(window_rate(0, 272, 0, false, 0), 0.0);
}

// The estimator over windows as the budget policy makes them, simulated: a function called
// as a Poisson stream (rate 1e-5 a tick), switched on every 10^6 ticks (its window starts
// at the switch-on); in 60% of the periods the budget is spent and its first call switches
// it off again (a window of one call, ending at that call), else it takes its 10 samples;
// off until the next switch-on, the stretch gets the rate the window left (calls_estimate).
// Over 300 simulated runs of 200 periods each (fixed seed), the estimate of the run's
// calls stays within 25% of the true count in every run, and its median error under 5%;
// with the window-of-one-call rate taken at face value (1 / length, the rule before), the
// estimate is off by more than 2x in most runs.
TEST(ProfileStats, CallsEstimateHoldsUnderBudgetWindows) {
  std::mt19937_64 rng(12345);
  const double rate = 1e-5;
  std::exponential_distribution<double> gap(rate);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> err, naive_err;
  for (int run = 0; run < 300; ++run) {
    double t = 0, next_call = gap(rng), est = 0, naive = 0, prev = 0, naive_rate = 0, truth = 0;
    for (int period = 0; period < 200; ++period) {
      const double on = period * 1e6, end = on + 1e6;
      while (next_call < on) next_call += gap(rng), truth += 1;  // off: calls not seen
      if (period > 0) {
        est += prev * (on - t);
        naive += naive_rate * (on - t);
      }
      const int quota = u(rng) < 0.6 ? 1 : 10;
      double n = 0, close = end;
      bool at_call = false;
      while (next_call < end) {  // on: calls counted until the quota
        n += 1;
        truth += 1;
        const double c = next_call;
        next_call += gap(rng);
        if (n == quota) {
          close = c;
          at_call = true;
          break;
        }
      }
      est += n;
      naive += n;
      prev = window_rate(n, close - on, 0, at_call, prev);
      naive_rate = (at_call && n >= 2 ? n - 1 : n) / (close - on);
      t = close;
    }
    while (next_call < 200e6) next_call += gap(rng), truth += 1;
    est += prev * (200e6 - t);
    naive += naive_rate * (200e6 - t);
    err.push_back(std::abs(std::log(est / truth)));
    naive_err.push_back(std::abs(std::log(naive / truth)));
  }
  std::sort(err.begin(), err.end());
  std::sort(naive_err.begin(), naive_err.end());
  EXPECT_LT(err.back(), std::log(1.25)) << err.back();
  EXPECT_LT(err[err.size() / 2], std::log(1.05)) << err[err.size() / 2];
  EXPECT_GT(naive_err[naive_err.size() / 2], std::log(2.0));
}

TEST(ProfileStats, HistogramBucketsCoverEveryDuration) {
  for (std::uint64_t v : {0ull, 1ull, 7ull, 8ull, 9ull, 15ull, 16ull, 1000ull, 123456789ull, 1ull << 40}) {
    const unsigned b = hist_bucket(v);
    EXPECT_LE(hist_lower(b), v) << v;
    EXPECT_GT(hist_lower(b + 1), v) << v;
  }
}

TEST(ProfileReport, CsvQuotesNames) {
  ProfileData d;
  FunctionStats f;
  f.name = "std::pair<int, int> f(\"x\")";
  f.object = "/a,b/app";
  f.hist.assign(kHistBuckets, 0);
  d.functions.push_back(f);
  const std::string csv = report_csv(d);
  EXPECT_NE(csv.find("\"std::pair<int, int> f(\"\"x\"\")\",\"/a,b/app\""), std::string::npos) << csv;
}

// Only a function on the whole run with nothing seen is set aside; one ever off, or with
// any call, sample or exit, stays. Counted per object either way; listed with `list`.
TEST(ProfileReport, SetsAsideOnlyFunctionsCertainlyNeverCalled) {
  const auto make = [](const char* name, const char* object) {
    FunctionStats f;
    f.name = name;
    f.object = object;
    f.hist.assign(kHistBuckets, 0);
    return f;
  };
  ProfileData d;
  d.functions.push_back(make("idle_a", "/lib/a.so"));
  d.functions.push_back(make("idle_b", "/lib/a.so"));
  d.functions.push_back(make("idle_c", "/bin/app"));
  FunctionStats off = make("was_off", "/bin/app");
  off.always_on = false;
  d.functions.push_back(off);
  FunctionStats called = make("called", "/bin/app");
  called.calls_observed = 1;
  d.functions.push_back(called);
  FunctionStats estimated = make("estimated", "/bin/app");
  estimated.calls_estimated = 0.5;
  d.functions.push_back(estimated);
  FunctionStats exited = make("exited", "/bin/app");
  exited.blind_exits = 1;
  d.functions.push_back(exited);
  ProfileData listed = d;
  set_aside_never_called(&d, false);
  ASSERT_EQ(d.functions.size(), 4u);
  EXPECT_EQ(d.functions[0].name, "was_off");
  EXPECT_EQ(d.never_called, 3u);
  EXPECT_FALSE(d.never_called_listed);
  ASSERT_EQ(d.never_called_by_object.size(), 2u);
  EXPECT_EQ(d.never_called_by_object[0], (std::pair<std::string, std::uint64_t>{"/bin/app", 1}));
  EXPECT_EQ(d.never_called_by_object[1], (std::pair<std::string, std::uint64_t>{"/lib/a.so", 2}));
  const nlohmann::json j = report_json(d, RunInfo{}, {});
  EXPECT_EQ(j["overhead"]["functions"], 7);
  EXPECT_EQ(j["never_called"]["functions"], 3);
  EXPECT_EQ(j["never_called"]["by_object"]["/lib/a.so"], 2);
  EXPECT_EQ(report_csv(d).find("idle_a"), std::string::npos);
  EXPECT_NE(report_table(d, RunInfo{}, 20).find("3 of the functions were never called"), std::string::npos);
  set_aside_never_called(&listed, true);
  EXPECT_EQ(listed.functions.size(), 7u);
  EXPECT_EQ(listed.never_called, 3u);
  EXPECT_EQ(report_json(listed, RunInfo{}, {})["overhead"]["functions"], 7);
}

// mean_sys_ticks: the mean constant part over the compensated samples, unsigned; the
// bound widens the interval by it.
TEST(ProfileReport, SystematicTermAndBound) {
  ProfileData d;
  FunctionStats f;
  f.name = "f";
  f.hist.assign(kHistBuckets, 0);
  f.samples = 12;
  f.uncompensated = 2;
  f.fixed_sum = -300;  // 10 compensated samples: -30 each
  f.mean = 500;
  f.has_ci = true;
  f.ci_lo = 490;
  f.ci_hi = 510;
  d.functions.push_back(f);
  FunctionStats raw = f;
  raw.name = "raw";
  raw.uncompensated = raw.samples;  // no frame found: no term, no bound
  d.functions.push_back(raw);
  EXPECT_DOUBLE_EQ(d.functions[0].sys(), 30.0);
  const nlohmann::json j = report_json(d, RunInfo{}, {});
  EXPECT_EQ(j["functions"][0]["mean_sys_ticks"], 30.0);
  EXPECT_EQ(j["functions"][0]["mean_bound_ticks"], nlohmann::json::array({460.0, 540.0}));
  EXPECT_TRUE(j["functions"][1]["mean_sys_ticks"].is_null());
  EXPECT_TRUE(j["functions"][1]["mean_bound_ticks"].is_null());
  EXPECT_NE(report_csv(d).find(",30\n"), std::string::npos) << report_csv(d);
  EXPECT_EQ(j["run"]["machine_gaps"]["share"], 0.0);
  // With the machine's gaps measured, the upper end adds their share of the mean: one gap
  // of 20,000 ticks in 10^6, upper share (20,000 + 1.96 x 20,000) / 10^6.
  RunInfo run;
  run.tsc_hz = 1e9;
  run.gaps.spin_ticks = 1e6;
  run.gaps.gap_ticks = 20000;
  run.gaps.gap_sq = 20000.0 * 20000.0;
  run.gaps.gaps = 1;
  const double s = (20000 + 1.959963984540054 * 20000) / 1e6;
  EXPECT_NEAR(gap_term(500, run.gaps), 500 * s / (1 - s), 1e-9);
  const nlohmann::json g = report_json(d, run, {});
  EXPECT_EQ(g["functions"][0]["mean_bound_ticks"][0], 460.0);
  EXPECT_NEAR(g["functions"][0]["mean_bound_ticks"][1].get<double>(), 540.0 + 500 * s / (1 - s),
              1e-9);
  EXPECT_EQ(g["run"]["machine_gaps"]["gaps"], 1);
  EXPECT_NE(report_table(d, run, 5).find("machine gaps: 2.00% of the time"), std::string::npos)
      << report_table(d, run, 5);
}

// The meter itself: every chunk is measured or dropped, a gap is a step over 1 us, and what
// it kept adds up (a loaded machine may switch the thread out of any chunk: no timing is
// checked).
TEST(ProfileStats, GapMeterAccountsForEveryChunk) {
  const MachineGaps g = measure_gaps(3, 1e9);
  EXPECT_EQ(g.chunks, 3u);
  EXPECT_LE(g.dropped, 3u);
  EXPECT_EQ(g.threshold_ticks, 1000u);
  if (g.dropped < 3) {
    EXPECT_GE(g.spin_ticks, 1e6 * (3 - g.dropped));
  }
  EXPECT_LE(g.gap_ticks, g.spin_ticks);
  EXPECT_GE(g.gap_ticks, static_cast<double>(g.gaps) * 1000);
  EXPECT_EQ(measure_gaps(0, 1e9).chunks, 0u);
  EXPECT_EQ(gap_term(1000, MachineGaps{}), 0.0);
}

TEST(ProfileReport, MissingAndCorruptSegmentsAreNotes) {
  const fs::path dir = fs::temp_directory_path() / ("crossmod-seg-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  RunInfo run;
  ProfileData none = read_segments(dir.string(), run);
  EXPECT_EQ(none.segments, 0u);
  ASSERT_EQ(none.notes.size(), 1u);
  EXPECT_NE(none.notes[0].find("no data file"), std::string::npos);
  {
    std::ofstream f(dir / "segment-0.bin", std::ios::binary);
    f << std::string(4096, 'x');  // not a segment
    std::ofstream g(dir / "segment-1.bin", std::ios::binary);  // empty
  }
  ProfileData bad = read_segments(dir.string(), run);
  EXPECT_EQ(bad.segments, 0u);
  EXPECT_EQ(bad.functions.size(), 0u);
  ASSERT_EQ(bad.notes.size(), 2u);
  EXPECT_NE(bad.notes[0].find("segment-0.bin: bad magic"), std::string::npos) << bad.notes[0];
  EXPECT_NE(bad.notes[1].find("segment-1.bin: unreadable or truncated"), std::string::npos) << bad.notes[1];
  fs::remove_all(dir);
}

}  // namespace
