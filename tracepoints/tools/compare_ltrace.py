"""Compare a crossmod-trace table with `ltrace -c` output, function by function.

usage: compare_ltrace.py CROSSMOD_TABLE LTRACE_C_OUTPUT
Prints functions whose counts are equal, differ, or appear in one table only; exit 1 if
any function both tools report has different counts.
"""
import sys


def crossmod_counts(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3 and f[0].isdigit():
            out[f[2]] = int(f[0])
    return out


def ltrace_counts(path):
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) == 5 and f[3].isdigit():
            out[f[4]] = int(f[3])
    return out


def main():
    ours, theirs = crossmod_counts(sys.argv[1]), ltrace_counts(sys.argv[2])
    both = sorted(set(ours) & set(theirs))
    differ = [(f, ours[f], theirs[f]) for f in both if ours[f] != theirs[f]]
    print(f"{len(both)} functions in both, {len(both) - len(differ)} with equal counts")
    for f, a, b in differ:
        print(f"  differ: {f}: crossmod {a}, ltrace {b}")
    for f in sorted(set(ours) - set(theirs)):
        print(f"  crossmod only: {f} {ours[f]}")
    for f in sorted(set(theirs) - set(ours)):
        print(f"  ltrace only: {f} {theirs[f]}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
