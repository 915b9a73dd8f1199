#!/usr/bin/env python3
"""How the on-CPU bounds of an evaluation folder cover latency_lab's truth, and why not.

    profiler/scripts/bound_coverage.py [--oracle] [--configs C,C...] EVAL_DIR...

EVAL_DIR: a folder of scripts/profile_eval.py after `python3 -m analysis.profile_cli DIR`
(its accuracy.csv; raw/*/*/profile/profile.json.gz for the gap figures). For each folder
and (workload, config), how many function runs' whole-call truth (`true_call_ticks`) lay
in the bare on-CPU interval, in the interval widened by the systematic term alone
([lo - sys_ticks, hi + sys_ticks]) and in the bound profile.json wrote
(`oncpu_bound_covers_call`: since ca9bf94 with the machine's gaps at the top). Then, over
the sampling policies (every config but none and full), the same by the number of stalls
the function's samples held in expectation (oncpu_samples x the truth's stall ticks per
call / 32,200 ticks, the ~14 us stall of the Xeon guest on 27-28 Nov): where the bare
interval's misses come from. --configs: the configs those sums take (default every one
but none and full: the sampling policies and the DIME* budgets). --oracle: also the bound that adds each run's true stall
share (stall ticks over call ticks, pooled over the run's functions, from its truth) to the
upper end: what a perfect measure of the machine's stalls would give. And, where the raw
profiles hold `run.machine_gaps`, the 5th / 50th / 95th percentile of the measured share,
gaps a second and mean gap length (per folder, and over all of them).
"""
import collections
import csv
import glob
import gzip
import json
import sys

SAMPLING_EXCLUDED = ("none", "full", "baseline")


def num(row, key):
    v = row.get(key, "")
    return float(v) if v not in ("", None) else None


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main():
    argv = sys.argv[1:]
    oracle, configs = False, None
    while argv and argv[0].startswith("--"):
        if argv[0] == "--oracle":
            oracle, argv = True, argv[1:]
        elif argv[0] == "--configs" and len(argv) > 1:
            configs, argv = set(argv[1].split(",")), argv[2:]
        else:
            sys.exit(__doc__)
    if not argv:
        sys.exit(__doc__)
    summed = (lambda cfg: cfg in configs) if configs else (lambda cfg: cfg not in SAMPLING_EXCLUDED)
    all_gaps = ([], [], [])
    for folder in argv:
        try:
            rows = list(csv.DictReader(open(f"{folder}/accuracy.csv")))
        except OSError as e:
            sys.exit(f"bound_coverage.py: {folder}/accuracy.csv: {e.strerror}")
        rows = [r for r in rows if r.get("oncpu_ci_lo") not in ("", None) and r.get("true_call_ticks") not in ("", None)]
        by_run = collections.defaultdict(list)
        for r in rows:
            by_run[(r["workload"], r["config"], r["round"])].append(r)
        share = {}  # run -> true stall share pooled over its functions
        for k, rs in by_run.items():
            calls = sum(num(r, "true_call_ticks") for r in rs)
            stalls = sum(num(r, "true_stall_ticks") or 0.0 for r in rs)
            share[k] = stalls / calls if calls > 0 else 0.0
        table = collections.defaultdict(lambda: [0, 0, 0, 0, 0])
        bins = collections.defaultdict(lambda: [0, 0, 0, 0])
        for r in rows:
            t, lo, hi, s = num(r, "true_call_ticks"), num(r, "oncpu_ci_lo"), num(r, "oncpu_ci_hi"), num(r, "sys_ticks") or 0.0
            m = num(r, "est_oncpu_mean_ticks")
            written = r.get("oncpu_bound_covers_call") in ("1", "True", "true")
            f = share[(r["workload"], r["config"], r["round"])]
            ideal = lo - s <= t <= hi + s + f * m
            c = table[(r["workload"], r["config"])]
            c[0] += lo <= t <= hi
            c[1] += lo - s <= t <= hi + s
            c[2] += written
            c[3] += ideal
            c[4] += 1
            if summed(r["config"]):
                mu = (num(r, "oncpu_samples") or 0.0) * (num(r, "true_stall_ticks") or 0.0) / 32200
                b = "<1" if mu < 1 else "1-3" if mu < 3 else "3-10" if mu < 10 else ">=10"
                g = bins[b]
                g[0] += lo - s <= t <= hi + s
                g[1] += written
                g[2] += ideal
                g[3] += 1
        print(f"{folder}: covering the call's truth (bare interval / +- sys / bound written"
              f"{' / + true stall share' if oracle else ''}, of function runs)")
        tot = [0, 0, 0, 0, 0]
        for (w, cfg), c in sorted(table.items()):
            extra = f" / {c[3]}" if oracle else ""
            print(f"  {w:12} {cfg:9} {c[0]:4} / {c[1]:4} / {c[2]:4}{extra} of {c[4]}")
            if summed(cfg):
                tot = [a + b for a, b in zip(tot, c)]
        extra = f" / {tot[3]}" if oracle else ""
        what = ",".join(sorted(configs)) if configs else "sampling policies and budgets"
        print(f"  {what}: {tot[0]} / {tot[1]} / {tot[2]}{extra} of {tot[4]}")
        print("  by expected stalls in the samples (+- sys / bound written"
              f"{' / + true stall share' if oracle else ''}):")
        for b in ("<1", "1-3", "3-10", ">=10"):
            if b in bins:
                g = bins[b]
                extra = f" / {g[2]}" if oracle else ""
                print(f"    {b:5} {g[0]} / {g[1]}{extra} of {g[3]}")
        shares, rates, lengths = [], [], []
        for path in glob.glob(f"{folder}/raw/*/*/profile/profile.json.gz"):
            run = json.load(gzip.open(path))["run"]
            g = run.get("machine_gaps")
            if not g or not g.get("measured_s"):
                continue
            shares.append(g["share"])
            rates.append(g["per_s"])
            lengths.append(g["mean_gap_ticks"] / run["tsc_hz"] * 1e6)
        print_gaps("  ", shares, rates, lengths)
        for acc, xs in zip(all_gaps, (shares, rates, lengths)):
            acc.extend(xs)
    if len(argv) > 1:
        print_gaps("all folders: ", *all_gaps)


def print_gaps(lead, shares, rates, lengths):
    if shares:
        print(f"{lead}machine gaps over {len(shares)} profiled runs (5th / 50th / 95th percentile): share "
              f"{100 * pct(shares, .05):.1f}% / {100 * pct(shares, .5):.1f}% / {100 * pct(shares, .95):.1f}%, "
              f"{pct(rates, .05):.0f} / {pct(rates, .5):.0f} / {pct(rates, .95):.0f} a second, "
              f"{pct(lengths, .05):.0f} / {pct(lengths, .5):.0f} / {pct(lengths, .95):.0f} us a gap")


if __name__ == "__main__":
    main()
