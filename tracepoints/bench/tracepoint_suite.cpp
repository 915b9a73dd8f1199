// Tracepoint costs inside `crossmod bench` (issue 11), every comparison interleaved in one
// run: each benchmark iteration is one ROUND that measures every alternative once, in an
// order rotated from round to round, and the counters are per-alternative medians over
// the rounds (on a shared VM a block-after-block comparison measures the neighbours'
// load as much as the code).
//   tracepoint/invoke   ticks per call through: the function called directly; an enabled
//                       jump tracepoint with an empty probe; a disabled one; the same
//                       function after the tracepoint was removed (latent cost); a 4-byte
//                       function with a trap-mode (int3) tracepoint, and that function
//                       directly; load4 (first instruction 4 bytes) directly, with an
//                       enabled / disabled 5-byte jump (its copy high in memory) and
//                       with a 6-byte 0x2E-prefixed jump (its copy below 816 MiB, where
//                       the 5-byte one is impossible). Each alternative has its own copy.
//   tracepoint/latency  install and remove of a jump inside one cache line (one store,
//                       no wait) and of a jump straddling a line with membarrier SYNC_CORE
//                       waits and with the run's Tmax wait, and the probe toggle
//                       (disable, enable), per op.
//   tracepoint/memory   the trampoline pool's use for 64 x 2 fresh tracepoints (jump, trap).
// Why this method for invoke: a call costs a few ns, less than rdtscp, so each alternative
// is timed over a batch of calls (kBatch, fewer for trap mode at ~us per call) and divided.
// Thread safety: runs on the pinned patcher thread; no other thread runs.
#include "tracepoint_suite.hpp"

