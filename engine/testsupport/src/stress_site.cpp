// The stress site (see stress_site.hpp and DESIGN.md "The stress site"): one reservation of
// address space holding the site page, the stub page and the PROT_NONE window every torn
// call lands in; create() proves every torn mix faults (Zydis) before a cell may use it.
// Thread safety: create/destroy from one thread; entry() is safe on any thread.
#include "crossmod/testsupport/stress_site.hpp"

#include <Zydis/Zydis.h>
#include <fmt/core.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "crossmod/code_memory.hpp"
#include "crossmod/testsupport/site_code.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::testsupport {
namespace {

using Bytes5 = std::array<std::uint8_t, 5>;

// rel32 of state A, byte by byte (r0 r1 r2 r3). Every byte is invalid in 64-bit mode, so
// a "B front + A back" mix, whose first opcode byte is one of them after B's prefixes,
// is #UD at its first byte for every S. r3 is small and positive: the stub lies about
// +101 MiB ahead, far from the torn window (which B's last byte puts near -1.75 GiB).
constexpr std::array<std::uint8_t, 4> kRel32Bytes = {
    kInvalidIn64[2],   // 0x0E
    kInvalidIn64[5],   // 0x1E
    kInvalidIn64[3],   // 0x16
    kInvalidIn64[0]};  // 0x06
static_assert(kRel32Bytes[3] < 0x80, "the stub must lie ahead of the site (positive rel32)");
constexpr std::int64_t kStubDisplacement =
    static_cast<std::int64_t>(kRel32Bytes[0]) | (static_cast<std::int64_t>(kRel32Bytes[1]) << 8) |
    (static_cast<std::int64_t>(kRel32Bytes[2]) << 16) |
    (static_cast<std::int64_t>(kRel32Bytes[3]) << 24);

std::string hex(std::span<const std::uint8_t> b) {
  std::string s;
  for (std::size_t i = 0; i < b.size(); ++i) s += fmt::format("{}{:02x}", i ? " " : "", b[i]);
  return s;
}

std::uintptr_t page_size() { return static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE)); }
std::uintptr_t page_down(std::uintptr_t a) { return a & ~(page_size() - 1); }
std::uintptr_t page_up(std::uintptr_t a) { return page_down(a + page_size() - 1); }

struct Decoded {
  bool ok = false;
  ZydisDecodedInstruction insn{};
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT]{};
};

// Decodes the first instruction of `bytes` followed by what really follows a site:
// `ret` and then 0x0E filler, so a decoder that reads past the mix sees the true page.
Decoded decode_at(const Bytes5& bytes) {
  std::uint8_t buf[16];
  std::memset(buf, x86::kInvalid64, sizeof buf);
  std::memcpy(buf, bytes.data(), bytes.size());
  buf[bytes.size()] = x86::kRet;
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  Decoded d;
  d.ok = ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, buf, sizeof buf, &d.insn, d.ops));
  return d;
}

bool is_ud(ZydisMnemonic m) {
  return m == ZYDIS_MNEMONIC_UD0 || m == ZYDIS_MNEMONIC_UD1 || m == ZYDIS_MNEMONIC_UD2;
}

}  // namespace

struct StressSite::Impl {
  std::uintptr_t base = 0;
  std::size_t len = 0;
  std::uint8_t* site = nullptr;
  std::uint8_t* entry = nullptr;
  std::uint8_t* stub = nullptr;
  std::uintptr_t site_page = 0, stub_page = 0;
  Bytes5 a{}, b{};
  unsigned straddle = 0, line_offset = 0;
  std::uintptr_t window_begin = 0, window_end = 0;
  WritableRange range;

  ~Impl() {
    (void)range.restore();
    if (base != 0) munmap(reinterpret_cast<void*>(base), len);
  }
};

