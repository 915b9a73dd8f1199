// hwloc topology and thread placement (see topology.hpp): PUs/cores/packages/caches
// discovered once at load(); assign() turns a placement policy into PU numbers.
// Thread safety: immutable after load(); bind_current_thread() is thread-safe (hwloc's
// set_cpubind only reads the topology). Not async-signal-safe.
#include "machine/topology.hpp"

#include <fmt/core.h>
#include <hwloc.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <stdexcept>

namespace crossmod::harness {

const char* to_string(Placement p) {
  switch (p) {
    case Placement::spread: return "spread";
    case Placement::smt: return "smt";
    case Placement::cross_package: return "cross-package";
  }
  return "?";
}

Placement parse_placement(const std::string& name) {
  if (name == "spread") return Placement::spread;
  if (name == "smt") return Placement::smt;
  if (name == "cross-package" || name == "cross_package") return Placement::cross_package;
  throw std::invalid_argument("unknown placement '" + name +
                              "' (expected spread, smt or cross-package)");
}

namespace {

struct CoreInfo {
  int core = -1;
  int package = -1;
  std::vector<int> pus;  // os indexes, in hwloc logical order
  hwloc_obj_t obj = nullptr;
};

std::string human_size(unsigned long long b) {
  if (b >= (1ull << 20) && b % (1ull << 20) == 0) return fmt::format("{}MiB", b >> 20);
  if (b >= (1ull << 10) && b % (1ull << 10) == 0) return fmt::format("{}KiB", b >> 10);
  return fmt::format("{}B", b);
}

}  // namespace

struct Topology::Impl {
  hwloc_topology_t topo = nullptr;
  std::vector<Pu> pus;
  std::vector<CoreInfo> cores;
  std::vector<CacheLevel> caches;
  int packages = 0;

  ~Impl() {
    if (topo) hwloc_topology_destroy(topo);
  }

  // Nearer = deeper common ancestor (shared L2 beats shared L3 beats same package).
  int closeness(const CoreInfo& a, const CoreInfo& b) const {
    if (!a.obj || !b.obj) return 0;
    hwloc_obj_t c = hwloc_get_common_ancestor_obj(topo, a.obj, b.obj);
    return c ? c->depth : 0;
  }
  // Cores other than `from` that satisfy `keep`, nearest to `from` first.
  std::vector<const CoreInfo*> others_nearest(const CoreInfo& from,
                                              bool (*keep)(const CoreInfo&, const CoreInfo&)) const {
    std::vector<const CoreInfo*> out;
    for (const auto& c : cores)
      if (&c != &from && keep(from, c)) out.push_back(&c);
    std::stable_sort(out.begin(), out.end(), [&](const CoreInfo* x, const CoreInfo* y) {
      return closeness(from, *x) > closeness(from, *y);
    });
    return out;
  }
};

Topology::Topology(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;
Topology& Topology::operator=(Topology&&) noexcept = default;

Topology Topology::load() {
  auto m = std::make_unique<Impl>();
  if (hwloc_topology_init(&m->topo) != 0) throw std::runtime_error("hwloc_topology_init failed");
  // hwloc 2 drops instruction caches by default; the L1i size is part of the context the
  // results are read in (the site is fetched through it).
  hwloc_topology_set_icache_types_filter(m->topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(m->topo) != 0) {
    throw std::runtime_error(std::string("hwloc_topology_load failed: ") + std::strerror(errno));
  }
  hwloc_topology_t t = m->topo;
  const int npkg = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE);
  m->packages = npkg > 0 ? npkg : 1;

  // Cores in logical order; a machine (or VM) without Core objects gets one per PU.
  std::map<unsigned, std::size_t> core_of_obj;  // core logical index -> cores[] index
  const int npu = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU);
  for (int i = 0; i < npu; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(t, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    hwloc_obj_t core = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_CORE, pu);
    hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, pu);
    hwloc_obj_t key_obj = core ? core : pu;
    unsigned key = key_obj->logical_index + (core ? 0u : 1u << 30);
    auto it = core_of_obj.find(key);
    if (it == core_of_obj.end()) {
      CoreInfo ci;
      ci.core = static_cast<int>(m->cores.size());
      ci.package = pkg ? static_cast<int>(pkg->logical_index) : 0;
      ci.obj = key_obj;
      m->cores.push_back(ci);
      it = core_of_obj.emplace(key, m->cores.size() - 1).first;
    }
    CoreInfo& ci = m->cores[it->second];
    ci.pus.push_back(static_cast<int>(pu->os_index));
    m->pus.push_back(Pu{static_cast<int>(pu->os_index), ci.core, ci.package});
  }
  if (m->pus.empty()) throw std::runtime_error("hwloc found no processing units");

  struct CacheType {
    hwloc_obj_type_t type;
    const char* name;
  };
  const CacheType types[] = {{HWLOC_OBJ_L1CACHE, "L1d"}, {HWLOC_OBJ_L1ICACHE, "L1i"},
                             {HWLOC_OBJ_L2CACHE, "L2"},  {HWLOC_OBJ_L3CACHE, "L3"},
                             {HWLOC_OBJ_L4CACHE, "L4"},  {HWLOC_OBJ_L5CACHE, "L5"}};
  for (const auto& ct : types) {
    const int n = hwloc_get_nbobjs_by_type(t, ct.type);
    if (n <= 0) continue;
    hwloc_obj_t c = hwloc_get_obj_by_type(t, ct.type, 0);
    if (!c || !c->attr) continue;
    m->caches.push_back(CacheLevel{ct.name, static_cast<unsigned long long>(c->attr->cache.size),
                                   c->attr->cache.linesize, n});
  }
  return Topology(std::move(m));
}

