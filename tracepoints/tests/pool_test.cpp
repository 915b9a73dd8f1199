// Constrained trampoline allocation: the rel32 search primitives against brute force, and
// reserve() for every boundary pattern: the jump's rel32 holds 0xCC at every boundary and
// reaches the entry, which is the body (after a pad NOP) or jumps to it.
#include "pool.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "encoding.hpp"
#include "test_code.hpp"

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

// The pad NOP (0..7 bytes) at a direct body's entry: one instruction, ending at the body.
void expect_pad(const detail::Reservation& r) {
  const auto body = reinterpret_cast<std::uintptr_t>(r.body);
  ASSERT_EQ(body % 8, 0u);
  ASSERT_GE(body, r.entry);
  ASSERT_LT(body - r.entry, 8u);
  ASSERT_EQ(body - r.entry, (0 - r.entry) & 7);
  const std::size_t pad = body - r.entry;
  EXPECT_EQ(std::memcmp(reinterpret_cast<const void*>(r.entry), test::kSdmNops[pad], pad), 0);
}

// A code address no other call returned, 64 KiB from the others, in a block never
// unmapped (the pool never frees either): with all four rel32 bytes fixed one address
// qualifies, and a body (up to a page long) reserved for one pattern may hold the address
// another pattern at a nearby code address needs (as for neighbouring real functions).
std::uintptr_t test_code_addr() {
  static CodeBlock* block = [] {
    auto* b = new CodeBlock;
    if (CodeBlock::allocate(std::size_t{8} << 20, nullptr, b) != crossmod::Status::ok) {
      delete b;
      return static_cast<CodeBlock*>(nullptr);
    }
    return b;
  }();
  static std::uintptr_t next = 0;
  if (block == nullptr || next >= (std::size_t{8} << 20)) return 0;
  next += std::uintptr_t{1} << 16;
  return reinterpret_cast<std::uintptr_t>(block->data()) + next - (std::uintptr_t{1} << 16) + 0x40;
}

