// Tracepoints on hand-assembled functions: the jump's bytes, the probe, original semantics
// with the jump installed (RIP-relative operand, relative call, jcc, mid-function site,
// flags and xmm preserved), the int3 redirect of a branch into the replaced range, toggle,
// remove and reinstall, and the refusals of bad sequences of calls.
#include "crossmod/tracepoint.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <thread>
#include <cstdio>
#include <cstring>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/trap.hpp"
#include "encoding.hpp"
#include "pool.hpp"
#include "stress.hpp"
#include "test_code.hpp"

namespace crossmod::tp {
namespace {

using test::TestCode;
using test::TestFn;

std::atomic<std::uint64_t> g_hits{0};
void count_hit(void* user) noexcept {
  g_hits.fetch_add(1, std::memory_order_relaxed);
  if (user != nullptr) static_cast<std::atomic<std::uint64_t>*>(user)->fetch_add(1);
}

// A handler that clobbers what the System V ABI lets it clobber.
void clobber(void*) noexcept {
  g_hits.fetch_add(1, std::memory_order_relaxed);
  asm volatile(
      "pxor %%xmm0, %%xmm0\n\t"
      "pxor %%xmm1, %%xmm1\n\t"
      "xor %%ecx, %%ecx\n\t"
      "xor %%edx, %%edx\n\t"
      "xor %%esi, %%esi\n\t"
      "xor %%edi, %%edi\n\t"
      "xor %%r8d, %%r8d\n\t"
      "xor %%r11d, %%r11d\n\t"
      "cmp %%ecx, %%ecx\n\t"  // ZF=1, CF=0
      ::
          : "xmm0", "xmm1", "rcx", "rdx", "rsi", "rdi", "r8", "r11", "cc");
}

WaitPolicy test_wait() { return test::stress_wait(); }

struct Prepared {
  Tracepoint tp;
  Prepared(const TestFn& f, Handler h = count_hit) {
    EXPECT_EQ(Tracepoint::prepare(f.addr, f.size, h, nullptr, &tp), Status::ok);
  }
};

void expect_jump_bytes(const Tracepoint& tp) {
  const auto* code = reinterpret_cast<const std::uint8_t*>(tp.address());
  EXPECT_EQ(code[0], 0xE9);
  EXPECT_EQ(std::memcmp(code, tp.jump_bytes(), 5), 0);
  for (unsigned b = 1; b < 5; ++b)
    if ((tp.analysis().boundary_mask & (1u << b)) != 0) {
      EXPECT_EQ(code[b], 0xCC) << b;
    }
  std::int32_t rel;
  std::memcpy(&rel, code + 1, 4);
  EXPECT_EQ(tp.address() + 5 + static_cast<std::uintptr_t>(static_cast<std::int64_t>(rel)),
            tp.entry());
}

TEST(Tracepoint, SumLoopProbeAndInwardRedirect) {
  TestCode code;
  const TestFn& f = code.sum();
  std::uint8_t before[16];
  std::memcpy(before, f.addr, sizeof before);
  Prepared p(f);
  ASSERT_TRUE(p.tp.prepared());
  EXPECT_EQ(p.tp.analysis().boundary_mask, 1u << 2);
  EXPECT_EQ(p.tp.analysis().inward_branches, 1u);
  EXPECT_EQ(std::memcmp(before, f.addr, sizeof before), 0) << "prepare wrote code";

  ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
  expect_jump_bytes(p.tp);
  const std::uint64_t hits0 = g_hits.load();
  const std::uint64_t red0 = trap::redirect_stats().redirected;
  EXPECT_EQ(f.fn()(5, 0), TestCode::sum_oracle(5));
  EXPECT_EQ(g_hits.load() - hits0, 1u);
  // Iterations 2..5 branch back to offset 2, which now holds an int3.
  EXPECT_EQ(trap::redirect_stats().redirected - red0, 4u);

  ASSERT_EQ(p.tp.disable(), Status::ok);
  EXPECT_EQ(f.fn()(3, 0), 6u);
  EXPECT_EQ(g_hits.load() - hits0, 1u);
  ASSERT_EQ(p.tp.enable(), Status::ok);
  EXPECT_EQ(f.fn()(3, 0), 6u);
  EXPECT_EQ(g_hits.load() - hits0, 2u);

  ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(before, f.addr, sizeof before), 0);
  EXPECT_EQ(f.fn()(4, 0), 10u);
  EXPECT_EQ(g_hits.load() - hits0, 2u);
  // Reinstall reuses the same trampoline.
  const std::uintptr_t entry = p.tp.entry();
  ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
  EXPECT_EQ(p.tp.entry(), entry);
  EXPECT_EQ(f.fn()(4, 0), 10u);
  EXPECT_EQ(g_hits.load() - hits0, 3u);
  ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
}

TEST(Tracepoint, RipRelativeOperandFarEntry) {
  TestCode code;
  Prepared p(code.plus());
  EXPECT_EQ(p.tp.analysis().boundary_mask, (1u << 1) | (1u << 4));
  ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
  expect_jump_bytes(p.tp);
  const std::uint64_t hits0 = g_hits.load();
  EXPECT_EQ(code.plus().fn()(7, 0), TestCode::kK + 7);
  EXPECT_EQ(g_hits.load() - hits0, 1u);
  ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
  EXPECT_EQ(code.plus().fn()(7, 0), TestCode::kK + 7);
}

TEST(Tracepoint, RelativeCallReturnsIntoOriginalCode) {
  TestCode code;
  Prepared p(code.call());
  ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
  const std::uint64_t hits0 = g_hits.load();
  EXPECT_EQ(code.call().fn()(20, 0), 41u);
  EXPECT_EQ(g_hits.load() - hits0, 1u);
  ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
}

TEST(Tracepoint, JccInReplacedRange) {
  TestCode code;
  Prepared p(code.jcc());
  EXPECT_EQ(p.tp.analysis().boundary_mask, 1u << 3);
  ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
  EXPECT_EQ(code.jcc().fn()(0, 0), 0u);
  EXPECT_EQ(code.jcc().fn()(9, 0), 10u);
  ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
}

TEST(Tracepoint, MidFunctionPreservesFlagsAndRegisters) {
  TestCode code;
  Prepared below(code.below(), clobber);
  Prepared xmm(code.xmm(), clobber);
  ASSERT_EQ(below.tp.install(test_wait()), Status::ok);
  ASSERT_EQ(xmm.tp.install(test_wait()), Status::ok);
  const std::uint64_t hits0 = g_hits.load();
  EXPECT_EQ(code.below().fn()(2, 1), 1u);
  EXPECT_EQ(code.below().fn()(1, 2), 0u);
  EXPECT_EQ(code.xmm().fn()(0x1234567890ull, 0), 0x1234567890ull);
  EXPECT_EQ(g_hits.load() - hits0, 3u);
  ASSERT_EQ(below.tp.remove(test_wait()), Status::ok);
  ASSERT_EQ(xmm.tp.remove(test_wait()), Status::ok);
}

TEST(Tracepoint, TrapFallbackForShortFunction) {
  TestCode code;
  const TestFn& f = code.shortfn();
  Tracepoint t;
  EXPECT_EQ(Tracepoint::prepare(f.addr, f.size, count_hit, nullptr, &t), Status::too_short);
  ASSERT_EQ(Tracepoint::prepare(f.addr, f.size, count_hit, nullptr, &t, nullptr, true), Status::ok);
  EXPECT_TRUE(t.trap_mode());
  EXPECT_EQ(t.entry(), 0u);
  ASSERT_EQ(t.install(test_wait()), Status::ok);
  EXPECT_EQ(f.addr[0], 0xCC);
  EXPECT_EQ(f.addr[1], 0x47);  // the rest of the function is untouched
  const std::uint64_t hits0 = g_hits.load();
  EXPECT_EQ(f.fn()(41, 0), 42u);
  EXPECT_EQ(g_hits.load() - hits0, 1u);
  ASSERT_EQ(t.remove(test_wait()), Status::ok);
  EXPECT_EQ(f.addr[0], 0x8D);
  EXPECT_EQ(f.fn()(41, 0), 42u);
  EXPECT_EQ(g_hits.load() - hits0, 1u);
}

// A function shorter than the jump whose last instruction ends its flow gets the jump
// when the alignment padding after it makes up the difference (compilers fill it with
// NOPs or int3 up to the next 16-byte boundary; nothing runs there). Its original bytes,
// padding included, come back on removal. Without padding, or when the last instruction
// does not end the flow, or when one-byte NOPs follow (a patchable entry), it stays too
// short.
TEST(Tracepoint, ShortFunctionTakesTheJumpOverItsPadding) {
  CodeBlock block;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &block), crossmod::Status::ok);
  std::memset(block.data(), x86::kInvalid64, block.size());
  std::uint8_t* b = block.data();
  // inc32(n) = (uint32)n + 1 (lea eax, [rdi+1]; ret), then NOPs to 16 (GCC's kind of
  // fill: a 10-byte and a 2-byte NOP).
  const std::uint8_t inc32[] = {0x8D, 0x47, 0x01, 0xC3, 0x66, 0x2E, 0x0F, 0x1F,
                                0x84, 0x00, 0x00, 0x00, 0x00, 0x00, 0x66, 0x90};
  std::uint8_t* f1 = b + 0x000;
  std::memcpy(f1, inc32, sizeof inc32);
  // `ret` alone, then int3 to 16 (lld's kind of fill).
  std::uint8_t* f2 = b + 0x040;
  f2[0] = 0xC3;
  std::memset(f2 + 1, 0xCC, 15);
  // lea then a NOP (no flow end) before the fill: too short.
  std::uint8_t* f3 = b + 0x080;
  const std::uint8_t no_end[] = {0x8D, 0x47, 0x01, 0x90};
  std::memcpy(f3, no_end, sizeof no_end);
  std::memcpy(f3 + 4, inc32 + 4, 12);  // the same fill as inc32's
  // The short function of TestCode's kind: followed by bytes that are no padding.
  std::uint8_t* f4 = b + 0x0C0;
  std::memcpy(f4, inc32, 4);

  for (std::uint8_t* f : {f1, f2}) {
    const std::size_t size = f == f1 ? 4 : 1;
    std::uint8_t before[16];
    std::memcpy(before, f, sizeof before);
    Tracepoint t;
    ASSERT_EQ(Tracepoint::prepare(f, size, count_hit, nullptr, &t), Status::ok) << (f == f1 ? "nops" : "int3");
    EXPECT_FALSE(t.trap_mode());
    EXPECT_EQ(t.analysis().count, f == f1 ? 2 : 1);
    EXPECT_EQ(t.analysis().boundary_mask, f == f1 ? 1u << 3 : 0u);  // the ret at 3; none in the fill
    ASSERT_EQ(t.install(test_wait()), Status::ok);
    expect_jump_bytes(t);
    const std::uint64_t hits0 = g_hits.load();
    using Fn1 = std::uint64_t (*)(std::uint64_t);
    const auto fn = reinterpret_cast<Fn1>(f);
    if (f == f1) {
      EXPECT_EQ(fn(41), 42u);
    } else {
      (void)fn(0);
    }
    EXPECT_EQ(g_hits.load() - hits0, 1u);
    ASSERT_EQ(t.remove(test_wait()), Status::ok);
    EXPECT_EQ(std::memcmp(f, before, sizeof before), 0);
    if (f == f1) {
      EXPECT_EQ(fn(41), 42u);
    }
    EXPECT_EQ(g_hits.load() - hits0, 1u);
  }
  // Followed by one-byte NOPs: what -fpatchable-function-entry puts at the entry of an
  // unaligned next function, not fill.
  std::uint8_t* f5 = b + 0x100;
  std::memcpy(f5, inc32, 4);
  std::memset(f5 + 4, 0x90, 12);
  Tracepoint t3, t4, t5;
  EXPECT_EQ(Tracepoint::prepare(f3, 4, count_hit, nullptr, &t3), Status::too_short);
  EXPECT_EQ(Tracepoint::prepare(f4, 4, count_hit, nullptr, &t4), Status::too_short);
  EXPECT_EQ(Tracepoint::prepare(f5, 4, count_hit, nullptr, &t5), Status::too_short);
}

