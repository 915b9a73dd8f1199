// Stopping one thread of another process with ptrace(2) and judging the stop: seize,
// interrupt, wait (with a deadline), read and write its registers, release it; which
// threads to try first; whether the stop point is safe for the hijack; and where the
// thread must resume so that the system call it was in completes as if never stopped.
// Thread safety: ptrace ties a tracee to the tracer *thread*: every call on one
// StoppedThread must come from the thread that seized it, and no other thread of the
// caller may wait(2) for it meanwhile (waitpid(-1) elsewhere would take its stops).
#pragma once
#include <sys/types.h>
#include <sys/user.h>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "attach/proc.hpp"

namespace crossmod::harness::attach {

enum class StopResult {
  stopped,        // in the PTRACE_EVENT_STOP of our interrupt; registers valid
  group_stopped,  // the process is stopped by a signal (SIGSTOP, ...); released again
  exited,         // the thread or process is gone
  timed_out,      // no stop before the deadline (e.g. an uninterruptible sleep)
  failed,         // a ptrace call failed; errno kept in error()
};

// One seized thread. The destructor releases it (PTRACE_DETACH) if still attached, so an
// early return anywhere leaves it running with whatever registers it has then.
class StoppedThread {
 public:
  StoppedThread() = default;
  StoppedThread(const StoppedThread&) = delete;
  StoppedThread& operator=(const StoppedThread&) = delete;
  ~StoppedThread();

  // PTRACE_SEIZE without options (never PTRACE_O_EXITKILL: our death must not kill it).
  // The thread keeps running. False with error() set on failure. `exit_is_callers`: the
  // thread is the thread-group leader of a child of the caller, whose exit the caller
  // reaps; any other traced thread's exit is reaped here (a tracer that does not would
  // hold back the real parent's notification).
  bool seize(pid_t tid, bool exit_is_callers);
  // PTRACE_INTERRUPT and wait for the stop. Signals that stop the thread first
  // (signal-delivery-stops) are passed on to it unchanged.
  StopResult interrupt_and_wait(std::chrono::nanoseconds timeout);
  bool get_regs(user_regs_struct* r);
  bool set_regs(const user_regs_struct& r);
  // PTRACE_DETACH: the thread runs on from its current registers; a signal that stopped
  // it meanwhile is handed back. A thread seized but not stopped is interrupted first (a
  // tracee can only be detached from a stop). False if it was gone (or stuck for 1 s).
  bool release();

  pid_t tid() const { return tid_; }
  int error() const { return errno_; }

 private:
  enum class Event { none, stop, exit, error };
  // One non-blocking wait: a stop (consumed, *status set), an exit (reaped unless the
  // caller's), nothing, or an error.
  Event poll_event(int* status);
  bool detach_from_stop(int status);
  void reap_exit();

  pid_t tid_ = 0;
  bool attached_ = false;
  bool exit_is_callers_ = false;
  int errno_ = 0;
};

// Where a thread stopped inside a syscall must resume, as the kernel would have done on
// the way back to user space (arch/x86/kernel/signal.c, arch_do_signal_or_restart): a
// syscall interrupted with -ERESTARTSYS, -ERESTARTNOINTR or -ERESTARTNOHAND (no handler
// runs for our stop) is re-executed (rip - 2, rax = orig_rax); -ERESTART_RESTARTBLOCK
// becomes restart_syscall(2) (rip - 2, rax = __NR_restart_syscall), which finishes a
// sleep at its original deadline. The injector sets orig_rax = -1 so the kernel itself
// restarts nothing at the stub's address (gdb does the same in amd64_linux_write_pc).
struct ResumePoint {
  std::uint64_t rip = 0, rax = 0;
  bool restarts = false;
  long syscall = -1;  // the syscall the thread was in, -1 if none
};
ResumePoint resume_point(const user_regs_struct& r);

struct TextRange {
  std::uintptr_t begin = 0, end = 0;
};
// Whether a stopped thread may run the stub (which calls pthread_create): its pc must
// not be inside libc or the dynamic loader (it may hold the malloc arena or stack-cache
// lock pthread_create takes), unless it is blocked in a syscall on the list below and
// was interrupted there (it holds none of those locks while blocked there).
struct StopVerdict {
  bool suitable = false;
  std::string why;  // "blocked in read (restarted)", "pc in libc text", ...
};
StopVerdict judge_stop(const user_regs_struct& r, std::span<const TextRange> loader_text);

// Rank for trying threads, best first: 0 blocked in a syscall that restarts cleanly after
// a ptrace stop, 1 running (pc unknown until stopped), 2 blocked in futex, 3 blocked in a
// syscall that a ptrace stop ends with EINTR (signal(7), "Interruption of system calls
// and library functions by stop signals"), 4 anything else; -1 never (zombie, stopped).
int thread_rank(const ThreadInfo& t);
// Thread ids in the order to try them (rank, then tid).
std::vector<pid_t> order_candidates(std::vector<ThreadInfo> threads);

// A name for a syscall number the attach reports mention ("read", "clock_nanosleep");
// "syscall N" otherwise.
std::string syscall_name(long nr);

}  // namespace crossmod::harness::attach
