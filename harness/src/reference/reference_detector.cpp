// Reference detector (see reference_detector.hpp). One run = one forked child:
//   patcher (main thread, pinned) toggles the site; N executors (pinned) call it in the
//   loop of ref_x86.cpp; SIGILL/SIGSEGV/SIGBUS/SIGTRAP go to on_signal() below.
// Signal safety: on_signal() reads a byte of code, does relaxed atomic loads/stores and
// fetch_or on preallocated MAP_SHARED memory, edits the ucontext and returns; errno is
// saved. No locks, no allocation, no libc calls but sigaction/raise on the crash path.
//
// Site layout (one RWX page inside a ~1.9 GiB PROT_NONE reservation):
//   page offset 2048 is a line boundary L; the site is the 5 bytes [L-S, L+5-S), followed by
//   C3 (ret); every other byte of the page is 06 (#UD in 64-bit mode). The executor calls
//   the site itself (there is no prologue: eax is zeroed by the loop), so A returns 1 from
//   the stub B8 01 00 00 00 C3 at site+5+rel32 (an R-X page) and B returns 0.
//   All torn "A front + B back" calls land ~1.75 GiB below the site, inside the
//   reservation, and fault with SIGSEGV; "B front + A back" is #UD.
//
// Exposure rule: toggle i is exposed if some executor (a) trapped on its int3, (b) faulted
// during it, or (c) completed a call on the new bytes between the front store and the
// middle of the dwell. For (c) the patcher reads every executor's published word
// (executions << 1 | eax of its last call) once per toggle, at the middle of the dwell,
// half a dwell away from any store to the site: the word changed since the previous read
// and shows the state toggle i wrote. (a) matters: an executor that traps spends longer
// in signal delivery than half a 5000-tick dwell on this KVM guest, so it completes its
// first new call after the read, yet it fetched the site in the patch window and re-ran
// it right after the front store, the moment a stale line would tear.
//
// What differs from the harness's cell on purpose (so a gap between the two points at one
// of these): the back part is bytes 1..4 in one plain 4-byte store across the boundary
// and the front is byte 0 alone, all plain MOVs (the engine: int3 by MOV, then bytes S..4, then bytes
// 0..S-1, each a LOCK CMPXCHG on a quadword); the handler waits on the code byte itself, not on a lock table,
// never yields, and resumes the asm loop in place; the executor loop reads nothing the
// patcher writes (no per-call toggle_seq load) and stores only to its own line; the
// patcher reads executors' lines once per toggle at mid-dwell (the cell reads them twice
// there); the dwell is fixed (no adaptation).
// The site was once on this list: cells reached it by falling through from an `xor eax,eax`
// in its first line, and on the Xeon guest saw 16x fewer tears than this detector at
// calibrate's dwell. They now call it too (executor.cpp, CellSpec::site_entry).
//
// Attribution: the patcher stores the toggle number on a line of its own just before the
// int3 store; the handler reads it on entry, before waiting, and sets that toggle's bit in
// a shared bitmap. Executors never read that line on the fast path, so the store stays in
// the patcher's cache and does not touch the executors. (Storing it at mid-dwell instead
// was tried first: under KVM a trap's signal can arrive more than half a dwell after the
// int3, so two traps were charged to one toggle and traps per exposed toggle read 1.6.)
#include "reference/reference_detector.hpp"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#include "reference/ref_x86.hpp"

namespace crossmod::harness::reference {

static_assert(kStopCheckEvery == 64, "ref_x86.cpp tests the low 6 bits of the call count");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::uint8_t>::is_always_lock_free,
              "touched in the signal handler and shared with the parent across fork");

