// A small multi-threaded program for the profiler's tests, built with
// -finstrument-functions (prof_mt_cyg) and -fpatchable-function-entry=5 (prof_mt_pfe), and
// without either (prof_mt_plain, for --trace).
//   prof_mt_X THREADS CALLS [exit|_exit|signal|exec|fork|_Fork|clone]
// Main calls leaf_a() and leaf_b() once, then each thread calls leaf_a() CALLS times and
// leaf_b() CALLS/4 times; the program prints the
// true counts on stdout ("leaf_a N", "leaf_b M") and ends the way it was told: exit(0),
// _exit(3), SIGKILL to itself, or execve of itself with "exit" (the new image adds its own
// calls; the counts it prints are the totals over both images), or fork: the child repeats
// the work and exits, the parent waits for it and prints the totals of both processes (exit
// 1 if the child did not exit 0), or _Fork: the same through glibc's _Fork (no atfork
// handlers run), the child doing the threads' work one after another on its only thread,
// or clone: the same through glibc's clone without CLONE_VM (a copy of the address space,
// like fork, but no atfork handlers; the child runs on a stack of its own and returns).
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
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
struct CloneWork {
  unsigned threads, calls;
};
int clone_child(void* p) {
  const auto* w = static_cast<const CloneWork*>(p);
  for (unsigned t = 0; t < w->threads; ++t) worker(w->calls);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const unsigned threads = argc > 1 ? static_cast<unsigned>(std::atoi(argv[1])) : 4;
  const unsigned calls = argc > 2 ? static_cast<unsigned>(std::atoi(argv[2])) : 20000;
  const std::string how = argc > 3 ? argv[3] : "exit";
  const unsigned prior = argc > 4 ? static_cast<unsigned>(std::atoi(argv[4])) : 0;  // images before
  // One call of each leaf before any thread starts: a cyg site is discovered on its first
  // execution, and calls on other threads during that discovery are not seen by the
  // profiler (probes layer; profiler/README.md), which would make exact counts racy.
  g_sink = leaf_a(1) + leaf_b(1);
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < threads; ++t) ts.emplace_back(worker, calls);
  for (auto& t : ts) t.join();
  unsigned images = prior + 1;
  unsigned warmups = prior + 1;  // one warm-up call per image
  if (how == "fork" || how == "_Fork" || how == "clone") {
    std::fflush(stdout);
    CloneWork work{threads, calls};
    std::vector<char> stack(how == "clone" ? 1u << 20 : 0);
    const pid_t pid = how == "fork"    ? fork()
                      : how == "_Fork" ? _Fork()
                                       : clone(clone_child, stack.data() + stack.size(), SIGCHLD, &work);
    if (pid < 0) {
      std::perror(how.c_str());
      return 1;
    }
    if (pid == 0 && how == "_Fork") {
      for (unsigned t = 0; t < threads; ++t) worker(calls);
      _exit(0);
    }
    if (pid == 0) {
      std::vector<std::thread> cs;
      for (unsigned t = 0; t < threads; ++t) cs.emplace_back(worker, calls);
      for (auto& t : cs) t.join();
      std::exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {  // a profiler that kills the child fails the run
      std::fprintf(stderr, "prof_mt: the forked child failed (status %d)\n", st);
      return 1;
    }
    images = 2;
  }
  const unsigned long a = static_cast<unsigned long>(threads) * calls * images + warmups;
  const unsigned long b = static_cast<unsigned long>(threads) * ((calls + 3) / 4) * images + warmups;
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
