// wordpatch: the int3-locked straddling protocol (PLDI'16 Figures 4, 6, 7) and the single
// in-line store for non-straddling patches. Thread safety: a WordPatcher may be used by
// many threads on disjoint sites; two patchers on one site get busy. Nothing allocates;
// not async-signal-safe (a sync_core wait is a syscall, ticks waits spin).
#include "crossmod/wordpatch.hpp"

#include <atomic>
#include <cstring>

#include "crossmod/code_memory.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"
#include "site_table.hpp"

namespace crossmod {

namespace {

Status validate(const void* addr, std::span<const std::uint8_t> bytes) noexcept {
  if (bytes.empty() || bytes.size() > x86::kMaxPatchLen) return Status::bad_length;
  if (addr == nullptr) return Status::bad_address;
  const auto a = reinterpret_cast<std::uintptr_t>(addr);
  const std::uintptr_t line = x86::cache_line_size();
  if ((a + bytes.size() - 1) / line - a / line > 1) return Status::bad_address;
  if (!is_writable(addr, bytes.size())) return Status::not_writable;
  return Status::ok;
}

Status inline_store(InlineStore kind, std::uint8_t* dst,
                    std::span<const std::uint8_t> bytes) noexcept {
  return kind == InlineStore::plain ? x86::store_plain(dst, bytes)
                                    : x86::store_locked(dst, bytes);
}

// TSC stamp taken once the preceding store has left the store buffer, so that W counts
// from the moment other cores can see it: the seq_cst fence (MFENCE or a locked op) drains
// the store buffer (SDM Vol 3A 9.2.2), RDTSCP waits for the fence to complete.
std::uint64_t stamp_after_store() noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return x86::rdtscp_ordered();
}

// A wait that failed (membarrier returned an error mid-patch) must still not leave the
// site locked or shorten the protocol: fall back to the conservative built-in Tmax.
inline constexpr std::uint64_t kFallbackWaitTicks = 3000;

Status wait_or_fallback(const WaitPolicy& policy, std::uint64_t stamp) noexcept {
  const Status s = wait_from(policy, stamp);
  if (s != Status::ok) x86::spin_ticks_from(stamp, kFallbackWaitTicks);
  return s;
}

// Step 3: the back part, bytes S..len-1, one store into the second line.
Status write_back(InlineStore kind, PatchHandle* h) noexcept {
  return inline_store(kind, h->addr + h->split,
                      std::span<const std::uint8_t>(h->bytes + h->split, h->len - h->split));
}

// Step 5: the front part, bytes 0..S-1, one store into the first line replacing the int3,
// then the unlock. Release in site_unlock pairs with the acquire in the SIGTRAP handler,
// so a waiting executor that sees "unlocked" re-executes over the complete new bytes.
Status write_front_and_unlock(InlineStore kind, PatchHandle* h) noexcept {
  const Status s =
      inline_store(kind, h->addr, std::span<const std::uint8_t>(h->bytes, h->split));
  detail::site_unlock(reinterpret_cast<std::uintptr_t>(h->addr));
  return s;
}

}  // namespace

WordPatcher::WordPatcher(WaitPolicy wait, InlineStore store) noexcept
    : wait_(wait), store_(store) {
  (void)x86::cache_line_size();  // cache it outside any signal context
  init_ = trap::install();
  if (init_ == Status::ok && wait_.kind == WaitPolicy::Kind::sync_core)
    init_ = sync_core_register();
}

Status WordPatcher::patch(void* addr, std::span<const std::uint8_t> bytes) noexcept {
  PatchHandle h;
  const Status s = start_patch(addr, bytes, &h);
  if (s != Status::ok || h.phase == 3) return s;
  return finish_patch(&h);
}

