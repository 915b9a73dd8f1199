// The engine's SIGTRAP handler and the lock-free site table it shares with wordpatch: an
// executor that traps on a locked site's int3 waits until that lock is released, then
// re-executes the site; every other trap is chained to the previous disposition.
// Thread safety: install() is thread-safe and idempotent; the handler and every site_*
// function are async-signal-safe (lock-free atomics on a static table, no allocation,
// errno saved and restored). The table holds 16384 distinct sites per process.
// A separate table holds redirect sites (tracepoints' embedded int3s, trap.hpp).
#include "crossmod/trap.hpp"

#include <sched.h>
#include <signal.h>
#include <ucontext.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "crossmod/x86.hpp"
#include "site_table.hpp"

namespace crossmod {

namespace {

// ---- site table -------------------------------------------------------------------------
// Open addressing with linear probing. An address, once written into a slot, is never
// removed (no tombstones needed, and a late trap after the unlock still finds it), so a
// probe for `a` can stop at the first empty slot. 16384 sites per process.
inline constexpr std::size_t kSiteBits = 14;
inline constexpr std::size_t kSiteSlots = std::size_t{1} << kSiteBits;

// `word` packs the state (detail::SiteState, low 2 bits) with a generation counter that
// every unlock increments. A waiting executor waits for the word to CHANGE, not for the
// state to read "unlocked": a patcher that re-locks the site ~100 ns after unlocking it
// would otherwise starve a spinning executor forever (observed on this machine: one
// executor parked for 20000 consecutive patches before this counter existed).
struct SiteSlot {
  std::atomic<std::uintptr_t> addr{0};
  std::atomic<std::uint64_t> word{0};
};
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
SiteSlot g_sites[kSiteSlots];

inline std::size_t site_hash(std::uintptr_t a) noexcept {
  return static_cast<std::size_t>((a * 0x9E3779B97F4A7C15ull) >> (64 - kSiteBits));
}

// Index of the slot holding `a`, or -1. Async-signal-safe.
long find_site(std::uintptr_t a) noexcept {
  const std::size_t h = site_hash(a);
  for (std::size_t i = 0; i < kSiteSlots; ++i) {
    const std::size_t idx = (h + i) & (kSiteSlots - 1);
    const std::uintptr_t cur = g_sites[idx].addr.load(std::memory_order_acquire);
    if (cur == a) return static_cast<long>(idx);
    if (cur == 0) return -1;
  }
  return -1;
}

constexpr auto kLocked = static_cast<std::uint64_t>(detail::SiteState::locked);
constexpr auto kUnlocked = static_cast<std::uint64_t>(detail::SiteState::unlocked);
constexpr std::uint64_t kStateMask = 3;
constexpr std::uint64_t kGenerationStep = 4;
inline std::uint64_t state_of(std::uint64_t word) noexcept { return word & kStateMask; }

// ---- redirect sites (trap.hpp "Redirect sites") -----------------------------------------
// Same scheme as the site table: open addressing, linear probing, addresses never removed,
// so a probe stops at the first empty slot. `to` is published with release after `from`
// is claimed; the handler reads it with acquire, so it sees a complete target.
//
// `changes` counts every set and clear of the slot. A handler that sees no target and an
// int3 still in place must know whether the site is simply foreign or was re-registered
// meanwhile: between its read of `to` and its read of the byte, the owner may have removed
// and reinstalled the tracepoint (observed: the install/remove stress died of a chained
// SIGTRAP about once in six runs before this counter existed). Stores happen in program
// order on x86 (SDM Vol 3A 9.2.2) and set_redirect increments before the owner writes its
// int3, so a handler that reads that int3 also reads the new count and looks again.
struct RedirectSlot {
  std::atomic<std::uintptr_t> from{0};
  std::atomic<std::uintptr_t> to{0};
  std::atomic<std::uint64_t> changes{0};
};
inline constexpr std::size_t kRedirectBits = 19;
static_assert((std::size_t{1} << kRedirectBits) == trap::kRedirectSlots);
alignas(4096) RedirectSlot g_redirects[trap::kRedirectSlots];
// Slots ever claimed. While none is, redirect_target need not read the table: a
// tracepoint layer asks it for every function it prepares, and each lookup of the
// scattering hash read another page of the 1.5 MB table (python3 --trace 'Py*': ~360 page
// faults before the program's first instruction).
std::atomic<std::uint64_t> g_redirect_claims{0};
std::atomic<std::uint64_t> g_redirected{0};
std::atomic<std::uint64_t> g_reexecuted{0};

// Page-local, like the probes' site map: the redirects of one 16 KiB of code share a block
// of 256 slots (6 KiB of the table), chosen by a multiplicative hash of a >> 14; bits 6..13
// pick the slot, so a tracepoint's few boundaries (within 8 bytes) and its neighbours' lie
// on adjacent slots. Installing python3's 918 'Py*' tracepoints with a scattering hash
// wrote ~750 pages of the table, each a page fault (perf record -e page-faults).
inline std::size_t redirect_hash(std::uintptr_t a) noexcept {
  constexpr unsigned kBlockBits = kRedirectBits - 8;
  const auto block = static_cast<std::size_t>(((a >> 14) * 0x9E3779B97F4A7C15ull) >> (64 - kBlockBits));
  return (block << 8) | static_cast<std::size_t>((a >> 6) & 0xFF);
}

// Slot holding `a` (claiming an empty one when `claim`), or nullptr. Async-signal-safe.
RedirectSlot* find_redirect(std::uintptr_t a, bool claim) noexcept {
  const std::size_t h = redirect_hash(a);
  for (std::size_t i = 0; i < trap::kRedirectProbe; ++i) {
    RedirectSlot& slot = g_redirects[(h + i) & (trap::kRedirectSlots - 1)];
    std::uintptr_t cur = 0;
    if (claim) {
      // The exchange reads the slot too (cur: its key when taken): a page of the table is
      // first touched by a write, one page fault instead of a read fault and a write fault.
      if (slot.from.compare_exchange_strong(cur, a, std::memory_order_acq_rel)) {
        g_redirect_claims.fetch_add(1, std::memory_order_release);
        return &slot;
      }
    } else {
      cur = slot.from.load(std::memory_order_acquire);
      if (cur == 0) return nullptr;
    }
    if (cur == a) return &slot;
  }
  return nullptr;
}

// True when the trap at `pc` was a redirect site and `uc` now resumes where it must.
bool try_redirect(std::uintptr_t pc, ucontext_t* uc) noexcept {
  RedirectSlot* slot = find_redirect(pc, false);
  if (slot == nullptr) return false;
  for (;;) {
    const std::uint64_t before = slot->changes.load(std::memory_order_acquire);
    const std::uintptr_t to = slot->to.load(std::memory_order_acquire);
    if (to != 0) {
      uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(to);
      g_redirected.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    // Cleared: the original byte is back (the int3 was fetched before it was restored),
    // or someone else owns an int3 here now, or the site was re-registered meanwhile.
    if (*reinterpret_cast<volatile const std::uint8_t*>(pc) != x86::kInt3) {
      uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(pc);
      g_reexecuted.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (slot->changes.load(std::memory_order_acquire) == before) return false;
  }
}

// ---- handler state ----------------------------------------------------------------------
std::atomic<std::uint64_t> g_locked_hits{0};
std::atomic<std::uint64_t> g_late_hits{0};
std::atomic<std::uint64_t> g_chained{0};
std::atomic<std::uint64_t> g_waiters{0};
std::atomic<bool> g_installed{false};
struct sigaction g_prev;  // written once before the handler is installed, then read-only

// A waiting executor spins with PAUSE; after this many spins it also yields, so that on an
// oversubscribed machine the patcher it waits for can run (sched_yield is a plain system
// call with no user-space state; not on the POSIX list, safe on Linux).
inline constexpr unsigned kSpinsBeforeYield = 1u << 12;

void chain(int sig, siginfo_t* info, void* ctx) noexcept {
  const struct sigaction& prev = g_prev;
  if ((prev.sa_flags & SA_SIGINFO) != 0) {
    if (prev.sa_sigaction != nullptr) prev.sa_sigaction(sig, info, ctx);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL) {
    // Default action for SIGTRAP is to terminate with a core dump. SIGTRAP is blocked while
    // this handler runs, so the raised signal is delivered with SIG_DFL as we return.
    struct sigaction dfl;
    std::memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGTRAP, &dfl, nullptr);
    raise(SIGTRAP);
    return;
  }
  prev.sa_handler(sig);
}

void on_sigtrap(int sig, siginfo_t* info, void* ctx) {
  const int saved_errno = errno;
  auto* uc = static_cast<ucontext_t*>(ctx);
  // Linux reports INT3 with si_code SI_KERNEL (TRAP_BRKPT accepted too). kill/tgkill/
  // sigqueue (codes <= 0) and single-step or hardware-breakpoint traps (TRAP_TRACE,
  // TRAP_HWBKPT, whose RIP-1 is not an int3) are never the engine's.
  const bool kernel_trap =
      info != nullptr && (info->si_code == SI_KERNEL || info->si_code == TRAP_BRKPT);
  if (kernel_trap && uc != nullptr) {
    // After INT3 (a trap, SDM Vol 3A 6.5) RIP points past the 1-byte instruction.
    const auto pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]) - 1;
    const long idx = find_site(pc);
    if (idx >= 0) {
      SiteSlot& slot = g_sites[idx];
      for (;;) {
        // Acquire pairs with the release in site_unlock(): once unlocked is seen, the front
        // store that replaced the int3 is visible too.
        const std::uint64_t w = slot.word.load(std::memory_order_acquire);
        const std::uint64_t st = state_of(w);
        if (st == kLocked) {
          g_waiters.fetch_add(1, std::memory_order_relaxed);
          unsigned spins = 0;
          // Until this lock is released (generation changes), even if re-locked since.
          while (slot.word.load(std::memory_order_acquire) == w) {
            x86::pause();
            if (++spins % kSpinsBeforeYield == 0) sched_yield();
          }
          g_waiters.fetch_sub(1, std::memory_order_relaxed);
          uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(pc);  // re-execute the site
          g_locked_hits.fetch_add(1, std::memory_order_relaxed);
          errno = saved_errno;
          return;
        }
        if (st != kUnlocked) break;  // claimed, but no int3 written yet: not ours
        const std::uint8_t now = *reinterpret_cast<volatile const std::uint8_t*>(pc);
        // A new patch may have locked the site between the two reads: look again.
        if (slot.word.load(std::memory_order_acquire) != w) continue;
        if (now == x86::kInt3) break;  // someone else's int3 at a former site
        // The int3 was fetched before the front store landed (or was still held by this
        // core): re-execute the now-complete instruction.
        uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(pc);
        g_late_hits.fetch_add(1, std::memory_order_relaxed);
        errno = saved_errno;
        return;
      }
    }
  }
  if (kernel_trap && uc != nullptr &&
      try_redirect(static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]) - 1, uc)) {
    errno = saved_errno;
    return;
  }
  g_chained.fetch_add(1, std::memory_order_relaxed);
  chain(sig, info, ctx);
  errno = saved_errno;
}

