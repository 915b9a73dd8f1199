// The probe API on manual sites (engine code blocks) at every cache-line split: states,
// strategies, batches, metadata, discovery, and bad input returning a status.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "crossmod/probes.h"
#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"
#include "test_support.hpp"
#include "workload.hpp"

namespace cp = crossmod::probes;
using probetest::ManualSite;

namespace {

struct Registered {
  ManualSite m;
  cp::ProbeId id = cp::kNoProbe;
};

void make(unsigned split, const char* name, Registered* r) {
  ASSERT_TRUE(probetest::make_manual_site(split, &r->m));
  ASSERT_EQ(cp::register_entry_site(r->m.site, 0, name, &r->id), cp::Status::ok);
}

class ApiSplit : public ::testing::TestWithParam<unsigned> {
 protected:
  void SetUp() override { ASSERT_EQ(cp::set_wait_ticks(probetest::kTestWaitTicks), cp::Status::ok); }
};

TEST_P(ApiSplit, StartsOffActivatesAndDeactivatesWithEveryStrategy) {
  const unsigned split = GetParam();
  Registered r;
  make(split, "api_split", &r);
  cp::ProbeInfo pi;
  ASSERT_EQ(cp::info(r.id, &pi), cp::Status::ok);
  EXPECT_EQ(pi.split, split);
  EXPECT_FALSE(pi.active);
  EXPECT_FALSE(cp::is_active(r.id));
  EXPECT_FALSE(cp::is_active(cp::kNoProbe));
  EXPECT_EQ(pi.provider, cp::Provider::manual);
  EXPECT_EQ(pi.site, reinterpret_cast<std::uintptr_t>(r.m.site));
  EXPECT_STREQ(pi.name, "api_split");

  for (cp::Strategy s : {cp::Strategy::callpatch, cp::Strategy::wordpatch_sync,
                         cp::Strategy::wordpatch_async, cp::Strategy::callpatch}) {
    ASSERT_EQ(cp::set_strategy(r.id, s), cp::Status::ok);
    const std::uint64_t before = probetest::hits(r.id);
    r.m.fn();
    EXPECT_EQ(probetest::hits(r.id), before) << "inactive probe fired";
    ASSERT_EQ(cp::activate(r.id, probetest::count_a), cp::Status::ok);
    if (s == cp::Strategy::wordpatch_async) {
      ASSERT_EQ(cp::flush(), cp::Status::ok);
    }
    EXPECT_TRUE(cp::is_active(r.id));
    r.m.fn();
    r.m.fn();
    EXPECT_EQ(probetest::hits(r.id), before + 2);
    // Active -> active with another function: a data write; the code bytes stay.
    std::uint8_t code[5];
    std::memcpy(code, r.m.site, 5);
    ASSERT_EQ(cp::activate(r.id, probetest::count_b), cp::Status::ok);
    EXPECT_EQ(std::memcmp(code, r.m.site, 5), 0);
    const std::uint64_t b = probetest::hits_b(r.id);
    r.m.fn();
    EXPECT_EQ(probetest::hits_b(r.id), b + 1);
    ASSERT_EQ(cp::deactivate(r.id), cp::Status::ok);
    if (s == cp::Strategy::wordpatch_async) {
      ASSERT_EQ(cp::flush(), cp::Status::ok);
    }
    EXPECT_FALSE(cp::is_active(r.id));
    const std::uint64_t after = probetest::hits(r.id);
    r.m.fn();
    EXPECT_EQ(probetest::hits(r.id), after);
  }
}

INSTANTIATE_TEST_SUITE_P(Splits, ApiSplit, ::testing::Values(0u, 1u, 2u, 3u, 4u));

TEST(Api, EntryProbeReceivesIdAndTimestamp) {
  Registered r;
  make(0, "api_tsc", &r);
  ASSERT_EQ(cp::activate(r.id, probetest::count_a), cp::Status::ok);
  const std::uint64_t t0 = crossmod::x86::rdtsc();
  r.m.fn();
  const std::uint64_t t1 = crossmod::x86::rdtsc();
  EXPECT_GE(probetest::last_tsc(r.id), t0);
  EXPECT_LE(probetest::last_tsc(r.id), t1);
}

// quiet_begin/quiet_end keep the calling thread's hits from the probe function, nested;
// the probe stays active and counts again after the last quiet_end.
TEST(Api, QuietThreadsHitNothing) {
  Registered r;
  make(0, "api_quiet", &r);
  ASSERT_EQ(cp::activate(r.id, probetest::count_a), cp::Status::ok);
  const std::uint64_t h0 = probetest::hits(r.id);
  r.m.fn();
  EXPECT_EQ(probetest::hits(r.id), h0 + 1);
  cp::quiet_begin();
  r.m.fn();
  cp::quiet_begin();
  r.m.fn();
  cp::quiet_end();
  r.m.fn();
  EXPECT_EQ(probetest::hits(r.id), h0 + 1);
  cp::quiet_end();
  r.m.fn();
  EXPECT_EQ(probetest::hits(r.id), h0 + 2);
  cp::quiet_end();  // unmatched: no effect
  r.m.fn();
  EXPECT_EQ(probetest::hits(r.id), h0 + 3);
}

TEST(Api, BatchByPatternAndAllCostTwoWaitsForAllStraddlers) {
  ASSERT_EQ(cp::set_wait_ticks(probetest::kTestWaitTicks), cp::Status::ok);
  std::vector<Registered> rs(8);
  for (unsigned i = 0; i < rs.size(); ++i) {
    make(i % 5, "batchgroup_member", &rs[i]);
    ASSERT_EQ(cp::set_strategy(rs[i].id, cp::Strategy::wordpatch_sync), cp::Status::ok);
  }
  std::size_t n = 0;
  const std::uint64_t t0 = crossmod::x86::rdtsc();
  ASSERT_EQ(cp::activate_matching("batchgroup_*", probetest::count_a, &n), cp::Status::ok);
  const std::uint64_t t1 = crossmod::x86::rdtsc();
  EXPECT_EQ(n, rs.size());
  for (auto& r : rs) {
    const std::uint64_t h = probetest::hits(r.id);
    r.m.fn();
    EXPECT_EQ(probetest::hits(r.id), h + 1);
  }
  // Not a speed assertion: a lower bound that proves waits were not skipped.
  EXPECT_GE(t1 - t0, 2 * probetest::kTestWaitTicks);
  ASSERT_EQ(cp::deactivate_matching("batchgroup_*", &n), cp::Status::ok);
  for (auto& r : rs) {
    const std::uint64_t h = probetest::hits(r.id);
    r.m.fn();
    EXPECT_EQ(probetest::hits(r.id), h);
  }
  ASSERT_EQ(cp::activate_function(reinterpret_cast<std::uintptr_t>(rs[3].m.site), probetest::count_a, &n),
            cp::Status::ok);
  EXPECT_EQ(n, 1u);
  ASSERT_EQ(cp::deactivate_function(reinterpret_cast<std::uintptr_t>(rs[3].m.site), &n), cp::Status::ok);
}

TEST(Api, BatchByIdsTogglesExactlyThoseAndRejectsUnknownIds) {
  std::vector<Registered> rs(5);
  std::vector<cp::ProbeId> ids;
  for (unsigned i = 0; i < rs.size(); ++i) {
    make(i, "api_many", &rs[i]);
    ids.push_back(rs[i].id);
  }
  ASSERT_EQ(cp::activate_many(ids.data(), 3, probetest::count_a), cp::Status::ok);
  for (unsigned i = 0; i < rs.size(); ++i) {
    const std::uint64_t h = probetest::hits(rs[i].id);
    rs[i].m.fn();
    EXPECT_EQ(probetest::hits(rs[i].id), h + (i < 3 ? 1 : 0)) << i;
  }
  ids.push_back(cp::kNoProbe);
  EXPECT_EQ(cp::deactivate_many(ids.data(), ids.size()), cp::Status::unknown_id);
  EXPECT_EQ(cp::deactivate_many(ids.data(), 3), cp::Status::ok);
  EXPECT_EQ(cp::activate_many(nullptr, 2, probetest::count_a), cp::Status::bad_argument);
}

TEST(Api, DiscoveryReplaysKnownProbesOnce) {
  Registered r;
  make(2, "api_discovery", &r);
  static std::vector<cp::ProbeId>* seen = nullptr;
  std::vector<cp::ProbeId> local;
  seen = &local;
  ASSERT_EQ(cp::on_discovery([](const cp::ProbeInfo& i, void*) { seen->push_back(i.id); }, nullptr),
            cp::Status::ok);
  EXPECT_EQ(local.size(), cp::count());
  Registered r2;
  make(3, "api_discovery2", &r2);
  ASSERT_EQ(local.size(), cp::count());
  EXPECT_EQ(local.back(), r2.id);
  ASSERT_EQ(cp::on_discovery(nullptr, nullptr), cp::Status::ok);
}

// Forks up to 200 times while `busy` runs in a loop on another thread; each child runs
// `child` (its result: its exit status) and exits. A child still alive after 10 s is a
// hang: it is killed and ends the loop (no waiting for the next). Counts what went wrong.
struct ForkOutcome {
  int hung = 0, failed = 0, forks = 0;
};
template <class Busy, class Child>
ForkOutcome fork_while(Busy busy, Child child) {
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop.load(std::memory_order_relaxed)) busy();
  });
  ForkOutcome o;
  for (int k = 0; k < 200 && o.hung == 0; ++k, ++o.forks) {
    const pid_t pid = fork();
    if (pid == 0) _exit(child() ? 0 : 1);
    if (pid < 0) {
      ++o.failed;
      break;
    }
    int st = 0;
    pid_t got = 0;
    for (int w = 0; w < 10000 && (got = waitpid(pid, &st, WNOHANG)) == 0; ++w) usleep(1000);
    if (got == 0) {
      ++o.hung;
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
    } else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      ++o.failed;
    }
  }
  stop.store(true);
  other.join();
  return o;
}

