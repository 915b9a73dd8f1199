// Decoding and relocation on hand-assembled byte sequences: boundaries, refusals, and
// the exact bytes emitted for RIP-relative operands, jcc, jmp and call.
#include "relocate.hpp"

#include <Zydis/Zydis.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "crossmod/elf_functions.hpp"
#include "crossmod/tracepoint.hpp"
#include "pool.hpp"

namespace crossmod::tp {
namespace {

using Bytes = std::vector<std::uint8_t>;

Analysis analyze_ok(const Bytes& b, std::uintptr_t at = 0x10000) {
  Analysis a;
  EXPECT_EQ(analyze(b.data(), b.size(), at, &a), Status::ok);
  return a;
}

std::int32_t rel32_at(const std::uint8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// push rbp; mov rbp, rsp; sub rsp, 0x10; ret
const Bytes kPrologue = {0x55, 0x48, 0x89, 0xE5, 0x48, 0x83, 0xEC, 0x10, 0xC3};

TEST(Analyze, PrologueBoundaries) {
  const Analysis a = analyze_ok(kPrologue);
  EXPECT_EQ(a.count, 3);
  EXPECT_EQ(a.replaced_len, 8);
  EXPECT_EQ(a.offset[1], 1);
  EXPECT_EQ(a.offset[2], 4);
  EXPECT_EQ(a.boundary_mask, (1u << 1) | (1u << 4));
  EXPECT_EQ(a.inward_branches, 0u);
  EXPECT_FALSE(a.scan_incomplete);
}

TEST(Analyze, TooShort) {
  Analysis a;
  const Bytes ret = {0xC3};
  EXPECT_EQ(analyze(ret.data(), ret.size(), 0x1000, &a), Status::too_short);
  // xor eax,eax; ret; then padding that is not part of the function.
  const Bytes xor_ret = {0x31, 0xC0, 0xC3, 0x90, 0x90, 0x90, 0x90, 0x90};
  EXPECT_EQ(analyze(xor_ret.data(), xor_ret.size(), 0x1000, &a), Status::too_short);
  // Symbol size 4 cuts the prologue.
  EXPECT_EQ(analyze(kPrologue.data(), 4, 0x1000, &a), Status::too_short);
  // Symbol size 6 ends inside `sub rsp, 0x10`.
  EXPECT_EQ(analyze(kPrologue.data(), 6, 0x1000, &a), Status::too_short);
}

TEST(Analyze, Unsupported) {
  Analysis a;
  const Bytes jrcxz = {0xE3, 0x05, 0x48, 0x89, 0xE5, 0xC3, 0x90, 0x90, 0x90};
  EXPECT_EQ(analyze(jrcxz.data(), jrcxz.size(), 0x1000, &a), Status::unsupported_instruction);
  const Bytes loop = {0x48, 0x89, 0xE5, 0xE2, 0xFB, 0xC3};
  EXPECT_EQ(analyze(loop.data(), loop.size(), 0x1000, &a), Status::unsupported_instruction);
  const Bytes int3 = {0xCC, 0x48, 0x89, 0xE5, 0x90, 0xC3};
  EXPECT_EQ(analyze(int3.data(), int3.size(), 0x1000, &a), Status::unsupported_instruction);
}

TEST(Analyze, DecodeError) {
  Analysis a;
  const Bytes bad = {0x06, 0x90, 0x90, 0x90, 0x90, 0xC3};  // PUSH ES: invalid in 64-bit
  EXPECT_EQ(analyze(bad.data(), bad.size(), 0x1000, &a), Status::decode_error);
}

TEST(Analyze, BranchIntoRange) {
  // ... ; jmp rel8 from offset 8 (next 10) to: 1 (a boundary), 2 (inside mov), 0 (start).
  Bytes f = {0x55, 0x48, 0x89, 0xE5, 0x48, 0x83, 0xEC, 0x10, 0xEB, 0x00, 0xC3};
  Analysis a;
  f[9] = static_cast<std::uint8_t>(1 - 10);
  ASSERT_EQ(analyze(f.data(), f.size(), 0x1000, &a), Status::ok);
  EXPECT_EQ(a.inward_branches, 1u);
  f[9] = static_cast<std::uint8_t>(2 - 10);
  EXPECT_EQ(analyze(f.data(), f.size(), 0x1000, &a), Status::branch_into_range);
  f[9] = static_cast<std::uint8_t>(7 - 10);  // offset 7: inside `sub rsp` beyond the jump
  EXPECT_EQ(analyze(f.data(), f.size(), 0x1000, &a), Status::branch_into_range);
  f[9] = static_cast<std::uint8_t>(0 - 10);
  ASSERT_EQ(analyze(f.data(), f.size(), 0x1000, &a), Status::ok);
  EXPECT_EQ(a.inward_branches, 0u);
  // A jcc rel32 far in the function, into offset 3.
  Bytes g = kPrologue;
  g.pop_back();
  g.insert(g.end(), 40, 0x90);
  const std::size_t at = g.size();
  g.insert(g.end(), {0x0F, 0x85, 0, 0, 0, 0, 0xC3});
  const std::int32_t rel = 3 - static_cast<std::int32_t>(at + 6);
  std::memcpy(&g[at + 2], &rel, 4);
  EXPECT_EQ(analyze(g.data(), g.size(), 0x1000, &a), Status::branch_into_range);
}

TEST(Analyze, ScanStopsAtData) {
  // Undecodable bytes, then what a byte-wise reading takes for a jmp rel8 back into the
  // replaced range: the decoding scan runs, stops at the data and says so.
  Bytes f = kPrologue;
  f.pop_back();
  f.push_back(0x06);  // not code
  const std::size_t at = f.size();
  f.insert(f.end(), {0xEB, static_cast<std::uint8_t>(2 - static_cast<int>(at + 2)), 0xC3});
  const Analysis a = analyze_ok(f);
  EXPECT_TRUE(a.scan_incomplete);
  // Data with nothing anywhere that could branch into the range: the byte filter rules
  // every branch out, decodable or not; nothing is incomplete.
  Bytes g = kPrologue;
  g.insert(g.end() - 1, 0x06);
  EXPECT_FALSE(analyze_ok(g).scan_incomplete);
}

// The byte filter in front of the scan must see every relative-branch form: each one
// aimed inside `mov rbp, rsp` (offset 2) is refused; aimed at offset 0 (outside the
// range) it is not. Bytes after kPrologue's replaced 8, then a ret.
TEST(Analyze, EveryRelativeBranchFormIsSeen) {
  struct Form {
    Bytes head;         // prefixes + opcode
    unsigned imm_len;   // 1, 2 or 4
  };
  const Form forms[] = {
      {{0x74}, 1},             {{0x7F}, 1},       {{0xE0}, 1},       {{0xE1}, 1},
      {{0xE2}, 1},             {{0xE3}, 1},       {{0x67, 0xE3}, 1}, {{0xEB}, 1},
      {{0xE8}, 4},             {{0xE9}, 4},       {{0x0F, 0x80}, 4}, {{0x0F, 0x8F}, 4},
      {{0x66, 0xE9}, 4},       {{0xF2, 0xE9}, 4}, {{0x2E, 0x74}, 1}, {{0x41, 0xE8}, 4},
      {{0xC7, 0xF8}, 4},       {{0x66, 0xC7, 0xF8}, 2},
  };
  for (const Form& f : forms) {
    for (const int target : {2, 0}) {
      Bytes b(kPrologue.begin(), kPrologue.end() - 1);
      b.insert(b.end(), 5, 0x90);
      b.insert(b.end(), f.head.begin(), f.head.end());
      const std::size_t end = b.size() + f.imm_len;
      const std::int64_t rel = target - static_cast<std::int64_t>(end);
      for (unsigned i = 0; i < f.imm_len; ++i) b.push_back(static_cast<std::uint8_t>(rel >> (8 * i)));
      b.push_back(0xC3);
      Analysis a;
      const Status want = target == 2 ? Status::branch_into_range : Status::ok;
      EXPECT_EQ(analyze(b.data(), b.size(), 0x1000, &a), want)
          << "opcode " << std::hex << int(f.head.back()) << " target " << target;
    }
  }
}

struct Reloc {
  std::uint8_t out[256];
  std::size_t used = 0;
  std::uint16_t off[5] = {};
};

Status reloc(const Bytes& b, std::uintptr_t addr, std::uintptr_t at, Reloc* r) {
  Analysis a;
  EXPECT_EQ(analyze(b.data(), b.size(), addr, &a), Status::ok);
  std::memset(r->out, 0, sizeof r->out);
  return detail::relocate(b.data(), addr, a, at, r->out, sizeof r->out, &r->used, r->off);
}

// relocate() works from what analyze_head kept of each instruction (Analysis::kind and
// the rest), not from a decoding of its own: an Analysis it did not make is refused.
TEST(Relocate, RefusesAnAnalysisNotMadeByTheAnalysis) {
  Analysis a;
  a.count = 1;
  a.length[0] = 5;
  a.replaced_len = 5;
  Reloc r;
  EXPECT_EQ(
      detail::relocate(kPrologue.data(), 0x10000, a, 0x20000, r.out, sizeof r.out, &r.used, r.off),
      Status::bad_state);
  EXPECT_EQ(detail::analyze_scan(kPrologue.data(), kPrologue.size(), 0x10000, &a),
            Status::bad_state);
}

TEST(Relocate, PlainCopyAndJumpBack) {
  Reloc r;
  ASSERT_EQ(reloc(kPrologue, 0x10000, 0x20000, &r), Status::ok);
  EXPECT_EQ(std::memcmp(r.out, kPrologue.data(), 8), 0);
  EXPECT_EQ(r.off[1], 1);
  EXPECT_EQ(r.off[2], 4);
  EXPECT_EQ(r.out[8], 0xE9);
  EXPECT_EQ(rel32_at(r.out + 9), 0x10008 - (0x20000 + 13));
  EXPECT_EQ(r.used, 13u);
}

TEST(Relocate, RipRelativeDisplacementRewritten) {
  // mov rax, [rip+0x10]; ret
  const Bytes f = {0x48, 0x8B, 0x05, 0x10, 0x00, 0x00, 0x00, 0xC3};
  Reloc r;
  ASSERT_EQ(reloc(f, 0x10000, 0x50000, &r), Status::ok);
  EXPECT_EQ(std::memcmp(r.out, f.data(), 3), 0);
  // Same absolute target 0x10017 from the new end of instruction 0x50007.
  EXPECT_EQ(rel32_at(r.out + 3), 0x10017 - 0x50007);
  // Out of reach: the copy 3 GiB away.
  EXPECT_EQ(reloc(f, 0x10000, 0x10000 + (std::uintptr_t{3} << 30), &r), Status::out_of_range);
}

TEST(Relocate, JccRel8Widened) {
  // je +0x10; mov rbp, rsp; ret
  const Bytes f = {0x74, 0x10, 0x48, 0x89, 0xE5, 0xC3};
  Reloc r;
  ASSERT_EQ(reloc(f, 0x10000, 0x20000, &r), Status::ok);
  EXPECT_EQ(r.out[0], 0x0F);
  EXPECT_EQ(r.out[1], 0x84);  // JE rel32
  EXPECT_EQ(rel32_at(r.out + 2), 0x10012 - 0x20006);
  EXPECT_EQ(r.off[1], 6);
  EXPECT_EQ(std::memcmp(r.out + 6, f.data() + 2, 3), 0);
}

TEST(Relocate, JccFarBecomesInvertedJccOverAbsoluteJump) {
  const Bytes f = {0x75, 0x10, 0x48, 0x89, 0xE5, 0xC3};  // jne +0x10
  Reloc r;
  const std::uintptr_t at = 0x10000 + (std::uintptr_t{3} << 30);
  ASSERT_EQ(reloc(f, 0x10000, at, &r), Status::ok);
  EXPECT_EQ(r.out[0], 0x74);  // JE over
  EXPECT_EQ(r.out[1], 14);
  EXPECT_EQ(r.out[2], 0xFF);
  EXPECT_EQ(r.out[3], 0x25);
  std::uint64_t abs;
  std::memcpy(&abs, r.out + 8, 8);
  EXPECT_EQ(abs, 0x10012u);
}

TEST(Relocate, JmpRel8Widened) {
  const Bytes f = {0x48, 0x89, 0xE5, 0xEB, 0x20, 0xC3};  // mov; jmp +0x20
  Reloc r;
  ASSERT_EQ(reloc(f, 0x10000, 0x20000, &r), Status::ok);
  EXPECT_EQ(r.out[3], 0xE9);
  EXPECT_EQ(rel32_at(r.out + 4), 0x10025 - 0x20008);
}

TEST(Relocate, CallPushesOriginalReturnAddress) {
  const Bytes f = {0xE8, 0x00, 0x01, 0x00, 0x00, 0xC3};  // call +0x100
  Reloc r;
  ASSERT_EQ(reloc(f, 0x10000, 0x20000, &r), Status::ok);
  EXPECT_EQ(r.out[0], 0x50);  // push rax
  EXPECT_EQ(r.out[1], 0x48);
  EXPECT_EQ(r.out[2], 0xB8);  // mov rax, imm64
  std::uint64_t ret;
  std::memcpy(&ret, r.out + 3, 8);
  EXPECT_EQ(ret, 0x10005u);
  const std::uint8_t xchg[4] = {0x48, 0x87, 0x04, 0x24};
  EXPECT_EQ(std::memcmp(r.out + 11, xchg, 4), 0);
  EXPECT_EQ(r.out[15], 0xE9);
  EXPECT_EQ(rel32_at(r.out + 16), 0x10105 - 0x20014);
}

TEST(Relocate, RipRelativeWithTrailingImmediate) {
  // cmp dword [rip+0x20], 7 (83 /7 disp32 imm8): the displacement is relative to the end
  // of the whole instruction, immediate included.
  const Bytes f = {0x83, 0x3D, 0x20, 0x00, 0x00, 0x00, 0x07, 0xC3};
  Reloc r;
  ASSERT_EQ(reloc(f, 0x10000, 0x30000, &r), Status::ok);
  EXPECT_EQ(rel32_at(r.out + 2), 0x10027 - 0x30007);
  EXPECT_EQ(r.out[6], 0x07);
}

TEST(Relocate, TailJumpStubAndFarTargets) {
  // jmp rel32 alone is a whole 5-byte function (a tail-call stub): accepted.
  const Bytes f = {0xE9, 0x00, 0x10, 0x00, 0x00};
  Reloc r;
  ASSERT_EQ(reloc(f, 0x10000, 0x20000, &r), Status::ok);
  EXPECT_EQ(r.out[0], 0xE9);
  EXPECT_EQ(rel32_at(r.out + 1), 0x11005 - 0x20005);
  // The same 3 GiB away: jmp [rip+0]; abs64.
  ASSERT_EQ(reloc(f, 0x10000, 0x10000 + (std::uintptr_t{3} << 30), &r), Status::ok);
  EXPECT_EQ(r.out[0], 0xFF);
  EXPECT_EQ(r.out[1], 0x25);
  std::uint64_t abs;
  std::memcpy(&abs, r.out + 6, 8);
  EXPECT_EQ(abs, 0x11005u);
  // A far call keeps the original return address and jumps through an absolute literal.
  const Bytes c = {0xE8, 0x00, 0x01, 0x00, 0x00, 0xC3};
  ASSERT_EQ(reloc(c, 0x10000, 0x10000 + (std::uintptr_t{3} << 30), &r), Status::ok);
  std::memcpy(&abs, r.out + 3, 8);
  EXPECT_EQ(abs, 0x10005u);
  EXPECT_EQ(r.out[15], 0xFF);
  EXPECT_EQ(r.out[16], 0x25);
  std::memcpy(&abs, r.out + 21, 8);
  EXPECT_EQ(abs, 0x10105u);
}

TEST(Analyze, MoreRefusals) {
  Analysis a;
  // xbegin rel32 (C7 F8): transactional, its abort address cannot move.
  const Bytes xbegin = {0xC7, 0xF8, 0x10, 0x00, 0x00, 0x00, 0xC3};
  EXPECT_EQ(analyze(xbegin.data(), xbegin.size(), 0x1000, &a), Status::unsupported_instruction);
  // 66-prefixed jmp rel16: truncates RIP to 16 bits.
  const Bytes jmp16 = {0x66, 0xE9, 0x10, 0x00, 0x90, 0x90, 0xC3};
  EXPECT_EQ(analyze(jmp16.data(), jmp16.size(), 0x1000, &a), Status::unsupported_instruction);
  // jmp rel8 as the first instruction: the function ends after 2 bytes.
  const Bytes jmp8 = {0xEB, 0x10, 0x90, 0x90, 0x90, 0x90, 0xC3};
  EXPECT_EQ(analyze(jmp8.data(), jmp8.size(), 0x1000, &a), Status::too_short);
}


// analyze() decodes the operands of the scanned instructions only when the encoding has a
// relative immediate. Against a reference that fully decodes every instruction (as
// analyze() did before), on every function of every object loaded here (libc, libstdc++,
// libZydis, this binary): the same status, inward branches and scan end.
TEST(Analyze, ScanMatchesFullDecodeOnLoadedCode) {
  std::vector<ElfFunction> fns;
  ASSERT_TRUE(enumerate_functions(&fns));
  ZydisDecoder dec;
  ASSERT_TRUE(ZYAN_SUCCESS(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)));
  std::size_t compared = 0, into_range = 0, inward = 0, incomplete = 0;
  for (const ElfFunction& f : fns) {
    const auto* code = reinterpret_cast<const std::uint8_t*>(f.addr);
    Analysis a;
    const Status got = analyze(code, f.size, f.addr, &a);
    if (got != Status::ok && got != Status::branch_into_range) continue;  // decided before the scan
    if (a.replaced_len < 5) continue;  // (not reached: the first part always sets it first)
    // Reference: every instruction fully decoded; the first relative immediate operand's
    // target checked against the replaced range.
    Status want = Status::ok;
    std::uint32_t want_inward = 0;
    bool want_incomplete = false;
    auto check = [&](const ZydisDecodedInstruction& ins, const ZydisDecodedOperand* ops,
                     std::uintptr_t at) {
      if ((ins.attributes & ZYDIS_ATTRIB_IS_RELATIVE) == 0) return true;
      for (unsigned i = 0; i < ins.operand_count_visible; ++i) {
        if (ops[i].type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !ops[i].imm.is_relative) continue;
        ZyanU64 t = 0;
        if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&ins, &ops[i], at, &t))) return true;
        if (t <= f.addr || t >= f.addr + a.replaced_len) return true;
        const auto b = static_cast<unsigned>(t - f.addr);
        if (b < 5 && (a.boundary_mask & (1u << b)) != 0) {
          ++want_inward;
          return true;
        }
        return false;
      }
      return true;
    };
    ZydisDecodedInstruction ins;
    ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
    for (std::size_t i = 0; i < a.count && want == Status::ok; ++i) {
      ASSERT_TRUE(ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, code + a.offset[i], a.length[i], &ins, ops)));
      if (!check(ins, ops, f.addr + a.offset[i])) want = Status::branch_into_range;
    }
    for (std::size_t pos = a.replaced_len; pos < f.size && want == Status::ok;) {
      if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, code + pos, f.size - pos, &ins, ops))) {
        want_incomplete = true;
        break;
      }
      if (!check(ins, ops, f.addr + pos)) want = Status::branch_into_range;
      pos += ins.length;
    }
    ASSERT_EQ(got, want) << f.name << " in " << f.object;
    if (got == Status::ok) {
      ASSERT_EQ(a.inward_branches, want_inward) << f.name << " in " << f.object;
      // The byte filter can clear a function the decoding would stop in (nothing at any
      // offset branches into the range); it never reports incomplete where decoding did not.
      if (a.scan_incomplete) {
        ASSERT_TRUE(want_incomplete) << f.name << " in " << f.object;
      }
    }
    ++compared;
    into_range += got == Status::branch_into_range;
    inward += a.inward_branches > 0;
    incomplete += a.scan_incomplete;
  }
  // Thousands of functions (libc alone), branches back into the range among them (2 here);
  // branch_into_range is rarer (none here; 16 python3 functions), checked by BranchIntoRange.
  EXPECT_GT(compared, 1000u);
  EXPECT_GT(inward, 0u);
  std::printf("compared %zu functions: %zu branch_into_range, %zu with inward branches, %zu scans incomplete\n",
              compared, into_range, inward, incomplete);
}

