#!/usr/bin/env python3
"""Interleaved A/B of two builds' latency estimates against latency_lab's ground truth.

    profiler/scripts/accuracy_ab.py BUILD_A BUILD_B ROUNDS [THREADS] [POLICY,POLICY...] [PROVIDER,...]

For a change to compensation or to the probes' path: each round runs, for each provider
(default cyg,pfe: latency_lab_cyg and latency_lab_pfe; `trace`: latency_lab_plain under
`--trace 'lab_*'`, BUILD_B's binary for both arms), the program once without the profiler
(BUILD_B's binary: the base
run of lab_truth.py) and then under `crossmod profile --policy P` of build A and of
build B for every policy (default paper,budget; 8 threads, 3,000 iterations each), A and
B alternating and the order flipped every round. Each function's on-CPU estimate is
compared with the whole call's truth (lab_truth.call_truth). Prints per build, provider
and function the median over runs of estimate - truth (ticks) and of the interval's
half-width, and per build how many intervals covered the truth. Writes into a temporary folder only.
"""
import json
import statistics
import subprocess
import sys
import tempfile

from lab_truth import call_estimates


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    builds = {"A": sys.argv[1], "B": sys.argv[2]}
    rounds = int(sys.argv[3])
    threads = int(sys.argv[4]) if len(sys.argv) > 4 else 8
    policies = sys.argv[5].split(",") if len(sys.argv) > 5 else ["paper", "budget"]
    providers = sys.argv[6].split(",") if len(sys.argv) > 6 else ["cyg", "pfe"]
    if any(p not in ("cyg", "pfe", "trace") for p in providers):
        sys.exit("accuracy_ab.py: providers are cyg, pfe, trace")
    bias, cover = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = ["A", "B"] if r % 2 == 0 else ["B", "A"]
            for prov in providers:
                args = ["--threads", str(threads), "--iterations", str(24000 // threads)]
                variant = "plain" if prov == "trace" else prov
                trace = ["--trace", "lab_*"] if prov == "trace" else []
                lab_b = f"{builds['B']}/profiler/workloads/latency_lab_{variant}"
                subprocess.run([lab_b, *args, "--truth", f"{tmp}/base.json"], check=True, stdout=subprocess.DEVNULL)
                for policy in policies:
                    for arm in order:
                        d = f"{tmp}/r{r}-{prov}-{policy}-{arm}"
                        lab = lab_b if prov == "trace" else f"{builds[arm]}/profiler/workloads/latency_lab_{variant}"
                        subprocess.run([f"{builds[arm]}/crossmod", "profile", "--policy", policy, "--quiet", *trace,
                                        "--out", d, "--", lab, *args, "--truth", d + ".json"],
                                       check=True, stdout=subprocess.DEVNULL)
                        for f, e, call, lo, hi in call_estimates(d + ".json", d + "/profile.json", f"{tmp}/base.json"):
                            bias.setdefault((arm, prov, f["name"]), []).append(
                                (e["oncpu_mean_ticks"] - call, (hi - lo) / 2))
                            c = cover.setdefault(arm, [0, 0])
                            c[0] += lo <= call <= hi
                            c[1] += 1
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print("build provider function        est-truth  half-width  (median ticks over runs)")
    for (arm, prov, name), v in sorted(bias.items()):
        print(f"{arm:5} {prov:8} {name:15} {statistics.median(x[0] for x in v):+9.0f} "
              f"{statistics.median(x[1] for x in v):10.0f}   n={len(v)}")
    for arm, (k, n) in sorted(cover.items()):
        print(f"{arm}: {builds[arm]}: intervals covering the call's truth {k}/{n}")


if __name__ == "__main__":
    main()