// A real code address: every boundary pattern gets an entry satisfying its constraint.
TEST(Pool, EveryBoundaryPatternIsSatisfied) {
  const PoolStats before = pool_stats();
  std::size_t direct = 0;
  for (unsigned m = 0; m < 16; ++m) {
    const std::uintptr_t addr = test_code_addr();
    ASSERT_NE(addr, 0u);
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
    const auto* e = reinterpret_cast<const std::uint8_t*>(r.entry);
    if (r.direct) {  // the body at the entry, after its pad
      ++direct;
      EXPECT_EQ(r.entry_len, 0u);
      expect_pad(r);
      continue;
    }
    // The entry jumps to the 16-byte-aligned body.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.body) % 16, 0u);
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
  // Fresh code addresses in an otherwise unmapped neighbourhood: room for every body.
  EXPECT_EQ(direct, 16u);
  EXPECT_EQ(after.direct_bodies - before.direct_bodies, 16u);
  EXPECT_GE(after.entry_pages, 1u);
  EXPECT_GE(after.entry_pages * 4096, after.entry_bytes_used + after.direct_body_bytes);
  EXPECT_GE(after.body_bytes_mapped, after.body_bytes_used);
  EXPECT_EQ(after.body_bytes_used, before.body_bytes_used);  // no arena bytes
}

// Where no page can hold the body at the constrained address, the entry-slot scheme
// does: all four rel32 bytes fixed (one address qualifies) and that address 10 bytes
// before its page's end, so a 5-byte entry fits and no body does.
TEST(Pool, EntrySlotWhenNoBodyFits) {
  const std::uint8_t mask = 0x1E;
  const RelConstraint c = RelConstraint::from_boundaries(mask);
  const std::int64_t rel = static_cast<std::int64_t>(c.value) - (std::int64_t{1} << 31);
  std::uintptr_t addr = test_code_addr();
  ASSERT_NE(addr, 0u);
  const std::uintptr_t e0 = addr + 5 + static_cast<std::uintptr_t>(rel);
  addr += ((4096 - 10) - (e0 & 4095)) & 4095;  // within its 64 KiB: moved by < 4 KiB
  const std::uintptr_t e = addr + 5 + static_cast<std::uintptr_t>(rel);
  ASSERT_EQ(e & 4095, 4096u - 10);
  const PoolStats before = pool_stats();
  detail::Reservation r;
  ASSERT_EQ(detail::reserve(addr, mask, 64, true, &r, nullptr), Status::ok);
  EXPECT_FALSE(r.direct);
  EXPECT_EQ(r.entry, e);
  ASSERT_EQ(r.entry_len, 5u);
  const auto* p = reinterpret_cast<const std::uint8_t*>(e);
  ASSERT_EQ(p[0], enc::kJmpRel32);
  std::int32_t d;
  std::memcpy(&d, p + 1, 4);
  EXPECT_EQ(e + 5 + static_cast<std::uintptr_t>(static_cast<std::int64_t>(d)),
            reinterpret_cast<std::uintptr_t>(r.body));
  const PoolStats after = pool_stats();
  EXPECT_EQ(after.direct_bodies, before.direct_bodies);
  EXPECT_EQ(after.entry_bytes_used - before.entry_bytes_used, 5u);
  // 4000 bytes lower, the pattern's one address is in the same (now mapped) page, with
  // room for the body: direct.
  ASSERT_EQ(detail::reserve(addr - 4000, mask, 64, true, &r, nullptr), Status::ok);
  EXPECT_TRUE(r.direct);
  EXPECT_EQ(r.entry, e - 4000);
  expect_pad(r);
}

// trim_body() gives a direct body's unused tail back to its entry page: the accounting
// drops, the bytes are int3 again and free for a later slot.
TEST(Pool, TrimReleasesDirectTail) {
  const std::uintptr_t addr = test_code_addr();
  ASSERT_NE(addr, 0u);
  detail::Reservation r;
  ASSERT_EQ(detail::reserve(addr, 1u << 1, 512, true, &r, nullptr), Status::ok);
  ASSERT_TRUE(r.direct);
  std::memset(r.body, 0x90, 512);  // as if relocation had written all of it
  EXPECT_TRUE(detail::entry_page_byte_used(reinterpret_cast<std::uintptr_t>(r.body) + 511));
  const PoolStats s0 = pool_stats();
  detail::trim_body(r.body, 512, 100);  // keeps 112 (16-byte granules)
  const PoolStats s1 = pool_stats();
  EXPECT_EQ(s0.body_bytes_used, s1.body_bytes_used);
  EXPECT_EQ(s0.direct_body_bytes - s1.direct_body_bytes, 400u);
  for (std::size_t i = 0; i < 512; ++i) ASSERT_EQ(r.body[i], i < 112 ? 0x90 : 0xCC) << i;
  // The entry page's bytes: the kept ones still held, the tail free for later slots.
  const auto b = reinterpret_cast<std::uintptr_t>(r.body);
  EXPECT_TRUE(detail::entry_page_byte_used(r.entry));
  EXPECT_TRUE(detail::entry_page_byte_used(b + 111));
  EXPECT_FALSE(detail::entry_page_byte_used(b + 112));
  EXPECT_FALSE(detail::entry_page_byte_used(b + 511));
}

// Trampolines for the unconstrained and the one-byte-constrained patterns pack into
// already-mapped entry pages instead of one page each. They are direct bodies (64 bytes
// and a pad of up to 7) where a page has room: 108 of them need at most
// ceil(108 * 71 / 4096) = 2 pages beyond the first one's, plus one for a page whose tail
// is too short for the next body. (The bound was pages + 1 with 5-byte entry slots; with
// one page per trampoline it would be pages + 108.)
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
  EXPECT_LE(pool_stats().entry_pages, pages + 3);
}


// Many reservations of mixed lengths and boundary patterns near one function: no two
// overlap, and the pool holds every byte of each as used (the page occupancy is kept in
// 64-bit words and searched by ranges: this is its check).
TEST(Pool, ReservationsNeverOverlap) {
  CodeBlock code;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &code), crossmod::Status::ok);
  const auto addr = reinterpret_cast<std::uintptr_t>(code.data());
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> ranges;  // [begin, end)
  for (unsigned i = 0; i < 1500; ++i) {
    const auto mask = static_cast<std::uint8_t>((i % 4) << 1);
    const std::size_t len = 32 + (i * 37) % 200;
    detail::Reservation r;
    ASSERT_EQ(detail::reserve(addr + (i % 64), mask, len, true, &r, nullptr), Status::ok) << i;
    if (r.direct) {
      ranges.emplace_back(r.entry, reinterpret_cast<std::uintptr_t>(r.body) + ((len + 15) & ~std::size_t{15}));
    } else {
      ranges.emplace_back(r.entry, r.entry + r.entry_len);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const auto [b, e] = ranges[k];
    ASSERT_LT(b, e);
    if (k + 1 < ranges.size()) {
      ASSERT_LE(e, ranges[k + 1].first) << k;
    }
    EXPECT_TRUE(detail::entry_page_byte_used(b)) << k;
    EXPECT_TRUE(detail::entry_page_byte_used(e - 1)) << k;
  }
}