namespace {

constexpr std::uintptr_t kPage = 4096;
// Where the line boundary sits in the site page: far from both page edges.
constexpr std::uintptr_t kBoundaryInPage = 2048;
// PROT_NONE below the site page. The torn calls land at site + 5 + sext(rel32') with
// rel32' = 0x90xxxxxx (B's last byte 0x90 on top), i.e. 1.74..1.75 GiB below the site.
constexpr std::uintptr_t kBelow = 0x7000'0000;
// Above the site page: rel32 of A is 0x06161E0E (~98 MiB), plus two stub pages.
constexpr std::uintptr_t kAbove = 0x0620'0000;
// Test-only torn mode: longest hold of one torn mix (~4 s at 2.6 GHz).
constexpr std::uint64_t kTornHoldTicks = 10'000'000'000;

std::uint32_t rel32_of(const std::uint8_t* b) {
  return static_cast<std::uint32_t>(b[1]) | static_cast<std::uint32_t>(b[2]) << 8 |
         static_cast<std::uint32_t>(b[3]) << 16 | static_cast<std::uint32_t>(b[4]) << 24;
}

std::uintptr_t call_target(std::uintptr_t at, const std::uint8_t* b) {
  const auto disp = static_cast<std::int64_t>(static_cast<std::int32_t>(rel32_of(b)));
  return at + 5 + static_cast<std::uintptr_t>(disp);
}

bool invalid_in_64(std::uint8_t op) {
  // One-byte opcodes that are #UD in 64-bit mode (SDM Vol 2D A.3, "i64"): PUSH/POP of
  // ES/CS/SS/DS, DAA/DAS/AAA/AAS. (Only these are needed for the rel32 bytes of A.)
  switch (op) {
    case 0x06: case 0x07: case 0x0E: case 0x16: case 0x17: case 0x1E: case 0x1F:
    case 0x27: case 0x2F: case 0x37: case 0x3F:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string check_torn_mixes(unsigned s, std::uintptr_t site, std::uintptr_t none_begin,
                             std::uintptr_t none_end) {
  if (s < 1 || s > 4) return fmt::format("straddle {} is not in 1..4", s);
  std::uint8_t ab[5], ba[5];  // A front + B back, B front + A back
  for (unsigned i = 0; i < 5; ++i) {
    ab[i] = i < s ? kStateA[i] : kStateB[i];
    ba[i] = i < s ? kStateB[i] : kStateA[i];
  }
  // A and B must differ on both sides of the boundary, or a tear changes nothing.
  bool front_differs = false, back_differs = false;
  for (unsigned i = 0; i < 5; ++i) (i < s ? front_differs : back_differs) |= kStateA[i] != kStateB[i];
  if (!front_differs || !back_differs) return fmt::format("S={}: A and B do not differ on both sides", s);
  const std::uintptr_t t = call_target(site, ab);
  if (ab[0] != kOpCallRel32 || t < none_begin || t + 6 > none_end) {
    return fmt::format("S={}: A front + B back calls {:#x}, outside the PROT_NONE window", s, t);
  }
  unsigned k = 0;
  while (k < 5 && ba[k] == kOpOperandSize) ++k;  // prefixes only change operand size
  if (k == 5 || !invalid_in_64(ba[k])) {
    return fmt::format("S={}: B front + A back is not #UD at its first opcode", s);
  }
  return "";
}

namespace {

enum ChildState : int { kNone = 0, kOk = 1, kError = 2 };

// Executor -> patcher, read once per toggle. One line each.
struct alignas(64) PublishedSlot {
  std::uint64_t word = 0;  // written by the loop's plain MOV; read with an atomic_ref
};
// Executor (and its handler) -> parent, after the run. One line each.
struct alignas(64) ExecCounters {
  std::atomic<std::uint64_t> sigill{0}, sigsegv{0}, sigbus{0}, stray_trap{0}, traps{0};
  std::atomic<std::uint64_t> executions{0}, state_a{0};
};
// Patcher -> parent.
struct alignas(64) Header {
  std::atomic<std::uint64_t> toggles{0};
  std::atomic<int> state{kNone};
  char note[256] = {};
  char phase[64] = {};
};

// One MAP_SHARED block, created before fork so it outlives a crashed child:
//   Header | PublishedSlot[n] | ExecCounters[n] | failed | exposed | trapped bits
struct Block {
  void* mem = nullptr;
  std::size_t bytes = 0;
  Header* header = nullptr;
  PublishedSlot* slots = nullptr;
  ExecCounters* counters = nullptr;
  std::atomic<std::uint64_t>* failed = nullptr;
  std::atomic<std::uint64_t>* exposed = nullptr;  // (c), by the patcher
  std::atomic<std::uint64_t>* trapped = nullptr;  // (a), by the handler
  std::size_t words = 0;

  bool create(unsigned n, std::uint64_t toggles) {
    words = static_cast<std::size_t>(toggles / 64 + 1);
    const std::size_t bits_bytes = (words * 8 + 63) / 64 * 64;
    bytes = sizeof(Header) + n * (sizeof(PublishedSlot) + sizeof(ExecCounters)) + 3 * bits_bytes;
    mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      mem = nullptr;
      return false;
    }
    auto* p = static_cast<std::uint8_t*>(mem);
    header = new (p) Header();
    p += sizeof(Header);
    slots = reinterpret_cast<PublishedSlot*>(p);
    for (unsigned i = 0; i < n; ++i) new (&slots[i]) PublishedSlot();
    p += n * sizeof(PublishedSlot);
    counters = reinterpret_cast<ExecCounters*>(p);
    for (unsigned i = 0; i < n; ++i) new (&counters[i]) ExecCounters();
    p += n * sizeof(ExecCounters);
    failed = reinterpret_cast<std::atomic<std::uint64_t>*>(p);
    exposed = reinterpret_cast<std::atomic<std::uint64_t>*>(p + bits_bytes);
    trapped = reinterpret_cast<std::atomic<std::uint64_t>*>(p + 2 * bits_bytes);
    for (std::size_t i = 0; i < words; ++i) {
      new (&failed[i]) std::atomic<std::uint64_t>(0);
      new (&exposed[i]) std::atomic<std::uint64_t>(0);
      new (&trapped[i]) std::atomic<std::uint64_t>(0);
    }
    return true;
  }
  ~Block() {
    if (mem) munmap(mem, bytes);
  }
};

void set_text(char* dst, std::size_t cap, const std::string& s) {
  const std::size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// ---- the child's globals: set before any executor starts, read-only afterwards ----------

std::uint8_t* g_site = nullptr;
std::uintptr_t g_res_begin = 0, g_res_end = 0;
std::atomic<std::uint64_t>* g_failed = nullptr;
std::atomic<std::uint64_t>* g_trapped = nullptr;
std::uint64_t g_last_toggle = 0;
// The toggle that traps and faults are charged to; the patcher's own line.
alignas(64) std::atomic<std::uint64_t> g_current_toggle{0};

std::uint64_t current_toggle() {
  return std::min(g_current_toggle.load(std::memory_order_relaxed), g_last_toggle);
}
void mark(std::atomic<std::uint64_t>* bits, std::uint64_t k) {
  bits[k / 64].fetch_or(std::uint64_t{1} << (k % 64), std::memory_order_relaxed);
}
alignas(64) std::uint8_t g_stop_line[64] = {};  // [0] != 0: executors leave their loops

struct ExecThread {
  LoopArgs args;
  ExecCounters* counters = nullptr;
};
// initial-exec: reading it in the handler never allocates (the harness is linked into
// the executable, so the slot is in the static TLS block).
__attribute__((tls_model("initial-exec"))) thread_local ExecThread* tls_exec = nullptr;

void bump(std::atomic<std::uint64_t>& c) {  // single writer: no locked op needed
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void die_with(int sig) {
  // Not an executor fault inside the reservation: a bug or a wild jump. Take the default
  // action so the child dies and the parent records a crash.
  struct sigaction sa {};
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  sigaction(sig, &sa, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
}

void on_signal(int sig, siginfo_t*, void* ucv) {
  const int saved_errno = errno;
  auto* uc = static_cast<ucontext_t*>(ucv);
  const auto rip = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  ExecThread* t = tls_exec;
  const auto site = reinterpret_cast<std::uintptr_t>(g_site);
  const std::uint64_t toggle = current_toggle();
  // int3 is a trap: RIP points after it (SDM Vol 3A 6.5).
  if (t != nullptr && sig == SIGTRAP && rip - 1 == site) {
    // The site is locked (or was, a moment ago): wait until the front store replaces the
    // int3, then run the site again on whatever bytes are there.
    while (load1(g_site) == kOpInt3) cpu_pause();
    uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(site);
    bump(t->counters->traps);
    mark(g_trapped, toggle);
    errno = saved_errno;
    return;
  }
  if (t == nullptr || rip < g_res_begin || rip >= g_res_end) {
    errno = saved_errno;
    die_with(sig);
    return;
  }
  // A tear: count it, charge it to the current toggle, and resume the loop at its
  // recovery point with the loop's stack pointer (a torn call has pushed a return address).
  switch (sig) {
    case SIGILL: bump(t->counters->sigill); break;
    case SIGSEGV: bump(t->counters->sigsegv); break;
    case SIGBUS: bump(t->counters->sigbus); break;
    default: bump(t->counters->stray_trap); break;
  }
  mark(g_failed, toggle);
  uc->uc_mcontext.gregs[REG_RSP] = static_cast<greg_t>(t->args.loop_rsp);
  uc->uc_mcontext.gregs[REG_RIP] = reinterpret_cast<greg_t>(crossmod_ref_recover);
  errno = saved_errno;
}

bool pin_self(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// ---- the child -------------------------------------------------------------------------

class Child {
 public:
  Child(const Spec& spec, Block* b) : spec_(spec), b_(b) {}

  [[noreturn]] void run() {
    struct rlimit no_core {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // tears that escape the handler are results
    std::string err = body();
    stop_executors();
    if (!err.empty()) set_text(b_->header->note, sizeof b_->header->note, err);
    b_->header->state.store(err.empty() ? kOk : kError, std::memory_order_release);
    _exit(0);
  }

 private:
  void phase(const char* p) { set_text(b_->header->phase, sizeof b_->header->phase, p); }

  std::string map_site() {
    const unsigned line = line_size();
    if (kBoundaryInPage % line != 0) return fmt::format("line size {} does not divide {}", line, kBoundaryInPage);
    const std::size_t size = kBelow + kPage + kAbove;
    void* r = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return fmt::format("reserve {} bytes: {}", size, std::strerror(errno));
    g_res_begin = reinterpret_cast<std::uintptr_t>(r);
    g_res_end = g_res_begin + size;
    const std::uintptr_t page = g_res_begin + kBelow;
    // RWX: the patcher writes the page the executors run. Only the permissions differ from
    // a RW->RX scheme; cross-modification is detected by physical address either way.
    void* p = mmap(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p == MAP_FAILED) return fmt::format("map the site page: {}", std::strerror(errno));
    std::memset(p, kOpInvalidFill, kPage);
    g_site = reinterpret_cast<std::uint8_t*>(page + kBoundaryInPage - spec_.straddle);
    std::memcpy(g_site, kStateA.data(), 5);
    g_site[5] = kOpRet;
    if (spec_.fall_through) {
      g_site[-2] = 0x31;  // xor eax, eax
      g_site[-1] = 0xC0;
    }

    const std::uintptr_t stub = call_target(reinterpret_cast<std::uintptr_t>(g_site), kStateA.data());
    const std::uintptr_t stub_page = stub & ~(kPage - 1);
    if (stub_page < page + kPage || stub_page + 2 * kPage > g_res_end) return "stub outside the reservation";
    void* q = mmap(reinterpret_cast<void*>(stub_page), 2 * kPage, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (q == MAP_FAILED) return fmt::format("map the stub page: {}", std::strerror(errno));
    std::memset(q, kOpInvalidFill, 2 * kPage);
    auto* s = reinterpret_cast<std::uint8_t*>(stub);
    const std::uint8_t stub_code[6] = {kOpMovEaxImm32, 1, 0, 0, 0, kOpRet};
    std::memcpy(s, stub_code, sizeof stub_code);
    if (mprotect(q, 2 * kPage, PROT_READ | PROT_EXEC) != 0) return fmt::format("mprotect stub: {}", std::strerror(errno));

    return check_torn_mixes(spec_.straddle, reinterpret_cast<std::uintptr_t>(g_site), g_res_begin, page);
  }

  std::string install_handlers() {
    struct sigaction sa {};
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    for (int sig : {SIGILL, SIGSEGV, SIGBUS, SIGTRAP}) {
      if (sigaction(sig, &sa, nullptr) != 0) return fmt::format("sigaction: {}", std::strerror(errno));
    }
    return "";
  }

  static void executor(ExecThread* t, int cpu, std::atomic<unsigned>* ready, std::atomic<unsigned>* bad) {
    // The handler runs on its own stack: a torn call has just pushed onto this one.
    constexpr std::size_t kAlt = 64 * 1024;
    void* alt = mmap(nullptr, kAlt, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (alt != MAP_FAILED) {
      stack_t ss{};
      ss.ss_sp = alt;
      ss.ss_size = kAlt;
      sigaltstack(&ss, nullptr);
    }
    if (!pin_self(cpu)) bad->fetch_add(1);
    tls_exec = t;
    ready->fetch_add(1, std::memory_order_release);
    crossmod_ref_exec_loop(&t->args);
    tls_exec = nullptr;
    t->counters->executions.store(t->args.executions, std::memory_order_relaxed);
    t->counters->state_a.store(t->args.state_a, std::memory_order_relaxed);
  }

  void stop_executors() {
    store1(&g_stop_line[0], 1);
    for (auto& th : threads_)
      if (th.joinable()) th.join();
    threads_.clear();
  }

  std::string body() {
    phase("setup");
    if (std::string e = map_site(); !e.empty()) return e;
    if (std::string e = install_handlers(); !e.empty()) return e;
    if (!pin_self(spec_.patcher_cpu)) return fmt::format("cannot pin the patcher to CPU {}", spec_.patcher_cpu);
    g_failed = b_->failed;
    g_trapped = b_->trapped;
    g_last_toggle = spec_.toggles - 1;
    g_current_toggle.store(0);

    phase("starting executors");
    const unsigned n = spec_.executors;
    execs_ = std::vector<ExecThread>(n);
    std::atomic<unsigned> ready{0}, bad{0};
    for (unsigned i = 0; i < n; ++i) {
      ExecThread& t = execs_[i];
      t.args.entry = reinterpret_cast<std::uintptr_t>(g_site) - (spec_.fall_through ? 2 : 0);
      t.args.published = &b_->slots[i].word;
      t.args.stop = &g_stop_line[0];
      t.counters = &b_->counters[i];
      threads_.emplace_back(executor, &t, spec_.executor_cpus[i], &ready, &bad);
    }
    while (ready.load(std::memory_order_acquire) < n) sched_yield();
    if (bad.load() != 0) return fmt::format("{} executor(s) could not be pinned", bad.load());
    // Let every executor reach its loop and publish before the first toggle.
    spin_until(rdtsc() + 2'000'000);

    phase("toggling");
    std::vector<std::uint64_t> last(n);
    for (unsigned i = 0; i < n; ++i) last[i] = std::atomic_ref(b_->slots[i].word).load(std::memory_order_relaxed);
    const unsigned s = spec_.straddle;
    const std::uint64_t w = spec_.wait_ticks, d = spec_.dwell_ticks;
    auto* qword_front = reinterpret_cast<std::uint64_t*>(g_site + s - 8);  // [L-8, L)
    auto* qword_back = reinterpret_cast<std::uint64_t*>(g_site + s);       // [L, L+8)
    std::uint64_t front_a, back_a;
    std::memcpy(&front_a, qword_front, 8);
    std::memcpy(&back_a, qword_back, 8);
    std::uint64_t front_b = front_a, back_b = back_a;  // A's quadwords with B's half on top
    std::memcpy(reinterpret_cast<std::uint8_t*>(&front_b) + 8 - s, kStateB.data(), s);
    std::memcpy(&back_b, kStateB.data() + s, 5 - s);
    for (std::uint64_t i = 0; i < spec_.toggles; ++i) {
      const bool to_b = (i % 2) == 0;  // the site starts in A
      const auto& next = to_b ? kStateB : kStateA;
      std::uint64_t t0 = 0;
      if (spec_.mode == Mode::protocol) {
        // 1. Lock: int3 on byte 0; executors that fetch it trap and wait in on_signal(),
        //    which charges the trap (or a tear) to the toggle named just before.
        g_current_toggle.store(i, std::memory_order_relaxed);
        store1(g_site, kOpInt3);
        spin_until(rdtsc_after_stores() + w);
        // 2. Back part: bytes 1..4 (both sides of the boundary), one 4-byte store.
        std::uint32_t back;
        std::memcpy(&back, next.data() + 1, 4);
        store4(g_site + 1, back);
        spin_until(rdtsc_after_stores() + w);
        // 3. Front: byte 0 replaces the int3; the new instruction is complete.
        store1(g_site, next[0]);
        t0 = rdtsc_after_stores();
      } else {
        // Test-only: write a torn mix (each half is one aligned quadword store, so exactly
        // this mix is visible) and hold it until an executor has faulted on it, so the
        // test's tear count does not depend on the scheduler running the executor within
        // some dwell (bounded by kTornHoldTicks); then restore A.
        g_current_toggle.store(i, std::memory_order_relaxed);
        if (to_b) store8_aligned(qword_back, back_b);
        else store8_aligned(qword_front, front_b);
        const std::uint64_t give_up = rdtsc_after_stores() + kTornHoldTicks;
        while ((b_->failed[i / 64].load(std::memory_order_relaxed) & (std::uint64_t{1} << (i % 64))) == 0 &&
               static_cast<std::int64_t>(rdtsc() - give_up) < 0)
          cpu_pause();
        if (to_b) store8_aligned(qword_back, back_a);
        else store8_aligned(qword_front, front_a);
        t0 = rdtsc_after_stores();
      }
      // 4. First half of the dwell, then the one look at the executors' lines.
      spin_until(t0 + d / 2);
      const std::uint64_t want = spec_.mode == Mode::protocol && to_b ? 0 : 1;
      bool seen = false;
      for (unsigned e = 0; e < n; ++e) {
        const std::uint64_t v = std::atomic_ref(b_->slots[e].word).load(std::memory_order_relaxed);
        if (v != last[e] && (v & 1) == want) seen = true;
        last[e] = v;
      }
      if (seen) b_->exposed[i / 64].fetch_or(std::uint64_t{1} << (i % 64), std::memory_order_relaxed);
      b_->header->toggles.store(i + 1, std::memory_order_relaxed);
      spin_until(t0 + d);
    }
    phase("stopping executors");
    return "";
  }

  const Spec& spec_;
  Block* b_;
  std::vector<ExecThread> execs_;
  std::vector<std::thread> threads_;
};

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

Result run_reference(const Spec& in) {
  Result r;
  Spec spec = in;
  const auto t_start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  };
  if (spec.straddle < 1 || spec.straddle > 4 || spec.executors == 0 || spec.toggles == 0 ||
      spec.dwell_ticks == 0) {
    r.outcome = "error";
    r.note = "reference: needs S in 1..4, >= 1 executor, >= 1 toggle and a dwell > 0";
    return r;
  }
  // Placement: the caller's, else the first allowed CPU for the patcher and the next ones
  // for executors. More threads than CPUs works, but then executors and the patcher take
  // turns on a CPU and a toggle is rarely exposed: say so.
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) {
    r.outcome = "error";
    r.note = "sched_getaffinity failed";
    return r;
  }
  if (spec.patcher_cpu < 0) spec.patcher_cpu = cpus[0];
  if (spec.executor_cpus.size() < spec.executors) {
    spec.executor_cpus.clear();
    for (unsigned i = 0; i < spec.executors; ++i) spec.executor_cpus.push_back(cpus[(i + 1) % cpus.size()]);
  }
  spec.executor_cpus.resize(spec.executors);
  if (spec.executors + 1 > cpus.size()) {
    r.warning = fmt::format("reference: {} threads on {} CPUs: oversubscribed, exposure will be low",
                            spec.executors + 1, cpus.size());
  }
  r.patcher_cpu = spec.patcher_cpu;
  r.executor_cpus = spec.executor_cpus;

  Block block;
  if (!block.create(spec.executors, spec.toggles)) {
    r.outcome = "error";
    r.note = fmt::format("mmap of the shared block: {}", std::strerror(errno));
    return r;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    r.outcome = "error";
    r.note = fmt::format("fork: {}", std::strerror(errno));
    return r;
  }
  if (pid == 0) {
    Child child(spec, &block);
    child.run();
  }
  int status = 0;
  bool hung = false;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (elapsed() > spec.watchdog_s) {
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      hung = true;
      break;
    }
    struct timespec ts {0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
  r.duration_s = elapsed();

  const Header& h = *block.header;
  r.toggles = h.toggles.load();
  std::uint64_t exposed = 0, failed = 0;
  const std::size_t used_words = static_cast<std::size_t>((r.toggles + 63) / 64);
  for (std::size_t i = 0; i < used_words && i < block.words; ++i) {
    std::uint64_t mask = ~std::uint64_t{0};
    if (i == used_words - 1 && r.toggles % 64 != 0) mask = (std::uint64_t{1} << (r.toggles % 64)) - 1;
    const std::uint64_t f = block.failed[i].load() & mask;
    failed += static_cast<std::uint64_t>(std::popcount(f));
    const std::uint64_t e = block.exposed[i].load() | block.trapped[i].load() | f;
    exposed += static_cast<std::uint64_t>(std::popcount(e & mask));
  }
  r.tears = failed;
  r.exposed = exposed;
  for (unsigned i = 0; i < spec.executors; ++i) {
    const ExecCounters& c = block.counters[i];
    std::uint64_t ex = c.executions.load(), a = c.state_a.load();
    if (ex == 0) {  // the child died before the loops returned: last published count
      const std::uint64_t word = std::atomic_ref(block.slots[i].word).load();
      ex = word >> 1;
    }
    r.executions += ex;
    r.state_a += a;
    r.state_b += ex >= a ? ex - a : 0;
    r.traps += c.traps.load();
    r.sigill += c.sigill.load();
    r.sigsegv += c.sigsegv.load();
    r.sigbus += c.sigbus.load();
    r.stray_trap += c.stray_trap.load();
  }
  const std::string phase(h.phase);
  if (hung) {
    r.outcome = "hang";
    r.note = fmt::format("no result within the {} s watchdog (child in: {}); killed", spec.watchdog_s, phase);
  } else if (WIFSIGNALED(status)) {
    r.outcome = "crash";
    r.note = fmt::format("child killed by signal {} ({}) during {}", WTERMSIG(status), strsignal(WTERMSIG(status)), phase);
  } else if (h.state.load() == kOk) {
    r.outcome = "ok";
  } else {
    r.outcome = "error";
    r.note = h.note[0] ? std::string(h.note) : "child exited without a result during " + phase;
  }
  return r;
}

}  // namespace crossmod::harness::reference
