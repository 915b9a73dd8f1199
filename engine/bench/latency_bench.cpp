// Latency of one patch operation: `latency/<op>/executors:<n>`, n in {0, 1}.
// Engine ops (wordpatch, callpatch) and the baselines the design measures them against
// (membarrier SYNC_CORE, stop-the-world, mprotect around every patch) run in one process
// so their ratios share one machine state.
// Thread safety: benchmarks run on the pinned patcher thread; executors are Executors
// threads; the stop-the-world SIGUSR1 handler uses lock-free atomics only.
//
// Why this method: each operation is bracketed by rdtscp_ordered() (waits for earlier
// instructions, so the previous op's stores and the loop bookkeeping are not charged to
// the next op) and every sample is kept, because the interesting part is the tail (an
// executor trapping on the int3, a TLB shootdown) which a per-batch mean would hide.
// Google Benchmark's own time column is wall time over the whole loop and includes the
// unmeasured reverse toggle of the *_activate/_deactivate ops: read the ticks_* counters.
// Observed, not guaranteed: on the Zen 5 KVM guest this was written on, back-to-back
// RDTSC reads differ by 26 ticks (the TSC moves in steps of the 100 MHz reference times
// the P0 multiplier), so sub-100-tick ops read as 52, 78, 104 ... and their percentiles
// are quantised; ticks_mean over many samples is finer. The empty rdtscp bracket (the
// floor under every sample) is in the JSON context as rdtscp_bracket_ticks.
#include <fmt/core.h>
#include <pthread.h>
#include <sys/mman.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "bench_support.hpp"
#include "crossmod/callpatch.hpp"
#include "crossmod/code_memory.hpp"
#include "crossmod/testsupport/site_code.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/wordpatch.hpp"
#include "crossmod/x86.hpp"

namespace crossmod::bench {
namespace {


struct Spec {
  std::string name;  // full benchmark name, also the sample log key
  std::string op;
  unsigned executors = 0;
  unsigned straddle = 0;
};

// Sites plus whatever writes them, kept across the runs of one benchmark.
struct SitesFixture : Fixture {
  std::vector<std::unique_ptr<StressSite>> sites;
  std::vector<CallSite> calls;
  std::unique_ptr<WordPatcher> patcher;
  bool at_a = true;  // every site is in state A (call) when true

