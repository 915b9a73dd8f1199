// Trampoline pool: bodies at constrained addresses ("direct"), else entry slots there and
// bump-allocated bodies. Thread safety: one mutex around all state (install path only);
// pool_stats() copies counters under it. Nothing is ever unmapped: threads may be inside
// any trampoline.
//
// The jump's rel32 must hold 0xCC at every replaced boundary, which fixes up to four of
// its bytes; with byte 0 fixed only one address in 256 qualifies, with byte 3 fixed the
// target lies 816..832 MiB below the code. Preferred: the body itself at such an address
// e (a pad NOP of (-e)&7 bytes first, so the toggle slot is 8-aligned), so each call of
// the traced function takes one jump less (jump -> body, not jump -> entry -> body).
// Fallback: a 5-byte entry (`jmp body`) at e, which packs densely into the constrained
// pages, and the body (copies, probe block) anywhere near the code, in an arena.
//
// Search cost of the direct placement (start-up matters: python3 'Py*' prepares 774
// tracepoints): only the kDirectPages most recently mapped entry pages are searched, and
// a page with fewer free bytes than the body is skipped unread; within a page a candidate
// whose range holds a used byte moves past the last such byte, so a page costs about one
// pass over its occupancy words, not one per candidate. Else a new page is mapped, with
// the same nearest-first search as for entry slots; a constraint whose page offsets
// cannot hold the body (direct_fits_somewhere) skips all of this. Only when nothing has
// room does the fallback run. Why 128 pages: each new page costs an mmap and a page
// fault (~4 us here), and with 8 pages python3 'Py*' mapped 349 pages (82 with entry
// slots) and started 1.2 ms slower than with entry slots; with 128 it maps 87 and starts
// no slower (figures in tracepoints/README.md). The bound keeps the search linear in the
// tracepoints.

#include "pool.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <iterator>
#include <memory>
#include <mutex>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "encoding.hpp"

