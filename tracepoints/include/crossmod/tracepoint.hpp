// Tracepoints on unmodified code with a "jump with embedded int3" (Harper-Cyr, Dagenais,
// Bushehri, SP&E 49(12), 2019): the first whole instructions covering >= 5 bytes at an
// address are replaced by `jmp rel32` to an out-of-line trampoline whose address is chosen
// so that the rel32 bytes hold int3 (0xCC) at every replaced instruction boundary. A thread
// about to execute a replaced instruction traps there and the engine's SIGTRAP handler
// (trap::redirect_set) sends it to the out-of-line copy of that instruction.
//
// Thread safety: prepare/install/remove/enable/disable of ONE Tracepoint must not run
// concurrently with each other (the caller serialises them); different tracepoints may be
// handled from different threads. Any thread may execute the traced code at any time.
// Nothing here throws. The invocation path (jump, trampoline, probe thunk, handler call)
// neither allocates nor locks. Trampolines are never freed: a thread may still be inside
// one after remove(), and a late trap may still be redirected to it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <system_error>

#include "crossmod/wait.hpp"

namespace crossmod::tp {

enum class [[nodiscard]] Status : std::uint8_t{
    ok = 0,
    too_short,                // the code ends (function size, ret, jmp, ud2, int3) before 5 bytes,
                              // with no alignment fill after a flow-ending last instruction
    decode_error,             // Zydis cannot decode an instruction in the replaced range
    unsupported_instruction,  // in the replaced range: loop/jrcxz/xbegin, 16-bit branch, int3
    branch_into_range,        // a branch in the function's own code targets the replaced range
                              // at a byte that is not a replaced instruction boundary
    out_of_range,             // a relocated RIP-relative operand or branch cannot reach its target
    no_trampoline_space,      // no free page within +-2 GiB has an address with the required
                              // 0xCC bytes in the jump's rel32
    not_writable,             // the replaced bytes are not in a code_memory writable range
    bad_bytes,                // the code no longer holds the bytes seen at prepare()
    bad_state,                // install while installed, remove while not installed, prepare
                              // at an address another installed tracepoint owns, ...
    table_full,               // the trap handler's redirect table is full
    os_error,                 // a system call failed (mmap, membarrier); see the error_code
};
const char* to_string(Status s) noexcept;

// Result of decoding the start of a function (relocate.cpp; no side effects).
// The jump is `2E`*prefix_len + `E9 rel32` (5 + prefix_len bytes). 0x2E is the CS segment
// override, which 64-bit mode ignores (SDM Vol 1 3.3.7.1); SDM Vol 2A 2.1.1 calls its use
// with branches "reserved", but it is what GNU as pads branches with
// (-malign-branch-prefix-size) and what Linux builds with (-mindirect-branch-cs-prefix):
// observed ignored, not architecturally guaranteed. The prefixes shift the rel32 so that
// a boundary that would fix its most significant byte (offset 4: rel32 about -832 MiB,
// below address 0 for a non-PIE executable) fixes a lower byte instead.
// No boundary may sit on a prefix or the opcode (offsets 1..prefix_len), so at most five
// instructions are replaced whatever the prefix (0, and one per rel32 byte).
struct Analysis {
  std::uint8_t replaced_len = 0;  // bytes of whole instructions covered, >= 5 + prefix_len
  std::uint8_t count = 0;         // number of replaced instructions (1..5)
  std::uint8_t offset[5] = {};    // start offset of each replaced instruction (0..7)
  std::uint8_t length[5] = {};
  // Bit b (1..7) set: an instruction starts at offset b, so rel32 byte b-1-prefix_len
  // must be 0xCC. With prefix_len 0 only bits 1..4 can be set.
  std::uint8_t boundary_mask = 0;
  std::uint8_t prefix_len = 0;  // 0..3 redundant 0x2E before the jmp opcode
  // Branches found in the rest of the function that land on a replaced boundary other
  // than offset 0: each execution of them traps and is redirected (slow path, correct).
  std::uint32_t inward_branches = 0;
  // True when the scan of the rest of the function stopped early at undecodable bytes
  // (data in code): a branch beyond that point was not seen.
  bool scan_incomplete = false;
  // What the relocation needs of each replaced instruction, kept from the one decoding
  // (the scan and the relocation used to decode them again: on python3's 'Py*' a third
  // of the attach's Zydis time). kind: detail::InsKind (0: not analyzed); disp_offset: a
  // RIP-relative operand's disp32 within the instruction; cond: a Jcc's condition code;
  // target_rel: a relative branch's target minus the function's address.
  std::uint8_t kind[5] = {};
  std::uint8_t disp_offset[5] = {};
  std::uint8_t cond[5] = {};
  std::int64_t target_rel[5] = {};
};

// Decodes the instructions at `code` (which is at runtime address `addr`); `size` is the
// number of bytes from addr to the end of the function (symbol size), all of which are
// scanned for branches into the replaced range. Indirect branches (jump tables) cannot be
// seen; their targets are unknown.
Status analyze(const std::uint8_t* code, std::size_t size, std::uintptr_t addr,
               Analysis* out) noexcept;

// Memory used by all trampolines of the process (entry slots must sit at constrained
// addresses, so entry pages are sparsely used: that is the technique's known cost).
struct PoolStats {
  std::size_t entry_pages = 0;       // pages mapped at constrained addresses
  std::size_t entry_bytes_used = 0;  // bytes of those pages holding entry slots
  std::size_t body_bytes_mapped = 0;  // bytes of the body arenas
  std::size_t body_bytes_used = 0;    // bytes of those arenas holding bodies
  std::size_t trampolines = 0;
  std::size_t mmap_attempts = 0;  // mmap calls made while searching for entry pages
  // Bodies placed at the jump's target in an entry page (no entry slot, no arena bytes),
  // and the bytes of entry pages they hold (their pad NOPs included). So entry_bytes_used
  // + direct_body_bytes <= entry_pages * 4096; all body bytes: body_bytes_used +
  // direct_body_bytes.
  std::size_t direct_bodies = 0;
  std::size_t direct_body_bytes = 0;
};
PoolStats pool_stats() noexcept;

// The probe: called on every execution of the traced instruction while the tracepoint is
// installed and enabled, with all general-purpose registers, flags and xmm0-15 preserved
// around it and the direction flag cleared. It runs on the traced thread's stack (128 bytes
// below its red zone) and must be async-signal-safe if the traced code may run in a handler.
using Handler = void (*)(void* user) noexcept;
// The same, also given the traced thread's stack pointer as it was at the traced
// instruction. At a function's first instruction *sp is the function's return address, so
// the handler can redirect it (exit probes, probes/src/provider_tracepoint.cpp).
using SpHandler = void (*)(void* user, std::uintptr_t* sp) noexcept;

class Tracepoint {
 public:
  Tracepoint() noexcept = default;
  // Does NOT remove: the caller removes before destruction if it wants the original code
  // back. The trampoline stays allocated either way.
  ~Tracepoint() = default;
  Tracepoint(const Tracepoint&) = delete;
  Tracepoint& operator=(const Tracepoint&) = delete;
  Tracepoint(Tracepoint&&) noexcept = default;
  Tracepoint& operator=(Tracepoint&&) noexcept = default;