// reserve() keeps its snapshot of /proc/self/maps across reservations (python3 with 'Py*'
// read it 414 times, most of the tracepoint start-up cost): 16 functions 4 KiB apart, each
// needing an entry page of its own, cost at most a few reads (the first, and one per
// collision with a mapping made since), not one each.
TEST(Pool, MapsAreNotReadPerNewPage) {
  CodeBlock code;
  ASSERT_EQ(CodeBlock::allocate(std::size_t{1} << 20, nullptr, &code), crossmod::Status::ok);
  const auto mid = reinterpret_cast<std::uintptr_t>(code.data()) + (std::size_t{1} << 19);
  const std::size_t reads0 = detail::maps_reads();
  const std::size_t pages0 = pool_stats().entry_pages;
  for (std::uintptr_t i = 0; i < 16; ++i) {
    detail::Reservation r;
    ASSERT_EQ(detail::reserve(mid + i * 4096, 1u << 2, 64, true, &r, nullptr), Status::ok) << i;
    std::uint8_t jump[5];
    ASSERT_TRUE(enc::jmp_rel32(jump, mid + i * 4096, r.entry));
    EXPECT_EQ(jump[2], 0xCC) << i;
  }
  EXPECT_GE(pool_stats().entry_pages - pages0, 8u);  // the test needs new pages to mean anything
  EXPECT_LE(detail::maps_reads() - reads0, 3u);
}

// A mapping made after the snapshot, where the pool wants its next entry page: the
// reservation still succeeds, elsewhere, and the mapping is left alone (the mmap never
// clobbers; the collision refreshes the snapshot once).
TEST(Pool, StaleSnapshotNeverClobbers) {
  CodeBlock code;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &code), crossmod::Status::ok);
  const auto base = reinterpret_cast<std::uintptr_t>(code.data());
  detail::Reservation warm;  // leaves the snapshot valid (its entry is ~816 MiB below)
  ASSERT_EQ(detail::reserve(base, 1u << 4, 64, true, &warm, nullptr), Status::ok);
  // Bytes 1 and 2 of rel fixed: 256-byte windows 16 MiB apart. Occupy the pages of the
  // two nearest windows above and below the function with our own mappings (moving the
  // function 1 MiB at a time until some are free: other tests, or a sanitizer's
  // allocator, may have mapped them already).
  const std::uint8_t mask = (1u << 2) | (1u << 3);
  const RelConstraint c = RelConstraint::from_boundaries(mask);
  const std::uint64_t zero = std::uint64_t{1} << 31;  // s of rel 0
  std::uintptr_t f = 0, next_ip = 0;
  std::vector<std::uintptr_t> mine;
  for (std::uintptr_t k = 0; k < 256 && mine.empty(); ++k) {
    f = base + 64 + (k << 20);
    next_ip = f + 5;
    std::vector<std::uintptr_t> windows;
    std::uint64_t up = zero, down = zero - 1;
    for (int w = 0; w < 2; ++w) {
      up = next_ge(up, c.mask, c.value);
      down = prev_le(down, c.mask, c.value);
      ASSERT_NE(up, kNone);
      ASSERT_NE(down, kNone);
      windows.push_back(next_ip + static_cast<std::uintptr_t>(static_cast<std::int64_t>(up) - (std::int64_t{1} << 31)));
      windows.push_back(next_ip + static_cast<std::uintptr_t>(static_cast<std::int64_t>(down) - (std::int64_t{1} << 31) - 255));
      up += 256;
      down -= 256;
    }
    for (std::uintptr_t w : windows)
      for (std::uintptr_t pg = w & ~std::uintptr_t{4095}; pg < w + 256; pg += 4096) {
        void* m = mmap(reinterpret_cast<void*>(pg), 4096, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (m == MAP_FAILED) continue;
        if (m != reinterpret_cast<void*>(pg)) {
          munmap(m, 4096);
          continue;
        }
        std::memset(m, 0x5A, 4096);
        mine.push_back(pg);
      }
  }
  ASSERT_FALSE(mine.empty());
  const std::size_t reads0 = detail::maps_reads();
  detail::Reservation r;
  ASSERT_EQ(detail::reserve(f, mask, 64, true, &r, nullptr), Status::ok);
  EXPECT_LE(detail::maps_reads() - reads0, 1u);
  EXPECT_TRUE(c.ok(static_cast<std::int64_t>(r.entry - next_ip)));
  for (std::uintptr_t pg : mine) {
    EXPECT_FALSE(r.entry >= pg && r.entry < pg + 4096);
    const auto* b = reinterpret_cast<const std::uint8_t*>(pg);
    for (std::size_t i = 0; i < 4096; ++i) ASSERT_EQ(b[i], 0x5A) << std::hex << pg + i;
    munmap(reinterpret_cast<void*>(pg), 4096);
  }
}


