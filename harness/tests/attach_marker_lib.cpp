// Test library for live attach: ENTRY appends one line to the file named by its argument
// with how often ENTRY ran and how often the library's constructor ran, and returns the
// ENTRY count. A second injection of a loaded library must show "entry 2 loads 1".
// Thread safety: ENTRY is called from one loader thread at a time (the tests inject
// sequentially); the counters are atomics anyway.
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace {
std::atomic<int> g_loads{0};
std::atomic<int> g_calls{0};
__attribute__((constructor)) void on_load() { ++g_loads; }
}  // namespace

extern "C" __attribute__((visibility("default"))) int crossmod_test_entry(const char* path) {
  const int calls = ++g_calls;
  std::FILE* f = std::fopen(path, "a");
  if (f == nullptr) return -1;
  std::fprintf(f, "entry %d loads %d pid %d tid %ld\n", calls, g_loads.load(), getpid(),
               syscall(SYS_gettid));
  std::fclose(f);
  return calls;
}
