// prof_dlmopen LIBRARY CALLS: loads LIBRARY into a new link-map namespace (dlmopen), then
// dlopens libm.so.6 (already loaded: a dlopen that succeeds, after which a preloaded
// runtime looks for objects it has not seen), calls the library's dlt_work CALLS times,
// prints "dlt_work CALLS", dlcloses it and prints "mapped" if LIBRARY is still in
// /proc/self/maps (something pinned it: a profiler that traces its code must), else
// "unmapped". Exit 1 when the library, libm or the function is missing.
// Thread safety: single-threaded.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
bool mapped(const char* path) {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (f == nullptr) return false;
  char line[4096];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) found = std::strstr(line, path) != nullptr;
  std::fclose(f);
  return found;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: prof_dlmopen LIBRARY CALLS\n");
    return 2;
  }
  void* h = dlmopen(LM_ID_NEWLM, argv[1], RTLD_NOW);
  if (h == nullptr) {
    std::fprintf(stderr, "prof_dlmopen: %s\n", dlerror());
    return 1;
  }
  if (dlopen("libm.so.6", RTLD_NOW) == nullptr) return 1;
  using Fn = unsigned (*)(unsigned);
  const auto f = reinterpret_cast<Fn>(dlsym(h, "dlt_work"));
  if (f == nullptr) return 1;
  const unsigned long n = std::strtoul(argv[2], nullptr, 10);
  unsigned acc = 0;
  for (unsigned long i = 0; i < n; ++i) acc += f(static_cast<unsigned>(i));
  std::printf("dlt_work %lu\n", n);
  std::fprintf(stderr, "acc %u\n", acc);  // keeps the calls
  if (dlclose(h) != 0) return 1;
  std::printf("%s\n", mapped(argv[1]) ? "mapped" : "unmapped");
  return 0;
}
