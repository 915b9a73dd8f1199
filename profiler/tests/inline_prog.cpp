// A -finstrument-functions program whose hot function is inlined into two callers: GCC
// instruments every inlined copy, so `hot` has three entry sites (its own body and two
// copies), each a separate cyg probe. Prints the true call count.
//   inline_prog N
#include <cstdio>
#include <cstdlib>

namespace {
volatile unsigned g_sink;
inline __attribute__((always_inline)) unsigned hot(unsigned x) { return x * 2654435761u + 1; }
__attribute__((noinline)) unsigned caller_a(unsigned x) { return hot(x) ^ 1; }
__attribute__((noinline)) unsigned caller_b(unsigned x) { return hot(x + 7) ^ 2; }
__attribute__((noinline)) unsigned direct(unsigned x) { return x + 3; }
}  // namespace

int main(int argc, char** argv) {
  const unsigned n = argc > 1 ? static_cast<unsigned>(std::strtoul(argv[1], nullptr, 10)) : 1000;
  unsigned s = 0;
  for (unsigned i = 0; i < n; ++i) s += caller_a(i) + caller_b(s) + direct(i);
  g_sink = s;
  std::printf("hot %u\n", 2 * n);
  return 0;
}
