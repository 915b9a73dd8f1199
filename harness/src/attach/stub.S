/* The code live attach copies into the target: the hijack stub, which runs on the one
   stopped thread, and the loader, which runs on a thread the stub starts. Position
   independent and relocation free (every address comes from the frame or the region), so
   the launcher copies the bytes between crossmod_attach_blob_begin and _end as they are.
   It lives in .rodata: the launcher never executes it.
   Thread and signal safety of the stub: it runs with the thread's signal mask unchanged;
   a handler may run on top of it at any instruction, because everything it keeps lies
   above its rsp (see stub_layout.h) and it never touches the red zone. */
#include "stub_layout.h"

        .intel_syntax noprefix

/* rax = CLOCK_MONOTONIC in ns; needs 16 bytes of scratch at [rsp]; clobbers rcx, rdx,
   rsi, rdi, r11 (a raw syscall: the vDSO's address is not known in the target). */
.macro NOW_NS
        mov eax, ATTACH_SYS_CLOCK_GETTIME
        mov edi, ATTACH_CLOCK_MONOTONIC
        mov rsi, rsp
        syscall
        imul rax, qword ptr [rsp], 1000000000
        add rax, qword ptr [rsp + 8]
.endm

/* XSAVE's requested-feature bitmap EDX:EAX from the 64-bit mask in rcx. */
.macro MASK_TO_EDX_EAX
        mov eax, ecx
        shr rcx, 32
        mov edx, ecx
.endm

        .section .rodata.crossmod_attach, "a"
        .p2align 4
        .globl crossmod_attach_blob_begin
        .globl crossmod_attach_blob_end
        .hidden crossmod_attach_blob_begin
        .hidden crossmod_attach_blob_end
crossmod_attach_blob_begin:
/* Entered with rsp = the frame header H (the only registers the launcher changed are rip
   and rsp, and orig_rax so the kernel restarts nothing), all others as interrupted. */
        /* 1. Save rflags and the general registers; ABI state for calls (DF clear). */
        pushfq
        push rax
        push rcx
        push rdx
        push rbx
        push rbp
        push rsi
        push rdi
        push r8
        push r9
        push r10
        push r11
        push r12
        push r13
        push r14
        push r15
        cld
        mov rbx, rsp                        /* saved registers (callee-saved from here on) */
        lea rbp, [rsp + ATTACH_SAVED_BYTES] /* header */

        /* 2. Save the x87/SSE/AVX/AVX-512 state: the calls below clobber vector registers
           (glibc's string functions use them). XSAVE needs a 64-byte aligned area and
           writes only XSTATE_BV of its header (bytes 512..575); XRSTOR faults unless the
           rest of the header is zero (SDM vol. 1, 13.4.2 and 13.8), so zero it first. */
        sub rsp, qword ptr [rbp + ATTACH_H_XSAVE_SIZE]
        and rsp, -64
        mov r12, rsp                        /* save area */
        mov rcx, qword ptr [rbp + ATTACH_H_XSAVE_MASK]
        test rcx, rcx
        jz 1f
        xor eax, eax
        mov qword ptr [r12 + 512], rax
        mov qword ptr [r12 + 520], rax
        mov qword ptr [r12 + 528], rax
        mov qword ptr [r12 + 536], rax
        mov qword ptr [r12 + 544], rax
        mov qword ptr [r12 + 552], rax
        mov qword ptr [r12 + 560], rax
        mov qword ptr [r12 + 568], rax
        MASK_TO_EDX_EAX
        xsave64 [r12]
        jmp 2f
1:      fxsave64 [r12]
2:      fninit                              /* ABI: empty x87 stack at calls */
        sub rsp, 32                         /* scratch; rsp stays 16-byte aligned */
        mov dword ptr [rsp], ATTACH_MXCSR_DEFAULT
        ldmxcsr dword ptr [rsp]
        NOW_NS
        mov r15, rax                        /* stub entry time */

        /* 3. Map the region at the launcher's hint; never over anything (NOREPLACE). */
        mov eax, ATTACH_SYS_MMAP
        mov rdi, qword ptr [rbp + ATTACH_H_HINT]
        mov rsi, qword ptr [rbp + ATTACH_H_REGION_SIZE]
        mov edx, ATTACH_PROT_RW
        mov r10d, ATTACH_MAP_FLAGS
        mov r8, -1
        xor r9d, r9d
        syscall
        cmp rax, qword ptr [rbp + ATTACH_H_HINT]
        je 4f
        cmp rax, -4095                      /* -errno? */
        jae 3f
        /* A kernel without MAP_FIXED_NOREPLACE (before 4.17) took it as a hint and put
           the region elsewhere: the launcher would not find it there, so give it back. */
        mov rdi, rax
        mov rsi, qword ptr [rbp + ATTACH_H_REGION_SIZE]
        mov eax, ATTACH_SYS_MUNMAP
        syscall
        mov rax, -ATTACH_EEXIST
3:      neg rax
        mov r13, rax
        shl r13, 8
        or r13, ATTACH_STUB_NO_REGION
        jmp 6f

        /* 4. Fill the region from the image and start the loader thread. */
