// The `probes` suite of `crossmod bench` (PLDI'16 section 8 on fastinst). A separate
// process: libcrossmod_probes.so carries its own copy of the engine (SIGTRAP handler, site
// table), which must not share a process with the harness's static engine. `crossmod
// bench` runs it with Google Benchmark's flags plus the --crossmod_* ones parsed below;
// it also runs alone:
//   build/probes/bench/probes_bench --benchmark_filter=probes/invoke
// Benchmarks (each one Iterations(1); the alternatives it compares are interleaved inside
// it - rounds of A, B, C, A, B, C - never measured block after block):
//  probes/init/patchable_scan/functions:20000  scan of a dlopen'ed generated library of
//      20000 -fpatchable-function-entry functions (entry + exit probe each); ticks_per_probe
//  probes/init/cyg_discovery/functions:5000  first call of each of 5000
//      -finstrument-functions functions minus a second call; ticks_per_probe
//  probes/toggle/all_probes  activate + deactivate of every entry probe of the 20000-function
//      library under callpatch, wordpatch_sync and wordpatch_async (+ its flush), the three
//      strategies in rotating order per probe; every sample goes to the latency CSV
//  probes/throughput/executors:N  N threads call a straddling (split 2) manual site while
//      this thread toggles its probe at 0 Hz .. 1 MHz, activate/deactivate and
//      activate(A)/activate(B), callpatch and wordpatch_sync; calls per second against
//      0 Hz at the same state mix, and the imbalance factor of the two states
//  probes/invoke  ticks per call through each provider's site: off, entry on, exit on,
//      both on (empty probe function), against a direct call and an unregistered NOP site
// Thread safety: the main thread drives everything; executors talk through atomics.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <sched.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/machine.hpp"
#include "crossmod/probes.hpp"
#include "crossmod/x86.hpp"

namespace cp = crossmod::probes;
namespace x86 = crossmod::x86;

namespace {

// ---- options from `crossmod bench` ------------------------------------------------------
struct Options {
  std::uint64_t wait_ticks = 0;  // 0: the library's own Tmax config
  unsigned max_executors = 1;
  double window_s = 0.2;
  unsigned rounds = 3;
  std::size_t toggle_probes = 20000;  // how many probes probes/toggle/all_probes visits
  std::string csv;
  bool smoke = false;
};
Options g_opt;

// Latency samples for the CSV: benchmark,op,executors,sample_ticks (the engine suites'
// layout, so one loader reads both).
std::map<std::string, std::vector<std::uint64_t>> g_samples;

void empty_probe(cp::ProbeId, std::uint64_t) {}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double quantile(std::vector<std::uint64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))]);
}

// ---- the generated libraries ----------------------------------------------------------
using GenFn = int (*)(int);
struct Lib {
  const GenFn* fns = nullptr;
  int count = 0;
  bool ok = false;
  std::string err;
};

Lib open_lib(const char* path) {
  Lib l;
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    l.err = dlerror();
    return l;
  }
  l.fns = static_cast<const GenFn*>(dlsym(h, "gen_fns"));
  const auto* n = static_cast<const int*>(dlsym(h, "gen_count"));
  if (l.fns == nullptr || n == nullptr) {
    l.err = "gen_fns/gen_count missing";
    return l;
  }
  l.count = *n;
  l.ok = true;
  return l;
}

// Opened and scanned once per process, by whichever benchmark comes first.
struct Patchable {
  Lib lib;
  std::uint64_t scan_ticks = 0;
  std::size_t probes = 0;
  cp::Status scan = cp::Status::ok;
};
Patchable& patchable() {
  static Patchable* p = [] {
    auto* r = new Patchable();
    r->lib = open_lib(CROSSMOD_GEN_PATCHABLE);
    if (!r->lib.ok) return r;
    const std::uint64_t t0 = x86::rdtscp_ordered();
    r->scan = cp::scan_loaded_objects(&r->probes);
    r->scan_ticks = x86::rdtscp_ordered() - t0;
    return r;
  }();
  return *p;
}

