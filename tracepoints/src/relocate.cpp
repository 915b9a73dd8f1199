// Decoding (Zydis) of a tracepoint's replaced instructions, the scan of the rest of the
// function for branches into them, and their relocation: RIP-relative operands get a new
// disp32, relative jumps/jcc become rel32 forms (or an indirect jump when out of rel32
// reach), and a relative call becomes "push the ORIGINAL return address; jmp target" so
// that the callee returns into the original code and unwinders see a known address.
// Thread safety: pure functions; no allocation; Zydis decoding is reentrant.
#include "relocate.hpp"

#include <Zydis/Zydis.h>
#include <emmintrin.h>

#include <algorithm>
#include <cstring>

#include "crossmod/tracepoint.hpp"
#include "encoding.hpp"
#include "pool.hpp"

namespace crossmod::tp {

namespace {

constexpr std::size_t kJumpLen = 5;

struct Decoded {
  ZydisDecodedInstruction ins;
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT];
};

ZyanStatus decode_status(const ZydisDecoder& dec, const std::uint8_t* p, std::size_t avail,
                         Decoded* d) noexcept {
  return ZydisDecoderDecodeFull(&dec, p, avail, &d->ins, d->ops);
}
bool decode(const ZydisDecoder& dec, const std::uint8_t* p, std::size_t avail,
            Decoded* d) noexcept {
  return ZYAN_SUCCESS(decode_status(dec, p, avail, d));
}

ZydisDecoder make_decoder() noexcept {
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  return dec;
}

// Absolute target of a relative branch (immediate operand), if the instruction has one.
bool branch_target(const Decoded& d, std::uintptr_t at, std::uintptr_t* target) noexcept {
  if ((d.ins.attributes & ZYDIS_ATTRIB_IS_RELATIVE) == 0) return false;
  for (unsigned i = 0; i < d.ins.operand_count_visible; ++i) {
    const ZydisDecodedOperand& op = d.ops[i];
    if (op.type == ZYDIS_OPERAND_TYPE_IMMEDIATE && op.imm.is_relative) {
      ZyanU64 t = 0;
      if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&d.ins, &op, at, &t))) return false;
      *target = static_cast<std::uintptr_t>(t);
      return true;
    }
  }
  return false;
}

// Whether the encoding has a relative immediate (a branch displacement). branch_target()
// finds a target only in an immediate operand with imm.is_relative, which the decoder
// takes from these raw fields.
bool has_relative_immediate(const ZydisDecodedInstruction& ins) noexcept {
  return ins.raw.imm[0].is_relative || ins.raw.imm[1].is_relative;
}

}  // namespace

