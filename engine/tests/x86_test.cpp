// x86 encodings and in-line stores; Zydis proves that every callpatch state, and every mix
// of old/new lines a concurrent fetch could combine, decodes as one complete instruction.
#include "crossmod/x86.hpp"

#include <Zydis/Zydis.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "crossmod/callpatch.hpp"
#include "crossmod/code_memory.hpp"
#include "test_site.hpp"

namespace crossmod {
namespace {

using test::Bytes5;

TEST(X86, EncodeDecodeCallAtTheLimits) {
  const std::uintptr_t at = std::uintptr_t{1} << 40;
  const std::uintptr_t next = at + 5;
  Bytes5 b{};
  for (std::int64_t disp : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1},
                            std::int64_t{INT32_MAX}, std::int64_t{INT32_MIN}}) {
    const std::uintptr_t target = next + static_cast<std::uintptr_t>(disp);
    ASSERT_EQ(x86::encode_call(at, target, &b), Status::ok) << disp;
    EXPECT_EQ(b[0], x86::kCallRel32);
    std::uintptr_t decoded = 0;
    ASSERT_TRUE(x86::decode_call(b.data(), at, &decoded));
    EXPECT_EQ(decoded, target);
  }
  const Bytes5 untouched = b;
  EXPECT_EQ(x86::encode_call(at, next + std::uintptr_t{INT32_MAX} + 1, &b), Status::out_of_range);
  EXPECT_EQ(x86::encode_call(at, next - (std::uintptr_t{1} << 31) - 1, &b), Status::out_of_range);
  EXPECT_EQ(x86::encode_call(at, at + (std::uintptr_t{3} << 30), &b), Status::out_of_range);
  EXPECT_EQ(b, untouched) << "a refused encoding writes nothing";
  std::uintptr_t t = 0;
  EXPECT_FALSE(x86::decode_call(x86::kNop5.data(), at, &t));
  const auto jmp = x86::short_jump_over_call();
  EXPECT_EQ(jmp[0], x86::kJmpRel8);
  EXPECT_EQ(jmp[1], 3);
}

TEST(X86, CacheLineAndStraddleSplit) {
  const unsigned line = x86::cache_line_size();
  EXPECT_GE(line, 8u);
  EXPECT_EQ(line & (line - 1), 0u);
  EXPECT_EQ(x86::cache_line_size(), line);
  const std::uintptr_t base = std::uintptr_t{1} << 30;
  EXPECT_EQ(x86::straddle_split(base, 5), 0u);
  EXPECT_EQ(x86::straddle_split(base + line - 5, 5), 0u);
  for (unsigned s = 1; s <= 4; ++s) EXPECT_EQ(x86::straddle_split(base + line - s, 5), s);
  EXPECT_EQ(x86::straddle_split(base + line - 1, 8), 1u);
  EXPECT_EQ(x86::straddle_split(base + line - 7, 8), 7u);
  EXPECT_EQ(x86::straddle_split(base + line - 1, 1), 0u);
}

TEST(X86, InLineStoresReplaceOnlyTheirBytes) {
  CodeBlock block;
  ASSERT_EQ(CodeBlock::allocate(4096, nullptr, &block), Status::ok);
  std::mt19937 rng(7);
  const std::size_t line = x86::cache_line_size();
  for (auto store : {&x86::store_locked, &x86::store_plain}) {
    for (std::size_t len = 1; len <= 8; ++len) {
      for (std::size_t off = 0; off + len <= line; ++off) {
        for (std::size_t i = 0; i < 3 * line; ++i) block.data()[i] = static_cast<std::uint8_t>(rng());
        std::vector<std::uint8_t> expect(block.data(), block.data() + 3 * line);
        std::uint8_t bytes[8];
        for (auto& x : bytes) x = static_cast<std::uint8_t>(rng());
        std::memcpy(expect.data() + line + off, bytes, len);
        ASSERT_EQ(store(block.data() + line + off, {bytes, len}), Status::ok);
        ASSERT_EQ(0, std::memcmp(expect.data(), block.data(), 3 * line))
            << "len " << len << " off " << off;
      }
    }
  }
  std::uint8_t b = 0;
  x86::store_byte(&b, x86::kInt3);
  EXPECT_EQ(b, x86::kInt3);
}

// ---- Zydis ----------------------------------------------------------------------------------
struct Decoded {
  bool ok = false;
  ZydisMnemonic mnemonic = ZYDIS_MNEMONIC_INVALID;
  unsigned length = 0;
  std::uint64_t branch_target = 0;  // for relative branches
};