#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "crossmod/code_memory.hpp"
#include "crossmod/tracepoint.hpp"
#include "crossmod/wait.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::bench {
namespace {

using tp::Tracepoint;
using Fn2 = std::uint64_t (*)(std::uint64_t, std::uint64_t);

constexpr int kBatch = 64;      // calls per timed batch (jump, direct)
constexpr int kTrapBatch = 4;   // trap mode: one SIGTRAP per call
constexpr std::uint64_t kK = 1000;

struct Code {
  std::uint8_t* addr = nullptr;
  std::size_t size = 0;
  Fn2 fn() const { return reinterpret_cast<Fn2>(addr); }
};

// One block of fresh code: plus_k(n) = n + K with K read RIP-relative (the relocator's
// common case), and short(n) = n + 1, 4 bytes (too short for the jump: trap mode).
// load4(n) = n + K, K read RIP-relative from base + 0x380, its first instruction 4 bytes
// (boundaries 0, 4: the 5-byte jump needs rel32 byte 3 = 0xCC, about -832 MiB away).
//  0: 48 8D 47 00      lea rax, [rdi + 0]
//  4: 48 03 05 d32     add rax, [rip + d32]
// 11: C3               ret
Code put_load4(std::uint8_t* base, std::size_t at) {
  const std::uint8_t load4[] = {0x48, 0x8D, 0x47, 0x00, 0x48, 0x03, 0x05, 0, 0, 0, 0, 0xC3};
  std::memcpy(base + at, load4, sizeof load4);
  const auto d = static_cast<std::int32_t>((base + 0x380) - (base + at + 11));
  std::memcpy(base + at + 7, &d, 4);
  std::memcpy(base + 0x380, &kK, 8);
  return {base + at, sizeof load4};
}

// A page below 816 MiB (first free 1 MiB step from 256 MiB) holding load4: its tracepoint
// gets a 0x2E-prefixed jump. Unmapped on destruction (after the fixture's removals).
struct LowCopy {
  std::uint8_t* page = nullptr;
  WritableRange range;
  Code load4;
  std::string why;
  LowCopy() = default;
  LowCopy(const LowCopy&) = delete;
  LowCopy& operator=(const LowCopy&) = delete;
  ~LowCopy() {
    (void)range.restore();
    if (page != nullptr) munmap(page, 4096);
  }
  bool make() {
    for (std::uintptr_t at = 0x10000000; at < 0x30000000 && page == nullptr; at += 0x100000) {
      void* m = mmap(reinterpret_cast<void*>(at), 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (m == reinterpret_cast<void*>(at))
        page = static_cast<std::uint8_t*>(m);
      else if (m != MAP_FAILED)
        munmap(m, 4096);
    }
    if (page == nullptr) {
      why = "no free page below 816 MiB";
      return false;
    }
    std::memset(page, x86::kInvalid64, 4096);
    load4 = put_load4(page, 0);
    if (const Status s = WritableRange::make(page, 4096, &range); s != Status::ok) {
      why = status_message("WritableRange::make", s);
      return false;
    }
    return true;
  }
};

struct CodeCopy {
  CodeBlock block;
  Code plus, shortfn, load4, plus_x;
  std::string why;
  bool make() {
    if (const Status s = CodeBlock::allocate(4096, nullptr, &block); s != Status::ok) {
      why = status_message("CodeBlock::allocate", s);
      return false;
    }
    std::uint8_t* b = block.data();
    std::memset(b, x86::kInvalid64, block.size());
    //  0: 55               push rbp
    //  1: 48 89 E5         mov rbp, rsp
    //  4: 48 8B 05 d32     mov rax, [rip + d32]      (K at b + 0x380)
    // 11: 48 01 F8         add rax, rdi
    // 14: 5D               pop rbp
    // 15: C3               ret
    const std::uint8_t plus_k[] = {0x55, 0x48, 0x89, 0xE5, 0x48, 0x8B, 0x05, 0, 0, 0,
                                   0,    0x48, 0x01, 0xF8, 0x5D, 0xC3};
    std::memcpy(b, plus_k, sizeof plus_k);
    const auto d = static_cast<std::int32_t>((b + 0x380) - (b + 11));
    std::memcpy(b + 7, &d, 4);
    std::memcpy(b + 0x380, &kK, 8);
    plus = {b, sizeof plus_k};
    //  0: 8D 47 01   lea eax, [rdi + 1]
    //  3: C3         ret
    const std::uint8_t short_fn[] = {0x8D, 0x47, 0x01, 0xC3};
    std::memcpy(b + 0x40, short_fn, sizeof short_fn);
    shortfn = {b + 0x40, sizeof short_fn};
    load4 = put_load4(b, 0x80);
    // plus_k again at 0xFD: its jump straddles the line boundary at 0x100.
    std::memcpy(b + 0xFD, plus_k, sizeof plus_k);
    const auto dx = static_cast<std::int32_t>((b + 0x380) - (b + 0xFD + 11));
    std::memcpy(b + 0xFD + 7, &dx, 4);
    plus_x = {b + 0xFD, sizeof plus_k};
    return true;
  }
};

void empty_probe(void*) noexcept {}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size())))];
}
double to_ns(double ticks) { return ticks * 1e9 / env().tsc_hz; }

// ---- tracepoint/invoke -------------------------------------------------------------

struct InvokeFixture : Fixture {
  CodeCopy direct, on, off, removed, trap, on4, off4;
  LowCopy low_on, low_off;  // below 816 MiB: 6-byte prefixed jumps
  Tracepoint tp_on, tp_off, tp_removed, tp_trap, tp_on4, tp_off4, tp_low_on, tp_low_off;
  // Before the code blocks go: their trap redirects must not outlive them (a later block
  // at the same address would look owned). Nobody runs the code now: no wait.
  ~InvokeFixture() override {
    for (Tracepoint* t : {&tp_on, &tp_off, &tp_removed, &tp_trap, &tp_on4, &tp_off4, &tp_low_on,
                          &tp_low_off})
      if (t->is_installed()) (void)t->remove(WaitPolicy::None());
  }
};

struct Alt {
  const char* name;
  Fn2 fn;
  int batch;
};

