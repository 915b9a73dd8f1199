// The probe table, registration and discovery, single and batch toggles, strategies.
// Thread safety: registration and the discovery callback slot are guarded by the registry
// mutex; each probe's state changes by a per-probe spinlock (toggle path only); the
// invocation path reads `fn`/`active` atomics and the lock-free site maps. Allocates on
// the registration and batch paths only.
#include <fnmatch.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>

#include <algorithm>
#include <cstring>
#include <vector>

#include "crossmod/code_memory.hpp"
#include "crossmod/tmax_config.hpp"
#include "crossmod/x86.hpp"
#include "encodings.hpp"
#include "objects.hpp"
#include "registry.hpp"

extern "C" char crossmod_probes_entry_trampoline[];  // trampoline_x86_64.S

namespace crossmod::probes {

namespace detail {

namespace {

// Zero-initialised static storage (Probe's members are constexpr-constructible), so the
// table exists before any constructor runs and is never destroyed.
Probe g_probes[kMaxProbes];
std::atomic<std::uint32_t> g_count{0};
SiteMap<18> g_sites;       // site address -> id (2x kMaxProbes slots: short probe chains)
SiteMap<16> g_tail_exits;  // function -> id of its tail-called exit hook (or kKnownNone)
std::mutex g_registry_mutex;
DiscoveryFn g_discovery = nullptr;  // guarded by g_registry_mutex
void* g_discovery_user = nullptr;
std::atomic<std::uint64_t> g_wait_ticks{0};  // 0: not loaded yet

std::mutex g_pending_mutex;
std::vector<ProbeId>* g_pending = nullptr;  // ids with a started async wordpatch; leaked

thread_local ThreadState t_state __attribute__((tls_model("initial-exec")));

}  // namespace

Probe& probe(ProbeId id) noexcept { return g_probes[id]; }
std::uint32_t published_count() noexcept { return g_count.load(std::memory_order_acquire); }
std::uint32_t find_site(std::uintptr_t site) noexcept { return g_sites.find(site); }
std::uint32_t find_tail_exit(std::uintptr_t function) noexcept {
  return g_tail_exits.find(function);
}
std::mutex& registry_mutex() noexcept { return g_registry_mutex; }
ThreadState& thread_state() noexcept { return t_state; }

Status from_engine(crossmod::Status s) noexcept {
  switch (s) {
    case crossmod::Status::ok: return Status::ok;
    case crossmod::Status::busy: return Status::busy;
    case crossmod::Status::not_writable: return Status::not_writable;
    case crossmod::Status::out_of_range: return Status::out_of_range;
    case crossmod::Status::bad_bytes: return Status::bytes_changed;
    case crossmod::Status::table_full: return Status::table_full;
    case crossmod::Status::unsupported: return Status::unsupported;
    default: return Status::engine_error;
  }
}

namespace {

using Bytes5 = std::array<std::uint8_t, 5>;

Bytes5 read5(std::uintptr_t site) noexcept {
  Bytes5 b;
  std::memcpy(b.data(), reinterpret_cast<const void*>(site), b.size());
  return b;
}

// GCC's five 1-byte NOPs, or one 5-byte NOP with any disp8 (Clang, and kNop5 itself).
bool is_nop_sled(const Bytes5& b) noexcept {
  return std::all_of(b.begin(), b.end(), [](std::uint8_t x) { return x == enc::kNop1; }) ||
         std::equal(enc::kNop5Disp8Prefix.begin(), enc::kNop5Disp8Prefix.end(), b.begin());
}

// ---- far thunks to the shared entry trampoline ------------------------------------------
// `jmp [rip+0]; .quad trampoline` in a page within rel32 reach of the site; the return
// address the trampoline sees is still the site's. Blocks are never freed.
std::vector<CodeBlock*>* g_thunks = nullptr;  // guarded by the registry mutex; never freed

}  // namespace

std::uintptr_t entry_trampoline_near(std::uintptr_t site, Status* status) noexcept {
  const auto tramp = reinterpret_cast<std::uintptr_t>(crossmod_probes_entry_trampoline);
  *status = Status::ok;
  if (rel32_reachable(site + x86::kCallLen, tramp)) return tramp;
  try {
    if (g_thunks == nullptr) g_thunks = new std::vector<CodeBlock*>();
    for (CodeBlock* b : *g_thunks) {
      const auto t = reinterpret_cast<std::uintptr_t>(b->data());
      if (rel32_reachable(site + x86::kCallLen, t)) return t;
    }
    g_thunks->reserve(g_thunks->size() + 1);  // so push_back below cannot throw
    auto* block = new CodeBlock();  // kept for ever: sites call it
    if (crossmod::Status s = CodeBlock::allocate(enc::kThunkLen, reinterpret_cast<void*>(site), block);
        s != crossmod::Status::ok) {
      delete block;
      *status = from_engine(s);
      return 0;
    }
    std::uint8_t* t = block->data();
    std::memset(t, x86::kInvalid64, block->size());
    t[0] = enc::kJmpRipIndirect[0];
    t[1] = enc::kJmpRipIndirect[1];
    std::memset(t + 2, 0, 4);  // disp32 = 0: the target follows the instruction
    std::memcpy(t + 6, &tramp, sizeof tramp);
    g_thunks->push_back(block);
    return reinterpret_cast<std::uintptr_t>(t);
  } catch (...) {
    *status = Status::engine_error;
    return 0;
  }
}

void mark_no_probe_locked(std::uintptr_t site) noexcept { (void)g_sites.insert(site, kKnownNone); }

void set_tail_exit_locked(std::uintptr_t function, std::uint32_t id) noexcept {
  (void)g_tail_exits.insert(function, id);
}

std::uint32_t register_probe_locked(const NewProbe& np, Status* status) noexcept {
  *status = Status::ok;
  if (const std::uint32_t existing = g_sites.find(np.site); existing < kMaxProbes) return existing;
  const std::uint32_t id = g_count.load(std::memory_order_relaxed);
  if (id >= kMaxProbes) {
    *status = Status::table_full;
    return kNone;
  }
  // Where is the site? Inside a loaded object's executable segment (made writable for
  // good), or inside memory already registered with the engine (a CodeBlock).
  Segment* seg = nullptr;
  Object* obj = object_for_code(np.site, x86::kCallLen, &seg);
  Status prep = Status::ok;
  if (obj != nullptr) {
    prep = ensure_writable(seg);
  } else if (!is_writable(reinterpret_cast<void*>(np.site), x86::kCallLen)) {
    *status = Status::outside_code;
    return kNone;
  }

  Probe& p = g_probes[id];
  p.function = np.function;
  p.site = np.site;
  p.kind = np.kind;
  p.provider = np.provider;
  p.form = np.form;
  p.split = x86::straddle_split(np.site + np.site_skip, np.site_len);
  p.object = np.object;
  p.name = np.name;
  if (obj != nullptr) {
    if (std::strcmp(p.object, "?") == 0) p.object = obj->display;
    if (std::strcmp(p.name, "?") == 0)
      if (const Symbol* sym = symbol_for(obj, np.function)) p.name = sym->name;
  }
  p.strategy = Strategy::callpatch;
  p.fn.store(nullptr, std::memory_order_relaxed);

  bool active = false;
  Bytes5 cur = read5(np.site);
  if (np.form == Form::tracepoint) {
    // The code is untouched until the first activation installs the jump.
    p.tracepoint = np.tracepoint;
    if (prep == Status::ok && np.tracepoint == nullptr) prep = Status::bad_argument;
  } else if (prep == Status::ok && np.form == Form::tailjmp) {
    p.active_bytes = cur;
    p.active_bytes[0] = enc::kJmpRel32;
    active = cur[0] == enc::kJmpRel32;
    if (!active && cur[0] != enc::kRet) prep = Status::bytes_changed;
  } else if (prep == Status::ok) {
    std::uintptr_t target = 0;
    if (is_nop_sled(cur) && np.call_target != 0) {
      // A private sled (the precondition of scan / register_entry_site): write the call
      // once so that CallSite::prepare derives this split's inactive form from it.
      Bytes5 call;
      if (x86::encode_call(np.site, np.call_target, &call) != crossmod::Status::ok) {
        prep = Status::out_of_range;
      } else {
        std::memcpy(reinterpret_cast<void*>(np.site), call.data(), call.size());
        target = np.call_target;
        cur = call;
      }
    } else if (!x86::decode_call(cur.data(), np.site, &target)) {
      prep = Status::bytes_changed;
    }
    if (prep == Status::ok) {
      prep = from_engine(CallSite::prepare(reinterpret_cast<void*>(np.site),
                                           reinterpret_cast<const void*>(target), &p.cs));
    }
    if (prep == Status::ok) {
      p.active_bytes = p.cs.active_bytes();
      active = p.cs.active();
      if (active && !np.start_active) {
        prep = from_engine(p.cs.deactivate());
        active = false;
      }
    }
  }
  p.prepare_status = prep;
  p.partner = kNone;
  p.code_on = active;
  p.active.store(active, std::memory_order_relaxed);
  p.announced.store(false, std::memory_order_relaxed);
  if (!g_sites.insert(np.site, id)) {
    *status = Status::table_full;
    return kNone;
  }
  g_count.store(id + 1, std::memory_order_release);
  return id;
}

// The probe whose lock, CallSite and strategy govern p's site: p itself, or for the exit
// probe of a patchable site its entry probe.
Probe& code_owner(Probe& p) noexcept {
  return (p.kind == Kind::exit && p.partner < kMaxProbes) ? g_probes[p.partner] : p;
}

namespace {
// fork: the child has only the forking thread, and a copy of every toggle lock as it was.
// A lock another thread held at that moment stayed held in the child for good, and the
// child's first toggle of that probe spun forever (ApiFork.ChildTogglesAProbeAnother-
// ThreadWasToggling: the first child hung, in both runs before this). So a fork waits
// until no thread holds a toggle lock, and no thread takes its first one until the fork
// is done (pthread_atfork, registered below): a thread counts once in g_lock_holders from
// its first lock to its last release, so a batch that holds some locks takes the rest
// without waiting (no deadlock with the fork).
std::atomic<bool> g_forking{false};
std::atomic<std::uint32_t> g_lock_holders{0};
thread_local unsigned t_locks_held __attribute__((tls_model("initial-exec"))) = 0;

// The registry mutex likewise (a registration or discovery in flight at the fork left the
// child's copy held: ApiFork.ChildRegistersWhileAnotherThreadWasRegistering, the 8th child
// hung before this). Taken first, in the order registration takes it and then toggle locks.
void fork_prepare() noexcept {
  g_registry_mutex.lock();
  g_forking.store(true, std::memory_order_seq_cst);
  // A fork from inside a toggle: this thread's own count is not waited for.
  const std::uint32_t own = t_locks_held > 0 ? 1 : 0;
  unsigned spins = 0;
  while (g_lock_holders.load(std::memory_order_seq_cst) > own) {
    if (++spins % 64 == 0) sched_yield();
    x86::pause();
  }
}
void fork_parent() noexcept {
  g_forking.store(false, std::memory_order_seq_cst);
  g_registry_mutex.unlock();
}
void fork_child() noexcept {
  g_lock_holders.store(t_locks_held > 0 ? 1 : 0, std::memory_order_relaxed);
  g_forking.store(false, std::memory_order_seq_cst);
  g_registry_mutex.unlock();
}
__attribute__((constructor)) void register_fork_handlers() {
  (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
}

// The toggle lock: a spinlock held only by togglers (never by executing threads). Yields
// so that a preempted holder on a busy machine gets to run.
class ProbeLock {
 public:
  explicit ProbeLock(Probe& p) noexcept : p_(&p) { acquire(p); }
  ~ProbeLock() { release(*p_); }
  ProbeLock(const ProbeLock&) = delete;
  ProbeLock& operator=(const ProbeLock&) = delete;
  static void acquire(Probe& p) noexcept {
    unsigned spins = 0;
    if (t_locks_held == 0) {
      // Counted first, then the flag read (both seq_cst, as fork_prepare's store and
      // load): either the fork sees this thread counted, or this thread sees the fork.
      while (g_lock_holders.fetch_add(1, std::memory_order_seq_cst),
             g_forking.load(std::memory_order_seq_cst)) {
        g_lock_holders.fetch_sub(1, std::memory_order_seq_cst);
        while (g_forking.load(std::memory_order_relaxed)) {
          if (++spins % 64 == 0) sched_yield();
          x86::pause();
        }
      }
    }
    ++t_locks_held;
    while (p.lock.exchange(true, std::memory_order_acquire)) {
      if (++spins % 64 == 0) sched_yield();
      x86::pause();
    }
  }
  static void release(Probe& p) noexcept {
    p.lock.store(false, std::memory_order_release);
    if (--t_locks_held == 0) g_lock_holders.fetch_sub(1, std::memory_order_seq_cst);
  }

 private:
  Probe* p_;
};

}  // namespace

// Takes the probe's toggle lock for the fields togglers write (never called with it held).
std::uint32_t register_exit_partner_locked(std::uint32_t entry_id, Status* status) noexcept {
  *status = Status::ok;
  const std::uint32_t id = g_count.load(std::memory_order_relaxed);
  if (id >= kMaxProbes) {
    *status = Status::table_full;
    return kNone;
  }
  Probe& e = g_probes[entry_id];
  Probe& x = g_probes[id];
  x.function = e.function;
  x.site = e.site;  // shared with the entry probe; not in the site map
  x.name = e.name;
  x.object = e.object;
  x.kind = Kind::exit;
  x.provider = e.provider;
  x.form = e.form;
  x.split = e.split;
  x.active_bytes = e.active_bytes;
  x.prepare_status = e.prepare_status;
  x.partner = entry_id;
  x.fn.store(nullptr, std::memory_order_relaxed);
  x.active.store(false, std::memory_order_relaxed);
  e.partner = id;
  g_count.store(id + 1, std::memory_order_release);
  return id;
}

Probe& code_owner(Probe& p) noexcept;

void fill_info(ProbeId id, ProbeInfo* out) noexcept {
  Probe& p = g_probes[id];
  ProbeLock lock(code_owner(p));
  out->id = id;
  out->function = p.function;
  out->name = p.name;
  out->object = p.object;
  out->kind = p.kind;
  out->site = p.site;
  out->split = p.split;
  out->provider = p.provider;
  out->strategy = code_owner(p).strategy;
  out->active = p.active.load(std::memory_order_acquire);
  out->pending = code_owner(p).has_pending;
  out->fn = p.fn.load(std::memory_order_acquire);
}

void announce(ProbeId id) noexcept {
  pin_requested_objects();  // objects.hpp: the new site's object outlives any dlclose
  DiscoveryFn cb = nullptr;
  void* user = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    cb = g_discovery;
    user = g_discovery_user;
  }
  if (cb != nullptr) {
    ProbeInfo info;
    fill_info(id, &info);
    cb(info, user);
  }
  if (id < kMaxProbes) g_probes[id].announced.store(true, std::memory_order_release);
}

namespace {

// ---- toggling ---------------------------------------------------------------------------

std::uint64_t load_wait_ticks() noexcept {
  std::uint64_t t = g_wait_ticks.load(std::memory_order_acquire);
  if (t != 0) return t;
  TmaxConfig cfg;
  ConfigError err;
  t = load_tmax_config_auto(&cfg, &err) == crossmod::Status::ok ? cfg.recommended_ticks
                                                                 : kDefaultTmaxTicks;
  if (t == 0) t = kDefaultTmaxTicks;
  std::uint64_t expected = 0;
  g_wait_ticks.compare_exchange_strong(expected, t, std::memory_order_acq_rel);
  return g_wait_ticks.load(std::memory_order_acquire);
}

Bytes5 inactive_bytes(const Probe& p, Strategy s) noexcept {
  if (p.form == Form::tailjmp) {
    Bytes5 b = p.active_bytes;
    b[0] = enc::kRet;
    return b;
  }
  return s == Strategy::callpatch ? p.cs.inactive_bytes() : x86::kNop5;
}

Bytes5 state_bytes(const Probe& p, bool active, Strategy s) noexcept {
  return active ? p.active_bytes : inactive_bytes(p, s);
}

Status finish_pending(Probe& p, WordPatcher& wp) noexcept {
  if (!p.has_pending) return Status::ok;
  p.has_pending = false;
  return from_engine(wp.finish_patch(&p.pending));
}

// Writes `bytes` over the site with the probe's strategy. With `batch`, straddling
// wordpatch writes are started and their handles appended (the caller finishes them).
Status write_site(Probe& p, const Bytes5& bytes, bool on, WordPatcher& wp,
                  std::vector<PatchHandle>* batch) noexcept {
  if (p.form == Form::tailjmp) {
    // One byte, E9 <-> C3: a single-byte store is atomic, and both bytes start a complete
    // instruction (the rel32 after a RET is never executed).
    if (!is_writable(reinterpret_cast<void*>(p.site), 1)) return Status::not_writable;
    x86::store_byte(reinterpret_cast<std::uint8_t*>(p.site), bytes[0]);
    return Status::ok;
  }
  if (p.strategy == Strategy::callpatch)
    return from_engine(on ? p.cs.activate() : p.cs.deactivate());
  auto* site = reinterpret_cast<void*>(p.site);
  if (batch != nullptr) {
    try {
      batch->emplace_back();
    } catch (...) {
      return Status::engine_error;
    }
    const Status s = from_engine(wp.start_patch(site, bytes, &batch->back()));
    if (s != Status::ok) batch->pop_back();
    return s;
  }
  if (p.strategy == Strategy::wordpatch_async) {
    const Status s = from_engine(wp.start_patch(site, bytes, &p.pending));
    if (s != Status::ok || p.pending.phase == 3) return s;
    p.has_pending = true;
    try {
      std::lock_guard<std::mutex> lock(g_pending_mutex);
      if (g_pending == nullptr) g_pending = new std::vector<ProbeId>();
      g_pending->push_back(static_cast<ProbeId>(&p - g_probes));
    } catch (...) {
      // Cannot queue it: complete it now rather than leave executors parked.
      p.has_pending = false;
      return from_engine(wp.finish_patch(&p.pending));
    }
    return Status::ok;
  }
  return from_engine(wp.patch(site, bytes));
}

// With the code owner's lock held: switches p's logical state to `on` and the site's
// code to "active while the owner or its exit partner is active". Idempotent.
Status toggle_locked(Probe& p, bool on, WordPatcher& wp, std::vector<PatchHandle>* batch) noexcept {
  Probe& owner = code_owner(p);
  if (owner.prepare_status != Status::ok) return owner.prepare_status;
  if (Status s = finish_pending(owner, wp); s != Status::ok) return s;
  const bool was = p.active.load(std::memory_order_relaxed);
  if (was == on) return Status::ok;
  // Publish the state first in both directions: after activate() the first execution of
  // the new call sees active; after deactivate() a stale fetch of the old call (or a
  // thread between the site and the check) finds the probe off and does not call fn.
  p.active.store(on, std::memory_order_release);
  bool want = owner.active.load(std::memory_order_relaxed);
  if (owner.partner < kMaxProbes && &owner != &g_probes[owner.partner])
    want = want || g_probes[owner.partner].active.load(std::memory_order_relaxed);
  if (want == owner.code_on) return Status::ok;
  if (owner.form == Form::tracepoint) {
    const Status s = tracepoint_set_code(owner, want);
    if (s != Status::ok) {
      p.active.store(was, std::memory_order_release);
      return s;
    }
    owner.code_on = want;
    return Status::ok;
  }
  // Like text_poke: the bytes must be exactly what we left there.
  if (read5(owner.site) != state_bytes(owner, owner.code_on, owner.strategy)) {
    p.active.store(was, std::memory_order_release);
    return Status::bytes_changed;
  }
  const Status s = write_site(owner, state_bytes(owner, want, owner.strategy), want, wp, batch);
  if (s != Status::ok) {
    p.active.store(was, std::memory_order_release);
    return s;
  }
  owner.code_on = want;
  return Status::ok;
}

WordPatcher make_patcher() noexcept { return WordPatcher(WaitPolicy::Ticks(load_wait_ticks())); }

bool valid(ProbeId id) noexcept { return id < published_count(); }

// Batch toggle: lock every selected probe (ascending ids: no deadlock with other
// batches), toggle each, then complete all straddling wordpatch writes with two waits.
Status batch_ids(const std::vector<ProbeId>& ids, bool on, ProbeFn fn) noexcept;

template <class Pred>
Status batch(Pred pred, bool on, ProbeFn fn, std::size_t* toggled) noexcept {
  if (on && fn == nullptr) return Status::bad_argument;
  std::vector<ProbeId> ids;
  try {
    const std::uint32_t n = published_count();
    for (ProbeId id = 0; id < n; ++id)
      if (pred(g_probes[id])) ids.push_back(id);
  } catch (...) {
    return Status::engine_error;
  }
  if (toggled != nullptr) *toggled = ids.size();
  return batch_ids(ids, on, fn);
}

// Runs f(ids, n) with the code owners of `ids` locked (an exit probe's owner is its entry
// probe), once each, ascending: no deadlock with other batches.
template <class F>
Status with_owners_locked(const ProbeId* ids, std::size_t n, F f) noexcept {
  if (ids == nullptr && n != 0) return Status::bad_argument;
  std::vector<ProbeId> owners;
  try {
    for (std::size_t i = 0; i < n; ++i) {
      if (!valid(ids[i])) return Status::unknown_id;
      owners.push_back(static_cast<ProbeId>(&code_owner(g_probes[ids[i]]) - g_probes));
    }
  } catch (...) {
    return Status::engine_error;
  }
  std::sort(owners.begin(), owners.end());
  owners.erase(std::unique(owners.begin(), owners.end()), owners.end());
  for (ProbeId id : owners) ProbeLock::acquire(g_probes[id]);
  const Status s = f(ids, n);
  for (ProbeId id : owners) ProbeLock::release(g_probes[id]);
  return s;
}

// `ids` valid and distinct.
Status batch_ids(const std::vector<ProbeId>& ids, bool on, ProbeFn fn) noexcept {
  std::vector<PatchHandle> handles;
  try {
    handles.reserve(ids.size());
  } catch (...) {
    return Status::engine_error;
  }
  WordPatcher wp = make_patcher();
  if (wp.init_status() != crossmod::Status::ok) return from_engine(wp.init_status());
  Status first = Status::ok;
  auto note = [&first](Status s) {
    if (first == Status::ok) first = s;
  };
  const Status locked = with_owners_locked(ids.data(), ids.size(), [&](const ProbeId*, std::size_t) {
    if (on) note(tracepoint_install_batch(ids.data(), ids.size()));
    for (ProbeId id : ids) {
      Probe& p = g_probes[id];
      if (on) p.fn.store(fn, std::memory_order_release);
      note(toggle_locked(p, on, wp, &handles));
    }
    if (!handles.empty()) note(from_engine(wp.finish_patches(handles)));
    return Status::ok;
  });
  return locked != Status::ok ? locked : first;
}

}  // namespace
}  // namespace detail

using namespace detail;

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::ok: return "ok";
    case Status::unknown_id: return "unknown_id";
    case Status::bytes_changed: return "bytes_changed";
    case Status::outside_code: return "outside_code";
    case Status::not_writable: return "not_writable";
    case Status::out_of_range: return "out_of_range";
    case Status::busy: return "busy";
    case Status::bad_argument: return "bad_argument";
    case Status::unsupported: return "unsupported";
    case Status::table_full: return "table_full";
    case Status::engine_error: return "engine_error";
  }
  return "unknown";
}