// entry_possible() agrees with what the search finds, for every boundary pattern, at a
// low address (where patterns fixing byte 4 point below address 0) and at a high one.
TEST(Pool, EntryPossibleAgreesWithReserve) {
  std::size_t impossible = 0;
  for (bool low : {true, false}) {
    for (unsigned m = 0; m < 16; ++m) {
      // High: a fresh code address per pattern (test_code_addr).
      const std::uintptr_t addr = low ? std::uintptr_t{0x20000000} + 0x123 : test_code_addr();
      ASSERT_NE(addr, 0u);
      const auto mask = static_cast<std::uint8_t>(m << 1);
      detail::Reservation r;
      const Status s = detail::reserve(addr, mask, 64, true, &r, nullptr);
      EXPECT_EQ(detail::entry_possible(addr, mask), s == Status::ok) << std::hex << addr << " mask " << m;
      if (s != Status::ok) {
        EXPECT_EQ(s, Status::no_trampoline_space);
      }
      impossible += !detail::entry_possible(addr, mask);
    }
  }
  EXPECT_EQ(impossible, 8u);  // the low address, every pattern with byte 4 fixed
}

// A jump with p 0x2E prefixes has its rel32 at offsets p+1..p+4: the boundaries shift
// down by p; a boundary on a prefix or the opcode, or past the rel32, has no mask.
TEST(Prefix, MaskShiftsBoundaries) {
  std::uint8_t m = 0xFF;
  ASSERT_TRUE(detail::prefixed_mask(1u << 4, 0, &m));
  EXPECT_EQ(m, 1u << 4);
  ASSERT_TRUE(detail::prefixed_mask(1u << 4, 1, &m));
  EXPECT_EQ(m, 1u << 3);
  ASSERT_TRUE(detail::prefixed_mask((1u << 4) | (1u << 5) | (1u << 6), 3, &m));
  EXPECT_EQ(m, (1u << 1) | (1u << 2) | (1u << 3));
  ASSERT_TRUE(detail::prefixed_mask((1u << 4) | (1u << 7), 3, &m));  // offset 7: rel32 byte 3
  EXPECT_EQ(m, (1u << 1) | (1u << 4));
  EXPECT_FALSE(detail::prefixed_mask(1u << 1, 1, &m));                // on the prefix
  EXPECT_FALSE(detail::prefixed_mask((1u << 2) | (1u << 4), 2, &m));  // on the opcode
  EXPECT_FALSE(detail::prefixed_mask(1u << 3, 3, &m));
  EXPECT_FALSE(detail::prefixed_mask(1u << 5, 0, &m));  // past a 5-byte jump
  EXPECT_FALSE(detail::prefixed_mask(1u << 7, 2, &m));  // past a 7-byte jump
  EXPECT_FALSE(detail::prefixed_mask(0, 4, &m));        // at most 3 prefixes
  // Every prefix and every mask: prefixed_mask accepts exactly the boundaries in
  // p+1..p+4 (kept in bits 1..4 after the shift).
  for (unsigned p = 0; p <= 3; ++p)
    for (unsigned full = 0; full < 256; full += 2) {
      const bool in_rel = (full & ~(0x1Eu << p)) == 0;
      EXPECT_EQ(detail::prefixed_mask(static_cast<std::uint8_t>(full), p, &m), in_rel) << p << " " << full;
      if (in_rel) {
        EXPECT_EQ(unsigned{m} << p, full);
      }
    }
}