struct InstallResult {
  Status status = Status::ok;
  int err = 0;
};

InstallResult do_install() noexcept {
  // Read the previous disposition first so g_prev is complete before any trap can reach
  // our handler.
  if (sigaction(SIGTRAP, nullptr, &g_prev) != 0) return {Status::os_error, errno};
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigtrap;
  sigemptyset(&sa.sa_mask);
  // No SA_NODEFER: the handler itself never executes an int3, and a nested SIGTRAP would
  // mean a bug that is better reported by the kernel than recursed into.
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  if (sigaction(SIGTRAP, &sa, nullptr) != 0) return {Status::os_error, errno};
  g_installed.store(true, std::memory_order_release);
  return {};
}

}  // namespace

namespace trap {

Status install(std::error_code* ec) noexcept {
  static const InstallResult result = do_install();
  if (ec != nullptr)
    *ec = result.err != 0 ? std::error_code(result.err, std::generic_category())
                          : std::error_code();
  return result.status;
}

bool installed() noexcept { return g_installed.load(std::memory_order_acquire); }

Stats stats() noexcept {
  return {g_locked_hits.load(std::memory_order_relaxed),
          g_late_hits.load(std::memory_order_relaxed),
          g_chained.load(std::memory_order_relaxed)};
}

Status redirect_set(std::uintptr_t from, std::uintptr_t to) noexcept {
  if (from == 0 || to == 0) return Status::bad_address;
  RedirectSlot* slot = find_redirect(from, true);
  if (slot == nullptr) return Status::table_full;
  slot->to.store(to, std::memory_order_release);
  // Locked RMW: a full barrier, so the caller's int3 store that follows cannot become
  // visible before the new count (pairs with the acquire loads in try_redirect).
  slot->changes.fetch_add(1, std::memory_order_seq_cst);
  return Status::ok;
}

Status redirect_clear(std::uintptr_t from) noexcept {
  RedirectSlot* slot = find_redirect(from, false);
  if (slot == nullptr) return Status::not_found;
  slot->to.store(0, std::memory_order_release);
  slot->changes.fetch_add(1, std::memory_order_seq_cst);
  return Status::ok;
}

std::uintptr_t redirect_target(std::uintptr_t from) noexcept {
  if (g_redirect_claims.load(std::memory_order_acquire) == 0) return 0;
  const RedirectSlot* slot = find_redirect(from, false);
  return slot == nullptr ? 0 : slot->to.load(std::memory_order_acquire);
}

RedirectStats redirect_stats() noexcept {
  return {g_redirected.load(std::memory_order_relaxed),
          g_reexecuted.load(std::memory_order_relaxed)};
}

}  // namespace trap