Status on_discovery(DiscoveryFn cb, void* user) noexcept {
  std::uint32_t n = 0;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    g_discovery = cb;
    g_discovery_user = user;
    n = published_count();
  }
  if (cb == nullptr) return Status::ok;
  for (ProbeId id = 0; id < n; ++id) {
    ProbeInfo info;
    fill_info(id, &info);
    cb(info, user);
  }
  return Status::ok;
}

bool is_active(ProbeId id) noexcept {
  return valid(id) && g_probes[id].active.load(std::memory_order_acquire);
}

Status info(ProbeId id, ProbeInfo* out) noexcept {
  if (out == nullptr) return Status::bad_argument;
  if (!valid(id)) return Status::unknown_id;
  fill_info(id, out);
  return Status::ok;
}

std::size_t count() noexcept { return published_count(); }

std::uint64_t exit_hook_tsc() noexcept { return detail::thread_state().exit_tsc; }

// A hook dispatches only while in_hook is 0 (and sets it to 1 meanwhile), so a count here
// keeps every hook of the thread out; a hook that runs quiet_begin/end inside it finds
// its own 1 back.
void quiet_begin() noexcept { ++detail::thread_state().in_hook; }
void quiet_end() noexcept {
  unsigned& h = detail::thread_state().in_hook;
  if (h != 0) --h;
}

