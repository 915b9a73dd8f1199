#!/usr/bin/python3
"""Validate the output of `crossmod bench` (smoke test; never asserts a speed).

  check_bench_json.py --run BUILD/crossmod   run `crossmod bench --smoke ...` in a temp dir
                                             and validate what it wrote
  check_bench_json.py --dir DIR [--summary]  validate the newest bench-<stamp>.json in DIR

Checks: the JSON context carries the crossmod fields; every expected benchmark of the
latency/, invoke/ and throughput/ families is present with its counters; no benchmark
failed except documented skips (error message starting with "unsupported: "); the
latency CSV has the documented columns and at most 20000 samples per benchmark; the
summary (when asked for) has ratios and the noise note.
"""
import argparse
import csv
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

SCHEMA_VERSION = "1"
MAX_SAMPLES = 20000
UNSUPPORTED_PREFIX = "unsupported: "
CONTEXT_KEYS = [
    "crossmod_schema_version", "tmax_ticks", "tmax_source", "tmax_is_default",
    "machine_slug", "tsc_hz", "patcher_pu", "executor_pus",
]
LATENCY_COUNTERS = ["ticks_mean", "ticks_p50", "ticks_p90", "ticks_p99", "ns_mean"]
INVOKE_COUNTERS = ["ns_per_call", "ticks_per_call"]
THROUGHPUT_COUNTERS = ["calls_per_s", "achieved_toggles_per_s", "state_a_fraction", "imbalance"]

LATENCY_OPS = (
    ["wordpatch_inline_activate", "wordpatch_inline_deactivate"]
    + [f"wordpatch_straddle_s{s}" for s in range(1, 5)]
    + ["wordpatch_async_batch16"]
    + [f"callpatch_s{s}" for s in range(0, 5)]
    + [f"synccore_straddle_s{s}" for s in range(1, 5)]
    + ["stop_the_world", "mprotect_callpatch", "mprotect_raw_callpatch"]
)
INVOKE_VARIANTS = (
    ["empty_loop", "direct_call", "flag_guard_off", "flag_guard_on", "active_site",
     "nop5_site", "nop5_prefixed_site"]
    + [f"callpatch_off_s{s}" for s in range(0, 5)]
)
SMOKE_RATES = [0, 100000, 1000000]
FULL_RATES = [0, 10, 100, 1000, 10000, 100000, 1000000]
NAME_RE = re.compile(
    r"^(latency/[a-z0-9_]+/executors:\d+"
    r"|invoke/[a-z0-9_]+"
    r"|throughput/(callpatch|wordpatch)/rate:\d+/executors:\d+"
    r"|tracepoint/(invoke|latency|memory))$")
# The tracepoint suite (tracepoints/bench/tracepoint_suite.cpp): benchmark -> counters.
TRACEPOINT_COUNTERS = {
    "tracepoint/invoke": [f"{a}_ticks_p50" for a in (
        "direct", "jump_enabled", "jump_disabled", "after_remove", "direct_short",
        "trap_enabled_short")],
    "tracepoint/latency": [f"{op}_ticks_p50" for op in (
        "install_inline", "remove_inline", "install_tmax", "remove_tmax", "enable", "disable")],
    "tracepoint/memory": ["tracepoints", "body_bytes_per_tracepoint", "entry_pages"],
}


class Problems:
    def __init__(self):
        self.items = []

    def add(self, msg):
        self.items.append(msg)

    def check(self, cond, msg):
        if not cond:
            self.add(msg)
        return cond


def newest(pattern):
    files = sorted(glob.glob(pattern))
    return files[-1] if files else None