void bm_invoke(benchmark::State& st, const std::string& name) {
  std::string why;
  auto* fx = reuse_fixture<InvokeFixture>(name, [&]() -> std::unique_ptr<InvokeFixture> {
    auto f = std::make_unique<InvokeFixture>();
    for (CodeCopy* c : {&f->direct, &f->on, &f->off, &f->removed, &f->trap, &f->on4, &f->off4})
      if (!c->make()) {
        why = c->why;
        return nullptr;
      }
    for (LowCopy* c : {&f->low_on, &f->low_off})
      if (!c->make()) {
        why = c->why;
        return nullptr;
      }
    // No thread runs these copies yet: no wait is needed to install.
    const WaitPolicy none = WaitPolicy::None();
    auto prep = [&](Code c, Tracepoint* t, bool trap) {
      const tp::Status s = Tracepoint::prepare(c.addr, c.size, empty_probe, nullptr, t, nullptr, trap);
      if (s != tp::Status::ok) {
        why = fmt::format("prepare: {}", tp::to_string(s));
        return false;
      }
      if (const tp::Status i = t->install(none); i != tp::Status::ok) {
        why = fmt::format("install: {}", tp::to_string(i));
        return false;
      }
      return true;
    };
    if (!prep(f->on.plus, &f->tp_on, false) || !prep(f->off.plus, &f->tp_off, false) ||
        !prep(f->removed.plus, &f->tp_removed, false) || !prep(f->trap.shortfn, &f->tp_trap, true))
      return nullptr;
    if (!f->tp_trap.trap_mode()) {
      why = "the 4-byte function did not get a trap-mode tracepoint";
      return nullptr;
    }
    if (!prep(f->on4.load4, &f->tp_on4, false) || !prep(f->off4.load4, &f->tp_off4, false) ||
        !prep(f->low_on.load4, &f->tp_low_on, false) || !prep(f->low_off.load4, &f->tp_low_off, false))
      return nullptr;
    for (const Tracepoint* t : {&f->tp_on4, &f->tp_off4, &f->tp_low_on, &f->tp_low_off}) {
      const bool low = t == &f->tp_low_on || t == &f->tp_low_off;
      if (t->jump_len() != (low ? 6u : 5u)) {
        why = fmt::format("load4 got a {}-byte jump {} in memory", t->jump_len(), low ? "low" : "high");
        return nullptr;
      }
    }
    (void)f->tp_off.disable();
    (void)f->tp_off4.disable();
    (void)f->tp_low_off.disable();
    if (const tp::Status s = f->tp_removed.remove(none); s != tp::Status::ok) {
      why = fmt::format("remove: {}", tp::to_string(s));
      return nullptr;
    }
    return f;
  });
  if (!fx) return st.SkipWithError(why.c_str());
  const Alt alts[] = {
      {"direct", fx->direct.plus.fn(), kBatch},
      {"jump_enabled", fx->on.plus.fn(), kBatch},
      {"jump_disabled", fx->off.plus.fn(), kBatch},
      {"after_remove", fx->removed.plus.fn(), kBatch},
      {"direct_short", fx->direct.shortfn.fn(), kBatch},
      {"trap_enabled_short", fx->trap.shortfn.fn(), kTrapBatch},
      {"direct_load4", fx->direct.load4.fn(), kBatch},
      {"jump_enabled_load4", fx->on4.load4.fn(), kBatch},
      {"prefixed_enabled_load4", fx->low_on.load4.fn(), kBatch},
      {"jump_disabled_load4", fx->off4.load4.fn(), kBatch},
      {"prefixed_disabled_load4", fx->low_off.load4.fn(), kBatch},
  };
  constexpr std::size_t kAlts = std::size(alts);
  std::vector<double> per_call[kAlts];
  std::uint64_t wrong = 0, round = 0;
  for (auto _ : st) {
    for (std::size_t k = 0; k < kAlts; ++k) {
      const std::size_t a = (k + round) % kAlts;
      const Fn2 f = alts[a].fn;
      const int n = alts[a].batch;
      const std::uint64_t t0 = x86::rdtscp_ordered();
      for (int i = 0; i < n; ++i) {
        const std::uint64_t r = f(static_cast<std::uint64_t>(i), 0);
        benchmark::DoNotOptimize(r);
        wrong += r == 0;  // every alternative returns n + K or n + 1
      }
      const std::uint64_t t1 = x86::rdtscp_ordered();
      per_call[a].push_back(static_cast<double>(t1 - t0) / n);
    }
    ++round;
  }
  if (wrong != 0) return st.SkipWithError("a traced function returned a wrong result");
  double p50[kAlts];
  for (std::size_t a = 0; a < kAlts; ++a) {
    p50[a] = median(per_call[a]);
    st.counters[fmt::format("{}_ticks_p50", alts[a].name)] = p50[a];
    st.counters[fmt::format("{}_ns_p50", alts[a].name)] = to_ns(p50[a]);
  }
  st.counters["rounds"] = static_cast<double>(round);
  st.SetLabel("ticks per call, median over interleaved rounds");
}

