#!/usr/bin/python3
"""Smoke tests of `crossmod crosscheck` against the real binary (tiny counts).

Usage: crosscheck_smoke.py CROSSMOD_BINARY TEST_NAME   (TEST_NAME: run | duration | bad_input)
Checks the CSV against the schema documented in harness/src/commands/crosscheck_cmd.cpp, the JSON
summary, the interleaving, and that bad input exits 2 with one stderr line and no files.
Never checks a tear rate. Exit status 0 = pass.
"""
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

COLUMNS = ("schema_version,round,order,impl,wait_ticks,straddle,toggles,exposed,tears,executions,"
           "start_utc_ms,duration_s,outcome,dwell_ticks,executors,state_a,state_b,traps,sigill,"
           "sigsegv,sigbus,stray_trap,patcher_pu,executor_pus,note").split(",")
BIN = sys.argv[1]


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def run(args, expect=0, timeout=600):
    p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout)
    if p.returncode != expect:
        raise Fail(f"{' '.join(args)}: exit {p.returncode}, expected {expect}\n"
                   f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def read(out):
    csvs = glob.glob(os.path.join(out, "crosscheck-*.csv"))
    jsons = glob.glob(os.path.join(out, "crosscheck-*.json"))
    check(len(csvs) == 1 and len(jsons) == 1, f"expected one CSV and one JSON in {out}: {csvs} {jsons}")
    with open(csvs[0], newline="") as f:
        text = f.read()
    check(text.endswith("\n"), "CSV does not end with a whole row")
    rows = list(csv.reader(text.splitlines()))
    check(rows[0] == COLUMNS, f"header differs: {rows[0]}")
    data = [dict(zip(COLUMNS, r)) for r in rows[1:]]
    for r in data:
        check(len(r) == len(COLUMNS), f"short row {r}")
        for k in ("round", "order", "wait_ticks", "straddle", "toggles", "exposed", "tears",
                  "executions", "start_utc_ms", "state_a", "state_b"):
            int(r[k])
        float(r["duration_s"])
        check(r["impl"] in ("harness", "reference"), f"impl {r['impl']}")
        check(int(r["exposed"]) <= int(r["toggles"]), f"exposed > toggles in {r}")
    with open(jsons[0]) as f:
        ctx = json.load(f)
    check(ctx["kind"] == "crossmod-crosscheck" and ctx["schema_version"] == 1, "JSON kind/schema")
    check(ctx["results"] == os.path.basename(csvs[0]), "JSON names its CSV")
    return data, ctx


def test_run():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        p = run(["crosscheck", "--waits", "800,200000", "--straddles", "4", "--toggles", "200",
                 "--dwell", "5000", "--rounds", "2", "--seed", "7", "--out", out, "--quiet"])
        rows, ctx = read(out)
        check(len(rows) == 8, f"2 rounds x 2 W x 2 impls = 8 rows, got {len(rows)}")
        check([int(r["order"]) for r in rows] == list(range(1, 9)), "order is 1..8")
        # Each (round, W) has one run of each, back to back; who goes first alternates.
        firsts = []
        for i in range(0, 8, 2):
            a, b = rows[i], rows[i + 1]
            check(a["round"] == b["round"] and a["wait_ticks"] == b["wait_ticks"], f"pair {a} {b}")
            check({a["impl"], b["impl"]} == {"harness", "reference"}, "pair has both impls")
            firsts.append(a["impl"])
        check(firsts == ["harness", "reference", "harness", "reference"], f"first of pairs: {firsts}")
        for r in rows:
            check(r["outcome"] == "ok", f"run not ok: {r}")
            check(int(r["toggles"]) == 200, f"toggles {r}")
        check(ctx["finished_utc"] is not None and ctx["rounds_completed"] == 2, "JSON closed")
        check(ctx["config"]["seed"] == 7, "seed recorded")
        ws = {(e["wait_ticks"], e["straddle"]) for e in ctx["summary"]}
        check(ws == {(800, 4), (200000, 4)}, f"summary keys {ws}")
        for e in ctx["summary"]:
            for impl in ("harness", "reference"):
                check(e[impl]["runs"] == 2, f"runs per impl {e}")
        check("ref/harness" in p.stdout, "table printed")


def test_duration():
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        run(["crosscheck", "--waits", "1600", "--straddles", "3,4", "--toggles", "100",
             "--for", "1s", "--out", out, "--quiet"])
        rows, ctx = read(out)
        check(len(rows) >= 4 and len(rows) % 4 == 0, f"whole rounds of 4 runs, got {len(rows)}")
        check(any(e["straddle"] == "all" for e in ctx["summary"]), "per-W row over all S")


def test_bad_input():
    bad = [
        ["--straddles", "5"],
        ["--straddles", "0"],
        ["--waits", "8x0"],
        ["--waits", ""],
        ["--toggles", "0"],
        ["--dwell", "0"],
        ["--executors", "0"],
        ["--rounds", "0"],
        ["--rounds", "2", "--for", "1m"],
        ["--for", "ten"],
        ["--for", "5q"],
    ]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out")
        for args in bad:
            p = run(["crosscheck", "--out", out] + args, expect=2)
            lines = [l for l in p.stderr.splitlines() if l.strip()]
            check(len(lines) == 1, f"{args}: expected one stderr line, got {p.stderr!r}")
            check(not os.path.exists(out), f"{args}: {out} was created")
        p = run(["crosscheck", "--toggles", "many", "--out", out], expect=2)
        check(not os.path.exists(out), "CLI parse error created files")


TESTS = {"run": test_run, "duration": test_duration, "bad_input": test_bad_input}

if __name__ == "__main__":
    try:
        TESTS[sys.argv[2]]()
    except Fail as e:
        print(f"FAIL: {e}")
        sys.exit(1)
    print("ok")