// Whether any offset in [from, size) could hold a relative branch into [addr + lo, addr +
// hi]: the opcode bytes of every x86-64 instruction with a relative immediate, in the
// decoder's default (Intel) branch semantics, where 0x66 does not shorten a near branch's
// rel32: Jcc rel8 (70-7F), LOOPNE/LOOPE/LOOP/JrCXZ rel8 (E0-E3), JMP rel8 (EB), CALL/JMP
// rel32 (E8, E9), Jcc rel32 (0F 80-8F), XBEGIN rel32 (C7 F8; rel16 after 0x66). Prefixes
// come before the opcode and do not move the target (the end of the instruction is the
// opcode's offset plus opcode and displacement). Reads only bytes inside the function.
//
// Every function of a traced pattern is scanned whole (python3 'Py*': ~1 MB of code, the
// largest single cost of its attach), so the scan has two parts. Up to hi + 126 a rel8
// may still reach back into the range, and every form is checked byte by byte; after it
// only the rel32 forms and XBEGIN can, whose lead bytes (E8, E9, 0F, C7) an SSE2 compare
// finds 16 bytes at a time. The answer is the byte-by-byte one's (relocate_test compares
// the two on random and real code).
namespace detail {
bool branch_candidate_in(const std::uint8_t* code, std::size_t size, std::size_t from,
                         std::uintptr_t addr, std::size_t lo, std::size_t hi) noexcept {
  const auto lands = [&](std::size_t end, std::int64_t rel) {
    const std::uintptr_t t = addr + end + static_cast<std::uintptr_t>(rel);
    return t >= addr + lo && t <= addr + hi;
  };
  const auto rel32 = [code](std::size_t at) {
    std::int32_t v;
    std::memcpy(&v, code + at, 4);
    return static_cast<std::int64_t>(v);
  };
  // The forms with a 32-bit (or XBEGIN's 16-bit) displacement, at p.
  const auto far_form = [&](std::size_t p) {
    const std::uint8_t b = code[p];
    if (b == 0xE8 || b == 0xE9) return p + 5 <= size && lands(p + 5, rel32(p + 1));
    if (b == 0x0F)
      return p + 6 <= size && code[p + 1] >= 0x80 && code[p + 1] <= 0x8F &&
             lands(p + 6, rel32(p + 2));
    if (b == 0xC7 && p + 1 < size && code[p + 1] == 0xF8) {
      std::int16_t v16;
      if (p + 4 <= size && (std::memcpy(&v16, code + p + 2, 2), lands(p + 4, v16))) return true;
      if (p + 6 <= size && lands(p + 6, rel32(p + 2))) return true;
    }
    return false;
  };
  // A rel8 at p ends at p + 2 and reaches back 128 bytes at most: past p = hi + 126 it
  // cannot land at or before hi.
  const std::size_t near_end = std::min(size, std::max(from, hi + 127));
  std::size_t p = from;
  for (; p < near_end; ++p) {
    const std::uint8_t b = code[p];
    if ((b >= 0x70 && b <= 0x7F) || (b >= 0xE0 && b <= 0xE3) || b == 0xEB) {
      if (p + 2 <= size && lands(p + 2, static_cast<std::int8_t>(code[p + 1]))) return true;
    } else if (far_form(p)) {
      return true;
    }
  }
  const __m128i e8 = _mm_set1_epi8(static_cast<char>(0xE8)),
                e9 = _mm_set1_epi8(static_cast<char>(0xE9));
  const __m128i f0 = _mm_set1_epi8(0x0F), c7 = _mm_set1_epi8(static_cast<char>(0xC7));
  for (; p + 16 <= size; p += 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(code + p));
    const __m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, e8), _mm_cmpeq_epi8(v, e9)),
                                     _mm_or_si128(_mm_cmpeq_epi8(v, f0), _mm_cmpeq_epi8(v, c7)));
    for (auto m = static_cast<unsigned>(_mm_movemask_epi8(hit)); m != 0; m &= m - 1)
      if (far_form(p + static_cast<std::size_t>(__builtin_ctz(m)))) return true;
  }
  for (; p < size; ++p)
    if (far_form(p)) return true;
  return false;
}
}  // namespace detail

