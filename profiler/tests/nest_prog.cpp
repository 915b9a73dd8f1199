// A program for the profiler's compensation and context-switch tests (profile_test.cpp),
// built with -finstrument-functions (prof_nest_cyg):
//   prof_nest_cyg
// Calls outer() 2,000 times, each calling inner() 20 times (nested probes, whose hits the
// profiler must take off outer's durations), then napper() 200 times, which sleeps 1 ms
// (every call leaves the CPU). Prints "outer N", "inner N", "napper N".
//   prof_nest_cyg fork
// Then forks (after 200 ms: the profiler's threads have their perf pages by then); the child
// calls outer() 100 times and exits 0; the parent prints "child STATUS" (-1: killed).
//   prof_nest_cyg long MS
// Instead: one call of longrun(), which calls inner() for MS milliseconds (a caller whose
// exit comes only at the end); prints "longrun 1" and "inner N".
//   prof_nest_cyg deep D N
// Instead: deep_inner() recurses D levels, and the deepest calls inner() N times (more
// sampled calls in flight than the profiler's 64 frames); prints "deep_inner D+1" and
// "inner N".
//   prof_nest_cyg deep D N R
// The same R times (for frames a switch-off leaves behind: each recursion's outer calls
// return after deep_inner went off); prints "deep_inner R*(D+1)" and "inner R*N".
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define NOIPA __attribute__((noipa))

namespace {
volatile unsigned long g_sink;
NOIPA unsigned long inner(unsigned long x) { return x * 2654435761u + 1; }
NOIPA unsigned long outer(unsigned long x) {
  for (int k = 0; k < 20; ++k) x = inner(x);
  return x;
}
__attribute__((no_instrument_function)) double seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}
NOIPA unsigned long longrun(double ms, unsigned long* calls) {
  const double end = seconds() + ms * 1e-3;
  unsigned long x = 1, n = 0;
  while (seconds() < end)
    for (int k = 0; k < 100; ++k, ++n) x = inner(x);
  *calls = n;
  return x;
}
NOIPA unsigned long deep_inner(unsigned d, unsigned n) {
  if (d == 0) {
    unsigned long x = 1;
    for (unsigned k = 0; k < n; ++k) x = inner(x);
    return x;
  }
  const unsigned long r = deep_inner(d - 1, n);
  g_sink = r;  // work after the call: no tail call, no loop
  return r ^ d;
}
NOIPA void napper() {
  timespec ts{0, 1'000'000};
  nanosleep(&ts, nullptr);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "long") == 0) {
    unsigned long n = 0;
    g_sink = longrun(std::atof(argv[2]), &n);
    std::printf("longrun 1\ninner %lu\n", n);
    return 0;
  }
  if (argc > 3 && std::strcmp(argv[1], "deep") == 0) {
    const unsigned d = static_cast<unsigned>(std::atoi(argv[2])),
                   n = static_cast<unsigned>(std::atoi(argv[3]));
    const unsigned r = argc > 4 ? static_cast<unsigned>(std::atoi(argv[4])) : 1;
    for (unsigned k = 0; k < r; ++k) g_sink = deep_inner(d, n);
    std::printf("deep_inner %u\ninner %u\n", r * (d + 1), r * n);
    return 0;
  }
  unsigned long acc = 0;
  for (unsigned i = 0; i < 2000; ++i) acc += outer(i);
  for (unsigned i = 0; i < 200; ++i) napper();
  g_sink = acc;
  std::printf("outer %u\ninner %u\nnapper %u\n", 2000u, 2000u * 20u, 200u);
  if (argc > 1 && std::strcmp(argv[1], "fork") == 0) {
    std::fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
      for (unsigned i = 0; i < 100; ++i) acc += outer(i);
      g_sink = acc;
      _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return 1;
    std::printf("child %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  }
  return 0;
}