Status activate(ProbeId id, ProbeFn fn) noexcept {
  if (!valid(id)) return Status::unknown_id;
  if (fn == nullptr) return Status::bad_argument;
  Probe& p = g_probes[id];
  ProbeLock lock(code_owner(p));
  // Active -> active: only the function pointer changes, no code is written.
  p.fn.store(fn, std::memory_order_release);
  WordPatcher wp = make_patcher();
  return toggle_locked(p, true, wp, nullptr);
}

Status deactivate(ProbeId id) noexcept {
  if (!valid(id)) return Status::unknown_id;
  Probe& p = g_probes[id];
  ProbeLock lock(code_owner(p));
  WordPatcher wp = make_patcher();
  return toggle_locked(p, false, wp, nullptr);
}

Status set_strategy(ProbeId id, Strategy s) noexcept {
  if (!valid(id)) return Status::unknown_id;
  if (s != Strategy::callpatch && s != Strategy::wordpatch_sync && s != Strategy::wordpatch_async)
    return Status::bad_argument;
  Probe& p = code_owner(g_probes[id]);  // the strategy belongs to the site
  ProbeLock lock(p);
  if (p.prepare_status != Status::ok) return p.prepare_status;
  WordPatcher wp = make_patcher();
  if (Status st = finish_pending(p, wp); st != Status::ok) return st;
  if (p.form == Form::tailjmp || p.form == Form::tracepoint || s == p.strategy) {
    p.strategy = s;
    return Status::ok;
  }
  const bool on = p.code_on;
  const Bytes5 cur = state_bytes(p, on, p.strategy);
  const Bytes5 next = state_bytes(p, on, s);
  if (read5(p.site) != cur) return Status::bytes_changed;
  if (cur != next) {
    // One instruction (or a short jump over dead bytes) replaced by one instruction: the
    // layout-equivalence wordpatch needs; synchronous so the new strategy sees its form.
    if (Status st = from_engine(wp.patch(reinterpret_cast<void*>(p.site), next)); st != Status::ok)
      return st;
  }
  p.strategy = s;
  return Status::ok;
}