// The byte filter's two-part scan (rel8 forms only near the range, SSE2 for the rest)
// answers as a byte-by-byte check of every form at every offset, the filter's definition:
// on random bytes rich in branch opcodes, on every loaded function, any range and start.
bool candidate_reference(const std::uint8_t* code, std::size_t size, std::size_t from, std::uintptr_t addr,
                         std::size_t lo, std::size_t hi) {
  const auto lands = [&](std::size_t end, std::int64_t rel) {
    const std::uintptr_t t = addr + end + static_cast<std::uintptr_t>(rel);
    return t >= addr + lo && t <= addr + hi;
  };
  const auto rel32 = [code](std::size_t at) {
    std::int32_t v;
    std::memcpy(&v, code + at, 4);
    return static_cast<std::int64_t>(v);
  };
  for (std::size_t p = from; p < size; ++p) {
    const std::uint8_t b = code[p];
    if ((b >= 0x70 && b <= 0x7F) || (b >= 0xE0 && b <= 0xE3) || b == 0xEB) {
      if (p + 2 <= size && lands(p + 2, static_cast<std::int8_t>(code[p + 1]))) return true;
    } else if (b == 0xE8 || b == 0xE9) {
      if (p + 5 <= size && lands(p + 5, rel32(p + 1))) return true;
    } else if (b == 0x0F) {
      if (p + 6 <= size && code[p + 1] >= 0x80 && code[p + 1] <= 0x8F && lands(p + 6, rel32(p + 2))) return true;
    } else if (b == 0xC7 && p + 1 < size && code[p + 1] == 0xF8) {
      std::int16_t v16;
      if (p + 4 <= size && (std::memcpy(&v16, code + p + 2, 2), lands(p + 4, v16))) return true;
      if (p + 6 <= size && lands(p + 6, rel32(p + 2))) return true;
    }
  }
  return false;
}