// An SpHandler sees the traced function's return address at *sp (first instruction) and
// can redirect it: the function then returns through `landing`, which sets eax = 777 and
// jumps to the saved return address. Jump mode (sum) and trap mode (shortfn).
struct Redirect {
  std::uint8_t* landing = nullptr;
  std::uintptr_t seen_ret = 0;
  bool armed = false;
};
void redirect_return(void* user, std::uintptr_t* sp) noexcept {
  auto* r = static_cast<Redirect*>(user);
  r->seen_ret = *sp;
  if (!r->armed) return;
  std::memcpy(r->landing + 11, sp, 8);
  *sp = reinterpret_cast<std::uintptr_t>(r->landing);
}

TEST(Tracepoint, SpHandlerRedirectsTheReturnAddress) {
  TestCode code;
  CodeBlock blk;
  ASSERT_EQ(CodeBlock::allocate(64, nullptr, &blk), crossmod::Status::ok);
  //  0: B8 09 03 00 00   mov eax, 777
  //  5: FF 25 00000000   jmp [rip + 0]
  // 11: <8-byte return address>
  const std::uint8_t stub[] = {0xB8, 0x09, 0x03, 0x00, 0x00, 0xFF, 0x25, 0, 0, 0, 0};
  std::memcpy(blk.data(), stub, sizeof stub);
  for (const bool trap : {false, true}) {
    const TestFn& f = trap ? code.shortfn() : code.sum();
    Redirect r;
    r.landing = blk.data();
    Tracepoint t;
    ASSERT_EQ(Tracepoint::prepare_sp(f.addr, f.size, redirect_return, &r, &t, nullptr, trap),
              Status::ok);
    EXPECT_EQ(t.trap_mode(), trap);
    ASSERT_EQ(t.install(test_wait()), Status::ok);
    const std::uint64_t plain = f.fn()(5, 0);
    EXPECT_EQ(plain, trap ? 6u : TestCode::sum_oracle(5));
    EXPECT_NE(r.seen_ret, 0u);
    r.armed = true;
    EXPECT_EQ(f.fn()(5, 0), 777u) << "trap mode " << trap;
    r.armed = false;
    EXPECT_EQ(f.fn()(5, 0), plain);
    ASSERT_EQ(t.remove(test_wait()), Status::ok);
  }
}