Status flush() noexcept {
  std::vector<ProbeId> ids;
  try {
    std::lock_guard<std::mutex> lock(g_pending_mutex);
    if (g_pending != nullptr) ids.swap(*g_pending);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  } catch (...) {
    return Status::engine_error;
  }
  if (ids.empty()) return Status::ok;
  std::vector<PatchHandle> handles;
  std::vector<ProbeId> owners;
  try {
    handles.reserve(ids.size());
    owners.reserve(ids.size());
  } catch (...) {
    return Status::engine_error;
  }
  for (ProbeId id : ids) ProbeLock::acquire(g_probes[id]);
  for (ProbeId id : ids) {
    Probe& p = g_probes[id];
    if (!p.has_pending) continue;
    handles.push_back(p.pending);
    owners.push_back(id);
    p.has_pending = false;
  }
  WordPatcher wp = make_patcher();
  const Status s = handles.empty() ? Status::ok : from_engine(wp.finish_patches(handles));
  for (std::size_t i = 0; i < owners.size(); ++i) g_probes[owners[i]].pending = handles[i];
  for (ProbeId id : ids) ProbeLock::release(g_probes[id]);
  return s;
}

Status activate_function(std::uintptr_t function, ProbeFn fn, std::size_t* toggled) noexcept {
  return batch([function](const Probe& p) { return p.function == function; }, true, fn, toggled);
}
Status deactivate_function(std::uintptr_t function, std::size_t* toggled) noexcept {
  return batch([function](const Probe& p) { return p.function == function; }, false, nullptr,
               toggled);
}
Status activate_matching(const char* pattern, ProbeFn fn, std::size_t* toggled) noexcept {
  if (pattern == nullptr) return Status::bad_argument;
  return batch([pattern](const Probe& p) { return fnmatch(pattern, p.name, 0) == 0; }, true, fn,
               toggled);
}
Status deactivate_matching(const char* pattern, std::size_t* toggled) noexcept {
  if (pattern == nullptr) return Status::bad_argument;
  return batch([pattern](const Probe& p) { return fnmatch(pattern, p.name, 0) == 0; }, false,
               nullptr, toggled);
}
Status activate_all(ProbeFn fn, std::size_t* toggled) noexcept {
  return batch([](const Probe&) { return true; }, true, fn, toggled);
}
Status deactivate_all(std::size_t* toggled) noexcept {
  return batch([](const Probe&) { return true; }, false, nullptr, toggled);
}

