// callpatch: byte-exact states for every split, round trips, the one-line-per-toggle
// property, bad input, and executors running a site while it is toggled >= 1M times.
#include "crossmod/callpatch.hpp"

#include <gtest/gtest.h>

#include <cstdio>

#include "crossmod/code_memory.hpp"
#include "crossmod/x86.hpp"
#include "test_site.hpp"

namespace crossmod {
namespace {

using test::Bytes5;
using test::TestSite;

// The inactive state for splits 0 and 2..4, from the design alone (never from the
// CallSite under test). Split 1 has no fixed bytes (its trampoline's address is chosen
// at prepare time); expect_split1_inactive checks what they must be.
Bytes5 expected_inactive(const TestSite& ts) {
  Bytes5 b = ts.state_a();
  if (ts.straddle() == 0) return x86::kNop5;
  b[0] = x86::kJmpRel8;
  b[1] = 3;
  return b;
}

// Split 1: the front byte stays E8 (the line before the boundary is not written), and
// the rel32 behind the boundary now calls a `ret` within reach that is not the probe's
// target, so every rel32 byte it writes may differ from the active state's.
void expect_split1_inactive(const TestSite& ts, const Bytes5& inactive) {
  EXPECT_EQ(inactive[0], ts.state_a()[0]);
  std::uintptr_t tramp = 0;
  const auto site = reinterpret_cast<std::uintptr_t>(ts.site());
  ASSERT_TRUE(x86::decode_call(inactive.data(), site, &tramp));
  EXPECT_NE(tramp, reinterpret_cast<std::uintptr_t>(ts.target()));
  // Not the caller's own `ret` after the site: that byte is user code, not the engine's.
  EXPECT_TRUE(tramp < site || tramp >= site + x86::kCallLen + 1) << "trampoline inside the site";
  EXPECT_EQ(*reinterpret_cast<const std::uint8_t*>(tramp), x86::kRet);
  EXPECT_TRUE(rel32_reachable(site + 5, tramp));
  EXPECT_NE(inactive, ts.state_a());
}

// Number of cache lines (of the two spanned by the site) that differ.
int lines_changed(const std::vector<std::uint8_t>& before, const std::vector<std::uint8_t>& after) {
  const std::size_t line = x86::cache_line_size();
  int n = 0;
  for (std::size_t l = 0; l < 2; ++l)
    if (std::memcmp(before.data() + l * line, after.data() + l * line, line) != 0) ++n;
  return n;
}

class CallPatchSplit : public ::testing::TestWithParam<unsigned> {};

TEST_P(CallPatchSplit, ByteExactStatesAndRoundTrips) {
  const unsigned split = GetParam();
  TestSite ts(split);
  CallSite cs;
  ASSERT_EQ(CallSite::prepare(ts.site(), ts.target(), &cs), Status::ok);
  EXPECT_EQ(cs.split(), split);
  EXPECT_EQ(cs.address(), ts.site());
  EXPECT_EQ(cs.active_bytes(), ts.state_a());
  EXPECT_TRUE(cs.active());

  if (split == 1) {
    expect_split1_inactive(ts, cs.inactive_bytes());
  } else {
    EXPECT_EQ(cs.inactive_bytes(), expected_inactive(ts));
  }
  // What deactivate must write; for split 1 checked once by expect_split1_inactive.
  const Bytes5 inactive = split == 1 ? cs.inactive_bytes() : expected_inactive(ts);

  const std::vector<std::uint8_t> original = ts.lines();
  for (int round = 0; round < 3; ++round) {
    auto before = ts.lines();
    ASSERT_EQ(cs.deactivate(), Status::ok);
    EXPECT_EQ(ts.current(), inactive);
    EXPECT_FALSE(cs.active());
    EXPECT_EQ(lines_changed(before, ts.lines()), 1) << "deactivate, split " << split;
    // Idempotent: a second deactivate changes nothing.
    before = ts.lines();
    ASSERT_EQ(cs.deactivate(), Status::ok);
    EXPECT_EQ(lines_changed(before, ts.lines()), 0);

    before = ts.lines();
    ASSERT_EQ(cs.activate(), Status::ok);
    EXPECT_EQ(ts.current(), ts.state_a());
    EXPECT_TRUE(cs.active());
    EXPECT_EQ(lines_changed(before, ts.lines()), 1) << "activate, split " << split;
    EXPECT_EQ(ts.lines(), original) << "round trip restores every byte of both lines";
  }
  // Both states execute: active returns 1 (the call ran), inactive 0.
  EXPECT_EQ(ts.entry()(), 1);
  ASSERT_EQ(cs.deactivate(), Status::ok);
  EXPECT_EQ(ts.entry()(), 0);

  // prepare() accepts a site that is currently in the inactive state, with the same bytes.
  CallSite again;
  ASSERT_EQ(CallSite::prepare(ts.site(), ts.target(), &again), Status::ok);
  EXPECT_EQ(again.inactive_bytes(), cs.inactive_bytes());
  EXPECT_FALSE(again.active());
}

TEST_P(CallPatchSplit, BadBytesAreRefused) {
  const unsigned split = GetParam();
  TestSite ts(split);
  std::memcpy(ts.site(), testsupport::kNop5Prefixed.data(), 5);  // neither the call nor inactive
  CallSite cs;
  EXPECT_EQ(CallSite::prepare(ts.site(), ts.target(), &cs), Status::bad_bytes);
  // A call to some other target is not this site's call either.
  Bytes5 other{};
  ASSERT_EQ(x86::encode_call(reinterpret_cast<std::uintptr_t>(ts.site()),
                             reinterpret_cast<std::uintptr_t>(ts.target()) + 16, &other),
            Status::ok);
  std::memcpy(ts.site(), other.data(), 5);
  EXPECT_EQ(CallSite::prepare(ts.site(), ts.target(), &cs), Status::bad_bytes);
}

INSTANTIATE_TEST_SUITE_P(AllSplits, CallPatchSplit, ::testing::Values(0u, 1u, 2u, 3u, 4u),
                         [](const ::testing::TestParamInfo<unsigned>& p) {
                           char name[8];
                           std::snprintf(name, sizeof name, "S%u", p.param);
                           return std::string(name);
                         });

TEST(CallPatch, UnwritableAddressIsRefused) {
  // Static storage is never registered with code_memory.
  static std::uint8_t not_code[16] = {x86::kCallRel32, 0, 0, 0, 0};
  CallSite cs;
  EXPECT_EQ(CallSite::prepare(not_code, not_code + 5, &cs), Status::not_writable);
  EXPECT_EQ(CallSite::prepare(nullptr, not_code, &cs), Status::bad_address);
  CallSite unprepared;
  EXPECT_EQ(unprepared.activate(), Status::bad_address);
  EXPECT_EQ(unprepared.deactivate(), Status::bad_address);
}

TEST(CallPatch, TargetOutOfRel32Reach) {
  TestSite ts(2);
  const auto far = reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(ts.site()) +
                                                 (std::uintptr_t{3} << 30));
  CallSite cs;
  EXPECT_EQ(CallSite::prepare(ts.site(), far, &cs), Status::out_of_range);
  const auto below = reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(ts.site()) -
                                                   (std::uintptr_t{3} << 30));
  EXPECT_EQ(CallSite::prepare(ts.site(), below, &cs), Status::out_of_range);
}