// ---- tracepoint/latency ------------------------------------------------------------

struct LatencyFixture : Fixture {
  CodeCopy code;
  Tracepoint tp, tp_x;  // plus_k's jump inside a line / straddling one
  ~LatencyFixture() override {
    if (tp.is_installed()) (void)tp.remove(WaitPolicy::None());
    if (tp_x.is_installed()) (void)tp_x.remove(WaitPolicy::None());
  }
};

void bm_latency(benchmark::State& st, const std::string& name) {
  std::string why;
  auto* fx = reuse_fixture<LatencyFixture>(name, [&]() -> std::unique_ptr<LatencyFixture> {
    auto f = std::make_unique<LatencyFixture>();
    if (!f->code.make()) {
      why = f->code.why;
      return nullptr;
    }
    tp::Status s =
        Tracepoint::prepare(f->code.plus.addr, f->code.plus.size, empty_probe, nullptr, &f->tp);
    if (s == tp::Status::ok)
      s = Tracepoint::prepare(f->code.plus_x.addr, f->code.plus_x.size, empty_probe, nullptr, &f->tp_x);
    if (s != tp::Status::ok) {
      why = fmt::format("prepare: {}", tp::to_string(s));
      return nullptr;
    }
    if (!f->tp.in_line() || f->tp_x.in_line()) {
      why = "plus_k copies not placed inside / across a line";
      return nullptr;
    }
    return f;
  });
  if (!fx) return st.SkipWithError(why.c_str());
  const bool sync_core = sync_core_register() == Status::ok;
  const WaitPolicy tmax = WaitPolicy::Ticks(env().tmax_ticks);
  enum Op { install_inline, remove_inline, install_sync_core, remove_sync_core, install_tmax, remove_tmax,
            disable, enable, kOps };
  static constexpr const char* kNames[kOps] = {"install_inline",    "remove_inline",
                                               "install_sync_core", "remove_sync_core",
                                               "install_tmax",      "remove_tmax",
                                               "disable",           "enable"};
  std::vector<double> ticks[kOps];
  Tracepoint& t = fx->tp;
  Tracepoint& tx = fx->tp_x;
  auto timed = [&](Op op, auto&& fn) {
    const std::uint64_t t0 = x86::rdtscp_ordered();
    const tp::Status s = fn();
    const std::uint64_t t1 = x86::rdtscp_ordered();
    if (s == tp::Status::ok) ticks[op].push_back(static_cast<double>(t1 - t0));
    return s;
  };
  // A round: the in-line pair (with the Tmax policy, which it must not use) and the
  // straddling jump's two wait kinds, in an order rotated from round to round, each with a
  // toggle pair while installed.
  std::uint64_t round = 0, failed = 0;
  for (auto _ : st) {
    for (int k = 0; k < 3; ++k) {
      const int kind = static_cast<int>((k + round) % 3);  // 0 in-line, 1 sync_core, 2 tmax
      if (kind == 1 && !sync_core) continue;
      const WaitPolicy w = kind == 1 ? WaitPolicy::SyncCore() : tmax;
      Tracepoint& x = kind == 0 ? t : tx;
      const Op in = kind == 0 ? install_inline : kind == 1 ? install_sync_core : install_tmax;
      const Op out = kind == 0 ? remove_inline : kind == 1 ? remove_sync_core : remove_tmax;
      failed += timed(in, [&] { return x.install(w); }) != tp::Status::ok;
      failed += timed(disable, [&] { return x.disable(); }) != tp::Status::ok;
      failed += timed(enable, [&] { return x.enable(); }) != tp::Status::ok;
      failed += timed(out, [&] { return x.remove(w); }) != tp::Status::ok;
    }
    ++round;
  }
  if (failed != 0) return st.SkipWithError("an install/remove/toggle failed");
  for (int op = 0; op < kOps; ++op) {
    if (ticks[op].empty()) continue;
    st.counters[fmt::format("{}_ticks_p50", kNames[op])] = median(ticks[op]);
    st.counters[fmt::format("{}_ticks_p90", kNames[op])] = quantile(ticks[op], 0.9);
    st.counters[fmt::format("{}_ns_p50", kNames[op])] = to_ns(median(ticks[op]));
  }
  st.counters["tmax_ticks"] = static_cast<double>(env().tmax_ticks);
  st.counters["rounds"] = static_cast<double>(round);
  st.SetLabel(sync_core ? "in-line: one store; straddling: 2 waits; ticks per op, median over interleaved rounds"
                        : "no membarrier SYNC_CORE here: Tmax waits only");
}

