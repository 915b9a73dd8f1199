// Tracepoint: prepare (analyse, relocate, reserve a constrained trampoline, register the
// trap redirects), install/remove (the multi-step int3 protocol in tracepoint.hpp) and the
// probe toggle. Thread safety: see tracepoint.hpp. prepare() allocates (pool, /proc maps);
// install/remove/enable/disable make no allocation and take no lock (waits may call
// membarrier). The probe dispatch below runs on traced threads: no allocation, no lock.
#include "crossmod/tracepoint.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>

#include <cstring>

#include "crossmod/code_memory.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"
#include "encoding.hpp"
#include "pool.hpp"
#include "relocate.hpp"

namespace crossmod::tp {

namespace {

// Lives in the trampoline body (immortal); written once at prepare().
struct ProbeCtx {
  Handler handler;       // exactly one of handler and sp_handler is set
  SpHandler sp_handler;
  void* user;
};

constexpr std::size_t kJumpLen = 5;
// The toggle slot: body_[0..7], 8-aligned (the pool's bodies are), so one locked 8-byte
// store switches it and a fetch sees all of one state or all of the other.
constexpr std::size_t kToggleLen = 8;
constexpr std::size_t kCopiesAt = 8;  // right after the toggle slot
constexpr std::size_t kProbeBlockMax = 40;
constexpr std::size_t kTailMax = 8 /*literal*/ + sizeof(ProbeCtx) + 16 /*alignment*/;

}  // namespace

}  // namespace crossmod::tp

extern "C" {
// assembly, src/thunk.S
void crossmod_tp_thunk();
// Called by crossmod_tp_thunk with the probe context of the trampoline that fired and the
// traced thread's stack pointer at the traced instruction.
__attribute__((visibility("hidden"))) void crossmod_tp_dispatch(
    const crossmod::tp::ProbeCtx* ctx, std::uintptr_t* sp) noexcept;
}

void crossmod_tp_dispatch(const crossmod::tp::ProbeCtx* ctx, std::uintptr_t* sp) noexcept {
  if (ctx->sp_handler != nullptr)
    ctx->sp_handler(ctx->user, sp);
  else
    ctx->handler(ctx->user);
}

namespace crossmod::tp {

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::too_short:
      return "too_short";
    case Status::decode_error:
      return "decode_error";
    case Status::unsupported_instruction:
      return "unsupported_instruction";
    case Status::branch_into_range:
      return "branch_into_range";
    case Status::out_of_range:
      return "out_of_range";
    case Status::no_trampoline_space:
      return "no_trampoline_space";
    case Status::not_writable:
      return "not_writable";
    case Status::bad_bytes:
      return "bad_bytes";
    case Status::bad_state:
      return "bad_state";
    case Status::table_full:
      return "table_full";
    case Status::os_error:
      return "os_error";
  }
  return "unknown";
}

Status Tracepoint::prepare(void* addr, std::size_t size, Handler handler, void* user,
                           Tracepoint* out, std::error_code* ec, bool trap_fallback) noexcept {
  if (handler == nullptr) return Status::bad_state;
  return prepare_impl(addr, size, handler, nullptr, user, out, ec, trap_fallback);
}

Status Tracepoint::prepare_sp(void* addr, std::size_t size, SpHandler handler, void* user,
                              Tracepoint* out, std::error_code* ec, bool trap_fallback) noexcept {
  if (handler == nullptr) return Status::bad_state;
  return prepare_impl(addr, size, nullptr, handler, user, out, ec, trap_fallback);
}

namespace {
// The length of a `push r64` at code (50+r, or REX.B 41 then 50+r), 0 if there is none.
std::size_t push_len(const std::uint8_t* code, std::size_t size) noexcept {
  if (size >= 1 && code[0] >= 0x50 && code[0] <= 0x57) return 1;
  if (size >= 2 && code[0] == 0x41 && code[1] >= 0x50 && code[1] <= 0x57) return 2;
  return 0;
}
constexpr unsigned kMaxPushes = 8;
}  // namespace

unsigned Tracepoint::leading_pushes(const void* fn, std::size_t size) noexcept {
  const auto* code = static_cast<const std::uint8_t*>(fn);
  unsigned n = 0;
  std::size_t off = 0;
  while (n < kMaxPushes && fn != nullptr) {
    const std::size_t len = push_len(code + off, size - off);
    if (len == 0) break;
    off += len;
    ++n;
  }
  return n;
}