TEST(Tracepoint, BadSequencesAreRefused) {
  TestCode code;
  Tracepoint empty;
  EXPECT_EQ(empty.install(test_wait()), Status::bad_state);
  EXPECT_EQ(empty.enable(), Status::bad_state);
  Prepared p(code.jcc());
  EXPECT_EQ(p.tp.remove(test_wait()), Status::bad_state);
  ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
  EXPECT_EQ(p.tp.install(test_wait()), Status::bad_state);
  ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
  // Someone else changed the code since prepare().
  code.jcc().addr[0] = 0x90;
  EXPECT_EQ(p.tp.install(test_wait()), Status::bad_bytes);
  Tracepoint t;
  EXPECT_EQ(Tracepoint::prepare(code.jcc().addr, 3, count_hit, nullptr, &t), Status::too_short);
}

// Code where no entry slot can exist: below 816 MiB with boundaries at bytes 1 and 4, the
// rel32 would point below address 0 and no 0x2E prefix can shift it (byte 1 would be a
// prefix or the opcode). prepare skips the branch scan: no_trampoline_space without the
// trap fallback, trap mode with it; the same bytes high in memory get their jump.
TEST(Tracepoint, NoEntrySlotPossibleLowInMemory) {
  // push rbx; mov rax, rdi; xor ebx, ebx; pop rbx; ret (boundaries at 1 and 4)
  static const std::uint8_t kFn[] = {0x53, 0x48, 0x89, 0xF8, 0x31, 0xDB, 0x5B, 0xC3};
  constexpr std::uint8_t kMask = (1u << 1) | (1u << 4);
  std::uint8_t* low = test::map_low(PROT_READ | PROT_WRITE);
  ASSERT_NE(low, nullptr);
  std::memcpy(low, kFn, sizeof kFn);
  const auto low_at = reinterpret_cast<std::uintptr_t>(low);
  EXPECT_FALSE(detail::entry_possible(low_at, kMask));
  EXPECT_TRUE(detail::entry_possible(low_at, 1u << 1));  // byte 0 only: a slot every 256 B
  for (unsigned p = 1; p <= 3; ++p) EXPECT_FALSE(detail::entry_possible_prefixed(low_at, kMask, p));
  Tracepoint t;
  EXPECT_EQ(Tracepoint::prepare(low, sizeof kFn, count_hit, nullptr, &t), Status::no_trampoline_space);
  Tracepoint trap;
  ASSERT_EQ(Tracepoint::prepare(low, sizeof kFn, count_hit, nullptr, &trap, nullptr, true), Status::ok);
  EXPECT_TRUE(trap.trap_mode());
  EXPECT_EQ(trap.analysis().prefix_len, 0);
  EXPECT_EQ(trap.jump_len(), 1u);
  const auto high_at = reinterpret_cast<std::uintptr_t>(kFn);
  ASSERT_GT(high_at, std::uintptr_t{1} << 32);  // PIE test binary
  EXPECT_TRUE(detail::entry_possible(high_at, kMask));
  Tracepoint jump;
  ASSERT_EQ(Tracepoint::prepare(const_cast<std::uint8_t*>(kFn), sizeof kFn, count_hit, nullptr, &jump), Status::ok);
  EXPECT_FALSE(jump.trap_mode());
  EXPECT_EQ(jump.analysis().prefix_len, 0);
  munmap(low, 4096);  // never installed: nothing points into it
}

