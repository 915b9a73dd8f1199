// C++ exceptions through frames whose return address the exit probes redirected.
//
// The unwinder finds a frame's caller from its return address and the caller's CFI. A
// redirected frame returns to crossmod_probes_exit_trampoline, whose real caller lives in
// the thread's shadow stack, out of reach of any CFI: unwinding would stop there and call
// std::terminate. So this library interposes the two calls that START an unwind of the
// C++ runtime - _Unwind_RaiseException (throw, std::rethrow_exception) and
// _Unwind_Resume_or_Rethrow (throw;) - and, before handing over to libgcc's (found with
// dlsym(RTLD_NEXT)), writes every redirected frame of this thread back to its original
// return address and empties the thread's redirection stack. The unwinder then sees the
// stack the compiler built. Cost of the choice: frames that were live when the exception
// started - those it unwinds and those above its handler alike - return without their
// exit probe firing (their entry probe did fire). Nothing else changes: frames entered
// after the throw are redirected as usual.
//
// _Unwind_Resume (the end of a cleanup pad) needs nothing: the frames it continues
// through were written back when the unwind started, and any frame entered since has
// returned. pthread_exit is interposed too: glibc's forced unwind calls libgcc through a
// handle of its own (dlopen of libgcc_s), which no interposition of _Unwind_ForcedUnwind
// reaches, but pthread_exit itself is called through the PLT. pthread_cancel is NOT
// covered: its unwind starts inside libc at a cancellation point (see probes/README.md).
//
// Not on the invocation path: runs once per throw, touches only this thread's TLS and
// stack, does not allocate (dlsym is resolved by the library constructor).
#include <dlfcn.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstdlib>

#include "registry.hpp"


namespace crossmod::probes::detail {

namespace {

using RaiseFn = _Unwind_Reason_Code (*)(_Unwind_Exception*);
using ExitFn = void (*)(void*);

std::atomic<RaiseFn> g_raise{nullptr};
std::atomic<RaiseFn> g_rethrow{nullptr};

std::atomic<ExitFn> g_pthread_exit{nullptr};

template <class Fn>
Fn next(std::atomic<Fn>& cache, const char* name) noexcept {
  Fn f = cache.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    if (f == nullptr) {
      static const char msg[] = "crossmod probes: no unwinder (or pthread_exit) behind the interposer\n";
      (void)!::write(2, msg, sizeof msg - 1);
      std::abort();
    }
    cache.store(f, std::memory_order_release);
  }
  return f;
}

__attribute__((constructor)) void resolve_unwinder() {
  (void)next(g_raise, "_Unwind_RaiseException");
  (void)next(g_rethrow, "_Unwind_Resume_or_Rethrow");
  (void)next(g_pthread_exit, "pthread_exit");
}

// Writes this thread's redirected return addresses back; empties its redirection stack.
__attribute__((noinline)) void unredirect_thread_frames() noexcept {
  ThreadState& ts = thread_state();
  // Every live frame is above this one. Records below it, or whose slot no longer holds
  // the trampoline, belong to frames longjmp abandoned: their memory is not theirs any
  // more - leave it alone.
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  while (ts.ret_depth > 0) {
    const RetFrame& f = ts.rets[--ts.ret_depth];
    if (f.slot <= here) continue;
    auto* slot = reinterpret_cast<std::uintptr_t*>(f.slot);
    // Either exit trampoline (patchable or tracepoint). Frames chained at one slot by a
    // tail call pop in order: the inner one puts the trampoline back, the outer the caller.
    if (is_exit_trampoline(*slot)) *slot = f.ret;
  }
}

}  // namespace

}  // namespace crossmod::probes::detail

extern "C" _Unwind_Reason_Code _Unwind_RaiseException(_Unwind_Exception* e) {
  using namespace crossmod::probes::detail;
  const RaiseFn real = next(g_raise, "_Unwind_RaiseException");
  unredirect_thread_frames();
  return real(e);
}

extern "C" _Unwind_Reason_Code _Unwind_Resume_or_Rethrow(_Unwind_Exception* e) {
  using namespace crossmod::probes::detail;
  const RaiseFn real = next(g_rethrow, "_Unwind_Resume_or_Rethrow");
  unredirect_thread_frames();
  return real(e);
}

extern "C" [[noreturn]] void pthread_exit(void* value) {
  using namespace crossmod::probes::detail;
  const ExitFn real = next(g_pthread_exit, "pthread_exit");
  unredirect_thread_frames();
  real(value);
  __builtin_unreachable();
}