Status Tracepoint::prepare_sp_after_pushes(void* fn, std::size_t size, unsigned pushes, SpHandler handler,
                                           void* user, Tracepoint* out, std::error_code* ec) noexcept {
  if (handler == nullptr) return Status::bad_state;
  return prepare_after_pushes_impl(fn, size, pushes, nullptr, handler, user, out, ec);
}

Status Tracepoint::prepare_after_pushes(void* fn, std::size_t size, unsigned pushes, Handler handler,
                                        void* user, Tracepoint* out, std::error_code* ec) noexcept {
  if (handler == nullptr) return Status::bad_state;
  return prepare_after_pushes_impl(fn, size, pushes, handler, nullptr, user, out, ec);
}

Status Tracepoint::prepare_after_pushes_impl(void* fn, std::size_t size, unsigned pushes, Handler handler,
                                             SpHandler sp_handler, void* user, Tracepoint* out,
                                             std::error_code* ec) noexcept {
  if (fn == nullptr || pushes == 0 || pushes > kMaxPushes) return Status::bad_state;
  const auto* code = static_cast<const std::uint8_t*>(fn);
  std::size_t skip = 0;
  for (unsigned i = 0; i < pushes; ++i) {
    const std::size_t len = push_len(code + skip, size - skip);
    if (len == 0) return Status::bad_state;
    skip += len;
  }
  if (skip >= size) return Status::too_short;
  // Offsets 1..skip: between the pushes, and the site itself, which a branch would reach
  // with the stack of a later point of the function.
  if (detail::may_branch_into(code, size, reinterpret_cast<std::uintptr_t>(fn), skip, 1, skip))
    return Status::branch_into_range;
  return prepare_impl(static_cast<std::uint8_t*>(fn) + skip, size - skip, handler, sp_handler, user, out, ec,
                      false);
}