Status WordPatcher::start_patch(void* addr, std::span<const std::uint8_t> bytes,
                                PatchHandle* h) noexcept {
  if (h == nullptr) return Status::bad_address;
  // A handle still in flight owns a site lock; overwriting it would leave that site locked
  // (and its executors parked) forever.
  if (h->phase == 1 || h->phase == 2) return Status::busy;
  *h = PatchHandle{};
  if (init_ != Status::ok) return init_;
  if (Status s = validate(addr, bytes); s != Status::ok) return s;
  h->addr = static_cast<std::uint8_t*>(addr);
  std::memcpy(h->bytes, bytes.data(), bytes.size());
  h->len = static_cast<std::uint8_t>(bytes.size());
  h->split = static_cast<std::uint8_t>(
      x86::straddle_split(reinterpret_cast<std::uintptr_t>(addr), bytes.size()));

  if (h->split == 0) {
    // Not straddling: [addr, addr+len) is in one line, so one in-line store replaces it
    // and a concurrent fetch sees the old or the new line. Documented for the default
    // LOCK CMPXCHG (SDM Vol 3A 9.1.2.2); for InlineStore::plain only inside an aligned
    // quadword on AMD (APM Vol 2 7.3.2), and a plain store across one has torn (x86.hpp).
    const Status s = inline_store(store_, h->addr, bytes);
    h->phase = 3;
    h->stamp = x86::rdtsc();
    return s;
  }

  // Step 1: lock. Claim the site in the table (busy if another patcher holds it, never
  // block), then store int3 on byte 0. The claim is a locked CAS, so the table entry is
  // visible before the int3 can be fetched (pairs with the acquire in the handler).
  //   before: b0 b1 .. b(S-1) | bS .. b(len-1)     (old instruction)
  //   after:  CC b1 .. b(S-1) | bS .. b(len-1)     (executors trap and wait)
  if (Status s = detail::site_lock(reinterpret_cast<std::uintptr_t>(addr)); s != Status::ok)
    return s;
  x86::store_byte(h->addr, x86::kInt3);
  h->stamp = stamp_after_store();
  h->phase = 1;
  return Status::ok;
}

Status WordPatcher::finish_patch(PatchHandle* h) noexcept {
  if (h == nullptr || h->phase == 0 || h->addr == nullptr) return Status::bad_address;
  Status first = Status::ok;
  auto note = [&first](Status s) {
    if (first == Status::ok) first = s;
  };
  if (h->phase == 1) {
    // Step 2: wait W since the int3 landed: no core still holds the old front line.
    note(wait_or_fallback(wait_, h->stamp));
    // Step 3: back part.
    //   before: CC b1 .. b(S-1) | bS .. b(len-1)
    //   after:  CC b1 .. b(S-1) | nS .. n(len-1)
    note(write_back(store_, h));
    h->stamp = stamp_after_store();
    h->phase = 2;
  }
  if (h->phase == 2) {
    // Step 4: wait W since the back part landed: no core still holds the old back line.
    note(wait_or_fallback(wait_, h->stamp));
    // Step 5: front part replaces the int3; unlock.
    //   before: CC b1 .. b(S-1) | nS .. n(len-1)
    //   after:  n0 n1 .. n(S-1) | nS .. n(len-1)
    note(write_front_and_unlock(store_, h));
    h->stamp = x86::rdtsc();
    h->phase = 3;
  }
  return first;
}

Status WordPatcher::finish_patches(std::span<PatchHandle> hs) noexcept {
  Status first = Status::ok;
  auto note = [&first](Status s) {
    if (first == Status::ok) first = s;
  };
  // Steps 2..3 for every handle still in phase 1: ONE wait (from the latest stamp, so
  // every handle has had at least W), then all back parts.
  bool any = false;
  std::uint64_t latest = 0;
  for (const PatchHandle& h : hs)
    if (h.phase == 1) {
      any = true;
      if (h.stamp > latest) latest = h.stamp;
    }
  if (any) {
    note(wait_or_fallback(wait_, latest));
    for (PatchHandle& h : hs)
      if (h.phase == 1) {
        note(write_back(store_, &h));
        h.phase = 2;
      }
    const std::uint64_t stamp = stamp_after_store();
    for (PatchHandle& h : hs)
      if (h.phase == 2 && h.stamp <= latest) h.stamp = stamp;
  }
  // Steps 4..5 for every handle in phase 2: ONE wait, then all front parts and unlocks.
  any = false;
  latest = 0;
  for (const PatchHandle& h : hs) {
    if (h.phase == 0 || h.addr == nullptr) note(Status::bad_address);
    if (h.phase == 2) {
      any = true;
      if (h.stamp > latest) latest = h.stamp;
    }
  }
  if (any) {
    note(wait_or_fallback(wait_, latest));
    for (PatchHandle& h : hs)
      if (h.phase == 2) {
        note(write_front_and_unlock(store_, &h));
        h.phase = 3;
      }
  }
  return first;
}

Status naive_split_write(void* addr, std::span<const std::uint8_t> bytes,
                         const WaitPolicy& between) noexcept {
  if (Status s = validate(addr, bytes); s != Status::ok) return s;
  auto* p = static_cast<std::uint8_t*>(addr);
  const unsigned split = x86::straddle_split(reinterpret_cast<std::uintptr_t>(addr), bytes.size());
  if (split == 0) return x86::store_locked(p, bytes);
  // Front part, `between`, back part: an executor may fetch any mix of the two lines.
  if (Status s = x86::store_locked(p, bytes.first(split)); s != Status::ok) return s;
  const Status w = wait_from(between, stamp_after_store());
  const Status s = x86::store_locked(p + split, bytes.subspan(split));
  return s != Status::ok ? s : w;
}

}  // namespace crossmod
