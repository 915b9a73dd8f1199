/* The exit trampoline of tracepoint probes: like crossmod_probes_exit_trampoline
 * (trampoline_x86_64.S), which a function with a redirected return address returns into,
 * but saving EVERY caller-saved register, not only the return-value ones. Code nobody
 * rebuilt for us may rely on more than the ABI: GCC's interprocedural register allocation
 * (-fipa-ra, with LTO in Debian's python3.11) lets a caller keep values in caller-saved
 * registers across a call to a callee known not to clobber them; the exit dispatcher
 * would clobber them. That part is a precaution (not observed to matter); the stack
 * realignment below is not (python3 crashed in the dispatcher without it).
 *
 * Saves rax rcx rdx rsi rdi r8-r11, RFLAGS and xmm0-15 (not x87, not the AVX upper halves:
 * the dispatcher uses neither). The stack is realigned: rsp = slot + 8 is NOT always
 * 0 (mod 16) here, because GCC calls leaf functions it knows need no alignment with an
 * unaligned stack (-fipa-stack-alignment; observed in python3.11: PyConfig_InitPythonConfig
 * calls _PyConfig_InitCompatConfig at rsp = 8 (mod 16)). E = rsp on entry = rbp + 96.
 * Thread and signal safety: reentrant; the dispatcher neither allocates nor locks. No CFI
 * can describe its caller (the shadow stack holds it): see trampoline_x86_64.S. */
        .text
        .globl  crossmod_probes_exit_trampoline_full
        .hidden crossmod_probes_exit_trampoline_full
        .type   crossmod_probes_exit_trampoline_full, @function
        .p2align 4
crossmod_probes_exit_trampoline_full:
        subq    $8, %rsp                /* placeholder for the real return address: E - 8 */
        pushq   %rax
        pushq   %rcx
        pushq   %rdx
        pushq   %rsi
        pushq   %rdi
        pushq   %r8
        pushq   %r9
        pushq   %r10
        pushq   %r11
        pushfq
        pushq   %rbp
        movq    %rsp, %rbp              /* E = rbp + 8 * 12 */
        cld
        andq    $-16, %rsp
        subq    $256, %rsp
        movdqa  %xmm0, 0(%rsp)
        movdqa  %xmm1, 16(%rsp)
        movdqa  %xmm2, 32(%rsp)
        movdqa  %xmm3, 48(%rsp)
        movdqa  %xmm4, 64(%rsp)
        movdqa  %xmm5, 80(%rsp)
        movdqa  %xmm6, 96(%rsp)
        movdqa  %xmm7, 112(%rsp)
        movdqa  %xmm8, 128(%rsp)
        movdqa  %xmm9, 144(%rsp)
        movdqa  %xmm10, 160(%rsp)
        movdqa  %xmm11, 176(%rsp)
        movdqa  %xmm12, 192(%rsp)
        movdqa  %xmm13, 208(%rsp)
        movdqa  %xmm14, 224(%rsp)
        movdqa  %xmm15, 240(%rsp)
        leaq    96(%rbp), %rdi          /* rsp on entry: identifies the frame */
        call    crossmod_probes_exit_dispatch
        movq    %rax, 88(%rbp)          /* the real return address into the placeholder */
        movdqa  0(%rsp), %xmm0
        movdqa  16(%rsp), %xmm1
        movdqa  32(%rsp), %xmm2
        movdqa  48(%rsp), %xmm3
        movdqa  64(%rsp), %xmm4
        movdqa  80(%rsp), %xmm5
        movdqa  96(%rsp), %xmm6
        movdqa  112(%rsp), %xmm7
        movdqa  128(%rsp), %xmm8
        movdqa  144(%rsp), %xmm9
        movdqa  160(%rsp), %xmm10
        movdqa  176(%rsp), %xmm11
        movdqa  192(%rsp), %xmm12
        movdqa  208(%rsp), %xmm13
        movdqa  224(%rsp), %xmm14
        movdqa  240(%rsp), %xmm15
        movq    %rbp, %rsp
        popq    %rbp
        popfq
        popq    %r11
        popq    %r10
        popq    %r9
        popq    %r8
        popq    %rdi
        popq    %rsi
        popq    %rdx
        popq    %rcx
        popq    %rax
        ret
        .size   crossmod_probes_exit_trampoline_full, .-crossmod_probes_exit_trampoline_full

        .section .note.GNU-stack,"",@progbits