std::uint64_t wait_ticks() noexcept { return load_wait_ticks(); }

namespace {
Status many(const ProbeId* ids, std::size_t n, bool on, ProbeFn fn) noexcept {
  if ((ids == nullptr && n != 0) || (on && fn == nullptr)) return Status::bad_argument;
  std::vector<ProbeId> v;
  try {
    v.assign(ids, ids + n);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  } catch (...) {
    return Status::engine_error;
  }
  for (ProbeId id : v)
    if (!valid(id)) return Status::unknown_id;
  return batch_ids(v, on, fn);
}
}  // namespace

Status activate_many(const ProbeId* ids, std::size_t n, ProbeFn fn) noexcept {
  return many(ids, n, true, fn);
}

Status retract_many(const ProbeId* ids, std::size_t n, std::size_t* removed) noexcept {
  std::size_t count = 0;
  const Status s = with_owners_locked(ids, n, [&count](const ProbeId* v, std::size_t k) {
    return tracepoint_remove_batch(v, k, &count);
  });
  if (removed != nullptr) *removed = count;
  return s;
}

Status install_many(const ProbeId* ids, std::size_t n) noexcept {
  return with_owners_locked(ids, n, [](const ProbeId* v, std::size_t k) { return tracepoint_install_batch(v, k); });
}
Status deactivate_many(const ProbeId* ids, std::size_t n) noexcept {
  return many(ids, n, false, nullptr);
}

