#!/usr/bin/env bash
# Does an RWX text segment alone slow a program down? The probes layer leaves the text
# segment of every object holding a probe site RWX (probes/README.md); under `crossmod
# profile --policy none --trace ...` that is one of the differences from the run alone
# that instruction counts cannot see. This builds two tiny preloads, one whose constructor
# makes the main program's executable segment RWX and one that does nothing, and compares
# them interleaved with profiler/scripts/configs_ab.py (ratio rwx / nop).
#
#   profiler/scripts/rwx_text_ab.sh ROUNDS [COMMAND...]
#   (default COMMAND: /usr/bin/python3 profiler/workloads/python_cpu.py 40)
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:?usage: rwx_text_ab.sh ROUNDS [COMMAND...]}
shift
cmd=${*:-/usr/bin/python3 profiler/workloads/python_cpu.py 40}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/rwx.c" <<'C'
#define _GNU_SOURCE
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>
static int cb(struct dl_phdr_info* i, size_t n, void* d) {
  (void)n; (void)d;
  if (i->dlpi_name && i->dlpi_name[0]) return 0;  /* the main program: first, empty name */
  const long pg = sysconf(_SC_PAGESIZE);
  for (int k = 0; k < i->dlpi_phnum; k++) {
    const ElfW(Phdr)* p = &i->dlpi_phdr[k];
    if (p->p_type != PT_LOAD || !(p->p_flags & PF_X)) continue;
    const unsigned long b = (i->dlpi_addr + p->p_vaddr) & ~(unsigned long)(pg - 1);
    const unsigned long e = (i->dlpi_addr + p->p_vaddr + p->p_memsz + pg - 1) & ~(unsigned long)(pg - 1);
    mprotect((void*)b, e - b, PROT_READ | PROT_WRITE | PROT_EXEC);
  }
  return 1;
}
__attribute__((constructor)) static void init(void) { dl_iterate_phdr(cb, 0); }
C
echo '__attribute__((constructor)) static void init(void) {}' > "$tmp/nop.c"
gcc -O2 -shared -fPIC "$tmp/rwx.c" -o "$tmp/rwx.so"
gcc -O2 -shared -fPIC "$tmp/nop.c" -o "$tmp/nop.so"
/usr/bin/python3 profiler/scripts/configs_ab.py "$rounds" "cmd=$cmd" \
  nop="bare ENV:LD_PRELOAD=$tmp/nop.so" rwx="bare ENV:LD_PRELOAD=$tmp/rwx.so"