struct Cyg {
  Lib lib;
  std::uint64_t first_ticks = 0, second_ticks = 0;
  std::size_t probes = 0;
};
Cyg& cyg() {
  static Cyg* c = [] {
    auto* r = new Cyg();
    r->lib = open_lib(CROSSMOD_GEN_CYG);
    if (!r->lib.ok) return r;
    const std::size_t before = cp::count();
    const std::uint64_t t0 = x86::rdtscp_ordered();
    for (int i = 0; i < r->lib.count; ++i) benchmark::DoNotOptimize(r->lib.fns[i](i));
    const std::uint64_t t1 = x86::rdtscp_ordered();
    for (int i = 0; i < r->lib.count; ++i) benchmark::DoNotOptimize(r->lib.fns[i](i));
    const std::uint64_t t2 = x86::rdtscp_ordered();
    r->first_ticks = t1 - t0;
    r->second_ticks = t2 - t1;
    r->probes = cp::count() - before;
    return r;
  }();
  return *c;
}

cp::ProbeId probe_of(std::uintptr_t function, cp::Kind kind, cp::Provider provider) {
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) == cp::Status::ok && pi.function == function && pi.kind == kind &&
        pi.provider == provider)
      return id;
  }
  return cp::kNoProbe;
}

// ---- manual sites: `<5 NOPs at split S>; mov eax, 1; ret` in an engine code block --------
struct Site {
  int (*fn)() = nullptr;
  cp::ProbeId id = cp::kNoProbe;
};

bool make_site(unsigned split, const char* name, bool do_register, Site* out) {
  auto* block = new crossmod::CodeBlock();  // kept for the process: probes live for ever
  if (crossmod::CodeBlock::allocate(4096, nullptr, block) != crossmod::Status::ok) return false;
  std::uint8_t* p = block->data();
  std::memset(p, x86::kInt3, block->size());
  const unsigned line = x86::cache_line_size();
  std::uint8_t* entry = split == 0 ? p + line + 16 : p + 2 * line - split;
  constexpr std::uint8_t kNop1 = 0x90, kMovEaxImm32 = 0xB8;
  std::memset(entry, kNop1, 5);
  entry[5] = kMovEaxImm32;
  const std::uint32_t one = 1;
  std::memcpy(entry + 6, &one, 4);
  entry[10] = x86::kRet;
  out->fn = reinterpret_cast<int (*)()>(entry);
  if (!do_register) return true;
  return cp::register_entry_site(entry, 0, name, &out->id) == cp::Status::ok;
}

// ---- init ------------------------------------------------------------------------------
void BM_InitPatchable(benchmark::State& state) {
  for (auto _ : state) {
    const Patchable& p = patchable();
    if (!p.lib.ok) {
      state.SkipWithError(p.lib.err.c_str());
      return;
    }
    if (p.scan != cp::Status::ok) state.SkipWithError(cp::to_string(p.scan));
    state.counters["functions"] = p.lib.count;
    state.counters["probes"] = static_cast<double>(p.probes);
    state.counters["ticks_per_probe"] =
        p.probes ? static_cast<double>(p.scan_ticks) / static_cast<double>(p.probes) : 0;
  }
}

void BM_InitCyg(benchmark::State& state) {
  for (auto _ : state) {
    const Cyg& c = cyg();
    if (!c.lib.ok) {
      state.SkipWithError(c.lib.err.c_str());
      return;
    }
    state.counters["functions"] = c.lib.count;
    state.counters["probes"] = static_cast<double>(c.probes);
    state.counters["ticks_per_probe"] =
        c.probes ? (static_cast<double>(c.first_ticks) - static_cast<double>(c.second_ticks)) /
                       static_cast<double>(c.probes)
                 : 0;
  }
}

