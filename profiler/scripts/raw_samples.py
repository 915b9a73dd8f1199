#!/usr/bin/env python3
"""Raw (uncompensated) samples and per-function means of one evaluation's policies.

    profiler/scripts/raw_samples.py [--against paper] [--policy budget] EVAL_DIR...

For each workload under EVAL_DIR/raw: the policy's samples timed raw (the sums of
`uncompensated_samples` and `samples` over its runs), and its per-function means against
another policy's and full's: functions with >= 20 samples in >= 3 runs of both, each
function's median mean over the runs; the median of the ratios and how many are within
2x. (profile-8 in results/*/profile/README.md.)
"""
import argparse
import glob
import gzip
import json
import os
import statistics


def load(path):
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        return json.load(f)


def runs(eval_dir, workload, policy):
    pattern = os.path.join(eval_dir, "raw", workload, f"{policy}-r*", "profile", "profile.json*")
    return [load(p) for p in sorted(glob.glob(pattern))]


def means(reports, min_samples=20, min_runs=3):
    per = {}
    for d in reports:
        for f in d["functions"]:
            if f["samples"] >= min_samples and f.get("mean_ticks"):
                per.setdefault(f["name"], []).append(f["mean_ticks"])
    return {k: statistics.median(v) for k, v in per.items() if len(v) >= min_runs}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", default="budget")
    ap.add_argument("--against", default="paper")
    ap.add_argument("dirs", nargs="+")
    a = ap.parse_args()
    print("eval\tworkload\traw\tsamples\tfunctions\tmedian_vs_" + a.against + "\twithin_2x\tmedian_vs_full")
    for d in a.dirs:
        for w in sorted(os.listdir(os.path.join(d, "raw"))):
            reps = runs(d, w, a.policy)
            if not reps:
                continue
            raw = sum(f["uncompensated_samples"] for r in reps for f in r["functions"])
            samples = sum(f["samples"] for r in reps for f in r["functions"])
            mine, other, full = means(reps), means(runs(d, w, a.against)), means(runs(d, w, "full"))
            common = sorted(set(mine) & set(other))
            ratios = [mine[k] / other[k] for k in common]
            vs_full = [mine[k] / full[k] for k in common if k in full]
            med = f"{statistics.median(ratios):.2f}" if ratios else "-"
            within = f"{sum(1 for x in ratios if 0.5 < x < 2)}/{len(ratios)}"
            medf = f"{statistics.median(vs_full):.2f}" if vs_full else "-"
            print(f"{os.path.basename(os.path.normpath(d))}\t{w}\t{raw}\t{samples}\t{len(common)}\t{med}\t{within}\t{medf}")


if __name__ == "__main__":
    main()
