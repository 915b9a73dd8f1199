#!/usr/bin/env python3
"""Interleaved A/B of two builds' start-up cost under `crossmod profile` (overhead.setup_s).

    profiler/scripts/setup_ab.py BUILD_A BUILD_B ROUNDS [PROFILE ARGS... -- PROGRAM ARGS...]

Default: `--policy none --trace 'Py*' -- /usr/bin/python3 -c pass` (the tracepoint attach
of python3, nearly all of such a run). Each round runs the command once under each build,
the order flipped every round, and reads profile.json's overhead.setup_s: the CPU time the
runtime's set-up took in the program (its thread's CPU clock, profiler/README.md). Prints
per build the median (10th, 90th percentile) in ms and the median of B / A per round.
Writes into a temporary folder only.
"""
import json
import statistics
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    builds = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds = int(sys.argv[3])
    rest = sys.argv[4:] or ["--policy", "none", "--trace", "Py*", "--", "/usr/bin/python3", "-c", "pass"]
    got = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for arm in (["A", "B"] if r % 2 == 0 else ["B", "A"]):
                out = f"{tmp}/r{r}-{arm}"
                subprocess.run([f"{builds[arm]}/crossmod", "profile", "--quiet", "--out", out, *rest],
                               check=True, stdout=subprocess.DEVNULL)
                got[arm].append(json.load(open(f"{out}/profile.json"))["overhead"]["setup_s"])
    for arm, v in got.items():
        s = sorted(v)
        print(f"{arm} {builds[arm]}: setup_s median {1e3 * statistics.median(v):.2f} ms "
              f"(p10 {1e3 * s[len(s) // 10]:.2f}, p90 {1e3 * s[9 * len(s) // 10]:.2f}), {len(v)} runs")
    ratios = [b / a for a, b in zip(got["A"], got["B"]) if a > 0]
    if ratios:
        print(f"B / A per round: median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