// fork while another thread toggles: the child's copy of a toggle lock held at that moment
// stayed held, and the child's first toggle of that probe spun forever (before the layer's
// fork handler the first child hung, in two runs of two: the toggler holds the lock most
// of the time). The handler waits for toggles in flight and holds new ones back until the
// fork is done. Each child toggles the probe once and exits.
TEST(ApiFork, ChildTogglesAProbeAnotherThreadWasToggling) {
  ASSERT_EQ(cp::set_wait_ticks(probetest::kTestWaitTicks), cp::Status::ok);
  Registered r;
  make(1, "api_fork", &r);  // straddling: every toggle waits, so the lock is held long
  const ForkOutcome o = fork_while(
      [&] {
        (void)cp::activate(r.id, probetest::count_a);
        (void)cp::deactivate(r.id);
      },
      [&] {
        return cp::activate(r.id, probetest::count_a) == cp::Status::ok &&
               cp::deactivate(r.id) == cp::Status::ok;
      });
  EXPECT_EQ(o.hung, 0) << "child of fork " << o.forks << " of 200";
  EXPECT_EQ(o.failed, 0);
}

// The same for the registry mutex: a fork while another thread registered a site (a cyg
// site's first execution, a scan) left the child's copy of the mutex held, and the
// child's first registration or discovery blocked for good. Here a thread registers an
// existing site in a loop (it takes the mutex and finds the site); each child registers
// it once.
TEST(ApiFork, ChildRegistersWhileAnotherThreadWasRegistering) {
  Registered r;
  make(0, "api_fork_reg", &r);
  const auto reg = [&] {
    cp::ProbeId id = cp::kNoProbe;
    return cp::register_entry_site(r.m.site, 0, "api_fork_reg", &id) == cp::Status::ok &&
           id == r.id;
  };
  const ForkOutcome o = fork_while([&] { (void)reg(); }, reg);
  EXPECT_EQ(o.hung, 0) << "child of fork " << o.forks << " of 200";
  EXPECT_EQ(o.failed, 0);
}

