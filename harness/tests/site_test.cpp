// Stress-site tests: every torn mix of A and B at S = 1..4 is decoded here with Zydis
// (independently of site.cpp's own check) and shown to fault at its first instruction,
// either #UD or a call into a PROT_NONE page (read back from /proc/self/maps).
// Single-threaded; the site is executed only on the test's own thread.
#include <Zydis/Zydis.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "crossmod/callpatch.hpp"
#include "crossmod/code_memory.hpp"
#include "crossmod/x86.hpp"
#include "cell/site.hpp"

namespace crossmod::harness {
namespace {

using Bytes5 = std::array<std::uint8_t, 5>;

// Permissions ("r-xp", "---p", ...) of the mapping holding `addr`, "" if unmapped.
std::string perms_at(std::uintptr_t addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream is(line);
    std::string range, perms;
    is >> range >> perms;
    const auto dash = range.find('-');
    const std::uintptr_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const std::uintptr_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    if (addr >= lo && addr < hi) return perms;
  }
  return "";
}

struct Decoded {
  bool ok = false;
  ZydisDecodedInstruction insn{};
  ZydisDecodedOperand ops[ZYDIS_MAX_OPERAND_COUNT]{};
};

// Decodes the first instruction of `mix` followed by `ret` and 0x0E filler, as in the page.
Decoded decode(const Bytes5& mix) {
  std::uint8_t buf[16];
  std::memset(buf, x86::kInvalid64, sizeof buf);
  std::memcpy(buf, mix.data(), mix.size());
  buf[5] = x86::kRet;
  ZydisDecoder dec;
  ZydisDecoderInit(&dec, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
  Decoded d;
  d.ok = ZYAN_SUCCESS(ZydisDecoderDecodeFull(&dec, buf, sizeof buf, &d.insn, d.ops));
  return d;
}

Bytes5 mix(const Bytes5& front, const Bytes5& back, unsigned split) {
  Bytes5 m{};
  for (unsigned i = 0; i < 5; ++i) m[i] = i < split ? front[i] : back[i];
  return m;
}

Bytes5 to5(const std::array<std::uint8_t, 5>& a) { return a; }

TEST(StressSite, EveryTornMixFaultsAtItsFirstInstruction) {
  for (unsigned s = 1; s <= 4; ++s) {
    std::string why;
    auto site = StressSite::create(s, 0, &why);
    ASSERT_TRUE(site) << "S=" << s << ": " << why;
    EXPECT_EQ(x86::straddle_split(reinterpret_cast<std::uintptr_t>(site->site()), 5), s);
    const Bytes5 a = site->state_a(), b = site->state_b();
    const auto site_addr = reinterpret_cast<std::uintptr_t>(site->site());
    for (unsigned split = 1; split <= 4; ++split) {
      SCOPED_TRACE("site S=" + std::to_string(s) + " mix split " + std::to_string(split));
      // B front + A back: invalid at byte 0 (#UD, SIGILL at the site).
      const Decoded d1 = decode(mix(b, a, split));
      EXPECT_FALSE(d1.ok) << "B-front mix decodes as "
                          << ZydisMnemonicGetString(d1.insn.mnemonic);
      // A front + B back: a 5-byte call whose target page is PROT_NONE.
      const Decoded d2 = decode(mix(a, b, split));
      ASSERT_TRUE(d2.ok);
      EXPECT_EQ(d2.insn.mnemonic, ZYDIS_MNEMONIC_CALL);
      EXPECT_EQ(d2.insn.length, 5);
      ZyanU64 target = 0;
      ASSERT_TRUE(ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&d2.insn, &d2.ops[0], site_addr, &target)));
      EXPECT_EQ(perms_at(target), "---p") << std::hex << "target 0x" << target;
      EXPECT_GE(target, site->torn_window_begin());
      EXPECT_LT(target, site->torn_window_end());
      EXPECT_TRUE(site->owns_pc(target));
      // The same, by the site's own check.
      EXPECT_EQ(StressSite::check_mixes(split, a, b, site_addr, site->torn_window_begin(),
                                        site->torn_window_end()),
                "");
    }
    // A and B differ in both parts at this S.
    EXPECT_NE(std::memcmp(a.data(), b.data(), s), 0);
    EXPECT_NE(std::memcmp(a.data() + s, b.data() + s, 5 - s), 0);
    // The real target is the stub, in an executable page, outside the window.
    const Decoded da = decode(a);
    ZyanU64 stub = 0;
    ASSERT_TRUE(ZYAN_SUCCESS(ZydisCalcAbsoluteAddress(&da.insn, &da.ops[0], site_addr, &stub)));
    EXPECT_EQ(stub, reinterpret_cast<std::uintptr_t>(site->call_target()));
    EXPECT_EQ(perms_at(stub), "r-xp");
    // The bytes around the site are all 0x0E: any stray landing faults.
    EXPECT_EQ(site->site()[-3], x86::kInvalid64);
    EXPECT_EQ(site->site()[6], x86::kInvalid64);
  }
}

