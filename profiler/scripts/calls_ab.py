#!/usr/bin/env python3
"""Interleaved A/B of two builds' calls_estimated against the exact counts of `full`.

    profiler/scripts/calls_ab.py BUILD_A BUILD_B ROUNDS WORKLOAD

WORKLOAD: sqlite3 (Debian's sqlite3 on results/.../sqlite3_workload-400000.sql with
--trace 'sqlite3_*'), python3 (python_cpu.py 20 with --trace 'Py*'), latency_lab_cyg or
latency_lab_pfe (8 threads x 3,000 iterations). Each round runs the program once under
`--policy full` of BUILD_B (every call counted: the truth of that round; the workloads are
deterministic in their calls) and then under paper and budget of A and of B, the order of
A and B flipped every round. For the functions with at least 1,000 true calls, prints per
policy and build the median over functions of |log(estimated / true)| (of each function's
median ratio over rounds), how many are within 2x and within 25%, and the five worst.
Writes into a temporary folder only.
"""
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "results/amd-fam25-mod17-step1-1pkg/profile/sqlite3_workload-400000.sql"


def run(build, workload, policy, out):
    base = [f"{build}/crossmod", "profile", "--policy", policy, "--quiet", "--out", out]
    if workload == "sqlite3":
        with open(SQL) as sql:
            subprocess.run(base + ["--trace", "sqlite3_*", "--", "/usr/bin/sqlite3", ":memory:"], stdin=sql,
                           stdout=subprocess.DEVNULL, check=True)
    elif workload == "python3":
        subprocess.run(base + ["--trace", "Py*", "--", "/usr/bin/python3",
                               str(ROOT / "profiler/workloads/python_cpu.py"), "20"],
                       stdout=subprocess.DEVNULL, check=True)
    elif workload in ("latency_lab_cyg", "latency_lab_pfe"):
        subprocess.run(base + ["--", f"{build}/profiler/workloads/{workload}", "--threads", "8",
                               "--iterations", "3000"], stdout=subprocess.DEVNULL, check=True)
    else:
        sys.exit(f"calls_ab.py: unknown workload {workload!r}")
    return {f["name"]: f for f in json.load(open(Path(out) / "profile.json"))["functions"]}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    builds = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds, workload = int(sys.argv[3]), sys.argv[4]
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            truth = {n: f["calls_observed"] for n, f in run(builds["B"], workload, "full", f"{tmp}/r{r}-full").items()}
            for policy in ("paper", "budget"):
                for arm in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    est = run(builds[arm], workload, policy, f"{tmp}/r{r}-{policy}-{arm}")
                    for name, calls in truth.items():
                        if calls >= 1000 and name in est:
                            ratios.setdefault((policy, arm), {}).setdefault(name, []).append(
                                max(est[name]["calls_estimated"], 1e-9) / calls)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    for (policy, arm), per in sorted(ratios.items()):
        med = {n: statistics.median(v) for n, v in per.items()}
        logs = [abs(math.log(x)) for x in med.values()]
        worst = sorted(med.items(), key=lambda kv: -abs(math.log(kv[1])))[:5]
        print(f"{policy:7} {arm} {builds[arm]}: {len(med)} functions, median |log(est/true)| "
              f"{statistics.median(logs):.3f}, within 2x {sum(x < math.log(2) for x in logs)}, "
              f"within 25% {sum(x < math.log(1.25) for x in logs)}; worst "
              + ", ".join(f"{n} {x:.2f}" for n, x in worst))


if __name__ == "__main__":
    main()
