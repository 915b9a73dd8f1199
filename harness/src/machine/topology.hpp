// hwloc topology and thread placement: discovers PUs/cores/caches/packages once, chooses
// the PUs of one patcher and N executors for a placement policy, and binds the calling
// thread (hwloc_set_cpubind, HWLOC_CPUBIND_THREAD).
// Thread safety: Topology is immutable after load(); bind_current_thread() is thread-safe.
// Not async-signal-safe.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace crossmod::harness {

enum class Placement { spread, smt, cross_package };
inline constexpr Placement kAllPlacements[] = {Placement::spread, Placement::smt,
                                               Placement::cross_package};
const char* to_string(Placement p);
// Throws std::invalid_argument with a clear message for an unknown name.
Placement parse_placement(const std::string& name);

struct Pu {
  int os_index = -1;   // the OS CPU number (what /proc/cpuinfo calls processor)
  int core = -1;       // logical index of the core
  int package = -1;    // logical index of the package
};

// One cache level as hwloc reports it (addition): "L1d", "L1i", "L2", "L3", ...
struct CacheLevel {
  std::string name;
  unsigned long long size_bytes = 0;  // of one instance
  unsigned line_bytes = 0;
  int instances = 0;
};

struct Assignment {
  int patcher_pu = -1;             // os index
  std::vector<int> executor_pus;   // os indexes, one per executor (may repeat)
  bool oversubscribed = false;     // more threads than PUs: threads share PUs
  std::string warning;             // human text when oversubscribed or degraded
};

class Topology {
 public:
  static Topology load();  // throws std::runtime_error if hwloc fails
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  const std::vector<Pu>& pus() const;
  int packages() const;
  int cores() const;
  const std::vector<CacheLevel>& caches() const;  // addition: L1d, L1i, L2, L3 ... in order
  std::string summary() const;  // e.g. "1 package, 2 cores, 2 PUs, L1d 48KiB, L2 1MiB, L3 32MiB"

  // Placement of one patcher and `executors` executors. Throws std::invalid_argument
  // when the policy is impossible here (e.g. cross-package with one package, smt with no
  // SMT siblings) so the sweep can reject the config before running anything.
  Assignment assign(Placement p, unsigned executors) const;

  // Binds the calling thread to PU `os_index`; false (and errno-style message) on failure.
  bool bind_current_thread(int os_index, std::string* error = nullptr) const;

 private:
  struct Impl;
  explicit Topology(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace crossmod::harness