namespace {

bool branch_candidate(const std::uint8_t* code, std::size_t size, std::size_t from,
                      std::uintptr_t addr) noexcept {
  return from > 1 && detail::branch_candidate_in(code, size, from, addr, 1, from - 1);
}

// Control does not fall through past this instruction.
bool ends_flow(const Decoded& d) noexcept {
  switch (d.ins.meta.category) {
    case ZYDIS_CATEGORY_RET:
    case ZYDIS_CATEGORY_UNCOND_BR:
      return true;
    default:
      break;
  }
  return d.ins.mnemonic == ZYDIS_MNEMONIC_UD2 || d.ins.mnemonic == ZYDIS_MNEMONIC_INT3 ||
         d.ins.mnemonic == ZYDIS_MNEMONIC_HLT;
}

using Kind = detail::InsKind;

Kind classify(const Decoded& d) noexcept {
  if (d.ins.mnemonic == ZYDIS_MNEMONIC_INT3) return Kind::unsupported;  // someone's probe
  if ((d.ins.attributes & ZYDIS_ATTRIB_IS_RELATIVE) == 0) return Kind::plain;
  bool imm_rel = false;
  for (unsigned i = 0; i < d.ins.operand_count_visible; ++i)
    if (d.ops[i].type == ZYDIS_OPERAND_TYPE_IMMEDIATE && d.ops[i].imm.is_relative) imm_rel = true;
  if (!imm_rel) {
    // RIP-relative memory operand: exactly one disp32 to rewrite.
    if (d.ins.raw.disp.size == 32) return Kind::rip_mem;
    return Kind::unsupported;
  }
  // A 66-prefixed near branch is rel16 with IP truncated on AMD but rel32 on Intel (the
  // prefix is ignored there; SDM Vol 2A "JMP", APM Vol 3 "JMP (Near)"): its length and
  // target depend on the vendor, so it is never relocated.
  if (d.ins.operand_width != 64 || (d.ins.attributes & ZYDIS_ATTRIB_HAS_OPERANDSIZE) != 0)
    return Kind::unsupported;
  switch (d.ins.mnemonic) {
    case ZYDIS_MNEMONIC_JMP:
      return Kind::jmp;
    case ZYDIS_MNEMONIC_CALL:
      return Kind::call;
    case ZYDIS_MNEMONIC_JB:
    case ZYDIS_MNEMONIC_JBE:
    case ZYDIS_MNEMONIC_JL:
    case ZYDIS_MNEMONIC_JLE:
    case ZYDIS_MNEMONIC_JNB:
    case ZYDIS_MNEMONIC_JNBE:
    case ZYDIS_MNEMONIC_JNL:
    case ZYDIS_MNEMONIC_JNLE:
    case ZYDIS_MNEMONIC_JNO:
    case ZYDIS_MNEMONIC_JNP:
    case ZYDIS_MNEMONIC_JNS:
    case ZYDIS_MNEMONIC_JNZ:
    case ZYDIS_MNEMONIC_JO:
    case ZYDIS_MNEMONIC_JP:
    case ZYDIS_MNEMONIC_JS:
    case ZYDIS_MNEMONIC_JZ:
      return Kind::jcc;
    default:
      return Kind::unsupported;  // loop*, jrcxz, xbegin: rel8-only or transactional
  }
}

// The condition code (low nibble of 70+cc / 0F 80+cc, SDM Vol 2 "Jcc").
std::uint8_t condition_code(const Decoded& d) noexcept {
  return static_cast<std::uint8_t>(d.ins.opcode & 0x0F);
}

// Decodes one instruction, its operands only when it is relative (classify and
// branch_target read them only then; a third of a full decode).
ZyanStatus decode_head_ins(const ZydisDecoder& dec, const std::uint8_t* p, std::size_t avail,
                           Decoded* d) noexcept {
  ZydisDecoderContext ctx;
  const ZyanStatus zs = ZydisDecoderDecodeInstruction(&dec, &ctx, p, avail, &d->ins);
  if (!ZYAN_SUCCESS(zs) || (d->ins.attributes & ZYDIS_ATTRIB_IS_RELATIVE) == 0) return zs;
  return ZydisDecoderDecodeOperands(&dec, &ctx, &d->ins, d->ops, d->ins.operand_count);
}

// Keeps what relocate() needs of replaced instruction i (at addr + off), classified k.
Status keep(const Decoded& d, Kind k, std::uintptr_t addr, std::size_t off, std::size_t i,
            Analysis* out) noexcept {
  out->kind[i] = static_cast<std::uint8_t>(k);
  if (k == Kind::rip_mem) out->disp_offset[i] = d.ins.raw.disp.offset;
  if (k == Kind::jcc) out->cond[i] = condition_code(d);
  if (k == Kind::jmp || k == Kind::jcc || k == Kind::call) {
    std::uintptr_t t = 0;
    if (!branch_target(d, addr + off, &t)) return Status::decode_error;
    out->target_rel[i] = static_cast<std::int64_t>(t - addr);
  }
  return Status::ok;
}

}  // namespace

Status analyze(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
               Analysis* out) noexcept {
  if (const Status s = detail::analyze_head(code, size, addr, out); s != Status::ok) return s;
  return detail::analyze_scan(code, size, addr, out);
}