namespace detail {

Status site_lock(std::uintptr_t addr) noexcept {
  if (addr == 0) return Status::bad_address;
  const std::size_t h = site_hash(addr);
  for (std::size_t i = 0; i < kSiteSlots; ++i) {
    SiteSlot& slot = g_sites[(h + i) & (kSiteSlots - 1)];
    std::uintptr_t cur = slot.addr.load(std::memory_order_acquire);
    if (cur == 0) {
      // Two patchers inserting the same address race for the same first empty slot in the
      // same probe order; the loser reads the winner's address and joins it below.
      if (slot.addr.compare_exchange_strong(cur, addr, std::memory_order_acq_rel))
        cur = addr;
    }
    if (cur != addr) continue;
    std::uint64_t w = slot.word.load(std::memory_order_acquire);
    for (;;) {
      if (state_of(w) == kLocked) return Status::busy;
      // Locked CAS: a full barrier, so the int3 store that follows in wordpatch cannot
      // become visible before the lock (pairs with the acquire loads in on_sigtrap).
      if (slot.word.compare_exchange_weak(w, (w & ~kStateMask) | kLocked,
                                          std::memory_order_seq_cst))
        return Status::ok;
    }
  }
  return Status::table_full;
}

void site_unlock(std::uintptr_t addr) noexcept {
  const long idx = find_site(addr);
  if (idx < 0) return;
  // Release pairs with the acquire in on_sigtrap: the front store is ordered before it.
  // Only the lock holder writes the word while it is locked, so a plain store suffices.
  std::atomic<std::uint64_t>& word = g_sites[idx].word;
  const std::uint64_t w = word.load(std::memory_order_relaxed);
  word.store(((w & ~kStateMask) + kGenerationStep) | kUnlocked, std::memory_order_release);
}

SiteState site_state(std::uintptr_t addr) noexcept {
  const long idx = find_site(addr);
  if (idx < 0) return SiteState::absent;
  const std::uint64_t st = state_of(g_sites[idx].word.load(std::memory_order_acquire));
  return st == kLocked ? SiteState::locked
                       : st == kUnlocked ? SiteState::unlocked : SiteState::absent;
}

std::uint64_t trap_waiters() noexcept { return g_waiters.load(std::memory_order_relaxed); }

}  // namespace detail

}  // namespace crossmod
