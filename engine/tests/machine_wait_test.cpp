// Machine identity, slug format, TSC rate, and the waits (none, ticks, sync_core).
#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "crossmod/machine.hpp"
#include "crossmod/wait.hpp"
#include "crossmod/x86.hpp"

namespace crossmod {
namespace {

TEST(Machine, IdentityAndSlug) {
  const CpuIdentity id = cpu_identity();
  EXPECT_EQ(id.vendor.size(), 12u) << id.vendor;
  EXPECT_GT(id.family, 0u);
  const std::string slug = machine_slug();
  // "<vendor>-fam<F>-mod<M>-step<S>-<P>pkg" with a lower-case vendor and decimal numbers.
  const auto dash = slug.find('-');
  ASSERT_NE(dash, std::string::npos) << slug;
  for (char c : slug.substr(0, dash))
    EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) ||
                std::isdigit(static_cast<unsigned char>(c)) || c == '_')
        << slug;
  EXPECT_EQ(slug.substr(slug.size() - 3), "pkg") << slug;
  const std::string expect = "-fam" + std::to_string(id.family) + "-mod" +
                             std::to_string(id.model) + "-step" + std::to_string(id.stepping) +
                             "-" + std::to_string(package_count()) + "pkg";
  EXPECT_NE(slug.find(expect), std::string::npos) << slug;
  if (id.vendor == "AuthenticAMD") {
    EXPECT_EQ(slug.rfind("amd-", 0), 0u);
  }
  if (id.vendor == "GenuineIntel") {
    EXPECT_EQ(slug.rfind("intel-", 0), 0u);
  }
  EXPECT_EQ(machine_slug(), slug) << "deterministic";
  EXPECT_GE(package_count(), 1u);
  if (id.hypervisor) {
    EXPECT_FALSE(id.hypervisor_vendor.empty());
  }
  std::printf("%s | %s | hypervisor %s | invariant TSC %d\n", slug.c_str(), id.brand.c_str(),
              id.hypervisor_vendor.c_str(), id.invariant_tsc);
}

TEST(Machine, TscInfoIsCachedAndPlausible) {
  const TscInfo a = tsc_info();
  const TscInfo b = tsc_info();
  EXPECT_EQ(a.hz, b.hz);
  EXPECT_STREQ(a.source, b.source);
  EXPECT_GT(a.hz, 1e8);
  EXPECT_LT(a.hz, 1e11);
  const std::string src = a.source;
  EXPECT_TRUE(src == "cpuid-0x15" || src == "hypervisor-0x40000010" || src == "measured") << src;
  EXPECT_NEAR(ticks_to_ns(a.hz), 1e9, 1.0);
  std::printf("TSC %.0f Hz from %s\n", a.hz, a.source);
}

TEST(Wait, TicksWaitsAtLeastTicks) {
  const std::uint64_t start = x86::rdtsc();
  ASSERT_EQ(wait_from(WaitPolicy::Ticks(50'000), start), Status::ok);
  EXPECT_GE(x86::rdtsc() - start, 50'000u);
  // A start far in the past returns at once (no underflow).
  ASSERT_EQ(wait_from(WaitPolicy::Ticks(10), start), Status::ok);
  EXPECT_EQ(wait_from(WaitPolicy::None(), 0), Status::ok);
}

TEST(Wait, SyncCoreRegistersOnceAndWaits) {
  std::error_code ec;
  const Status first = sync_core_register(&ec);
  if (first == Status::unsupported) {
    EXPECT_EQ(wait_from(WaitPolicy::SyncCore(), 0), Status::unsupported);
    GTEST_SKIP() << "kernel lacks membarrier SYNC_CORE";
  }
  ASSERT_EQ(first, Status::ok) << ec.message();
  EXPECT_EQ(sync_core_register(), Status::ok) << "idempotent";
  for (int i = 0; i < 100; ++i) ASSERT_EQ(wait_from(WaitPolicy::SyncCore(), 0), Status::ok);
}

}  // namespace
}  // namespace crossmod
