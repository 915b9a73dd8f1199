// Test helpers: a probe site (testsupport::write_entry) built in a CodeBlock so that S
// of the 5 bytes lie before a cache-line boundary, a call target (write_stub), and an
// executor loop that counts which state ran. Executors run on plain threads; a torn
// instruction faults and crashes the test binary, which ctest reports as a failure.
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/testsupport/site_code.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::test {

using testsupport::Bytes5;

class TestSite {
 public:
  using EntryFn = testsupport::EntryFn;

  // straddle S in 0..4; `nop_state` true starts with `state_b` instead of the call.
  // The call target sits ~16.8 MiB away in a second block so that no rel32 byte is 00.
  explicit TestSite(unsigned straddle, const Bytes5& state_b = x86::kNop5,
                    bool start_with_b = false, std::size_t boundary_offset = 2048)
      : straddle_(straddle), state_b_(state_b) {
    const std::size_t line = x86::cache_line_size();
    EXPECT_EQ(CodeBlock::allocate(kBlockSize, nullptr, &block_), Status::ok);
    testsupport::fill_invalid({block_.data(), block_.size()});
    // Target: a second block placed near the first, preferably > 16 MiB away so every
    // rel32 byte is non-zero; falls back to a block inside the first one.
    std::uint8_t* boundary = block_.data() + boundary_offset;
    site_ = straddle == 0 ? boundary + 16 : boundary - straddle;
    EXPECT_EQ(x86::straddle_split(reinterpret_cast<std::uintptr_t>(site_), 5), straddle)
        << "line " << line;
    if (CodeBlock::allocate(4096, block_.data() + (std::size_t{17} << 20), &target_block_) ==
        Status::ok) {
      target_ = target_block_.data();
    } else {
      target_ = block_.data() + kBlockSize - 64;
    }
    testsupport::write_stub(target_);
    EXPECT_EQ(x86::encode_call(reinterpret_cast<std::uintptr_t>(site_),
                               reinterpret_cast<std::uintptr_t>(target_), &state_a_),
              Status::ok);
    entry_ = testsupport::write_entry(site_, start_with_b ? state_b_ : state_a_);
  }

  std::uint8_t* site() const { return site_; }
  const std::uint8_t* target() const { return target_; }
  EntryFn entry() const { return entry_; }
  const Bytes5& state_a() const { return state_a_; }
  const Bytes5& state_b() const { return state_b_; }
  unsigned straddle() const { return straddle_; }
  Bytes5 current() const {
    Bytes5 b;
    std::memcpy(b.data(), site_, 5);
    return b;
  }
  // The two cache lines the site may touch, [line_start(site), +2 lines).
  std::vector<std::uint8_t> lines() const {
    const std::uintptr_t line = x86::cache_line_size();
    const auto start = reinterpret_cast<std::uintptr_t>(site_) & ~(line - 1);
    const auto* p = reinterpret_cast<const std::uint8_t*>(start);
    return {p, p + 2 * line};
  }

 private:
  static constexpr std::size_t kBlockSize = 3 * 4096;
  unsigned straddle_;
  CodeBlock block_;
  CodeBlock target_block_;
  std::uint8_t* site_ = nullptr;
  EntryFn entry_ = nullptr;
  std::uint8_t* target_ = nullptr;
  Bytes5 state_a_{};
  Bytes5 state_b_{};
};

// Counts of the values returned by executors, updated live: [0] = state B ran, [1] = the
// call ran, [2] = anything else (a wrong result without a fault). by_entry splits them by
// the entry's index in the executors' list (the first kMaxEntries entries), so a test
// running several sites can tell that each of them ran in both states.
struct ExecCounts {
  static constexpr std::size_t kMaxEntries = 8;
  std::atomic<std::uint64_t> ran[3] = {};
  std::atomic<std::uint64_t> by_entry[kMaxEntries][3] = {};
};

// Runs `fns` round-robin until `stop` is set, counting each result.
inline void executor_loop(std::vector<TestSite::EntryFn> fns, const std::atomic<bool>* stop,
                          ExecCounts* counts, std::atomic<int>* started) {
  started->fetch_add(1);
  while (!stop->load(std::memory_order_relaxed)) {
    for (std::size_t i = 0; i < fns.size(); ++i) {
      const int r = fns[i]();
      const int k = r == 0 ? 0 : r == 1 ? 1 : 2;
      counts->ran[k].fetch_add(1, std::memory_order_relaxed);
      if (i < ExecCounts::kMaxEntries)
        counts->by_entry[i][k].fetch_add(1, std::memory_order_relaxed);
    }
  }
}

// `n` executor threads running `fns` from construction until stop() or destruction. The
// destructor stops and joins them, so a failing ASSERT in a test body reports a failure
// instead of destroying joinable threads (std::terminate). Declare it after the sites it
// runs, so it is destroyed first.
class Executors {
 public:
  Executors(int n, std::vector<TestSite::EntryFn> fns) {
    for (int i = 0; i < n; ++i) threads_.emplace_back(executor_loop, fns, &stop_, &counts, &started_);
    while (started_.load() < n) std::this_thread::yield();
  }
  ~Executors() { stop(); }
  Executors(const Executors&) = delete;
  Executors& operator=(const Executors&) = delete;

  void stop() {
    stop_.store(true);
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  ExecCounts counts;

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int> started_{0};
  std::vector<std::thread> threads_;
};

// Blocks until some executor has returned `result` (0 or 1) at least once more than now.
// The patcher calls it while the site is held in the matching state, which makes "both
// states executed" deterministic even on a loaded machine where an executor may be
// descheduled for a whole burst of toggles. False after a generous deadline.
inline bool await_count(const std::atomic<std::uint64_t>& count) {
  const std::uint64_t before = count.load();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (count.load() == before) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}
inline bool await_execution(const ExecCounts& counts, int result) {
  return await_count(counts.ran[result]);
}
// The same for one entry (its index in the executors' list).
inline bool await_entry_execution(const ExecCounts& counts, std::size_t entry, int result) {
  return await_count(counts.by_entry[entry][result]);
}

}  // namespace crossmod::test