TEST(Analyze, ByteFilterMatchesItsDefinition) {
  std::uint64_t x = 0x9E3779B97F4A7C15ull;  // xorshift: the same bytes every run
  const auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  constexpr std::uint8_t kLeads[] = {0x70, 0x7F, 0xE0, 0xE3, 0xEB, 0xE8, 0xE9, 0x0F, 0x80, 0x8F, 0xC7, 0xF8, 0xFF, 0x00};
  std::size_t agree_true = 0, agree_false = 0;
  Bytes buf(4096);
  for (int round = 0; round < 4000; ++round) {
    const std::size_t size = 1 + next() % buf.size();
    for (std::size_t i = 0; i < size; ++i)
      buf[i] = (next() % 3 == 0) ? kLeads[next() % sizeof kLeads] : static_cast<std::uint8_t>(next());
    const std::uintptr_t addr = 0x400000 + (next() % 0x100000);
    const std::size_t from = next() % 16, lo = next() % 8, hi = lo + next() % (next() % 4 == 0 ? 4096 : 8);
    const bool want = candidate_reference(buf.data(), size, from, addr, lo, hi);
    ASSERT_EQ(detail::branch_candidate_in(buf.data(), size, from, addr, lo, hi), want)
        << "round " << round << " size " << size << " from " << from << " range " << lo << ".." << hi;
    (want ? agree_true : agree_false)++;
  }
  std::vector<ElfFunction> fns;
  ASSERT_TRUE(enumerate_functions(&fns));
  for (const ElfFunction& f : fns) {
    const auto* code = reinterpret_cast<const std::uint8_t*>(f.addr);
    const std::size_t from = f.size > 8 ? 5 + next() % 4 : 0, lo = 1 + next() % 4, hi = lo + next() % 6;
    const bool want = candidate_reference(code, f.size, from, f.addr, lo, hi);
    ASSERT_EQ(detail::branch_candidate_in(code, f.size, from, f.addr, lo, hi), want) << f.name << " in " << f.object;
    (want ? agree_true : agree_false)++;
  }
  EXPECT_GT(agree_true, 500u);  // both answers well represented
  EXPECT_GT(agree_false, 500u);
}