namespace crossmod::tp {

namespace detail {

namespace {

constexpr std::uintptr_t kPage = 4096;
constexpr std::int64_t kTwoGiB = std::int64_t{1} << 31;
constexpr std::uint64_t kNone = UINT64_MAX;
constexpr std::uint64_t kSpan = std::uint64_t{1} << 32;      // size of the s domain
constexpr std::uintptr_t kLowest = std::uintptr_t{1} << 20;  // above mmap_min_addr
constexpr std::uintptr_t kUserTop = (std::uintptr_t{1} << 47) - kPage;
constexpr std::size_t kArenaSize = std::size_t{64} << 10;
constexpr std::size_t kEntryMax = enc::kJmpAbsLen;
constexpr std::size_t kDirectPages = 128;  // recent entry pages searched for a direct body
// A direct body extends up to a page past its constrained address: keep it (and its
// relocated RIP-relative operands) within rel32 reach of the code, as arenas do.
constexpr std::int64_t kDirectReach = kTwoGiB - (std::int64_t{64} << 10);

// The Intel SDM's recommended multi-byte NOPs (Vol 2B, NOP), 1..7 bytes: one instruction
// pads a direct body's constrained address up to its 8-aligned toggle slot.
constexpr std::uint8_t kPadNop[8][7] = {
    {},
    {0x90},
    {0x66, 0x90},
    {0x0F, 0x1F, 0x00},
    {0x0F, 0x1F, 0x40, 0x00},
    {0x0F, 0x1F, 0x44, 0x00, 0x00},
    {0x66, 0x0F, 0x1F, 0x44, 0x00, 0x00},
    {0x0F, 0x1F, 0x80, 0x00, 0x00, 0x00, 0x00},
};
std::size_t pad_for(std::uintptr_t e) { return (0 - e) & 7; }

// A page's bytes in use, one bit each, in 64-bit words: the searches below ask about
// ranges (is any byte of [off, off + len) used, which is the last), a word at a time.
// Bit by bit (std::bitset, until 28 Nov) the reservations were a quarter of java's
// start-up under --trace '*' (59,088 probes; perf: tp::detail::reserve's own samples).
constexpr std::size_t kWords = kPage / 64;

struct EntryPage {
  std::uintptr_t base;
  std::uint64_t used[kWords] = {};
  std::size_t free = kPage;  // bytes not in used
};

// The bits of word w that lie in [off, end).
std::uint64_t word_mask(std::size_t w, std::size_t off, std::size_t end) {
  const std::size_t lo = std::max(off, w * 64) - w * 64, hi = std::min(end, w * 64 + 64) - w * 64;
  const std::uint64_t upto_hi = hi == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << hi) - 1;
  return upto_hi & ~((std::uint64_t{1} << lo) - 1);
}

bool byte_used(const EntryPage& pg, std::size_t i) { return (pg.used[i / 64] >> (i % 64)) & 1; }

// The last used byte in [off, off + len), or kPage if none is (off + len <= kPage).
std::size_t last_used(const EntryPage& pg, std::size_t off, std::size_t len) {
  const std::size_t end = off + len;
  if (len == 0) return kPage;
  for (std::size_t w = (end - 1) / 64 + 1; w-- > off / 64;) {
    const std::uint64_t m = pg.used[w] & word_mask(w, off, end);
    if (m != 0) return w * 64 + 63 - static_cast<std::size_t>(__builtin_clzll(m));
  }
  return kPage;
}

void mark(EntryPage& pg, std::size_t off, std::size_t len, bool used) {
  const std::size_t end = off + len;
  for (std::size_t w = off / 64; len != 0 && w <= (end - 1) / 64; ++w) {
    const std::uint64_t m = word_mask(w, off, end);
    pg.used[w] = used ? pg.used[w] | m : pg.used[w] & ~m;
  }
  if (used)
    pg.free -= len;
  else
    pg.free += len;
}

struct Arena {
  CodeBlock block;
  std::size_t used = 0;
};

struct Interval {
  std::uintptr_t begin, end;
};

struct Pool {
  std::mutex mu;
  std::vector<EntryPage> pages;
  std::vector<std::unique_ptr<Arena>> arenas;
  PoolStats stats;
  // A snapshot of /proc/self/maps, kept across reservations (reading it costs ~0.1 ms,
  // and python3 with 'Py*' mapped a new entry page for 414 of 564 tracepoints). Our own
  // mappings are added as we make them. Others may appear or go meanwhile: the mmap below
  // never clobbers (MAP_FIXED_NOREPLACE), and reserve() re-reads the maps on a collision
  // and before it gives up, so a stale snapshot costs a retry, never a wrong answer.
  std::vector<Interval> maps;
  bool maps_valid = false;
  std::size_t maps_reads = 0;
  // Reservations made, and how many had been made at the last give-up that read the maps
  // again (new_page_on_fresh_maps).
  std::size_t reserves = 0, retry_at = 0;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: trampolines outlive static destructors
  return *p;
}

// Mapped intervals of the process, sorted (allocates; install path only).
std::vector<Interval> read_maps() {
  std::vector<Interval> out;
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return out;
  unsigned long b = 0, e = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "%lx-%lx", &b, &e) == 2) out.push_back({b, e});
  }
  std::fclose(f);
  std::sort(out.begin(), out.end(), [](auto x, auto y) { return x.begin < y.begin; });
  return out;
}

// The mapping containing page p, or nullptr.
const Interval* mapped_at(const std::vector<Interval>& maps, std::uintptr_t p) {
  auto it = std::upper_bound(maps.begin(), maps.end(), p,
                             [](std::uintptr_t v, const Interval& iv) { return v < iv.begin; });
  if (it == maps.begin()) return nullptr;
  --it;
  return p < it->end ? &*it : nullptr;
}

bool slot_free(const EntryPage& pg, std::size_t off, std::size_t len) {
  return off + len <= kPage && last_used(pg, off, len) == kPage;
}

