// Machine identity (CPUID), package count (sysfs), the machine slug and the TSC rate.
// Thread safety: all functions thread-safe; tsc_info() is computed once (function-local
// static) and may block ~50 ms on first call when it has to measure. Not signal-safe.
#include "crossmod/machine.hpp"

#include <dirent.h>
#include <time.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <set>

#include "crossmod/x86.hpp"
#include "x86_private.hpp"

namespace crossmod {

namespace {

using x86::detail::cpuid;

inline constexpr std::uint32_t kLeafVendor = 0x0;
inline constexpr std::uint32_t kLeafSignature = 0x1;
inline constexpr std::uint32_t kLeafTscCrystal = 0x15;
inline constexpr std::uint32_t kLeafHypervisor = 0x40000000;
inline constexpr std::uint32_t kLeafHypervisorTiming = 0x40000010;  // VMware/KVM convention
inline constexpr std::uint32_t kLeafExtMax = 0x80000000;
inline constexpr std::uint32_t kLeafBrand = 0x80000002;  // .. 0x80000004
inline constexpr std::uint32_t kLeafPowerMgmt = 0x80000007;
inline constexpr std::uint32_t kHypervisorBit = 1u << 31;  // CPUID.1:ECX[31]
inline constexpr std::uint32_t kInvariantTscBit = 1u << 8; // CPUID.80000007H:EDX[8]

std::string regs_to_string(std::initializer_list<std::uint32_t> regs) {
  std::string s;
  for (std::uint32_t r : regs)
    for (unsigned i = 0; i < 4; ++i) {
      const char c = static_cast<char>((r >> (8 * i)) & 0xFF);
      if (c != '\0') s.push_back(c);
    }
  return s;
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return {};
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::uint64_t monotonic_raw_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

TscInfo compute_tsc_info() noexcept {
  const unsigned max_basic = cpuid(kLeafVendor).eax;
  if (max_basic >= kLeafTscCrystal) {
    // SDM Vol 2A CPUID leaf 15H: TSC = crystal (ECX) * EBX / EAX, valid when EBX and ECX
    // are non-zero.
    const auto r = cpuid(kLeafTscCrystal);
    if (r.eax != 0 && r.ebx != 0 && r.ecx != 0)
      return {static_cast<double>(r.ecx) * r.ebx / r.eax, "cpuid-0x15"};
  }
  if ((cpuid(kLeafSignature).ecx & kHypervisorBit) != 0 &&
      cpuid(kLeafHypervisor).eax >= kLeafHypervisorTiming) {
    // Hypervisor timing leaf: EAX = TSC frequency in kHz (observed on KVM and VMware).
    const auto r = cpuid(kLeafHypervisorTiming);
    if (r.eax != 0) return {static_cast<double>(r.eax) * 1000.0, "hypervisor-0x40000010"};
  }
  // Measured: ~50 ms against CLOCK_MONOTONIC_RAW (not NTP-slewed), bracketing each clock
  // read by TSC reads and keeping the tightest bracket of three tries.
  double best_hz = 0;
  std::uint64_t best_bracket = UINT64_MAX;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::uint64_t t0a = x86::rdtscp_ordered();
    const std::uint64_t n0 = monotonic_raw_ns();
    const std::uint64_t t0b = x86::rdtscp_ordered();
    timespec nap{0, 50'000'000 / 3};
    nanosleep(&nap, nullptr);
    const std::uint64_t t1a = x86::rdtscp_ordered();
    const std::uint64_t n1 = monotonic_raw_ns();
    const std::uint64_t t1b = x86::rdtscp_ordered();
    const std::uint64_t bracket = (t0b - t0a) + (t1b - t1a);
    if (n1 <= n0) continue;
    const double ticks = static_cast<double>((t1a + t1b) / 2 - (t0a + t0b) / 2);
    const double hz = ticks * 1e9 / static_cast<double>(n1 - n0);
    if (bracket < best_bracket) {
      best_bracket = bracket;
      best_hz = hz;
    }
  }
  return {best_hz > 0 ? best_hz : 1e9, "measured"};
}

}  // namespace

CpuIdentity cpu_identity() noexcept {
  CpuIdentity id;
  try {
    const auto v = cpuid(kLeafVendor);
    id.vendor = regs_to_string({v.ebx, v.edx, v.ecx});
    const auto sig = cpuid(kLeafSignature);
    // SDM Vol 2A CPUID leaf 01H, "display family/model": the extended family is added
    // only when the base family is 0xF; the extended model is used for families 6 and 0xF.
    const unsigned base_family = (sig.eax >> 8) & 0xF;
    const unsigned ext_family = (sig.eax >> 20) & 0xFF;
    const unsigned base_model = (sig.eax >> 4) & 0xF;
    const unsigned ext_model = (sig.eax >> 16) & 0xF;
    id.family = base_family == 0xF ? base_family + ext_family : base_family;
    id.model = (base_family == 0x6 || base_family == 0xF) ? (ext_model << 4) + base_model
                                                          : base_model;
    id.stepping = sig.eax & 0xF;
    id.hypervisor = (sig.ecx & kHypervisorBit) != 0;
    if (id.hypervisor) {
      const auto h = cpuid(kLeafHypervisor);
      id.hypervisor_vendor = regs_to_string({h.ebx, h.ecx, h.edx});
    }
    const unsigned max_ext = cpuid(kLeafExtMax).eax;
    if (max_ext >= kLeafBrand + 2) {
      std::string brand;
      for (std::uint32_t leaf = kLeafBrand; leaf <= kLeafBrand + 2; ++leaf) {
        const auto b = cpuid(leaf);
        brand += regs_to_string({b.eax, b.ebx, b.ecx, b.edx});
      }
      id.brand = trim(brand);
    }
    if (max_ext >= kLeafPowerMgmt)
      id.invariant_tsc = (cpuid(kLeafPowerMgmt).edx & kInvariantTscBit) != 0;
  } catch (...) {
    // Only allocation can fail; return what was filled.
  }
  return id;
}

unsigned package_count() noexcept {
  try {
    DIR* dir = opendir("/sys/devices/system/cpu");
    if (dir == nullptr) return 1;
    std::set<long> packages;
    while (dirent* e = readdir(dir)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "cpu", 3) != 0 || !std::isdigit(static_cast<unsigned char>(name[3])))
        continue;
      const std::string path =
          std::string("/sys/devices/system/cpu/") + name + "/topology/physical_package_id";
      if (std::FILE* f = std::fopen(path.c_str(), "r")) {
        long id = -1;
        if (std::fscanf(f, "%ld", &id) == 1) packages.insert(id);
        std::fclose(f);
      }
    }
    closedir(dir);
    return packages.empty() ? 1u : static_cast<unsigned>(packages.size());
  } catch (...) {
    return 1;
  }
}

std::string machine_slug() noexcept {
  try {
    const CpuIdentity id = cpu_identity();
    std::string vendor;
    if (id.vendor == "GenuineIntel") {
      vendor = "intel";
    } else if (id.vendor == "AuthenticAMD") {
      vendor = "amd";
    } else {
      for (char c : id.vendor) {
        const auto u = static_cast<unsigned char>(c);
        vendor.push_back(std::isalnum(u) ? static_cast<char>(std::tolower(u)) : '_');
      }
      if (vendor.empty()) vendor = "unknown";
    }
    return vendor + "-fam" + std::to_string(id.family) + "-mod" + std::to_string(id.model) +
           "-step" + std::to_string(id.stepping) + "-" + std::to_string(package_count()) +
           "pkg";
  } catch (...) {
    return "unknown";
  }
}

TscInfo tsc_info() noexcept {
  static const TscInfo info = compute_tsc_info();
  return info;
}

}  // namespace crossmod
