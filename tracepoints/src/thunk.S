/* The common probe thunk of every tracepoint trampoline. Entered by `call` from a
   trampoline's probe block with RAX = the probe context (RAX itself saved by the block,
   which also stepped RSP over the red zone). Saves exactly what the System V ABI lets the
   C++ handler clobber: the other caller-saved GPRs, RFLAGS and xmm0-15; clears DF as the
   ABI requires at a call (the traced instruction may run with DF set). x87 and AVX upper
   halves are not saved: the handler must not use them (documented in tracepoint.hpp).
   Async-signal-safe as far as the handler is.
   The dispatcher's second argument is the traced thread's RSP at the traced instruction:
   the probe block's lea (128) + push rax (8) + this call (8), then pushfq and 9 pushes
   (80) below it: RSP_traced = RBP + 224 once RBP holds RSP after the pushes. */
        .intel_syntax noprefix
        .text
        .globl  crossmod_tp_thunk
        .hidden crossmod_tp_thunk
        .type   crossmod_tp_thunk, @function
        .p2align 4
crossmod_tp_thunk:
        pushfq
        cld
        push    rcx
        push    rdx
        push    rsi
        push    rdi
        push    r8
        push    r9
        push    r10
        push    r11
        push    rbp
        mov     rbp, rsp
        lea     rsi, [rbp + 224]
        and     rsp, -16
        sub     rsp, 256
        movaps  [rsp + 0], xmm0
        movaps  [rsp + 16], xmm1
        movaps  [rsp + 32], xmm2
        movaps  [rsp + 48], xmm3
        movaps  [rsp + 64], xmm4
        movaps  [rsp + 80], xmm5
        movaps  [rsp + 96], xmm6
        movaps  [rsp + 112], xmm7
        movaps  [rsp + 128], xmm8
        movaps  [rsp + 144], xmm9
        movaps  [rsp + 160], xmm10
        movaps  [rsp + 176], xmm11
        movaps  [rsp + 192], xmm12
        movaps  [rsp + 208], xmm13
        movaps  [rsp + 224], xmm14
        movaps  [rsp + 240], xmm15
        mov     rdi, rax
        call    crossmod_tp_dispatch
        movaps  xmm0, [rsp + 0]
        movaps  xmm1, [rsp + 16]
        movaps  xmm2, [rsp + 32]
        movaps  xmm3, [rsp + 48]
        movaps  xmm4, [rsp + 64]
        movaps  xmm5, [rsp + 80]
        movaps  xmm6, [rsp + 96]
        movaps  xmm7, [rsp + 112]
        movaps  xmm8, [rsp + 128]
        movaps  xmm9, [rsp + 144]
        movaps  xmm10, [rsp + 160]
        movaps  xmm11, [rsp + 176]
        movaps  xmm12, [rsp + 192]
        movaps  xmm13, [rsp + 208]
        movaps  xmm14, [rsp + 224]
        movaps  xmm15, [rsp + 240]
        mov     rsp, rbp
        pop     rbp
        pop     r11
        pop     r10
        pop     r9
        pop     r8
        pop     rdi
        pop     rsi
        pop     rdx
        pop     rcx
        popfq
        ret
        .size   crossmod_tp_thunk, . - crossmod_tp_thunk

        .section .note.GNU-stack, "", @progbits
