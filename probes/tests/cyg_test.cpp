// The -finstrument-functions provider on real compiler output (cyg_workload.cpp):
// discovery on first call, start-on, demangled names, exit timestamps, tail-called exit
// hooks, switching off from the discovery callback.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"
#include "test_support.hpp"
#include "workload.hpp"

namespace cp = crossmod::probes;

namespace {

std::vector<cp::ProbeInfo> probes_of(std::uintptr_t function) {
  std::vector<cp::ProbeInfo> out;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) == cp::Status::ok && pi.function == function) out.push_back(pi);
  }
  return out;
}

const cp::ProbeInfo* find_kind(const std::vector<cp::ProbeInfo>& v, cp::Kind k) {
  for (const auto& p : v)
    if (p.kind == k) return &p;
  return nullptr;
}

TEST(Cyg, FirstCallDiscoversEntryAndExitProbesThatStartOn) {
  workload::Counters c;
  (void)workload::cyg_leaf(1, &c);
  const auto ps = probes_of(reinterpret_cast<std::uintptr_t>(&workload::cyg_leaf));
  const cp::ProbeInfo* entry = find_kind(ps, cp::Kind::entry);
  const cp::ProbeInfo* exit = find_kind(ps, cp::Kind::exit);
  ASSERT_NE(entry, nullptr);
  ASSERT_NE(exit, nullptr);
  EXPECT_EQ(entry->provider, cp::Provider::cyg);
  EXPECT_TRUE(entry->active);
  EXPECT_TRUE(exit->active);
  EXPECT_EQ(std::string(entry->name), "workload::cyg_leaf(int, workload::Counters*)");
  EXPECT_NE(std::string(entry->object).find("probes_tests"), std::string::npos) << entry->object;
  EXPECT_EQ(entry->split, crossmod::x86::straddle_split(entry->site, 5));

  // On with no function set: nothing is counted; with one, every call once.
  ASSERT_EQ(cp::activate(entry->id, probetest::count_a), cp::Status::ok);
  c = {};
  for (int i = 0; i < 10; ++i) (void)workload::cyg_leaf(i, &c);
  EXPECT_EQ(c.calls, 10u);
  EXPECT_EQ(c.seen, 10u);
  EXPECT_EQ(c.doubled, 0u);
  ASSERT_EQ(cp::deactivate(entry->id), cp::Status::ok);
  for (int i = 0; i < 10; ++i) (void)workload::cyg_leaf(i, &c);
  EXPECT_EQ(c.calls, 20u);
  EXPECT_EQ(c.seen, 10u);
  ASSERT_EQ(cp::activate(entry->id, probetest::count_a), cp::Status::ok);
  (void)workload::cyg_leaf(1, &c);
  EXPECT_EQ(c.seen, 11u);
  ASSERT_EQ(cp::deactivate(entry->id), cp::Status::ok);
}

TEST(Cyg, DemangledMemberFunctionName) {
  workload::Counters c;
  workload::Widget w;
  (void)w.poke(3, &c);
  bool found = false;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(id, &pi), cp::Status::ok);
    if (std::string(pi.name) == "workload::Widget::poke(int, workload::Counters*)") found = true;
  }
  EXPECT_TRUE(found);
}

std::uint64_t g_exit_entry_tsc = 0;
std::uint64_t g_exit_now = 0, g_exit_hook = 0;
void exit_probe(cp::ProbeId, std::uint64_t entry_tsc) {
  g_exit_entry_tsc = entry_tsc;
  g_exit_hook = cp::exit_hook_tsc();
  g_exit_now = crossmod::x86::rdtsc();
}