// What analyze_head keeps of each replaced instruction for relocate() (Analysis::kind,
// disp_offset, cond, target_rel; it decodes operands only for relative instructions)
// against a full decoding of the same bytes, over the heads of every function loaded in
// this test (libc, libstdc++, gtest, the test itself; the same at every prefix).
TEST(Analyze, KeptInstructionsMatchAFullDecoding) {
  ZydisDecoder dec;
  ASSERT_TRUE(
      ZYAN_SUCCESS(ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64)));
  std::vector<ElfFunction> fns;
  ASSERT_TRUE(enumerate_functions(&fns));
  std::size_t heads = 0, rip = 0, branches = 0, jccs = 0;
  for (const ElfFunction& f : fns) {
    const auto* code = reinterpret_cast<const std::uint8_t*>(f.addr);
    for (unsigned prefix = 0; prefix <= detail::kMaxPrefix; ++prefix) {
      Analysis a;
      if (detail::analyze_head(code, f.size, f.addr, &a, prefix) != Status::ok) continue;
      ++heads;
      for (unsigned i = 0; i < a.count; ++i) {
        ZydisDecodedInstruction ins;
        ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
        ASSERT_TRUE(
            ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, code + a.offset[i], a.length[i], &ins, ops)));
        ASSERT_EQ(ins.length, a.length[i]);
        const auto kind = static_cast<detail::InsKind>(a.kind[i]);
        ASSERT_NE(kind, detail::InsKind::none) << f.name;
        ASSERT_NE(kind, detail::InsKind::unsupported) << f.name;
        const bool relative = (ins.attributes & ZYDIS_ATTRIB_IS_RELATIVE) != 0;
        bool imm_rel = false;
        for (unsigned k = 0; k < ins.operand_count_visible; ++k) {
          if (ops[k].type != ZYDIS_OPERAND_TYPE_IMMEDIATE || !ops[k].imm.is_relative) continue;
          imm_rel = true;
          ZyanU64 t = 0;
          ASSERT_TRUE(
              ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&ins, &ops[k], f.addr + a.offset[i], &t)));
          EXPECT_EQ(f.addr + static_cast<std::uintptr_t>(a.target_rel[i]), t)
              << f.name << " in " << f.object;
          ++branches;
        }
        if (!relative) {
          EXPECT_EQ(kind, detail::InsKind::plain) << f.name;
        } else if (imm_rel) {
          EXPECT_TRUE(kind == detail::InsKind::jmp || kind == detail::InsKind::jcc ||
                      kind == detail::InsKind::call)
              << f.name;
          if (kind == detail::InsKind::jcc) {
            EXPECT_EQ(a.cond[i], ins.opcode & 0x0F) << f.name;
            ++jccs;
          }
        } else {
          EXPECT_EQ(kind, detail::InsKind::rip_mem) << f.name;
          EXPECT_EQ(a.disp_offset[i], ins.raw.disp.offset) << f.name;
          ++rip;
        }
      }
    }
  }
  // Every kind of kept data is exercised by real code.
  EXPECT_GT(heads, 1000u);
  EXPECT_GT(rip, 100u);
  EXPECT_GT(branches, 10u);
  std::printf("heads %zu, RIP-relative %zu, relative branches %zu (jcc %zu)\n", heads, rip,
              branches, jccs);
}