  std::vector<StressSite::EntryFn> entries() const {
    std::vector<StressSite::EntryFn> e;
    for (const auto& s : sites) e.push_back(s->entry());
    return e;
  }
};

std::unique_ptr<SitesFixture> make_sites(const std::vector<unsigned>& straddles,
                                         std::string* why) {
  auto fx = std::make_unique<SitesFixture>();
  for (unsigned s : straddles) {
    auto site = make_site(s, why);
    if (!site) return nullptr;
    fx->sites.push_back(std::move(site));
  }
  return fx;
}

// Adds a CallSite per site (the site is in state A, the call to its stub).
bool prepare_calls(SitesFixture* fx, std::string* why) {
  for (const auto& s : fx->sites) {
    CallSite cs;
    Status st = CallSite::prepare(s->site(), s->call_target(), &cs);
    if (st != Status::ok) {
      *why = status_message("CallSite::prepare", st);
      return false;
    }
    fx->calls.push_back(cs);
  }
  return true;
}

template <class Make>
SitesFixture* sites_fixture(benchmark::State& st, const Spec& spec, Make&& make) {
  std::string why;
  auto* fx = reuse_fixture<SitesFixture>(spec.name, [&] { return make(&why); });
  if (!fx) st.SkipWithError(why.c_str());
  return fx;
}

bool start_executors(benchmark::State& st, Executors& ex, const Spec& spec,
                     std::vector<StressSite::EntryFn> entries) {
  std::string why;
  if (ex.start(spec.executors, std::move(entries), /*hold=*/false, &why)) return true;
  st.SkipWithError(why.c_str());
  return false;
}

// Executors that hit a locked site's int3 during the run (waited in the engine's SIGTRAP
// handler): how much of a straddler's cost the executors saw.
std::uint64_t engine_traps() {
  trap::Stats t = trap::stats();
  return t.locked_hits + t.late_hits;
}

void fail(benchmark::State& st, const char* what, Status s) {
  st.SkipWithError(status_message(what, s).c_str());
}

// ---- wordpatch, S = 0: one locked in-line store; activate = B->A, deactivate = A->B.
void bm_wordpatch_inline(benchmark::State& st, const Spec& spec, bool activate) {
  SitesFixture* fx = sites_fixture(st, spec, [](std::string* why) {
    auto f = make_sites({0}, why);
    if (f) f->patcher = std::make_unique<WordPatcher>(WaitPolicy::Ticks(env().tmax_ticks));
    return f;
  });
  if (!fx) return;
  StressSite& site = *fx->sites[0];
  const auto& before = activate ? site.state_b() : site.state_a();
  const auto& after = activate ? site.state_a() : site.state_b();
  Executors ex;
  if (!start_executors(st, ex, spec, fx->entries())) return;
  LatencyRecorder rec(spec.name, spec.op, spec.executors);
  for (auto _ : st) {
    Status s0 = fx->patcher->patch(site.site(), before);  // unmeasured reverse toggle
    std::uint64_t t0 = x86::rdtscp_ordered();
    Status s1 = fx->patcher->patch(site.site(), after);
    std::uint64_t t1 = x86::rdtscp_ordered();
    if (s0 != Status::ok || s1 != Status::ok) {
      fail(st, "WordPatcher::patch", s0 != Status::ok ? s0 : s1);
      break;
    }
    rec.add(t1 - t0);
  }
  ex.stop();
  st.counters["executor_faults"] = static_cast<double>(ex.faults());
  fx->at_a = activate;
  rec.publish(st);
}

// ---- wordpatch straddler, synchronous: int3, W, back part, W, front part. W is Tmax
// (wordpatch_*) or membarrier SYNC_CORE (synccore_*). Each iteration toggles A <-> B.
void bm_straddle(benchmark::State& st, const Spec& spec, WaitPolicy policy) {
  SitesFixture* fx = sites_fixture(st, spec, [&](std::string* why) {
    auto f = make_sites({spec.straddle}, why);
    if (f) f->patcher = std::make_unique<WordPatcher>(policy);
    return f;
  });
  if (!fx) return;
  if (Status s = fx->patcher->init_status(); s != Status::ok) {
    fail(st, policy.kind == WaitPolicy::Kind::sync_core ? "membarrier SYNC_CORE" : "WordPatcher",
         s);
    return;
  }
  StressSite& site = *fx->sites[0];
  Executors ex;
  if (!start_executors(st, ex, spec, fx->entries())) return;
  LatencyRecorder rec(spec.name, spec.op, spec.executors);
  const std::uint64_t traps0 = engine_traps();
  for (auto _ : st) {
    const auto& next = fx->at_a ? site.state_b() : site.state_a();
    std::uint64_t t0 = x86::rdtscp_ordered();
    Status s = fx->patcher->patch(site.site(), next);
    std::uint64_t t1 = x86::rdtscp_ordered();
    if (s != Status::ok) {
      fail(st, "WordPatcher::patch", s);
      break;
    }
    fx->at_a = !fx->at_a;
    rec.add(t1 - t0);
  }
  ex.stop();
  st.counters["executor_faults"] = static_cast<double>(ex.faults());
  rec.publish(st);
  st.counters["executor_traps"] = static_cast<double>(engine_traps() - traps0);
}

// ---- wordpatch asynchronous, 16 straddling sites (S = 1,2,3,4,1,...): 16 start_patch
// then one finish_patches, which pays the two waits once for all. Reported per site
// (batch ticks / 16) so it compares directly with wordpatch_straddle_s*.
constexpr unsigned kBatch = 16;

void bm_async_batch(benchmark::State& st, const Spec& spec) {
  SitesFixture* fx = sites_fixture(st, spec, [](std::string* why) {
    std::vector<unsigned> s;
    for (unsigned i = 0; i < kBatch; ++i) s.push_back(1 + i % 4);
    auto f = make_sites(s, why);
    if (f) f->patcher = std::make_unique<WordPatcher>(WaitPolicy::Ticks(env().tmax_ticks));
    return f;
  });
  if (!fx) return;
  Executors ex;
  if (!start_executors(st, ex, spec, fx->entries())) return;
  LatencyRecorder rec(spec.name, spec.op, spec.executors);
  PatchHandle handles[kBatch];
  const std::uint64_t traps0 = engine_traps();
  double batch_sum = 0;
  std::uint64_t batches = 0;
  for (auto _ : st) {
    Status first = Status::ok;
    std::uint64_t t0 = x86::rdtscp_ordered();
    for (unsigned i = 0; i < kBatch; ++i) {
      StressSite& site = *fx->sites[i];
      const auto& next = fx->at_a ? site.state_b() : site.state_a();
      Status s = fx->patcher->start_patch(site.site(), next, &handles[i]);
      if (s != Status::ok && first == Status::ok) first = s;
    }
    Status fin = fx->patcher->finish_patches(handles);
    std::uint64_t t1 = x86::rdtscp_ordered();
    if (first != Status::ok || fin != Status::ok) {
      fail(st, "WordPatcher::start_patch/finish_patches", first != Status::ok ? first : fin);
      break;
    }
    fx->at_a = !fx->at_a;
    rec.add((t1 - t0) / kBatch);
    batch_sum += static_cast<double>(t1 - t0);
    ++batches;
  }
  ex.stop();
  st.counters["executor_faults"] = static_cast<double>(ex.faults());
  rec.publish(st);
  if (batches) st.counters["ticks_batch_mean"] = batch_sum / static_cast<double>(batches);
  st.counters["executor_traps"] = static_cast<double>(engine_traps() - traps0);
}

// ---- callpatch: one toggle (activate or deactivate, alternating) of a CallSite.
void bm_callpatch(benchmark::State& st, const Spec& spec) {
  SitesFixture* fx = sites_fixture(st, spec, [&](std::string* why) {
    auto f = make_sites({spec.straddle}, why);
    if (f && !prepare_calls(f.get(), why)) return std::unique_ptr<SitesFixture>();
    return f;
  });
  if (!fx) return;
  CallSite& cs = fx->calls[0];
  Executors ex;
  if (!start_executors(st, ex, spec, fx->entries())) return;
  LatencyRecorder rec(spec.name, spec.op, spec.executors);
  for (auto _ : st) {
    const bool was_active = cs.active();
    std::uint64_t t0 = x86::rdtscp_ordered();
    Status s = was_active ? cs.deactivate() : cs.activate();
    std::uint64_t t1 = x86::rdtscp_ordered();
    if (s != Status::ok) {
      fail(st, was_active ? "CallSite::deactivate" : "CallSite::activate", s);
      break;
    }
    rec.add(t1 - t0);
  }
  ex.stop();
  st.counters["executor_faults"] = static_cast<double>(ex.faults());
  rec.publish(st);
}

// ---- stop-the-world: SIGUSR1 to every executor, each handler spins at a barrier; the
// patcher waits until all arrived, writes the 5 bytes with plain stores, releases. The
// measured op ends at the release; executors then leave the handler through sigreturn,
// which is serialising (IRET), so they refetch the new bytes: that is why the plain
// write is correct here. With 0 executors the op is the bare unsynchronised write.
// Site S = 1; the summary compares it with callpatch_s1.
constexpr unsigned kStwStraddle = 1;

std::atomic<unsigned> g_stw_arrived{0};
std::atomic<unsigned> g_stw_left{0};
std::atomic<bool> g_stw_release{false};
static_assert(std::atomic<unsigned>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

// Async-signal-safe: lock-free atomics and pause only; errno saved for form's sake.
void stw_handler(int) {
  int saved = errno;
  g_stw_arrived.fetch_add(1, std::memory_order_acq_rel);
  while (!g_stw_release.load(std::memory_order_acquire)) x86::pause();
  g_stw_left.fetch_add(1, std::memory_order_release);
  errno = saved;
}

bool install_stw_handler(std::string* why) {
  static bool installed = false;
  if (installed) return true;
  struct sigaction sa {};
  sa.sa_handler = stw_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &sa, nullptr) != 0) {
    *why = fmt::format("sigaction(SIGUSR1): {}", std::strerror(errno));
    return false;
  }
  installed = true;
  return true;
}

void bm_stop_the_world(benchmark::State& st, const Spec& spec) {
  std::string why;
  if (!install_stw_handler(&why)) return st.SkipWithError(why.c_str());
  SitesFixture* fx = sites_fixture(
      st, spec, [](std::string* w) { return make_sites({kStwStraddle}, w); });
  if (!fx) return;
  StressSite& site = *fx->sites[0];
  if (!is_writable(site.site(), x86::kCallLen))
    return st.SkipWithError("stress site is not registered writable; a plain write would fault");
  Executors ex;
  if (!start_executors(st, ex, spec, fx->entries())) return;
  std::vector<pthread_t> victims = ex.handles();
  const auto n = static_cast<unsigned>(victims.size());
  LatencyRecorder rec(spec.name, spec.op, spec.executors);
  for (auto _ : st) {
    const auto& next = fx->at_a ? site.state_b() : site.state_a();
    g_stw_release.store(false, std::memory_order_relaxed);
    g_stw_arrived.store(0, std::memory_order_relaxed);
    g_stw_left.store(0, std::memory_order_relaxed);
    int err = 0;
    std::uint64_t t0 = x86::rdtscp_ordered();
    for (pthread_t t : victims)
      if (int e = pthread_kill(t, SIGUSR1); e != 0) err = e;
    while (err == 0 && g_stw_arrived.load(std::memory_order_acquire) < n) x86::pause();
    std::memcpy(site.site(), next.data(), next.size());
    g_stw_release.store(true, std::memory_order_release);
    std::uint64_t t1 = x86::rdtscp_ordered();
    while (err == 0 && g_stw_left.load(std::memory_order_acquire) < n) x86::pause();
    if (err != 0) {
      g_stw_release.store(true, std::memory_order_release);
      st.SkipWithError(fmt::format("pthread_kill: {}", std::strerror(err)).c_str());
      break;
    }
    fx->at_a = !fx->at_a;
    rec.add(t1 - t0);
  }
  ex.stop();
  st.counters["executor_faults"] = static_cast<double>(ex.faults());
  rec.publish(st);
}

// ---- mprotect per patch, as XRay does: the code page is RX; every toggle makes it RWX,
// toggles the CallSite, restores RX. Two writers:
//  - mprotect_callpatch: the engine's scoped helper, WritableRange::make -> toggle ->
//    restore(). make() reads /proc/self/maps to learn the protection to restore, so this
//    is what a user of the engine's helper pays.
//  - mprotect_raw_callpatch: bare mprotect(RWX) -> toggle -> mprotect(RX), which is what
//    XRay does (it knows the protection it restores). The page is a CodeBlock, registered
//    writable for its lifetime, so CallSite accepts it; it is really writable only
//    between the two mprotect calls.
// The site is a non-straddling call in a page of our own (a StressSite's pages stay
// writable for its lifetime), so the summary compares both with callpatch_s0.
//   entry: xor eax,eax | call rel32 -> stub | ret      stub one line on: mov eax,1; ret
// (testsupport::write_entry / write_stub). The stub starts the next line, so the site's
// line holds only the entry.
std::size_t stub_offset() { return x86::cache_line_size(); }

struct MprotectFixture : Fixture {
  std::uint8_t* page = nullptr;
  std::size_t len = 0;
  bool mapped = false;  // page from mmap (munmap it); else owned by `block`
  CodeBlock block;
  CallSite cs;
  ~MprotectFixture() override {
    if (mapped) munmap(page, len);
    else if (page) mprotect(page, len, PROT_READ | PROT_WRITE | PROT_EXEC);  // as allocated
  }
  std::uint8_t* site() const { return page + testsupport::kEntryPrologueLen; }
  StressSite::EntryFn entry() const { return testsupport::entry_of(site()); }
};

// Lays out entry, site (active call) and stub in fx->page, then makes it RX.
bool lay_out_rx(MprotectFixture* fx, std::string* why) {
  std::uint8_t* b = fx->page;
  testsupport::fill_invalid({b, fx->len});
  std::array<std::uint8_t, 5> call{};
  if (x86::encode_call(reinterpret_cast<std::uintptr_t>(fx->site()),
                       reinterpret_cast<std::uintptr_t>(b + stub_offset()), &call) != Status::ok) {
    *why = "encode_call: stub out of reach (cannot happen within one page)";
    return false;
  }
  testsupport::write_entry(fx->site(), call);
  testsupport::write_stub(b + stub_offset());
  if (mprotect(fx->page, fx->len, PROT_READ | PROT_EXEC) != 0) {
    *why = fmt::format("mprotect(RX): {}", std::strerror(errno));
    return false;
  }
  return true;
}

std::unique_ptr<MprotectFixture> make_mprotect_fixture(bool raw, std::string* why) {
  auto fx = std::make_unique<MprotectFixture>();
  fx->len = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (raw) {
    std::error_code ec;
    if (Status s = CodeBlock::allocate(fx->len, nullptr, &fx->block, &ec); s != Status::ok) {
      *why = status_message("CodeBlock::allocate", s) + (ec ? ": " + ec.message() : "");
      return nullptr;
    }
    fx->page = fx->block.data();
    fx->len = fx->block.size();
  } else {
    void* p = mmap(nullptr, fx->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      *why = fmt::format("mmap: {}", std::strerror(errno));
      return nullptr;
    }
    fx->page = static_cast<std::uint8_t*>(p);
    fx->mapped = true;
  }
  if (!lay_out_rx(fx.get(), why)) return nullptr;
  std::uint8_t* stub = fx->page + stub_offset();
  Status s;
  if (raw) {
    s = mprotect(fx->page, fx->len, PROT_READ | PROT_WRITE | PROT_EXEC) == 0 ? Status::ok
                                                                            : Status::os_error;
    if (s == Status::ok) s = CallSite::prepare(fx->site(), stub, &fx->cs);
    if (mprotect(fx->page, fx->len, PROT_READ | PROT_EXEC) != 0) s = Status::os_error;
  } else {
    WritableRange w;
    s = WritableRange::make(fx->site(), x86::kCallLen, &w);
    if (s == Status::ok) s = CallSite::prepare(fx->site(), stub, &fx->cs);
    if (Status r = w.restore(); s == Status::ok) s = r;
  }
  if (s != Status::ok) {
    *why = status_message("making the page writable / CallSite::prepare", s);
    return nullptr;
  }
  return fx;
}

void bm_mprotect_callpatch(benchmark::State& st, const Spec& spec, bool raw) {
  std::string why;
  auto* fx = reuse_fixture<MprotectFixture>(spec.name,
                                            [&] { return make_mprotect_fixture(raw, &why); });
  if (!fx) return st.SkipWithError(why.c_str());
  Executors ex;
  if (!start_executors(st, ex, spec, {fx->entry()})) return;
  LatencyRecorder rec(spec.name, spec.op, spec.executors);
  for (auto _ : st) {
    const bool was_active = fx->cs.active();
    Status s, t, r;
    std::uint64_t t0 = x86::rdtscp_ordered();
    if (raw) {
      s = mprotect(fx->page, fx->len, PROT_READ | PROT_WRITE | PROT_EXEC) == 0 ? Status::ok
                                                                              : Status::os_error;
      t = s == Status::ok ? (was_active ? fx->cs.deactivate() : fx->cs.activate()) : s;
      r = mprotect(fx->page, fx->len, PROT_READ | PROT_EXEC) == 0 ? Status::ok : Status::os_error;
    } else {
      WritableRange w;
      s = WritableRange::make(fx->site(), x86::kCallLen, &w);
      t = s == Status::ok ? (was_active ? fx->cs.deactivate() : fx->cs.activate()) : s;
      r = w.restore();
    }
    std::uint64_t t1 = x86::rdtscp_ordered();
    if (s != Status::ok || t != Status::ok || r != Status::ok) {
      fail(st, "mprotect + CallSite toggle", s != Status::ok ? s : (t != Status::ok ? t : r));
      break;
    }
    rec.add(t1 - t0);
  }
  ex.stop();
  st.counters["executor_faults"] = static_cast<double>(ex.faults());
  rec.publish(st);
}

template <class Fn>
void add(const std::string& op, unsigned executors, unsigned straddle, Fn fn) {
  Spec spec{fmt::format("latency/{}/executors:{}", op, executors), op, executors, straddle};
  registered_names().push_back(spec.name);
  benchmark::RegisterBenchmark(spec.name.c_str(),
                               [spec, fn](benchmark::State& st) { fn(st, spec); })
      ->UseRealTime();
}

}  // namespace

