// Executors and fault capture for one cell's child process: executor threads run the
// stress site in a loop; SIGILL/SIGSEGV/SIGBUS/stray SIGTRAP at the site are recorded into
// preallocated slots and the thread siglongjmps back to its loop.
// Thread/signal safety: the handler is async-signal-safe (relaxed atomics, an 8-byte copy,
// siglongjmp; errno saved). install_fault_handlers() is called once, from the child's main
// thread, before any WordPatcher exists. Counters live in MAP_SHARED memory so the parent
// can still read them after the child dies.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "cell/site.hpp"
#include "machine/topology.hpp"

namespace crossmod::harness::exec {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "counters are shared with the parent across fork and touched in handlers");

// One executor's counters, written only by that executor and its signal handler; read by
// the patcher twice per toggle, in the middle of the dwell (never next to a patch), and by
// the parent after the child ends. One line each so executors do not share lines.
struct alignas(64) Counters {
  std::atomic<std::uint64_t> executions{0};  // completed calls of the site entry
  std::atomic<std::uint64_t> state_a{0};     // ... that returned 1 (the call ran)
  std::atomic<std::uint64_t> state_b{0};     // ... that returned 0
  std::atomic<std::uint64_t> faults{0};      // sum of the four classes below
  std::atomic<std::uint64_t> sigill{0}, sigsegv{0}, sigbus{0}, stray_trap{0};
};

// The first fault of the cell (any executor); `ready` is set last (release).
struct FirstFault {
  std::atomic<int> claimed{0};
  std::atomic<int> ready{0};
  int signal = 0;
  int si_code = 0;
  std::uint64_t pc = 0;        // RIP at the fault (for SIGTRAP: the int3's address)
  std::uint64_t addr = 0;      // si_addr
  std::uint64_t toggle = 0;    // the toggle in progress when the handler ran (1-based)
  std::uint8_t bytes[8] = {};  // the site's bytes at that moment (site .. site+7)
};

// Child-private control shared by the patcher and the executors. The executors' loop
// reads only `stop` (a line the patcher writes once, at the end), so the loop itself never
// takes a coherence miss caused by the patcher; `toggle_seq` has a line of its own, written
// by the patcher right AFTER each patch completes and read only by the fault handler and by
// an executor recovering from a fault. (Measured on the 2-core EPYC guest, issue 9: storing
// toggle_seq before the int3 while executors read it on every call cut the tears seen at
// W = 1600 by about 2.5x: the executor's call was delayed exactly when the int3 landed.)
struct Control {
  alignas(64) std::atomic<std::uint64_t> toggle_seq{0};  // toggles completed so far
  alignas(64) std::atomic<bool> stop{false};
  bool yield_when_idle = false;              // oversubscribed: let a PU-sharing thread run
  alignas(64) std::atomic<unsigned> ready{0};  // executors that reached their loop
  std::atomic<unsigned> bind_failures{0};
};

// Installs SIGILL, SIGSEGV, SIGBUS and (unless the engine's SIGTRAP handler is already
// installed, in which case *sigtrap_ours = false and stray traps crash the child) SIGTRAP
// handlers with SA_SIGINFO|SA_ONSTACK. A fault outside the site's reservation, or on a
// thread that is not an executor, restores the default action so the child dies and the
// parent records a crash. False with *error on failure.
bool install_fault_handlers(const StressSite& site, Control* ctl, FirstFault* first,
                            bool* sigtrap_ours, std::string* error);

// Body of one executor thread: sigaltstack, bind to `pu`, then run the site until
// ctl->stop, counting calls in its own counters line and nothing else. With call_site the
// site itself is the target of a call (eax zeroed by the caller); otherwise the executor
// calls the site's entry, which zeroes eax and runs into the site (CellSpec::site_entry).
// After a fault it waits for the toggle in progress to complete before running the site
// again, which bounds a fault storm to one fault per executor per toggle.
void executor_main(const Topology* topo, int pu, const StressSite* site, Control* ctl,
                   Counters* counters, bool call_site);

}  // namespace crossmod::harness::exec
