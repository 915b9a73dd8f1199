// prof_jvmhost LIBRARY CALLS: calls its own jvh_own CALLS times, then loads LIBRARY (a
// stand-in for libjvm.so, jvmhost_lib.cpp) with dlopen(RTLD_NOW | RTLD_GLOBAL) as the java
// launcher does, calls its jvh_leaf CALLS times and jvh_own CALLS times more, and prints
// "jvh_own 2xCALLS" and "jvh_leaf CALLS". Exit 1 when the library or the function is
// missing.
// Thread safety: single-threaded.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

extern "C" __attribute__((noipa)) unsigned jvh_own(unsigned x) {
  unsigned a = x;
  for (unsigned i = 0; i < 20; ++i) a = a * 2246822519u + i;
  return a;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: prof_jvmhost LIBRARY CALLS\n");
    return 2;
  }
  const unsigned long n = std::strtoul(argv[2], nullptr, 10);
  unsigned acc = 0;
  for (unsigned long i = 0; i < n; ++i) acc += jvh_own(static_cast<unsigned>(i));
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    std::fprintf(stderr, "prof_jvmhost: %s\n", dlerror());
    return 1;
  }
  using Fn = unsigned (*)(unsigned);
  const auto f = reinterpret_cast<Fn>(dlsym(h, "jvh_leaf"));
  if (f == nullptr) return 1;
  for (unsigned long i = 0; i < n; ++i) acc += f(static_cast<unsigned>(i));
  for (unsigned long i = 0; i < n; ++i) acc += jvh_own(static_cast<unsigned>(i));
  std::printf("jvh_own %lu\njvh_leaf %lu\n", 2 * n, n);
  std::fprintf(stderr, "acc %u\n", acc);  // keeps the calls
  return 0;
}
