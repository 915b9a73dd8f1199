#!/usr/bin/env python3
"""Interleaved A/B of two builds' latency estimates against latency_lab's ground truth.

    profiler/scripts/accuracy_ab.py [--by-policy] BUILD_A BUILD_B ROUNDS [THREADS] [POLICY,POLICY...] [PROVIDER,...]

For a change to compensation or to the probes' path: each round runs, for each provider
(default cyg,pfe: latency_lab_cyg and latency_lab_pfe; `trace`: latency_lab_plain under
`--trace 'lab_*'`, BUILD_B's binary for both arms), the program once without the profiler
(BUILD_B's binary: the base
run of lab_truth.py) and then under `crossmod profile --policy P` of build A and of
build B for every policy (default paper,budget; 8 threads, 3,000 iterations each), A and
B alternating and the order flipped every round. Each function's on-CPU estimate is
compared with the whole call's truth (lab_truth.call_truth). Prints per build, provider
and function the median over runs of estimate - truth (ticks), of the interval's
half-width and of the systematic term (mean_sys_ticks), and how many intervals covered the
truth without and with it; and per build how many intervals covered the truth (and, for builds that write
it, how many intervals widened by the systematic term). --by-policy: the same per
policy instead of per build (both builds' runs together; e.g. BUILD_A = BUILD_B and the
policies full,paper: how each policy's intervals fare). A build given as DIR@K=V runs with
K=V added to the profiled runs' environment: one build with a trial switch read from the
environment can be both arms (e.g. build build@CROSSMOD_TRIAL=1). Writes into a
temporary folder only.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from lab_truth import call_estimates


def main():
    argv = sys.argv[1:]
    by_policy = bool(argv) and argv[0] == "--by-policy"
    if by_policy:
        argv = argv[1:]
    if len(argv) < 3:
        sys.exit(__doc__)
    builds = {"A": argv[0], "B": argv[1]}
    envs = {}
    for arm, spec in builds.items():
        build, at, kv = spec.partition("@")
        k, eq, v = kv.partition("=")
        if at and (not eq or not k):
            sys.exit(f"accuracy_ab.py: {spec!r} is not DIR or DIR@K=V")
        builds[arm] = build
        envs[arm] = dict(os.environ, **{k: v}) if at else None
    rounds = int(argv[2])
    threads = int(argv[3]) if len(argv) > 3 else 8
    policies = argv[4].split(",") if len(argv) > 4 else ["paper", "budget"]
    providers = argv[5].split(",") if len(argv) > 5 else ["cyg", "pfe"]
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
                                       check=True, stdout=subprocess.DEVNULL, env=envs[arm])
                        key = policy if by_policy else arm
                        for f, e, call, lo, hi in call_estimates(d + ".json", d + "/profile.json", f"{tmp}/base.json"):
                            b = e.get("oncpu_mean_bound_ticks")
                            bias.setdefault((key, prov, f["name"]), []).append(
                                (e["oncpu_mean_ticks"] - call, (hi - lo) / 2, lo <= call <= hi,
                                 None if b is None else b[0] <= call <= b[1], e.get("mean_sys_ticks")))
                            c = cover.setdefault(key, [0, 0, 0, 0])
                            c[0] += lo <= call <= hi
                            c[1] += 1
                            if b is not None:  # the interval widened by the systematic term
                                c[2] += b[0] <= call <= b[1]
                                c[3] += 1
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"{'policy' if by_policy else 'build'} provider function        est-truth  half-width  sys"
          "  (median ticks over runs)  covered  covered with sys")
    for (key, prov, name), v in sorted(bias.items()):
        sys_v = [x[4] for x in v if x[4] is not None]
        bound = [x[3] for x in v if x[3] is not None]
        print(f"{key:8} {prov:8} {name:15} {statistics.median(x[0] for x in v):+9.0f} "
              f"{statistics.median(x[1] for x in v):10.0f} {statistics.median(sys_v) if sys_v else float('nan'):5.0f}"
              f"   n={len(v):<4} {sum(x[2] for x in v):3}/{len(v):<3} "
              f"{f'{sum(bound)}/{len(bound)}' if bound else '-'}")
    for key, (k, n, kb, nb) in sorted(cover.items()):
        bound = f"; with the systematic term (oncpu_mean_bound_ticks) {kb}/{nb}" if nb else ""
        print(f"{key}: {key if by_policy else builds[key]}: intervals covering the call's truth {k}/{n}{bound}")


if __name__ == "__main__":
    main()