// Why B is not the canonical NOP: at S = 3 and 4 the mix "kNop5 front + call back" keeps
// the NOP's opcode and modrm, and decodes as a valid 5-byte NOP — a tear nobody sees.
TEST(StressSite, CanonicalNop5WouldGiveBenignMixesAtS3AndS4) {
  std::string why;
  auto site = StressSite::create(1, 0, &why);
  ASSERT_TRUE(site) << why;
  const Bytes5 a = site->state_a();
  for (unsigned split : {3u, 4u}) {
    const Decoded d = decode(mix(x86::kNop5, a, split));
    ASSERT_TRUE(d.ok) << "split " << split;
    EXPECT_EQ(d.insn.mnemonic, ZYDIS_MNEMONIC_NOP) << "split " << split;
    EXPECT_EQ(d.insn.length, 5) << "split " << split;
  }
}

TEST(StressSite, RefusesCanonicalNop5AsStateB) {
  for (unsigned s : {3u, 4u}) {
    std::string why;
    auto site = StressSite::create(s, 0, &why, x86::kNop5);
    EXPECT_FALSE(site) << "S=" << s;
    EXPECT_NE(why.find("decodes as valid"), std::string::npos) << why;
  }
}

TEST(StressSite, S0AcceptsCanonicalNop5ForBench) {
  std::string why;
  auto site = StressSite::create(0, 8, &why, x86::kNop5);
  ASSERT_TRUE(site) << why;
  EXPECT_EQ(site->state_b(), to5(x86::kNop5));
}

TEST(StressSite, EntryReturnsOneInStateAAndZeroInStateB) {
  for (unsigned s = 0; s <= 4; ++s) {
    std::string why;
    auto site = StressSite::create(s, 3, &why);
    ASSERT_TRUE(site) << why;
    // Single thread writing then executing its own code: coherent on x86 (SDM Vol 3A
    // 8.1.3, self-modifying code), the page is RWX through the engine's WritableRange.
    EXPECT_EQ(site->entry()(), 1) << "S=" << s;
    std::memcpy(site->site(), site->state_b().data(), 5);
    EXPECT_EQ(site->entry()(), 0) << "S=" << s;
    std::memcpy(site->site(), site->state_a().data(), 5);
    EXPECT_EQ(site->entry()(), 1) << "S=" << s;
  }
}

TEST(StressSite, S0HonoursLineOffset) {
  const unsigned line = x86::cache_line_size();
  for (unsigned off = 0; off + 5 <= line; ++off) {
    std::string why;
    auto site = StressSite::create(0, off, &why);
    ASSERT_TRUE(site) << why;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(site->site()) % line, off);
    EXPECT_EQ(site->line_offset(), off);
    EXPECT_EQ(x86::straddle_split(reinterpret_cast<std::uintptr_t>(site->site()), 5), 0u);
  }
  std::string why;
  EXPECT_FALSE(StressSite::create(0, line - 4, &why));
  EXPECT_FALSE(why.empty());
  EXPECT_FALSE(StressSite::create(5, 0, &why));
}

TEST(StressSite, SiteIsRegisteredWritableWithTheEngine) {
  std::string why;
  auto site = StressSite::create(2, 0, &why);
  ASSERT_TRUE(site) << why;
  EXPECT_TRUE(crossmod::is_writable(site->site(), 5));
  EXPECT_EQ(perms_at(reinterpret_cast<std::uintptr_t>(site->site())), "rwxp");
}

// callpatch at split 1 allocates a ret trampoline within +-2 GiB of the site; the
// reservation must leave room for it.
TEST(StressSite, CallSitePreparesOnEverySplit) {
  for (unsigned s = 0; s <= 4; ++s) {
    std::string why;
    auto site = StressSite::create(s, 0, &why);
    ASSERT_TRUE(site) << why;
    CallSite cs;
    ASSERT_EQ(CallSite::prepare(site->site(), site->call_target(), &cs), Status::ok) << "S=" << s;
    EXPECT_EQ(cs.split(), s);
    EXPECT_EQ(site->entry()(), 1);
    ASSERT_EQ(cs.deactivate(), Status::ok);
    EXPECT_EQ(site->entry()(), 0) << "S=" << s;
    ASSERT_EQ(cs.activate(), Status::ok);
    EXPECT_EQ(site->entry()(), 1) << "S=" << s;
  }
}

TEST(StressSite, CheckMixesNamesTheBadMix) {
  std::string why;
  auto site = StressSite::create(3, 0, &why);
  ASSERT_TRUE(site) << why;
  const std::string r = StressSite::check_mixes(
      3, site->state_a(), to5(x86::kNop5), reinterpret_cast<std::uintptr_t>(site->site()),
      site->torn_window_begin(), site->torn_window_end());
  EXPECT_NE(r.find("S=3"), std::string::npos) << r;
  EXPECT_NE(r.find("nop"), std::string::npos) << r;
}

}  // namespace
}  // namespace crossmod::harness