void register_latency_benchmarks() {
  const WaitPolicy tmax = WaitPolicy::Ticks(env().tmax_ticks);
  for (unsigned n : {0u, 1u}) {
    add("wordpatch_inline_activate", n, 0,
        [](benchmark::State& st, const Spec& s) { bm_wordpatch_inline(st, s, true); });
    add("wordpatch_inline_deactivate", n, 0,
        [](benchmark::State& st, const Spec& s) { bm_wordpatch_inline(st, s, false); });
    for (unsigned s = 1; s <= 4; ++s)
      add(fmt::format("wordpatch_straddle_s{}", s), n, s,
          [tmax](benchmark::State& st, const Spec& sp) { bm_straddle(st, sp, tmax); });
    add("wordpatch_async_batch16", n, 0, bm_async_batch);
    for (unsigned s = 0; s <= 4; ++s) add(fmt::format("callpatch_s{}", s), n, s, bm_callpatch);
    for (unsigned s = 1; s <= 4; ++s)
      add(fmt::format("synccore_straddle_s{}", s), n, s, [](benchmark::State& st, const Spec& sp) {
        bm_straddle(st, sp, WaitPolicy::SyncCore());
      });
    add("stop_the_world", n, kStwStraddle, bm_stop_the_world);
    add("mprotect_callpatch", n, 0,
        [](benchmark::State& st, const Spec& sp) { bm_mprotect_callpatch(st, sp, false); });
    add("mprotect_raw_callpatch", n, 0,
        [](benchmark::State& st, const Spec& sp) { bm_mprotect_callpatch(st, sp, true); });
  }
}

}  // namespace crossmod::bench