// choose_head: the smallest number of 0x2E prefixes whose jump can have an entry slot.
// Pure arithmetic on the address (nothing is mapped): kLow is python3.11's non-PIE text,
// where a boundary at offset 4 (rel32 byte 3 = 0xCC: about -832 MiB) is impossible.
constexpr std::uintptr_t kLow = 0x41f000;
constexpr std::uintptr_t kHigh = 0x7f0000000000;

void expect_same(const Analysis& a, const Analysis& b) {
  EXPECT_EQ(a.replaced_len, b.replaced_len);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(std::memcmp(a.offset, b.offset, sizeof a.offset), 0);
  EXPECT_EQ(std::memcmp(a.length, b.length, sizeof a.length), 0);
  EXPECT_EQ(a.boundary_mask, b.boundary_mask);
  EXPECT_EQ(a.prefix_len, b.prefix_len);
}

Analysis choose_ok(const Bytes& b, std::uintptr_t at, bool want_entry) {
  Analysis a;
  bool entry_ok = false;
  EXPECT_EQ(detail::choose_head(b.data(), b.size(), at, &a, &entry_ok), Status::ok);
  EXPECT_EQ(entry_ok, want_entry);
  return a;
}

// mov rax, [rdi+0x18]; mov rax, [rax+0x20]; ret (PyFrame_GetCode's shape: boundaries 0, 4)
const Bytes kTwoLoads = {0x48, 0x8B, 0x47, 0x18, 0x48, 0x8B, 0x40, 0x20, 0xC3};

