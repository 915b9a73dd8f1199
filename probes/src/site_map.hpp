// A fixed-size, insert-only, lock-free hash map from an address (a probe site, or a
// function for tail-called exit hooks) to a ProbeId. Lookups are wait-free and run on the
// probe-invocation path; inserts come from one writer at a time (the registry mutex).
// Async-signal-safe lookups (atomic loads only).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace crossmod::probes::detail {

template <unsigned Bits>
class SiteMap {
 public:
  static constexpr std::size_t kSlots = std::size_t{1} << Bits;
  static constexpr std::uint32_t kAbsent = 0xFFFFFFFFu;

  std::uint32_t find(std::uintptr_t key) const noexcept {
    const std::size_t h = hash(key);
    for (std::size_t i = 0; i < kSlots; ++i) {
      const Slot& s = slots_[(h + i) & (kSlots - 1)];
      // Acquire pairs with the release in insert(): a visible key has its value.
      const std::uintptr_t k = s.key.load(std::memory_order_acquire);
      if (k == key) return s.value.load(std::memory_order_relaxed);
      if (k == 0) return kAbsent;
    }
    return kAbsent;
  }

  // One writer at a time. False when full or key is 0. Overwrites the value of a key.
  bool insert(std::uintptr_t key, std::uint32_t value) noexcept {
    if (key == 0) return false;
    const std::size_t h = hash(key);
    for (std::size_t i = 0; i < kSlots; ++i) {
      Slot& s = slots_[(h + i) & (kSlots - 1)];
      const std::uintptr_t k = s.key.load(std::memory_order_relaxed);
      if (k == key) {
        s.value.store(value, std::memory_order_relaxed);
        return true;
      }
      if (k == 0) {
        s.value.store(value, std::memory_order_relaxed);
        s.key.store(key, std::memory_order_release);
        return true;
      }
    }
    return false;
  }

  // Page-local: the sites in one 16 KiB of code share a block of 256 slots (one 4 KiB page
  // of the table), chosen by a multiplicative hash of a >> 14; bits 6..13 pick the slot, so
  // sites a cache line apart or more do not collide. Registering a pattern over a big
  // program touches a table page per 16 KiB of its code, not one per site: python3's 'Py*'
  // (939 functions in 140 such blocks) wrote ~600 pages of the scattering hash before, each
  // a page fault. Public for the tests.
  static std::size_t hash(std::uintptr_t a) noexcept {
    static_assert(Bits > 8);
    const auto block = static_cast<std::size_t>(((a >> 14) * 0x9E3779B97F4A7C15ull) >> (64 - (Bits - 8)));
    return (block << 8) | static_cast<std::size_t>((a >> 6) & 0xFF);
  }

 private:
  // An empty slot is key 0 (its value is never read): all-zero storage, so a static map
  // lives in .bss, not in the object file's .data (a page there costs a copy of the file's
  // page on its first write).
  struct Slot {
    std::atomic<std::uintptr_t> key{0};
    std::atomic<std::uint32_t> value{0};
  };
  alignas(4096) Slot slots_[kSlots];  // a block is one page, not two halves
};

}  // namespace crossmod::probes::detail
