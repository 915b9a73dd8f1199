// prof_pushes CALLS: a program that is not PIE (text at 4 MiB, like Debian's python3.11)
// with a function whose 5-byte jump has no entry slot anywhere: `push rbx` puts a boundary
// at offset 1 (no 0x2E prefix can help) and the `mov` one at 4 (rel32 byte 3 = 0xCC, a
// target ~830 MiB below the code, below address 0). --trace puts its jump after the push.
// Calls pushes_add CALLS times from main and prints "pushes_add CALLS SUM" (the test's
// truth; SUM shows the function's result survived its probes). Exit 1 on a wrong result.
// Thread safety: single-threaded.
#include <cstdio>
#include <cstdlib>

// pushes_add(x) = x + 1, through rbx (callee-saved: the probes must not disturb it).
//   0: 53            push rbx
//   1: 48 89 FB      mov rbx, rdi
//   4: 48 8D 43 01   lea rax, [rbx + 1]
//   8: 5B            pop rbx
//   9: C3            ret
asm(R"(
  .text
  .globl pushes_add
  .type pushes_add, @function
  .p2align 4
pushes_add:
  push %rbx
  mov %rdi, %rbx
  lea 1(%rbx), %rax
  pop %rbx
  ret
  .size pushes_add, .-pushes_add
)");
extern "C" unsigned long pushes_add(unsigned long);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: prof_pushes CALLS\n");
    return 2;
  }
  const unsigned long n = std::strtoul(argv[1], nullptr, 10);
  unsigned long sum = 0;
  for (unsigned long i = 0; i < n; ++i) {
    const unsigned long r = pushes_add(i);
    if (r != i + 1) return 1;
    sum += r;
  }
  std::printf("pushes_add %lu %lu\n", n, sum);
  return 0;
}
