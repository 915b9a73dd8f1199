// SiteMap: the registry's address -> probe id map (probes/src/site_map.hpp). Its hash keeps
// the sites of one 16 KiB of code in one page of the table; these tests check that keys
// which share that page, or a cache line of code, still map to their own values.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <unordered_set>
#include <vector>

#include "../src/site_map.hpp"

namespace {

using crossmod::probes::detail::SiteMap;
using Map = SiteMap<16>;

TEST(SiteMap, SitesOfOneRegionShareOneBlock) {
  const std::uintptr_t base = 0x7f12'3456'0000 & ~std::uintptr_t{0x3FFF};
  const std::size_t block = Map::hash(base) >> 8;
  for (std::uintptr_t a = base; a < base + 0x4000; a += 5) EXPECT_EQ(Map::hash(a) >> 8, block) << a;
  // Lines of code a cache line apart take different slots of the block.
  EXPECT_NE(Map::hash(base), Map::hash(base + 64));
}

TEST(SiteMap, DenseKeysInOneLineAndOneRegion) {
  auto m = std::make_unique<Map>();
  const std::uintptr_t base = 0x5555'0000'1000;
  // Every byte of 4 KiB: 64 keys on each slot of the block's first 64, chains running on.
  for (std::uintptr_t a = base; a < base + 4096; ++a) ASSERT_TRUE(m->insert(a, static_cast<std::uint32_t>(a - base)));
  for (std::uintptr_t a = base; a < base + 4096; ++a) EXPECT_EQ(m->find(a), a - base);
  EXPECT_EQ(m->find(base - 1), Map::kAbsent);
  EXPECT_EQ(m->find(base + 4096), Map::kAbsent);
}

TEST(SiteMap, RegionsWithTheSameLowBitsAndRandomKeys) {
  auto m = std::make_unique<Map>();
  std::vector<std::pair<std::uintptr_t, std::uint32_t>> keys;
  // The same offset in 4,096 regions 16 KiB apart, and in regions 4 GiB apart.
  for (std::uint32_t k = 0; k < 4096; ++k) keys.emplace_back(0x4000'0000 + (std::uintptr_t{k} << 14) + 0x40, k);
  for (std::uint32_t k = 0; k < 256; ++k) keys.emplace_back((std::uintptr_t{k + 1} << 32) + 0x40, 10'000 + k);
  // And random ones, to half the table in all (no key twice).
  std::unordered_set<std::uintptr_t> taken;
  for (const auto& [a, v] : keys) taken.insert(a);
  std::mt19937_64 rng(12345);
  while (keys.size() < Map::kSlots / 2) {
    const std::uintptr_t a = rng() & 0x7FFF'FFFF'FFFF;
    if (a != 0 && taken.insert(a).second) keys.emplace_back(a, static_cast<std::uint32_t>(keys.size()));
  }
  for (const auto& [a, v] : keys) ASSERT_TRUE(m->insert(a, v));
  for (const auto& [a, v] : keys) EXPECT_EQ(m->find(a), v) << a;
  EXPECT_EQ(m->find(0x4000'0000 + 0x41), Map::kAbsent);
}

TEST(SiteMap, KeyZeroIsRefusedAndAFullMapSaysSo) {
  auto m = std::make_unique<SiteMap<9>>();  // 512 slots
  EXPECT_FALSE(m->insert(0, 1));
  for (std::uintptr_t a = 1; a <= 512; ++a) ASSERT_TRUE(m->insert(a * 64, static_cast<std::uint32_t>(a)));
  EXPECT_FALSE(m->insert(513 * 64, 513));
  for (std::uintptr_t a = 1; a <= 512; ++a) EXPECT_EQ(m->find(a * 64), a);
}

}  // namespace