// ---- toggle latency over every probe ----------------------------------------------------
void BM_ToggleAll(benchmark::State& state) {
  const Patchable& p = patchable();
  if (!p.lib.ok || p.scan != cp::Status::ok) {
    state.SkipWithError("generated library not scanned");
    return;
  }
  std::vector<cp::ProbeId> ids;
  std::vector<unsigned> splits;
  for (cp::ProbeId id = 0; id < cp::count(); ++id) {
    cp::ProbeInfo pi;
    if (cp::info(id, &pi) == cp::Status::ok && pi.kind == cp::Kind::entry &&
        pi.provider == cp::Provider::patchable && std::strncmp(pi.name, "gen_fn_", 7) == 0) {
      ids.push_back(id);
      splits.push_back(pi.split);
    }
  }
  if (ids.size() > g_opt.toggle_probes) {
    ids.resize(g_opt.toggle_probes);
    splits.resize(g_opt.toggle_probes);
  }
  const cp::Strategy strategies[] = {cp::Strategy::callpatch, cp::Strategy::wordpatch_sync,
                                     cp::Strategy::wordpatch_async};
  const char* names[] = {"callpatch", "wordpatch_sync", "wordpatch_async"};
  std::vector<std::uint64_t> samples[3], flush_samples, straddle[3];
  for (auto _ : state) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      for (unsigned k = 0; k < 3; ++k) {
        const unsigned s = static_cast<unsigned>((i + k) % 3);  // rotating order
        const cp::ProbeId id = ids[i];
        if (cp::set_strategy(id, strategies[s]) != cp::Status::ok) {
          state.SkipWithError("set_strategy failed");
          return;
        }
        for (int on = 1; on >= 0; --on) {
          const std::uint64_t t0 = x86::rdtscp_ordered();
          const cp::Status st = on ? cp::activate(id, empty_probe) : cp::deactivate(id);
          const std::uint64_t dt = x86::rdtscp_ordered() - t0;
          if (st != cp::Status::ok) {
            state.SkipWithError(cp::to_string(st));
            return;
          }
          samples[s].push_back(dt);
          if (splits[i] != 0) straddle[s].push_back(dt);
          if (strategies[s] == cp::Strategy::wordpatch_async) {
            const std::uint64_t f0 = x86::rdtscp_ordered();
            const cp::Status fs = cp::flush();
            flush_samples.push_back(x86::rdtscp_ordered() - f0);
            if (fs != cp::Status::ok) {
              state.SkipWithError(cp::to_string(fs));
              return;
            }
          }
        }
        (void)cp::set_strategy(id, cp::Strategy::callpatch);
      }
    }
  }
  std::size_t n_straddle = 0;
  for (unsigned sp : splits) n_straddle += sp != 0;
  state.counters["probes"] = static_cast<double>(ids.size());
  state.counters["straddling_probes"] = static_cast<double>(n_straddle);
  for (unsigned s = 0; s < 3; ++s) {
    const std::string n = names[s];
    state.counters[n + "_ticks_p50"] = quantile(samples[s], 0.5);
    state.counters[n + "_ticks_p99"] = quantile(samples[s], 0.99);
    state.counters[n + "_straddling_ticks_p50"] = quantile(straddle[s], 0.5);
    g_samples["probes/toggle/all_probes," + n] = std::move(samples[s]);
  }
  state.counters["wordpatch_async_flush_ticks_p50"] = quantile(flush_samples, 0.5);
  g_samples["probes/toggle/all_probes,wordpatch_async_flush"] = std::move(flush_samples);
}

// ---- throughput under toggling ---------------------------------------------------------
thread_local std::uint64_t t_a = 0, t_b = 0;
void probe_a(cp::ProbeId, std::uint64_t) { ++t_a; }
void probe_b(cp::ProbeId, std::uint64_t) { ++t_b; }

struct alignas(64) ExecSlot {
  std::uint64_t calls = 0, a = 0, b = 0;
  double cpu_s = 0;
};