Status Tracepoint::prepare_impl(void* addr, std::size_t size, Handler handler,
                                SpHandler sp_handler, void* user, Tracepoint* out,
                                std::error_code* ec, bool trap_fallback) noexcept {
  if (addr == nullptr || out == nullptr) return Status::bad_state;
  if (out->installed_) return Status::bad_state;
  if (trap::install(ec) != crossmod::Status::ok) return Status::os_error;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const auto* code = static_cast<const std::uint8_t*>(addr);
  // Another tracepoint's redirect is live here: its jump would be relocated as code.
  if (trap::redirect_target(a) != 0) return Status::bad_state;
  Analysis an;
  bool trap_mode = false;
  bool entry_ok = false;
  // The bytes the jump may cover: the function and the alignment padding after it (a
  // function shorter than the jump whose last instruction ends its flow gets the jump).
  // Only a function shorter than the longest jump can need the padding: the others skip
  // its decoding (every function of a --trace pattern comes through here at start-up).
  const std::size_t room = size < kJumpLen + detail::kMaxPrefix ? detail::room_after(code, a, size) : size;
  Status as = detail::choose_head(code, size, a, &an, &entry_ok, room);
  if (as == Status::ok && !entry_ok) {
    // No address can hold the entry slot, for no prefix (choose_head), so reserve() below
    // would refuse the jump whatever the scan for branches into the range found: skip the
    // scan (most of the analysis; 60% of python3's Py* code was in such functions before
    // prefixes, measured then). Without the trap fallback the refusal reads
    // no_trampoline_space even where the scan would have found branch_into_range; with
    // it, trap mode as reserve()'s refusal gave.
    if (!trap_fallback) return Status::no_trampoline_space;
    as = Status::branch_into_range;  // -> trap mode below, on the first instruction only
  } else if (as == Status::ok) {
    as = detail::analyze_scan(code, size, a, &an);
  }
  if (as != Status::ok) {
    if (!trap_fallback || (as != Status::too_short && as != Status::branch_into_range)) return as;
    if (const Status s1 = detail::analyze_first(code, size, a, &an); s1 != Status::ok) return s1;
    trap_mode = true;
  }

  // Room for the copies of x's instructions, and the whole body reserved around them.
  const auto copies_cap_of = [](const Analysis& x) {
    return x.count * detail::kMaxCopyLen + enc::kJmpAbsLen;
  };
  const auto reserve_len_of = [&](const Analysis& x) {
    return kCopiesAt + copies_cap_of(x) + kProbeBlockMax + kTailMax;
  };
  // The jump with prefix_len prefixes is, for the pool, the 5-byte jmp at a + prefix_len.
  unsigned prefix = an.prefix_len;
  std::uint8_t rel_mask = 0;
  if (!trap_mode && !detail::prefixed_mask(an.boundary_mask, prefix, &rel_mask))
    return Status::no_trampoline_space;  // not reached: choose_head checked it
  detail::Reservation r;
  Status rs = detail::reserve(a + prefix, rel_mask, reserve_len_of(an), !trap_mode, &r, ec);
  // Every address this prefix's constraint allows may be taken: with three rel32 bytes
  // fixed they lie in one 256-byte window, which another mapping can cover (a library
  // loaded late found it inside the threads' malloc heap reservations). A longer prefix
  // fixes other bytes of the rel32, so it wants other places: try them before refusing.
  for (unsigned p = prefix + 1; rs == Status::no_trampoline_space && !trap_mode && p <= detail::kMaxPrefix; ++p) {
    Analysis alt;
    std::uint8_t alt_mask = 0;
    if (detail::analyze_head(code, size, a, &alt, p, room) != Status::ok ||
        !detail::entry_possible_prefixed(a, alt.boundary_mask, p) ||
        detail::analyze_scan(code, size, a, &alt) != Status::ok ||
        !detail::prefixed_mask(alt.boundary_mask, p, &alt_mask))
      continue;
    rs = detail::reserve(a + p, alt_mask, reserve_len_of(alt), true, &r, ec);
    if (rs != Status::ok) continue;
    an = alt;
    prefix = p;
    rel_mask = alt_mask;
  }
  if (rs == Status::no_trampoline_space && trap_fallback && !trap_mode) {
    trap_mode = true;
    rs = detail::reserve(a + prefix, rel_mask, reserve_len_of(an), false, &r, ec);
  }
  if (rs != Status::ok) return rs;
  std::uint8_t* body = r.body;
  const auto body_at = reinterpret_cast<std::uintptr_t>(body);

  // Copies.
  std::uint16_t copy_offset[5] = {};
  std::size_t copies_len = 0;
  if (const Status s = detail::relocate(code, a, an, body_at + kCopiesAt, body + kCopiesAt,
                                        copies_cap_of(an), &copies_len, copy_offset);
      s != Status::ok)
    return s;  // the reservation is leaked (a few hundred bytes; refusals are rare here)

  // Probe block: step over the red zone, save rax, rax = ctx, call the thunk, restore,
  // continue with the copies.
  std::size_t pb = (kCopiesAt + copies_len + 7) & ~std::size_t{7};
  std::uint8_t* p = body + pb;
  std::size_t k = 0;
  std::memcpy(p + k, enc::kLeaRspMinus128, sizeof enc::kLeaRspMinus128);
  k += sizeof enc::kLeaRspMinus128;
  p[k++] = enc::kPushRax;
  std::memcpy(p + k, enc::kMovRaxImm64, sizeof enc::kMovRaxImm64);
  k += sizeof enc::kMovRaxImm64;
  const std::size_t ctx_imm_at = k;
  k += 8;
  std::memcpy(p + k, enc::kCallRipIndirect, sizeof enc::kCallRipIndirect);
  k += sizeof enc::kCallRipIndirect;
  const std::size_t disp_at = k;
  k += 4;
  const std::size_t after_call = k;
  p[k++] = enc::kPopRax;
  std::memcpy(p + k, enc::kLeaRspPlus128, sizeof enc::kLeaRspPlus128);
  k += sizeof enc::kLeaRspPlus128;
  if (!enc::jmp_rel32(p + k, body_at + pb + k, body_at + kCopiesAt)) return Status::out_of_range;
  k += enc::kRel32JmpLen;
  const std::size_t lit = (pb + k + 7) & ~std::size_t{7};
  enc::put32(p + disp_at, static_cast<std::int64_t>(lit - (pb + after_call)));
  enc::put64(body + lit, reinterpret_cast<std::uint64_t>(&crossmod_tp_thunk));
  auto* ctx = reinterpret_cast<ProbeCtx*>(body + lit + 8);
  ctx->handler = handler;
  ctx->sp_handler = sp_handler;
  ctx->user = user;
  enc::put64(p + ctx_imm_at, reinterpret_cast<std::uint64_t>(ctx));
  const std::size_t used = lit + 8 + sizeof(ProbeCtx);
  detail::trim_body(body, reserve_len_of(an), used);

  // Toggle slot. On: `jmp probe block` (its last 3 bytes are never reached). Off: one
  // 8-byte NOP, so a disabled tracepoint falls through into the copies instead of taking
  // a fourth jump (jump, entry slot, toggle, back; without the entry slot with a direct
  // body): measured in tracepoints/README.md.
  // Both states start at body_[0] and span the whole slot: no instruction boundary
  // inside it is reachable in either, so a thread fetching across the switch runs one
  // complete state.
  Tracepoint t;
  if (!enc::jmp_rel32(t.toggle_on_, body_at, body_at + pb)) return Status::out_of_range;
  std::memset(t.toggle_on_ + enc::kRel32JmpLen, enc::kInt3, kToggleLen - enc::kRel32JmpLen);
  static constexpr std::uint8_t kNop8[kToggleLen] = {0x0F, 0x1F, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00};
  static_assert(kCopiesAt == kToggleLen);
  std::memcpy(t.toggle_off_, kNop8, kToggleLen);
  if ((body_at & (kToggleLen - 1)) != 0) return Status::bad_state;  // the pool's 8-alignment
  std::memcpy(body, t.toggle_on_, kToggleLen);

  // The jump at addr and the bytes it replaces. It targets r.entry: the entry slot, or for
  // a direct body the pad NOP before the toggle (r.entry == body_at when no pad is needed). In trap mode the "jump" is an int3 on
  // byte 0 and the other bytes stay: only boundary 0 exists for install/remove.
  // With prefixes: `2E`*prefix_len, then the jmp, whose rel32 counts from a + span.
  const std::size_t span = kJumpLen + prefix;
  static_assert(sizeof t.original_ >= kJumpLen + detail::kMaxPrefix);
  const std::size_t keep = std::min<std::size_t>(sizeof t.original_, room);
  std::memcpy(t.original_, code, keep);
  if (trap_mode) {
    std::memcpy(t.jump_, t.original_, kJumpLen);
    t.jump_[0] = x86::kInt3;
    an.boundary_mask = 0;
    an.prefix_len = 0;
  } else {
    std::memset(t.jump_, enc::kCsPrefix, prefix);
    if (!enc::jmp_rel32(t.jump_ + prefix, a + prefix, r.entry)) return Status::no_trampoline_space;
    for (unsigned b = 1; b < span; ++b)
      if ((an.boundary_mask & (1u << b)) != 0 && t.jump_[b] != x86::kInt3)
        return Status::no_trampoline_space;  // the pool broke its contract
  }
  t.span_ = static_cast<std::uint8_t>(trap_mode ? 1 : span);

  // Redirects: boundary 0 enters like the jump (probe, then copies); boundary i goes to
  // the copy of instruction i. Registered by install(), cleared by remove().
  for (std::size_t i = 0; i < an.count; ++i)
    t.redirect_to_[i] = i == 0 ? body_at : body_at + kCopiesAt + copy_offset[i];

  t.addr_ = a;
  t.analysis_ = an;
  t.entry_ = r.entry;
  t.body_ = body;
  *out = std::move(t);
  return Status::ok;
}

