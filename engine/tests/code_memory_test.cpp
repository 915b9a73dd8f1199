// Code memory: CodeBlock placement within rel32 reach, WritableRange protection changes
// and restoration, the writable registry, rel32 range checks.
#include "crossmod/code_memory.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace crossmod {
namespace {

constexpr std::uintptr_t kReach = (std::uintptr_t{1} << 31) - (std::uintptr_t{1} << 16);

// The "rwxp" field of the /proc/self/maps line covering addr, "" if unmapped.
std::string perms_of(const void* addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  while (std::getline(maps, line)) {
    unsigned long b = 0, e = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &b, &e, perms) == 3 && a >= b && a < e)
      return perms;
  }
  return "";
}

std::uintptr_t distance(std::uintptr_t a, std::uintptr_t b) { return a > b ? a - b : b - a; }

TEST(CodeMemory, Rel32Reachable) {
  const std::uintptr_t ip = std::uintptr_t{1} << 40;
  EXPECT_TRUE(rel32_reachable(ip, ip));
  EXPECT_TRUE(rel32_reachable(ip, ip + INT32_MAX));
  EXPECT_FALSE(rel32_reachable(ip, ip + std::uintptr_t{INT32_MAX} + 1));
  EXPECT_TRUE(rel32_reachable(ip, ip - (std::uintptr_t{1} << 31)));
  EXPECT_FALSE(rel32_reachable(ip, ip - (std::uintptr_t{1} << 31) - 1));
  EXPECT_FALSE(rel32_reachable(ip, ip + (std::uintptr_t{3} << 30)));
}

TEST(CodeMemory, BlockIsRegisteredForItsLifetime) {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  {
    CodeBlock block;
    ASSERT_EQ(CodeBlock::allocate(100, nullptr, &block), Status::ok);
    data = block.data();
    size = block.size();
    EXPECT_EQ(size % static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), 0u);
    EXPECT_GE(size, 100u);
    EXPECT_EQ(perms_of(data), "rwxp");
    EXPECT_TRUE(is_writable(data, size));
    EXPECT_TRUE(is_writable(data + size - 8, 8));
    EXPECT_FALSE(is_writable(data + size - 4, 8)) << "range runs past the block";
    EXPECT_FALSE(is_writable(data - 1, 2));
    // Moves transfer ownership and registration.
    CodeBlock moved(std::move(block));
    EXPECT_EQ(moved.data(), data);
    EXPECT_EQ(block.size(), 0u);
    EXPECT_TRUE(is_writable(data, 8));
  }
  EXPECT_FALSE(is_writable(data, 8));
  EXPECT_EQ(perms_of(data), "");
  CodeBlock empty;
  EXPECT_EQ(CodeBlock::allocate(0, nullptr, &empty), Status::bad_length);
  EXPECT_FALSE(is_writable(nullptr, 1));
}

void expect_near(const void* near) {
  CodeBlock block;
  ASSERT_EQ(CodeBlock::allocate(3 * 4096, near, &block), Status::ok);
  const auto n = reinterpret_cast<std::uintptr_t>(near);
  const auto b = reinterpret_cast<std::uintptr_t>(block.data());
  EXPECT_LE(distance(b, n), kReach);
  EXPECT_LE(distance(b + block.size() - 1, n), kReach);
  EXPECT_TRUE(rel32_reachable(n + 5, b));
  EXPECT_TRUE(rel32_reachable(n + 5, b + block.size() - 1));
  EXPECT_TRUE(is_writable(block.data(), block.size()));
}

TEST(CodeMemory, NearBlocksAreInRel32Reach) {
  // Near the executable's text, near the heap, near an mmap region, near a low address.
  expect_near(reinterpret_cast<const void*>(&expect_near));
  // Near the heap only when a hole exists there: under ASan the heap lies in a multi-TiB
  // reservation with no hole within +-2 GiB, and out_of_range is then the right answer.
  auto heap = std::make_unique<int>(1);
  CodeBlock probe;
  const Status s = CodeBlock::allocate(4096, heap.get(), &probe);
  EXPECT_TRUE(s == Status::ok || s == Status::out_of_range) << to_string(s);
  if (s == Status::ok) expect_near(heap.get());
  CodeBlock anywhere;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &anywhere), Status::ok);
  expect_near(anywhere.data());
  expect_near(reinterpret_cast<const void*>(std::uintptr_t{1} << 24));
}