// Low in memory (below 832 MiB) a boundary at 4 cannot be served without a prefix, and one
// prefix serves it; a boundary at 1 cannot take any prefix.
TEST(Prefix, EntryPossibleLowInMemory) {
  const std::uintptr_t low = 0x41f000;  // python3.11's non-PIE text
  EXPECT_FALSE(detail::entry_possible_prefixed(low, 1u << 4, 0));
  EXPECT_TRUE(detail::entry_possible_prefixed(low, 1u << 4, 1));
  EXPECT_EQ(detail::entry_possible_prefixed(low, 1u << 4, 0), detail::entry_possible(low, 1u << 4));
  EXPECT_FALSE(detail::entry_possible_prefixed(low, (1u << 1) | (1u << 4), 1));
  EXPECT_FALSE(detail::entry_possible_prefixed(low, (1u << 4) | (1u << 5), 1));  // byte 3 again
  EXPECT_TRUE(detail::entry_possible_prefixed(low, (1u << 4) | (1u << 5), 2));
}

// reserve() at addr + p with the shifted mask yields, for every prefix and every
// boundary pattern the prefix admits, a (5+p)-byte jump with 0xCC at every boundary that
// reaches the entry.
TEST(Prefix, EveryPrefixedPatternIsSatisfied) {
  for (unsigned p = 1; p <= 3; ++p) {
    for (unsigned m = 0; m < 16; ++m) {
      // One code address per p and pattern (test_code_addr).
      const std::uintptr_t addr = test_code_addr();
      ASSERT_NE(addr, 0u);
      const auto full = static_cast<std::uint8_t>((m << 1) << p);
      std::uint8_t rel_mask = 0;
      ASSERT_TRUE(detail::prefixed_mask(full, p, &rel_mask));
      detail::Reservation r;
      ASSERT_EQ(detail::reserve(addr + p, rel_mask, 64, true, &r, nullptr), Status::ok)
          << "p " << p << " mask " << m;
      std::uint8_t jump[8];
      std::memset(jump, enc::kCsPrefix, p);
      ASSERT_TRUE(enc::jmp_rel32(jump + p, addr + p, r.entry));
      std::int32_t rel;
      std::memcpy(&rel, jump + p + 1, 4);
      EXPECT_EQ(addr + 5 + p + static_cast<std::uintptr_t>(static_cast<std::int64_t>(rel)), r.entry);
      for (unsigned b = 1; b < 5 + p; ++b) {
        if ((full & (1u << b)) != 0) {
          EXPECT_EQ(jump[b], 0xCC) << "p " << p << " mask " << m << " byte " << b;
        } else if (b <= p) {
          EXPECT_EQ(jump[b], b < p ? enc::kCsPrefix : enc::kJmpRel32);
        }
      }
    }
  }
}

// entry_possible_prefixed() agrees with what reserve() at addr + p finds, for every p and
// every boundary pattern it admits, at a low address (python3.11-like) where p = 0 with
// rel32 byte 3 fixed is impossible and the same pattern one prefix later is not.
TEST(Prefix, EntryPossibleAgreesWithReserve) {
  const std::uintptr_t addr = std::uintptr_t{0x21000000} + 0x345;
  std::size_t impossible = 0;
  for (unsigned p = 0; p <= 3; ++p) {
    for (unsigned m = 0; m < 16; ++m) {
      const auto full = static_cast<std::uint8_t>((m << 1) << p);
      std::uint8_t rel_mask = 0;
      ASSERT_TRUE(detail::prefixed_mask(full, p, &rel_mask));
      detail::Reservation r;
      const Status s = detail::reserve(addr + p, rel_mask, 64, true, &r, nullptr);
      EXPECT_EQ(detail::entry_possible_prefixed(addr, full, p), s == Status::ok)
          << "p " << p << " mask " << m;
      impossible += s != Status::ok;
    }
  }
  EXPECT_EQ(impossible, 4u * 8u);  // for each p, the 8 patterns fixing rel32 byte 3
}

}  // namespace
}  // namespace crossmod::tp