// Trap mode has one int3 (byte 0): only its redirect is registered.
Status Tracepoint::set_redirects() noexcept {
  for (std::size_t i = 0; i < (span_ == 1 ? 1u : analysis_.count); ++i)
    if (trap::redirect_set(addr_ + analysis_.offset[i], redirect_to_[i]) != crossmod::Status::ok)
      return Status::table_full;
  return Status::ok;
}

void Tracepoint::clear_redirects() noexcept {
  for (std::size_t i = 0; i < (span_ == 1 ? 1u : analysis_.count); ++i)
    (void)trap::redirect_clear(addr_ + analysis_.offset[i]);
}

namespace {

inline bool is_boundary(const Analysis& an, unsigned b) noexcept {
  return b == 0 || (an.boundary_mask & (1u << b)) != 0;
}

// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE) by the `syscall` instruction,
// not libc's syscall(3): between steps 1 and 5 the installing thread must not call code
// that may itself be traced (libc's syscall() under a '*' pattern), or it would trap in
// the middle of the protocol, and the SIGTRAP handler's own libc calls (errno, the
// signal-return stub) might meet an int3 of the same batch while SIGTRAP is blocked.
long raw_membarrier_sync_core() noexcept {
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(__NR_membarrier)),
                 "D"(static_cast<long>(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)), "S"(0L),
                 "d"(0L)
               : "rcx", "r11", "memory");
  return ret;
}

