// Executors and the fault handler of a cell's child (see executor.hpp).
// Signal safety: on_fault() touches only lock-free atomics, plain stores into a
// preallocated slot, an 8-byte copy of the site, sigaction/raise and siglongjmp; it saves
// and restores errno and runs on the executor's alternate stack.
#include "cell/executor.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <ucontext.h>

#include <cerrno>
#include <csetjmp>
#include <cstring>

#include "crossmod/testsupport/alt_stack.hpp"
#include "crossmod/trap.hpp"
#include "crossmod/x86.hpp"

// The executor's two ways into the site (CellSpec::site_entry). Both return 1 if the site
// ran the call (A: the stub sets eax) and 0 if it ran the NOP (B).
//   crossmod_cell_call_site(site):   xor eax,eax; call site       the site is a call's target,
//                                                                 as in the reference's loop
//   crossmod_cell_call_entry(entry): call entry (xor eax,eax; site) the site is reached by
//                                                                 falling through
// On the Xeon guest the first tore 16x more often at calibrate's dwell and its rate did not
// depend on the dwell; the second's did, 70x (CellSpec::site_entry). Why the front end
// treats the two differently is not known.
extern "C" int crossmod_cell_call_site(const void* site);
extern "C" int crossmod_cell_call_entry(const void* entry);
asm(R"(
    .text
    .p2align 4
    .globl crossmod_cell_call_site
    .type crossmod_cell_call_site, @function
crossmod_cell_call_site:
    xor %eax, %eax
    call *%rdi
    ret
    .size crossmod_cell_call_site, .-crossmod_cell_call_site

    .p2align 4
    .globl crossmod_cell_call_entry
    .type crossmod_cell_call_entry, @function
crossmod_cell_call_entry:
    call *%rdi
    ret
    .size crossmod_cell_call_entry, .-crossmod_cell_call_entry
)");