  // Decodes and relocates the code at addr (size bytes to the function's end) into a
  // trampoline whose probe calls handler(user). Installs the trap handler. Writes nothing
  // into the traced code. The probe starts enabled. bad_state if another installed
  // tracepoint owns addr.
  //
  // With trap_fallback, code the jump cannot replace gets a trap-mode tracepoint instead:
  // only an int3 on byte 0, redirected to the same trampoline (one signal per hit, so
  // ~100x slower per call, but any instruction the relocator handles qualifies). Used for
  // too_short and branch_into_range, and for no_trampoline_space (e.g. code of a non-PIE
  // executable below 816 MiB, where a boundary at offset 4 needs a rel32 of -0x33xxxxxx,
  // when no 0x2E-prefixed jump helps either: a boundary at offset 1, see Analysis).
  //
  // The jump is the 5-byte `E9 rel32` whenever an entry slot can exist for it (the same
  // bytes as before prefixes existed); else the shortest `2E`*p `E9 rel32` (p = 1..3)
  // that can have one (analysis().prefix_len, jump_len()).
  static Status prepare(void* addr, std::size_t size, Handler handler, void* user, Tracepoint* out,
                        std::error_code* ec = nullptr, bool trap_fallback = false) noexcept;
  // prepare() with a probe that also receives the stack pointer (SpHandler).
  static Status prepare_sp(void* addr, std::size_t size, SpHandler handler, void* user,
                           Tracepoint* out, std::error_code* ec = nullptr,
                           bool trap_fallback = false) noexcept;