std::int64_t s_to_rel(std::uint64_t s) { return static_cast<std::int64_t>(s) - kTwoGiB; }
std::uint64_t rel_to_s(std::int64_t rel) { return static_cast<std::uint64_t>(rel + kTwoGiB); }

// Entry length needed at e to reach body (5 if rel32 reaches, else 14).
std::size_t entry_len_for(std::uintptr_t e, std::uintptr_t body) {
  return enc::fits_rel32(enc::rel_from(e + enc::kRel32JmpLen, body)) ? enc::kRel32JmpLen
                                                                     : enc::kJmpAbsLen;
}

// The s values (rel32 + 2^31 from next_ip) of page pg's addresses that rel32 can reach:
// [*s_lo, *s_hi]; false if none.
bool page_s_range(const EntryPage& pg, std::uintptr_t next_ip, std::uint64_t* s_lo, std::uint64_t* s_hi) {
  const std::int64_t lo_rel = static_cast<std::int64_t>(pg.base - next_ip);
  const std::int64_t hi_rel = lo_rel + static_cast<std::int64_t>(kPage) - 1;
  if (hi_rel < -kTwoGiB || lo_rel >= kTwoGiB) return false;
  *s_lo = rel_to_s(std::max(lo_rel, -kTwoGiB));
  *s_hi = rel_to_s(std::min(hi_rel, kTwoGiB - 1));
  return true;
}

// First free slot in an existing page whose rel satisfies c.
bool find_in_page(const EntryPage& pg, std::uintptr_t next_ip, const RelConstraint& c,
                  std::uintptr_t body, std::uintptr_t* e_out) {
  std::uint64_t s = 0, s_hi = 0;
  if (!page_s_range(pg, next_ip, &s, &s_hi)) return false;
  for (;;) {
    s = next_ge(s, c.mask, c.value);
    if (s == kNone || s > s_hi) return false;
    const std::uintptr_t e = next_ip + static_cast<std::uintptr_t>(s_to_rel(s));
    if (slot_free(pg, e - pg.base, entry_len_for(e, body))) {
      *e_out = e;
      return true;
    }
    ++s;
  }
}

// First address e in pg whose rel satisfies c and where the pad NOP and a body of
// body_len bytes fit: [e, e + pad_for(e) + body_len) free and inside the page. A
// candidate whose range holds used bytes moves the search past the last of them.
bool find_direct_in_page(const EntryPage& pg, std::uintptr_t addr, std::uintptr_t next_ip,
                         const RelConstraint& c, std::size_t body_len, std::uintptr_t* e_out) {
  if (pg.free < body_len) return false;
  std::uint64_t s = 0, s_hi = 0;
  if (!page_s_range(pg, next_ip, &s, &s_hi)) return false;
  for (;;) {
    s = next_ge(s, c.mask, c.value);
    if (s == kNone || s > s_hi) return false;
    const std::uintptr_t e = next_ip + static_cast<std::uintptr_t>(s_to_rel(s));
    const std::size_t off = e - pg.base;
    const std::size_t len = pad_for(e) + body_len;
    // Later candidates end no earlier (pad_for(e) + e is e rounded up to 8).
    if (off + len > kPage) return false;
    const std::int64_t d = static_cast<std::int64_t>(e - addr);
    if (d <= -kDirectReach || d + static_cast<std::int64_t>(len) >= kDirectReach) return false;
    const std::size_t last = last_used(pg, off, len);
    if (last == kPage) {
      *e_out = e;
      return true;
    }
    s = rel_to_s(static_cast<std::int64_t>(pg.base + last + 1 - next_ip));
  }
}