4:      mov r14, rax                        /* region */
        lea rsi, [rbp + ATTACH_HEADER_SIZE]
        mov rdi, r14
        mov rcx, qword ptr [rbp + ATTACH_H_IMAGE_SIZE]
        rep movsb
        mov qword ptr [r14 + ATTACH_R_T_STUB_ENTRY], r15
        lea rdi, [r14 + ATTACH_R_THREAD]
        xor esi, esi
        lea rdx, [rip + crossmod_attach_loader]
        mov rcx, r14
        call qword ptr [rbp + ATTACH_H_PTHREAD_CREATE]
        mov dword ptr [r14 + ATTACH_R_CREATE_RC], eax
        test eax, eax
        jnz 5f
        mov rdi, qword ptr [r14 + ATTACH_R_THREAD]
        call qword ptr [rbp + ATTACH_H_PTHREAD_DETACH]
        mov r13d, ATTACH_STUB_DONE
        jmp 55f
5:      mov r13d, eax
        shl r13, 8
        or r13, ATTACH_STUB_CREATE_FAILED
55:     NOW_NS
        mov qword ptr [r14 + ATTACH_R_T_STUB_EXIT], rax
        mov dword ptr [r14 + ATTACH_R_STUB_STATE], r13d

        /* 5. Restore the extended state, then the general registers with rax replaced by
           the launcher's resume value, rflags, and return to the resume rip with rsp = S
           (`ret imm16` pops the rip from S-144, below the red zone, and adds the rest). */
6:      mov rcx, qword ptr [rbp + ATTACH_H_XSAVE_MASK]
        test rcx, rcx
        jz 7f
        MASK_TO_EDX_EAX
        xrstor64 [r12]
        jmp 8f
7:      fxrstor64 [r12]
8:      mov rax, qword ptr [rbp + ATTACH_H_STATE_ADDR]
        mov qword ptr [rax], r13
        mov rax, qword ptr [rbp + ATTACH_H_RESUME_RAX]
        mov qword ptr [rbx + ATTACH_SAVED_RAX], rax
        mov rsp, rbx
        pop r15
        pop r14
        pop r13
        pop r12
        pop r11
        pop r10
        pop r9
        pop r8
        pop rdi
        pop rsi
        pop rbp
        pop rbx
        pop rdx
        pop rcx
        pop rax
        popfq
        mov rsp, qword ptr [rsp + ATTACH_H_RESUME_SLOT]
        ret ATTACH_RET_POP

/* void* loader(region): dlopen(path, flags), dlsym(handle, entry), entry(arg); every
   result goes into the region, dlerror()'s text included. Runs on its own thread, so a
   lock any other thread holds only delays it. */
        .p2align 4
crossmod_attach_loader:
        push rbx
        push r12
        sub rsp, 24                         /* 16-byte aligned at calls; NOW_NS scratch */
        mov rbx, rdi
        NOW_NS
        mov qword ptr [rbx + ATTACH_R_T_LOADER], rax
        mov dword ptr [rbx + ATTACH_R_LOADER_STATE], ATTACH_LOADER_LOADING
        mov rdi, qword ptr [rbx + ATTACH_R_PATH]
        mov esi, dword ptr [rbx + ATTACH_R_DLOPEN_FLAGS]
        call qword ptr [rbx + ATTACH_R_DLOPEN]
        mov qword ptr [rbx + ATTACH_R_HANDLE], rax
        mov r12, rax
        NOW_NS
        mov qword ptr [rbx + ATTACH_R_T_LOADED], rax
        test r12, r12
        jz 1f
        mov rdi, r12
        mov rsi, qword ptr [rbx + ATTACH_R_ENTRY_NAME]
        call qword ptr [rbx + ATTACH_R_DLSYM]
        test rax, rax
        jz 2f
        mov qword ptr [rbx + ATTACH_R_ENTRY_ADDR], rax
        mov dword ptr [rbx + ATTACH_R_LOADER_STATE], ATTACH_LOADER_IN_ENTRY
        mov rdi, qword ptr [rbx + ATTACH_R_ARG]
        call rax
        mov dword ptr [rbx + ATTACH_R_ENTRY_RC], eax
        NOW_NS
        mov qword ptr [rbx + ATTACH_R_T_ENTRY_DONE], rax
        mov dword ptr [rbx + ATTACH_R_LOADER_STATE], ATTACH_LOADER_DONE
        jmp 9f
1:      mov r12d, ATTACH_LOADER_LOAD_FAILED
        jmp 3f
2:      mov r12d, ATTACH_LOADER_NO_ENTRY
3:      call qword ptr [rbx + ATTACH_R_DLERROR]
        lea rdi, [rbx + ATTACH_R_ERROR]
        test rax, rax
        jz 5f
        mov ecx, ATTACH_R_ERROR_CAP - 1
4:      mov dl, byte ptr [rax]
        test dl, dl
        jz 5f
        mov byte ptr [rdi], dl
        inc rax
        inc rdi
        dec ecx
        jnz 4b
5:      mov byte ptr [rdi], 0
        mov dword ptr [rbx + ATTACH_R_LOADER_STATE], r12d
9:      xor eax, eax
        add rsp, 24
        pop r12
        pop rbx
        ret
crossmod_attach_blob_end:

        .section .note.GNU-stack, "", @progbits