TEST(ChooseHead, PrefixZeroWhereverItWorks) {
  const Analysis a = choose_ok(kTwoLoads, kHigh, true);
  EXPECT_EQ(a.prefix_len, 0);
  EXPECT_EQ(a.replaced_len, 8);
  EXPECT_EQ(a.boundary_mask, 1u << 4);
  // Identical to the prefix-less analysis, field by field.
  expect_same(a, analyze_ok(kTwoLoads, kHigh));
  // Low in memory, a boundary at 3 only fixes rel32 byte 2: still prefix 0.
  // test rdi, rdi; je +5; lea rax, [rdi+1]; ret; xor eax, eax; ret
  EXPECT_EQ(choose_ok({0x48, 0x85, 0xFF, 0x74, 0x05, 0x48, 0x8D, 0x47, 0x01, 0xC3, 0x31, 0xC0,
                       0xC3},
                      kLow, true)
                .prefix_len,
            0);
}

TEST(ChooseHead, OnePrefixMovesTheBoundaryOffTheTopByte) {
  const Analysis a = choose_ok(kTwoLoads, kLow, true);
  EXPECT_EQ(a.prefix_len, 1);
  EXPECT_EQ(a.count, 2);
  EXPECT_EQ(a.replaced_len, 8);  // >= 6 bytes: both loads
  EXPECT_EQ(a.boundary_mask, 1u << 4);
  std::uint8_t rel_mask = 0;
  ASSERT_TRUE(detail::prefixed_mask(a.boundary_mask, 1, &rel_mask));
  EXPECT_EQ(rel_mask, 1u << 3);  // rel32 byte 2 (offset 4 = 1 prefix + opcode + 2)
  // push r15; push r14; xor eax, eax; pop r14; ... (boundaries 2, 4, 6, 8): one prefix
  // covers 6 bytes, boundaries 2 and 4 fix rel32 bytes 0 and 2.
  const Analysis b = choose_ok({0x41, 0x57, 0x41, 0x56, 0x31, 0xC0, 0x41, 0x5E, 0x41, 0x5F, 0xC3},
                               kLow, true);
  EXPECT_EQ(b.prefix_len, 1);
  EXPECT_EQ(b.replaced_len, 6);
  EXPECT_EQ(b.boundary_mask, (1u << 2) | (1u << 4));
}