// Whether a body of body_len bytes (and its pad) fits in a page at some address whose rel
// satisfies c: a candidate's page offset depends only on rel mod 4096, i.e. on rel32
// bytes 0 and 1, so this holds for every page alike. False e.g. for bytes 0 and 1 both
// fixed and the one offset they leave near the page's end (sqlite3 had one such function:
// without this check the new-page search walked 65,000 pages, 1 ms, before giving up).
bool direct_fits_somewhere(std::uintptr_t next_ip, const RelConstraint& c, std::size_t body_len) {
  if (body_len > kPage) return false;
  const bool lo_fixed = (c.mask & 0xFFu) != 0, hi_fixed = (c.mask & 0xF00u) != 0;
  if (!lo_fixed && !hi_fixed) return true;  // offset 0 is a candidate
  const unsigned lo_n = lo_fixed ? 1 : 256, hi_n = hi_fixed ? 1 : 16;
  for (unsigned h = 0; h < hi_n; ++h)
    for (unsigned l = 0; l < lo_n; ++l) {
      const std::uintptr_t v = (hi_fixed ? c.value & 0xF00u : h << 8) | (lo_fixed ? c.value & 0xFFu : l);
      const std::size_t off = (next_ip + v) & (kPage - 1);
      if (((off + 7) & ~std::size_t{7}) + body_len <= kPage) return true;
    }
  return false;
}

bool reachable_block(const CodeBlock& b, std::uintptr_t addr) {
  const auto lo = reinterpret_cast<std::uintptr_t>(b.data());
  const std::uintptr_t hi = lo + b.size();
  const std::uintptr_t reach = (std::uintptr_t{1} << 31) - (std::uintptr_t{64} << 10);
  return (lo > addr ? lo - addr : addr - lo) < reach && (hi > addr ? hi - addr : addr - hi) < reach;
}

}  // namespace

RelConstraint RelConstraint::from_boundaries(std::uint8_t boundary_mask) noexcept {
  RelConstraint c;
  for (unsigned b = 1; b <= 4; ++b) {
    if ((boundary_mask & (1u << b)) == 0) continue;
    const unsigned shift = 8 * (b - 1);
    // Byte 3 of s is byte 3 of rel with its sign bit flipped (s = rel + 2^31).
    const std::uint32_t v = b == 4 ? (enc::kInt3 ^ 0x80u) : enc::kInt3;
    c.mask |= 0xFFu << shift;
    c.value |= v << shift;
  }
  return c;
}

bool RelConstraint::ok(std::int64_t rel) const noexcept {
  if (rel < -kTwoGiB || rel >= kTwoGiB) return false;
  return (rel_to_s(rel) & mask) == value;
}

std::uint64_t next_ge(std::uint64_t s, std::uint32_t mask, std::uint32_t value) noexcept {
  if (s >= kSpan) return kNone;
  if ((s & mask) == value) return s;
  // Highest fixed byte where s differs from the constraint.
  int p = 3;
  while (((s ^ value) & mask & (0xFFull << (8 * p))) == 0) --p;
  const std::uint64_t low = (std::uint64_t{1} << (8 * (p + 1))) - 1;  // bytes 0..p
  const std::uint64_t sp = (s >> (8 * p)) & 0xFF;
  const std::uint64_t cp = (value >> (8 * p)) & 0xFF;
  if (sp < cp) return (s & ~low) | (value & low);  // raise byte p; lowest fill below
  // Byte p is above its required value: increment the free bits above p (carries ripple
  // through fixed bytes, which are set to all-ones first), then fill bytes 0..p lowest.
  std::uint64_t w = s | low | mask;
  w += 1;
  const std::uint64_t y = (w & ~low & ~static_cast<std::uint64_t>(mask)) | value;
  return y >= kSpan ? kNone : y;
}

std::uint64_t prev_le(std::uint64_t s, std::uint32_t mask, std::uint32_t value) noexcept {
  if (s >= kSpan) s = kSpan - 1;
  // Complementing every bit reverses the order; the fixed bytes become ~value.
  const std::uint64_t r = next_ge((kSpan - 1) - s, mask, ~value & mask);
  return r == kNone ? kNone : (kSpan - 1) - r;
}

