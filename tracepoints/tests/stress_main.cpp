// `ctest -L stress`: the install/remove scenario of tracepoint_test.cpp with 1M cycles
// (override with CROSSMOD_TP_STRESS_CYCLES) and two executors.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "crossmod/trap.hpp"
#include "stress.hpp"

TEST(TracepointStress, InstallRemoveMillionTimes) {
  std::uint64_t cycles = 1000000;
  if (const char* e = std::getenv("CROSSMOD_TP_STRESS_CYCLES"))
    cycles = std::strtoull(e, nullptr, 10);
  const auto r = crossmod::tp::test::run_stress(cycles, 2, /*batched=*/true);
  const auto t = crossmod::trap::redirect_stats();
  std::printf(
      "cycles %llu exposed %llu calls %llu wrong %llu probe_hits %llu redirected %llu "
      "reexecuted %llu\n",
      (unsigned long long)r.cycles, (unsigned long long)r.exposed_cycles,
      (unsigned long long)r.calls, (unsigned long long)r.wrong, (unsigned long long)r.probe_hits,
      (unsigned long long)t.redirected, (unsigned long long)t.reexecuted);
  EXPECT_EQ(r.cycles, cycles);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_GT(r.exposed_cycles, 0u);
}

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