namespace detail {

Status analyze_head(const std::uint8_t* code, std::size_t size, std::uintptr_t addr, Analysis* out,
                    unsigned prefix, std::size_t room) noexcept {
  *out = Analysis{};
  if (prefix > kMaxPrefix) return Status::bad_state;
  const std::size_t jump_len = kJumpLen + prefix;
  room = std::max(room, size);
  if (code == nullptr || room < jump_len) return Status::too_short;
  const ZydisDecoder dec = make_decoder();
  Decoded d;
  std::size_t off = 0;
  out->prefix_len = static_cast<std::uint8_t>(prefix);
  while (off < jump_len) {
    // The function's last instruction ended its flow here, and the padding after it holds
    // the rest of the jump (checked below): no instruction starts in it, so no boundary.
    if (off >= size) break;
    // A boundary on a prefix or the opcode: this jump length cannot work. (Checked before
    // decoding, so count stays <= 5: offset 0 and at most one per rel32 byte.)
    if (off > 0 && off <= prefix) return Status::no_trampoline_space;
    const ZyanStatus zs = decode_head_ins(dec, code + off, size - off, &d);
    if (!ZYAN_SUCCESS(zs)) {
      // The function ends inside an instruction: too short; anything else is undecodable.
      return zs == ZYDIS_STATUS_NO_MORE_DATA ? Status::too_short : Status::decode_error;
    }
    const Kind k = classify(d);
    if (k == Kind::unsupported) return Status::unsupported_instruction;
    if (const Status s = keep(d, k, addr, off, out->count, out); s != Status::ok) return s;
    out->offset[out->count] = static_cast<std::uint8_t>(off);
    out->length[out->count] = d.ins.length;
    ++out->count;
    if (off > 0) out->boundary_mask = static_cast<std::uint8_t>(out->boundary_mask | (1u << off));
    off += d.ins.length;
    // The flow ends before the jump does: too short, unless this is the function's last
    // instruction and the padding after it is room enough (then the loop stops above).
    if (off < jump_len && ends_flow(d) && !(off == size && room >= jump_len)) return Status::too_short;
    // Room past the function's end is only for after a flow-ending last instruction.
    if (off >= size && off < jump_len && !ends_flow(d)) return Status::too_short;
  }
  static_assert(sizeof(Analysis::offset) == 5 && kJumpLen + kMaxPrefix <= 8);
  out->replaced_len = static_cast<std::uint8_t>(std::max(off, jump_len));
  return Status::ok;
}

std::size_t room_after(const std::uint8_t* code, std::uintptr_t addr, std::size_t size) noexcept {
  if (code == nullptr || size == 0) return size;
  const std::uintptr_t end = addr + size;
  const std::size_t gap = static_cast<std::size_t>(((end + 15) & ~std::uintptr_t{15}) - end);
  const ZydisDecoder dec = make_decoder();
  Decoded d;
  std::size_t pad = 0;
  bool one_byte_nop = false;
  while (pad < gap) {
    if (!decode(dec, code + size + pad, gap - pad, &d)) break;
    if (d.ins.mnemonic != ZYDIS_MNEMONIC_NOP && d.ins.mnemonic != ZYDIS_MNEMONIC_INT3) break;
    // Two one-byte NOPs in a row are no assembler's fill (it writes one long NOP) but how
    // -fpatchable-function-entry writes an entry: an unaligned function may start here.
    const bool one = d.ins.length == 1 && code[size + pad] == 0x90;
    if (one && one_byte_nop) {
      --pad;
      break;
    }
    one_byte_nop = one;
    pad += d.ins.length;
  }
  return size + pad;
}

Status choose_head(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                   Analysis* out, bool* entry_ok, std::size_t room) noexcept {
  *entry_ok = false;
  if (const Status s = analyze_head(code, size, addr, out, 0, room); s != Status::ok) return s;
  if (entry_possible_prefixed(addr, out->boundary_mask, 0)) {
    *entry_ok = true;
    return Status::ok;
  }
  // A boundary at 1 rules out every prefix; else a longer head may still fit: its extra
  // instructions may be too short, unsupported or on the prefixes (then skip that prefix).
  Analysis longer;
  for (unsigned p = 1; p <= kMaxPrefix; ++p) {
    if (analyze_head(code, size, addr, &longer, p, room) != Status::ok) continue;
    if (entry_possible_prefixed(addr, longer.boundary_mask, p)) {
      *out = longer;
      *entry_ok = true;
      return Status::ok;
    }
  }
  return Status::ok;
}

Status analyze_scan(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                    Analysis* out) noexcept {
  const ZydisDecoder dec = make_decoder();
  Decoded d;
  const std::size_t off = out->replaced_len;
  // Every relative branch of the function (replaced instructions included) must land on
  // a replaced boundary or outside the range: a landing mid-instruction would execute the
  // jump's rel32 bytes as code.
  auto check_target = [&](std::uintptr_t t) -> Status {
    if (t <= addr || t >= addr + off) return Status::ok;
    const auto b = static_cast<unsigned>(t - addr);
    if ((out->boundary_mask & (1u << b)) != 0) {  // b < off <= 8: a bit of the mask
      ++out->inward_branches;
      return Status::ok;
    }
    return Status::branch_into_range;
  };
  auto check = [&](const Decoded& dd, std::uintptr_t at) -> Status {
    std::uintptr_t t = 0;
    return branch_target(dd, at, &t) ? check_target(t) : Status::ok;
  };
  // The replaced instructions' own branches, as analyze_head kept them.
  for (std::size_t i = 0; i < out->count; ++i) {
    const auto k = static_cast<Kind>(out->kind[i]);
    if (k == Kind::none) return Status::bad_state;
    if (k == Kind::jmp || k == Kind::jcc || k == Kind::call)
      if (const Status s = check_target(addr + static_cast<std::uintptr_t>(out->target_rel[i]));
          s != Status::ok)
        return s;
  }
  // The rest of the function: most of the start-up cost of a pattern over a big program
  // (python3 'Py*': 939 functions, ~50,000 instructions; Zydis spends ~700 instructions
  // on each, even in its minimal mode). Most functions have no branch anywhere near their
  // first bytes, so a byte filter runs first: every offset where a relative branch's
  // opcode could sit, decodable or not, with its displacement read as that branch would.
  // No candidate landing inside the replaced range: no instruction of the function can
  // branch there, whatever the decoding (a stronger result than the scan's). Else the
  // decoding scan below decides, exactly as before.
  if (!branch_candidate(code, size, off, addr)) return Status::ok;
  // Only a relative immediate can name a branch target, so the operands (a third of a
  // full decode) are decoded for those instructions only.
  ZydisDecoderContext ctx;
  for (std::size_t pos = off; pos < size;) {
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&dec, &ctx, code + pos, size - pos, &d.ins))) {
      out->scan_incomplete = true;
      break;
    }
    if (has_relative_immediate(d.ins)) {
      if (!ZYAN_SUCCESS(ZydisDecoderDecodeOperands(&dec, &ctx, &d.ins, d.ops, d.ins.operand_count))) {
        out->scan_incomplete = true;
        break;
      }
      if (const Status s = check(d, addr + pos); s != Status::ok) return s;
    }
    pos += d.ins.length;
  }
  return Status::ok;
}

