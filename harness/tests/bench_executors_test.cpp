// The bench suites' executors (engine/bench/bench_support.hpp) on a torn site: each fault
// is counted and the thread goes back to its loop; a fault on any other thread still gets
// the disposition it had before. Before this, one tear killed `crossmod bench` (SIGILL,
// seen on the Xeon guest at a Tmax whose soak also tore).
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

#include "bench_support.hpp"

namespace {

using crossmod::bench::Executors;
using crossmod::testsupport::StressSite;
using Bytes5 = std::array<std::uint8_t, 5>;

// The threads run wherever the scheduler puts them: pinning is the runner's business.
void unpinned_env() {
  auto& e = crossmod::bench::env();
  e.place = [](unsigned n) {
    crossmod::bench::Placement p;
    p.executor_pus.assign(n, -1);
    return p;
  };
  e.bind_current_thread = [](int, std::string*) { return true; };
}

Bytes5 mix(const Bytes5& front, const Bytes5& back, unsigned split) {
  Bytes5 m = back;
  for (unsigned i = 0; i < split; ++i) m[i] = front[i];
  return m;
}

// Both torn mixes at S = 2: "NOP front + call back" is #UD (SIGILL), "call front + NOP
// back" calls into the site's PROT_NONE window (SIGSEGV). Every call faults while the
// bytes stay torn, so the count is certain to grow; the deadline only keeps a broken
// build from hanging the test.
TEST(BenchExecutors, SurviveTornSitesAndCountTheFaults) {
  unpinned_env();
  std::string why;
  auto site = StressSite::create(2, 0, &why);
  ASSERT_TRUE(site) << why;
  const Bytes5 a = site->state_a(), b = site->state_b();
  for (const Bytes5& torn : {mix(b, a, 2), mix(a, b, 2)}) {
    Executors ex;  // start() returns once the executor has called the whole site
    ASSERT_TRUE(ex.start(1, {site->entry()}, /*hold=*/false, &why)) << why;
    std::memcpy(site->site(), torn.data(), torn.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ex.faults() < 100 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::memcpy(site->site(), a.data(), a.size());  // whole again: the next spin completes
    ex.stop();
    EXPECT_GE(ex.faults(), 100u);
    EXPECT_GE(ex.calls(), 1u);  // the last stretch, after the repair, is counted
    EXPECT_EQ(ex.calls(), ex.state_a());
  }
}

TEST(BenchExecutorsDeathTest, OtherThreadsFaultsKeepTheirDisposition) {
  unpinned_env();
  EXPECT_EXIT(
      {
        std::string why;
        auto site = StressSite::create(2, 0, &why);
        Executors ex;  // installs the handlers
        if (!site || !ex.start(1, {site->entry()}, /*hold=*/false, &why)) std::_Exit(3);
        ex.stop();
        __builtin_trap();  // ud2 on the main thread: SIGILL, default action
      },
      testing::KilledBySignal(SIGILL), "");
}

}  // namespace
