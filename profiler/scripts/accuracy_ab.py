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
it, how many intervals widened by the systematic term alone, [lo - sys, hi + sys], and how many
bounds as the build wrote them, oncpu_mean_bound_ticks: since ca9bf94 with the machine's gaps
at the top). --by-policy: the same per
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
                            sys_t = e.get("mean_sys_ticks")
                            bias.setdefault((key, prov, f["name"]), []).append(
                                (e["oncpu_mean_ticks"] - call, (hi - lo) / 2, lo <= call <= hi,
                                 None if b is None else b[0] <= call <= b[1], sys_t,
                                 None if b is None or sys_t is None else lo - sys_t <= call <= hi + sys_t))
                            c = cover.setdefault(key, [0, 0, 0, 0, 0])
                            c[0] += lo <= call <= hi
                            c[1] += 1
                            if b is not None:  # the bound as written, and the interval +- sys alone
                                c[2] += b[0] <= call <= b[1]
                                c[3] += 1
                                c[4] += sys_t is not None and lo - sys_t <= call <= hi + sys_t
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    print(f"{'policy' if by_policy else 'build'} provider function        est-truth  half-width  sys"
          "  (median ticks over runs)  covered  with sys  bound")
    for (key, prov, name), v in sorted(bias.items()):
        sys_v = [x[4] for x in v if x[4] is not None]
        bound = [x[3] for x in v if x[3] is not None]
        sys_only = [x[5] for x in v if x[5] is not None]
        print(f"{key:8} {prov:8} {name:15} {statistics.median(x[0] for x in v):+9.0f} "
              f"{statistics.median(x[1] for x in v):10.0f} {statistics.median(sys_v) if sys_v else float('nan'):5.0f}"
              f"   n={len(v):<4} {sum(x[2] for x in v):3}/{len(v):<3} "
              f"{f'{sum(sys_only)}/{len(sys_only)}' if sys_only else '-':8} "
              f"{f'{sum(bound)}/{len(bound)}' if bound else '-'}")
    for key, (k, n, kb, nb, ks) in sorted(cover.items()):
        bound = (f"; widened by the systematic term {ks}/{nb}; the bounds written (oncpu_mean_bound_ticks) "
                 f"{kb}/{nb}" if nb else "")
        print(f"{key}: {key if by_policy else builds[key]}: intervals covering the call's truth {k}/{n}{bound}")


if __name__ == "__main__":
    main()
