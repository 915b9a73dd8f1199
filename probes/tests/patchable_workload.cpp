// Built with -fpatchable-function-entry=5: each function starts with five NOPs recorded
// in __patchable_function_entries.
#include <exception>

#include "workload.hpp"

namespace workload {

namespace {
__attribute__((always_inline)) inline void account(Counters* c) {
  ++c->calls;
  std::uint64_t& f = fired();
  if (f == 1) ++c->seen;
  if (f > 1) ++c->doubled;
  f = 0;
}
}  // namespace

__attribute__((noinline)) int pfe_leaf(int x, Counters* c) {
  account(c);
  return x * 5 + 2;
}

__attribute__((noinline)) int pfe_other(int x, Counters* c) {
  account(c);
  return x ^ 0x55;
}

__attribute__((noinline)) double pfe_many_args(long a, long b, long c, long d, long e, long f,
                                               double x0, double x1, double x2, double x3,
                                               double x4, double x5, double x6, double x7) {
  return static_cast<double>(a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f) + x0 + 2 * x1 +
         3 * x2 + 4 * x3 + 5 * x4 + 6 * x5 + 7 * x6 + 8 * x7;
}

__attribute__((noipa)) int pfe_call_through(int depth, void (*cb)()) {
  if (depth == 0) {
    cb();
    return 0;
  }
  // Through a volatile: GCC would otherwise turn the recursion into a loop (tail recursion
  // with an accumulator) and the function would be entered once.
  volatile int inner = pfe_call_through(depth - 1, cb);
  return inner + 1;
}

}  // namespace workload

namespace workload {

namespace {
std::uint64_t g_cleanups = 0;
// Runs during unwinding: its destructor calls an instrumented function, so frames are
// entered (and redirected) while an exception is in flight.
struct Cleanup {
  Cleanup() = default;
  Cleanup(const Cleanup&) = delete;
  Cleanup& operator=(const Cleanup&) = delete;
  ~Cleanup() {
    ++g_cleanups;
    volatile int v = pfe_cleanup_work(static_cast<int>(g_cleanups));
    (void)v;
  }
};
}  // namespace

std::uint64_t& cleanups() noexcept { return g_cleanups; }

__attribute__((noipa)) int pfe_cleanup_work(int x) { return x * 3 + 1; }

__attribute__((noipa)) int pfe_exc(int depth, int catch_at, int mode, void (*cb)()) {
  Cleanup guard;
  if (depth == 0) {
    cb();
    return 0;
  }
  if (depth != catch_at) {
    volatile int inner = pfe_exc(depth - 1, catch_at, mode, cb);
    return inner + 1;
  }
  std::exception_ptr saved;
  try {
    volatile int inner = pfe_exc(depth - 1, catch_at, mode, cb);
    return inner + 1;
  } catch (int v) {
    if (mode == kRethrow) throw;
    if (mode == kThrowNew) throw v + 1000;
    if (mode == kRethrowPtr) {
      saved = std::current_exception();
    } else {
      return 1000 + v;
    }
  }
  std::rethrow_exception(saved);
}

}  // namespace workload
