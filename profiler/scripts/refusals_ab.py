#!/usr/bin/env python3
"""Interleaved A/B of how many functions two builds' `--trace` refuses, run after run.

    profiler/scripts/refusals_ab.py BUILD_A BUILD_B ROUNDS [PATTERN [PROGRAM ARGS...]]

Each round runs `crossmod profile --policy full --trace PATTERN -- PROGRAM ARGS` once
with each build (A, B, the order flipped every round); default PATTERN '*' and PROGRAM
python3 profiler/workloads/thread_imports.py (16 threads importing modules: objects
loaded late, after the threads' malloc heaps exist, so where their tracepoints may go
depends on the run's layout). Prints per build the refusals at start-up and in objects
loaded later, run by run, and their median. Writes into a temporary folder only. Bad
arguments: one line on stderr, exit 2; a run that fails: exit 1.
"""
from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent


START = re.compile(r"(\d+) functions refused")
LATE = re.compile(r"loaded later: \d+ objects, \d+ probes, (\d+) refused")


def counts(stderr: str) -> tuple[int, int]:
    """(refused at start-up, refused in objects loaded later) from a profile's stderr note."""
    s, l = START.search(stderr), LATE.search(stderr)
    return (int(s.group(1)) if s else 0, int(l.group(1)) if l else 0)


def fail(msg: str) -> None:
    print(f"refusals_ab.py: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    argv = sys.argv[1:]
    if len(argv) < 3:
        fail("usage: refusals_ab.py BUILD_A BUILD_B ROUNDS [PATTERN [PROGRAM ARGS...]]")
    try:
        rounds = int(argv[2])
    except ValueError:
        fail(f"ROUNDS is not a number: {argv[2]!r}")
    a = SimpleNamespace(build_a=argv[0], build_b=argv[1], rounds=rounds,
                        pattern=argv[3] if len(argv) > 3 else "*", program=argv[4:])
    builds = {"A": a.build_a, "B": a.build_b}
    if a.rounds < 1:
        fail("ROUNDS must be at least 1")
    for arm, b in builds.items():
        if not os.access(f"{b}/crossmod", os.X_OK):
            fail(f"build {arm}: no executable {b}/crossmod")
    program = a.program or ["/usr/bin/python3", str(HERE.parent / "workloads" / "thread_imports.py")]
    seen = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for arm in (["A", "B"] if r % 2 == 0 else ["B", "A"]):
                out = f"{tmp}/r{r}-{arm}"
                run = subprocess.run([f"{builds[arm]}/crossmod", "profile", "--policy", "full", "--trace", a.pattern,
                                      "--out", out, "--", *program],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if run.returncode != 0:
                    last = run.stderr.strip().splitlines()[-1:] or [""]
                    print(f"refusals_ab.py: build {arm} exited {run.returncode}: {last[0]}", file=sys.stderr)
                    sys.exit(1)
                seen[arm].append(counts(run.stderr))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    for arm in ("A", "B"):
        v = seen[arm]
        print(f"{arm}: {builds[arm]}")
        print(f"   refused at start-up: {' '.join(str(x[0]) for x in v)}  (median {statistics.median(x[0] for x in v):g})")
        print(f"   refused loaded later: {' '.join(str(x[1]) for x in v)}  (median {statistics.median(x[1] for x in v):g})")


if __name__ == "__main__":
    main()
