// x86-64 encodings and the in-line store primitives. Every inline asm of the engine lives
// here (and in x86.hpp's rdtsc/pause). Thread safety: all functions thread-safe; the store
// functions, straddle_split and spin_ticks_from are async-signal-safe once
// cache_line_size() has been called (it is cached on first use, also by the stores).
#include "crossmod/x86.hpp"

#include <cpuid.h>

#include <atomic>
#include <cstring>

#include "x86_private.hpp"

namespace crossmod::x86 {

namespace {

inline constexpr std::size_t kWindow = 8;  // bytes per in-line store (one quadword)
inline constexpr unsigned kFallbackLine = 64;

// Chooses the 8-byte store window for [dst, dst+len). Preference: the aligned quadword
// holding the range (a plain MOV inside an aligned quadword is atomic on Intel and AMD,
// SDM Vol 3A 9.1.1, APM Vol 2 7.3.2), else the window starting at dst, moved back so it
// ends at the line end if needed. False when the range itself crosses a line.
bool pick_window(std::uintptr_t dst, std::size_t len, std::uintptr_t* window) noexcept {
  const std::uintptr_t line = cache_line_size();
  const std::uintptr_t line_start = dst & ~(line - 1);
  const std::uintptr_t line_end = line_start + line;
  if (dst + len > line_end) return false;
  const std::uintptr_t aligned = dst & ~static_cast<std::uintptr_t>(kWindow - 1);
  if (dst + len <= aligned + kWindow) {
    *window = aligned;  // line is a multiple of 8, so this stays in the line
    return true;
  }
  *window = dst < line_end - kWindow ? dst : line_end - kWindow;
  return true;
}

inline std::uint64_t load8(const std::uint8_t* p) noexcept {
  std::uint64_t v;
  asm volatile("movq (%[p]), %[v]" : [v] "=r"(v) : [p] "r"(p) : "memory");
  return v;
}

// LOCK CMPXCHG r64, m64 (SDM Vol 2A "CMPXCHG"). On failure *expected receives the current
// value. Locked operations inside one line are atomic even when unaligned (SDM Vol 3A
// 9.1.2.2 "software controlled bus locking"; APM Vol 2 7.3.2).
inline bool cas8(std::uint8_t* p, std::uint64_t* expected, std::uint64_t desired) noexcept {
  bool ok;
  asm volatile("lock cmpxchgq %[d], (%[p])"
               : "+a"(*expected), "=@ccz"(ok)
               : [d] "r"(desired), [p] "r"(p)
               : "memory");
  return ok;
}

inline std::uint64_t merge(std::uint64_t old, std::size_t offset,
                           std::span<const std::uint8_t> bytes) noexcept {
  std::uint8_t buf[kWindow];
  std::memcpy(buf, &old, kWindow);
  std::memcpy(buf + offset, bytes.data(), bytes.size());
  std::uint64_t v;
  std::memcpy(&v, buf, kWindow);
  return v;
}

Status check(std::uint8_t* dst, std::span<const std::uint8_t> bytes,
             std::uintptr_t* window) noexcept {
  if (bytes.empty() || bytes.size() > kMaxPatchLen) return Status::bad_length;
  if (dst == nullptr) return Status::bad_address;
  if (!pick_window(reinterpret_cast<std::uintptr_t>(dst), bytes.size(), window))
    return Status::bad_address;
  return Status::ok;
}

}  // namespace

namespace detail {

CpuidRegs cpuid(std::uint32_t leaf, std::uint32_t subleaf) noexcept {
  CpuidRegs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  return r;
}

}  // namespace detail

Status encode_call(std::uintptr_t at, std::uintptr_t target,
                   std::array<std::uint8_t, 5>* out) noexcept {
  // rel32 is relative to the end of the instruction (SDM Vol 2A "CALL", near relative).
  const std::uintptr_t next_ip = at + kCallLen;
  const auto disp = static_cast<std::int64_t>(target - next_ip);
  if (disp < INT32_MIN || disp > INT32_MAX) return Status::out_of_range;
  const auto rel = static_cast<std::uint32_t>(static_cast<std::int32_t>(disp));
  (*out)[0] = kCallRel32;
  for (unsigned i = 0; i < 4; ++i) (*out)[1 + i] = static_cast<std::uint8_t>(rel >> (8 * i));
  return Status::ok;
}

bool decode_call(const std::uint8_t* bytes, std::uintptr_t at, std::uintptr_t* target) noexcept {
  if (bytes == nullptr || bytes[0] != kCallRel32) return false;
  std::uint32_t rel = 0;
  for (unsigned i = 0; i < 4; ++i) rel |= static_cast<std::uint32_t>(bytes[1 + i]) << (8 * i);
  const auto disp = static_cast<std::int64_t>(static_cast<std::int32_t>(rel));
  *target = at + kCallLen + static_cast<std::uintptr_t>(disp);
  return true;
}

std::array<std::uint8_t, 2> short_jump_over_call() noexcept {
  // JMP rel8 with rel8 = 3 skips the remaining 3 bytes of the 5-byte site.
  constexpr std::uint8_t kSkip = kCallLen - 2;
  return {kJmpRel8, kSkip};
}

unsigned cache_line_size() noexcept {
  static std::atomic<unsigned> cached{0};
  unsigned line = cached.load(std::memory_order_relaxed);
  if (line != 0) return line;
  // CPUID.01H:EBX[15:8] is the CLFLUSH line size in 8-byte units (SDM Vol 2A "CPUID").
  const auto r = detail::cpuid(1);
  line = ((r.ebx >> 8) & 0xFFu) * 8u;
  // A hypervisor may report 0; the masks below also need a power of two.
  if (line < kWindow || (line & (line - 1)) != 0) line = kFallbackLine;
  cached.store(line, std::memory_order_relaxed);
  return line;
}

void spin_ticks_from(std::uint64_t start, std::uint64_t ticks) noexcept {
  while (rdtsc() - start < ticks) pause();
}

Status store_locked(std::uint8_t* dst, std::span<const std::uint8_t> bytes) noexcept {
  std::uintptr_t w = 0;
  if (Status s = check(dst, bytes, &w); s != Status::ok) return s;
  auto* win = reinterpret_cast<std::uint8_t*>(w);
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(dst) - w;
  // The neighbours of [dst, dst+len) inside the window are re-written with their current
  // value; the CAS retries if another thread changed them meanwhile (disjoint updates
  // sharing a window are therefore safe with this store, not with store_plain).
  std::uint64_t expected = load8(win);
  while (!cas8(win, &expected, merge(expected, offset, bytes))) {
  }
  return Status::ok;
}

Status store_plain(std::uint8_t* dst, std::span<const std::uint8_t> bytes) noexcept {
  std::uintptr_t w = 0;
  if (Status s = check(dst, bytes, &w); s != Status::ok) return s;
  auto* win = reinterpret_cast<std::uint8_t*>(w);
  const std::size_t offset = reinterpret_cast<std::uintptr_t>(dst) - w;
  const std::uint64_t v = merge(load8(win), offset, bytes);
  // One 8-byte MOV (asm, so the compiler cannot split or widen it).
  asm volatile("movq %[v], (%[p])" : : [v] "r"(v), [p] "r"(win) : "memory");
  return Status::ok;
}

void store_byte(std::uint8_t* dst, std::uint8_t value) noexcept {
  asm volatile("movb %b[v], (%[p])" : : [v] "q"(value), [p] "r"(dst) : "memory");
}

unsigned straddle_split(std::uintptr_t addr, std::size_t len) noexcept {
  const std::uintptr_t line = cache_line_size();
  const std::uintptr_t before = line - (addr & (line - 1));
  if (len <= before) return 0;
  return static_cast<unsigned>(before);
}

}  // namespace crossmod::x86
