// Constrained trampoline allocation: the rel32 search primitives against brute force, and
// reserve() for every boundary pattern: the jump's rel32 holds 0xCC at every boundary and
// reaches the entry, which jumps to the body.
#include "pool.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "crossmod/code_memory.hpp"
#include "encoding.hpp"

namespace crossmod::tp {
namespace {

using detail::next_ge;
using detail::prev_le;
using detail::RelConstraint;

constexpr std::uint64_t kNone = UINT64_MAX;

bool valid(std::uint64_t s, const RelConstraint& c) { return (s & c.mask) == c.value; }

TEST(RelSearch, ConstraintFromBoundaries) {
  const RelConstraint c = RelConstraint::from_boundaries((1u << 1) | (1u << 3));
  EXPECT_EQ(c.mask, 0x00FF00FFu);
  EXPECT_TRUE(c.ok(static_cast<std::int32_t>(0x00CC00CC)));
  EXPECT_FALSE(c.ok(static_cast<std::int32_t>(0x00CC00CD)));
  const RelConstraint top = RelConstraint::from_boundaries(1u << 4);
  EXPECT_TRUE(top.ok(static_cast<std::int32_t>(0xCC000000u)));  // negative rel
  EXPECT_FALSE(top.ok(0x4C000000));
  EXPECT_FALSE(top.ok(std::int64_t{1} << 31));  // beyond rel32
}

// Brute force over a window: next_ge / prev_le return the nearest valid value.
TEST(RelSearch, MatchesBruteForce) {
  std::mt19937_64 rng(42);
  for (unsigned m = 0; m < 16; ++m) {
    const RelConstraint c = RelConstraint::from_boundaries(static_cast<std::uint8_t>(m << 1));
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t s = rng() & 0xFFFFFFFFu;
      const std::uint64_t n = next_ge(s, c.mask, c.value);
      const std::uint64_t p = prev_le(s, c.mask, c.value);
      if (n != kNone) {
        EXPECT_GE(n, s);
        EXPECT_TRUE(valid(n, c));
        // Nothing valid in between: checked exhaustively when the gap is small, and by
        // the consistency of prev_le otherwise.
        if (n - s < 70000) {
          for (std::uint64_t x = s; x < n; ++x) ASSERT_FALSE(valid(x, c)) << m << " " << x;
        }
        if (n > s) {
          EXPECT_TRUE(prev_le(n - 1, c.mask, c.value) == kNone ||
                      prev_le(n - 1, c.mask, c.value) < s);
        }
      }
      if (p != kNone) {
        EXPECT_LE(p, s);
        EXPECT_TRUE(valid(p, c));
        if (s - p < 70000) {
          for (std::uint64_t x = p + 1; x <= s; ++x) ASSERT_FALSE(valid(x, c)) << m << " " << x;
        }
      }
      EXPECT_FALSE(n == kNone && p == kNone);
    }
  }
  EXPECT_EQ(next_ge(0xFFFFFFFF, 0xFF, 0x00), kNone);
  EXPECT_EQ(prev_le(0, 0xFF, 0x01), kNone);
}

// A real code address: every boundary pattern gets an entry satisfying its constraint.
TEST(Pool, EveryBoundaryPatternIsSatisfied) {
  CodeBlock code;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &code), crossmod::Status::ok);
  const auto addr = reinterpret_cast<std::uintptr_t>(code.data());
  const PoolStats before = pool_stats();
  for (unsigned m = 0; m < 16; ++m) {
    const auto mask = static_cast<std::uint8_t>(m << 1);
    detail::Reservation r;
    ASSERT_EQ(detail::reserve(addr, mask, 256, true, &r, nullptr), Status::ok) << "mask " << m;
    const std::int64_t rel = static_cast<std::int64_t>(r.entry - (addr + 5));
    ASSERT_TRUE(enc::fits_rel32(rel));
    std::uint8_t jump[5];
    ASSERT_TRUE(enc::jmp_rel32(jump, addr, r.entry));
    for (unsigned b = 1; b <= 4; ++b)
      if ((mask & (1u << b)) != 0) {
        EXPECT_EQ(jump[b], 0xCC) << "mask " << m << " byte " << b;
      }
    // The entry jumps to the 16-byte-aligned body.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.body) % 16, 0u);
    const auto* e = reinterpret_cast<const std::uint8_t*>(r.entry);
    if (r.entry_len == 5) {
      ASSERT_EQ(e[0], enc::kJmpRel32);
      std::int32_t d;
      std::memcpy(&d, e + 1, 4);
      EXPECT_EQ(r.entry + 5 + static_cast<std::uintptr_t>(static_cast<std::int64_t>(d)),
                reinterpret_cast<std::uintptr_t>(r.body));
    } else {
      EXPECT_EQ(r.entry_len, 14u);
    }
  }
  const PoolStats after = pool_stats();
  EXPECT_EQ(after.trampolines - before.trampolines, 16u);
  EXPECT_GE(after.entry_pages, 1u);
  EXPECT_GE(after.entry_pages * 4096, after.entry_bytes_used);
  EXPECT_GE(after.body_bytes_mapped, after.body_bytes_used);
}

// Trampolines for the unconstrained and the one-byte-constrained patterns pack into
// already-mapped entry pages instead of one page each.
TEST(Pool, EntriesArePacked) {
  CodeBlock code;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &code), crossmod::Status::ok);
  const auto addr = reinterpret_cast<std::uintptr_t>(code.data());
  detail::Reservation r;
  ASSERT_EQ(detail::reserve(addr, 0, 64, true, &r, nullptr), Status::ok);
  const std::size_t pages = pool_stats().entry_pages;
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(detail::reserve(addr + 16, 0, 64, true, &r, nullptr), Status::ok);
  for (int i = 0; i < 8; ++i)
    ASSERT_EQ(detail::reserve(addr, 1u << 1, 64, true, &r, nullptr), Status::ok);
  EXPECT_LE(pool_stats().entry_pages, pages + 1);
}

}  // namespace
}  // namespace crossmod::tp
