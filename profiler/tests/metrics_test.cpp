// The metric description parser: the shipped files parse; every kind of bad file is one
// clear error naming the problem.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "crossmod/profile_report.hpp"

namespace {

namespace fs = std::filesystem;
using crossmod::profile::load_metrics;
using crossmod::profile::MetricSpec;

std::string write_tmp(const std::string& text) {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() / ("crossmod-metrics-" + std::to_string(getpid()) + "-" +
                                                  std::to_string(n++) + ".toml");
  std::ofstream(p) << text;
  return p.string();
}

TEST(Metrics, ShippedFilesParse) {
  for (const char* f : {"default.toml", "calls.toml", "histograms.toml"}) {
    std::vector<MetricSpec> m;
    std::string err;
    EXPECT_TRUE(load_metrics(std::string(CROSSMOD_SOURCE_DIR) + "/configs/metrics/" + f, &m, &err)) << f << err;
    EXPECT_FALSE(m.empty()) << f;
  }
}

TEST(Metrics, FocusAndDefaults) {
  std::vector<MetricSpec> m;
  std::string err;
  ASSERT_TRUE(load_metrics(write_tmp("[[metric]]\nname = \"a\"\n\n[[metric]]\nname = \"b\"\nkind = \"latency\"\n"
                                     "per = \"total\"\n[metric.focus]\nfunctions = \"work_*\"\nobject = \"*app\"\n"),
                           &m, &err))
      << err;
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].kind, "count");
  EXPECT_EQ(m[0].per, "function");
  EXPECT_EQ(m[0].functions, "*");
  EXPECT_EQ(m[1].functions, "work_*");
  EXPECT_EQ(m[1].object, "*app");
}

struct Bad {
  const char* text;
  const char* expect;  // substring of the error
};
class MetricsBad : public ::testing::TestWithParam<Bad> {};
TEST_P(MetricsBad, OneClearLine) {
  std::vector<MetricSpec> m;
  std::string err;
  EXPECT_FALSE(load_metrics(write_tmp(GetParam().text), &m, &err));
  EXPECT_NE(err.find(GetParam().expect), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}
INSTANTIATE_TEST_SUITE_P(
    Files, MetricsBad,
    ::testing::Values(Bad{"[[metric]\nname = 1", ":1:"}, Bad{"", "no [[metric]]"},
                      Bad{"[[metric]]\nkind = \"count\"\n", "'name' is required"},
                      Bad{"[[metric]]\nname = 3\n", "'name' must be a string"},
                      Bad{"[[metric]]\nname = \"x\"\nkind = \"sum\"\n", "kind 'sum'"},
                      Bad{"[[metric]]\nname = \"x\"\nper = \"module\"\n", "per 'module'"},
                      Bad{"[[metric]]\nname = \"x\"\ncolour = \"red\"\n", "unknown key 'colour'"},
                      Bad{"[[metric]]\nname = \"x\"\n[[metric]]\nname = \"x\"\n", "duplicate"},
                      Bad{"[[metric]]\nname = \"x\"\n[metric.focus]\nthread = \"1\"\n", "thread focus"},
                      Bad{"[[metric]]\nname = \"x\"\nper = \"thread\"\n[metric.focus]\nfunctions = \"f\"\n",
                          "only a thread focus"},
                      Bad{"[[metric]]\nname = \"x\"\nper = \"thread\"\nkind = \"histogram\"\n", "not kept per thread"},
                      Bad{"[metric]\nname = \"x\"\n", "no [[metric]]"},
                      Bad{"title = \"x\"\n", "unknown key 'title'"}));

}  // namespace