const std::vector<Pu>& Topology::pus() const { return impl_->pus; }
int Topology::packages() const { return impl_->packages; }
int Topology::cores() const { return static_cast<int>(impl_->cores.size()); }
const std::vector<CacheLevel>& Topology::caches() const { return impl_->caches; }

std::string Topology::summary() const {
  auto plural = [](std::size_t n, const char* one, const char* many) {
    return fmt::format("{} {}", n, n == 1 ? one : many);
  };
  std::string s = plural(static_cast<std::size_t>(impl_->packages), "package", "packages") + ", " +
                  plural(impl_->cores.size(), "core", "cores") + ", " +
                  plural(impl_->pus.size(), "PU", "PUs");
  for (const auto& c : impl_->caches) s += fmt::format(", {} {}", c.name, human_size(c.size_bytes));
  return s;
}

Assignment Topology::assign(Placement p, unsigned executors) const {
  const Impl& m = *impl_;
  Assignment a;
  std::vector<int> candidates;  // executor PUs in order of preference; wrapped around
  switch (p) {
    case Placement::spread: {
      const CoreInfo& home = m.cores.front();
      a.patcher_pu = home.pus.front();
      for (const CoreInfo* c : m.others_nearest(home, [](const CoreInfo&, const CoreInfo&) {
             return true;
           }))
        candidates.push_back(c->pus.front());
      // One core only: executors can only share the patcher's core (its siblings first).
      if (candidates.empty()) {
        candidates.assign(home.pus.begin() + 1, home.pus.end());
        if (candidates.empty()) candidates.push_back(a.patcher_pu);
        a.warning = "spread degraded: one core, executors share the patcher's core";
      }
      break;
    }
    case Placement::smt: {
      auto it = std::find_if(m.cores.begin(), m.cores.end(),
                             [](const CoreInfo& c) { return c.pus.size() >= 2; });
      if (it == m.cores.end()) {
        throw std::invalid_argument("placement smt impossible: no SMT siblings on this machine");
      }
      a.patcher_pu = it->pus.front();
      candidates.assign(it->pus.begin() + 1, it->pus.end());
      break;
    }
    case Placement::cross_package: {
      if (m.packages < 2) {
        throw std::invalid_argument(fmt::format(
            "placement cross-package impossible: this machine has {} package", m.packages));
      }
      const CoreInfo& home = m.cores.front();
      a.patcher_pu = home.pus.front();
      for (const CoreInfo* c : m.others_nearest(home, [](const CoreInfo& f, const CoreInfo& o) {
             return o.package != f.package;
           }))
        candidates.push_back(c->pus.front());
      if (candidates.empty()) {
        throw std::invalid_argument(
            "placement cross-package impossible: no core outside the patcher's package");
      }
      break;
    }
  }
  for (unsigned i = 0; i < executors; ++i) a.executor_pus.push_back(candidates[i % candidates.size()]);

  std::map<int, int> load;
  ++load[a.patcher_pu];
  for (int pu : a.executor_pus) ++load[pu];
  int shared = 0;
  for (const auto& [pu, n] : load) shared += n > 1 ? 1 : 0;
  if (shared > 0) {
    a.oversubscribed = true;
    std::string w = fmt::format(
        "oversubscribed: 1 patcher + {} executor(s) on {} PU(s) ({} PU(s) in total here) with "
        "placement {}; threads share PUs, so exposure and timing are degraded",
        executors, load.size(), m.pus.size(), to_string(p));
    a.warning = a.warning.empty() ? w : a.warning + "; " + w;
  }
  return a;
}

bool Topology::bind_current_thread(int os_index, std::string* error) const {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  if (!set) {
    if (error) *error = "hwloc_bitmap_alloc failed";
    return false;
  }
  hwloc_bitmap_only(set, static_cast<unsigned>(os_index));
  const int rc = hwloc_set_cpubind(impl_->topo, set, HWLOC_CPUBIND_THREAD);
  const int err = errno;
  hwloc_bitmap_free(set);
  if (rc != 0) {
    if (error) *error = fmt::format("hwloc_set_cpubind(PU {}): {}", os_index, std::strerror(err));
    return false;
  }
  return true;
}

}  // namespace crossmod::harness
