#!/usr/bin/env python3
"""Interleaved A/B of two builds' calls_estimated against the exact counts of `full`.

    profiler/scripts/calls_ab.py BUILD_A BUILD_B ROUNDS WORKLOAD

WORKLOAD, as scripts/profile_eval.py defines it: sqlite3 (Debian's sqlite3 on
sqlite3_workload.sql at 400,000 rows with --trace 'sqlite3_*'), python3 (python_cpu.py 20
with --trace 'Py*'), latency_lab_cyg or latency_lab_pfe (8 threads x 3,000 iterations),
kvpipe_cyg or kvpipe_pfe (8 threads x 10,000 operations).
Each round runs the program once under
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
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import profile_eval  # noqa: E402  (the evaluation's workload definitions)

NAMES = {"sqlite3": "sqlite3", "python3": "python3", "latency_lab_cyg": "lab-cyg", "latency_lab_pfe": "lab-pfe",
         "kvpipe_cyg": "kvpipe-cyg", "kvpipe_pfe": "kvpipe-pfe"}


def workload(build, name, tmp):
    """profile_eval's definition of the workload at this script's sizes."""
    if name not in NAMES:
        sys.exit(f"calls_ab.py: unknown workload {name!r}")
    args = SimpleNamespace(lab_iterations=3000, kv_ops=10000, py_scale=20, sql_rows=400000, out_dir=Path(tmp),
                           python_trace="Py*", sqlite_trace="sqlite3_*")
    w = profile_eval.workloads(args, Path(build) / "profiler" / "workloads")[NAMES[name]]
    if w.stdin is not None and not w.stdin.exists():
        w.stdin.write_text(args.sql_to_write[1])
    return w


def run(build, w, policy, out):
    cmd = [f"{build}/crossmod", "profile", "--policy", policy, "--quiet", "--out", out]
    cmd += ["--trace", w.trace] if w.trace else []
    with open(w.stdin) if w.stdin else open("/dev/null") as inp:
        subprocess.run(cmd + ["--", *w.argv], stdin=inp, stdout=subprocess.DEVNULL, check=True)
    return {f["name"]: f for f in json.load(open(Path(out) / "profile.json"))["functions"]}


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    builds = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds = int(sys.argv[3])
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        ws = {arm: workload(b, sys.argv[4], tmp) for arm, b in builds.items()}
        for r in range(rounds):
            truth = {n: f["calls_observed"] for n, f in run(builds["B"], ws["B"], "full", f"{tmp}/r{r}-full").items()}
            for policy in ("paper", "budget"):
                for arm in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    est = run(builds[arm], ws[arm], policy, f"{tmp}/r{r}-{policy}-{arm}")
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