TEST(CodeMemory, NoHoleInReachIsOutOfRange) {
  // Reserve 5 GiB (PROT_NONE, no backing): nothing within +-2 GiB of its middle is free.
  const std::size_t len = std::size_t{5} << 30;
  void* res = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(res, MAP_FAILED);
  const auto* middle = static_cast<const std::uint8_t*>(res) + len / 2;
  CodeBlock block;
  EXPECT_EQ(CodeBlock::allocate(4096, middle, &block), Status::out_of_range);
  EXPECT_EQ(block.size(), 0u);
  munmap(res, len);
}

TEST(CodeMemory, ManyNearBlocksStayInReach) {
  std::vector<CodeBlock> blocks(64);
  const auto n = reinterpret_cast<std::uintptr_t>(&expect_near);
  for (auto& b : blocks) {
    ASSERT_EQ(CodeBlock::allocate(4096, reinterpret_cast<const void*>(n), &b), Status::ok);
    EXPECT_LE(distance(reinterpret_cast<std::uintptr_t>(b.data()), n), kReach);
  }
}

TEST(CodeMemory, WritableRangeChangesAndRestoresProtection) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 2 * page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* p = static_cast<std::uint8_t*>(mem);
  EXPECT_EQ(perms_of(p), "r-xp");
  EXPECT_FALSE(is_writable(p + 10, 5));
  {
    WritableRange range;
    ASSERT_EQ(WritableRange::make(p + 10, page, &range), Status::ok);  // spans both pages
    EXPECT_TRUE(range.valid());
    EXPECT_EQ(perms_of(p), "rwxp");
    EXPECT_EQ(perms_of(p + page), "rwxp");
    EXPECT_TRUE(is_writable(p + 10, 5));
    EXPECT_TRUE(is_writable(p, 2 * page)) << "whole pages are registered";
    p[10] = 0xC3;
    WritableRange moved;
    moved = std::move(range);
    EXPECT_FALSE(range.valid());
    EXPECT_TRUE(is_writable(p + 10, 5));
    std::error_code ec;
    EXPECT_EQ(moved.restore(&ec), Status::ok) << ec.message();
    EXPECT_EQ(moved.restore(&ec), Status::ok) << "idempotent";
    EXPECT_EQ(perms_of(p), "r-xp");
    EXPECT_FALSE(is_writable(p + 10, 5));
  }
  {
    // The destructor restores too.
    WritableRange range;
    ASSERT_EQ(WritableRange::make(p, 1, &range), Status::ok);
    EXPECT_EQ(perms_of(p), "rwxp");
  }
  EXPECT_EQ(perms_of(p), "r-xp");
  EXPECT_EQ(p[10], 0xC3);
  munmap(mem, 2 * page);
}

TEST(CodeMemory, WritableRangeRefusesMixedOrMissingMappings) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  void* mem = mmap(nullptr, 3 * page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* p = static_cast<std::uint8_t*>(mem);
  ASSERT_EQ(mprotect(p + page, page, PROT_READ), 0);
  ASSERT_EQ(munmap(p + 2 * page, page), 0);
  WritableRange range;
  EXPECT_EQ(WritableRange::make(p, 2 * page, &range), Status::bad_address) << "r-x then r--";
  EXPECT_EQ(WritableRange::make(p + page, 2 * page, &range), Status::bad_address)
      << "runs into an unmapped page";
  EXPECT_EQ(WritableRange::make(p + 2 * page, 1, &range), Status::bad_address) << "unmapped";
  EXPECT_EQ(WritableRange::make(nullptr, 1, &range), Status::bad_address);
  EXPECT_EQ(WritableRange::make(p, 0, &range), Status::bad_length);
  EXPECT_FALSE(range.valid());
  EXPECT_EQ(perms_of(p), "r-xp");
  EXPECT_EQ(perms_of(p + page), "r--p");
  munmap(mem, 2 * page);
}

}  // namespace
}  // namespace crossmod
