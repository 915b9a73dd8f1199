// Threads cancelled (pthread_cancel) while deep in probed functions: every destructor on
// their stacks must still run. Built with each provider (cyg, pfe) and plainly (for
// --trace); profiler/tests/cancel_smoke.sh runs it under `crossmod profile --policy full`,
// where every live frame's exit probe is on (pfe and tracepoints: return addresses
// redirected). Prints "cleanups D of M" and exits 0 iff D == M and every thread ended
// cancelled.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace {
std::atomic<long> g_made{0}, g_done{0};
struct Guard {
  Guard() { g_made.fetch_add(1); }
  ~Guard() { g_done.fetch_add(1); }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;
};
}  // namespace

extern "C" __attribute__((noinline)) void cancel_leaf(int i) {
  Guard g;
  if (i % 64 == 0) usleep(20);  // a cancellation point
  asm volatile("" ::: "memory");
}

extern "C" __attribute__((noinline)) void cancel_middle(int i) {
  Guard g;
  cancel_leaf(i);
  cancel_leaf(i + 1);
}

extern "C" __attribute__((noinline)) void* cancel_work(void*) {
  Guard g;
  for (int i = 0;; ++i) cancel_middle(i);
  return nullptr;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4;
  pthread_t t[16];
  if (n < 1 || n > 16) return 2;
  for (int i = 0; i < n; ++i)
    if (pthread_create(&t[i], nullptr, cancel_work, nullptr) != 0) return 2;
  usleep(200000);
  for (int i = 0; i < n; ++i) pthread_cancel(t[i]);
  int cancelled = 0;
  for (int i = 0; i < n; ++i) {
    void* r = nullptr;
    pthread_join(t[i], &r);
    cancelled += r == PTHREAD_CANCELED;
  }
  const long made = g_made.load(), done = g_done.load();
  std::printf("cleanups %ld of %ld, %d of %d threads cancelled\n", done, made, cancelled, n);
  return done == made && cancelled == n ? 0 : 1;
}
