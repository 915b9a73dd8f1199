// Writable code ranges (mprotect RWX and back), RWX blocks within rel32 reach, and the
// lock-free registry that patch functions consult. Thread safety: all functions
// thread-safe; is_writable() is lock-free and async-signal-safe (atomic loads only); make,
// restore and allocate make system calls and allocate (reading /proc/self/maps).
#include "crossmod/code_memory.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace crossmod {

namespace {

// ---- registry -------------------------------------------------------------------------
// A fixed table so that is_writable() never allocates or locks. A slot is claimed with
// `used`; begin is published last (release) and cleared first, so a reader that sees a
// non-zero begin sees the matching end (acquire pairs with the release in claim_slot).
inline constexpr int kRangeSlots = 1024;

struct RangeSlot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<bool> used{false};
};
RangeSlot g_ranges[kRangeSlots];
std::atomic<int> g_high{0};  // one past the highest slot ever claimed: bounds the scan

int claim_slot(std::uintptr_t begin, std::uintptr_t end) noexcept {
  for (int i = 0; i < kRangeSlots; ++i) {
    bool expected = false;
    if (!g_ranges[i].used.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      continue;
    int high = g_high.load(std::memory_order_relaxed);
    while (high < i + 1 &&
           !g_high.compare_exchange_weak(high, i + 1, std::memory_order_relaxed)) {
    }
    g_ranges[i].end.store(end, std::memory_order_relaxed);
    g_ranges[i].begin.store(begin, std::memory_order_release);
    return i;
  }
  return -1;
}

void release_slot(int i) noexcept {
  if (i < 0) return;
  g_ranges[i].begin.store(0, std::memory_order_release);
  g_ranges[i].end.store(0, std::memory_order_relaxed);
  g_ranges[i].used.store(false, std::memory_order_release);
}

// ---- /proc/self/maps ------------------------------------------------------------------
struct Mapping {
  std::uintptr_t begin, end;
  int prot;
};

bool read_maps(std::vector<Mapping>* out) noexcept {
  try {
    const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    std::string text;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t eol = text.find('\n', pos);
      if (eol == std::string::npos) eol = text.size();
      const std::string line = text.substr(pos, eol - pos);
      pos = eol + 1;
      // "begin-end rwxp offset dev inode path"
      char* rest = nullptr;
      const auto b = static_cast<std::uintptr_t>(std::strtoull(line.c_str(), &rest, 16));
      if (rest == nullptr || *rest != '-') continue;
      const auto e = static_cast<std::uintptr_t>(std::strtoull(rest + 1, &rest, 16));
      if (rest == nullptr || *rest != ' ' || std::string(rest).size() < 4) continue;
      int prot = PROT_NONE;
      if (rest[1] == 'r') prot |= PROT_READ;
      if (rest[2] == 'w') prot |= PROT_WRITE;
      if (rest[3] == 'x') prot |= PROT_EXEC;
      out->push_back({b, e, prot});
    }
    std::sort(out->begin(), out->end(),
              [](const Mapping& x, const Mapping& y) { return x.begin < y.begin; });
    return !out->empty();
  } catch (...) {
    return false;
  }
}

std::uintptr_t page_size() noexcept {
  static const auto size = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  return size;
}

void set_ec(std::error_code* ec, int err) noexcept {
  if (ec != nullptr) *ec = std::error_code(err, std::generic_category());
}

inline constexpr int kRwx = PROT_READ | PROT_WRITE | PROT_EXEC;
// rel32 reach minus a margin so that every byte of a block is reachable from any
// instruction within 64 KiB of `near` (the contract in code_memory.hpp).
inline constexpr std::uintptr_t kReach = (std::uintptr_t{1} << 31) - (std::uintptr_t{1} << 16);
inline constexpr std::uintptr_t kLowestHint = std::uintptr_t{1} << 20;        // above mmap_min_addr
inline constexpr std::uintptr_t kUserTop = (std::uintptr_t{1} << 47) - 4096;  // 4-level paging

