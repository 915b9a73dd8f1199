// ptrace stop, release and stop-point judgement for live attach (see thread_stop.hpp).
// ptrace(2) "Group-stop", "PTRACE_EVENT_STOP" and "Signal-delivery-stop" describe the
// stops waited for here.
// Thread safety: one StoppedThread per tracer thread; the free functions are pure.
#include "attach/thread_stop.hpp"

#include <signal.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#include <algorithm>
#include <cerrno>

#include "attach/clock.hpp"

namespace crossmod::harness::attach {

namespace {

// Kernel-internal restart codes (include/linux/errno.h); user space sees them only in a
// stopped thread's rax.
constexpr long kERestartSys = 512, kERestartNoIntr = 513, kERestartNoHand = 514,
               kERestartRestartBlock = 516;

struct SyscallClass {
  long nr;
  const char* name;
  int rank;  // thread_rank of a thread blocked in it
};
// Blocking syscalls a thread may sit in without holding a lock pthread_create needs.
// Rank 0: a ptrace stop restarts them invisibly; 2: futex (a lock or condition waiter,
// which may hold some other lock: tried after running threads); 3: a ptrace stop makes
// them fail with EINTR.
constexpr SyscallClass kBlocking[] = {
    {SYS_read, "read", 0},
    {SYS_readv, "readv", 0},
    {SYS_write, "write", 0},
    {SYS_writev, "writev", 0},
    {SYS_recvfrom, "recvfrom", 0},
    {SYS_recvmsg, "recvmsg", 0},
    {SYS_sendto, "sendto", 0},
    {SYS_sendmsg, "sendmsg", 0},
    {SYS_accept, "accept", 0},
    {SYS_accept4, "accept4", 0},
    {SYS_connect, "connect", 0},
    {SYS_wait4, "wait4", 0},
    {SYS_waitid, "waitid", 0},
    {SYS_nanosleep, "nanosleep", 0},
    {SYS_clock_nanosleep, "clock_nanosleep", 0},
    {SYS_poll, "poll", 0},
    {SYS_ppoll, "ppoll", 0},
    {SYS_select, "select", 0},
    {SYS_pselect6, "pselect6", 0},
    {SYS_pause, "pause", 0},
    {SYS_rt_sigsuspend, "rt_sigsuspend", 0},
    {SYS_futex, "futex", 2},
    {SYS_epoll_wait, "epoll_wait", 3},
    {SYS_epoll_pwait, "epoll_pwait", 3},
    {SYS_rt_sigtimedwait, "rt_sigtimedwait", 3},
    {SYS_semop, "semop", 3},
    {SYS_semtimedop, "semtimedop", 3},
    {SYS_io_getevents, "io_getevents", 3},
};

const SyscallClass* blocking_class(long nr) {
  for (const SyscallClass& c : kBlocking)
    if (c.nr == nr) return &c;
  return nullptr;
}

}  // namespace

StoppedThread::~StoppedThread() {
  if (attached_) release();
}

bool StoppedThread::seize(pid_t tid, bool exit_is_callers) {
  tid_ = tid;
  exit_is_callers_ = exit_is_callers;
  if (::ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) {
    errno_ = errno;
    return false;
  }
  attached_ = true;
  return true;
}

StoppedThread::Event StoppedThread::poll_event(int* status) {
  // Peek first (WNOWAIT): the exit of a leader the caller owns must stay reapable.
  siginfo_t si{};
  if (::waitid(P_PID, static_cast<id_t>(tid_), &si,
               WEXITED | WSTOPPED | WNOHANG | WNOWAIT | __WALL) != 0) {
    errno_ = errno;
    if (errno_ != ECHILD) return Event::error;
    attached_ = false;  // no longer ours to wait for: gone
    return Event::exit;
  }
  if (si.si_pid == 0) return Event::none;
  if (si.si_code == CLD_EXITED || si.si_code == CLD_KILLED || si.si_code == CLD_DUMPED) {
    attached_ = false;
    if (!exit_is_callers_) ::waitpid(tid_, nullptr, __WALL | WNOHANG);
    return Event::exit;
  }
  if (::waitpid(tid_, status, __WALL | WNOHANG) != tid_ || !WIFSTOPPED(*status)) return Event::none;
  return Event::stop;
}

StopResult StoppedThread::interrupt_and_wait(std::chrono::nanoseconds timeout) {
  if (::ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) {
    errno_ = errno;
    return errno_ == ESRCH ? StopResult::exited : StopResult::failed;
  }
  const std::uint64_t deadline = monotonic_ns() + std::uint64_t(timeout.count());
  for (int spins = 0;; ++spins) {
    int status = 0;
    switch (poll_event(&status)) {
      case Event::exit:
        return StopResult::exited;
      case Event::error:
        return StopResult::failed;
      case Event::none:
        if (monotonic_ns() > deadline) return StopResult::timed_out;
        // The stop usually comes within microseconds: spin a little, then sleep 50 us.
        if (spins > 200) sleep_us(50);
        continue;
      case Event::stop:
        break;
    }
    const int sig = WSTOPSIG(status);
    if (status >> 16 == PTRACE_EVENT_STOP) {
      if (sig == SIGTRAP) return StopResult::stopped;
      if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
        release();
        return StopResult::group_stopped;
      }
    }
    // A signal-delivery-stop came first: deliver the signal as the kernel would have
    // without us, and keep waiting for the interrupt's stop (it stays pending).
    const long pass = status >> 16 == 0 ? sig : 0;
    if (::ptrace(PTRACE_CONT, tid_, nullptr, reinterpret_cast<void*>(pass)) != 0) {
      errno_ = errno;
      return errno_ == ESRCH ? StopResult::exited : StopResult::failed;
    }
  }
}