// Checked by check_wait() before any byte is written: sync_core is registered here.
Status wait(const WaitPolicy& w) noexcept {
  if (w.kind == WaitPolicy::Kind::sync_core)
    return raw_membarrier_sync_core() == 0 ? Status::ok : Status::os_error;
  return wait_from(w, x86::rdtsc()) == crossmod::Status::ok ? Status::ok : Status::os_error;
}

}  // namespace

// A wait that cannot fail halfway through a protocol: checked before any byte is written.
static Status check_wait(const WaitPolicy& w) noexcept {
  if (w.kind != WaitPolicy::Kind::sync_core) return Status::ok;
  return sync_core_register() == crossmod::Status::ok ? Status::ok : Status::os_error;
}

// The bytes of the written range that are not instruction boundaries, from `bytes`.
void Tracepoint::store_interior(const std::uint8_t* bytes) noexcept {
  auto* code = reinterpret_cast<std::uint8_t*>(addr_);
  for (unsigned b = 1; b < span_; ++b)
    if (!is_boundary(analysis_, b)) x86::store_byte(code + b, bytes[b]);
}

bool Tracepoint::in_line() const noexcept {
  return body_ != nullptr && x86::straddle_split(addr_, span_) == 0;
}

Status Tracepoint::check_install() const noexcept {
  if (body_ == nullptr || installed_) return Status::bad_state;
  auto* code = reinterpret_cast<const std::uint8_t*>(addr_);
  if (!is_writable(code, span_)) return Status::not_writable;
  if (std::memcmp(code, original_, span_) != 0) return Status::bad_bytes;
  return Status::ok;
}

Status Tracepoint::check_remove() const noexcept {
  if (body_ == nullptr || !installed_) return Status::bad_state;
  auto* code = reinterpret_cast<const std::uint8_t*>(addr_);
  if (!is_writable(code, span_)) return Status::not_writable;
  if (std::memcmp(code, jump_, span_) != 0) return Status::bad_bytes;
  return Status::ok;
}

Status Tracepoint::install(const WaitPolicy& w) noexcept { return install_all({this, 1}, w); }
Status Tracepoint::remove(const WaitPolicy& w) noexcept { return remove_all({this, 1}, w); }

Status Tracepoint::install_all(std::span<Tracepoint> tps, const WaitPolicy& w) noexcept {
  return install_n(tps.size(), [tps](std::size_t i) -> Tracepoint& { return tps[i]; }, w);
}

Status Tracepoint::install_all(std::span<Tracepoint* const> tps, const WaitPolicy& w) noexcept {
  return install_n(tps.size(), [tps](std::size_t i) -> Tracepoint& { return *tps[i]; }, w);
}

