#!/usr/bin/env python3
"""Does a run's start-up calibration predict its latency errors? (profiler/README.md,
Known problems, on-CPU intervals item 2)

    profiler/scripts/calib_vs_error.py EVAL_DIR [CONFIG,...]

EVAL_DIR is a folder written by scripts/profile_eval.py with latency_lab workloads
(accuracy.csv and raw/<workload>/<config>-r<round>/profile/profile.json.gz), e.g.
results/amd-fam25-mod17-step1-1pkg/profile/lab-accuracy. CONFIG defaults to
paper,budget,converge. For each workload (lab-cyg: provider cyg, lab-pfe: patchable) and
timed function, over the runs: the calibrated part of a sampled leaf call's compensation,
`calib_ticks_per_hit + self_ticks[provider]` (the entry hit's fixed cost and the
remainder), against the on-CPU estimate minus the whole call's truth (accuracy.csv). A
least-squares slope near -1 says the calibration moves from run to run while what the
calls really cost does not: its variation is then error, not information. Prints the
calibration's mean and spread, the error's, the slope, and the spread left after the fit.
Reads only; writes nothing.
"""
import csv
import gzip
import json
import os
import statistics
import sys

PROVIDER = {"lab-cyg": "cyg", "lab-pfe": "patchable"}


def number(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    configs = sys.argv[2].split(",") if len(sys.argv) > 2 else ["paper", "budget", "converge"]
    errors = {}
    with open(os.path.join(root, "accuracy.csv")) as f:
        for r in csv.DictReader(f):
            est, truth = number(r["est_oncpu_mean_ticks"]), number(r["true_call_ticks"])
            if est is not None and truth is not None and r["config"] in configs:
                errors[(r["workload"], r["config"], r["round"], r["function"])] = est - truth
    calib = {}
    for workload, provider in PROVIDER.items():
        base = os.path.join(root, "raw", workload)
        if not os.path.isdir(base):
            continue
        for run in sorted(os.listdir(base)):
            config, _, rnd = run.rpartition("-r")
            path = os.path.join(base, run, "profile", "profile.json.gz")
            if config not in configs or not os.path.exists(path):
                continue
            with gzip.open(path) as g:
                o = json.load(g)["overhead"]
            if o.get("self_ticks", {}).get(provider) is None:
                continue
            calib[(workload, config, rnd)] = o["calib_ticks_per_hit"] + o["self_ticks"][provider]
    functions = sorted({k[3] for k in errors})
    print(f"{'workload':8} {'function':14} {'runs':>4}  calib mean/sd   error mean/sd    slope  sd after fit")
    for workload in PROVIDER:
        for name in functions:
            pairs = [(calib[k[:3]], e) for k, e in errors.items()
                     if k[0] == workload and k[3] == name and k[:3] in calib]
            if len(pairs) < 3:
                continue
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            mx, my = statistics.mean(xs), statistics.mean(ys)
            sxx = sum((x - mx) ** 2 for x in xs)
            slope = sum((x - mx) * (y - my) for x, y in pairs) / sxx if sxx > 0 else float("nan")
            resid = statistics.stdev([y - my - slope * (x - mx) for x, y in pairs]) if sxx > 0 else float("nan")
            print(f"{workload:8} {name:14} {len(pairs):4}  {mx:6.1f} / {statistics.stdev(xs):5.1f}  "
                  f"{my:+7.1f} / {statistics.stdev(ys):5.1f}  {slope:+6.2f}  {resid:6.1f}")


if __name__ == "__main__":
    main()
