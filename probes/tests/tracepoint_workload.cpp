// Functions for the tracepoint provider tests, built with the project's ordinary flags (no
// instrumentation): plain C++ and a few hand-written ones whose bytes the tests rely on.
// Thread safety: every function is reentrant (g_tpw_sink is a relaxed atomic).
#include "tracepoint_workload.hpp"

#include <atomic>

namespace {
std::atomic<std::uint64_t> g_tpw_sink{0};
}

extern "C" {

__attribute__((noinline, noipa)) std::uint64_t tpw_work(std::uint64_t x) {
  g_tpw_sink.fetch_add(x, std::memory_order_relaxed);
  return x * 3 + 1;
}

// Not a tail call: the volatile local is read after the recursive call returns.
__attribute__((noinline, noipa)) std::uint64_t tpw_recurse(std::uint64_t n) {
  volatile std::uint64_t here = n;
  if (n == 0) return 0;
  const std::uint64_t r = tpw_recurse(n - 1);
  return r + here;
}

// Never returns normally (it always ends in longjmp), which is the point.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winfinite-recursion"
__attribute__((noinline, noipa)) void tpw_jump_down(unsigned n, std::jmp_buf* env) {
  volatile unsigned here = n;
  if (here == 0) std::longjmp(*env, 1);
  tpw_jump_down(here - 1, env);
  g_tpw_sink.fetch_add(1, std::memory_order_relaxed);  // never reached
}
#pragma GCC diagnostic pop

// Its name says it reads its return address: the provider gives it no exit probe.
__attribute__((noinline, noipa)) std::uint64_t tpw_fake_setjmp(std::uint64_t x) {
  g_tpw_sink.fetch_add(x, std::memory_order_relaxed);
  return x + 2;
}

}  // extern "C"

// tpw_tail_a(x) = 2 * (x + 1), by a tail call (`jmp`) to tpw_tail_b(y) = 2 * y; both are
// long enough for the jump (5 bytes of whole instructions before any branch).
// tpw_ipa_caller(x) = 2x calls tpw_leaf(x) = x + 1 the way GCC's -fipa-ra and
// -fipa-stack-alignment allow for a known leaf: r8 and xmm2 are kept across the call and
// the stack is NOT 16-byte aligned at it.
// tpx_short(x) = x + 1 is 4 bytes, and tpx_short_next starts right after it (no padding
// between them): too short for the jump. tpx_padded(x) = x + 1 is the same 4 bytes with
// the alignment fill after it (the assembler's NOPs): the jump covers the fill.
asm(R"(
        .text
        .globl  tpw_tail_a
        .type   tpw_tail_a, @function
        .p2align 4
tpw_tail_a:
        addq    $1, %rdi
        nopl    0(%rax)
        jmp     tpw_tail_b
        .size   tpw_tail_a, .-tpw_tail_a

        .globl  tpw_tail_b
        .type   tpw_tail_b, @function
        .p2align 4
tpw_tail_b:
        leaq    (%rdi,%rdi), %rax
        nopl    0(%rax)
        ret
        .size   tpw_tail_b, .-tpw_tail_b

        .globl  tpw_leaf
        .type   tpw_leaf, @function
        .p2align 4
tpw_leaf:
        leaq    1(%rdi), %rax
        nopl    0(%rax)
        ret
        .size   tpw_leaf, .-tpw_leaf

        .globl  tpw_ipa_caller
        .type   tpw_ipa_caller, @function
        .p2align 4
tpw_ipa_caller:
        movq    %rdi, %r8
        movq    %rdi, %xmm2
        call    tpw_leaf
        movq    %xmm2, %rax
        addq    %r8, %rax
        ret
        .size   tpw_ipa_caller, .-tpw_ipa_caller

        .globl  tpx_short
        .type   tpx_short, @function
        .p2align 4
tpx_short:
        leal    1(%rdi), %eax
        ret
        .size   tpx_short, .-tpx_short

        .globl  tpx_short_next
        .type   tpx_short_next, @function
tpx_short_next:
        leal    2(%rdi), %eax
        ret
        .size   tpx_short_next, .-tpx_short_next

        .globl  tpx_padded
        .type   tpx_padded, @function
        .p2align 4
tpx_padded:
        leal    1(%rdi), %eax
        ret
        .size   tpx_padded, .-tpx_padded
        .p2align 4
)");
