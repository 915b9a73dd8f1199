// prof_co_X ROUNDS [throw]: two coroutines (ucontext) on stacks of their own, one below
// the other in one 2 MiB buffer, switch back and forth ROUNDS times, each switch from
// inside a probed function (co_step) whose frame stays live while the other stack runs;
// the lower one's co_driver takes one more round so the upper one's co_body returns
// before it. With `throw`, every 10th round of the upper one throws from co_throw,
// through co_middle, into a catch in co_body, while the lower one waits inside co_step.
// Prints "co_work N" (its true number of calls) and, with `throw`, "caught M". Built
// without flags (prof_co_plain, for --trace) and with -fpatchable-function-entry=5
// (prof_co_pfe): exit probes redirect return addresses, and a shadow stack that took one
// thread for one stack lost the records of the other stack's live frames ("exit
// trampoline without a frame"; probes/README.md).
// Thread safety: single-threaded.
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NOIPA __attribute__((noipa))

namespace {
ucontext_t g_main, g_low, g_high;
volatile unsigned long g_sink;
unsigned long g_calls = 0;
unsigned long g_caught = 0;
bool g_throw = false;
}  // namespace

extern "C" {
NOIPA unsigned long co_work(unsigned long x) {
  ++g_calls;
  for (int k = 0; k < 40; ++k) x = x * 2654435761u + 1;
  return x;
}
NOIPA void co_step(unsigned long i, ucontext_t* from, ucontext_t* to) {
  g_sink = g_sink + co_work(i);
  swapcontext(from, to);
  g_sink = g_sink + co_work(i + 1);
}
NOIPA void co_throw(unsigned long i) {
  g_sink = g_sink + co_work(i);
  throw static_cast<int>(i);
}
NOIPA void co_middle(unsigned long i) {
  co_throw(i);
  g_sink = g_sink + 1;  // not reached: keeps the call a call, not a tail jump
}
NOIPA void co_body(int rounds) {
  for (int i = 0; i < rounds; ++i) {
    co_step(static_cast<unsigned long>(i), &g_high, &g_low);
    if (g_throw && i % 10 == 0) {
      try {
        co_middle(static_cast<unsigned long>(i));
      } catch (int) {
        ++g_caught;
      }
    }
  }
}
NOIPA void co_driver(int rounds) {
  for (int i = 0; i <= rounds; ++i) co_step(static_cast<unsigned long>(i), &g_low, &g_high);
}
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 1000;
  g_throw = argc > 2 && std::strcmp(argv[2], "throw") == 0;
  constexpr std::size_t kStack = 1u << 20;
  char* buf = static_cast<char*>(std::malloc(2 * kStack));
  if (buf == nullptr) return 1;
  getcontext(&g_low);
  g_low.uc_stack.ss_sp = buf;
  g_low.uc_stack.ss_size = kStack;
  g_low.uc_link = &g_main;
  makecontext(&g_low, reinterpret_cast<void (*)()>(co_driver), 1, rounds);
  getcontext(&g_high);
  g_high.uc_stack.ss_sp = buf + kStack;
  g_high.uc_stack.ss_size = kStack;
  g_high.uc_link = &g_low;
  makecontext(&g_high, reinterpret_cast<void (*)()>(co_body), 1, rounds);
  swapcontext(&g_main, &g_low);
  std::printf("co_work %lu\n", g_calls);
  if (g_throw) std::printf("caught %lu\n", g_caught);
  std::free(buf);
  return 0;
}
