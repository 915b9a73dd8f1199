// Redirect sites (trap.hpp): an int3 registered with redirect_set() sends the thread to
// the registered target; a cleared site whose byte is restored re-executes in place; an
// unregistered int3 is still chained. Deterministic, single-threaded.
#include <gtest/gtest.h>

#include <cstring>

#include "crossmod/code_memory.hpp"
#include "crossmod/testsupport/site_code.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"

namespace crossmod {
namespace {

using IntFn = int (*)();

// block: [0] int3 ; mov eax,1 ; ret      [32] mov eax,2 ; ret
struct Code {
  CodeBlock block;
  std::uint8_t* site = nullptr;
  std::uint8_t* target = nullptr;
  Code() {
    EXPECT_EQ(CodeBlock::allocate(4096, nullptr, &block), Status::ok);
    std::memset(block.data(), x86::kInvalid64, block.size());
    site = block.data();
    target = block.data() + 32;
    const std::uint8_t one[6] = {testsupport::kMovEaxImm32, 1, 0, 0, 0, x86::kRet};
    const std::uint8_t two[6] = {testsupport::kMovEaxImm32, 2, 0, 0, 0, x86::kRet};
    std::memcpy(site + 1, one, sizeof one);
    std::memcpy(target, two, sizeof two);
    site[0] = x86::kInt3;
  }
  IntFn fn() const { return reinterpret_cast<IntFn>(site); }
};

TEST(TrapRedirect, RedirectsToTargetAndCounts) {
  ASSERT_EQ(trap::install(), Status::ok);
  Code c;
  const auto from = reinterpret_cast<std::uintptr_t>(c.site);
  ASSERT_EQ(trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)), Status::ok);
  EXPECT_EQ(trap::redirect_target(from), reinterpret_cast<std::uintptr_t>(c.target));
  const auto before = trap::redirect_stats();
  EXPECT_EQ(c.fn()(), 2);
  EXPECT_EQ(c.fn()(), 2);
  EXPECT_EQ(trap::redirect_stats().redirected, before.redirected + 2);
}

TEST(TrapRedirect, RetargetTakesEffect) {
  ASSERT_EQ(trap::install(), Status::ok);
  Code c;
  const auto from = reinterpret_cast<std::uintptr_t>(c.site);
  ASSERT_EQ(trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)), Status::ok);
  EXPECT_EQ(c.fn()(), 2);
  // Retarget to the `mov eax,1; ret` right after the int3.
  ASSERT_EQ(trap::redirect_set(from, from + 1), Status::ok);
  EXPECT_EQ(c.fn()(), 1);
}

// After clear the slot keeps its address (clear again is ok, not not_found), and once the
// original byte is back the code runs without trapping. (The re-execute path itself needs a
// trap fetched before the restore; the tracepoint stress test exercises it.)
TEST(TrapRedirect, ClearKeepsSlotAndRestoredCodeRuns) {
  ASSERT_EQ(trap::install(), Status::ok);
  Code c;
  const auto from = reinterpret_cast<std::uintptr_t>(c.site);
  ASSERT_EQ(trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)), Status::ok);
  ASSERT_EQ(trap::redirect_clear(from), Status::ok);
  EXPECT_EQ(trap::redirect_target(from), 0u);
  EXPECT_EQ(trap::redirect_clear(from), Status::ok);
  const auto before = trap::redirect_stats();
  c.site[0] = 0x90;  // NOP: the int3 is gone
  EXPECT_EQ(c.fn()(), 1);
  EXPECT_EQ(trap::redirect_stats().redirected, before.redirected);
}

TEST(TrapRedirect, RejectsNullAndUnknown) {
  EXPECT_EQ(trap::redirect_set(0, 1), Status::bad_address);
  EXPECT_EQ(trap::redirect_set(1, 0), Status::bad_address);
  EXPECT_EQ(trap::redirect_clear(0x12345), Status::not_found);
  EXPECT_EQ(trap::redirect_target(0x12345), 0u);
}

// Capacity: the redirects of 40,000 tracepoints of 3 replaced instructions each, laid out
// like code (a function every 64 bytes, boundaries 0, 2 and 5 bytes in), all fit and are
// found again. The table of 2^16 slots (until 25 Nov) held ~25,000 such tracepoints:
// java under --trace '*' installs more. Registration only (no int3 is written).
TEST(TrapRedirect, HoldsOneHundredTwentyThousandRedirects) {
  constexpr std::uintptr_t kBase = 0x7e0000000000;
  std::size_t ok = 0;
  for (std::uintptr_t f = 0; f < 40000; ++f)
    for (const std::uintptr_t at : {0, 2, 5}) {
      const std::uintptr_t a = kBase + f * 64 + at;
      ok += trap::redirect_set(a, a + 0x1000) == Status::ok;
    }
  EXPECT_EQ(ok, 120000u);
  for (std::uintptr_t f = 0; f < 40000; f += 997) EXPECT_EQ(trap::redirect_target(kBase + f * 64 + 5), kBase + f * 64 + 5 + 0x1000);
}

// An address looks at most kRedirectProbe slots from its hash: one 16 KiB of code whose
// every byte is a redirect (more than any code has) runs out of slots there, with table_full
// long before the table is full, and other code still gets its slots. (Unbounded, the
// probe ran on through the whole table: a full table cost ~190,000 ticks per set and per
// lookup, and java under --trace '*' spent 65% of its CPU toggling.)
TEST(TrapRedirect, ProbesABoundedNeighbourhood) {
  constexpr std::uintptr_t kChunk = 0x7d0000000000;
  std::size_t set = 0;
  Status last = Status::ok;
  for (std::uintptr_t a = kChunk; a < kChunk + 16384 && last == Status::ok; ++a) {
    last = trap::redirect_set(a, a + 0x1000);
    set += last == Status::ok;
  }
  EXPECT_EQ(last, Status::table_full);
  EXPECT_LE(set, trap::kRedirectProbe + 256);
  EXPECT_LT(set, trap::kRedirectSlots / 2);
  const std::uintptr_t elsewhere = kChunk + (std::uintptr_t{1} << 30);
  EXPECT_EQ(trap::redirect_set(elsewhere, elsewhere + 1), Status::ok);
  EXPECT_EQ(trap::redirect_target(elsewhere), elsewhere + 1);
}

// A cleared site that still holds int3 is not ours any more: chained to the previous
// disposition (SIG_DFL here, so the child dies of SIGTRAP).
TEST(TrapRedirectDeathTest, ClearedSiteStillInt3IsChained) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (trap::install() != Status::ok) _exit(3);
        Code c;
        const auto from = reinterpret_cast<std::uintptr_t>(c.site);
        if (trap::redirect_set(from, reinterpret_cast<std::uintptr_t>(c.target)) != Status::ok)
          _exit(4);
        if (c.fn()() != 2) _exit(5);
        if (trap::redirect_clear(from) != Status::ok) _exit(6);
        c.fn()();
        _exit(0);
      },
      testing::KilledBySignal(SIGTRAP), "");
}

}  // namespace
}  // namespace crossmod
