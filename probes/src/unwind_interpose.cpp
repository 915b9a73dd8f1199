// C++ exceptions through frames whose return address the exit probes redirected.
//
// The unwinder finds a frame's caller from its return address and the caller's CFI. A
// redirected frame returns to crossmod_probes_exit_trampoline, whose real caller lives in
// the thread's shadow stack, out of reach of any CFI: unwinding would stop there and call
// std::terminate. So this library interposes the two calls that START an unwind of the
// C++ runtime - _Unwind_RaiseException (throw, std::rethrow_exception) and
// _Unwind_Resume_or_Rethrow (throw;) - and, before handing over to libgcc's (found with
// dlsym(RTLD_NEXT)), writes every redirected frame of this thread back to its original
// return address and empties the thread's redirection stack (but for the records of other
// stacks, coroutines', which the unwind does not cross). The unwinder then sees the
// stack the compiler built. Cost of the choice: frames that were live when the exception
// started - those it unwinds and those above its handler alike - return without their
// exit probe firing (their entry probe did fire). Nothing else changes: frames entered
// after the throw are redirected as usual.
//
// _Unwind_Resume (the end of a cleanup pad) needs nothing: the frames it continues
// through were written back when the unwind started, and any frame entered since has
// returned. pthread_exit is interposed too: glibc's forced unwind calls libgcc through a
// handle of its own (dlopen of libgcc_s), which no interposition of _Unwind_ForcedUnwind
// reaches, but pthread_exit itself is called through the PLT.
//
// pthread_cancel: the cancelled thread's unwind starts inside libc, at a cancellation
// point or in the cancellation signal's handler, and reaches libgcc_s's
// _Unwind_ForcedUnwind through that private handle. So the first pthread_cancel (called
// through the PLT, interposed here) puts a tracepoint on libgcc_s's _Unwind_ForcedUnwind
// itself, whose probe writes the unwinding thread's frames back before libgcc walks them
// (pthread_exit's forced unwind passes there too; the second write-back finds nothing).
// If that tracepoint cannot be made (libgcc_s missing, the relocator refuses the entry,
// another tracepoint owns it), cancellation stays as before: the unwind stops at the first
// redirected frame and the destructors above it do not run (probes/README.md).
//
// Stack walks: glibc's backtrace() and libgcc's _Unwind_Backtrace (called through the PLT
// by programs, libstdc++'s stacktrace, ...) stop at the first redirected frame, for the
// same reason. Both are interposed here and write the thread's frames back first; they
// keep no exit probe of their own (provider_tracepoint.cpp: reads_return_address), so the
// walk starts from a frame the unwinder can read. glibc's backtrace calls libgcc through
// its private handle, which the interposed backtrace covers. Cost as for exceptions: the
// frames live at the walk return without their exit probe.
//
// Not on the invocation path: runs once per throw (or walk), touches only this thread's TLS and
// stack, does not allocate (dlsym is resolved by the library constructor). The hook's
// set-up runs once, in the first pthread_cancel.
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <cstdlib>

#include "crossmod/tracepoint.hpp"
#include "crossmod/x86.hpp"
#include "objects.hpp"
#include "registry.hpp"


