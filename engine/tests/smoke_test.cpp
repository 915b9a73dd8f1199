// First-light checks of every engine module: machine identity, config default, a
// wordpatch and a callpatch round trip on a CodeBlock.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "crossmod/callpatch.hpp"
#include "crossmod/code_memory.hpp"
#include "crossmod/machine.hpp"
#include "crossmod/tmax_config.hpp"
#include "crossmod/wordpatch.hpp"
#include "crossmod/x86.hpp"

namespace crossmod {
namespace {

TEST(Smoke, MachineSlug) {
  const std::string slug = machine_slug();
  EXPECT_FALSE(slug.empty());
  std::printf("slug %s tsc %.0f Hz (%s) line %u\n", slug.c_str(), tsc_info().hz,
              tsc_info().source, x86::cache_line_size());
}

TEST(Smoke, StraddlingPatchAndCall) {
  CodeBlock block;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &block), Status::ok);
  std::uint8_t* site = block.data() + x86::cache_line_size() - 2;  // S = 2
  std::memcpy(site, x86::kNop5.data(), 5);
  WordPatcher wp(WaitPolicy::Ticks(1000));
  ASSERT_EQ(wp.init_status(), Status::ok);
  const std::uint8_t bytes[5] = {1, 2, 3, 4, 5};
  ASSERT_EQ(wp.patch(site, bytes), Status::ok);
  EXPECT_EQ(0, std::memcmp(site, bytes, 5));
  std::array<std::uint8_t, 5> call{};
  ASSERT_EQ(x86::encode_call(reinterpret_cast<std::uintptr_t>(site),
                             reinterpret_cast<std::uintptr_t>(block.data() + 1000), &call),
            Status::ok);
  std::memcpy(site, call.data(), 5);
  CallSite cs;
  ASSERT_EQ(CallSite::prepare(site, block.data() + 1000, &cs), Status::ok);
  ASSERT_EQ(cs.activate(), Status::ok);
  EXPECT_TRUE(cs.active());
  ASSERT_EQ(cs.deactivate(), Status::ok);
  EXPECT_FALSE(cs.active());
}

}  // namespace
}  // namespace crossmod