double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// One window: n executors call `fn` while this thread toggles `id` at `rate` Hz (0: not
// at all). mode 0: activate(A)/deactivate; mode 1: activate(A)/activate(B).
struct Window {
  double calls_per_s = 0, calls_per_cpu_s = 0, a = 0, b = 0, calls = 0, toggles_per_s = 0;
};
Window run_window(int (*fn)(), cp::ProbeId id, unsigned n, double rate, int mode) {
  std::atomic<bool> go{false}, stop{false};
  std::vector<ExecSlot> slots(n);
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load(std::memory_order_acquire)) x86::pause();
      t_a = t_b = 0;
      const double c0 = thread_cpu_s();
      std::uint64_t c = 0;
      int sink = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int k = 0; k < 64; ++k) sink += fn();
        c += 64;
      }
      benchmark::DoNotOptimize(sink);
      slots[t] = {c, t_a, t_b, thread_cpu_s() - c0};
    });
  }
  const double tsc_hz = crossmod::tsc_info().hz;
  const auto window = static_cast<std::uint64_t>(g_opt.window_s * tsc_hz);
  const std::uint64_t period = rate > 0 ? static_cast<std::uint64_t>(tsc_hz / rate) : 0;
  std::uint64_t toggles = 0;
  bool state_a = true;
  go.store(true, std::memory_order_release);
  const std::uint64_t t0 = x86::rdtsc();
  std::uint64_t next = t0 + period;
  for (;;) {
    const std::uint64_t now = x86::rdtsc();
    if (now - t0 >= window) break;
    // Spin (pause), never yield: on a loaded machine a yield gives the PU away for a
    // scheduler slice and the achieved rate collapses (it did: 150 Hz for 1 kHz asked).
    if (period == 0 || now < next) {
      x86::pause();
      continue;
    }
    next += period;
    if (next < now) next = now + period;  // behind: do not burst to catch up
    state_a = !state_a;
    if (mode == 0) {
      (void)(state_a ? cp::activate(id, probe_a) : cp::deactivate(id));
    } else {
      (void)cp::activate(id, state_a ? probe_a : probe_b);
    }
    ++toggles;
  }
  const double secs = static_cast<double>(x86::rdtsc() - t0) / tsc_hz;
  stop.store(true, std::memory_order_relaxed);
  for (auto& th : threads) th.join();
  Window w;
  double cpu = 0;
  for (const ExecSlot& s : slots) {
    cpu += s.cpu_s;
    w.calls += static_cast<double>(s.calls);
    w.a += static_cast<double>(s.a);
    w.b += static_cast<double>(s.b);
  }
  w.calls_per_s = w.calls / secs;
  // Per executor CPU second: robust to other processes taking the cores (shared VM);
  // time an executor spends in the engine's SIGTRAP handler is CPU time and counts.
  w.calls_per_cpu_s = cpu > 0 ? w.calls / cpu : 0;
  w.toggles_per_s = static_cast<double>(toggles) / secs;
  return w;
}

void BM_Throughput(benchmark::State& state, unsigned n) {
  static Site sites[2];
  static bool made = false;
  if (!made) {
    if (!make_site(2, "bench_tp_callpatch", true, &sites[0]) ||
        !make_site(2, "bench_tp_wordpatch", true, &sites[1]) ||
        cp::set_strategy(sites[1].id, cp::Strategy::wordpatch_sync) != cp::Status::ok) {
      state.SkipWithError("site setup failed");
      return;
    }
    made = true;
  }
  const char* strat[] = {"callpatch", "wordpatch_sync"};
  const char* modes[] = {"ad", "aa"};
  std::vector<double> rates = {1e3, 1e4, 1e5, 1e6};
  if (g_opt.smoke) rates = {1e5, 1e6};
  // rows: key -> per-round values
  std::map<std::string, std::vector<double>> vals;
  for (auto _ : state) {
    for (unsigned r = 0; r < g_opt.rounds; ++r) {
      for (unsigned s = 0; s < 2; ++s) {
        const Site& site = sites[s];
        const std::string base = std::string(strat[s]) + "/";
        // 0 Hz with the probe on, then off: the per-state costs the same-mix baseline
        // is built from; then every (mode, rate) - all inside one round.
        for (int on = 1; on >= 0; --on) {
          (void)(on ? cp::activate(site.id, probe_a) : cp::deactivate(site.id));
          const Window w = run_window(site.fn, site.id, n, 0, 0);
          const std::string k = base + (on ? "on" : "off") + "/rate:0/";
          vals[k + "calls_per_s"].push_back(w.calls_per_s);
          vals[k + "calls_per_cpu_s"].push_back(w.calls_per_cpu_s);
        }
        for (double rate : rates) {
          for (int m = 0; m < 2; ++m) {
            (void)cp::activate(site.id, probe_a);
            const Window w = run_window(site.fn, site.id, n, rate, m);
            const std::string k = base + modes[m] + "/rate:" + std::to_string(static_cast<long>(rate)) + "/";
            vals[k + "calls_per_s"].push_back(w.calls_per_s);
            vals[k + "calls_per_cpu_s"].push_back(w.calls_per_cpu_s);
            vals[k + "toggles_per_s"].push_back(w.toggles_per_s);
            // Fraction of calls in state A: probe A fired (ad: on; aa: fn A).
            vals[k + "frac_a"].push_back(w.calls > 0 ? w.a / w.calls : 0);
            const double x = w.a, y = m == 0 ? w.calls - w.a : w.b;
            vals[k + "imbalance"].push_back(std::min(x, y) > 0 ? std::max(x, y) / std::min(x, y) : 0);
          }
        }
        (void)cp::deactivate(site.id);
      }
    }
  }
  // Medians over rounds; the same-mix baseline: 0 Hz calls at this window's state mix
  // (harmonic: time in each state = calls in it / that state's call rate), per executor
  // CPU second. aa runs are always on: their baseline is the "on" rate.
  for (const auto& [k, v] : vals) state.counters[k] = median(v);
  for (unsigned s = 0; s < 2; ++s) {
    const std::string base = std::string(strat[s]) + "/";
    const double on = median(vals[base + "on/rate:0/calls_per_cpu_s"]);
    const double off = median(vals[base + "off/rate:0/calls_per_cpu_s"]);
    for (double rate : rates) {
      for (int m = 0; m < 2; ++m) {
        const std::string k = base + modes[m] + "/rate:" + std::to_string(static_cast<long>(rate)) + "/";
        const double f = m == 0 ? median(vals[k + "frac_a"]) : 1.0;
        const double same_mix = (on > 0 && off > 0) ? 1.0 / (f / on + (1 - f) / off) : 0;
        state.counters[k + "calls_per_cpu_s_same_mix_0hz"] = same_mix;
        state.counters[k + "ratio_same_mix"] =
            same_mix > 0 ? median(vals[k + "calls_per_cpu_s"]) / same_mix : 0;
      }
    }
  }
  state.counters["window_s"] = g_opt.window_s;
  state.counters["rounds"] = g_opt.rounds;
}

