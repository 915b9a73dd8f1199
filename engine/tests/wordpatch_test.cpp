// wordpatch: exact bytes for every length and straddle, bad input, busy detection, the
// asynchronous API, naive_split_write, and executors running straddling sites while they
// are patched (int3 protocol with a generous W, and membarrier SYNC_CORE).
#include "crossmod/wordpatch.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "crossmod/code_memory.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"
#include "site_table.hpp"
#include "test_site.hpp"

namespace crossmod {
namespace {

using test::Bytes5;
using test::TestSite;

// These tests check the protocol's mechanics (lock, trap, wait, both states run), not the
// hardware's limit, so W must be far beyond any tear the hardware produces. On the KVM
// reference machine rare tears (~3e-8 per toggle) were measured at waits up to 4800 ticks
// (results/amd-fam26-mod2-step1-1pkg), so 20000 ticks with ~2M zero-fault toggles per CI
// run was a coin the hardware could flip. 200000 ticks (77 us) is 40x past the largest
// tear seen, and the toggle counts below are sized so each test stays a few seconds.
inline constexpr std::uint64_t kGenerousWait = 200000;

class DataBlock {
 public:
  DataBlock() {
    EXPECT_EQ(CodeBlock::allocate(4096, nullptr, &block_), Status::ok);
    for (std::size_t i = 0; i < block_.size(); ++i)
      block_.data()[i] = static_cast<std::uint8_t>(0xA0 ^ (i * 7));
  }
  std::uint8_t* data() const { return block_.data(); }
  std::vector<std::uint8_t> snapshot() const {
    return {block_.data(), block_.data() + block_.size()};
  }

