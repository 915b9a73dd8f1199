/* The shared entry trampoline for patchable-entry and manual probe sites. A site's
 * `call rel32` (or a far thunk's `jmp [rip]`) lands here at the very start of the
 * instrumented function, before its prologue, so every argument register is live.
 *
 * Saves exactly what the SysV ABI lets crossmod_probes_entry_dispatch clobber and the
 * instrumented function may still need: rdi rsi rdx rcx r8 r9 (integer arguments), rax
 * (al = vector-register count for varargs), r10 (static chain), r11, xmm0-xmm7 (vector
 * arguments). The upper halves of ymm/zmm argument registers are NOT saved: the
 * dispatcher is built without AVX, and a probe function that uses AVX must be compiled
 * with -mvzeroupper semantics (GCC's default) - observed, not guaranteed.
 *
 * Stack: at the function entry rsp = 8 (mod 16); the site's call pushed 8 more, so here
 * rsp = 0 (mod 16). 9 pushes (72) + 136 bytes = 208: rsp = 0 (mod 16) at the inner call.
 * The red zone is not an issue: the site runs before the function has touched its stack.
 * Thread and signal safety: reentrant; the dispatcher neither allocates nor locks. */
        .text
        .globl  crossmod_probes_entry_trampoline
        .hidden crossmod_probes_entry_trampoline
        .type   crossmod_probes_entry_trampoline, @function
        .p2align 4
crossmod_probes_entry_trampoline:
        .cfi_startproc
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        pushq   %rdx
        .cfi_adjust_cfa_offset 8
        pushq   %rcx
        .cfi_adjust_cfa_offset 8
        pushq   %r8
        .cfi_adjust_cfa_offset 8
        pushq   %r9
        .cfi_adjust_cfa_offset 8
        pushq   %rax
        .cfi_adjust_cfa_offset 8
        pushq   %r10
        .cfi_adjust_cfa_offset 8
        pushq   %r11
        .cfi_adjust_cfa_offset 8
        subq    $136, %rsp
        .cfi_adjust_cfa_offset 136
        movdqu  %xmm0, 0(%rsp)
        movdqu  %xmm1, 16(%rsp)
        movdqu  %xmm2, 32(%rsp)
        movdqu  %xmm3, 48(%rsp)
        movdqu  %xmm4, 64(%rsp)
        movdqu  %xmm5, 80(%rsp)
        movdqu  %xmm6, 96(%rsp)
        movdqu  %xmm7, 112(%rsp)
        /* The return address into the site: 136 + 9 * 8 = 208 bytes up; above it the
         * instrumented function's own return-address slot (exit probes redirect it). */
        movq    208(%rsp), %rdi
        leaq    216(%rsp), %rsi
        call    crossmod_probes_entry_dispatch
        movdqu  0(%rsp), %xmm0
        movdqu  16(%rsp), %xmm1
        movdqu  32(%rsp), %xmm2
        movdqu  48(%rsp), %xmm3
        movdqu  64(%rsp), %xmm4
        movdqu  80(%rsp), %xmm5
        movdqu  96(%rsp), %xmm6
        movdqu  112(%rsp), %xmm7
        addq    $136, %rsp
        .cfi_adjust_cfa_offset -136
        popq    %r11
        .cfi_adjust_cfa_offset -8
        popq    %r10
        .cfi_adjust_cfa_offset -8
        popq    %rax
        .cfi_adjust_cfa_offset -8
        popq    %r9
        .cfi_adjust_cfa_offset -8
        popq    %r8
        .cfi_adjust_cfa_offset -8
        popq    %rcx
        .cfi_adjust_cfa_offset -8
        popq    %rdx
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        ret
        .cfi_endproc
        .size   crossmod_probes_entry_trampoline, .-crossmod_probes_entry_trampoline

/* The exit trampoline: an instrumented function whose exit probe was active at entry
 * returns here instead of to its caller (the entry dispatcher rewrote its return-address
 * slot and kept the real address in a per-thread shadow stack).
 *
 * Saves the return-value registers rax, rdx, xmm0, xmm1 (st0 is untouched: the dispatcher
 * uses no x87). On entry rsp = slot + 8 = 0 (mod 16); 8 (placeholder) + 16 + 40 = 64, so
 * rsp = 0 (mod 16) at the inner call.
 *
 * No CFI can describe the caller of this frame (its address lives in the shadow stack),
 * so an unwinder must never meet it: unwind_interpose.cpp writes the thread's redirected
 * return addresses back before a C++ exception or pthread_exit starts unwinding (those
 * frames' exit probes do not fire). longjmp is fine: frames it skips are dropped at the
 * next entry or exit on that thread. pthread_cancel is not covered (probes/README.md). */
        .text
        .globl  crossmod_probes_exit_trampoline
        .hidden crossmod_probes_exit_trampoline
        .type   crossmod_probes_exit_trampoline, @function
        .p2align 4
crossmod_probes_exit_trampoline:
        subq    $8, %rsp                /* placeholder for the real return address */
        pushq   %rax
        pushq   %rdx
        subq    $40, %rsp
        movdqu  %xmm0, 0(%rsp)
        movdqu  %xmm1, 16(%rsp)
        leaq    64(%rsp), %rdi          /* rsp on entry: identifies the frame */
        call    crossmod_probes_exit_dispatch
        movq    %rax, 56(%rsp)          /* the real return address into the placeholder */
        movdqu  0(%rsp), %xmm0
        movdqu  16(%rsp), %xmm1
        addq    $40, %rsp
        popq    %rdx
        popq    %rax
        ret
        .size   crossmod_probes_exit_trampoline, .-crossmod_probes_exit_trampoline

        .section .note.GNU-stack,"",@progbits