TEST(ChooseHead, TwoAndThreePrefixes) {
  // mov rax, [rdi+0x18]; push rax; mov rax, rax; ... (boundaries 4, 5): one prefix still
  // fixes rel32 byte 3 (offset 5); two fix bytes 1 and 2.
  const Analysis a =
      choose_ok({0x48, 0x8B, 0x47, 0x18, 0x50, 0x48, 0x89, 0xC0, 0x58, 0xC3}, kLow, true);
  EXPECT_EQ(a.prefix_len, 2);
  EXPECT_EQ(a.replaced_len, 8);
  EXPECT_EQ(a.boundary_mask, (1u << 4) | (1u << 5));
  // Boundaries 4, 5, 6: three prefixes (rel32 bytes 0, 1, 2).
  const Analysis b =
      choose_ok({0x48, 0x8B, 0x47, 0x18, 0x50, 0x51, 0x48, 0x89, 0xC0, 0x59, 0x58, 0xC3}, kLow,
                true);
  EXPECT_EQ(b.prefix_len, 3);
  EXPECT_EQ(b.count, 4);
  EXPECT_EQ(b.replaced_len, 9);
  EXPECT_EQ(b.boundary_mask, (1u << 4) | (1u << 5) | (1u << 6));
}

TEST(ChooseHead, NoPrefixHelpsKeepsThePrefixZeroAnalysis) {
  // push rbx; mov rax, rdi; xor ebx, ebx; pop rbx; ret (boundaries 1, 4): byte 1 would be
  // a prefix or the opcode.
  const Bytes boundary1 = {0x53, 0x48, 0x89, 0xF8, 0x31, 0xDB, 0x5B, 0xC3};
  const Analysis a = choose_ok(boundary1, kLow, false);
  expect_same(a, analyze_ok(boundary1, kLow));
  EXPECT_EQ(a.prefix_len, 0);
  Analysis longer;
  EXPECT_EQ(detail::analyze_head(boundary1.data(), boundary1.size(), kLow, &longer, 1),
            Status::no_trampoline_space);
  // mov rax, [rdi+0x18]; ret: the function ends before 6 bytes, no longer jump fits.
  const Bytes five = {0x48, 0x8B, 0x47, 0x18, 0xC3};
  EXPECT_EQ(choose_ok(five, kLow, false).replaced_len, 5);
  EXPECT_EQ(detail::analyze_head(five.data(), five.size(), kLow, &longer, 1), Status::too_short);
  // A refusal of the prefix-0 head is returned as is.
  bool entry_ok = true;
  Analysis c;
  EXPECT_EQ(detail::choose_head(five.data(), 4, kLow, &c, &entry_ok), Status::too_short);
  EXPECT_FALSE(entry_ok);
}

}  // namespace
}  // namespace crossmod::tp
