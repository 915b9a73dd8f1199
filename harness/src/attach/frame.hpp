// The bytes live attach writes into the target besides the stub's code: the image of
// the region the stub maps (addresses, strings, result fields) and the frame below the
// hijacked thread's red zone (header + image + resume slots), laid out as stub_layout.h
// says. Pure functions of their inputs, so the layout is unit-tested.
// Thread safety: pure (xsave_info reads CPUID); allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "attach/thread_stop.hpp"

namespace crossmod::harness::attach {

// The stub's code as assembled (stub.S), copied verbatim into the target.
std::span<const std::uint8_t> stub_blob();

// Functions of the target's libc the stub and the loader thread call.
struct LoaderAddrs {
  std::uintptr_t dlopen = 0, dlsym = 0, dlerror = 0, pthread_create = 0, pthread_detach = 0;
};

// How the stub saves the extended state on this machine: XSAVE with `mask` (XCR0 less
// the AMX tile components, which glibc never touches and which XFD may fault on) into
// `size` bytes (CPUID.(EAX=0DH,ECX=0):EBX, Intel SDM vol. 1, 13.2), or FXSAVE (mask 0,
// 512 bytes) without OSXSAVE. The target runs on this machine, so its XCR0 is this one.
struct XsaveInfo {
  std::uint64_t mask = 0;
  std::uint64_t size = 512;
};
XsaveInfo xsave_info();

// Longest strings the region carries (bad_request above these).
constexpr std::size_t kMaxPath = 4095, kMaxEntry = 255, kMaxArg = 4095;

struct RegionStrings {
  std::string_view path, entry, arg;
};
// The region's initial content for a region mapped at `region`.
std::vector<std::uint8_t> region_image(std::uintptr_t region, std::uint64_t cookie,
                                       const LoaderAddrs& a, int dlopen_flags,
                                       const RegionStrings& s);
// Page-rounded size of a region holding `image_bytes` of image.
std::size_t region_size(std::size_t image_bytes);

// The frame: `bytes` go at [rsp, S - red zone); the stub starts with that rsp.
struct Frame {
  std::uintptr_t rsp = 0;
  std::vector<std::uint8_t> bytes;
  std::size_t stack_needed = 0;  // bytes below S the stub may touch (calls included)
};
struct FrameInput {
  std::uintptr_t sp = 0;  // S: the thread's rsp at the stop
  ResumePoint resume;
  std::uintptr_t region = 0;
  std::size_t region_size = 0;
  std::span<const std::uint8_t> image;
  LoaderAddrs addrs;
  XsaveInfo xsave;
};
Frame build_frame(const FrameInput& in);

}  // namespace crossmod::harness::attach