bool may_branch_into(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                     std::size_t from, std::size_t lo, std::size_t hi) noexcept {
  if (!branch_candidate_in(code, size, from, addr, lo, hi)) return false;
  const ZydisDecoder dec = make_decoder();
  Decoded d;
  ZydisDecoderContext ctx;
  for (std::size_t pos = from; pos < size;) {
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeInstruction(&dec, &ctx, code + pos, size - pos, &d.ins))) return true;
    if (has_relative_immediate(d.ins)) {
      if (!ZYAN_SUCCESS(ZydisDecoderDecodeOperands(&dec, &ctx, &d.ins, d.ops, d.ins.operand_count)))
        return true;
      std::uintptr_t t = 0;
      if (branch_target(d, addr + pos, &t) && t >= addr + lo && t <= addr + hi) return true;
    }
    pos += d.ins.length;
  }
  return false;
}

Status analyze_first(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                     Analysis* out) noexcept {
  *out = Analysis{};
  if (code == nullptr || size == 0) return Status::too_short;
  const ZydisDecoder dec = make_decoder();
  Decoded d;
  const ZyanStatus zs = decode_head_ins(dec, code, size, &d);
  if (!ZYAN_SUCCESS(zs))
    return zs == ZYDIS_STATUS_NO_MORE_DATA ? Status::too_short : Status::decode_error;
  const Kind k = classify(d);
  if (k == Kind::unsupported) return Status::unsupported_instruction;
  if (const Status s = keep(d, k, addr, 0, 0, out); s != Status::ok) return s;
  out->count = 1;
  out->length[0] = d.ins.length;
  out->replaced_len = d.ins.length;
  return Status::ok;
}