namespace {

void refresh_maps(Pool& P) {
  P.maps = read_maps();
  P.maps_valid = true;
  ++P.maps_reads;
}

// Keeps the snapshot sorted by begin; [b, e) was free (our mmap there succeeded). Joins
// it to a mapping that ends at b or begins at e (as the kernel joins our entry pages into
// one VMA), so that the search skips a run of entry pages at once, not page by page
// (direct bodies map a page for most tracepoints; sqlite3's pages sit side by side).
void note_mapped(Pool& P, std::uintptr_t b, std::uintptr_t e) {
  auto it = std::upper_bound(P.maps.begin(), P.maps.end(), b,
                             [](std::uintptr_t v, const Interval& iv) { return v < iv.begin; });
  if (it != P.maps.begin() && std::prev(it)->end == b) {
    std::prev(it)->end = e;
    if (it != P.maps.end() && it->begin == e) {
      std::prev(it)->end = it->end;
      P.maps.erase(it);
    }
    return;
  }
  if (it != P.maps.end() && it->begin == e) {
    it->begin = b;
    return;
  }
  P.maps.insert(it, Interval{b, e});
}

// Maps a new entry page holding a slot at e whose rel32 (from next_ip) satisfies c,
// nearest to next_ip first, skipping what P.maps says is mapped. The slot is an entry
// (`jmp body_at`, 5 or 14 bytes) when direct_len is 0, else a pad NOP and a direct body of
// direct_len bytes, kept within kDirectReach of addr. A collision with a
// mapping the snapshot does not know re-reads the maps once (*fresh: read during this
// reservation) and retries the same place. *skipped: a place was passed over because the
// snapshot holds a mapping there. no_trampoline_space or os_error.
Status new_entry_page(Pool& P, std::uintptr_t addr, std::uintptr_t next_ip,
                      const RelConstraint& c, std::uintptr_t body_at, std::size_t direct_len,
                      bool* fresh, bool* skipped, std::uintptr_t* e_out, EntryPage** page_out,
                      std::error_code* ec) {
  // Two cursors in the s domain: up from rel 0 and down from rel -1.
  std::uint64_t up = rel_to_s(0), down = rel_to_s(-1);
  bool up_done = false, down_done = false;
  while (!(up_done && down_done)) {
    std::uint64_t cu = up_done ? kNone : next_ge(up, c.mask, c.value);
    std::uint64_t cd = down_done ? kNone : prev_le(down, c.mask, c.value);
    if (cu == kNone) up_done = true;
    if (cd == kNone) down_done = true;
    if (cu == kNone && cd == kNone) break;
    const bool take_up = cd == kNone || (cu != kNone && cu - rel_to_s(0) <= rel_to_s(-1) - cd);
    const std::uint64_t s = take_up ? cu : cd;
    const std::uintptr_t cand = next_ip + static_cast<std::uintptr_t>(s_to_rel(s));
    const std::uintptr_t pbase = cand & ~(kPage - 1);
    // Where to continue this cursor if the page is unusable.
    auto skip_to = [&](std::uintptr_t lo_addr, std::uintptr_t hi_addr) {
      if (take_up) {
        const std::int64_t r = static_cast<std::int64_t>(hi_addr - next_ip);
        if (r >= kTwoGiB)
          up_done = true;
        else
          up = rel_to_s(r);
      } else {
        const std::int64_t r = static_cast<std::int64_t>(lo_addr - next_ip) - 1;
        if (r < -kTwoGiB)
          down_done = true;
        else
          down = rel_to_s(r);
      }
    };
    const std::int64_t d = static_cast<std::int64_t>(cand - addr);
    const bool beyond_reach =
        direct_len != 0 &&
        (d <= -kDirectReach || d + static_cast<std::int64_t>(kPage) >= kDirectReach);
    if (pbase < kLowest || pbase >= kUserTop || beyond_reach) {  // farther ones are too
      if (take_up)
        up_done = true;
      else
        down_done = true;
      continue;
    }
    if (const Interval* iv = mapped_at(P.maps, pbase)) {
      *skipped = true;
      skip_to(iv->begin, iv->end);
      continue;
    }
    // The slot must fit in the page (a 14-byte entry near the page end would not).
    const std::size_t slot_len =
        direct_len != 0 ? pad_for(cand) + direct_len : entry_len_for(cand, body_at);
    if (cand - pbase + slot_len > kPage) {
      // Up: no later address of this page fits either, go to the next page. Down: the
      // highest address that surely fits (a pad is at most 7 bytes).
      const std::size_t max_len = direct_len != 0 ? 7 + direct_len : kEntryMax;
      if (take_up)
        skip_to(pbase, pbase + kPage);
      else if (max_len > kPage)
        skip_to(pbase, pbase + kPage);
      else
        skip_to(pbase + kPage - max_len + 1, 0);
      continue;
    }
    ++P.stats.mmap_attempts;
    void* m = ::mmap(reinterpret_cast<void*>(pbase), kPage, PROT_READ | PROT_WRITE | PROT_EXEC,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    const bool placed = m != MAP_FAILED && m == reinterpret_cast<void*>(pbase);
    if (!placed) {
      if (m == MAP_FAILED && errno != EEXIST && errno != ENOMEM && errno != EPERM) {
        if (ec != nullptr) *ec = std::error_code(errno, std::generic_category());
        return Status::os_error;
      }
      if (m != MAP_FAILED) ::munmap(m, kPage);  // kernel without FIXED_NOREPLACE
      if (!*fresh) {  // the snapshot missed a mapping: learn the rest of them, same place
        refresh_maps(P);
        *fresh = true;
        continue;
      }
      skip_to(pbase, pbase + kPage);
      continue;
    }
    std::memset(m, enc::kInt3, kPage);
    note_mapped(P, pbase, pbase + kPage);
    P.pages.push_back(EntryPage{pbase, {}});
    ++P.stats.entry_pages;
    *page_out = &P.pages.back();
    *e_out = cand;
    return Status::ok;
  }
  return Status::no_trampoline_space;
}

// new_entry_page, with the snapshot read first if it is stale. A stale snapshot may hide
// a free area that has been unmapped since: when the search skipped anything on the
// snapshot's word, one more on fresh maps before giving up. (Without a skip, no map could
// help: no qualifying address exists.) That retry comes at most once per kRetryEvery
// reservations: java under --trace '*' (59,088 probes) gave up ~1,300 times (direct
// bodies, which then take an entry slot, and entry slots of a tracepoint's variants,
// which then try the next) and each time read its maps, grown by the pool's own pages,
// again, never to find room (a trial count, not kept: 0 of 1,300); the reads were 37% of
// its start-up's samples (28 Nov, perf). What a stale snapshot can cost now: a direct
// body placed as an entry slot (one jump more per call), or a function refused, when
// space freed meanwhile goes unseen until the next retry.
constexpr std::size_t kRetryEvery = 1024;
Status new_page_on_fresh_maps(Pool& P, std::uintptr_t addr, std::uintptr_t next_ip,
                              const RelConstraint& c, std::uintptr_t body_at, std::size_t direct_len,
                              std::uintptr_t* e, EntryPage** page, std::error_code* ec) {
  bool fresh = false, skipped = false;
  if (!P.maps_valid) {
    refresh_maps(P);
    fresh = true;
  }
  Status ps = new_entry_page(P, addr, next_ip, c, body_at, direct_len, &fresh, &skipped, e, page, ec);
  const bool retry = P.retry_at == 0 || P.reserves - P.retry_at >= kRetryEvery;
  if (ps == Status::no_trampoline_space && !fresh && skipped && retry) {
    P.retry_at = P.reserves;
    refresh_maps(P);
    fresh = true;
    ps = new_entry_page(P, addr, next_ip, c, body_at, direct_len, &fresh, &skipped, e, page, ec);
  }
  return ps;
}

}  // namespace

bool entry_possible(std::uintptr_t addr, std::uint8_t boundary_mask) noexcept {
  const RelConstraint c = RelConstraint::from_boundaries(boundary_mask);
  const std::uintptr_t next_ip = addr + enc::kRel32JmpLen;
  // The s values whose address lies in [kLowest, kUserTop), the range the search accepts.
  const auto rel_of = [next_ip](std::uintptr_t a) {
    return static_cast<std::int64_t>(a) - static_cast<std::int64_t>(next_ip);
  };
  const std::int64_t lo = std::max(rel_of(kLowest), -kTwoGiB);
  const std::int64_t hi = std::min(rel_of(kUserTop) - 1, kTwoGiB - 1);
  if (lo > hi) return false;
  const std::uint64_t s = next_ge(rel_to_s(lo), c.mask, c.value);
  return s != kNone && s <= rel_to_s(hi);
}

bool prefixed_mask(std::uint8_t boundary_mask, unsigned prefix, std::uint8_t* rel_mask) noexcept {
  if (prefix > 3) return false;
  const unsigned on_prefix = ((1u << (prefix + 1)) - 1) & ~1u;  // bits 1..prefix
  const unsigned beyond = 0xFFu & ~((1u << (prefix + 5)) - 1);   // bits >= 5 + prefix
  if ((boundary_mask & (on_prefix | beyond)) != 0) return false;
  *rel_mask = static_cast<std::uint8_t>(boundary_mask >> prefix);
  return true;
}

bool entry_possible_prefixed(std::uintptr_t addr, std::uint8_t boundary_mask,
                             unsigned prefix) noexcept {
  std::uint8_t rel_mask = 0;
  return prefixed_mask(boundary_mask, prefix, &rel_mask) && entry_possible(addr + prefix, rel_mask);
}

Status reserve(std::uintptr_t addr, std::uint8_t boundary_mask, std::size_t body_len,
               bool want_entry, Reservation* out, std::error_code* ec) noexcept {
  try {
    Pool& P = pool();
    std::lock_guard<std::mutex> lock(P.mu);
    const RelConstraint c = RelConstraint::from_boundaries(boundary_mask);
    const std::uintptr_t next_ip = addr + enc::kRel32JmpLen;
    body_len = (body_len + 15) & ~std::size_t{15};
    ++P.reserves;

    // 0. Direct body: in one of the most recent entry pages, else in a new one.
    if (want_entry && direct_fits_somewhere(next_ip, c, body_len)) {
      std::uintptr_t e = 0;
      EntryPage* page = nullptr;
      const std::size_t n = P.pages.size();
      for (std::size_t i = n; i-- > (n > kDirectPages ? n - kDirectPages : 0);)
        if (find_direct_in_page(P.pages[i], addr, next_ip, c, body_len, &e)) {
          page = &P.pages[i];
          break;
        }
      if (page == nullptr) {
        const Status ps = new_page_on_fresh_maps(P, addr, next_ip, c, 0, body_len, &e, &page, ec);
        if (ps == Status::os_error) return ps;
        if (ps != Status::ok) page = nullptr;  // no room for a body: the entry-slot scheme
      }
      if (page != nullptr) {
        const std::size_t pad = pad_for(e);
        mark(*page, e - page->base, pad + body_len, true);
        std::memcpy(reinterpret_cast<std::uint8_t*>(e), kPadNop[pad], pad);
        P.stats.direct_body_bytes += pad + body_len;
        ++P.stats.direct_bodies;
        ++P.stats.trampolines;
        *out = Reservation{e, 0, true, reinterpret_cast<std::uint8_t*>(e + pad)};
        return Status::ok;
      }
    }

    // 1. Body: bump-allocate from an arena within reach of addr.
    Arena* arena = nullptr;
    for (auto& a : P.arenas)
      if (a->block.size() - a->used >= body_len && reachable_block(a->block, addr)) {
        arena = a.get();
        break;
      }
    if (arena == nullptr) {
      auto a = std::make_unique<Arena>();
      std::error_code e;
      const crossmod::Status s =
          CodeBlock::allocate(kArenaSize, reinterpret_cast<void*>(addr), &a->block, &e);
      if (s == crossmod::Status::out_of_range) return Status::no_trampoline_space;
      if (s != crossmod::Status::ok) {
        if (ec != nullptr) *ec = e;
        return Status::os_error;
      }
      std::memset(a->block.data(), enc::kInt3, a->block.size());
      P.stats.body_bytes_mapped += a->block.size();
      P.maps_valid = false;  // a new mapping the snapshot does not hold
      arena = a.get();
      P.arenas.push_back(std::move(a));
    }
    std::uint8_t* body = arena->block.data() + arena->used;
    const auto body_at = reinterpret_cast<std::uintptr_t>(body);

    // 2. Entry: an existing page first, then new pages outward from addr, nearest first.
    std::uintptr_t e = 0;
    EntryPage* page = nullptr;
    if (!want_entry) {
      arena->used += body_len;
      P.stats.body_bytes_used += body_len;
      ++P.stats.trampolines;
      *out = Reservation{0, 0, false, body};
      return Status::ok;
    }
    for (auto& pg : P.pages)
      if (find_in_page(pg, next_ip, c, body_at, &e)) {
        page = &pg;
        break;
      }
    if (page == nullptr) {
      const Status ps = new_page_on_fresh_maps(P, addr, next_ip, c, body_at, 0, &e, &page, ec);
      if (ps != Status::ok) return ps;
    }

    // 3. Commit: mark the slot, write `jmp body` into it, account.
    const std::size_t elen = entry_len_for(e, body_at);
    mark(*page, e - page->base, elen, true);
    enc::jmp_any(reinterpret_cast<std::uint8_t*>(e), e, body_at);
    arena->used += body_len;
    P.stats.entry_bytes_used += elen;
    P.stats.body_bytes_used += body_len;
    ++P.stats.trampolines;
    out->entry = e;
    out->entry_len = elen;
    out->direct = false;
    out->body = body;
    static_assert(kEntryMax == 14);
    return Status::ok;
  } catch (...) {
    return Status::os_error;  // std::bad_alloc from the page/arena vectors
  }
}

void trim_body(std::uint8_t* body, std::size_t reserved, std::size_t used) noexcept {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  reserved = (reserved + 15) & ~std::size_t{15};
  used = (used + 15) & ~std::size_t{15};
  if (used >= reserved) return;
  for (auto& a : P.arenas) {
    if (a->block.data() + a->used == body + reserved) {
      a->used -= reserved - used;
      P.stats.body_bytes_used -= reserved - used;
      return;
    }
  }
  // A direct body: its page is most likely among the newest. The tail was never
  // reachable (the jump is not installed yet): back to int3 fill and free for later slots.
  const auto b = reinterpret_cast<std::uintptr_t>(body);
  for (std::size_t i = P.pages.size(); i-- > 0;) {
    EntryPage& pg = P.pages[i];
    if (b < pg.base || b >= pg.base + kPage) continue;
    std::memset(body + used, enc::kInt3, reserved - used);
    mark(pg, b + used - pg.base, reserved - used, false);
    P.stats.direct_body_bytes -= reserved - used;
    return;
  }
}

bool entry_page_byte_used(std::uintptr_t at) noexcept {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  for (const EntryPage& pg : P.pages)
    if (at >= pg.base && at < pg.base + kPage) return byte_used(pg, at - pg.base);
  return false;
}

std::size_t maps_reads() noexcept {
  Pool& P = pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.maps_reads;
}

}  // namespace detail

PoolStats pool_stats() noexcept {
  detail::Pool& P = detail::pool();
  std::lock_guard<std::mutex> lock(P.mu);
  return P.stats;
}

}  // namespace crossmod::tp
