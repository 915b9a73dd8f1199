// Probe-layer benchmarks (PLDI'16 section 8 on fastinst), standalone for now:
//   build/probes/bench/probes_bench --benchmark_out=results/<machine>/probes-bench.json
//  init/patchable_scan/functions:N  scan of a dlopen'ed generated library with N
//                                   -fpatchable-function-entry functions; counter
//                                   ticks_per_probe (entry + exit probes per function)
//  init/cyg_discovery/functions:N   first call of each of N -finstrument-functions
//                                   functions (discovery from the return address) minus
//                                   a second call; ticks_per_probe (entry + exit)
//  toggle/<strategy>/split:S        one activate or deactivate of a manual site at split
//                                   S; ticks per toggle (wordpatch waits the Tmax config)
//  toggle_batch/wordpatch_sync/sites:N  activate_many over N straddling sites; ticks per
//                                   site (two waits shared by all)
//  invoke/<variant>                 a call through an active probe with an empty probe
//                                   function, through an inactive site, and a plain call
// Each init benchmark measures once per process (a library can be scanned only once).
// Thread safety: single-threaded benchmarks.
#include <benchmark/benchmark.h>
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/machine.hpp"
#include "crossmod/tmax_config.hpp"
#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"

namespace cp = crossmod::probes;

namespace {

using GenFn = int (*)(int);

void empty_probe(cp::ProbeId, std::uint64_t) {}

struct Lib {
  const GenFn* fns = nullptr;
  int count = 0;
};

bool open_lib(const char* path, Lib* out, std::string* err) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *err = dlerror();
    return false;
  }
  out->fns = static_cast<const GenFn*>(dlsym(h, "gen_fns"));
  const auto* n = static_cast<const int*>(dlsym(h, "gen_count"));
  if (out->fns == nullptr || n == nullptr) {
    *err = "gen_fns/gen_count missing";
    return false;
  }
  out->count = *n;
  return true;
}

void BM_PatchableScan(benchmark::State& state) {
  Lib lib;
  std::string err;
  if (!open_lib(CROSSMOD_GEN_PATCHABLE, &lib, &err)) {
    state.SkipWithError(err.c_str());
    return;
  }
  std::size_t fresh = 0;
  for (auto _ : state) {
    const std::uint64_t t0 = crossmod::x86::rdtscp_ordered();
    const cp::Status s = cp::scan_loaded_objects(&fresh);
    const std::uint64_t t1 = crossmod::x86::rdtscp_ordered();
    if (s != cp::Status::ok) state.SkipWithError(cp::to_string(s));
    state.counters["probes"] = static_cast<double>(fresh);
    state.counters["ticks_per_probe"] = fresh ? static_cast<double>(t1 - t0) / static_cast<double>(fresh) : 0;
  }
}
BENCHMARK(BM_PatchableScan)->Name("init/patchable_scan/functions:20000")->Iterations(1);

void BM_CygDiscovery(benchmark::State& state) {
  Lib lib;
  std::string err;
  if (!open_lib(CROSSMOD_GEN_CYG, &lib, &err)) {
    state.SkipWithError(err.c_str());
    return;
  }
  for (auto _ : state) {
    const std::size_t before = cp::count();
    const std::uint64_t t0 = crossmod::x86::rdtscp_ordered();
    for (int i = 0; i < lib.count; ++i) benchmark::DoNotOptimize(lib.fns[i](i));
    const std::uint64_t t1 = crossmod::x86::rdtscp_ordered();
    for (int i = 0; i < lib.count; ++i) benchmark::DoNotOptimize(lib.fns[i](i));
    const std::uint64_t t2 = crossmod::x86::rdtscp_ordered();
    const auto probes = static_cast<double>(cp::count() - before);
    state.counters["probes"] = probes;
    state.counters["ticks_per_probe"] =
        probes > 0 ? (static_cast<double>(t1 - t0) - static_cast<double>(t2 - t1)) / probes : 0;
  }
}
BENCHMARK(BM_CygDiscovery)->Name("init/cyg_discovery/functions:5000")->Iterations(1);

// A manual site `<5 NOPs at split S>; ret` in its own code block, registered once.
struct Site {
  crossmod::CodeBlock* block = nullptr;
  void (*fn)() = nullptr;
  cp::ProbeId id = cp::kNoProbe;
};

bool make_site(unsigned split, const char* name, Site* out) {
  static auto* blocks = new std::vector<crossmod::CodeBlock*>();  // kept for the process
  out->block = new crossmod::CodeBlock();
  blocks->push_back(out->block);
  if (crossmod::CodeBlock::allocate(4096, nullptr, out->block) != crossmod::Status::ok) return false;
  std::uint8_t* p = out->block->data();
  std::memset(p, crossmod::x86::kInt3, out->block->size());
  const unsigned line = crossmod::x86::cache_line_size();
  std::uint8_t* entry = split == 0 ? p + line : p + 2 * line - split;
  constexpr std::uint8_t kNop1 = 0x90;
  std::memset(entry, kNop1, 5);
  entry[5] = crossmod::x86::kRet;
  out->fn = reinterpret_cast<void (*)()>(entry);
  return cp::register_entry_site(entry, 0, name, &out->id) == cp::Status::ok;
}

