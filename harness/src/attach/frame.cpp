// Region image and stub frame for live attach (see frame.hpp and stub_layout.h).
// Thread safety: pure; allocates.
#include "attach/frame.hpp"

#include <cpuid.h>

#include <algorithm>
#include <cstring>

#include "attach/stub_layout.h"

extern "C" const unsigned char crossmod_attach_blob_begin[];
extern "C" const unsigned char crossmod_attach_blob_end[];

namespace crossmod::harness::attach {

namespace {

constexpr std::size_t kPage = 4096;
// pthread_create's deepest call chain (clone, mmap, calloc for the DTV) plus one signal
// frame with its xsave area that a handler may push while the stub runs: generous.
constexpr std::size_t kCallReserve = 32 * 1024;
constexpr std::uint64_t kAmxTileComponents = (1ULL << 17) | (1ULL << 18);

void put64(std::vector<std::uint8_t>* v, std::size_t off, std::uint64_t x) {
  std::memcpy(v->data() + off, &x, sizeof x);
}

std::uint64_t xgetbv0() {
  std::uint32_t lo = 0, hi = 0;
  asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t{hi} << 32) | lo;
}

}  // namespace

std::span<const std::uint8_t> stub_blob() {
  return {crossmod_attach_blob_begin,
          static_cast<std::size_t>(crossmod_attach_blob_end - crossmod_attach_blob_begin)};
}

XsaveInfo xsave_info() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0) return {};
  if (__get_cpuid_count(0xd, 0, &a, &b, &c, &d) == 0 || b < 576) return {};
  return {xgetbv0() & ~kAmxTileComponents, b};
}

std::vector<std::uint8_t> region_image(std::uintptr_t region, std::uint64_t cookie,
                                       const LoaderAddrs& a, int dlopen_flags,
                                       const RegionStrings& s) {
  std::vector<std::uint8_t> v(ATTACH_R_STRINGS, 0);
  put64(&v, ATTACH_R_MAGIC, cookie);
  put64(&v, ATTACH_R_DLOPEN, a.dlopen);
  put64(&v, ATTACH_R_DLSYM, a.dlsym);
  put64(&v, ATTACH_R_DLERROR, a.dlerror);
  put64(&v, ATTACH_R_DLOPEN_FLAGS, static_cast<std::uint32_t>(dlopen_flags));
  const std::size_t fields[] = {ATTACH_R_PATH, ATTACH_R_ENTRY_NAME, ATTACH_R_ARG};
  const std::string_view strings[] = {s.path, s.entry, s.arg};
  for (int i = 0; i < 3; ++i) {
    put64(&v, fields[i], region + v.size());
    v.insert(v.end(), strings[i].begin(), strings[i].end());
    v.push_back(0);
  }
  v.resize((v.size() + 15) & ~std::size_t{15}, 0);
  return v;
}

std::size_t region_size(std::size_t image_bytes) {
  return (image_bytes + kPage - 1) & ~(kPage - 1);
}

Frame build_frame(const FrameInput& in) {
  const std::uintptr_t s = in.sp;
  const std::uintptr_t resume_slot = s - ATTACH_RESUME_BELOW;
  const std::uintptr_t state_slot = s - ATTACH_STATE_BELOW;
  const std::size_t image = (in.image.size() + 15) & ~std::size_t{15};
  Frame f;
  f.rsp = (resume_slot - image - ATTACH_HEADER_SIZE) & ~std::uintptr_t{15};
  f.bytes.assign(s - ATTACH_RED_ZONE - f.rsp, 0);
  put64(&f.bytes, ATTACH_H_RESUME_SLOT, resume_slot);
  put64(&f.bytes, ATTACH_H_RESUME_RAX, in.resume.rax);
  put64(&f.bytes, ATTACH_H_STATE_ADDR, state_slot);
  put64(&f.bytes, ATTACH_H_HINT, in.region);
  put64(&f.bytes, ATTACH_H_REGION_SIZE, in.region_size);
  put64(&f.bytes, ATTACH_H_IMAGE_SIZE, in.image.size());
  put64(&f.bytes, ATTACH_H_PTHREAD_CREATE, in.addrs.pthread_create);
  put64(&f.bytes, ATTACH_H_PTHREAD_DETACH, in.addrs.pthread_detach);
  put64(&f.bytes, ATTACH_H_XSAVE_SIZE, in.xsave.size);
  put64(&f.bytes, ATTACH_H_XSAVE_MASK, in.xsave.mask);
  std::copy(in.image.begin(), in.image.end(), f.bytes.begin() + ATTACH_HEADER_SIZE);
  put64(&f.bytes, resume_slot - f.rsp, in.resume.rip);
  put64(&f.bytes, state_slot - f.rsp, ATTACH_STACK_PENDING);
  // Below rsp: the saved registers, the 64-aligned save area, scratch, then calls.
  f.stack_needed = (s - f.rsp) + ATTACH_SAVED_BYTES + in.xsave.size + 64 + 32 + kCallReserve;
  return f;
}

}  // namespace crossmod::harness::attach