// The same shape, low in memory, traced after its push: at offset 1 the head is `mov; xor`
// (a boundary at 3, rel32 byte 2: an entry +-13 MiB away), and the handler's sp is one
// slot below the return address. Installed, called from another thread (probe fired with
// the caller's return address at sp[1], result and rbx right), removed. A function whose
// loop branches back to offset 1 is refused: a thread arriving there would run the probe
// with a deeper stack.
std::atomic<std::uintptr_t> g_seen_ret{0};
void seen_return_address(void*, std::uintptr_t* sp) noexcept { g_seen_ret.store(sp[1]); }

TEST(Tracepoint, AfterLeadingPushesLowInMemory) {
  // push rbx; mov rax, rdi; xor ebx, ebx; pop rbx; ret
  static const std::uint8_t kFn[] = {0x53, 0x48, 0x89, 0xF8, 0x31, 0xDB, 0x5B, 0xC3};
  //   0: 53         push rbx
  //   1: 48 89 FB   mov rbx, rdi     <- loop head
  //   4: 48 FF CB   dec rbx
  //   7: 75 F8      jnz 1
  //   9: 5B         pop rbx
  //  10: C3         ret
  static const std::uint8_t kLoop[] = {0x53, 0x48, 0x89, 0xFB, 0x48, 0xFF, 0xCB, 0x75, 0xF8, 0x5B, 0xC3};
  // push r12; push rbx; push rbp; ret: three pushes of 2, 1, 1 bytes
  static const std::uint8_t kThree[] = {0x41, 0x54, 0x53, 0x55, 0xC3};
  EXPECT_EQ(Tracepoint::leading_pushes(kFn, sizeof kFn), 1u);
  EXPECT_EQ(Tracepoint::leading_pushes(kLoop, sizeof kLoop), 1u);
  EXPECT_EQ(Tracepoint::leading_pushes(kThree, sizeof kThree), 3u);
  EXPECT_EQ(Tracepoint::leading_pushes(kThree, 3), 2u);  // the function ends inside the third

  std::uint8_t* low = test::map_low(PROT_READ | PROT_WRITE | PROT_EXEC);
  ASSERT_NE(low, nullptr);
  std::memset(low, x86::kInvalid64, 4096);
  std::uint8_t* fn = low + 0x100;
  std::uint8_t* loop = low + 0x200;
  std::memcpy(fn, kFn, sizeof kFn);
  std::memcpy(loop, kLoop, sizeof kLoop);
  WritableRange wr;
  ASSERT_EQ(WritableRange::make(low, 4096, &wr), crossmod::Status::ok);
  Tracepoint t0;
  ASSERT_EQ(Tracepoint::prepare_sp(fn, sizeof kFn, seen_return_address, nullptr, &t0), Status::no_trampoline_space);
  EXPECT_EQ(Tracepoint::prepare_sp_after_pushes(fn, sizeof kFn, 2, seen_return_address, nullptr, &t0),
            Status::bad_state);  // only one push
  Tracepoint tl;
  EXPECT_EQ(Tracepoint::prepare_sp_after_pushes(loop, sizeof kLoop, 1, seen_return_address, nullptr, &tl),
            Status::branch_into_range);

  Tracepoint t;
  ASSERT_EQ(Tracepoint::prepare_sp_after_pushes(fn, sizeof kFn, 1, seen_return_address, nullptr, &t), Status::ok);
  EXPECT_EQ(t.address(), reinterpret_cast<std::uintptr_t>(fn) + 1);
  EXPECT_FALSE(t.trap_mode());
  EXPECT_EQ(t.analysis().boundary_mask, 1u << 3);
  ASSERT_EQ(t.install(test_wait()), Status::ok);
  EXPECT_EQ(fn[0], 0x53);  // the push stays
  EXPECT_EQ(fn[1], 0xE9);
  EXPECT_EQ(fn[4], 0xCC);
  // Called through a stub, `call fn; ret`, so the return address is known: stub + 5.
  std::uint8_t* stub = low + 0x300;
  ASSERT_TRUE(enc::jmp_rel32(stub, reinterpret_cast<std::uintptr_t>(stub), reinterpret_cast<std::uintptr_t>(fn)));
  stub[0] = 0xE8;  // call rel32: the same displacement as jmp rel32
  stub[5] = 0xC3;
  using Fn = std::uint64_t (*)(std::uint64_t);
  std::uint64_t r = 0;
  std::thread th([&] { r = reinterpret_cast<Fn>(stub)(77); });
  th.join();
  EXPECT_EQ(r, 77u);
  EXPECT_EQ(g_seen_ret.load(), reinterpret_cast<std::uintptr_t>(stub) + 5);
  ASSERT_EQ(t.remove(test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(fn, kFn, sizeof kFn), 0);
  (void)wr.restore();
  munmap(low, 4096);  // removed and every call returned
}

// Functions whose first instruction is 4 bytes, copied below 816 MiB: the 5-byte jump
// would need rel32 byte 3 = 0xCC (impossible there), so the jump gets one 0x2E prefix:
// `2E E9 r0 r1 CC r3` with the boundary at offset 4 on rel32 byte 2. Installed, called
// from another thread (probe fired, result right, the loop's back edge into offset 4
// trapped and redirected), removed (original bytes back, no more probe).
TEST(Tracepoint, PrefixedJumpLowInMemory) {
  std::uint8_t* low = test::map_low(PROT_READ | PROT_WRITE | PROT_EXEC);
  ASSERT_NE(low, nullptr);
  std::memset(low, x86::kInvalid64, 4096);
  // load2(p) = p->[0x18]->[0x20]: mov rax, [rdi+0x18]; mov rax, [rax+0x20]; ret
  static const std::uint8_t kLoad2[] = {0x48, 0x8B, 0x47, 0x18, 0x48, 0x8B, 0x40, 0x20, 0xC3};
  // sum(n) = n + ... + 1, the loop head at offset 4 (a replaced boundary):
  //   0: 48 83 E0 00   and rax, 0
  //   4: 48 01 F8      add rax, rdi    <- loop head
  //   7: 48 FF CF      dec rdi
  //  10: 75 F8         jnz 4
  //  12: C3            ret
  static const std::uint8_t kSum[] = {0x48, 0x83, 0xE0, 0x00, 0x48, 0x01, 0xF8,
                                      0x48, 0xFF, 0xCF, 0x75, 0xF8, 0xC3};
  std::uint8_t* load2 = low + 0x100;
  std::uint8_t* sum = low + 0x200;
  std::memcpy(load2, kLoad2, sizeof kLoad2);
  std::memcpy(sum, kSum, sizeof kSum);
  WritableRange wr;
  ASSERT_EQ(WritableRange::make(low, 4096, &wr), crossmod::Status::ok);
  EXPECT_FALSE(detail::entry_possible(reinterpret_cast<std::uintptr_t>(load2), 1u << 4));

  std::atomic<std::uint64_t> hits_load{0}, hits_sum{0};
  Tracepoint tl, ts;
  ASSERT_EQ(Tracepoint::prepare(load2, sizeof kLoad2, count_hit, &hits_load, &tl), Status::ok);
  ASSERT_EQ(Tracepoint::prepare(sum, sizeof kSum, count_hit, &hits_sum, &ts), Status::ok);
  for (const Tracepoint* t : {&tl, &ts}) {
    EXPECT_FALSE(t->trap_mode());
    EXPECT_EQ(t->analysis().prefix_len, 1);
    EXPECT_EQ(t->analysis().boundary_mask, 1u << 4);
    EXPECT_EQ(t->jump_len(), 6u);
  }
  EXPECT_EQ(ts.analysis().inward_branches, 1u);

  std::uint64_t inner[8] = {};
  std::uint64_t outer[8] = {};
  inner[0x20 / 8] = 4242;
  outer[0x18 / 8] = reinterpret_cast<std::uint64_t>(inner);
  using Fn1 = std::uint64_t (*)(void*);
  using FnN = std::uint64_t (*)(std::uint64_t);
  const auto fl = reinterpret_cast<Fn1>(load2);
  const auto fs = reinterpret_cast<FnN>(sum);
  ASSERT_EQ(fl(outer), 4242u);
  ASSERT_EQ(fs(10), 55u);

  Tracepoint* both[] = {&tl, &ts};
  ASSERT_EQ(Tracepoint::install_all(std::span<Tracepoint* const>(both), test_wait()), Status::ok);
  for (const Tracepoint* t : both) {
    const auto* c = reinterpret_cast<const std::uint8_t*>(t->address());
    EXPECT_EQ(std::memcmp(c, t->jump_bytes(), 6), 0);
    EXPECT_EQ(c[0], 0x2E);
    EXPECT_EQ(c[1], 0xE9);
    EXPECT_EQ(c[4], 0xCC);  // offset 4: the second instruction's boundary
    std::int32_t rel;
    std::memcpy(&rel, c + 2, 4);
    EXPECT_EQ(t->address() + 6 + static_cast<std::uintptr_t>(static_cast<std::int64_t>(rel)),
              t->entry());
  }
  // Bytes 6, 7 (the rest of the second replaced instruction) are left as they were.
  EXPECT_EQ(load2[6], 0x40);
  EXPECT_EQ(load2[7], 0x20);

  const std::uint64_t redirects_before = trap::redirect_stats().redirected;
  std::uint64_t rl = 0, rs = 0;
  std::thread th([&] {
    for (int i = 0; i < 10; ++i) rl += fl(outer);
    rs = fs(100);
  });
  th.join();
  EXPECT_EQ(rl, 42420u);
  EXPECT_EQ(rs, 5050u);
  EXPECT_EQ(hits_load.load(), 10u);
  EXPECT_EQ(hits_sum.load(), 1u);
  EXPECT_GE(trap::redirect_stats().redirected - redirects_before, 99u);  // the back edge, 99 times

  ASSERT_EQ(Tracepoint::remove_all(std::span<Tracepoint* const>(both), test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(load2, kLoad2, sizeof kLoad2), 0);
  EXPECT_EQ(std::memcmp(sum, kSum, sizeof kSum), 0);
  EXPECT_EQ(fl(outer), 4242u);
  EXPECT_EQ(fs(7), 28u);
  EXPECT_EQ(hits_load.load(), 10u);
  EXPECT_EQ(hits_sum.load(), 1u);
  // Reinstall, then remove again: the same bytes each way.
  ASSERT_EQ(tl.install(test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(load2, tl.jump_bytes(), 6), 0);
  EXPECT_EQ(fl(outer), 4242u);
  EXPECT_EQ(hits_load.load(), 11u);
  ASSERT_EQ(tl.remove(test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(load2, kLoad2, sizeof kLoad2), 0);
  (void)wr.restore();
  munmap(low, 4096);  // removed and every call returned: nothing runs in it any more
}

// Boundaries at offsets 2, 3 and 4 fix rel32 bytes 1..3: the 5-byte jump can target only
// one 256-byte window, 819 MiB below the code. With that window mapped by someone else
// (here a PROT_NONE page; in python3 a thread's malloc heap reservation over a library
// loaded late), prepare tries one 0x2E prefix, whose rel32 has bytes 0..2 fixed instead,
// rather than refusing no_trampoline_space. Installed, called, removed.
TEST(Tracepoint, LongerPrefixWhenTheWindowIsTaken) {
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  auto* page = static_cast<std::uint8_t*>(m);
  std::memset(page, x86::kInvalid64, 4096);
  //   0: 31 C0     xor eax, eax
  //   2: 90        nop
  //   3: 90        nop
  //   4: 48 89 F8  mov rax, rdi
  //   7: C3        ret
  static const std::uint8_t kId[] = {0x31, 0xC0, 0x90, 0x90, 0x48, 0x89, 0xF8, 0xC3};
  std::uint8_t* fn = page + 0x100;
  std::memcpy(fn, kId, sizeof kId);
  WritableRange wr;
  ASSERT_EQ(WritableRange::make(page, 4096, &wr), crossmod::Status::ok);
  const auto a = reinterpret_cast<std::uintptr_t>(fn);
  constexpr std::uint8_t kMask = (1u << 2) | (1u << 3) | (1u << 4);
  ASSERT_TRUE(detail::entry_possible_prefixed(a, kMask, 0));  // the window is in reach
  // The window: rel32 0xCCCCCC00..0xCCCCCCFF from a + 5, plus an entry slot's length.
  const std::uintptr_t lo = a + 5 + static_cast<std::uintptr_t>(std::int64_t{-0x33333400});
  const std::uintptr_t blk = lo & ~std::uintptr_t{4095};
  const std::size_t blk_len = ((lo + 256 + 14 - blk) + 4095) & ~std::size_t{4095};
  void* b = mmap(reinterpret_cast<void*>(blk), blk_len, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(b, reinterpret_cast<void*>(blk));

  std::atomic<std::uint64_t> hits{0};
  Tracepoint t;
  ASSERT_EQ(Tracepoint::prepare(fn, sizeof kId, count_hit, &hits, &t), Status::ok);
  EXPECT_FALSE(t.trap_mode());
  EXPECT_EQ(t.analysis().prefix_len, 1);
  EXPECT_EQ(t.jump_len(), 6u);
  EXPECT_TRUE(t.entry() < blk || t.entry() >= blk + blk_len);
  using Fn = std::uint64_t (*)(std::uint64_t);
  const auto f = reinterpret_cast<Fn>(fn);
  ASSERT_EQ(t.install(test_wait()), Status::ok);
  EXPECT_EQ(fn[0], 0x2E);
  EXPECT_EQ(fn[1], 0xE9);
  for (unsigned off : {2u, 3u, 4u}) EXPECT_EQ(fn[off], 0xCC) << off;
  EXPECT_EQ(f(77), 77u);
  EXPECT_EQ(hits.load(), 1u);
  ASSERT_EQ(t.remove(test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(fn, kId, sizeof kId), 0);
  EXPECT_EQ(f(5), 5u);
  EXPECT_EQ(hits.load(), 1u);
  (void)wr.restore();
  munmap(b, blk_len);
  munmap(m, 4096);  // removed and every call returned
}

// Where the 5-byte jump works, it is exactly what it was before prefixes existed: E9 and
// the rel32 to the entry from address+5, 0xCC at each boundary, nothing written past
// byte 4 (the hand-assembled functions lie high in memory).
TEST(Tracepoint, UnprefixedJumpIsTheOldJump) {
  TestCode code;
  for (const TestFn* f : {&code.sum(), &code.plus(), &code.call(), &code.jcc(), &code.below(),
                          &code.xmm()}) {
    std::uint8_t before[16];
    std::memcpy(before, f->addr, sizeof before);
    Tracepoint t;
    ASSERT_EQ(Tracepoint::prepare(f->addr, f->size, count_hit, nullptr, &t), Status::ok);
    EXPECT_EQ(t.analysis().prefix_len, 0);
    EXPECT_EQ(t.jump_len(), 5u);
    std::uint8_t want[5];
    ASSERT_TRUE(enc::jmp_rel32(want, t.address(), t.entry()));
    EXPECT_EQ(std::memcmp(t.jump_bytes(), want, 5), 0);
    ASSERT_EQ(t.install(test_wait()), Status::ok);
    EXPECT_EQ(std::memcmp(f->addr, want, 5), 0);
    EXPECT_EQ(std::memcmp(f->addr + 5, before + 5, sizeof before - 5), 0);
    expect_jump_bytes(t);
    ASSERT_EQ(t.remove(test_wait()), Status::ok);
    EXPECT_EQ(std::memcmp(f->addr, before, sizeof before), 0);
  }
}

TEST(Tracepoint, CodeOutsideWritableRangeIsRefused) {
  // The test binary's own text: readable but never made writable through code_memory.
  static const std::uint8_t kText[] = {0x48, 0x89, 0xE5, 0x48, 0x83, 0xEC, 0x10, 0xC3};
  Tracepoint t;
  ASSERT_EQ(
      Tracepoint::prepare(const_cast<std::uint8_t*>(kText), sizeof kText, count_hit, nullptr, &t),
      Status::ok);
  EXPECT_EQ(t.install(test_wait()), Status::not_writable);
}

TEST(Tracepoint, PoolAccountsMemory) {
  TestCode code;
  const PoolStats s0 = pool_stats();
  Prepared p(code.plus());
  const PoolStats s = pool_stats();
  EXPECT_EQ(s.trampolines, s0.trampolines + 1);
  // The body sits at the jump's target (direct): no entry slot, no arena bytes, its bytes
  // (pad, toggle, copies, probe block, literals; trimmed: < 128) in an entry page.
  EXPECT_EQ(s.direct_bodies, s0.direct_bodies + 1);
  EXPECT_EQ(s.entry_bytes_used, s0.entry_bytes_used);
  EXPECT_EQ(s.body_bytes_used, s0.body_bytes_used);
  EXPECT_GT(s.direct_body_bytes - s0.direct_body_bytes, 8u + 5u);
  EXPECT_LT(s.direct_body_bytes - s0.direct_body_bytes, 128u + 7u);
  EXPECT_LE(s.entry_bytes_used + s.direct_body_bytes, s.entry_pages * 4096);
  EXPECT_LE(s.body_bytes_used, s.body_bytes_mapped);
}

// The function's jump lands on the body: at entry() the pad NOP (none when entry() is
// 8-aligned), then the toggle slot, enabled (`jmp probe block`) and disabled (8-byte
// NOP); every call runs one taken jump fewer than through an entry slot.
TEST(Tracepoint, JumpLandsOnTheBody) {
  TestCode code;
  for (const TestFn* f : {&code.sum(), &code.plus()}) {
    const std::uint64_t want = f == &code.plus() ? TestCode::kK + 3 : TestCode::sum_oracle(3);
    Prepared p(*f);
    ASSERT_TRUE(p.tp.prepared());
    const std::uintptr_t e = p.tp.entry(), body = p.tp.body();
    ASSERT_EQ(body % 8, 0u);
    ASSERT_EQ(body - e, (0 - e) & 7) << std::hex << e;
    const auto* at = reinterpret_cast<const std::uint8_t*>(e);
    EXPECT_EQ(std::memcmp(at, test::kSdmNops[body - e], body - e), 0);
    const auto* t = reinterpret_cast<const std::uint8_t*>(body);
    EXPECT_EQ(t[0], 0xE9);  // enabled at prepare
    ASSERT_EQ(p.tp.install(test_wait()), Status::ok);
    expect_jump_bytes(p.tp);
    const std::uint64_t hits0 = g_hits.load();
    EXPECT_EQ(f->fn()(3, 0), want);
    ASSERT_EQ(p.tp.disable(), Status::ok);
    static const std::uint8_t kNop8[8] = {0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00};
    EXPECT_EQ(std::memcmp(t, kNop8, 8), 0);
    const std::uint64_t hits1 = g_hits.load();
    EXPECT_GT(hits1, hits0);
    EXPECT_EQ(f->fn()(3, 0), want);
    EXPECT_EQ(g_hits.load(), hits1);
    ASSERT_EQ(p.tp.enable(), Status::ok);
    EXPECT_EQ(t[0], 0xE9);
    ASSERT_EQ(p.tp.remove(test_wait()), Status::ok);
  }
}

// A jump inside one cache line is written in one store: install and remove never wait,
// while a straddling jump waits twice each way (the int3 protocol). The wait is long
// enough (1e9 ticks, ~0.4 s here) that any wait at all shows in the elapsed ticks.
TEST(Tracepoint, InLineJumpIsWrittenWithoutWaits) {
  TestCode code;
  constexpr std::uint64_t kW = 1'000'000'000;
  const WaitPolicy w = WaitPolicy::Ticks(kW);
  Prepared in(code.plus()), across(code.plus_straddling());
  ASSERT_TRUE(in.tp.in_line());
  ASSERT_FALSE(across.tp.in_line());
  const std::uint64_t t0 = x86::rdtsc();
  ASSERT_EQ(in.tp.install(w), Status::ok);
  const std::uint64_t t1 = x86::rdtsc();
  expect_jump_bytes(in.tp);
  const std::uint64_t h0 = g_hits.load();
  EXPECT_EQ(code.plus().fn()(7, 0), TestCode::kK + 7);
  EXPECT_EQ(g_hits.load(), h0 + 1);
  const std::uint64_t t2 = x86::rdtsc();
  ASSERT_EQ(in.tp.remove(w), Status::ok);
  const std::uint64_t t3 = x86::rdtsc();
  EXPECT_LT(t1 - t0, kW);
  EXPECT_LT(t3 - t2, kW);
  EXPECT_EQ(code.plus().addr[0], 0x55);
  EXPECT_EQ(code.plus().fn()(7, 0), TestCode::kK + 7);
  EXPECT_EQ(g_hits.load(), h0 + 1);

  const std::uint64_t t4 = x86::rdtsc();
  ASSERT_EQ(across.tp.install(w), Status::ok);
  const std::uint64_t t5 = x86::rdtsc();
  expect_jump_bytes(across.tp);
  EXPECT_EQ(code.plus_straddling().fn()(7, 0), TestCode::kK + 7);
  EXPECT_EQ(g_hits.load(), h0 + 2);
  ASSERT_EQ(across.tp.remove(w), Status::ok);
  const std::uint64_t t6 = x86::rdtsc();
  EXPECT_GE(t5 - t4, 2 * kW);
  EXPECT_GE(t6 - t5, 2 * kW);
  EXPECT_EQ(code.plus_straddling().addr[0], 0x55);
  EXPECT_EQ(code.plus_straddling().fn()(7, 0), TestCode::kK + 7);

  // A batch with both waits for the straddler and writes both.
  std::vector<Tracepoint*> both = {&in.tp, &across.tp};
  ASSERT_EQ(Tracepoint::install_all(std::span<Tracepoint* const>(both), test_wait()), Status::ok);
  expect_jump_bytes(in.tp);
  expect_jump_bytes(across.tp);
  EXPECT_EQ(code.plus().fn()(1, 0), TestCode::kK + 1);
  EXPECT_EQ(code.plus_straddling().fn()(1, 0), TestCode::kK + 1);
  EXPECT_EQ(g_hits.load(), h0 + 4);
  ASSERT_EQ(Tracepoint::remove_all(std::span<Tracepoint* const>(both), test_wait()), Status::ok);
  EXPECT_EQ(code.plus().addr[0], 0x55);
  EXPECT_EQ(code.plus_straddling().addr[0], 0x55);
}

// Executors loop through the functions while the tracepoints are installed and removed:
// zero faults (a fault kills the test binary), every result correct.
TEST(Tracepoint, InstallRemoveUnderExecution) {
  const auto red0 = trap::redirect_stats();
  const test::StressResult r = test::run_stress(/*cycles=*/800, /*executors=*/1, /*batched=*/false);
  const auto red1 = trap::redirect_stats();
  std::printf("cycles %llu exposed %llu calls %llu wrong %llu redirected %llu reexecuted %llu\n",
              (unsigned long long)r.cycles, (unsigned long long)r.exposed_cycles,
              (unsigned long long)r.calls, (unsigned long long)r.wrong,
              (unsigned long long)(red1.redirected - red0.redirected),
              (unsigned long long)(red1.reexecuted - red0.reexecuted));
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_EQ(r.cycles, 800u);
  EXPECT_GT(r.calls, 0u);
  EXPECT_GT(r.exposed_cycles, 0u);
}

TEST(Tracepoint, BatchedInstallRemoveUnderExecution) {
  const test::StressResult r = test::run_stress(/*cycles=*/600, /*executors=*/1, /*batched=*/true);
  EXPECT_EQ(r.wrong, 0u);
  EXPECT_EQ(r.cycles, 600u);
  EXPECT_GT(r.exposed_cycles, 0u);
}

TEST(Tracepoint, BatchRefusalWritesNothing) {
  TestCode code;
  std::vector<Tracepoint> tps(2);
  ASSERT_EQ(Tracepoint::prepare(code.sum().addr, code.sum().size, count_hit, nullptr, &tps[0]),
            Status::ok);
  ASSERT_EQ(Tracepoint::prepare(code.jcc().addr, code.jcc().size, count_hit, nullptr, &tps[1]),
            Status::ok);
  std::uint8_t before[5];
  std::memcpy(before, code.sum().addr, 5);
  code.jcc().addr[1] ^= 0x01;  // changed behind the tracepoint's back
  EXPECT_EQ(Tracepoint::install_all(tps, test_wait()), Status::bad_bytes);
  EXPECT_EQ(std::memcmp(before, code.sum().addr, 5), 0);
  EXPECT_FALSE(tps[0].is_installed());
  code.jcc().addr[1] ^= 0x01;
  ASSERT_EQ(Tracepoint::install_all(tps, test_wait()), Status::ok);
  EXPECT_EQ(code.sum().fn()(4, 0), 10u);
  EXPECT_EQ(code.jcc().fn()(4, 0), 5u);
  ASSERT_EQ(Tracepoint::remove_all(tps, test_wait()), Status::ok);
  EXPECT_EQ(std::memcmp(before, code.sum().addr, 5), 0);
}

}  // namespace
}  // namespace crossmod::tp