// Tries to map exactly at `at`; MAP_FIXED_NOREPLACE (Linux >= 4.17) never clobbers an
// existing mapping. Older kernels treat it as a hint, hence the address check.
void* map_at(std::uintptr_t at, std::size_t len) noexcept {
  void* p = ::mmap(reinterpret_cast<void*>(at), len, kRwx,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (reinterpret_cast<std::uintptr_t>(p) != at) {
    ::munmap(p, len);
    return nullptr;
  }
  return p;
}

void* map_near(std::uintptr_t near, std::size_t len) noexcept {
  const std::uintptr_t page = page_size();
  const std::uintptr_t lo = std::max(near > kReach ? near - kReach : 0, kLowestHint);
  const std::uintptr_t hi = std::min(near + kReach, kUserTop);  // block must end <= hi
  if (hi <= lo || hi - lo < len) return nullptr;
  const std::uintptr_t near_page = near & ~(page - 1);

  // Candidates: for every hole of the address space inside [lo, hi), the page-aligned
  // start closest to `near`. Nearest first.
  std::vector<std::uintptr_t> candidates;
  std::vector<Mapping> maps;
  try {
    if (read_maps(&maps)) {
      std::uintptr_t prev_end = 0;
      maps.push_back({kUserTop, kUserTop, 0});
      for (const Mapping& m : maps) {
        std::uintptr_t hb = std::max(prev_end, lo);
        std::uintptr_t he = std::min(m.begin, hi);
        prev_end = std::max(prev_end, m.end);
        hb = (hb + page - 1) & ~(page - 1);
        he &= ~(page - 1);
        if (he <= hb || he - hb < len) continue;
        candidates.push_back(std::clamp(near_page, hb, he - len));
      }
    }
    // Fallback when the maps are unreadable or all tries lose a race: step outwards.
    const std::uintptr_t step = std::uintptr_t{64} << 20;
    for (std::uintptr_t d = step; d < kReach; d += step) {
      if (near_page + d + len <= hi) candidates.push_back(near_page + d);
      if (near_page >= lo + d) candidates.push_back(near_page - d);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [near](std::uintptr_t a, std::uintptr_t b) {
                       const auto da = a > near ? a - near : near - a;
                       const auto db = b > near ? b - near : near - b;
                       return da < db;
                     });
  } catch (...) {
    return nullptr;
  }
  for (std::uintptr_t c : candidates)
    if (void* p = map_at(c, len)) return p;
  return nullptr;
}

}  // namespace

// ---- WritableRange ----------------------------------------------------------------------
WritableRange::~WritableRange() { (void)restore(); }

WritableRange::WritableRange(WritableRange&& other) noexcept
    : begin_(std::exchange(other.begin_, 0)),
      len_(std::exchange(other.len_, 0)),
      old_prot_(std::exchange(other.old_prot_, 0)),
      slot_(std::exchange(other.slot_, -1)) {}

