#!/usr/bin/env python3
"""Interleaved A/B of how many functions two builds' `--trace` refuses, run after run.

    profiler/scripts/refusals_ab.py BUILD_A BUILD_B ROUNDS [PATTERN [PROGRAM ARGS...]]

Each round runs `crossmod profile --policy full --trace PATTERN -- PROGRAM ARGS` once
with each build (A, B, the order flipped every round); default PATTERN '*' and PROGRAM
python3 profiler/workloads/thread_imports.py (16 threads importing modules: objects
loaded late, after the threads' malloc heaps exist, so where their tracepoints may go
depends on the run's layout). Prints per build the refusals at start-up and in objects
loaded later, run by run, and their median. Writes into a temporary folder only.
"""
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    builds = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds = int(sys.argv[3])
    pattern = sys.argv[4] if len(sys.argv) > 4 else "*"
    program = sys.argv[5:] or ["/usr/bin/python3", str(HERE.parent / "workloads" / "thread_imports.py")]
    start = re.compile(r"(\d+) functions refused")
    late = re.compile(r"loaded later: \d+ objects, \d+ probes, (\d+) refused")
    seen = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for arm in (["A", "B"] if r % 2 == 0 else ["B", "A"]):
                out = f"{tmp}/r{r}-{arm}"
                p = subprocess.run([f"{builds[arm]}/crossmod", "profile", "--policy", "full", "--trace", pattern,
                                    "--out", out, "--", *program],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if p.returncode != 0:
                    sys.exit(f"refusals_ab.py: build {arm} exited {p.returncode}: {p.stderr.strip()[-400:]}")
                s = start.search(p.stderr)
                l = late.search(p.stderr)
                seen[arm].append((int(s.group(1)) if s else 0, int(l.group(1)) if l else 0))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    for arm in ("A", "B"):
        v = seen[arm]
        print(f"{arm}: {builds[arm]}")
        print(f"   refused at start-up: {' '.join(str(x[0]) for x in v)}  (median {statistics.median(x[0] for x in v):g})")
        print(f"   refused loaded later: {' '.join(str(x[1]) for x in v)}  (median {statistics.median(x[1] for x in v):g})")


if __name__ == "__main__":
    main()
