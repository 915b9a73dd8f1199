// Hand-assembled functions in fresh code memory for tracepoint tests, each with the bytes
// in a comment and a C++ oracle for its result. The rest of the block is 0x0E (#UD in
// 64-bit mode) so that a wrong jump faults instead of running garbage.
#pragma once
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "crossmod/code_memory.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::tp::test {

using Fn2 = std::uint64_t (*)(std::uint64_t, std::uint64_t);

// What a direct body's pad must be, by length 0..7: the Intel SDM's recommended multi-byte
// NOPs (Vol 2B, NOP), written out here independently of the pool's table.
inline constexpr std::uint8_t kSdmNops[8][7] = {
    {},
    {0x90},
    {0x66, 0x90},
    {0x0F, 0x1F, 0x00},
    {0x0F, 0x1F, 0x40, 0x00},
    {0x0F, 0x1F, 0x44, 0x00, 0x00},
    {0x66, 0x0F, 0x1F, 0x44, 0x00, 0x00},
    {0x0F, 0x1F, 0x80, 0x00, 0x00, 0x00, 0x00}};

struct TestFn {
  std::uint8_t* addr = nullptr;   // where the tracepoint goes
  std::uint8_t* entry = nullptr;  // where callers enter (== addr unless mid-function)
  std::size_t size = 0;           // bytes from addr to the function's end
  Fn2 fn() const { return reinterpret_cast<Fn2>(entry); }
};

class TestCode {
 public:
  TestCode() {
    EXPECT_EQ(CodeBlock::allocate(4096, nullptr, &block_), crossmod::Status::ok);
    std::memset(block_.data(), x86::kInvalid64, block_.size());
    std::uint8_t* b = block_.data();

    // sum(n) = n + (n-1) + ... + 1 for n >= 1. The loop's back edge lands on offset 2, a
    // replaced boundary: every iteration after the first traps and is redirected.
    //   0: 31 C0      xor eax, eax
    //   2: 48 01 F8   add rax, rdi      <- loop head
    //   5: 48 FF CF   dec rdi
    //   8: 75 F8      jnz 2
    //  10: C3         ret
    sum_ = put(b + 0x000, {0x31, 0xC0, 0x48, 0x01, 0xF8, 0x48, 0xFF, 0xCF, 0x75, 0xF8, 0xC3});

    // plus_k(n) = K + n, K read RIP-relative from b + 0x380. Boundaries at 1 and 4 fix
    // rel32 bytes 0 and 3: the entry lies 816..832 MiB below.
    //   0: 55               push rbp
    //   1: 48 89 E5         mov rbp, rsp
    //   4: 48 8B 05 d32     mov rax, [rip + d32]
    //  11: 48 01 F8         add rax, rdi
    //  14: 5D               pop rbp
    //  15: C3               ret
    plus_ = put(b + 0x040, {0x55, 0x48, 0x89, 0xE5, 0x48, 0x8B, 0x05, 0, 0, 0, 0, 0x48, 0x01, 0xF8,
                            0x5D, 0xC3});
    const std::int32_t d = static_cast<std::int32_t>((b + 0x380) - (b + 0x040 + 11));
    std::memcpy(b + 0x040 + 7, &d, 4);
    std::memcpy(b + 0x380, &kK, 8);
    // The same at 0x23D: its jump straddles the line boundary at 0x240 (3 bytes before,
    // 2 after), so installing and removing it takes the int3 protocol with its waits
    // (every other function here starts a line: one in-line store each).
    plus_straddling_ = put(b + 0x23D, {0x55, 0x48, 0x89, 0xE5, 0x48, 0x8B, 0x05, 0, 0, 0, 0, 0x48,
                                       0x01, 0xF8, 0x5D, 0xC3});
    const std::int32_t d2 = static_cast<std::int32_t>((b + 0x380) - (b + 0x23D + 11));
    std::memcpy(b + 0x23D + 7, &d2, 4);

    // twice_plus_one(n) = 2n + 1: a relative call in the replaced range (the callee must
    // return into the original code, at offset 5).
    //   0: E8 rel32       call double      (double at +0x40: lea rax, [rdi+rdi]; ret)
    //   5: 48 83 C0 01    add rax, 1
    //   9: C3             ret
    call_ = put(b + 0x080, {0xE8, 0, 0, 0, 0, 0x48, 0x83, 0xC0, 0x01, 0xC3});
    const std::int32_t c = 0x40 - 5;
    std::memcpy(b + 0x080 + 1, &c, 4);
    put(b + 0x0C0, {0x48, 0x8D, 0x04, 0x3F, 0xC3});

    // inc_nonzero(n) = n == 0 ? 0 : n + 1: a jcc rel8 in the replaced range (boundary 3).
    //   0: 48 85 FF       test rdi, rdi
    //   3: 74 05          je 10
    //   5: 48 8D 47 01    lea rax, [rdi+1]
    //   9: C3             ret
    //  10: 31 C0          xor eax, eax
    //  12: C3             ret
    jcc_ = put(b + 0x100,
               {0x48, 0x85, 0xFF, 0x74, 0x05, 0x48, 0x8D, 0x47, 0x01, 0xC3, 0x31, 0xC0, 0xC3});

    // below(a, b) = b < a: the tracepoint sits mid-function on a 5-byte NOP between the
    // flag-setting cmp and the setb that reads the flags (the probe must preserve RFLAGS).
    //   0: 48 39 FE        cmp rsi, rdi
    //   3: 0F 1F 44 00 00  nop5            <- tracepoint
    //   8: 0F 92 C0        setb al
    //  11: 48 0F B6 C0     movzx rax, al
    //  15: C3              ret
    below_ = put(b + 0x140, {0x48, 0x39, 0xFE, 0x0F, 0x1F, 0x44, 0x00, 0x00, 0x0F, 0x92, 0xC0, 0x48,
                             0x0F, 0xB6, 0xC0, 0xC3});
    below_.addr += 3;
    below_.size -= 3;

    // via_xmm(n) = n through xmm0; the tracepoint on the movq that reads xmm0 back (the
    // probe must preserve xmm0 even if the handler clobbers it).
    //   0: 66 48 0F 6E C7  movq xmm0, rdi
    //   5: 66 48 0F 7E C0  movq rax, xmm0  <- tracepoint
    //  10: C3              ret
    xmm_ = put(b + 0x180, {0x66, 0x48, 0x0F, 0x6E, 0xC7, 0x66, 0x48, 0x0F, 0x7E, 0xC0, 0xC3});
    xmm_.addr += 5;
    xmm_.size -= 5;

    // inc32(n) = (uint32)n + 1 in 4 bytes: too short for the jump, a trap-mode tracepoint.
    //   0: 8D 47 01   lea eax, [rdi+1]
    //   3: C3         ret
    short_ = put(b + 0x1C0, {0x8D, 0x47, 0x01, 0xC3});
  }