Decoded decode(const std::uint8_t* bytes, std::size_t len, std::uintptr_t runtime) {
  ZydisDecoder decoder;
  ZydisDecoderInit(&decoder, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  ZydisDecodedInstruction insn;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
  Decoded d;
  if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&decoder, bytes, len, &insn, ops))) return d;
  d.ok = true;
  d.mnemonic = insn.mnemonic;
  d.length = insn.length;
  for (unsigned i = 0; i < insn.operand_count_visible; ++i)
    if (ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && ops[i].imm.is_relative) {
      ZyanU64 abs = 0;
      if (ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&insn, &ops[i], runtime, &abs)))
        d.branch_target = abs;
    }
  return d;
}

// A state is well-formed when its first instruction is the call to `target`, a 5-byte NOP,
// a call to a `ret`, or a short jump to the end of the site.
void expect_complete(const Bytes5& b, std::uintptr_t site, std::uintptr_t target,
                     const char* what) {
  std::uint8_t buf[16];
  std::memset(buf, x86::kInvalid64, sizeof buf);
  std::memcpy(buf, b.data(), 5);
  const Decoded d = decode(buf, sizeof buf, site);
  ASSERT_TRUE(d.ok) << what;
  switch (d.mnemonic) {
    case ZYDIS_MNEMONIC_CALL:
      EXPECT_EQ(d.length, 5u) << what;
      if (d.branch_target != target) {
        EXPECT_EQ(*reinterpret_cast<const std::uint8_t*>(d.branch_target), x86::kRet) << what;
      }
      break;
    case ZYDIS_MNEMONIC_NOP:
      EXPECT_EQ(d.length, 5u) << what;
      break;
    case ZYDIS_MNEMONIC_JMP:
      EXPECT_EQ(d.length, 2u) << what;
      EXPECT_EQ(d.branch_target, site + 5) << what;
      break;
    default:
      ADD_FAILURE() << what << ": unexpected instruction";
  }
}

TEST(X86Zydis, EveryCallPatchStateAndLineMixDecodesCompletely) {
  for (unsigned split = 0; split <= 4; ++split) {
    test::TestSite ts(split);
    CallSite cs;
    ASSERT_EQ(CallSite::prepare(ts.site(), ts.target(), &cs), Status::ok);
    const auto site = reinterpret_cast<std::uintptr_t>(ts.site());
    const auto target = reinterpret_cast<std::uintptr_t>(ts.target());
    const Bytes5& a = cs.active_bytes();
    const Bytes5& b = cs.inactive_bytes();
    // A concurrent fetch may combine the front line of one state with the back line of the
    // other; each mix must be a complete instruction (in fact one of the two states).
    const unsigned cut = split == 0 ? 5 : split;
    for (int front = 0; front < 2; ++front)
      for (int back = 0; back < 2; ++back) {
        Bytes5 mix;
        for (unsigned i = 0; i < 5; ++i) mix[i] = (i < cut ? (front ? a : b) : (back ? a : b))[i];
        char what[64];
        std::snprintf(what, sizeof what, "split %u front %c back %c", split, front ? 'A' : 'I',
                      back ? 'A' : 'I');
        EXPECT_TRUE(mix == a || mix == b) << what;
        expect_complete(mix, site, target, what);
      }
  }
}

TEST(X86Zydis, NamedEncodings) {
  std::uint8_t buf[16];
  std::memset(buf, x86::kInvalid64, sizeof buf);
  std::memcpy(buf, x86::kNop5.data(), 5);
  Decoded d = decode(buf, sizeof buf, 0x1000);
  EXPECT_EQ(d.mnemonic, ZYDIS_MNEMONIC_NOP);
  EXPECT_EQ(d.length, 5u);
  std::memcpy(buf, testsupport::kNop5Prefixed.data(), 5);
  d = decode(buf, sizeof buf, 0x1000);
  EXPECT_EQ(d.mnemonic, ZYDIS_MNEMONIC_NOP);
  EXPECT_EQ(d.length, 5u);
  std::memcpy(buf, testsupport::kUd2.data(), 2);
  EXPECT_EQ(decode(buf, sizeof buf, 0x1000).mnemonic, ZYDIS_MNEMONIC_UD2);
  for (std::uint8_t op : testsupport::kInvalidIn64) {
    buf[0] = op;
    EXPECT_FALSE(decode(buf, sizeof buf, 0x1000).ok) << "opcode " << int{op};
  }
  buf[0] = x86::kInvalid64;
  EXPECT_FALSE(decode(buf, sizeof buf, 0x1000).ok);
}

}  // namespace
}  // namespace crossmod