def validate(out_dir, want_summary, p):
    jsons = [f for f in glob.glob(os.path.join(out_dir, "bench-*.json"))
             if not f.endswith(("-summary.json", "-probes.json"))]
    if not p.check(jsons, f"no bench-<stamp>.json in {out_dir}"):
        return
    path = sorted(jsons)[-1]
    stem = path[:-len(".json")]
    with open(path) as f:
        doc = json.load(f)

    ctx = doc.get("context", {})
    for k in CONTEXT_KEYS:
        p.check(k in ctx, f"context lacks {k}")
    p.check(ctx.get("crossmod_schema_version") == SCHEMA_VERSION,
            f"crossmod_schema_version is {ctx.get('crossmod_schema_version')!r}")
    p.check(ctx.get("tmax_is_default") in ("true", "false"), "tmax_is_default not a bool")
    try:
        p.check(int(ctx.get("tmax_ticks", "0")) > 0, "tmax_ticks is not positive")
        p.check(float(ctx.get("tsc_hz", "0")) > 0, "tsc_hz is not positive")
    except ValueError as e:
        p.add(f"context number does not parse: {e}")

    runs = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        name = b["name"]
        p.check(NAME_RE.match(name), f"benchmark name outside the scheme: {name}")
        runs[name] = b

    smoke = ctx.get("bench_mode") == "smoke"
    max_exec = int(ctx.get("throughput_max_executors", "1"))
    expected = [f"latency/{op}/executors:{n}" for n in (0, 1) for op in LATENCY_OPS]
    expected += [f"invoke/{v}" for v in INVOKE_VARIANTS]
    expected += [f"throughput/{proto}/rate:{r}/executors:{n}"
                 for proto in ("callpatch", "wordpatch")
                 for n in range(1, max_exec + 1)
                 for r in (SMOKE_RATES if smoke else FULL_RATES)]
    for fam in ("latency/", "invoke/", "throughput/"):
        p.check(any(n.startswith(fam) for n in runs), f"family {fam} missing")

    skipped = []
    for name in expected:
        b = runs.get(name)
        if not p.check(b is not None, f"missing benchmark {name}"):
            continue
        if b.get("error_occurred"):
            msg = b.get("error_message", "")
            if p.check(msg.startswith(UNSUPPORTED_PREFIX), f"{name} failed: {msg}"):
                skipped.append(f"{name}: {msg}")
            continue
        counters = (LATENCY_COUNTERS if name.startswith("latency/")
                    else INVOKE_COUNTERS if name.startswith("invoke/") else THROUGHPUT_COUNTERS)
        for c in counters:
            if p.check(c in b, f"{name} lacks counter {c}"):
                v = b[c]
                p.check(isinstance(v, (int, float)) and v == v and v >= 0,
                        f"{name} counter {c} = {v!r}")
    for name, counters in TRACEPOINT_COUNTERS.items():
        b = runs.get(name)
        if not p.check(b is not None, f"missing benchmark {name}"):
            continue
        if b.get("error_occurred"):
            continue  # judged by the loop below (unsupported only)
        for c in counters:
            v = b.get(c)
            p.check(isinstance(v, (int, float)) and v == v and v > 0, f"{name} counter {c} = {v!r}")
    for name, b in runs.items():
        if name not in expected and b.get("error_occurred"):
            msg = b.get("error_message", "")
            p.check(msg.startswith(UNSUPPORTED_PREFIX), f"{name} failed: {msg}")

    csv_path = stem + "-latency.csv"
    if p.check(os.path.exists(csv_path), f"no {os.path.basename(csv_path)}"):
        per = {}
        with open(csv_path, newline="") as f:
            r = csv.reader(f)
            header = next(r, None)
            p.check(header == ["benchmark", "op", "executors", "sample_ticks", "count"],
                    f"CSV header is {header}")
            for row in r:
                if not p.check(len(row) == 5 and row[3].isdigit() and row[4].isdigit()
                               and int(row[4]) >= 1, f"bad CSV row {row}"):
                    break
                per[row[0]] = per.get(row[0], 0) + int(row[4])
        for name, n in per.items():
            p.check(n <= MAX_SAMPLES, f"{name}: {n} samples > {MAX_SAMPLES}")
        for name in expected:
            if name.startswith("latency/") and name in runs and not runs[name].get("error_occurred"):
                p.check(per.get(name, 0) > 0, f"no latency samples for {name}")

    if want_summary:
        spath = stem + "-summary.json"
        if p.check(os.path.exists(spath), f"no {os.path.basename(spath)}"):
            with open(spath) as f:
                s = json.load(f)
            p.check(str(s.get("crossmod_schema_version")) == SCHEMA_VERSION, "summary schema")
            p.check("noisy" in s.get("note", ""), "summary lacks the noise note")
            ratios = s.get("ratios", [])
            p.check(len(ratios) > 0, "summary has no ratios")
            for r in ratios:
                p.check(isinstance(r.get("value"), (int, float)), f"ratio without value: {r}")
            names = " ".join(r.get("name", "") for r in ratios)
            for needle in ("vs paper", "(2 x Tmax)", "stop_the_world", "mprotect_callpatch",
                           "calls_per_s at 100000 Hz", "active_site / direct_call"):
                p.check(needle in names, f"summary lacks a ratio for '{needle}'")
    return skipped


TMAX_FIXTURE = """schema_version = 1
[machine]
slug = "bench-smoke-fixture"
[tmax]
recommended_ticks = 1234
observed_ticks = 1000
tsc_hz = 2.5e9
"""