  static constexpr std::uint64_t kK = 1000;
  static std::uint64_t sum_oracle(std::uint64_t n) { return n * (n + 1) / 2; }

  const TestFn& sum() const { return sum_; }
  const TestFn& plus() const { return plus_; }
  const TestFn& plus_straddling() const { return plus_straddling_; }
  const TestFn& call() const { return call_; }
  const TestFn& jcc() const { return jcc_; }
  const TestFn& below() const { return below_; }
  const TestFn& xmm() const { return xmm_; }
  const TestFn& shortfn() const { return short_; }

 private:
  static TestFn put(std::uint8_t* at, std::initializer_list<std::uint8_t> bytes) {
    std::memcpy(at, bytes.begin(), bytes.size());
    return TestFn{at, at, bytes.size()};
  }
  CodeBlock block_;
  TestFn sum_, plus_, plus_straddling_, call_, jcc_, below_, xmm_, short_;
};

// A page below 816 MiB (mmap MAP_FIXED_NOREPLACE, first free 1 MiB step from 256 MiB), or
// nullptr. There a boundary at offset 4 would need a rel32 below address 0: the 5-byte
// jump is impossible and a tracepoint needs a 0x2E-prefixed jump.
inline std::uint8_t* map_low(int prot) {
  for (std::uintptr_t at = 0x10000000; at < 0x30000000; at += 0x100000) {
    void* m = mmap(reinterpret_cast<void*>(at), 4096, prot,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (m == reinterpret_cast<void*>(at)) return static_cast<std::uint8_t*>(m);
    if (m != MAP_FAILED) munmap(m, 4096);
  }
  return nullptr;
}

// Hand-assembled functions in a writable low page (map_low): their tracepoints take one
// 0x2E prefix. The rest of the page is 0x0E (#UD).
class LowCode {
 public:
  LowCode() {
    page_ = map_low(PROT_READ | PROT_WRITE | PROT_EXEC);
    if (page_ == nullptr) {
      ADD_FAILURE() << "no free page below 816 MiB";
      return;
    }
    std::memset(page_, x86::kInvalid64, 4096);
    // sum4(n) = n + ... + 1 for n >= 1, the loop head on offset 4 (a replaced boundary,
    // rel32 byte 2 of `2E E9 r0 r1 CC r3`): each iteration after the first traps.
    //   0: 48 83 E0 00   and rax, 0
    //   4: 48 01 F8      add rax, rdi    <- loop head
    //   7: 48 FF CF      dec rdi
    //  10: 75 F8         jnz 4
    //  12: C3            ret
    sum4_ = put(page_ + 0x200, {0x48, 0x83, 0xE0, 0x00, 0x48, 0x01, 0xF8, 0x48, 0xFF, 0xCF, 0x75,
                                0xF8, 0xC3});
    EXPECT_EQ(WritableRange::make(page_, 4096, &range_), crossmod::Status::ok);
  }
  ~LowCode() {
    (void)range_.restore();
    if (page_ != nullptr) munmap(page_, 4096);
  }
  LowCode(const LowCode&) = delete;
  LowCode& operator=(const LowCode&) = delete;

  bool ok() const { return page_ != nullptr; }
  const TestFn& sum4() const { return sum4_; }

 private:
  static TestFn put(std::uint8_t* at, std::initializer_list<std::uint8_t> bytes) {
    std::memcpy(at, bytes.begin(), bytes.size());
    return TestFn{at, at, bytes.size()};
  }
  std::uint8_t* page_ = nullptr;
  WritableRange range_;
  TestFn sum4_;
};

}  // namespace crossmod::tp::test
