// A program for the profiler's compensation and context-switch tests (profile_test.cpp),
// built with -finstrument-functions (prof_nest_cyg):
//   prof_nest_cyg
// Calls outer() 2,000 times, each calling inner() 20 times (nested probes, whose hits the
// profiler must take off outer's durations), then napper() 200 times, which sleeps 1 ms
// (every call leaves the CPU). Prints "outer N", "inner N", "napper N".
//   prof_nest_cyg fork
// Then forks (after 200 ms: the profiler's threads have their perf pages by then); the child
// calls outer() 100 times and exits 0; the parent prints "child STATUS" (-1: killed).
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include <cstdio>

#define NOIPA __attribute__((noipa))

namespace {
volatile unsigned long g_sink;
NOIPA unsigned long inner(unsigned long x) { return x * 2654435761u + 1; }
NOIPA unsigned long outer(unsigned long x) {
  for (int k = 0; k < 20; ++k) x = inner(x);
  return x;
}
NOIPA void napper() {
  timespec ts{0, 1'000'000};
  nanosleep(&ts, nullptr);
}
}  // namespace

int main(int argc, char** argv) {
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