Status set_wait_ticks(std::uint64_t ticks) noexcept {
  if (ticks == 0) return Status::bad_argument;
  g_wait_ticks.store(ticks, std::memory_order_release);
  return Status::ok;
}

Status register_entry_site(void* site, std::uintptr_t function, const char* name,
                           ProbeId* out) noexcept {
  if (site == nullptr || out == nullptr) return Status::bad_argument;
  const auto a = reinterpret_cast<std::uintptr_t>(site);
  std::uint32_t id = kNone;
  Status s = Status::ok;
  {
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    if (const std::uint32_t existing = find_site(a); existing != kNone) {
      *out = existing;
      return Status::ok;
    }
    Status ts = Status::ok;
    NewProbe np;
    np.site = a;
    np.function = function != 0 ? function : a;
    np.name = name != nullptr ? intern(name) : "?";
    np.provider = Provider::manual;
    np.kind = Kind::entry;
    np.form = Form::call;
    // Only a site that is inside known code or engine-writable memory gets a thunk.
    Segment* seg = nullptr;
    if (object_for_code(a, x86::kCallLen, &seg) == nullptr && !is_writable(site, x86::kCallLen))
      return Status::outside_code;
    np.call_target = entry_trampoline_near(a, &ts);
    if (ts != Status::ok) return ts;
    id = register_probe_locked(np, &s);
  }
  if (id == kNone) return s;
  *out = id;
  announce(id);
  return g_probes[id].prepare_status;
}

}  // namespace crossmod::probes

