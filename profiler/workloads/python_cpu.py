"""CPU-bound Python workload for `crossmod profile` through tracepoints (issue 12).

Recursive calls, dict and string churn, sorting and a small numeric loop: the mix of
interpreter paths (frame evaluation, dict/unicode objects, GC) a real script exercises.
Deterministic output, so a profiled run must print the same line as a plain one.

    python3 python_cpu.py [SCALE]      # SCALE (default 1) multiplies the work
"""
import sys


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def words(n):
    d = {}
    for i in range(n):
        k = "w%x" % (i * 2654435761 % 1000003)
        d[k] = d.get(k, 0) + len(k)
    return sum(d.values()), len(sorted(d))


def sieve(n):
    flags = bytearray([1]) * (n + 1)
    flags[0:2] = b"\x00\x00"
    for i in range(2, int(n ** 0.5) + 1):
        if flags[i]:
            flags[i * i::i] = bytes(len(range(i * i, n + 1, i)))
    return sum(flags)


def main():
    try:
        scale = int(sys.argv[1]) if len(sys.argv) > 1 else 1
        if scale < 1:
            raise ValueError
    except ValueError:
        print("python_cpu.py: SCALE must be a positive integer", file=sys.stderr)
        sys.exit(2)
    out = []
    for _ in range(scale):
        out.append(fib(22))
        out.append(words(30000))
        out.append(sieve(200000))
        out.append(sum(sorted((i * 7919) % 10007 for i in range(50000))))
    print("python_cpu:", scale, out[-4:])


if __name__ == "__main__":
    main()
