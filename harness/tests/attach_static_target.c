/* Statically linked test target for live attach's refusal (attach_smoke.cpp): prints
   "ready" and reads stdin until EOF. Single-threaded. */
#include <stdio.h>
#include <unistd.h>

int main(void) {
  char buf[64];
  puts("ready");
  fflush(stdout);
  while (read(0, buf, sizeof buf) > 0) {
  }
  return 0;
}
