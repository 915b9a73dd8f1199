/* Byte layout shared by stub.S and the injector: the frame the launcher writes below the
   hijacked thread's stack pointer, and the region the stub maps for the loader thread.
   Plain #defines so the assembler can include it; injector.cpp static_asserts the
   constants that mirror kernel and libc headers. Thread safety: constants only. */
#ifndef CROSSMOD_ATTACH_STUB_LAYOUT_H
#define CROSSMOD_ATTACH_STUB_LAYOUT_H

/* The launcher's frame. With S = the thread's rsp at the stop:
     [S-128, S)      the interrupted code's red zone (SysV ABI 3.2.2): never touched
     S-136           state word: ATTACH_STACK_PENDING until the stub ends, then its result
     S-144           resume rip; the stub's last instruction `ret ATTACH_RET_POP` runs with
                     rsp = S-144, takes the rip from there and leaves rsp = S
     [H, H+header)   the header below, H = the rsp the launcher gives the stub
     [H+header, ..)  the image the stub copies into its region (below S-144)
   The stub saves registers and its extended-state area below H, so every frame a signal
   handler pushes while the stub runs lands below all of it. */
#define ATTACH_RED_ZONE 128
#define ATTACH_STATE_BELOW 136
#define ATTACH_RESUME_BELOW 144
#define ATTACH_RET_POP 136 /* ATTACH_RESUME_BELOW - 8 */

/* Header fields (8 bytes each), offsets from H. */
#define ATTACH_H_RESUME_SLOT 0     /* the address S-144 */
#define ATTACH_H_RESUME_RAX 8      /* rax to resume with (the syscall number on a restart) */
#define ATTACH_H_STATE_ADDR 16     /* the address S-136 */
#define ATTACH_H_HINT 24           /* where the region must be mapped */
#define ATTACH_H_REGION_SIZE 32
#define ATTACH_H_IMAGE_SIZE 40     /* bytes of image after the header */
#define ATTACH_H_PTHREAD_CREATE 48
#define ATTACH_H_PTHREAD_DETACH 56
#define ATTACH_H_XSAVE_SIZE 64     /* bytes reserved for XSAVE/FXSAVE (before 64-alignment) */
#define ATTACH_H_XSAVE_MASK 72     /* XSAVE's EDX:EAX; 0 = FXSAVE */
#define ATTACH_HEADER_SIZE 128

/* Registers the stub pushes below H: rflags, then 15 general registers. */
#define ATTACH_SAVED_BYTES 128
#define ATTACH_SAVED_RAX 112       /* offset of the saved rax from the last push */

/* The region (offsets from its start). Filled from the image, then by the stub and the
   loader thread; the launcher reads it through /proc/PID/mem. */
#define ATTACH_R_MAGIC 0           /* the launcher's cookie */
#define ATTACH_R_STUB_STATE 8      /* u32 ATTACH_STUB_* */
#define ATTACH_R_LOADER_STATE 12   /* u32 ATTACH_LOADER_* */
#define ATTACH_R_CREATE_RC 16      /* i32 pthread_create's result */
#define ATTACH_R_ENTRY_RC 20       /* i32 ENTRY's result */
#define ATTACH_R_THREAD 24         /* pthread_t of the loader thread */
#define ATTACH_R_HANDLE 32         /* dlopen's handle */
#define ATTACH_R_ENTRY_ADDR 40
#define ATTACH_R_T_STUB_ENTRY 48   /* CLOCK_MONOTONIC ns: stub saved the thread's state */
#define ATTACH_R_T_STUB_EXIT 56    /* stub about to restore it */
#define ATTACH_R_T_LOADER 64       /* loader thread started */
#define ATTACH_R_T_LOADED 72       /* dlopen returned */
#define ATTACH_R_T_ENTRY_DONE 80   /* ENTRY returned */
#define ATTACH_R_DLOPEN 88
#define ATTACH_R_DLSYM 96
#define ATTACH_R_DLERROR 104
#define ATTACH_R_DLOPEN_FLAGS 112
#define ATTACH_R_PATH 120          /* absolute addresses of the strings in the region */
#define ATTACH_R_ENTRY_NAME 128
#define ATTACH_R_ARG 136
#define ATTACH_R_ERROR 256         /* dlerror() text, NUL-terminated */
#define ATTACH_R_ERROR_CAP 512
#define ATTACH_R_STRINGS 768       /* path, entry name and argument, each NUL-terminated */

#define ATTACH_STACK_PENDING 0x474e49444e455041 /* "APENDING": stub has not finished */
#define ATTACH_STUB_DONE 1
#define ATTACH_STUB_NO_REGION 2      /* | errno << 8: the region could not be mapped */
#define ATTACH_STUB_CREATE_FAILED 3  /* | pthread_create's error << 8 */

#define ATTACH_LOADER_LOADING 1
#define ATTACH_LOADER_LOAD_FAILED 2
#define ATTACH_LOADER_NO_ENTRY 3
#define ATTACH_LOADER_IN_ENTRY 4
#define ATTACH_LOADER_DONE 5

/* Mirrors of kernel ABI values the stub uses (checked against the headers in C++). */
#define ATTACH_SYS_MMAP 9
#define ATTACH_SYS_MUNMAP 11
#define ATTACH_SYS_CLOCK_GETTIME 228
#define ATTACH_CLOCK_MONOTONIC 1
#define ATTACH_PROT_RW 3                /* PROT_READ | PROT_WRITE */
#define ATTACH_MAP_FLAGS 0x100022       /* MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE */
#define ATTACH_EEXIST 17
#define ATTACH_MXCSR_DEFAULT 0x1f80     /* the ABI's initial MXCSR: exceptions masked, RN */

#endif