namespace crossmod::probes::detail {

namespace {

using RaiseFn = _Unwind_Reason_Code (*)(_Unwind_Exception*);
using ExitFn = void (*)(void*);
using BacktraceFn = int (*)(void**, int);
using UnwindTraceFn = _Unwind_Reason_Code (*)(_Unwind_Trace_Fn, void*);

std::atomic<RaiseFn> g_raise{nullptr};
std::atomic<RaiseFn> g_rethrow{nullptr};

std::atomic<ExitFn> g_pthread_exit{nullptr};
std::atomic<BacktraceFn> g_backtrace{nullptr};
std::atomic<UnwindTraceFn> g_unwind_backtrace{nullptr};
using CancelFn = int (*)(pthread_t);
std::atomic<CancelFn> g_pthread_cancel{nullptr};

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
  (void)next(g_pthread_cancel, "pthread_cancel");
  (void)next(g_backtrace, "backtrace");
  (void)next(g_unwind_backtrace, "_Unwind_Backtrace");
}

// Writes this thread's redirected return addresses back; keeps only the records of other stacks.
__attribute__((noinline)) void unredirect_thread_frames() noexcept {
  ThreadState& ts = thread_state();
  // Every live frame of this stack is above this one. Records just below it, or whose slot
  // no longer holds the trampoline, belong to frames longjmp abandoned: their memory is not
  // theirs any more - leave it alone. Records farther below (kSameStackSpan) belong to
  // another stack, a coroutine's, whose frames are still live: kept, untouched.
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  const unsigned depth = ts.ret_depth;
  unsigned kept = 0;
  for (unsigned i = depth; i > 0; --i) {
    const RetFrame& f = ts.rets[i - 1];
    if (f.slot <= here) continue;
    auto* slot = reinterpret_cast<std::uintptr_t*>(f.slot);
    // Either exit trampoline (patchable or tracepoint). Frames chained at one slot by a
    // tail call pop in order: the inner one puts the trampoline back, the outer the caller.
    if (is_exit_trampoline(*slot)) *slot = f.ret;
  }
  for (unsigned i = 0; i < depth; ++i)
    if (ts.rets[i].slot <= here && here - ts.rets[i].slot > kSameStackSpan) ts.rets[kept++] = ts.rets[i];
  ts.ret_depth = kept;
}

// The probe of the tracepoint on _Unwind_ForcedUnwind (see the top of this file).
void on_forced_unwind(void*) noexcept { unredirect_thread_frames(); }

// 0: not tried yet; then ForcedUnwindHook's value, for the life of the process.
std::atomic<int> g_forced_unwind_hook{0};
std::mutex g_forced_unwind_mutex;

int hook_forced_unwind_once() noexcept {
  // The loader's calls first, without the registry mutex (objects.hpp). glibc's cancel
  // path loads the same soname, so this is the object its handle reaches.
  void* h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NODELETE);
  void* fn = h != nullptr ? dlsym(h, "_Unwind_ForcedUnwind") : nullptr;
  Dl_info info{};
  void* extra = nullptr;  // RTLD_DL_SYMENT: the symbol's const ElfW(Sym)*
  if (fn == nullptr || dladdr1(fn, &info, &extra, RTLD_DL_SYMENT) == 0 || extra == nullptr)
    return static_cast<int>(ForcedUnwindHook::no_libgcc);
  const auto* sym = static_cast<const ElfW(Sym)*>(extra);
  ForcedUnwindHook result = ForcedUnwindHook::refused;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    Segment* seg = nullptr;
    const auto a = reinterpret_cast<std::uintptr_t>(fn);
    static tp::Tracepoint tp;  // immortal, like every trampoline
    if (object_for_code(a, x86::kCallLen, &seg) != nullptr && ensure_writable(seg) == Status::ok &&
        tp::Tracepoint::prepare(fn, static_cast<std::size_t>(sym->st_size), on_forced_unwind, nullptr,
                                &tp) == tp::Status::ok &&
        tp.install(install_wait()) == tp::Status::ok)
      result = ForcedUnwindHook::hooked;
  }
  // object_for_code queued libgcc_s for pinning; that takes the loader lock, so only now,
  // without the registry mutex (RTLD_NODELETE above already keeps it mapped).
  pin_requested_objects();
  return static_cast<int>(result);
}

}  // namespace

ForcedUnwindHook hook_forced_unwind() noexcept {
  int v = g_forced_unwind_hook.load(std::memory_order_acquire);
  if (v == 0) {
    std::lock_guard<std::mutex> lock(g_forced_unwind_mutex);
    v = g_forced_unwind_hook.load(std::memory_order_relaxed);
    if (v == 0) {
      v = hook_forced_unwind_once();
      g_forced_unwind_hook.store(v, std::memory_order_release);
    }
  }
  return static_cast<ForcedUnwindHook>(v);
}

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

extern "C" int pthread_cancel(pthread_t thread) {
  using namespace crossmod::probes::detail;
  const CancelFn real = next(g_pthread_cancel, "pthread_cancel");
  (void)hook_forced_unwind();
  return real(thread);
}

extern "C" int backtrace(void** buffer, int size) {
  using namespace crossmod::probes::detail;
  const BacktraceFn real = next(g_backtrace, "backtrace");
  unredirect_thread_frames();
  return real(buffer, size);
}

extern "C" _Unwind_Reason_Code _Unwind_Backtrace(_Unwind_Trace_Fn fn, void* arg) {
  using namespace crossmod::probes::detail;
  const UnwindTraceFn real = next(g_unwind_backtrace, "_Unwind_Backtrace");
  unredirect_thread_frames();
  return real(fn, arg);
}