def check_tmax_config(crossmod, work, p):
    """--tmax-config: a valid file reaches the JSON context; a malformed one exits 2."""
    good = os.path.join(work, "tmax-good.toml")
    bad = os.path.join(work, "tmax-bad.toml")
    with open(good, "w") as f:
        f.write(TMAX_FIXTURE)
    with open(bad, "w") as f:
        f.write(TMAX_FIXTURE.replace("recommended_ticks = 1234", 'recommended_ticks = "soon"'))
    out = os.path.join(work, "out-config")
    rc = subprocess.run([crossmod, "bench", "--tmax-config", good, "--filter",
                         "latency/wordpatch_straddle_s1/executors:0", "--min-time", "0.01",
                         "--out", out], cwd=work, stdout=subprocess.DEVNULL).returncode
    if p.check(rc == 0, f"bench with a valid --tmax-config exited {rc}"):
        path = newest(os.path.join(out, "bench-*Z.json"))
        if p.check(path, "no JSON from the --tmax-config run"):
            with open(path) as f:
                ctx = json.load(f)["context"]
            p.check(ctx.get("tmax_ticks") == "1234", f"tmax_ticks {ctx.get('tmax_ticks')!r}")
            p.check(ctx.get("tmax_is_default") == "false", "tmax_is_default should be false")
            p.check(ctx.get("tmax_source") == good, f"tmax_source {ctx.get('tmax_source')!r}")
    r = subprocess.run([crossmod, "bench", "--tmax-config", bad, "--filter", "invoke/empty_loop",
                        "--out", os.path.join(work, "out-bad")], cwd=work,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    p.check(r.returncode == 2, f"malformed --tmax-config exited {r.returncode}, want 2")
    p.check("recommended_ticks" in r.stderr, f"malformed config error does not name the field: "
            f"{r.stderr.strip()!r}")


def check_probes_suite(out, p):
    """The probes suite ran as a child: its JSON names every probes/ benchmark, none failed,
    and its latency CSV holds the toggle samples (probes/bench/probes_bench.cpp)."""
    path = newest(os.path.join(out, "bench-*Z-probes.json"))
    if not p.check(path, "no bench-<stamp>-probes.json: the probes suite did not run"):
        return
    with open(path) as f:
        doc = json.load(f)
    names = {b.get("name") for b in doc.get("benchmarks", [])}
    for want in ("probes/init/patchable_scan/functions:20000", "probes/init/cyg_discovery/functions:5000",
                 "probes/toggle/all_probes", "probes/throughput/executors:1", "probes/invoke"):
        p.check(want in names, f"{path}: no {want}")
    for b in doc.get("benchmarks", []):
        p.check(not b.get("error_occurred"), f"{b.get('name')}: {b.get('error_message')}")
    csv_path = path[:-len(".json")] + "-latency.csv"
    if p.check(os.path.isfile(csv_path), f"no {csv_path}"):
        with open(csv_path) as f:
            lines = f.read().splitlines()
        p.check(lines and lines[0] == "benchmark,op,executors,sample_ticks,count" and
                any(",wordpatch_sync," in line for line in lines), f"{csv_path}: no toggle samples")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--run", metavar="CROSSMOD", help="run this binary's bench --smoke first")
    g.add_argument("--dir", help="validate existing output in DIR")
    ap.add_argument("--summary", action="store_true", help="with --dir: require the summary")
    ap.add_argument("--min-time", default="0.01")
    args = ap.parse_args()

    p = Problems()
    keep = None
    if args.run:
        work = tempfile.mkdtemp(prefix="crossmod-bench-smoke-")
        out = os.path.join(work, "out")
        cmd = [args.run, "bench", "--smoke", "--min-time", args.min_time, "--out", out,
               "--summary"]
        print("running:", " ".join(cmd), flush=True)
        rc = subprocess.run(cmd, cwd=work).returncode
        p.check(rc == 0, f"crossmod bench exited with {rc}")
        skipped = validate(out, True, p) or []
        check_probes_suite(out, p)
        check_tmax_config(args.run, work, p)
        keep = work
    else:
        skipped = validate(args.dir, args.summary, p) or []

    for s in skipped:
        print("documented skip:", s)
    if p.items:
        for m in p.items:
            print("FAIL:", m, file=sys.stderr)
        if keep:
            print("output kept in", keep, file=sys.stderr)
        return 1
    if keep:
        subprocess.run(["rm", "-rf", keep])
    print("bench output OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
