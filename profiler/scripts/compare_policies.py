#!/usr/bin/env python3
"""Interleaved comparison of `crossmod profile` policies on one program (the README's table).

    profiler/scripts/compare_policies.py BUILD_DIR ROUNDS -- PROGRAM ARGS...

Each round runs the program bare and under every policy, in a shuffled order per round
(A, B, C, ... interleaved, never block after block); prints the median over rounds of CPU
seconds (children's rusage), instrumentation and toggle shares, toggles/s, samples/s.
The Table-3 driver of the evaluation branch is the real measurement; this is a quick look.
"""
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile

POLICIES = ["none", "full", "paper", "budget", "converge"]


def cpu_of(cmd):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: compare_policies.py BUILD_DIR ROUNDS -- PROGRAM ARGS...")
    build, rounds, prog = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
    rows = {p: [] for p in ["bare"] + POLICIES}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ["bare"] + POLICIES
            random.Random(r).shuffle(order)
            for p in order:
                if p == "bare":
                    rows[p].append({"cpu_s": cpu_of(prog)})
                    continue
                out = os.path.join(tmp, f"{p}-{r}")
                subprocess.run([os.path.join(build, "crossmod"), "profile", "--quiet", "--policy", p,
                                "--out", out, "--"] + prog, stdout=subprocess.DEVNULL, check=False)
                with open(os.path.join(out, "profile.json")) as f:
                    j = json.load(f)
                o = j["overhead"]
                rows[p].append({"cpu_s": j["run"]["cpu_s"], "instr_share": o["instr_share"],
                                "toggle_share": o["toggle_share"], "toggles_per_s": o["toggles_per_s"],
                                "samples_per_s": o["samples_per_s"], "probes": o["probes"]})
    bare = statistics.median(x["cpu_s"] for x in rows["bare"])
    print(f"| policy | cpu s (median of {rounds}) | vs bare | instr share | toggle share | toggles/s | samples/s | probes |")
    print("|---|---|---|---|---|---|---|---|")
    for p, xs in rows.items():
        med = lambda k: statistics.median(x[k] for x in xs) if k in xs[0] else float("nan")
        cpu = med("cpu_s")
        if p == "bare":
            print(f"| bare | {cpu:.3f} | 1.00 | - | - | - | - | - |")
            continue
        print(f"| {p} | {cpu:.3f} | {cpu / bare:.2f} | {med('instr_share'):.4f} | {med('toggle_share'):.4f} | "
              f"{med('toggles_per_s'):.0f} | {med('samples_per_s'):.0f} | {med('probes'):.0f} |")


if __name__ == "__main__":
    main()