WritableRange& WritableRange::operator=(WritableRange&& other) noexcept {
  if (this != &other) {
    (void)restore();
    begin_ = std::exchange(other.begin_, 0);
    len_ = std::exchange(other.len_, 0);
    old_prot_ = std::exchange(other.old_prot_, 0);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

Status WritableRange::make(void* addr, std::size_t len, WritableRange* out,
                           std::error_code* ec) noexcept {
  if (ec != nullptr) ec->clear();
  if (out == nullptr || addr == nullptr) return Status::bad_address;
  if (len == 0) return Status::bad_length;
  const std::uintptr_t page = page_size();
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (a + len < a) return Status::bad_address;
  const std::uintptr_t begin = a & ~(page - 1);
  const std::uintptr_t end = (a + len + page - 1) & ~(page - 1);

  // The protection to restore: every page must be mapped with the same protection
  // (a range over mappings with different protections is refused, keeping restore simple).
  std::vector<Mapping> maps;
  if (!read_maps(&maps)) return Status::os_error;
  std::uintptr_t covered = begin;
  int prot = -1;
  for (const Mapping& m : maps) {
    if (m.end <= covered || m.begin > covered) continue;
    if (prot == -1) prot = m.prot;
    if (m.prot != prot) return Status::bad_address;
    covered = m.end;
    if (covered >= end) break;
  }
  if (prot == -1 || covered < end) return Status::bad_address;

  if (::mprotect(reinterpret_cast<void*>(begin), end - begin, kRwx) != 0) {
    set_ec(ec, errno);
    return Status::os_error;
  }
  const int slot = claim_slot(begin, end);
  if (slot < 0) {
    (void)::mprotect(reinterpret_cast<void*>(begin), end - begin, prot);
    return Status::table_full;
  }
  WritableRange r;
  r.begin_ = begin;
  r.len_ = end - begin;
  r.old_prot_ = prot;
  r.slot_ = slot;
  *out = std::move(r);
  return Status::ok;
}

Status WritableRange::restore(std::error_code* ec) noexcept {
  if (ec != nullptr) ec->clear();
  if (len_ == 0) return Status::ok;
  // Unregister first: from here on patch calls report not_writable instead of faulting.
  release_slot(slot_);
  slot_ = -1;
  const int rc = ::mprotect(reinterpret_cast<void*>(begin_), len_, old_prot_);
  const int err = errno;
  begin_ = 0;
  len_ = 0;
  if (rc != 0) {
    set_ec(ec, err);
    return Status::os_error;
  }
  return Status::ok;
}

bool is_writable(const void* addr, std::size_t len) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  if (a == 0 || a + len < a) return false;
  const int high = g_high.load(std::memory_order_acquire);
  for (int i = 0; i < high; ++i) {
    const std::uintptr_t b = g_ranges[i].begin.load(std::memory_order_acquire);
    if (b == 0 || a < b) continue;
    const std::uintptr_t e = g_ranges[i].end.load(std::memory_order_acquire);
    // Re-check begin: the slot may have been released and reused between the loads.
    if (g_ranges[i].begin.load(std::memory_order_acquire) != b) continue;
    if (a + len <= e) return true;
  }
  return false;
}

// ---- CodeBlock ----------------------------------------------------------------------------
CodeBlock::~CodeBlock() {
  if (len_ == 0) return;
  release_slot(slot_);
  ::munmap(reinterpret_cast<void*>(begin_), len_);
}

CodeBlock::CodeBlock(CodeBlock&& other) noexcept
    : begin_(std::exchange(other.begin_, 0)),
      len_(std::exchange(other.len_, 0)),
      slot_(std::exchange(other.slot_, -1)) {}

CodeBlock& CodeBlock::operator=(CodeBlock&& other) noexcept {
  if (this != &other) {
    CodeBlock old(std::move(*this));
    begin_ = std::exchange(other.begin_, 0);
    len_ = std::exchange(other.len_, 0);
    slot_ = std::exchange(other.slot_, -1);
  }
  return *this;
}

Status CodeBlock::allocate(std::size_t len, const void* near, CodeBlock* out,
                           std::error_code* ec) noexcept {
  if (ec != nullptr) ec->clear();
  if (out == nullptr) return Status::bad_address;
  if (len == 0) return Status::bad_length;
  const std::uintptr_t page = page_size();
  if (len > kReach) return Status::out_of_range;
  const std::size_t size = (len + page - 1) & ~(page - 1);
  void* p = nullptr;
  if (near == nullptr) {
    p = ::mmap(nullptr, size, kRwx, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      set_ec(ec, errno);
      return Status::os_error;
    }
  } else {
    p = map_near(reinterpret_cast<std::uintptr_t>(near), size);
    if (p == nullptr) return Status::out_of_range;
  }
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  const int slot = claim_slot(b, b + size);
  if (slot < 0) {
    ::munmap(p, size);
    return Status::table_full;
  }
  CodeBlock block;
  block.begin_ = b;
  block.len_ = size;
  block.slot_ = slot;
  *out = std::move(block);
  return Status::ok;
}

bool rel32_reachable(std::uintptr_t next_ip, std::uintptr_t target) noexcept {
  const auto disp = static_cast<std::int64_t>(target - next_ip);
  return disp >= INT32_MIN && disp <= INT32_MAX;
}

}  // namespace crossmod
