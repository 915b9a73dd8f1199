// Live attach, first step: load a shared library into a running x86-64 process and call
// `int ENTRY(const char* arg)` in it once, stopping exactly one of its threads for
// microseconds and never leaving it stopped or broken, even if the caller is SIGKILLed at
// any point (design in injector.cpp).
// Thread safety: inject_library blocks, may be called from several threads at once for
// different targets, and ptraces from the calling thread: no other thread of the caller
// may wait(2) for children meanwhile (waitpid(-1) would take the tracee's stops). It
// allocates and never throws; not for signal handlers.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace crossmod::harness::attach {

enum class [[nodiscard]] AttachStatus : std::uint8_t{
    ok = 0,
    bad_request,         // empty or relative library path, empty entry, strings too long
    no_such_process,     // no process PID
    not_permitted,       // ptrace would refuse or refused; report.detail says why (Yama,
                         // another user, no CAP_SYS_PTRACE, an LSM)
    already_traced,      // a thread of the target has a tracer (a debugger, strace)
    not_x86_64,          // not an x86-64 ELF program
    static_target,       // statically linked: no dynamic loader to load a library with
    no_loader,           // dynamically linked, but no dlopen/dlsym/dlerror/pthread_create
    library_missing,     // the library path does not exist in the target's filesystem view
    target_stopped,      // the process is stopped by a signal (SIGSTOP): continue it first
    no_code_cave,        // no unused executable padding large enough for the stub
    no_suitable_thread,  // every stop landed where the stub could deadlock (max_tries)
    target_exited,       // the process went away during the attach
    stub_failed,         // the stub ran but could not map its region or start its thread
    loader_failed,       // dlopen failed; report.detail holds dlerror()'s text
    entry_missing,       // dlsym(ENTRY) failed; report.detail holds dlerror()'s text
    timed_out,           // a stop, the stub, dlopen or ENTRY did not finish in time
    os_error,            // an unexpected system call failure; report.detail names it
};
const char* to_string(AttachStatus s) noexcept;

// Progress points, in order; `seized` .. `frame_written` may repeat when a stopped
// thread is unsuitable and another try follows.
enum class AttachPhase : std::uint8_t {
  checked,         // every /proc check passed; nothing changed yet
  seized,          // PTRACE_SEIZE of one thread (it still runs)
  code_written,    // the stub is in the executable padding (unused bytes)
  stopped,         // that thread is in its interrupt stop and judged suitable
  frame_written,   // the stub's frame is below its red zone (dead stack memory)
  hijacked,        // PTRACE_SETREGS: rip/rsp point at the stub (it runs when released)
  released,        // PTRACE_DETACH: the thread runs the stub, then its own code
  stub_done,       // the stub restored the thread and started the loader thread
  loaded,          // dlopen returned a handle
  entry_returned,  // ENTRY returned
};
const char* to_string(AttachPhase p) noexcept;

struct InjectRequest {
  std::string library;   // absolute path, as the target sees it (its mount namespace)
  std::string entry;     // int ENTRY(const char* arg)
  std::string arg;       // ENTRY's argument
  int dlopen_flags = 2;  // RTLD_NOW
  pid_t tid = 0;         // 0: choose a thread; else stop only this one
  int max_tries = 8;     // interrupt stops before no_suitable_thread
  std::chrono::milliseconds stop_timeout{2000};  // for each interrupt stop
  std::chrono::milliseconds timeout{10000};      // release .. ENTRY returned
  std::function<void(AttachPhase)> on_phase;     // progress (and tests' fault injection)
};

struct InjectReport {
  std::string detail;         // one line: why a refusal or failure, dlerror() text, notes
  pid_t tid = 0;              // the thread that ran the stub
  std::string thread_choice;  // which thread and why ("blocked in read (...)", tries)
  int tries = 0;              // interrupt stops made (unsuitable ones included)
  long syscall = -1;          // the syscall it was stopped in, -1 none
  bool restarted = false;     // resumed by re-entering that syscall
  std::uintptr_t stub = 0, region = 0, dlopen = 0;
  std::string stub_object;    // the object whose padding holds the stub
  std::uintptr_t handle = 0;  // dlopen's handle (equal across injections of one library)
  int entry_result = 0;
  bool entry_called = false;
  // CLOCK_MONOTONIC durations in ns (the target's stamps come from its own clock reads).
  struct {
    std::uint64_t checks = 0;  // /proc checks before anything changed
    std::uint64_t interrupt_to_stop = 0;
    std::uint64_t stop_to_release = 0;  // stop seen .. PTRACE_DETACH issued: a lower bound
                                        // on the stop the launcher imposed
    std::uint64_t release_to_stub = 0;  // scheduling until the stub ran
    std::uint64_t stub = 0;             // the stub on the thread (pthread_create inside)
    std::uint64_t load = 0;             // loader thread start .. dlopen returned
    std::uint64_t entry = 0;            // ENTRY
    std::uint64_t total = 0;            // the whole call
  } ns;
  // How long the chosen thread was kept from its own code, bounded from above: interrupt
  // sent .. stub done (it runs on until the interrupt's trap takes, which on a loaded
  // machine waits for it to be scheduled). Bounded from below by stop_to_release + stub.
  std::uint64_t kept_from_running_ns = 0;
};

// Loads req.library into process `pid` and calls req.entry(req.arg) once, on a thread
// the stub starts. Every refusal comes before anything in the target changes. On ok the
// report is complete; otherwise report->detail says what happened and the target runs on
// unharmed (a stub already started finishes on its own).
AttachStatus inject_library(pid_t pid, const InjectRequest& req, InjectReport* report);

}  // namespace crossmod::harness::attach