std::string StressSite::check_mixes(unsigned split, const Bytes5& a, const Bytes5& b,
                                    std::uintptr_t site_addr, std::uintptr_t window_begin,
                                    std::uintptr_t window_end) {
  if (split < 1 || split > 4) return fmt::format("S={}: not a straddle split (1..4)", split);
  Bytes5 b_front{}, a_front{};
  for (unsigned i = 0; i < 5; ++i) {
    b_front[i] = i < split ? b[i] : a[i];
    a_front[i] = i < split ? a[i] : b[i];
  }
  // "B front + A back" must be #UD at its first byte: a decodable instruction there
  // would run (the paper's 0F 1F + rel32 ran as a longer NOP and scribbled memory).
  Decoded d1 = decode_at(b_front);
  if (d1.ok && !is_ud(d1.insn.mnemonic)) {
    return fmt::format("S={}: torn mix {} (B front + A back) decodes as valid '{}' ({} bytes)",
                       split, hex(b_front), ZydisMnemonicGetString(d1.insn.mnemonic),
                       d1.insn.length);
  }
  // "A front + B back" must be a 5-byte call whose target lies in the PROT_NONE window.
  Decoded d2 = decode_at(a_front);
  if (!d2.ok) return "";  // invalid at the first byte faults too
  if (is_ud(d2.insn.mnemonic)) return "";
  if (d2.insn.mnemonic != ZYDIS_MNEMONIC_CALL || d2.insn.length != 5) {
    return fmt::format("S={}: torn mix {} (A front + B back) decodes as '{}' ({} bytes), not "
                       "a call into the reserved window",
                       split, hex(a_front), ZydisMnemonicGetString(d2.insn.mnemonic),
                       d2.insn.length);
  }
  ZyanU64 target = 0;
  if (!ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&d2.insn, &d2.ops[0], site_addr, &target))) {
    return fmt::format("S={}: torn mix {} (A front + B back): call target not computable", split,
                       hex(a_front));
  }
  if (target < window_begin || target >= window_end) {
    return fmt::format("S={}: torn mix {} (A front + B back) calls {:#x}, outside the reserved "
                       "PROT_NONE window [{:#x}, {:#x})",
                       split, hex(a_front), target, window_begin, window_end);
  }
  return "";
}

