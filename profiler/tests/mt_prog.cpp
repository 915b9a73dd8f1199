// A small multi-threaded program for the profiler's tests, built with
// -finstrument-functions (prof_mt_cyg) and -fpatchable-function-entry=5 (prof_mt_pfe).
//   prof_mt_X THREADS CALLS [exit|_exit|signal|exec]
// Each thread calls leaf_a() CALLS times and leaf_b() CALLS/4 times; the program prints the
// true counts on stdout ("leaf_a N", "leaf_b M") and ends the way it was told: exit(0),
// _exit(3), SIGKILL to itself, or execve of itself with "exit" (the new image adds its own
// calls; the counts it prints are the totals over both images).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#define NOIPA __attribute__((noipa))

namespace {
volatile unsigned long g_sink;
NOIPA unsigned long leaf_a(unsigned i) {
  unsigned long x = i;
  for (int k = 0; k < 50; ++k) x = x * 2654435761u + 1;
  return x;
}
NOIPA unsigned long leaf_b(unsigned i) {
  unsigned long x = i;
  for (int k = 0; k < 400; ++k) x = x * 2654435761u + 7;
  return x;
}
NOIPA void worker(unsigned calls) {
  unsigned long acc = 0;
  for (unsigned i = 0; i < calls; ++i) {
    acc += leaf_a(i);
    if (i % 4 == 0) acc += leaf_b(i);
  }
  g_sink = acc;
}
}  // namespace

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 4;
  const unsigned calls = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 20000;
  const std::string how = argc > 3 ? argv[3] : "exit";
  const unsigned prior = argc > 4 ? static_cast<unsigned>(std::atoi(argv[4])) : 0;  // images before
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(worker, calls);
  for (auto& t : ts) t.join();
  const unsigned images = prior + 1;
  const unsigned long a = static_cast<unsigned long>(threads) * calls * images;
  const unsigned long b = static_cast<unsigned long>(threads) * ((calls + 3) / 4) * images;
  if (how == "exec") {
    std::fflush(stdout);
    const std::string n = std::to_string(images);
    char* args[] = {argv[0], argv[1], argv[2], const_cast<char*>("exit"), const_cast<char*>(n.c_str()), nullptr};
    execv("/proc/self/exe", args);
    std::perror("execv");
    return 99;
  }
  std::printf("leaf_a %lu\nleaf_b %lu\n", a, b);
  std::fflush(stdout);
  if (how == "_exit") _exit(3);
  if (how == "signal") kill(getpid(), SIGKILL);
  return 0;
}