// ---- invocation cost per provider -------------------------------------------------------
__attribute__((noinline)) int direct_function() {
  asm volatile("");
  return 1;
}

void BM_Invoke(benchmark::State& state) {
  struct Variant {
    std::string name;
    int (*call)(int);  // one call of the function under test
    std::vector<std::pair<cp::ProbeId, bool>> probes;  // state to set before measuring
  };
  static Site manual, nop;
  static bool made = false;
  if (!made) {
    if (!make_site(0, "bench_invoke", true, &manual) || !make_site(0, "", false, &nop)) {
      state.SkipWithError("site setup failed");
      return;
    }
    made = true;
  }
  static int (*s_manual)() = manual.fn;
  static int (*s_nop)() = nop.fn;
  const Patchable& p = patchable();
  const Cyg& c = cyg();
  std::vector<Variant> vs;
  vs.push_back({"direct_call", [](int) { return direct_function(); }, {}});
  vs.push_back({"nop5_site", [](int) { return s_nop(); }, {}});
  vs.push_back({"manual_off", [](int) { return s_manual(); }, {{manual.id, false}}});
  vs.push_back({"manual_on", [](int) { return s_manual(); }, {{manual.id, true}}});
  static GenFn s_pfe = nullptr, s_cyg = nullptr;
  if (p.lib.ok && p.scan == cp::Status::ok) {
    s_pfe = p.lib.fns[1];
    const auto f = reinterpret_cast<std::uintptr_t>(s_pfe);
    const cp::ProbeId e = probe_of(f, cp::Kind::entry, cp::Provider::patchable);
    const cp::ProbeId x = probe_of(f, cp::Kind::exit, cp::Provider::patchable);
    auto call = [](int i) { return s_pfe(i); };
    vs.push_back({"patchable_off", call, {{e, false}, {x, false}}});
    vs.push_back({"patchable_entry_on", call, {{e, true}, {x, false}}});
    vs.push_back({"patchable_exit_on", call, {{e, false}, {x, true}}});
    vs.push_back({"patchable_both_on", call, {{e, true}, {x, true}}});
  }
  if (c.lib.ok) {
    s_cyg = c.lib.fns[1];
    const auto f = reinterpret_cast<std::uintptr_t>(s_cyg);
    const cp::ProbeId e = probe_of(f, cp::Kind::entry, cp::Provider::cyg);
    const cp::ProbeId x = probe_of(f, cp::Kind::exit, cp::Provider::cyg);
    auto call = [](int i) { return s_cyg(i); };
    vs.push_back({"cyg_off", call, {{e, false}, {x, false}}});
    vs.push_back({"cyg_entry_on", call, {{e, true}, {x, false}}});
    vs.push_back({"cyg_both_on", call, {{e, true}, {x, true}}});
  }
  constexpr int kCalls = 20000;
  const unsigned rounds = g_opt.smoke ? 3 : 25;
  std::vector<std::vector<double>> ticks(vs.size());
  for (auto _ : state) {
    for (unsigned r = 0; r < rounds; ++r) {
      for (std::size_t v = 0; v < vs.size(); ++v) {
        for (const auto& [id, on] : vs[v].probes) {
          if (id == cp::kNoProbe) {
            state.SkipWithError(("no probe for " + vs[v].name).c_str());
            return;
          }
          const cp::Status st = on ? cp::activate(id, empty_probe) : cp::deactivate(id);
          if (st != cp::Status::ok) {
            state.SkipWithError(cp::to_string(st));
            return;
          }
        }
        int (*call)(int) = vs[v].call;
        int sink = 0;
        const std::uint64_t t0 = x86::rdtscp_ordered();
        for (int i = 0; i < kCalls; ++i) sink += call(i);
        const std::uint64_t t1 = x86::rdtscp_ordered();
        benchmark::DoNotOptimize(sink);
        ticks[v].push_back(static_cast<double>(t1 - t0) / kCalls);
        for (const auto& [id, on] : vs[v].probes) (void)cp::deactivate(id);
      }
    }
  }
  for (std::size_t v = 0; v < vs.size(); ++v)
    state.counters[vs[v].name + "/ticks_per_call"] = median(ticks[v]);
  state.counters["calls_per_sample"] = kCalls;
  state.counters["rounds"] = rounds;
}

