// The launcher's statistics and readers on synthetic data: batch-means interval against a
// hand computation, percentiles inside histogram buckets, CSV quoting, and segment files
// that are missing or corrupt (a note, never a crash).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

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
  EXPECT_EQ(window_rate(10, 1000, 500, false), 10.0 / 500);
  EXPECT_EQ(window_rate(10, 1000, 500, true), 9.0 / 500);  // ended at its 10th call
  EXPECT_EQ(window_rate(1, 1000, 0, true), 1.0 / 1000);
  EXPECT_EQ(window_rate(10, 640, 5000, false), 10.0 / 10);  // overshoot: 1/64 of the window
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
