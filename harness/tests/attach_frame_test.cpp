// Live attach's injected bytes: the region image and the stub's frame laid out as
// stub_layout.h says, and the stub's size and extended-state save on this machine.
// Threads: single-threaded.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "attach/frame.hpp"
#include "attach/stub_layout.h"

namespace crossmod::harness::attach {
namespace {

TEST(AttachFrame, RegionImagePointsAtItsStrings) {
  const LoaderAddrs a{0x1, 0x2, 0x3, 0x4, 0x5};
  const std::uintptr_t base = 0x10000000;
  const auto img = region_image(base, 0xfeed, a, 2, {"/lib/x.so", "entry", "arg"});
  ASSERT_GT(img.size(), static_cast<std::size_t>(ATTACH_R_STRINGS));
  EXPECT_EQ(img.size() % 16, 0U);
  auto u64 = [&](std::size_t off) {
    std::uint64_t v;
    std::memcpy(&v, img.data() + off, 8);
    return v;
  };
  EXPECT_EQ(u64(ATTACH_R_MAGIC), 0xfeedU);
  EXPECT_EQ(u64(ATTACH_R_DLOPEN), 0x1U);
  EXPECT_EQ(u64(ATTACH_R_DLERROR), 0x3U);
  EXPECT_EQ(u64(ATTACH_R_DLOPEN_FLAGS), 2U);
  EXPECT_STREQ(reinterpret_cast<const char*>(img.data() + (u64(ATTACH_R_PATH) - base)),
               "/lib/x.so");
  EXPECT_STREQ(reinterpret_cast<const char*>(img.data() + (u64(ATTACH_R_ENTRY_NAME) - base)),
               "entry");
  EXPECT_STREQ(reinterpret_cast<const char*>(img.data() + (u64(ATTACH_R_ARG) - base)), "arg");
  EXPECT_EQ(region_size(img.size()), 4096U);
}

TEST(AttachFrame, FrameKeepsTheRedZoneAndPlacesTheResumeSlots) {
  const std::vector<std::uint8_t> image(100, 0xab);
  FrameInput in;
  in.sp = 0x7ffe00001008;  // 8 mod 16, as inside a function
  in.resume = {0x401234, 0, false, -1};
  in.region = 0x20000000;
  in.region_size = 4096;
  in.image = image;
  in.addrs.pthread_create = 0x7777;
  in.xsave = {0x7, 2696};
  const Frame f = build_frame(in);
  EXPECT_EQ(f.rsp % 16, 0U);
  EXPECT_EQ(f.rsp + f.bytes.size(), in.sp - ATTACH_RED_ZONE);  // nothing in the red zone
  auto at = [&](std::uintptr_t addr) {
    std::uint64_t v;
    std::memcpy(&v, f.bytes.data() + (addr - f.rsp), 8);
    return v;
  };
  EXPECT_EQ(at(f.rsp + ATTACH_H_RESUME_SLOT), in.sp - ATTACH_RESUME_BELOW);
  EXPECT_EQ(at(in.sp - ATTACH_RESUME_BELOW), 0x401234U);
  EXPECT_EQ(at(in.sp - ATTACH_STATE_BELOW), static_cast<std::uint64_t>(ATTACH_STACK_PENDING));
  EXPECT_EQ(at(f.rsp + ATTACH_H_PTHREAD_CREATE), 0x7777U);
  EXPECT_EQ(at(f.rsp + ATTACH_H_XSAVE_SIZE), 2696U);
  EXPECT_EQ(at(f.rsp + ATTACH_H_IMAGE_SIZE), 100U);
  EXPECT_EQ(f.bytes[ATTACH_HEADER_SIZE], 0xab);
  EXPECT_LE(f.rsp + ATTACH_HEADER_SIZE + image.size(), in.sp - ATTACH_RESUME_BELOW);
  EXPECT_GT(f.stack_needed, in.sp - f.rsp + 2696);
}

TEST(AttachFrame, StubIsSmallAndXsaveCoversSse) {
  EXPECT_GT(stub_blob().size(), 64U);
  EXPECT_LT(stub_blob().size(), 1024U);
  const XsaveInfo x = xsave_info();
  if (x.mask != 0) {
    EXPECT_EQ(x.mask & 3, 3U);  // x87 and SSE state
    EXPECT_GE(x.size, 576U);
  } else {
    EXPECT_EQ(x.size, 512U);
  }
}

}  // namespace
}  // namespace crossmod::harness::attach
