// Built with -finstrument-functions: each function calls __cyg_profile_func_enter/exit.
#include "workload.hpp"

namespace workload {

namespace {
__attribute__((no_instrument_function)) inline void account(Counters* c) {
  ++c->calls;
  std::uint64_t& f = fired();
  if (f == 1) ++c->seen;
  if (f > 1) ++c->doubled;
  f = 0;
}
}  // namespace

__attribute__((noinline)) int cyg_leaf(int x, Counters* c) {
  account(c);
  return x * 3 + 1;
}

__attribute__((noinline)) int cyg_outer(int x, Counters* c) { return cyg_leaf(x + 1, c) + 2; }

__attribute__((noinline)) int Widget::poke(int x, Counters* c) {
  account(c);
  return x - 1;
}

__attribute__((noinline)) int cyg_identity(int x) { return x; }

}  // namespace workload