extern "C" char crossmod_probes_exit_trampoline[];  // trampoline_x86_64.S
// tracepoint_exit_x86_64.S: saves every caller-saved register (code nobody rebuilt).
extern "C" char crossmod_probes_exit_trampoline_full[];

bool crossmod::probes::detail::is_exit_trampoline(std::uintptr_t a) noexcept {
  return a == reinterpret_cast<std::uintptr_t>(crossmod_probes_exit_trampoline) ||
         a == reinterpret_cast<std::uintptr_t>(crossmod_probes_exit_trampoline_full);
}

// The shared trampoline's C side. `ret` is the return address the site's call pushed;
// `slot` the instrumented function's own return-address slot (the site is its first
// instruction). Invocation path: no allocation, no lock (one wait-free map lookup,
// atomics, TLS).
extern "C" __attribute__((visibility("hidden"))) void crossmod_probes_entry_dispatch(
    std::uintptr_t ret, std::uintptr_t* slot) noexcept {
  using namespace crossmod::probes::detail;
  ThreadState& ts = thread_state();
  if (ts.in_hook != 0) return;
  ts.in_hook = 1;
  const std::uint64_t tsc = crossmod::x86::rdtsc();
  const std::uint32_t id = find_site(ret - crossmod::x86::kCallLen);
  if (id < crossmod::probes::kMaxProbes) {
    Probe& p = probe(id);
    if (p.active.load(std::memory_order_acquire)) {
      if (const auto fn = p.fn.load(std::memory_order_acquire)) fn(id, tsc);
    }
    const std::uint32_t x = p.partner;
    if (x < crossmod::probes::kMaxProbes && probe(x).active.load(std::memory_order_acquire)) {
      // Exit probe: redirect the function's return through the exit trampoline. First
      // drop frames at or below this slot: they belong to calls that never returned
      // through us (longjmp, or an exception that unwound them). Except when the slot
      // still returns through us: a redirected function tail-called this one (`jmp`), so
      // its frame at the same slot is live and ours chains above it (the trampoline runs
      // twice at that return).
      const auto s = reinterpret_cast<std::uintptr_t>(slot);
      const auto partial = reinterpret_cast<std::uintptr_t>(crossmod_probes_exit_trampoline);
      const auto full = reinterpret_cast<std::uintptr_t>(crossmod_probes_exit_trampoline_full);
      // Only records within kSameStackSpan below the slot: a record farther away is taken
      // for a frame on another stack (a coroutine, swapcontext), still live (see
      // kSameStackSpan), and it and the records under it stay.
      const bool chained = is_exit_trampoline(*slot);
      while (ts.ret_depth > 0) {
        const std::uintptr_t top = ts.rets[ts.ret_depth - 1].slot;
        if (top < s ? s - top > kSameStackSpan : (top != s || chained)) break;
        --ts.ret_depth;
      }
      if (ts.ret_depth < kRetDepth) {
        ts.rets[ts.ret_depth++] = {s, *slot, tsc, x};
        *slot = p.provider == crossmod::probes::Provider::tracepoint ? full : partial;
      }
    }
  }
  ts.in_hook = 0;
}