bool StoppedThread::get_regs(user_regs_struct* r) {
  if (::ptrace(PTRACE_GETREGS, tid_, nullptr, r) == 0) return true;
  errno_ = errno;
  return false;
}

bool StoppedThread::set_regs(const user_regs_struct& r) {
  if (::ptrace(PTRACE_SETREGS, tid_, nullptr, &r) == 0) return true;
  errno_ = errno;
  return false;
}

bool StoppedThread::detach_from_stop(int status) {
  // A signal-delivery-stop's signal goes back to the thread; any other stop passes none.
  const long pass = status >> 16 == 0 ? WSTOPSIG(status) : 0;
  if (::ptrace(PTRACE_DETACH, tid_, nullptr, reinterpret_cast<void*>(pass)) != 0) {
    errno_ = errno;
    return false;
  }
  attached_ = false;
  return true;
}

bool StoppedThread::release() {
  if (!attached_) return false;
  // A stop not waited for yet (a signal that arrived) is consumed and its signal kept.
  int status = 0;
  const Event first = poll_event(&status);
  if (first == Event::exit) return false;
  if (detach_from_stop(first == Event::stop ? status : 0)) return true;
  // PTRACE_DETACH needs a ptrace-stop (ESRCH otherwise): the thread runs seized but not
  // stopped, or it is exiting. Stop it, then detach (ptrace(2), "Detaching").
  if (errno_ != ESRCH || ::ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) {
    reap_exit();
    return false;
  }
  const std::uint64_t deadline = monotonic_ns() + 1000000000;
  while (monotonic_ns() < deadline) {
    const Event e = poll_event(&status);
    if (e == Event::exit || e == Event::error) return false;
    if (e == Event::stop && detach_from_stop(status)) return true;
    sleep_us(100);
  }
  attached_ = false;  // stuck (uninterruptible sleep): it stays traced until we exit
  return false;
}

// The thread is dying while traced: its exit is reported to us, the tracer, and a tracer
// that never reaps it would hold back the real parent's notification.
void StoppedThread::reap_exit() {
  attached_ = false;
  if (exit_is_callers_) return;
  const std::uint64_t deadline = monotonic_ns() + 1000000000;
  while (monotonic_ns() < deadline) {
    const pid_t r = ::waitpid(tid_, nullptr, __WALL | WNOHANG);
    if (r == tid_ || (r < 0 && errno == ECHILD)) return;
    sleep_us(100);
  }
}

ResumePoint resume_point(const user_regs_struct& r) {
  ResumePoint p{r.rip, r.rax, false, -1};
  const auto orig = static_cast<long>(r.orig_rax);
  if (orig == -1) return p;
  p.syscall = orig;
  switch (-static_cast<long>(r.rax)) {
    case kERestartSys:
    case kERestartNoIntr:
    case kERestartNoHand:
      p = {r.rip - 2, r.orig_rax, true, orig};
      break;
    case kERestartRestartBlock:
      p = {r.rip - 2, SYS_restart_syscall, true, orig};
      break;
    default:
      break;
  }
  return p;
}

StopVerdict judge_stop(const user_regs_struct& r, std::span<const TextRange> loader_text) {
  const bool in_loader = std::any_of(loader_text.begin(), loader_text.end(),
                                     [&](auto t) { return r.rip >= t.begin && r.rip < t.end; });
  const ResumePoint p = resume_point(r);
  if (p.syscall >= 0) {
    const SyscallClass* c = blocking_class(p.syscall);
    const bool interrupted = p.restarts || static_cast<long>(r.rax) == -EINTR;
    if (c != nullptr && interrupted)
      return {true, std::string("blocked in ") + c->name +
                        (p.restarts ? " (re-entered after the stub)" : " (returns EINTR)")};
    // Stopped just as one of them returned: still outside any lock (a futex waiter has
    // not retaken its lock yet, but may hold another: not trusted).
    if (c != nullptr && c->rank == 0) return {true, std::string("just returned from ") + c->name};
    if (in_loader)
      return {false, "in " + syscall_name(p.syscall) + " from libc or ld.so (not a wait)"};
  }
  if (in_loader) return {false, "pc in libc or ld.so text (it may hold a lock)"};
  return {true, "running its own code"};
}

int thread_rank(const ThreadInfo& t) {
  if (t.state == 'Z' || t.state == 'X' || t.state == 'T' || t.state == 't') return -1;
  if (t.state == 'R' || t.syscall == ThreadInfo::kRunning) return 1;
  if (t.syscall >= 0)
    if (const SyscallClass* c = blocking_class(t.syscall)) return t.state == 'S' ? c->rank : 4;
  return 4;
}

std::vector<pid_t> order_candidates(std::vector<ThreadInfo> threads) {
  std::stable_sort(threads.begin(), threads.end(), [](const ThreadInfo& a, const ThreadInfo& b) {
    return thread_rank(a) != thread_rank(b) ? thread_rank(a) < thread_rank(b) : a.tid < b.tid;
  });
  std::vector<pid_t> out;
  for (const ThreadInfo& t : threads)
    if (thread_rank(t) >= 0) out.push_back(t.tid);
  return out;
}

std::string syscall_name(long nr) {
  if (const SyscallClass* c = blocking_class(nr)) return c->name;
  return "syscall " + std::to_string(nr);
}

}  // namespace crossmod::harness::attach