std::vector<std::string> g_names;  // crossmod's names, for --benchmark_list_tests

void register_all() {
  g_names = {"probes/init/patchable_scan/functions:20000", "probes/init/cyg_discovery/functions:5000",
             "probes/toggle/all_probes"};
  for (unsigned n = 1; n <= g_opt.max_executors; ++n)
    g_names.push_back("probes/throughput/executors:" + std::to_string(n));
  g_names.push_back("probes/invoke");
  benchmark::RegisterBenchmark("probes/init/patchable_scan/functions:20000", BM_InitPatchable)
      ->Iterations(1)->UseRealTime();
  benchmark::RegisterBenchmark("probes/init/cyg_discovery/functions:5000", BM_InitCyg)
      ->Iterations(1)->UseRealTime();
  benchmark::RegisterBenchmark("probes/toggle/all_probes", BM_ToggleAll)->Iterations(1)->UseRealTime();
  for (unsigned n = 1; n <= g_opt.max_executors; ++n)
    benchmark::RegisterBenchmark(("probes/throughput/executors:" + std::to_string(n)).c_str(),
                                 BM_Throughput, n)
        ->Iterations(1)->UseRealTime();
  benchmark::RegisterBenchmark("probes/invoke", BM_Invoke)->Iterations(1)->UseRealTime();
}

// Google Benchmark appends "/iterations:1/real_time"; crossmod's names do not carry it
// (as the runner's reporters do for the engine suites).
std::vector<benchmark::BenchmarkReporter::Run> renamed(
    const std::vector<benchmark::BenchmarkReporter::Run>& reports) {
  std::vector<benchmark::BenchmarkReporter::Run> out = reports;
  for (auto& r : out) {
    r.run_name.time_type.clear();
    r.run_name.iterations.clear();
  }
  return out;
}
class Console : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& r) override { ConsoleReporter::ReportRuns(renamed(r)); }
};
class Json : public benchmark::JSONReporter {
 public:
  void ReportRuns(const std::vector<Run>& r) override { JSONReporter::ReportRuns(renamed(r)); }
};

