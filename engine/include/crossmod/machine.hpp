// Machine identity: CPUID vendor/family/model/stepping, the deterministic machine slug
// that names configs/tmax/<slug>.toml and results/<slug>/, and the TSC frequency.
// Thread safety: thread-safe; not async-signal-safe (allocates).
#pragma once
#include <cstdint>
#include <string>

namespace crossmod {

struct CpuIdentity {
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string brand;       // CPUID 0x80000002..4 brand string, trimmed
  unsigned family = 0;     // display family (base + extended)
  unsigned model = 0;      // display model (base + extended<<4 where applicable)
  unsigned stepping = 0;
  bool hypervisor = false; // CPUID.1:ECX[31]
  std::string hypervisor_vendor;  // CPUID 0x40000000 signature, "" if none
  bool invariant_tsc = false;     // CPUID 0x80000007:EDX[8]
};

CpuIdentity cpu_identity() noexcept;

// Number of physical packages, from /sys/devices/system/cpu/*/topology/physical_package_id
// (1 when unreadable).
unsigned package_count() noexcept;

// "<vendor>-fam<F>-mod<M>-step<S>-<P>pkg", vendor in {intel, amd} or the lower-cased
// CPUID vendor string; decimal numbers. Example: "amd-fam26-mod2-step1-1pkg".
std::string machine_slug() noexcept;

// TSC ticks per second: CPUID 0x15 when it reports a crystal, else the hypervisor leaf
// 0x40000010, else measured against CLOCK_MONOTONIC_RAW over ~50 ms. Cached.
struct TscInfo {
  double hz = 0;
  const char* source = "";  // "cpuid-0x15", "hypervisor-0x40000010", "measured"
};
TscInfo tsc_info() noexcept;
inline double ticks_to_ns(double ticks) noexcept { return ticks * 1e9 / tsc_info().hz; }

}  // namespace crossmod