TEST(CallPatch, ToggleAfterRangeIsGoneReportsNotWritable) {
  CallSite cs;
  {
    TestSite ts(3);
    ASSERT_EQ(CallSite::prepare(ts.site(), ts.target(), &cs), Status::ok);
  }
  // The CodeBlock was unmapped and unregistered: no write may happen.
  EXPECT_EQ(cs.activate(), Status::not_writable);
  EXPECT_EQ(cs.deactivate(), Status::not_writable);
}

TEST(CallPatch, TrampolineIsSharedBySitesInReach) {
  TestSite a(1), b(1);
  CallSite ca, cb;
  ASSERT_EQ(CallSite::prepare(a.site(), a.target(), &ca), Status::ok);
  ASSERT_EQ(CallSite::prepare(b.site(), b.target(), &cb), Status::ok);
  std::uintptr_t ta = 0, tb = 0;
  ASSERT_TRUE(x86::decode_call(ca.inactive_bytes().data(),
                               reinterpret_cast<std::uintptr_t>(a.site()), &ta));
  ASSERT_TRUE(x86::decode_call(cb.inactive_bytes().data(),
                               reinterpret_cast<std::uintptr_t>(b.site()), &tb));
  if (rel32_reachable(reinterpret_cast<std::uintptr_t>(b.site()) + 5, ta)) {
    EXPECT_EQ(ta, tb);
  }
}

// ---- concurrency ----------------------------------------------------------------------------
struct ConcurrencyParam {
  unsigned split;
  int executors;
};

class CallPatchConcurrent : public ::testing::TestWithParam<ConcurrencyParam> {};

TEST_P(CallPatchConcurrent, MillionTogglesUnderExecution) {
  const auto [split, executors] = GetParam();
  constexpr std::uint64_t kToggles = 1'000'000;
  TestSite ts(split);
  CallSite cs;
  ASSERT_EQ(CallSite::prepare(ts.site(), ts.target(), &cs), Status::ok);

  test::Executors execs(executors, {ts.entry()});
  test::ExecCounts& counts = execs.counts;

  std::uint64_t failures = 0;
  std::uint64_t exposures = 0;
  for (std::uint64_t t = 0; t < kToggles; ++t) {
    const bool deactivating = (t & 1) == 0;
    const Status s = deactivating ? cs.deactivate() : cs.activate();
    failures += s != Status::ok;
    // Every 2^16 toggles, hold each state until an executor has run it.
    if ((t >> 1) % 32768 == 0) {
      ASSERT_TRUE(test::await_execution(counts, deactivating ? 0 : 1));
      ++exposures;
    }
  }
  execs.stop();

  EXPECT_EQ(failures, 0u);
  EXPECT_TRUE(cs.active());  // an even number of toggles ends active
  EXPECT_EQ(counts.ran[2].load(), 0u) << "an executor returned neither 0 nor 1";
  std::printf(
      "split %u, %d executor(s): %llu toggles (%llu held until executed), call ran %llu, "
      "inactive ran %llu\n",
      split, executors, static_cast<unsigned long long>(kToggles),
      static_cast<unsigned long long>(exposures),
              static_cast<unsigned long long>(counts.ran[1].load()),
              static_cast<unsigned long long>(counts.ran[0].load()));
  EXPECT_GT(counts.ran[0].load(), 0u);
  EXPECT_GT(counts.ran[1].load(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    AllSplits, CallPatchConcurrent,
    ::testing::Values(ConcurrencyParam{0, 1}, ConcurrencyParam{1, 1}, ConcurrencyParam{2, 1},
                      ConcurrencyParam{3, 1}, ConcurrencyParam{4, 1}, ConcurrencyParam{0, 2},
                      ConcurrencyParam{1, 2}, ConcurrencyParam{2, 2}, ConcurrencyParam{3, 2},
                      ConcurrencyParam{4, 2}),
    [](const ::testing::TestParamInfo<ConcurrencyParam>& p) {
      char name[16];
      std::snprintf(name, sizeof name, "S%u_E%d", p.param.split, p.param.executors);
      return std::string(name);
    });

}  // namespace
}  // namespace crossmod