// ---- tracepoint/memory -------------------------------------------------------------

void bm_memory(benchmark::State& st) {
  constexpr int kCopies = 64;
  std::vector<std::unique_ptr<CodeCopy>> copies;
  std::vector<Tracepoint> tps;
  tps.reserve(2 * kCopies);
  const tp::PoolStats before = tp::pool_stats();
  for (auto _ : st) {
    for (int i = 0; i < kCopies; ++i) {
      auto c = std::make_unique<CodeCopy>();
      if (!c->make()) return st.SkipWithError(c->why.c_str());
      for (const Code& f : {c->plus, c->shortfn}) {
        tps.emplace_back();
        if (const tp::Status ps =
                Tracepoint::prepare(f.addr, f.size, empty_probe, nullptr, &tps.back(), nullptr, true);
            ps != tp::Status::ok)
          return st.SkipWithError(fmt::format("prepare: {}", tp::to_string(ps)).c_str());
      }
      copies.push_back(std::move(c));
    }
  }
  const tp::PoolStats after = tp::pool_stats();
  const double n = static_cast<double>(after.trampolines - before.trampolines);
  const double pages = static_cast<double>(after.entry_pages - before.entry_pages);
  const double entry_used = static_cast<double>(after.entry_bytes_used - before.entry_bytes_used);
  std::size_t jump = 0;
  for (const Tracepoint& t : tps) jump += !t.trap_mode();
  st.counters["tracepoints"] = n;
  st.counters["jump_tracepoints"] = static_cast<double>(jump);
  // Bodies live in arenas or, direct, in the entry pages (PoolStats): both counted.
  const double direct_bytes = static_cast<double>(after.direct_body_bytes - before.direct_body_bytes);
  st.counters["body_bytes_per_tracepoint"] =
      (static_cast<double>(after.body_bytes_used - before.body_bytes_used) + direct_bytes) / n;
  st.counters["direct_bodies"] = static_cast<double>(after.direct_bodies - before.direct_bodies);
  st.counters["entry_pages"] = pages;
  st.counters["entry_bytes_per_page_used"] = pages > 0 ? (entry_used + direct_bytes) / pages : 0;
  st.counters["entry_page_bytes_per_jump_tracepoint"] =
      jump > 0 ? pages * 4096.0 / static_cast<double>(jump) : 0;
  st.counters["mmap_attempts"] = static_cast<double>(after.mmap_attempts - before.mmap_attempts);
  st.SetLabel("64 fresh code blocks x (plus_k jump + 4-byte trap mode); pool deltas");
  // The tracepoints are never installed; their trampolines stay allocated (the pool never
  // frees), as in any process that prepared them.
}

template <class Fn>
benchmark::internal::Benchmark* add(const std::string& variant, Fn fn) {
  std::string name = "tracepoint/" + variant;
  registered_names().push_back(name);
  return benchmark::RegisterBenchmark(name.c_str(),
                                      [name, fn](benchmark::State& st) { fn(st, name); })
      ->UseRealTime();
}

}  // namespace

void register_tracepoint_benchmarks() {
  add("invoke", [](benchmark::State& st, const std::string& n) { bm_invoke(st, n); });
  add("latency", [](benchmark::State& st, const std::string& n) { bm_latency(st, n); });
  add("memory", [](benchmark::State& st, const std::string&) { bm_memory(st); })->Iterations(1);
}

}  // namespace crossmod::bench