  // How many `push r64` (50+r, or 41 50+r) the function at fn begins with (at most 8).
  static unsigned leading_pushes(const void* fn, std::size_t size) noexcept;
  // prepare_sp() (no trap fallback) at the instruction after the first `pushes` leading
  // pushes of the function fn, for a function whose jump at fn is refused: a one-byte
  // `push` first puts a boundary at offset 1, which rules out every prefix, and with one at
  // 4 too leaves one 16 MiB window for the entry (python3.11, not PIE: 149 of 939 Py*
  // functions had no window at all). There the handler's sp is `pushes` slots below the
  // return address. Refused (branch_into_range) when a relative branch of the function may
  // land on offsets 1..the site (a thread arriving there would run the probe with another
  // stack depth, or skip it), bad_state if fn does not begin with that many pushes.
  static Status prepare_sp_after_pushes(void* fn, std::size_t size, unsigned pushes, SpHandler handler,
                                        void* user, Tracepoint* out,
                                        std::error_code* ec = nullptr) noexcept;
  // The same with a plain Handler (entry counting needs no stack).
  static Status prepare_after_pushes(void* fn, std::size_t size, unsigned pushes, Handler handler,
                                     void* user, Tracepoint* out, std::error_code* ec = nullptr) noexcept;

  // Writes the jump. The replaced bytes must be in a code_memory writable range.
  //   0. register the trap redirects of every boundary (table_full if no slot);
  //   1. int3 on every replaced boundary (byte 0 and the 0xCC rel32 bytes, which already
  //      hold their final value); the redirects were registered at prepare();
  //   2. wait (no core may still run an old instruction fetched before step 1);
  //   3. write the other bytes of the jump (rel32 bytes not fixed to 0xCC; with a prefix
  //      also the jmp opcode and the prefixes after the first), which no thread can
  //      reach: every way in is an int3;
  //   4. wait;
  //   5. write byte 0 (the jmp opcode, or the first 0x2E prefix) over its int3.
  // `wait` is the engine's WaitPolicy: Tmax ticks or membarrier SYNC_CORE.
  // A jump inside one cache line (in_line(): the usual case, functions start 16-aligned)
  // is written after step 0 in ONE locked in-line store instead, with no int3 and no wait,
  // like the engine's non-straddling patches: a core fetches the line's old or new bytes,
  // both complete instructions, and a thread between two replaced instructions meets the
  // 0xCC the jump holds at that boundary and is redirected (step 0).
  Status install(const WaitPolicy& wait) noexcept;
  // Puts the original bytes back: the reverse (int3 at byte 0, wait, original non-boundary
  // bytes, wait, original boundary bytes; in_line(): one store), then clears the
  // redirects. A thread that trapped before the clear runs the (immortal) trampoline; one
  // that traps after it finds the original byte back and re-executes in place
  // (trap::redirect_clear).
  Status remove(const WaitPolicy& wait) noexcept;
  // The same protocols for many tracepoints with the waits shared (two per call instead
  // of two per tracepoint; none when every jump is in_line()). Every tracepoint is checked
  // first; on a refusal nothing is written and the first refusal is returned. `wait` is
  // checked up front too (sync_core not available: os_error), so no protocol stops
  // halfway.
  static Status install_all(std::span<Tracepoint> tps, const WaitPolicy& wait) noexcept;
  static Status remove_all(std::span<Tracepoint> tps, const WaitPolicy& wait) noexcept;
  // The same over tracepoints that do not sit in one array (e.g. the probe layer's).
  static Status install_all(std::span<Tracepoint* const> tps, const WaitPolicy& wait) noexcept;
  static Status remove_all(std::span<Tracepoint* const> tps, const WaitPolicy& wait) noexcept;
  // Probe on/off while installed or not: one locked store of the trampoline's first
  // instruction (inside one cache line), no wait needed: both states are complete `jmp`s.
  Status enable() noexcept;
  Status disable() noexcept;

