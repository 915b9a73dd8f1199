// prof_dlopen LIBRARY CALLS [SLEEP_MS]: loads LIBRARY with dlopen after main has begun
// (after sleeping SLEEP_MS, default 0), calls its dlt_work CALLS times, and prints
// "dlt_work CALLS" (the test's truth). First it asks for
// a library that does not exist and prints "dlerror kept" when dlopen returned null and
// dlerror() said why: the runtime's dlopen must keep the real one's failure intact.
// Exit 1 when the library or the function is missing.
// Thread safety: single-threaded.
#include <dlfcn.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    std::fprintf(stderr, "usage: prof_dlopen LIBRARY CALLS [SLEEP_MS]\n");
    return 2;
  }
  if (argc == 4) {
    const long ms = std::strtol(argv[3], nullptr, 10);
    const timespec ts{ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, nullptr);
  }
  if (dlopen("/nonexistent/crossmod-no-such-library.so", RTLD_NOW) == nullptr && dlerror() != nullptr)
    std::printf("dlerror kept\n");
  void* h = dlopen(argv[1], RTLD_NOW);
  if (h == nullptr) {
    std::fprintf(stderr, "prof_dlopen: %s\n", dlerror());
    return 1;
  }
  using Fn = unsigned (*)(unsigned);
  const auto f = reinterpret_cast<Fn>(dlsym(h, "dlt_work"));
  if (f == nullptr) return 1;
  const unsigned long n = std::strtoul(argv[2], nullptr, 10);
  unsigned acc = 0;
  for (unsigned long i = 0; i < n; ++i) acc += f(static_cast<unsigned>(i));
  std::printf("dlt_work %lu\n", n);
  std::fprintf(stderr, "acc %u\n", acc);  // keeps the calls
  return dlclose(h) == 0 ? 0 : 1;
}