// `at(i)` is the i-th tracepoint of the batch.
template <class At>
Status Tracepoint::install_n(std::size_t n, At at, const WaitPolicy& w) noexcept {
  if (const Status s = check_wait(w); s != Status::ok) return s;
  bool straddlers = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (const Status s = at(i).check_install(); s != Status::ok) return s;
    straddlers = straddlers || !at(i).in_line();
  }
  // 0. Redirects for every boundary.
  for (std::size_t i = 0; i < n; ++i) {
    if (const Status s = at(i).set_redirects(); s != Status::ok) {
      for (std::size_t j = 0; j <= i; ++j) at(j).clear_redirects();
      return s;
    }
  }
  if (straddlers) {
    // 1. int3 on every boundary (for b >= 1 this is already the final rel32 byte).
    for (std::size_t i = 0; i < n; ++i) {
      Tracepoint& t = at(i);
      if (t.in_line()) continue;
      auto* code = reinterpret_cast<std::uint8_t*>(t.addr_);
      for (unsigned b = 0; b < t.span_; ++b)
        if (is_boundary(t.analysis_, b)) x86::store_byte(code + b, x86::kInt3);
    }
    // 2.
    (void)wait(w);
    // 3. The rest of the jump (rel32, and with prefixes the opcode and the later 0x2E):
    //    unreachable now, every entry into the range is an int3.
    for (std::size_t i = 0; i < n; ++i)
      if (!at(i).in_line()) at(i).store_interior(at(i).jump_);
    // 4.
    (void)wait(w);
  }
  // 5. Byte 0 over its int3; an in-line jump whole, in one store.
  for (std::size_t i = 0; i < n; ++i) {
    Tracepoint& t = at(i);
    auto* code = reinterpret_cast<std::uint8_t*>(t.addr_);
    if (t.in_line())
      (void)x86::store_locked(code, {t.jump_, t.span_});
    else
      x86::store_byte(code, t.jump_[0]);
    t.installed_ = true;
  }
  return Status::ok;
}

Status Tracepoint::remove_all(std::span<Tracepoint> tps, const WaitPolicy& w) noexcept {
  return remove_n(tps.size(), [tps](std::size_t i) -> Tracepoint& { return tps[i]; }, w);
}

Status Tracepoint::remove_all(std::span<Tracepoint* const> tps, const WaitPolicy& w) noexcept {
  return remove_n(tps.size(), [tps](std::size_t i) -> Tracepoint& { return *tps[i]; }, w);
}

// `at(i)` is the i-th tracepoint of the batch.
template <class At>
Status Tracepoint::remove_n(std::size_t n, At at, const WaitPolicy& w) noexcept {
  if (const Status s = check_wait(w); s != Status::ok) return s;
  bool straddlers = false;
  for (std::size_t i = 0; i < n; ++i) {
    if (const Status s = at(i).check_remove(); s != Status::ok) return s;
    straddlers = straddlers || !at(i).in_line();
  }
  if (straddlers) {
    // 1. int3 over byte 0 (jmp opcode or first prefix): every boundary is an int3 again.
    for (std::size_t i = 0; i < n; ++i)
      if (!at(i).in_line()) x86::store_byte(reinterpret_cast<std::uint8_t*>(at(i).addr_), x86::kInt3);
    (void)wait(w);
    // 2. Original non-boundary bytes (interiors of the replaced instructions).
    for (std::size_t i = 0; i < n; ++i)
      if (!at(i).in_line()) at(i).store_interior(at(i).original_);
    (void)wait(w);
  }
  // 3. Original first bytes, last boundary first (any order is correct: each instruction
  //    is complete behind its int3 since step 2); an in-line range whole, in one store.
  for (std::size_t i = 0; i < n; ++i) {
    Tracepoint& t = at(i);
    auto* code = reinterpret_cast<std::uint8_t*>(t.addr_);
    if (t.in_line()) {
      (void)x86::store_locked(code, {t.original_, t.span_});
    } else {
      for (unsigned b = t.span_; b-- > 0;)
        if (is_boundary(t.analysis_, b)) x86::store_byte(code + b, t.original_[b]);
    }
    t.installed_ = false;
  }
  // 4. A thread that fetched an int3 (or the jump's 0xCC at a later boundary) before step
  //    3 and traps now finds the redirect cleared and the original byte back, and
  //    re-executes in place (trap.hpp); one that trapped earlier was sent to the
  //    trampoline, which stays mapped.
  for (std::size_t i = 0; i < n; ++i) at(i).clear_redirects();
  return Status::ok;
}

Status Tracepoint::enable() noexcept {
  if (body_ == nullptr) return Status::bad_state;
  return x86::store_locked(body_, {toggle_on_, kToggleLen}) == crossmod::Status::ok
             ? Status::ok
             : Status::bad_state;
}

Status Tracepoint::disable() noexcept {
  if (body_ == nullptr) return Status::bad_state;
  return x86::store_locked(body_, {toggle_off_, kToggleLen}) == crossmod::Status::ok
             ? Status::ok
             : Status::bad_state;
}

}  // namespace crossmod::tp