namespace crossmod::harness::exec {
namespace {

// Per-executor state the handler needs. Private to the child; the counters it points to
// are in shared memory.
struct ExecThread {
  sigjmp_buf env;
  Counters* counters = nullptr;
  // toggle_seq as the handler read it (the toggles completed when the fault was
  // delivered). Read in the handler, not per call: a per-call read of a line the patcher
  // writes every toggle delays the executor exactly when the int3 lands (issue 9). The
  // price: a fault delivered late (#UD costs ~18k ticks under KVM) may be attributed to a
  // later toggle; it is still counted, and the executor still skips only one toggle.
  volatile std::uint64_t fault_seq = 0;
  volatile sig_atomic_t armed = 0;       // inside the execution loop
};

// initial-exec TLS: reading it in a signal handler never allocates (the harness is linked
// into the executable, so the slot is in the static TLS block).
__attribute__((tls_model("initial-exec"))) thread_local ExecThread* tls_exec = nullptr;

// Set once by install_fault_handlers() before any executor starts; read-only afterwards.
std::uintptr_t g_own_begin = 0, g_own_end = 0;
const std::uint8_t* g_site = nullptr;
Control* g_ctl = nullptr;
FirstFault* g_first = nullptr;

void die_with(int sig) {
  // Not a site fault: default action, so the child dies with this signal and the parent
  // records a crash naming it.
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

void bump(std::atomic<std::uint64_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

void on_fault(int sig, siginfo_t* si, void* ucv) {
  const int saved_errno = errno;
  ExecThread* t = tls_exec;
  const auto* uc = static_cast<const ucontext_t*>(ucv);
  std::uintptr_t pc = static_cast<std::uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  // int3 reports the address after itself (SDM Vol 3A 6.5, traps).
  if (sig == SIGTRAP) pc -= 1;
  if (t == nullptr || !t->armed || pc < g_own_begin || pc >= g_own_end) {
    errno = saved_errno;
    die_with(sig);
    return;  // SIGILL/SIGSEGV/SIGBUS re-execute and take the default action
  }
  Counters* c = t->counters;
  switch (sig) {
    case SIGILL: bump(c->sigill); break;
    case SIGSEGV: bump(c->sigsegv); break;
    case SIGBUS: bump(c->sigbus); break;
    default: bump(c->stray_trap); break;
  }
  bump(c->faults);
  const std::uint64_t seq = g_ctl->toggle_seq.load(std::memory_order_acquire);
  t->fault_seq = seq;
  if (g_first->claimed.exchange(1, std::memory_order_acq_rel) == 0) {
    g_first->signal = sig;
    g_first->si_code = si ? si->si_code : 0;
    g_first->pc = pc;
    g_first->addr = si ? reinterpret_cast<std::uintptr_t>(si->si_addr) : 0;
    g_first->toggle = seq + 1;
    const volatile std::uint8_t* s = g_site;
    for (int i = 0; i < 8; ++i) g_first->bytes[i] = s[i];
    g_first->ready.store(1, std::memory_order_release);
  }
  errno = saved_errno;
  siglongjmp(t->env, 1);
}

}  // namespace

bool install_fault_handlers(const StressSite& site, Control* ctl, FirstFault* first,
                            bool* sigtrap_ours, std::string* error) {
  g_own_begin = site.reservation_begin();
  g_own_end = site.reservation_end();
  g_site = site.site();
  g_ctl = ctl;
  g_first = first;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  // The engine chains traps it does not own to the handler installed before it; if it is
  // already installed (inherited across fork) ours would replace it instead.
  *sigtrap_ours = !crossmod::trap::installed();
  for (int sig : {SIGILL, SIGSEGV, SIGBUS, SIGTRAP}) {
    if (sig == SIGTRAP && !*sigtrap_ours) continue;
    if (sigaction(sig, &sa, nullptr) != 0) {
      if (error) *error = std::string("sigaction: ") + std::strerror(errno);
      return false;
    }
  }
  return true;
}

void executor_main(const Topology* topo, int pu, const StressSite* site, Control* ctl,
                   Counters* counters, bool call_site) {
  // The handler runs on this stack: a fault must be handled even when the executor's own
  // stack is in a strange state (a torn call has just pushed onto it).
  const testsupport::AltStack alt;
  if (!topo->bind_current_thread(pu)) ctl->bind_failures.fetch_add(1);

  ExecThread self;
  self.counters = counters;
  tls_exec = &self;
  Counters* const c = counters;
  Control* const k = ctl;
  ctl->ready.fetch_add(1, std::memory_order_release);

  if (sigsetjmp(self.env, 1) != 0) {
    // Back from a fault: one fault per toggle is enough to fail it; running again into
    // the same torn bytes would only turn it into a storm.
    self.armed = 0;
    while (k->toggle_seq.load(std::memory_order_acquire) == self.fault_seq &&
           !k->stop.load(std::memory_order_relaxed)) {
      if (k->yield_when_idle) sched_yield();
      else x86::pause();
    }
  }
  self.armed = 1;
  // One indirect call per iteration either way; chosen here (after any siglongjmp, so no
  // local is live across it), so the loop has no branch.
  int (*const run)(const void*) = call_site ? crossmod_cell_call_site : crossmod_cell_call_entry;
  const void* const target =
      call_site ? static_cast<const void*>(site->site()) : reinterpret_cast<const void*>(site->entry());
  // The loop: call the site, count in this executor's own line. `stop` is on a line the
  // patcher does not write until the end, so it stays in this core's cache.
  while (!k->stop.load(std::memory_order_relaxed)) {
    const int r = run(target);
    // Single writer: a plain load+store is enough and avoids a locked op per call.
    c->executions.store(c->executions.load(std::memory_order_relaxed) + 1,
                        std::memory_order_relaxed);
    auto& st = r ? c->state_a : c->state_b;
    st.store(st.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  self.armed = 0;
  tls_exec = nullptr;
}

}  // namespace crossmod::harness::exec