TEST(ApiBadInput, UnknownIdIsAStatus) {
  EXPECT_EQ(cp::activate(cp::kNoProbe, probetest::count_a), cp::Status::unknown_id);
  EXPECT_EQ(cp::deactivate(static_cast<cp::ProbeId>(cp::kMaxProbes + 7)), cp::Status::unknown_id);
  EXPECT_EQ(cp::set_strategy(cp::kNoProbe, cp::Strategy::callpatch), cp::Status::unknown_id);
  cp::ProbeInfo pi;
  EXPECT_EQ(cp::info(cp::kNoProbe, &pi), cp::Status::unknown_id);
  EXPECT_EQ(crossmod_probe_deactivate(CROSSMOD_NO_PROBE), CROSSMOD_PROBE_UNKNOWN_ID);
  EXPECT_STREQ(crossmod_probe_status_string(CROSSMOD_PROBE_UNKNOWN_ID), "unknown_id");
}

TEST(ApiBadInput, NullFunctionAndPatternAreBadArguments) {
  Registered r;
  make(0, "api_null", &r);
  EXPECT_EQ(cp::activate(r.id, nullptr), cp::Status::bad_argument);
  EXPECT_EQ(cp::activate_matching(nullptr, probetest::count_a), cp::Status::bad_argument);
  EXPECT_EQ(cp::activate_all(nullptr), cp::Status::bad_argument);
}

