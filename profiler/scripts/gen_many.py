#!/usr/bin/env python3
"""Writes a C program with N tiny functions called through a table by 4 threads, ROUNDS
rounds (default 200; the README's many-functions check):  gen_many.py 3000 [ROUNDS] > many.c
  gcc -O2 -finstrument-functions -pthread many.c -o many_cyg
  gcc -O2 -fpatchable-function-entry=5 -pthread many.c -o many_pfe
Expected calls per f<i>: 4 x ROUNDS; run() 4, main 1."""
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
print("#include <stdio.h>\n#include <pthread.h>")
for i in range(n):
    print(f"__attribute__((noipa)) unsigned long f{i}(unsigned long x) {{ return x * {i + 3}u + 1; }}")
print("typedef unsigned long (*fn)(unsigned long);")
print("static fn tab[] = {" + ",".join(f"f{i}" for i in range(n)) + "};")
print(f"static void* run(void* a) {{ unsigned long s = 0; for (int r = 0; r < {rounds}; r++) for (int i = 0; i < {n}; i++) s += tab[i](s); return (void*)s; }}")
print(f'int main(void) {{ pthread_t t[4]; for (int i = 0; i < 4; i++) pthread_create(&t[i], 0, run, 0); for (int i = 0; i < 4; i++) pthread_join(t[i], 0); printf("calls %d\\n", 4 * {rounds} * {n}); return 0; }}')
