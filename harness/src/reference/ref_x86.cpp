// The reference detector's executor loop and CPUID read (see ref_x86.hpp).
// Signal safety: crossmod_ref_recover is entered from a signal handler's sigreturn; the
// loop touches no memory but its LoopArgs, its stack and its published line.
#include "reference/ref_x86.hpp"

#include <cpuid.h>

namespace crossmod::harness::reference {

unsigned line_size() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return 64;
  const unsigned line = ((ebx >> 8) & 0xFFu) * 8u;
  if (line < 16 || (line & (line - 1)) != 0) return 64;
  return line;
}

}  // namespace crossmod::harness::reference

// Why assembly: the loop body is the whole "disturbance" an executor adds around the
// site, and the point of the reference is that it is minimal and fixed: per call one xor,
// one indirect call, two register adds and one store of (executions << 1 | eax) to the
// executor's own line; every 64 calls one load of the stop flag (a line nobody writes
// until the end, so it stays in this core's cache).
// Why publish every call: the store goes to a line only this executor writes and only the
// patcher's once-per-toggle read (mid-dwell) touches, so it costs one line transfer per
// toggle, half a dwell away from the int3, however often it is written. Publishing every
// 64 calls was tried first: on this 2-vCPU guest under load an executor completes only
// ~20 calls per 5000-tick toggle (it spends the rest in int3 traps and descheduled), so
// 8 of 5000 toggles looked exposed; the per-toggle exposure rule needs the latest call.
//
// Registers: rbx = LoopArgs*, r12 = entry, r15 = published line, r13 = executions,
// r14 = executions that returned 1. All callee-saved, and neither the site, the stub nor
// any torn mix of them writes a register other than rax/rsp before it faults, so at a
// fault these still hold the loop's values.
// Stack: 5 pushes + the return address = 48 bytes, so RSP is 16-byte aligned at the call.
asm(R"(
    .text
    .p2align 6
    .globl crossmod_ref_exec_loop
    .type crossmod_ref_exec_loop, @function
crossmod_ref_exec_loop:
    push %rbx
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rdi, %rbx
    mov 0(%rbx), %r12
    mov 8(%rbx), %r15
    xor %r13d, %r13d
    xor %r14d, %r14d
    mov %rsp, 24(%rbx)
.Lref_loop:
    xor %eax, %eax
    call *%r12
    add %rax, %r14
    add $1, %r13
    lea (%rax,%r13,2), %rcx
    mov %rcx, (%r15)
    test $63, %r13d
    jnz .Lref_loop
    mov 16(%rbx), %rcx
    cmpb $0, (%rcx)
    je .Lref_loop
.Lref_exit:
    mov %r13, 32(%rbx)
    mov %r14, 40(%rbx)
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %rbx
    ret
    .size crossmod_ref_exec_loop, .-crossmod_ref_exec_loop

    # Entered with RSP = LoopArgs.loop_rsp after a tear: the faulting call is not counted;
    # check stop (the test-only torn mode faults on every call) and go on.
    .globl crossmod_ref_recover
    .type crossmod_ref_recover, @function
crossmod_ref_recover:
    mov 16(%rbx), %rcx
    cmpb $0, (%rcx)
    je .Lref_loop
    jmp .Lref_exit
    .size crossmod_ref_recover, .-crossmod_ref_recover
)");
