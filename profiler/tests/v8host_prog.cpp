// prof_v8host CALLS: exports a function with the name of V8's public entry point,
// v8::Isolate::New(const CreateParams&), the way a program that embeds V8 (node) does, and
// calls its own v8h_leaf CALLS times; prints "v8h_leaf CALLS". Nothing of V8 is here: the
// name alone tells the probes layer that return addresses must not be redirected
// (probes/src/provider_tracepoint.cpp, hosts_v8), so --trace gives entry probes only.
// Thread safety: single-threaded.
#include <cstdio>
#include <cstdlib>

namespace v8 {
class Isolate {
 public:
  struct CreateParams {
    int unused;
  };
  static Isolate* New(const CreateParams& params);
};
// Exported (the executable is linked with -rdynamic) and never called.
__attribute__((visibility("default"), noinline)) Isolate* Isolate::New(const CreateParams& params) {
  return params.unused == 12345 ? reinterpret_cast<Isolate*>(std::malloc(1)) : nullptr;
}
}  // namespace v8

extern "C" __attribute__((noipa)) unsigned long v8h_leaf(unsigned long x) {
  for (int k = 0; k < 20; ++k) x = x * 2654435761u + 1;
  return x;
}

int main(int argc, char** argv) {
  const unsigned long calls = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1000;
  volatile unsigned long sink = 0;
  for (unsigned long i = 0; i < calls; ++i) sink = sink + v8h_leaf(i);
  std::printf("v8h_leaf %lu\n", calls);
  return 0;
}