TEST(ApiBadInput, BytesChangedUnderUsAreRefusedBeforePatching) {
  for (unsigned split : {0u, 1u, 3u}) {
    Registered r;
    make(split, "api_changed", &r);
    ASSERT_EQ(cp::activate(r.id, probetest::count_a), cp::Status::ok);
    // Someone else rewrites the site: a `mov eax, imm32`, not any of our forms.
    std::uint8_t foreign[5] = {std::uint8_t{0xB8} /* mov eax, imm32 */, 1, 2, 3, 4};
    std::memcpy(r.m.site, foreign, 5);
    EXPECT_EQ(cp::deactivate(r.id), cp::Status::bytes_changed);
    EXPECT_EQ(std::memcmp(r.m.site, foreign, 5), 0) << "refused toggle wrote anyway";
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(r.id, &pi), cp::Status::ok);
    EXPECT_TRUE(pi.active);  // state unchanged
  }
}

TEST(ApiBadInput, SitesOutsideCodeAreRefused) {
  cp::ProbeId id = cp::kNoProbe;
  alignas(16) std::uint8_t stack_bytes[16] = {0x90, 0x90, 0x90, 0x90, 0x90, 0xC3};
  EXPECT_EQ(cp::register_entry_site(stack_bytes, 0, "stack", &id), cp::Status::outside_code);
  static const std::uint8_t rodata[8] = {0x90, 0x90, 0x90, 0x90, 0x90, 0xC3};
  EXPECT_EQ(cp::register_entry_site(const_cast<std::uint8_t*>(rodata), 0, "rodata", &id),
            cp::Status::outside_code);
  EXPECT_EQ(cp::register_entry_site(nullptr, 0, "null", &id), cp::Status::bad_argument);
}

TEST(ApiBadInput, UnrecognisedSiteBytesAreRefusedAtRegistration) {
  ManualSite m;
  ASSERT_TRUE(probetest::make_manual_site(0, &m));
  m.site[0] = std::uint8_t{0xB8} /* mov eax, imm32 */;
  cp::ProbeId id = cp::kNoProbe;
  EXPECT_EQ(cp::register_entry_site(m.site, 0, "api_garbage", &id), cp::Status::bytes_changed);
  if (id != cp::kNoProbe) {
    EXPECT_EQ(cp::activate(id, probetest::count_a), cp::Status::bytes_changed);
  }
}

}  // namespace
