// A -finstrument-functions program whose hot function is inlined into two callers: GCC
// instruments every inlined copy, so `hot` has three entry sites (its own body and two
// copies), each a separate cyg probe. Prints the true call count.
//   inline_prog N            N iterations, each calling both callers
//   inline_prog N late-a     100 iterations of both (every copy found, caller_b's last),
//                            then N of caller_a alone: its copy is not the last one found
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
volatile unsigned g_sink;
inline __attribute__((always_inline)) unsigned hot(unsigned x) { return x * 2654435761u + 1; }
__attribute__((noinline)) unsigned caller_a(unsigned x) { return hot(x) ^ 1; }
__attribute__((noinline)) unsigned caller_b(unsigned x) { return hot(x + 7) ^ 2; }
__attribute__((noinline)) unsigned direct(unsigned x) { return x + 3; }
}  // namespace

int main(int argc, char** argv) {
  const unsigned n = argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 1000;
  const bool late_a = argc > 2 && std::strcmp(argv[2], "late-a") == 0;
  unsigned s = 0;
  unsigned long calls = 0;
  if (late_a) {
    for (unsigned i = 0; i < 100; ++i) s += caller_a(i) + caller_b(s);
    for (unsigned i = 0; i < n; ++i) s += caller_a(s);
    calls = 200ul + n;
  } else {
    for (unsigned i = 0; i < n; ++i) s += caller_a(i) + caller_b(s) + direct(i);
    calls = 2ul * n;
  }
  g_sink = s;
  std::printf("hot %lu\n", calls);
  return 0;
}
