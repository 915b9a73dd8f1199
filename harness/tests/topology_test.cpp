// Topology and placement tests on the machine that runs them: invariants that hold on
// any machine, and the exact refusals where a policy is impossible here.
// Threads: BindsEveryPu starts one short-lived thread per PU.
#include <gtest/gtest.h>
#include <sched.h>

#include <set>
#include <stdexcept>
#include <thread>

#include "machine/c2c.hpp"
#include "machine/sysinfo.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness {
namespace {

const Topology& topo() {
  static Topology t = Topology::load();
  return t;
}

int core_of(int os_index) {
  for (const Pu& p : topo().pus())
    if (p.os_index == os_index) return p.core;
  return -1;
}
int package_of(int os_index) {
  for (const Pu& p : topo().pus())
    if (p.os_index == os_index) return p.package;
  return -1;
}
bool has_smt() {
  std::set<int> cores;
  for (const Pu& p : topo().pus())
    if (!cores.insert(p.core).second) return true;
  return false;
}

TEST(Topology, PusCoresAndPackagesAreConsistent) {
  const auto& pus = topo().pus();
  ASSERT_FALSE(pus.empty());
  std::set<int> os;
  for (const Pu& p : pus) {
    EXPECT_GE(p.os_index, 0);
    EXPECT_TRUE(os.insert(p.os_index).second) << "duplicate PU " << p.os_index;
    EXPECT_GE(p.core, 0);
    EXPECT_LT(p.core, topo().cores());
    EXPECT_GE(p.package, 0);
    EXPECT_LT(p.package, topo().packages());
  }
  EXPECT_GE(topo().cores(), 1);
  EXPECT_LE(topo().cores(), static_cast<int>(pus.size()));
  EXPECT_NE(topo().summary().find("PU"), std::string::npos) << topo().summary();
  EXPECT_FALSE(topo().caches().empty());
}

TEST(Topology, SpreadPutsEachExecutorOnItsOwnCore) {
  const int cores = topo().cores();
  if (cores < 2) GTEST_SKIP() << "one core";
  const unsigned n = static_cast<unsigned>(cores - 1);
  const Assignment a = topo().assign(Placement::spread, n);
  ASSERT_EQ(a.executor_pus.size(), n);
  std::set<int> used{core_of(a.patcher_pu)};
  for (int pu : a.executor_pus) EXPECT_TRUE(used.insert(core_of(pu)).second) << "PU " << pu;
  EXPECT_FALSE(a.oversubscribed);
  EXPECT_TRUE(a.warning.empty()) << a.warning;
}

TEST(Topology, MoreThreadsThanPusIsAllowedWithAWarning) {
  const unsigned n = static_cast<unsigned>(topo().pus().size()) + 1;
  const Assignment a = topo().assign(Placement::spread, n);
  EXPECT_EQ(a.executor_pus.size(), n);
  EXPECT_TRUE(a.oversubscribed);
  EXPECT_NE(a.warning.find("oversubscribed"), std::string::npos) << a.warning;
  // The patcher keeps its PU to itself while other PUs exist.
  if (topo().cores() >= 2) {
    for (int pu : a.executor_pus) EXPECT_NE(pu, a.patcher_pu);
  }
}

TEST(Topology, SmtUsesTheSiblingOrRefuses) {
  if (!has_smt()) {
    try {
      (void)topo().assign(Placement::smt, 1);
      FAIL() << "smt placement accepted on a machine without SMT";
    } catch (const std::invalid_argument& e) {
      EXPECT_STREQ(e.what(), "placement smt impossible: no SMT siblings on this machine");
    }
    return;
  }
  const Assignment a = topo().assign(Placement::smt, 1);
  ASSERT_EQ(a.executor_pus.size(), 1u);
  EXPECT_NE(a.executor_pus[0], a.patcher_pu);
  EXPECT_EQ(core_of(a.executor_pus[0]), core_of(a.patcher_pu));
}

TEST(Topology, CrossPackageUsesAnotherPackageOrRefuses) {
  if (topo().packages() < 2) {
    EXPECT_THROW((void)topo().assign(Placement::cross_package, 1), std::invalid_argument);
    return;
  }
  const Assignment a = topo().assign(Placement::cross_package, 2);
  for (int pu : a.executor_pus) EXPECT_NE(package_of(pu), package_of(a.patcher_pu));
}

TEST(Topology, BindsEveryPu) {
  for (const Pu& p : topo().pus()) {
    int cpu = -1;
    bool ok = false;
    std::string err;
    std::thread t([&] {
      ok = topo().bind_current_thread(p.os_index, &err);
      cpu = sched_getcpu();
    });
    t.join();
    EXPECT_TRUE(ok) << err;
    EXPECT_EQ(cpu, p.os_index);
  }
}

TEST(Topology, PlacementNamesRoundTrip) {
  for (Placement p : {Placement::spread, Placement::smt, Placement::cross_package})
    EXPECT_EQ(parse_placement(to_string(p)), p);
  EXPECT_THROW(parse_placement("everywhere"), std::invalid_argument);
}

TEST(C2c, MeasuresBetweenTwoPusAndRefusesOne) {
  const C2cLatency same = measure_c2c(topo(), topo().pus()[0].os_index, topo().pus()[0].os_index);
  EXPECT_FALSE(same.ok);
  EXPECT_FALSE(same.error.empty());
  if (topo().pus().size() < 2) GTEST_SKIP() << "one PU";
  const C2cLatency r = measure_c2c(topo(), topo().pus()[0].os_index, topo().pus()[1].os_index, 2000);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_GT(r.round_trips, 0u);
  EXPECT_GT(r.one_way_ticks, 0);
  EXPECT_LE(r.one_way_ticks_p10, r.one_way_ticks);
  EXPECT_LE(r.one_way_ticks, r.one_way_ticks_p90);
}

TEST(Sysinfo, ContextJsonHasTheFieldsTheSweepEmbeds) {
  const MachineContext m = collect_machine_context(topo(), false);
  EXPECT_FALSE(m.vendor.empty());
  EXPECT_GT(m.cache_line, 0u);
  EXPECT_EQ(m.pus, static_cast<int>(topo().pus().size()));
  const std::string j = to_json(m);
  for (const char* key : {"\"vendor\"", "\"microcode\"", "\"kernel\"", "\"tsc_hz\"",
                          "\"invariant_tsc\"", "\"cache_line\"", "\"topology\"",
                          "\"machine_slug\"", "\"c2c\": null"}) {
    EXPECT_NE(j.find(key), std::string::npos) << key << " in " << j;
  }
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.back(), '}');
}

}  // namespace
}  // namespace crossmod::harness
