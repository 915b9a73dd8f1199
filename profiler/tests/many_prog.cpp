// 1,000 distinct tiny functions (step_000 .. step_999, written out by the preprocessor),
// called through a table by 4 threads, ROUNDS times each (argv[1], default 1000; argv[2]
// below). Built
// with each compiler-assisted provider: many functions on at once under --policy budget,
// so that a period that runs out of budget ends with a storm of switch-offs
// (ProfileBudget tests).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>
#include <vector>

namespace {

#define STEP(a, b, c) \
  __attribute__((noipa)) unsigned long step_##a##b##c(unsigned long x) { return x * (a * 100u + b * 10u + c + 3u) + 1u; }
#define STEP10(a, b) \
  STEP(a, b, 0) STEP(a, b, 1) STEP(a, b, 2) STEP(a, b, 3) STEP(a, b, 4) STEP(a, b, 5) STEP(a, b, 6) STEP(a, b, 7) STEP(a, b, 8) STEP(a, b, 9)
#define STEP100(a) \
  STEP10(a, 0) STEP10(a, 1) STEP10(a, 2) STEP10(a, 3) STEP10(a, 4) STEP10(a, 5) STEP10(a, 6) STEP10(a, 7) STEP10(a, 8) STEP10(a, 9)
STEP100(0) STEP100(1) STEP100(2) STEP100(3) STEP100(4) STEP100(5) STEP100(6) STEP100(7) STEP100(8) STEP100(9)

using Fn = unsigned long (*)(unsigned long);
#define REF(a, b, c) &step_##a##b##c,
#define REF10(a, b) \
  REF(a, b, 0) REF(a, b, 1) REF(a, b, 2) REF(a, b, 3) REF(a, b, 4) REF(a, b, 5) REF(a, b, 6) REF(a, b, 7) REF(a, b, 8) REF(a, b, 9)
#define REF100(a) \
  REF10(a, 0) REF10(a, 1) REF10(a, 2) REF10(a, 3) REF10(a, 4) REF10(a, 5) REF10(a, 6) REF10(a, 7) REF10(a, 8) REF10(a, 9)
const Fn kTable[] = {REF100(0) REF100(1) REF100(2) REF100(3) REF100(4) REF100(5) REF100(6) REF100(7) REF100(8) REF100(9)};

}  // namespace

// `fork` mode: one thread calls step_000 .. step_998 once each (each first call is a
// discovery: the runtime's on_found takes its mutex) while main forks as fast as it can;
// each child calls step_999, which no one called before, so the child finds it too, and
// exits. A child stuck (its copy of a lock held by a thread it does not have) is killed
// after 10 s and the program exits 1. Prints how many forks overlapped the discoveries.
volatile unsigned long g_sink;

int fork_while_discovering() {
  std::atomic<bool> done{false};
  std::thread finder([&] {
    unsigned long s = 1;
    for (std::size_t i = 0; i + 1 < 1000; ++i) s += kTable[i](s);
    g_sink = s;
    done.store(true, std::memory_order_release);
  });
  int forks = 0, stuck = 0;
  while (!done.load(std::memory_order_acquire)) {
    const pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) _exit(kTable[999](1) != 0 ? 0 : 3);
    ++forks;
    int status = 0;
    int waited_ms = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (++waited_ms > 10000) {
        kill(pid, SIGKILL);
        (void)waitpid(pid, &status, 0);
        ++stuck;
        break;
      }
      usleep(1000);
    }
  }
  finder.join();
  std::printf("forks %d stuck %d\n", forks, stuck);
  return stuck > 0 ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 3 && std::string_view(argv[3]) == "fork") return fork_while_discovering();
  const long rounds = argc > 1 ? std::atol(argv[1]) : 1000;
  // CALLED (argv[2], default all 1000): only the first CALLED functions are called; the
  // rest are found, on, and never called, like most of a big program's (ProfileWalk).
  const long called = argc > 2 ? std::atol(argv[2]) : 1000;
  const std::size_t n = called > 0 && called < 1000 ? static_cast<std::size_t>(called) : 1000;
  std::vector<std::thread> threads;
  std::vector<unsigned long> sums(4);
  for (unsigned t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      unsigned long s = t;
      for (long r = 0; r < rounds; ++r)
        for (std::size_t i = 0; i < n; ++i) s += kTable[i](s);
      sums[t] = s;
    });
  for (auto& th : threads) th.join();
  std::printf("calls %lu\n", 4ul * static_cast<unsigned long>(rounds) * n);
  return 0;
}
