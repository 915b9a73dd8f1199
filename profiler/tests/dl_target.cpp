// The library prof_dlopen loads at run time (never linked to it): one function, no
// instrumentation flag, so only a tracepoint attached after the dlopen can see it.
// Thread safety: dlt_work touches only its argument.
extern "C" __attribute__((noipa, visibility("default"))) unsigned dlt_work(unsigned x) {
  unsigned a = x;
  for (unsigned i = 0; i < 50; ++i) a = a * 2654435761u + i;
  return a;
}