// The exit trampoline's C side: `entry_rsp` is rsp as the instrumented function returned
// into the trampoline (its slot + 8). Returns where the function really returns to.
// Invocation path: no allocation, no lock.
extern "C" __attribute__((visibility("hidden"))) std::uintptr_t crossmod_probes_exit_dispatch(
    std::uintptr_t entry_rsp) noexcept {
  using namespace crossmod::probes::detail;
  const std::uint64_t exit_tsc = crossmod::x86::rdtsc();
  ThreadState& ts = thread_state();
  const std::uintptr_t slot = entry_rsp - sizeof(std::uintptr_t);
  // Ours is the newest record of this slot. The records above it are frames that longjmp
  // skipped on this stack (deeper, within kSameStackSpan: dropped) or frames of other stacks
  // (kept: a coroutine that called into ours and switched back, its own calls still live).
  unsigned k = ts.ret_depth;
  while (k > 0 && ts.rets[k - 1].slot != slot) --k;
  if (k == 0) {
    // No record of this return: the shadow stack was corrupted. Nothing safe to return
    // to; say so with write(2) (async-signal-safe) and abort.
    static const char msg[] = "crossmod probes: exit trampoline without a frame; aborting\n";
    (void)!::write(2, msg, sizeof msg - 1);
    std::abort();
  }
  const RetFrame f = ts.rets[k - 1];
  unsigned kept = k - 1;
  for (unsigned i = k; i < ts.ret_depth; ++i) {
    const std::uintptr_t r = ts.rets[i].slot;
    if (r < slot && slot - r <= kSameStackSpan) continue;
    ts.rets[kept++] = ts.rets[i];
  }
  ts.ret_depth = kept;
  if (ts.in_hook == 0) {
    ts.in_hook = 1;
    Probe& x = probe(f.exit_id);
    if (x.active.load(std::memory_order_acquire)) {
      ts.exit_tsc = exit_tsc;
      if (const auto fn = x.fn.load(std::memory_order_acquire)) fn(f.exit_id, f.tsc);
      ts.exit_tsc = 0;
    }
    ts.in_hook = 0;
  }
  return f.ret;
}
