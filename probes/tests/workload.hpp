// Instrumented code for the probe tests. cyg_workload.cpp is built with
// -finstrument-functions, patchable_workload.cpp with -fpatchable-function-entry=5; this
// header and the test files are not instrumented.
//
// Counting protocol (checkable under toggling): every workload function counts its own
// calls in its caller-provided Counters, and reads-and-clears the thread's `fired` count
// that the probe function increments. So per call: fired == 1 -> the probe saw this call
// exactly once; fired == 0 -> not seen; fired > 1 -> counted twice (an error).
#pragma once
#include <cstdint>

namespace workload {

struct alignas(64) Counters {
  std::uint64_t calls = 0;
  std::uint64_t seen = 0;     // calls during which the entry probe fired exactly once
  std::uint64_t doubled = 0;  // calls during which it fired more than once
};

// The probe side: the probe function increments this thread's `fired`.
std::uint64_t& fired() noexcept;

// cyg_workload.cpp (-finstrument-functions)
int cyg_leaf(int x, Counters* c);
int cyg_outer(int x, Counters* c);  // calls cyg_leaf; its exit hook is usually tail-called
struct Widget {
  int poke(int x, Counters* c);
};
int cyg_identity(int x);  // tiny, no counting
int cyg_noplt(int x);     // cyg_noplt_workload.cpp: -fno-plt, hooks called through the GOT

// patchable_workload.cpp (-fpatchable-function-entry=5)
int pfe_leaf(int x, Counters* c);
int pfe_other(int x, Counters* c);
// Six integer and eight double arguments: proves the trampoline preserves every argument
// register.
double pfe_many_args(long a, long b, long c, long d, long e, long f, double x0, double x1,
                     double x2, double x3, double x4, double x5, double x6, double x7);

// Recurses `depth` times (not a tail call), then calls cb; returns depth.
int pfe_call_through(int depth, void (*cb)());

// Exceptions through redirected frames. pfe_exc recurses `depth` times, every frame holding
// a guard whose destructor calls pfe_cleanup_work and counts in cleanups(); at depth 0 it
// calls cb (which may throw an int). The frame at depth == catch_at catches the int and,
// by `mode`: returns 1000 + the int (kReturn), rethrows it (`throw;`), throws int + 1000,
// or rethrows it with std::rethrow_exception outside the handler. Otherwise returns depth.
inline constexpr int kReturn = 0, kRethrow = 1, kThrowNew = 2, kRethrowPtr = 3;
int pfe_exc(int depth, int catch_at, int mode, void (*cb)());
int pfe_cleanup_work(int x);
std::uint64_t& cleanups() noexcept;

}  // namespace workload
