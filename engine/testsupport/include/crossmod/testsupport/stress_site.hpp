// The stress site: an executable mapping in which a 5-byte instruction is placed so that
// S bytes lie before a cache-line boundary, toggled between state A (`call rel32` to a
// stub) and state B (a 5-byte NOP). Every byte around it faults if executed.
//
// Layout (see DESIGN.md "The stress site"):
//   entry:  31 C0           xor eax, eax
//   site:   <5 bytes>       A: E8 rel32 -> stub (B8 01 00 00 00 C3: mov eax,1; ret)
//                           B: 66 66 66 66 90 (kNop5Prefixed) by default
//           C3              ret
//           0E 0E ...       invalid in 64-bit mode up to the end of the page(s)
// entry() returns 1 if the call ran, 0 if the NOP ran.
//
// Why B is not the canonical 0F 1F 44 00 00: a torn mix "NOP front + call back" at S = 3
// or 4 keeps the NOP's own modrm/SIB bytes and decodes as the same 5-byte NOP, so half
// of the tears at S = 3, 4 would be invisible. With 66 66 66 66 90 and every rel32 byte
// chosen from kInvalidIn64, every "NOP front" mix is #UD at its first byte, and every
// "call front" mix is a call whose target lies in a reserved PROT_NONE window. create()
// proves this with Zydis for every split 1..4 (at S = 0 too, since a non-atomic store can
// tear inside a line; skipped only for a caller-chosen state_b at S = 0, as bench uses)
// and refuses (returns nullptr + reason) otherwise.
// Layout in memory: one PROT_NONE reservation of ~1.86 GiB, [site - 1.75 GiB, site +
// ~101 MiB + 2 pages]: the torn-call window (16 MiB at site + 5 + sext(B[4] << 24)), the
// RWX site page (registered with the engine through WritableRange) and the R-X stub
// page(s) at site + 5 + rel32. Outside it, +-2 GiB of the site stays free for the
// engine's split-1 ret trampoline.
// Lives in engine/testsupport so that the harness's cells and the bench suites (which
// depend only on the engine) measure the same site.
// Thread safety: create/destroy from one thread; entry() may run on any thread.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "crossmod/testsupport/site_code.hpp"

namespace crossmod::testsupport {

class StressSite {
 public:
  using EntryFn = testsupport::EntryFn;

  // straddle S in 0..4; S = 0 places the site inside one line at `line_offset`
  // (0 .. line-5). `state_b` defaults to kNop5Prefixed. On refusal returns nullptr
  // and sets *why (e.g. "S=3: torn mix 66 66 66 .. decodes as valid 'nop'").
  static std::unique_ptr<StressSite> create(unsigned straddle, unsigned line_offset,
                                            std::string* why,
                                            std::span<const std::uint8_t> state_b = {});
  ~StressSite();

  std::uint8_t* site() const;                    // the 5 patchable bytes
  EntryFn entry() const;
  const std::array<std::uint8_t, 5>& state_a() const;
  const std::array<std::uint8_t, 5>& state_b() const;
  const void* call_target() const;               // the stub
  unsigned straddle() const;
  // True when pc lies in the site's pages or the reserved window (a fault there is the
  // site's, not the harness's).
  bool owns_pc(std::uintptr_t pc) const;

  // Additions (compatible): where things are, for the cell runner's fault notes and the
  // tests' independent checks.
  unsigned line_offset() const;                  // site address mod line size
  // [begin, end): the PROT_NONE window that every "A front + B back" call lands in.
  std::uintptr_t torn_window_begin() const;
  std::uintptr_t torn_window_end() const;
  // The whole reservation (PROT_NONE except the site and stub pages).
  std::uintptr_t reservation_begin() const;
  std::uintptr_t reservation_end() const;

  // The checks create() runs, usable on any bytes: for a split S in 1..4, decodes both
  // torn mixes of A and B as if placed at `site_addr` and returns "" when "B front + A
  // back" is invalid at its first byte and "A front + B back" is a call into
  // [window_begin, window_end); otherwise a precise reason. Not async-signal-safe.
  static std::string check_mixes(unsigned split, const std::array<std::uint8_t, 5>& a,
                                 const std::array<std::uint8_t, 5>& b,
                                 std::uintptr_t site_addr, std::uintptr_t window_begin,
                                 std::uintptr_t window_end);

 private:
  StressSite() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crossmod::testsupport
