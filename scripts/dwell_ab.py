#!/usr/bin/env python3
"""Does the harness's tear count depend on the dwell (or the way into the site)? Interleaved crosscheck runs.

    scripts/dwell_ab.py [--build build] [--pairs 8] [--wait 1500] [--straddles 1,2,3,4] \
        --dwells 5000,14100 [--entries call,fallthrough] [--reference-entry call|same] --out DIR
    scripts/dwell_ab.py --summarize DIR

Runs `crossmod crosscheck --rounds 1 --dwell D --site-entry E` for each dwell and site
entry in turn, `--pairs` times (A, B, A, B ...: the machine changes under us), each into
DIR/d<D>/ (DIR/d<D>-<E>/ when more than one entry is given), and then prints, per dwell,
entry and detector (harness cell, independent reference), the tears over exposed toggles
pooled over the runs and in how many runs that detector tore. The reference detector keeps
its own site, handler, executor loop and dwell loop, so an effect seen by one detector
and not by the other is the harness's, not the machine's. The reference calls its site
unless `--reference-entry same` gives it each arm's entry too (crosscheck
--reference-entry); an entry effect both then show is the machine's. Reads the crosscheck
CSVs and the entries from the JSON beside each (absent before 2026-11-27, when cells fell
through and the reference called).
"""
import argparse
import csv
import json
import pathlib
import subprocess
import sys


def site_entries_of(csv_path: pathlib.Path) -> dict:
    """{impl: site entry} of one crosscheck run, from the JSON beside its CSV. Before
    2026-11-27 the harness fell through and the reference called."""
    try:
        cfg = json.loads(csv_path.with_suffix(".json").read_text()).get("config", {})
    except (OSError, ValueError):
        return {"harness": "?", "reference": "?"}
    return {"harness": cfg.get("site_entry", "fallthrough"), "reference": cfg.get("reference_site_entry", "call")}


def summarize(out: pathlib.Path) -> dict:
    """{(dwell, entry, impl): [tears, exposed, runs, runs_with_tears]} over DIR/d*/crosscheck-*.csv."""
    table = {}
    for f in sorted(out.glob("d*/crosscheck-*.csv")):
        per_run = {}
        entries = site_entries_of(f)
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                key = (int(row["dwell_ticks"]), entries.get(row["impl"], "?"), row["impl"])
                t, e = per_run.get(key, (0, 0))
                per_run[key] = (t + int(row["tears"]), e + int(row["exposed"]))
        for key, (t, e) in per_run.items():
            agg = table.setdefault(key, [0, 0, 0, 0])
            agg[0] += t
            agg[1] += e
            agg[2] += 1
            agg[3] += t > 0
    return table


def print_table(table: dict) -> None:
    print(f"{'dwell':>7} {'entry':<12} {'detector':<10} {'tears/exposed':>20} {'rate':>10} {'runs torn':>10}")
    for (dwell, entry, impl), (t, e, runs, torn) in sorted(table.items()):
        rate = t / e if e else float("nan")
        print(f"{dwell:>7} {entry:<12} {impl:<10} {f'{t}/{e}':>20} {rate:>10.2e} {f'{torn}/{runs}':>10}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--summarize", metavar="DIR", help="only print the table of an earlier run")
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--wait", type=int, default=1500)
    ap.add_argument("--straddles", default="1,2,3,4")
    ap.add_argument("--dwells", default="5000,14100")
    ap.add_argument("--entries", default="call", help="comma list of call, fallthrough (crosscheck --site-entry)")
    ap.add_argument("--reference-entry", default="call", choices=("call", "same"),
                    help="the reference's entry: call, or the same as the arm's")
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.summarize:
        print_table(summarize(pathlib.Path(a.summarize)))
        return 0
    if not a.out:
        print("dwell_ab.py: --out DIR is required (or --summarize DIR)", file=sys.stderr)
        return 2
    try:
        dwells = [int(d) for d in a.dwells.split(",")]
    except ValueError:
        dwells = []
    entries = a.entries.split(",")
    if any(e not in ("call", "fallthrough") for e in entries) or len(set(entries)) != len(entries):
        print("dwell_ab.py: --entries takes distinct call, fallthrough", file=sys.stderr)
        return 2
    if len(dwells) * len(entries) < 2 or min(dwells, default=0) <= 0 or a.pairs <= 0:
        print("dwell_ab.py: --dwells needs positive ticks, two arms or more in all, and --pairs > 0",
              file=sys.stderr)
        return 2
    out = pathlib.Path(a.out)
    for i in range(a.pairs):
        for d in dwells:
            for e in entries:
                sub = f"d{d}" if len(entries) == 1 else f"d{d}-{e}"
                cmd = [f"{a.build}/crossmod", "crosscheck", "--waits", str(a.wait), "--straddles", a.straddles,
                       "--rounds", "1", "--dwell", str(d), "--site-entry", e, "--quiet", "--out", str(out / sub)]
                if a.reference_entry == "same":
                    cmd += ["--reference-entry", e]
                print(f"dwell_ab.py: pair {i + 1}/{a.pairs} dwell {d} entry {e}", file=sys.stderr)
                r = subprocess.run(cmd, stdout=subprocess.DEVNULL)
                if r.returncode != 0:
                    print(f"dwell_ab.py: {' '.join(cmd)} exited {r.returncode}", file=sys.stderr)
                    return r.returncode
    print_table(summarize(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
