// Objects loaded after start-up: a dlopen'ed library built with
// -fpatchable-function-entry is found by the next scan_loaded_objects call.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include "crossmod/probes.hpp"

namespace cp = crossmod::probes;

namespace {

std::atomic<std::uint64_t> g_gen_hits{0};
void count_gen(cp::ProbeId, std::uint64_t) { g_gen_hits.fetch_add(1); }

TEST(Dlopen, ScanAfterDlopenFindsTheNewObjectsSitesOnce) {
  void* h = dlopen(CROSSMOD_GEN_SMALL, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  using GenFn = int (*)(int);
  const auto* fns = static_cast<const GenFn*>(dlsym(h, "gen_fns"));
  const auto* count = static_cast<const int*>(dlsym(h, "gen_count"));
  ASSERT_NE(fns, nullptr);
  ASSERT_NE(count, nullptr);
  std::size_t fresh = 0;
  ASSERT_EQ(cp::scan_loaded_objects(&fresh), cp::Status::ok);
  // Entry and exit per function (sanitizer builds add their module constructors).
  std::size_t gen_probes = 0;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    ASSERT_EQ(cp::info(id, &pi), cp::Status::ok);
    if (std::string(pi.name).rfind("gen_fn_", 0) == 0) ++gen_probes;
  }
  EXPECT_EQ(gen_probes, 2u * static_cast<std::size_t>(*count));
  EXPECT_GE(fresh, gen_probes);
  ASSERT_EQ(cp::scan_loaded_objects(&fresh), cp::Status::ok);
  EXPECT_EQ(fresh, 0u);
  for (int i = 0; i < *count; ++i) EXPECT_EQ(fns[i](1), 1 + i);  // all off: plain calls
  std::size_t n = 0;
  ASSERT_EQ(cp::activate_matching("gen_fn_1?", count_gen, &n), cp::Status::ok);
  EXPECT_EQ(n, 20u);  // gen_fn_10..19, entry and exit
  const std::uint64_t h0 = g_gen_hits.load();
  for (int i = 0; i < *count; ++i) EXPECT_EQ(fns[i](1), 1 + i);
  EXPECT_EQ(g_gen_hits.load() - h0, 20u);
  ASSERT_EQ(cp::deactivate_matching("gen_fn_*", &n), cp::Status::ok);
  // The library stays loaded: probes (and their sites) live for the process.
}

// dlclose must not unmap an object that holds probe sites: the library pins it
// (RTLD_NODELETE) when its first probe is made. Several dlopen/dlclose cycles with probes
// toggled and called in between; the library is this test's alone, so without the pin its
// last dlclose would unmap it.
TEST(Dlopen, DlcloseNeverUnmapsAnObjectWithProbes) {
  using GenFn = int (*)(int);
  const GenFn* first_fns = nullptr;
  for (int cycle = 0; cycle < 4; ++cycle) {
    SCOPED_TRACE(testing::Message() << "cycle " << cycle);
    void* h = dlopen(CROSSMOD_GEN_CYCLE, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    const auto* fns = static_cast<const GenFn*>(dlsym(h, "gen_fns"));
    const auto* count = static_cast<const int*>(dlsym(h, "gen_count"));
    ASSERT_NE(fns, nullptr);
    ASSERT_NE(count, nullptr);
    if (cycle == 0) first_fns = fns;
    EXPECT_EQ(fns, first_fns) << "the object was unloaded and mapped again";
    std::size_t fresh = 0;
    ASSERT_EQ(cp::scan_loaded_objects(&fresh), cp::Status::ok);
    // Found once: in cycle 0 (entry and exit of each function, plus a sanitizer build's
    // module constructors), never again.
    if (cycle == 0) {
      EXPECT_GE(fresh, 2u * static_cast<std::size_t>(*count));
    } else {
      EXPECT_EQ(fresh, 0u);
    }
    cp::ProbeId id = cp::kNoProbe;
    for (cp::ProbeId i = 0; i < cp::count(); ++i) {
      cp::ProbeInfo pi;
      ASSERT_EQ(cp::info(i, &pi), cp::Status::ok);
      if (pi.function == reinterpret_cast<std::uintptr_t>(fns[3]) && pi.kind == cp::Kind::entry)
        id = i;
    }
    ASSERT_NE(id, cp::kNoProbe);
    const std::uint64_t h0 = g_gen_hits.load();
    ASSERT_EQ(cp::activate(id, count_gen), cp::Status::ok);
    EXPECT_EQ(fns[3](1), 4);
    EXPECT_EQ(g_gen_hits.load() - h0, 1u);
    ASSERT_EQ(dlclose(h), 0);
    // Still mapped after the close: the probe toggles (its code is written) and the
    // function runs.
    Dl_info di;
    EXPECT_NE(dladdr(reinterpret_cast<const void*>(first_fns[3]), &di), 0);
    ASSERT_EQ(cp::deactivate(id), cp::Status::ok);
    EXPECT_EQ(first_fns[3](2), 5);
    EXPECT_EQ(g_gen_hits.load() - h0, 1u);
  }
}

}  // namespace