void BM_Toggle(benchmark::State& state, cp::Strategy strategy) {
  const auto split = static_cast<unsigned>(state.range(0));
  Site s;
  if (!make_site(split, "bench_toggle", &s) || cp::set_strategy(s.id, strategy) != cp::Status::ok) {
    state.SkipWithError("site setup failed");
    return;
  }
  bool on = false;
  std::uint64_t ticks = 0, n = 0;
  for (auto _ : state) {
    const std::uint64_t t0 = crossmod::x86::rdtscp_ordered();
    const cp::Status st = on ? cp::deactivate(s.id) : cp::activate(s.id, empty_probe);
    ticks += crossmod::x86::rdtscp_ordered() - t0;
    ++n;
    if (st != cp::Status::ok) {
      state.SkipWithError(cp::to_string(st));
      break;
    }
    on = !on;
  }
  state.counters["ticks_per_toggle"] = n ? static_cast<double>(ticks) / static_cast<double>(n) : 0;
  (void)cp::deactivate(s.id);
}
BENCHMARK_CAPTURE(BM_Toggle, callpatch, cp::Strategy::callpatch)
    ->Name("toggle/callpatch")->ArgName("split")->DenseRange(0, 4);
BENCHMARK_CAPTURE(BM_Toggle, wordpatch_sync, cp::Strategy::wordpatch_sync)
    ->Name("toggle/wordpatch_sync")->ArgName("split")->DenseRange(0, 4);

void BM_ToggleBatch(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  static std::vector<Site>* sites = nullptr;
  if (sites == nullptr) {
    sites = new std::vector<Site>(n);
    for (std::size_t i = 0; i < n; ++i)
      if (!make_site(1 + static_cast<unsigned>(i % 4), "bench_batch", &(*sites)[i]) ||
          cp::set_strategy((*sites)[i].id, cp::Strategy::wordpatch_sync) != cp::Status::ok) {
        state.SkipWithError("site setup failed");
        return;
      }
  }
  std::vector<cp::ProbeId> ids;
  for (const Site& s : *sites) ids.push_back(s.id);
  bool on = false;
  std::uint64_t ticks = 0, rounds = 0;
  for (auto _ : state) {
    const std::uint64_t t0 = crossmod::x86::rdtscp_ordered();
    const cp::Status st = on ? cp::deactivate_many(ids.data(), ids.size())
                             : cp::activate_many(ids.data(), ids.size(), empty_probe);
    ticks += crossmod::x86::rdtscp_ordered() - t0;
    ++rounds;
    if (st != cp::Status::ok) {
      state.SkipWithError(cp::to_string(st));
      break;
    }
    on = !on;
  }
  state.counters["ticks_per_site"] =
      rounds ? static_cast<double>(ticks) / static_cast<double>(rounds * n) : 0;
}
BENCHMARK(BM_ToggleBatch)->Name("toggle_batch/wordpatch_sync")->ArgName("sites")->Arg(64);

void BM_Invoke(benchmark::State& state, int variant) {
  Site s;
  if (!make_site(0, "bench_invoke", &s)) {
    state.SkipWithError("site setup failed");
    return;
  }
  if (variant == 1 && cp::activate(s.id, empty_probe) != cp::Status::ok) {
    state.SkipWithError("activate failed");
    return;
  }
  void (*fn)() = s.fn;
  for (auto _ : state) {
    fn();
    benchmark::ClobberMemory();
  }
  (void)cp::deactivate(s.id);
}
BENCHMARK_CAPTURE(BM_Invoke, inactive_site, 0)->Name("invoke/inactive_site");
BENCHMARK_CAPTURE(BM_Invoke, active_probe_empty_fn, 1)->Name("invoke/active_probe_empty_fn");

__attribute__((noinline)) void plain_function() { asm volatile(""); }
void BM_InvokePlain(benchmark::State& state) {
  for (auto _ : state) {
    plain_function();
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_InvokePlain)->Name("invoke/direct_call");

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // What shapes the wordpatch numbers: the wait it uses.
  benchmark::AddCustomContext("probes_wait_ticks", std::to_string(cp::wait_ticks()));
  benchmark::AddCustomContext("machine_slug", crossmod::machine_slug());
  crossmod::TmaxConfig tmax;
  crossmod::ConfigError err;
  if (crossmod::load_tmax_config_auto(&tmax, &err) == crossmod::Status::ok)
    benchmark::AddCustomContext("tmax_source", tmax.source);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
