// The clock live attach reports with: CLOCK_MONOTONIC in ns, the clock the stub and the
// loader thread read in the target (stub.S, NOW_NS), so stamps from both sides compare
// directly; and the short sleeps of its polling loops.
// Thread safety: pure; async-signal-safe (clock_gettime and nanosleep are).
#pragma once
#include <time.h>

#include <cstdint>

namespace crossmod::harness::attach {

inline std::uint64_t monotonic_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000 + std::uint64_t(ts.tv_nsec);
}

inline void sleep_us(long us) noexcept {
  const timespec ts{us / 1000000, (us % 1000000) * 1000};
  ::nanosleep(&ts, nullptr);
}

}  // namespace crossmod::harness::attach