  bool prepared() const noexcept { return body_ != nullptr; }
  bool is_installed() const noexcept { return installed_; }
  bool trap_mode() const noexcept { return span_ == 1; }
  std::uintptr_t address() const noexcept { return addr_; }
  const Analysis& analysis() const noexcept { return analysis_; }
  // The jump's target (0: trap mode): an entry slot (`jmp body`), or with a direct body the
  // body itself, after a pad NOP of 0..7 bytes that 8-aligns the toggle slot.
  std::uintptr_t entry() const noexcept { return entry_; }
  std::uintptr_t body() const noexcept { return reinterpret_cast<std::uintptr_t>(body_); }
  // The bytes install() writes at address(): jump_len() of them (5..8; 1 in trap mode).
  const std::uint8_t* jump_bytes() const noexcept { return jump_; }
  std::size_t jump_len() const noexcept { return span_; }
  // The written bytes lie inside one cache line: install and remove are one store each,
  // without waits (a prepared tracepoint; false before prepare()).
  bool in_line() const noexcept;

 private:
  std::uintptr_t addr_ = 0;
  Analysis analysis_{};
  std::uint8_t original_[8] = {};
  std::uint8_t jump_[8] = {};  // span_ bytes: prefixes, E9, rel32 (or int3 + original)
  std::uintptr_t entry_ = 0;
  std::uint8_t* body_ = nullptr;        // toggle slot at body_[0]
  std::uint8_t toggle_on_[8] = {};      // jmp to the probe block (+ 3 unreachable int3)
  std::uint8_t toggle_off_[8] = {};     // an 8-byte NOP: falls through into the copies
  std::uintptr_t redirect_to_[5] = {};  // trap redirect target of each replaced boundary
  std::uint8_t span_ = 5;  // bytes of code written: 5 + prefix_len (jump) or 1 (trap mode)
  bool installed_ = false;

  static Status prepare_after_pushes_impl(void* fn, std::size_t size, unsigned pushes, Handler handler,
                                          SpHandler sp_handler, void* user, Tracepoint* out,
                                          std::error_code* ec) noexcept;
  static Status prepare_impl(void* addr, std::size_t size, Handler handler, SpHandler sp_handler,
                             void* user, Tracepoint* out, std::error_code* ec,
                             bool trap_fallback) noexcept;
  template <class At>
  static Status install_n(std::size_t n, At at, const WaitPolicy& wait) noexcept;
  template <class At>
  static Status remove_n(std::size_t n, At at, const WaitPolicy& wait) noexcept;
  Status check_install() const noexcept;
  Status check_remove() const noexcept;
  Status set_redirects() noexcept;
  void store_interior(const std::uint8_t* bytes) noexcept;
  void clear_redirects() noexcept;
};

}  // namespace crossmod::tp