Status relocate(const std::uint8_t* code, std::uintptr_t addr, const Analysis& a, std::uintptr_t at,
                std::uint8_t* out, std::size_t cap, std::size_t* used,
                std::uint16_t copy_offset[5]) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.count; ++i) {
    if (cap - n < kMaxCopyLen) return Status::out_of_range;
    const std::uint8_t* src = code + a.offset[i];
    const std::uintptr_t src_at = addr + a.offset[i];
    copy_offset[i] = static_cast<std::uint16_t>(n);
    std::uint8_t* p = out + n;
    const std::uintptr_t p_at = at + n;
    const std::size_t len = a.length[i];
    // Kept by analyze_head / analyze_first from their decoding of these bytes.
    const std::uintptr_t target = addr + static_cast<std::uintptr_t>(a.target_rel[i]);
    switch (static_cast<Kind>(a.kind[i])) {
      case Kind::plain:
        std::memcpy(p, src, len);
        n += len;
        break;
      case Kind::rip_mem: {
        // Same length at a new address: only the disp32 changes (the displacement is
        // relative to the end of the instruction, SDM Vol 2A 2.2.1.6).
        std::int32_t disp = 0;
        std::memcpy(&disp, src + a.disp_offset[i], 4);
        const std::uintptr_t abs =
            src_at + len + static_cast<std::uintptr_t>(static_cast<std::int64_t>(disp));
        const std::int64_t nd = enc::rel_from(p_at + len, abs);
        if (!enc::fits_rel32(nd)) return Status::out_of_range;
        std::memcpy(p, src, len);
        enc::put32(p + a.disp_offset[i], nd);
        n += len;
        break;
      }
      case Kind::jmp:
        n += enc::jmp_any(p, p_at, target);
        break;
      case Kind::jcc: {
        const std::uint8_t cc = a.cond[i];
        const std::int64_t rel = enc::rel_from(p_at + 6, target);
        if (enc::fits_rel32(rel)) {
          p[0] = enc::kTwoByte;
          p[1] = static_cast<std::uint8_t>(enc::kJccRel32Base + cc);
          enc::put32(p + 2, rel);
          n += 6;
        } else {
          // j!cc over an absolute jump (cc ^ 1 is the negated condition, SDM Vol 2A B.1.4.7).
          p[0] = static_cast<std::uint8_t>(enc::kJccRel8Base + (cc ^ 1));
          p[1] = static_cast<std::uint8_t>(enc::kJmpAbsLen);
          std::memcpy(p + 2, enc::kJmpRipIndirect, sizeof enc::kJmpRipIndirect);
          enc::put64(p + 2 + sizeof enc::kJmpRipIndirect, target);
          n += 2 + enc::kJmpAbsLen;
        }
        break;
      }
      case Kind::call: {
        // push rax; mov rax, <original return address>; xchg [rsp], rax; jmp target.
        const std::uintptr_t ret = src_at + len;
        std::size_t k = 0;
        p[k++] = enc::kPushRax;
        std::memcpy(p + k, enc::kMovRaxImm64, sizeof enc::kMovRaxImm64);
        k += sizeof enc::kMovRaxImm64;
        enc::put64(p + k, ret);
        k += 8;
        std::memcpy(p + k, enc::kXchgRspRax, sizeof enc::kXchgRspRax);
        k += sizeof enc::kXchgRspRax;
        k += enc::jmp_any(p + k, p_at + k, target);
        n += k;
        break;
      }
      case Kind::unsupported:
        return Status::unsupported_instruction;
      case Kind::none:
      default:
        return Status::bad_state;  // not from analyze_head / analyze_first
    }
  }
  if (cap - n < enc::kJmpAbsLen) return Status::out_of_range;
  n += enc::jmp_any(out + n, at + n, addr + a.replaced_len);
  *used = n;
  return Status::ok;
}

}  // namespace detail

}  // namespace crossmod::tp