bool take(const char* arg, const char* flag, std::string* value) {
  const std::size_t n = std::strlen(flag);
  if (std::strncmp(arg, flag, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // --crossmod_* flags first (Google Benchmark rejects what it does not know).
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    std::string v;
    char* end = nullptr;
    if (i > 0 && take(argv[i], "--crossmod_wait_ticks", &v)) {
      g_opt.wait_ticks = std::strtoull(v.c_str(), &end, 10);
    } else if (i > 0 && take(argv[i], "--crossmod_max_executors", &v)) {
      g_opt.max_executors = static_cast<unsigned>(std::strtoul(v.c_str(), &end, 10));
    } else if (i > 0 && take(argv[i], "--crossmod_window_s", &v)) {
      g_opt.window_s = std::strtod(v.c_str(), &end);
    } else if (i > 0 && take(argv[i], "--crossmod_latency_csv", &v)) {
      g_opt.csv = v;
      end = nullptr;
    } else if (i > 0 && std::strcmp(argv[i], "--crossmod_smoke") == 0) {
      g_opt.smoke = true;
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    if (end != nullptr && (*end != '\0' || v.empty())) {
      std::fprintf(stderr, "probes_bench: bad value in %s\n", argv[i]);
      return 2;
    }
  }
  if (g_opt.max_executors == 0 || !(g_opt.window_s > 0)) {
    std::fprintf(stderr, "probes_bench: --crossmod_max_executors and --crossmod_window_s must be positive\n");
    return 2;
  }
  if (g_opt.smoke) {
    g_opt.rounds = 1;
    g_opt.toggle_probes = 500;
  }
  if (g_opt.wait_ticks != 0) (void)cp::set_wait_ticks(g_opt.wait_ticks);
  bool to_file = false;  // the JSON reporter is wanted only with --benchmark_out
  bool list = false;     // Google Benchmark would list its internal names (+ suffixes)
  std::string filter = ".";
  for (char* a : rest) {
    std::string v;
    to_file = to_file || std::strncmp(a, "--benchmark_out=", 16) == 0;
    if (take(a, "--benchmark_list_tests", &v)) list = v == "true" || v == "1";
    if (take(a, "--benchmark_filter", &v) && !v.empty()) filter = v;
  }
  if (list) {
    register_all();
    std::regex re;
    try {
      re = std::regex(filter);
    } catch (const std::regex_error&) {
      std::fprintf(stderr, "probes_bench: bad --benchmark_filter '%s'\n", filter.c_str());
      return 2;
    }
    std::size_t n = 0;
    for (const std::string& name : g_names)
      if (std::regex_search(name, re)) {
        std::printf("%s\n", name.c_str());
        ++n;
      }
    return n == 0 ? 3 : 0;
  }
  rest.push_back(nullptr);
  int rargc = static_cast<int>(rest.size()) - 1;
  benchmark::Initialize(&rargc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rargc, rest.data())) return 2;
  register_all();
  benchmark::AddCustomContext("probes_wait_ticks", std::to_string(cp::wait_ticks()));
  benchmark::AddCustomContext("machine_slug", crossmod::machine_slug());
  benchmark::AddCustomContext("probes_window_s", std::to_string(g_opt.window_s));
  benchmark::AddCustomContext("probes_rounds", std::to_string(g_opt.rounds));
  benchmark::AddCustomContext("probes_threads_pinned", "no");
  Console console;
  Json json;
  const std::size_t matched = benchmark::RunSpecifiedBenchmarks(&console, to_file ? &json : nullptr);
  benchmark::Shutdown();
  if (!g_opt.csv.empty()) {
    std::FILE* f = std::fopen(g_opt.csv.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "probes_bench: cannot write %s\n", g_opt.csv.c_str());
      return 1;
    }
    // Every sample, as (value, count) rows: TSC readings are coarse here, so 240000
    // samples take a few hundred rows.
    std::fprintf(f, "benchmark,op,executors,sample_ticks,count\n");
    for (const auto& [key, v] : g_samples) {
      const std::size_t comma = key.find(',');
      std::map<std::uint64_t, std::uint64_t> hist;
      for (std::uint64_t t : v) ++hist[t];
      for (const auto& [t, c] : hist)
        std::fprintf(f, "%s,%s,0,%llu,%llu\n", key.substr(0, comma).c_str(),
                     key.substr(comma + 1).c_str(), static_cast<unsigned long long>(t),
                     static_cast<unsigned long long>(c));
    }
    if (std::fclose(f) != 0) return 1;
  }
  return matched == 0 ? 3 : 0;
}