std::unique_ptr<StressSite> StressSite::create(unsigned straddle, unsigned line_offset,
                                               std::string* why,
                                               std::span<const std::uint8_t> state_b) {
  auto refuse = [&](std::string reason) -> std::unique_ptr<StressSite> {
    if (why) *why = std::move(reason);
    return nullptr;
  };
  const std::uintptr_t page = page_size();
  const unsigned line = x86::cache_line_size();
  if (straddle > 4) return refuse(fmt::format("straddle S={} out of range 0..4", straddle));
  if (straddle == 0 && line_offset + x86::kCallLen > line) {
    return refuse(fmt::format("line offset {} does not fit a 5-byte site in a {}-byte line",
                              line_offset, line));
  }
  if (line * 2 > page) return refuse(fmt::format("cache line {} too large for the layout", line));

  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  if (state_b.empty()) {
    m.b = kNop5Prefixed;
  } else if (state_b.size() != 5) {
    return refuse(fmt::format("state_b has {} bytes, need 5", state_b.size()));
  } else {
    std::memcpy(m.b.data(), state_b.data(), 5);
  }
  m.straddle = straddle;

  // Every "A front + B back" call has rel32 bits 31..24 = B's last byte, so its target
  // lies in a 16 MiB window at site + 5 + sext(b[4] << 24). When that is behind the site
  // the reservation starts there; otherwise there is no separate window (and a straddling
  // cell is refused by the mix check below).
  const std::int64_t window_off =
      m.b[4] >= 0x80 ? static_cast<std::int64_t>(m.b[4]) * (1LL << 24) - (1LL << 32) : 0;
  const std::uintptr_t behind = page_up(static_cast<std::uintptr_t>(-window_off));
  const std::uintptr_t ahead = page_up(static_cast<std::uintptr_t>(kStubDisplacement));
  m.len = behind + 4 * page + ahead + 4 * page;
  void* base = mmap(nullptr, m.len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    const std::size_t mib = m.len >> 20;
    m.len = 0;
    return refuse(fmt::format("mmap reservation of {} MiB failed: {}", mib, std::strerror(err)));
  }
  m.base = reinterpret_cast<std::uintptr_t>(base);
  m.site_page = m.base + behind + 2 * page;
  // The line boundary sits mid-page so the two lines of a straddling site share a page.
  const std::uintptr_t boundary = m.site_page + page / 2;
  const std::uintptr_t site = straddle ? boundary - straddle : boundary + line_offset;
  m.site = reinterpret_cast<std::uint8_t*>(site);
  m.entry = m.site - kEntryPrologueLen;
  m.line_offset = static_cast<unsigned>(site % line);
  if (window_off != 0) {
    m.window_begin = page_down(site + 5 + static_cast<std::uintptr_t>(window_off));
    m.window_end = page_up(site + 5 + static_cast<std::uintptr_t>(window_off) + (1u << 24));
  }
  const std::uintptr_t stub = site + 5 + static_cast<std::uintptr_t>(kStubDisplacement);
  m.stub = reinterpret_cast<std::uint8_t*>(stub);
  m.stub_page = page_down(stub);

  // State A: call rel32 to the stub.
  m.a[0] = x86::kCallRel32;
  std::memcpy(&m.a[1], kRel32Bytes.data(), 4);

  // Stub page(s): 0x0E everywhere but the stub; two pages in case it crosses one.
  auto* sp = reinterpret_cast<void*>(m.stub_page);
  if (mprotect(sp, 2 * page, PROT_READ | PROT_WRITE) != 0) {
    return refuse(fmt::format("mprotect stub page: {}", std::strerror(errno)));
  }
  fill_invalid({static_cast<std::uint8_t*>(sp), 2 * page});
  write_stub(m.stub);
  if (mprotect(sp, 2 * page, PROT_READ | PROT_EXEC) != 0) {
    return refuse(fmt::format("mprotect stub page: {}", std::strerror(errno)));
  }

  // Site page: entry = xor eax,eax; site (state A); ret; 0x0E everywhere else.
  auto* pp = reinterpret_cast<void*>(m.site_page);
  if (mprotect(pp, page, PROT_READ | PROT_WRITE) != 0) {
    return refuse(fmt::format("mprotect site page: {}", std::strerror(errno)));
  }
  fill_invalid({static_cast<std::uint8_t*>(pp), page});
  write_entry(m.site, m.a);
  if (mprotect(pp, page, PROT_READ | PROT_EXEC) != 0) {
    return refuse(fmt::format("mprotect site page: {}", std::strerror(errno)));
  }
  // Registered with the engine: wordpatch/callpatch patch only registered ranges.
  std::error_code ec;
  if (Status st = WritableRange::make(pp, page, &m.range, &ec); st != Status::ok) {
    return refuse(fmt::format("engine WritableRange::make on the site page: {}{}", to_string(st),
                              ec ? ": " + ec.message() : std::string()));
  }

  // Sanity for every S: both states are one 5-byte instruction (layout equivalence), and
  // A really calls the stub.
  Decoded da = decode_at(m.a), db = decode_at(m.b);
  if (!db.ok || db.insn.length != 5) {
    return refuse(fmt::format("state B {} is not one 5-byte instruction", hex(m.b)));
  }
  ZyanU64 target = 0;
  if (!da.ok || da.insn.mnemonic != ZYDIS_MNEMONIC_CALL || da.insn.length != 5 ||
      !ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&da.insn, &da.ops[0], site, &target)) ||
      target != stub) {
    return refuse(fmt::format("state A {} does not decode as a call to the stub", hex(m.a)));
  }

  // At S > 0 the hardware can tear at the line boundary; at S = 0 a store that is not
  // single-copy atomic (the `aligned` protocol's plain unaligned store on AMD) could tear
  // at an 8-byte boundary inside the site, which is again a split of 1..4 bytes. So the
  // mixes are checked at every S, except for a caller-chosen B at S = 0 (bench times the
  // canonical NOP there and never tears it).
  if (straddle > 0 || state_b.empty()) {
    // Every split, not only this cell's: one table of mixes is proven for the site.
    for (unsigned s = 1; s <= 4; ++s) {
      std::string r = check_mixes(s, m.a, m.b, site, m.window_begin, m.window_end);
      if (!r.empty()) return refuse(r);
    }
  }
  if (straddle > 0) {
    // A and B must differ in both parts, else a tear at this S is invisible.
    const bool front_differs =
        std::memcmp(m.a.data(), m.b.data(), straddle) != 0;
    const bool back_differs =
        std::memcmp(m.a.data() + straddle, m.b.data() + straddle, 5 - straddle) != 0;
    if (!front_differs || !back_differs) {
      return refuse(fmt::format("S={}: A {} and B {} do not differ in both the front and the "
                                "back part; the cell would measure nothing",
                                straddle, hex(m.a), hex(m.b)));
    }
    // No torn target may be a mapped byte of the site or stub pages.
    auto overlaps = [&](std::uintptr_t p, std::uintptr_t n) {
      return p < m.window_end && m.window_begin < p + n;
    };
    if (overlaps(m.site_page, page) || overlaps(m.stub_page, 2 * page)) {
      return refuse("torn-call window overlaps the site or stub pages");
    }
  }

  auto out = std::unique_ptr<StressSite>(new StressSite());
  out->impl_ = std::move(impl);
  return out;
}

StressSite::~StressSite() = default;

std::uint8_t* StressSite::site() const { return impl_->site; }
StressSite::EntryFn StressSite::entry() const {
  return reinterpret_cast<EntryFn>(reinterpret_cast<std::uintptr_t>(impl_->entry));
}
const std::array<std::uint8_t, 5>& StressSite::state_a() const { return impl_->a; }
const std::array<std::uint8_t, 5>& StressSite::state_b() const { return impl_->b; }
const void* StressSite::call_target() const { return impl_->stub; }
unsigned StressSite::straddle() const { return impl_->straddle; }
bool StressSite::owns_pc(std::uintptr_t pc) const {
  return pc >= impl_->base && pc < impl_->base + impl_->len;
}
unsigned StressSite::line_offset() const { return impl_->line_offset; }
std::uintptr_t StressSite::torn_window_begin() const { return impl_->window_begin; }
std::uintptr_t StressSite::torn_window_end() const { return impl_->window_end; }
std::uintptr_t StressSite::reservation_begin() const { return impl_->base; }
std::uintptr_t StressSite::reservation_end() const { return impl_->base + impl_->len; }

}  // namespace crossmod::testsupport