 private:
  CodeBlock block_;
};

TEST(WordPatch, ExactBytesForEveryLengthAndStraddle) {
  std::mt19937 rng(12345);
  for (InlineStore store : {InlineStore::locked, InlineStore::plain}) {
    WordPatcher wp(WaitPolicy::Ticks(100), store);
    ASSERT_EQ(wp.init_status(), Status::ok);
    DataBlock mem;
    const std::size_t line = x86::cache_line_size();
    for (std::size_t len = 1; len <= 8; ++len) {
      // Every start offset from 8 bytes before a boundary to 8 after: covers S = 0..len-1.
      for (std::size_t off = line * 4 - 8; off <= line * 4 + 8; ++off) {
        std::uint8_t* p = mem.data() + off;
        std::uint8_t bytes[8];
        for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
        auto expect = mem.snapshot();
        std::memcpy(expect.data() + off, bytes, len);
        ASSERT_EQ(wp.patch(p, {bytes, len}), Status::ok) << "len " << len << " off " << off;
        ASSERT_EQ(mem.snapshot(), expect) << "len " << len << " off " << off;
      }
    }
  }
}

TEST(WordPatch, BadInput) {
  WordPatcher wp(WaitPolicy::Ticks(100));
  DataBlock mem;
  const std::uint8_t nine[9] = {};
  EXPECT_EQ(wp.patch(mem.data() + 10, {nine, 0}), Status::bad_length);
  EXPECT_EQ(wp.patch(mem.data() + 10, {nine, 9}), Status::bad_length);
  EXPECT_EQ(wp.patch(nullptr, {nine, 4}), Status::bad_address);
  static std::uint8_t not_code[16];
  EXPECT_EQ(wp.patch(not_code, {nine, 4}), Status::not_writable);
  PatchHandle h;
  EXPECT_EQ(wp.start_patch(not_code, {nine, 4}, &h), Status::not_writable);
  EXPECT_EQ(wp.finish_patch(&h), Status::bad_address);  // never started
  EXPECT_EQ(naive_split_write(mem.data(), {nine, 0}, WaitPolicy::None()), Status::bad_length);
  EXPECT_EQ(naive_split_write(mem.data(), {nine, 9}, WaitPolicy::None()), Status::bad_length);
  EXPECT_EQ(naive_split_write(not_code, {nine, 2}, WaitPolicy::None()), Status::not_writable);
  // x86 store primitives: a range crossing a line has no in-line window.
  EXPECT_EQ(x86::store_locked(mem.data() + 62, {nine, 4}), Status::bad_address);
  EXPECT_EQ(x86::store_plain(mem.data() + 62, {nine, 4}), Status::bad_address);
  EXPECT_EQ(x86::store_locked(mem.data(), {nine, 9}), Status::bad_length);
}

TEST(WordPatch, NonStraddlingStartPatchCompletesAtOnce) {
  WordPatcher wp(WaitPolicy::Ticks(1u << 30));  // would take ~0.4 s if it waited
  DataBlock mem;
  const std::uint8_t bytes[5] = {1, 2, 3, 4, 5};
  PatchHandle h;
  ASSERT_EQ(wp.start_patch(mem.data() + 8, bytes, &h), Status::ok);
  EXPECT_EQ(h.phase, 3);
  EXPECT_EQ(h.split, 0);
  EXPECT_EQ(0, std::memcmp(mem.data() + 8, bytes, 5));
  EXPECT_EQ(wp.finish_patch(&h), Status::ok);
}

TEST(WordPatch, StartPatchLocksWithInt3ThenFinishes) {
  WordPatcher wp(WaitPolicy::Ticks(1000));
  DataBlock mem;
  std::uint8_t* site = mem.data() + 128 - 3;  // S = 3
  const auto before = mem.snapshot();
  const std::uint8_t bytes[5] = {0x11, 0x22, 0x33, 0x44, 0x55};
  PatchHandle h;
  ASSERT_EQ(wp.start_patch(site, bytes, &h), Status::ok);
  EXPECT_EQ(h.phase, 1);
  EXPECT_EQ(h.split, 3);
  // Step 1: only byte 0 changed, to int3; the site is locked in the table.
  EXPECT_EQ(site[0], x86::kInt3);
  EXPECT_EQ(0, std::memcmp(site + 1, before.data() + (site - mem.data()) + 1, 4));
  EXPECT_EQ(detail::site_state(reinterpret_cast<std::uintptr_t>(site)), detail::SiteState::locked);

  // A second patcher on the same site is refused, never blocked.
  WordPatcher other(WaitPolicy::Ticks(1000));
  std::thread t([&] {
    EXPECT_EQ(other.patch(site, bytes), Status::busy);
    PatchHandle h2;
    EXPECT_EQ(other.start_patch(site, bytes, &h2), Status::busy);
  });
  t.join();
  EXPECT_EQ(site[0], x86::kInt3);

  // The in-flight handle cannot be reused for another patch before it is finished.
  EXPECT_EQ(wp.start_patch(mem.data() + 8, bytes, &h), Status::busy);
  EXPECT_EQ(h.phase, 1);

  ASSERT_EQ(wp.finish_patch(&h), Status::ok);
  EXPECT_EQ(h.phase, 3);
  EXPECT_EQ(0, std::memcmp(site, bytes, 5));
  EXPECT_EQ(detail::site_state(reinterpret_cast<std::uintptr_t>(site)),
            detail::SiteState::unlocked);
  // Unlocked: the other patcher may now patch it.
  EXPECT_EQ(other.patch(site, {before.data() + (site - mem.data()), 5}), Status::ok);
  EXPECT_EQ(mem.snapshot(), before);
}

TEST(WordPatch, FinishPatchesAmortisesManySites) {
  WordPatcher wp(WaitPolicy::Ticks(2000));
  DataBlock mem;
  const std::size_t line = x86::cache_line_size();
  std::vector<PatchHandle> hs(8);
  auto expect = mem.snapshot();
  for (std::size_t i = 0; i < hs.size(); ++i) {
    // Sites in lines 2, 4, 6, ...: S = 1..4 and two non-straddling ones.
    const std::size_t s = i % 5;
    const std::size_t off = (2 * i + 2) * line - (s == 0 ? 20 : s);
    std::uint8_t bytes[5];
    for (std::size_t k = 0; k < 5; ++k) bytes[k] = static_cast<std::uint8_t>(i * 16 + k);
    std::memcpy(expect.data() + off, bytes, 5);
    ASSERT_EQ(wp.start_patch(mem.data() + off, bytes, &hs[i]), Status::ok);
  }
  ASSERT_EQ(wp.finish_patches(hs), Status::ok);
  for (const auto& h : hs) EXPECT_EQ(h.phase, 3);
  EXPECT_EQ(mem.snapshot(), expect);
  // An idle handle in the batch is reported, the others still complete.
  std::vector<PatchHandle> mixed(2);
  const std::uint8_t b[3] = {9, 9, 9};
  ASSERT_EQ(wp.start_patch(mem.data() + 2 * line - 1, b, &mixed[0]), Status::ok);
  EXPECT_EQ(wp.finish_patches(mixed), Status::bad_address);
  EXPECT_EQ(mixed[0].phase, 3);
  EXPECT_EQ(0, std::memcmp(mem.data() + 2 * line - 1, b, 3));
}

// finish_patches pays one wait per phase, and that wait must run from the LATEST stamp of
// the batch: a handle started just before finish_patches has had no time yet. The first
// handle's W is allowed to run out before the second starts, so a wait from the earliest
// stamp would write the back parts at once and return about W after the second lock
// instead of at least 2 W. Only lower bounds on elapsed TSC ticks are checked (waits may
// run long on a loaded machine, never short), so this is not a speed test.
TEST(WordPatch, FinishPatchesWaitsFromTheLatestStamp) {
  constexpr std::uint64_t kW = 5'000'000;  // ~2 ms at 2.6 GHz
  WordPatcher wp(WaitPolicy::Ticks(kW));
  DataBlock mem;
  const std::size_t line = x86::cache_line_size();
  const std::uint8_t bytes[5] = {0x11, 0x22, 0x33, 0x44, 0x55};
  PatchHandle hs[2];
  ASSERT_EQ(wp.start_patch(mem.data() + 2 * line - 1, bytes, &hs[0]), Status::ok);  // S = 1
  x86::spin_ticks_from(hs[0].stamp, kW);
  ASSERT_EQ(wp.start_patch(mem.data() + 4 * line - 3, bytes, &hs[1]), Status::ok);  // S = 3
  ASSERT_EQ(hs[1].phase, 1);
  const std::uint64_t latest = hs[1].stamp;
  ASSERT_EQ(wp.finish_patches(hs), Status::ok);
  const std::uint64_t elapsed = x86::rdtscp_ordered() - latest;
  EXPECT_GE(elapsed, 2 * kW) << "wait, back parts, wait, front parts: at least 2 W after the "
                                "latest lock";
  EXPECT_EQ(0, std::memcmp(mem.data() + 2 * line - 1, bytes, 5));
  EXPECT_EQ(0, std::memcmp(mem.data() + 4 * line - 3, bytes, 5));
}

TEST(WordPatch, NaiveSplitWriteWritesBothParts) {
  DataBlock mem;
  const std::uint8_t bytes[5] = {5, 6, 7, 8, 9};
  auto expect = mem.snapshot();
  std::memcpy(expect.data() + 62, bytes, 5);
  ASSERT_EQ(naive_split_write(mem.data() + 62, bytes, WaitPolicy::Ticks(500)), Status::ok);
  EXPECT_EQ(mem.snapshot(), expect);
}

TEST(WordPatch, SyncCorePolicy) {
  std::error_code ec;
  const Status reg = sync_core_register(&ec);
  if (reg == Status::unsupported) GTEST_SKIP() << "kernel lacks membarrier SYNC_CORE";
  ASSERT_EQ(reg, Status::ok) << ec.message();
  WordPatcher wp(WaitPolicy::SyncCore());
  ASSERT_EQ(wp.init_status(), Status::ok);
  DataBlock mem;
  const std::uint8_t bytes[6] = {1, 2, 3, 4, 5, 6};
  std::uint8_t* site = mem.data() + x86::cache_line_size() - 2;  // S = 2
  ASSERT_EQ(wp.patch(site, bytes), Status::ok);
  EXPECT_EQ(0, std::memcmp(site, bytes, 6));
}

// ---- concurrency ----------------------------------------------------------------------------
struct ConcurrencyParam {
  unsigned split;
  int executors;
  bool sync_core;
  InlineStore store = InlineStore::locked;
};

class WordPatchConcurrent : public ::testing::TestWithParam<ConcurrencyParam> {};

// Executors call `xor eax,eax; <site>; ret` while the patcher swaps the site between a
// call (returns 1) and a prefixed NOP (returns 0) that differ in both lines. Any torn
// fetch is a fault (crash) or a wrong return value.
TEST_P(WordPatchConcurrent, TogglesUnderExecution) {
  const auto [split, executors, sync_core, store] = GetParam();
  if (sync_core && sync_core_register() != Status::ok) GTEST_SKIP() << "no membarrier SYNC_CORE";
  const std::uint64_t toggles = sync_core ? 20'000 : 10'000;
  TestSite ts(split, testsupport::kNop5Prefixed);
  for (unsigned i = 0; i < 5; ++i)
    ASSERT_NE(ts.state_a()[i], ts.state_b()[i]) << "states must differ in byte " << i;
  WordPatcher wp(sync_core ? WaitPolicy::SyncCore() : WaitPolicy::Ticks(kGenerousWait), store);
  ASSERT_EQ(wp.init_status(), Status::ok);
  const trap::Stats before = trap::stats();

  test::Executors execs(executors, {ts.entry()});
  test::ExecCounts& counts = execs.counts;

  std::uint64_t failures = 0;
  for (std::uint64_t t = 0; t < toggles; ++t) {
    const bool to_b = (t & 1) == 0;
    failures += wp.patch(ts.site(), to_b ? ts.state_b() : ts.state_a()) != Status::ok;
    if ((t >> 1) % 4096 == 0) {
      ASSERT_TRUE(test::await_execution(counts, to_b ? 0 : 1));
    }
  }
  execs.stop();
  const trap::Stats after = trap::stats();

  EXPECT_EQ(failures, 0u);
  EXPECT_EQ(ts.current(), ts.state_a());
  EXPECT_EQ(counts.ran[2].load(), 0u);
  EXPECT_GT(counts.ran[0].load(), 0u);
  EXPECT_GT(counts.ran[1].load(), 0u);
  EXPECT_EQ(after.chained, before.chained) << "a trap at the site was not recognised";
  std::printf("S=%u executors=%d %s%s: %llu patches, call ran %llu, nop ran %llu, "
              "locked traps %llu, late traps %llu\n",
              split, executors, sync_core ? "sync-core" : "W=200000",
              store == InlineStore::plain ? " plain stores" : "",
              static_cast<unsigned long long>(toggles),
              static_cast<unsigned long long>(counts.ran[1].load()),
              static_cast<unsigned long long>(counts.ran[0].load()),
              static_cast<unsigned long long>(after.locked_hits - before.locked_hits),
              static_cast<unsigned long long>(after.late_hits - before.late_hits));
}

INSTANTIATE_TEST_SUITE_P(
    Straddles, WordPatchConcurrent,
    ::testing::Values(ConcurrencyParam{1, 1, false}, ConcurrencyParam{2, 1, false},
                      ConcurrencyParam{3, 1, false}, ConcurrencyParam{4, 1, false},
                      ConcurrencyParam{1, 2, false}, ConcurrencyParam{2, 2, false},
                      ConcurrencyParam{3, 2, false}, ConcurrencyParam{4, 2, false},
                      ConcurrencyParam{2, 1, true}, ConcurrencyParam{4, 2, true},
                      ConcurrencyParam{1, 1, false, InlineStore::plain},
                      ConcurrencyParam{3, 1, false, InlineStore::plain}),
    [](const ::testing::TestParamInfo<ConcurrencyParam>& p) {
      char name[32];
      std::snprintf(name, sizeof name, "S%u_E%d%s%s", p.param.split, p.param.executors,
                    p.param.sync_core ? "_SyncCore" : "",
                    p.param.store == InlineStore::plain ? "_Plain" : "");
      return std::string(name);
    });

// Two patchers on disjoint sites at once, one executor running both sites.
TEST(WordPatchConcurrent, DisjointSitesTwoPatchers) {
  TestSite s2(2, testsupport::kNop5Prefixed), s3(3, testsupport::kNop5Prefixed);
  test::Executors execs(1, {s2.entry(), s3.entry()});
  test::ExecCounts& counts = execs.counts;
  const trap::Stats before = trap::stats();
  std::atomic<std::uint64_t> failures{0};
  std::atomic<std::uint64_t> unseen{0};  // holds in a state the executor never ran
  // Each patcher now and then holds its site in the state just written until the
  // executor has run that site in it, so both states of both sites provably ran.
  auto patcher = [&failures, &unseen, &counts](TestSite* ts, std::size_t entry) {
    WordPatcher wp(WaitPolicy::Ticks(kGenerousWait));
    for (int t = 0; t < 2'000; ++t) {
      const bool to_b = (t & 1) == 0;
      failures += wp.patch(ts->site(), to_b ? ts->state_b() : ts->state_a()) != Status::ok;
      if ((t >> 1) % 256 == 0 && !test::await_entry_execution(counts, entry, to_b ? 0 : 1)) {
        ++unseen;
        return;  // one 30 s timeout is enough to fail
      }
    }
  };
  std::thread p2(patcher, &s2, 0), p3(patcher, &s3, 1);
  p2.join();
  p3.join();
  execs.stop();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(unseen.load(), 0u) << "a site held in one state was never executed in it";
  EXPECT_EQ(s2.current(), s2.state_a());
  EXPECT_EQ(s3.current(), s3.state_a());
  EXPECT_EQ(counts.ran[2].load(), 0u);
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_GT(counts.by_entry[e][0].load(), 0u) << "site " << e << " never ran its NOP";
    EXPECT_GT(counts.by_entry[e][1].load(), 0u) << "site " << e << " never ran its call";
  }
  EXPECT_EQ(trap::stats().chained, before.chained);
}

// Many outstanding patches from one thread, finished with amortised waits, while an
// executor runs all the sites.
TEST(WordPatchConcurrent, AsyncBatchesUnderExecution) {
  std::vector<std::unique_ptr<TestSite>> sites;
  std::vector<TestSite::EntryFn> fns;
  for (unsigned s = 1; s <= 4; ++s) {
    sites.push_back(std::make_unique<TestSite>(s, testsupport::kNop5Prefixed));
    fns.push_back(sites.back()->entry());
  }
  test::Executors execs(1, fns);
  test::ExecCounts& counts = execs.counts;
  WordPatcher wp(WaitPolicy::Ticks(kGenerousWait));
  std::vector<PatchHandle> hs(sites.size());
  for (int round = 0; round < 2'000; ++round) {
    const bool to_b = (round & 1) == 0;
    for (std::size_t i = 0; i < sites.size(); ++i) {
      const auto& ts = *sites[i];
      ASSERT_EQ(wp.start_patch(ts.site(), to_b ? ts.state_b() : ts.state_a(), &hs[i]),
                Status::ok);
    }
    ASSERT_EQ(wp.finish_patches(hs), Status::ok);
    // Now and then every site is held in the state the batch wrote until the executor has
    // run it there, so each site provably ran in both states.
    if ((round >> 1) % 256 == 0) {
      for (std::size_t i = 0; i < sites.size(); ++i)
        ASSERT_TRUE(test::await_entry_execution(counts, i, to_b ? 0 : 1)) << "site " << i;
    }
  }
  execs.stop();
  for (const auto& ts : sites) EXPECT_EQ(ts->current(), ts->state_a());
  EXPECT_EQ(counts.ran[2].load(), 0u);
  for (std::size_t i = 0; i < sites.size(); ++i) {
    EXPECT_GT(counts.by_entry[i][0].load(), 0u) << "site " << i << " never ran its NOP";
    EXPECT_GT(counts.by_entry[i][1].load(), 0u) << "site " << i << " never ran its call";
  }
}

}  // namespace
}  // namespace crossmod
