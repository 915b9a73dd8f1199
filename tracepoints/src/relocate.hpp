// Relocation of the replaced instructions into a trampoline body (relocate.cpp).
// Thread safety: pure functions; no allocation.
#pragma once
#include <cstddef>
#include <cstdint>

#include "crossmod/tracepoint.hpp"

namespace crossmod::tp::detail {

// Upper bound of the bytes relocate() emits for one instruction (an emulated far call:
// push rax; mov rax, imm64; xchg [rsp], rax; jmp [rip]; abs64 = 29).
inline constexpr std::size_t kMaxCopyLen = 32;

// How a replaced instruction is relocated (Analysis::kind). none: not analyzed.
enum class InsKind : std::uint8_t { none = 0, plain, rip_mem, jmp, jcc, call, unsupported };

// analyze() in two steps. The head decodes the instructions the jump replaces (offsets,
// boundary_mask, replaced_len: what the entry slot's constraint needs) and refuses what
// cannot be relocated; the scan decodes the rest of the function for branches into them
// (most of the work). prepare skips the scan when no entry slot can exist.
// `prefix` (0..kMaxPrefix) is the number of 0x2E before the jmp opcode: the head then
// covers >= 5 + prefix bytes and refuses (no_trampoline_space: this prefix cannot shift
// the rel32) a boundary at offsets 1..prefix, where the prefixes and opcode go.
// `room` (>= size; 0: size) is how many bytes from addr the jump may cover: size plus the
// alignment padding after the function (room_after). The head may then end with the
// function's last instruction, if that ends the flow (ret, jmp, ...), and the rest of the
// jump lie on the padding, which no thread runs: a function too short for the jump
// (`lea eax, [rdi+1]; ret`) gets one when the padding makes up the difference.
inline constexpr unsigned kMaxPrefix = 3;
Status analyze_head(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                    Analysis* out, unsigned prefix = 0, std::size_t room = 0) noexcept;

// size plus the alignment padding after the function at addr: the bytes from addr + size
// up to the next 16-byte boundary (the same page: never unmapped) that decode as NOPs or
// int3, whole instructions from addr + size on, stopping at the first that is not one.
// Compilers align functions to 16 and fill the gap with NOPs (GCC, GNU as) or int3 (lld);
// nothing branches there and no thread runs it: the previous function ends its flow. A
// function that does not start on 16 gets less or none of it. A run of one-byte NOPs is
// not taken: -fpatchable-function-entry writes those at the entry of a function that may
// start inside the gap when functions are not aligned.
std::size_t room_after(const std::uint8_t* code, std::uintptr_t addr, std::size_t size) noexcept;
Status analyze_scan(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                    Analysis* out) noexcept;

// analyze_head() for the smallest prefix (0 first, then 1..kMaxPrefix) whose jump can
// have an entry slot (entry_possible_prefixed). *entry_ok false: no prefix can, and *out
// is the prefix-0 result (the caller refuses no_trampoline_space or falls back to trap
// mode, exactly as without prefixes). A refusal of the prefix-0 head is returned as is.
Status choose_head(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                   Analysis* out, bool* entry_ok, std::size_t room = 0) noexcept;

// The byte filter alone (relocate.cpp): whether any offset in [from, size) could hold a
// relative branch, decodable or not, into [addr + lo, addr + hi]. No false negatives.
bool branch_candidate_in(const std::uint8_t* code, std::size_t size, std::size_t from,
                         std::uintptr_t addr, std::size_t lo, std::size_t hi) noexcept;

// Whether a relative branch of the code at addr, decoded from offset `from` to size, may
// land in [addr + lo, addr + hi] (the byte filter of analyze_scan, then decoding; a part
// that does not decode counts as may).
bool may_branch_into(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                     std::size_t from, std::size_t lo, std::size_t hi) noexcept;

// Trap mode: only the first instruction (any length, even a lone `ret`) is relocated; the
// code keeps its bytes except an int3 on byte 0, so neither the 5-byte minimum nor
// branches into the range matter.
Status analyze_first(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
                     Analysis* out) noexcept;

// Emits the analysed instructions (code at runtime address addr) for a copy placed at
// runtime address `at`, then a jump back to addr + a.replaced_len. copy_offset[i] gets
// the offset of instruction i's copy. out_of_range if a RIP-relative operand cannot reach
// its target from `at`; unsupported_instruction / decode_error as in analyze().
Status relocate(const std::uint8_t* code, std::uintptr_t addr, const Analysis& a, std::uintptr_t at,
                std::uint8_t* out, std::size_t cap, std::size_t* used,
                std::uint16_t copy_offset[5]) noexcept;

}  // namespace crossmod::tp::detail