TEST(Cyg, ExitProbesGetTheEntryTimestampIncludingTailCalledHooks) {
  workload::Counters c;
  (void)workload::cyg_outer(1, &c);
  for (auto fn : {reinterpret_cast<std::uintptr_t>(&workload::cyg_outer),
                  reinterpret_cast<std::uintptr_t>(&workload::cyg_leaf)}) {
    const auto ps = probes_of(fn);
    const cp::ProbeInfo* exit = find_kind(ps, cp::Kind::exit);
    ASSERT_NE(exit, nullptr);
    const cp::ProbeInfo* entry = find_kind(ps, cp::Kind::entry);
    ASSERT_NE(entry, nullptr);
    // The entry site must be on (it pushes the timestamp); its function may be unset.
    ASSERT_EQ(cp::activate(entry->id, probetest::count_a), cp::Status::ok);
    ASSERT_EQ(cp::activate(exit->id, exit_probe), cp::Status::ok);
    g_exit_entry_tsc = 0;
    const std::uint64_t t0 = crossmod::x86::rdtsc();
    (void)workload::cyg_outer(2, &c);
    EXPECT_GE(g_exit_entry_tsc, t0);
    EXPECT_GE(g_exit_now, g_exit_entry_tsc);
    // The exit hook's own TSC lies between the entry's and the probe function's.
    EXPECT_GE(g_exit_hook, g_exit_entry_tsc);
    EXPECT_LE(g_exit_hook, g_exit_now);
    EXPECT_EQ(cp::exit_hook_tsc(), 0u) << "only inside an exit probe function";
    // Off: the exit hook is no longer called (a tail-called hook's JMP became RET).
    ASSERT_EQ(cp::deactivate(exit->id), cp::Status::ok);
    g_exit_entry_tsc = 0;
    EXPECT_EQ(workload::cyg_outer(2, &c), 3 * 3 + 1 + 2) << "function result changed";
    EXPECT_EQ(g_exit_entry_tsc, 0u);
    ASSERT_EQ(cp::activate(exit->id, exit_probe), cp::Status::ok);
    ASSERT_EQ(cp::deactivate(exit->id), cp::Status::ok);
  }
}

TEST(Cyg, ExitTimestampsSurviveManyCallsWithTheExitSiteOff) {
  workload::Counters c;
  (void)workload::cyg_leaf(1, &c);
  const auto ps = probes_of(reinterpret_cast<std::uintptr_t>(&workload::cyg_leaf));
  const cp::ProbeInfo* entry = find_kind(ps, cp::Kind::entry);
  const cp::ProbeInfo* exit = find_kind(ps, cp::Kind::exit);
  ASSERT_NE(entry, nullptr);
  ASSERT_NE(exit, nullptr);
  ASSERT_EQ(cp::activate(entry->id, probetest::count_a), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(exit->id), cp::Status::ok);
  // Entry frames without exits: far more than the shadow stack holds.
  for (int i = 0; i < 10000; ++i) (void)workload::cyg_leaf(i, &c);
  ASSERT_EQ(cp::activate(exit->id, exit_probe), cp::Status::ok);
  g_exit_entry_tsc = 0;
  const std::uint64_t t0 = crossmod::x86::rdtsc();
  (void)workload::cyg_leaf(1, &c);
  EXPECT_GE(g_exit_entry_tsc, t0);
  ASSERT_EQ(cp::deactivate(exit->id), cp::Status::ok);
  ASSERT_EQ(cp::deactivate(entry->id), cp::Status::ok);
  workload::fired() = 0;
}

TEST(Cyg, DiscoveryCallbackCanSwitchAProbeOffBeforeItsFirstCall) {
  static int switched = 0;
  ASSERT_EQ(cp::on_discovery(
                [](const cp::ProbeInfo& pi, void*) {
                  if (pi.provider == cp::Provider::cyg &&
                      std::string(pi.name).find("cyg_identity") != std::string::npos) {
                    ++switched;
                    (void)cp::deactivate(pi.id);
                  }
                },
                nullptr),
            cp::Status::ok);
  EXPECT_EQ(workload::cyg_identity(7), 7);
  ASSERT_EQ(cp::on_discovery(nullptr, nullptr), cp::Status::ok);
  EXPECT_EQ(switched, 2);  // entry and exit
  const auto ps = probes_of(reinterpret_cast<std::uintptr_t>(&workload::cyg_identity));
  ASSERT_EQ(ps.size(), 2u);
  for (const auto& p : ps) EXPECT_FALSE(p.active);
}

TEST(Cyg, IndirectHookCallsUnderNoPltRunButCreateNoProbe) {
  const std::size_t before = cp::count();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(workload::cyg_noplt(i), 2 * i);
  EXPECT_EQ(cp::count(), before);
  EXPECT_TRUE(probes_of(reinterpret_cast<std::uintptr_t>(&workload::cyg_noplt)).empty());
}

}  // namespace
