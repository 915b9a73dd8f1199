#!/usr/bin/python3
"""Smoke tests of `crossmod sweep` / `crossmod calibrate` against the real binary.

Usage: sweep_smoke.py CROSSMOD_BINARY TEST_NAME
Each test uses its own temporary directory and checks files against the results schema
(harness/src/results/results_io.hpp). Exit status 0 = pass; the failure reason is printed.
"""
import csv
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

COLUMNS = ("schema_version,cell_id,phase,protocol,wait_ticks,wait_ns,straddle,site_offset,"
           "executors,placement,rep,dwell_ticks,toggles,exposed_toggles,executions,state_a,"
           "state_b,traps,late_traps,sigill,sigsegv,sigbus,stray_trap,crash,hang,failures,"
           "stopped_early,low_exposure,outcome,duration_s,patcher_pu,executor_pus,"
           "first_fault_pc_offset,first_fault_bytes,note,start_utc_ms,steal_ms,c2c_ticks,"
           "round").split(",")
INTS = {"schema_version", "cell_id", "wait_ticks", "straddle", "site_offset", "executors", "rep",
        "dwell_ticks", "toggles", "exposed_toggles", "executions", "state_a", "state_b", "traps",
        "late_traps", "sigill", "sigsegv", "sigbus", "stray_trap", "crash", "hang", "failures",
        "stopped_early", "low_exposure", "patcher_pu"}
FLOATS = {"wait_ns", "duration_s"}
OPTIONAL = {"start_utc_ms", "steal_ms", "c2c_ticks", "round"}  # schema 2; empty = unknown
FLAGS = {"crash", "hang", "stopped_early", "low_exposure"}

BIN = sys.argv[1]


class Fail(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def run(args, timeout=300, expect=0):
    p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=timeout)
    if expect is not None and p.returncode != expect:
        raise Fail(f"{' '.join(args)}: exit {p.returncode}, expected {expect}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def read_sweep(out):
    csvs = sorted(glob.glob(os.path.join(out, "sweep-*.csv")))
    check(len(csvs) == 1, f"expected one sweep CSV in {out}, found {csvs}")
    path = csvs[0]
    with open(path, newline="") as f:
        text = f.read()
    check(text.endswith("\n"), "CSV does not end with a whole row")
    rows = list(csv.reader(text.splitlines()))
    check(rows[0] == COLUMNS, f"header differs: {rows[0]}")
    typed = []
    for i, r in enumerate(rows[1:], start=2):
        check(len(r) == len(COLUMNS), f"line {i}: {len(r)} fields")
        d = dict(zip(COLUMNS, r))
        for c in INTS:
            d[c] = int(d[c])
        for c in FLOATS:
            d[c] = float(d[c])
        for c in OPTIONAL:
            d[c] = None if d[c] == "" else (int(d[c]) if c in ("start_utc_ms", "round") else float(d[c]))
        for c in FLAGS:
            check(d[c] in (0, 1), f"line {i}: {c}={d[c]}")
        check(d["schema_version"] == 2, f"line {i}: schema_version")
        check(d["start_utc_ms"] is not None and d["start_utc_ms"] > 1.7e12, f"line {i}: start_utc_ms {d['start_utc_ms']}")
        check(d["exposed_toggles"] <= d["toggles"], f"line {i}: exposed > toggles")
        if d["crash"] or d["hang"]:
            check(d["failures"] >= 1, f"line {i}: crash/hang with failures 0")
        check(d["outcome"] in ("ok", "crash", "hang", "error", "blind"), f"line {i}: outcome {d['outcome']}")
        typed.append(d)
    ctx_path = path[:-4] + ".json"
    with open(ctx_path) as f:
        ctx = json.load(f)
    for key in ("schema_version", "kind", "git_sha", "compiler", "machine", "config", "command",
                "started_utc", "finished_utc"):
        check(key in ctx, f"context lacks {key}")
    check(ctx["kind"] == "crossmod-sweep-context", "context kind")
    return path, typed, ctx


def t_preset(out):
    t0 = time.time()
    run(["sweep", "--preset", "smoke", "--out", out, "--quiet"])
    _, rows, ctx = read_sweep(out)
    check(len(rows) == ctx["cells_planned"] and len(rows) > 0, "cell count")
    check(ctx["finished_utc"], "finished time not recorded")
    protos = {r["protocol"] for r in rows}
    check(protos == {"wordpatch", "naive", "callpatch", "aligned", "sync-core"}, f"protocols {protos}")
    for r in rows:
        if r["protocol"] in ("callpatch", "aligned", "sync-core"):
            check(r["failures"] == 0, f"negative control failed: {r}")
    print(f"smoke preset: {len(rows)} cells in {time.time() - t0:.1f} s")


def t_hang(out):
    run(["sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "selftest-hang,aligned",
         "--waits", "0", "--straddles", "1", "--aligned-offsets", "0", "--watchdog", "1"], timeout=60)
    _, rows, _ = read_sweep(out)
    check(len(rows) == 2, f"{len(rows)} rows: the sweep did not go on after the hang")
    h = rows[0]
    check(h["protocol"] == "selftest-hang" and h["hang"] == 1 and h["outcome"] == "hang" and h["failures"] >= 1,
          f"hang not recorded: {h}")
    check(rows[1]["outcome"] == "ok", f"cell after the hang: {rows[1]}")


def t_torn(out):
    run(["sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "selftest-torn",
         "--waits", "0", "--straddles", "1,3"], timeout=120)
    _, rows, _ = read_sweep(out)
    check(len(rows) == 2, "rows")
    for r in rows:
        check(r["failures"] > 0 and r["crash"] == 0 and r["hang"] == 0, f"torn faults not counted: {r}")
        check(r["sigill"] + r["sigsegv"] + r["sigbus"] + r["stray_trap"] > 0, f"no fault classes: {r}")


def t_crash(out):
    run(["sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "selftest-crash",
         "--waits", "0", "--straddles", "1"], timeout=60)
    _, rows, _ = read_sweep(out)
    check(len(rows) == 1 and rows[0]["crash"] == 1 and rows[0]["failures"] >= 1, f"crash: {rows}")


def t_bad_input(tmp):
    bad_preset = os.path.join(tmp, "bad.toml")
    with open(bad_preset, "w") as f:
        f.write('schema_version = 1\nname = "bad"\n[grid]\nprotocols = ["wordpatch"\nwaits = [0]\n')
    a_file = os.path.join(tmp, "a-file")
    open(a_file, "w").close()
    out = os.path.join(tmp, "out")
    cases = [
        (["--protocols", "bogus"], "unknown protocol"),
        (["--straddles", "5"], "outside 0..4"),
        (["--waits=-5"], "negative"),
        (["--executors", "0"], "executor count 0"),
        (["--placements", "cross-package"], "impossible"),
        (["--config", bad_preset], "bad.toml:"),
        (["--preset", "no-such-preset"], "unknown preset"),
    ]
    ncpu_pkgs = len({open(p).read().strip() for p in glob.glob("/sys/devices/system/cpu/cpu*/topology/physical_package_id")})
    for extra, needle in cases:
        if "cross-package" in extra and ncpu_pkgs > 1:
            continue
        args = ["sweep", "--out", out, "--quiet"] + (extra if extra[0] in ("--config", "--preset") else ["--preset", "smoke"] + extra)
        p = run(args, expect=2, timeout=60)
        check(needle in p.stderr, f"{extra}: '{needle}' not in stderr: {p.stderr!r}")
        check(len(p.stderr.strip().splitlines()) == 1, f"{extra}: not one line: {p.stderr!r}")
        check(not os.path.exists(out), f"{extra}: {out} was created")
    p = run(["sweep", "--preset", "smoke", "--out", os.path.join(a_file, "sub"), "--quiet"], expect=2)
    check("cannot be created" in p.stderr or "not a directory" in p.stderr, p.stderr)


def t_resume(out):
    base = ["sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "aligned,callpatch",
            "--waits", "0", "--straddles", "1", "--aligned-offsets", "0,13", "--reps", "2"]
    run(base, timeout=120)
    path, rows, _ = read_sweep(out)
    check(len(rows) == 6, f"{len(rows)} rows")
    # Simulate a sweep killed after two cells (plus a torn half row).
    with open(path) as f:
        lines = f.read().splitlines(True)
    with open(path, "w") as f:
        f.writelines(lines[:3])
        f.write("1,3,grid,aligned,0,0.0")
    p = run(base + ["--resume"], timeout=120)
    check("2 of 6 cells already done" in p.stderr, f"resume message: {p.stderr!r}")
    path2, rows2, ctx = read_sweep(out)
    check(path2 == path, "resume wrote a new file")
    check(len(rows2) == 6, f"{len(rows2)} rows after resume")
    check([r["cell_id"] for r in rows2] == [1, 2, 3, 4, 5, 6], "cell ids")
    keys = [(r["protocol"], r["wait_ticks"], r["straddle"], r["site_offset"], r["rep"]) for r in rows2]
    check(len(set(keys)) == 6, f"duplicate cells: {keys}")
    check(ctx["cells_resumed"] == 2 and ctx["cells_run"] == 4, f"context counts {ctx['cells_resumed']} {ctx['cells_run']}")
    # A different config does not resume this file.
    run(base[:-2] + ["--reps", "1", "--resume"], timeout=120)
    check(len(glob.glob(os.path.join(out, "sweep-*.csv"))) == 2, "a different config resumed the old file")


def t_sigint(out):
    args = [BIN, "sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "aligned,selftest-hang",
            "--waits", "0", "--straddles", "1", "--aligned-offsets", "0", "--watchdog", "60"]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    t0 = time.time()
    p.send_signal(signal.SIGINT)
    stdout, stderr = p.communicate(timeout=150)
    check(p.returncode == 130, f"exit {p.returncode}, expected 130; stderr {stderr!r}")
    # A liveness limit, not a speed test: the running cell's child is SIGKILLed at once,
    # but a loaded 2-core machine may take a while to reap it.
    check(time.time() - t0 < 120, "did not stop")
    check("--resume" in stderr and "interrupted" in stderr, f"stderr {stderr!r}")
    _, rows, ctx = read_sweep(out)
    check(len(rows) == 1 and rows[0]["protocol"] == "aligned", f"rows after SIGINT: {rows}")
    check(ctx["interrupted"] is True, "context not marked interrupted")


def t_calibrate(out):
    tmax = os.path.join(out, "tmax.toml")
    p = run(["calibrate", "--preset", "smoke", "--budget", "8", "--out", out, "--tmax-out", tmax, "--quiet"],
            timeout=240, expect=None)
    check(p.returncode in (0, 1), f"calibrate exit {p.returncode}: {p.stderr}")
    _, rows, ctx = read_sweep(out)
    check(ctx.get("run_kind") == "calibrate", "run_kind")
    phases = {r["phase"] for r in rows}
    check({"control", "sentinel"} <= phases, f"phases {phases}")
    # Every round has the sentinel and one cell of each control.
    rounds = {}
    for r in rows:
        rounds.setdefault(r["round"], []).append(r)
    check(len(rounds) >= 2, f"only {len(rounds)} rounds")
    for rd, rr in rounds.items():
        kinds = sorted(f"{r['phase']}/{r['protocol']}" for r in rr if r["phase"] in ("control", "sentinel"))
        check(kinds == ["control/aligned", "control/callpatch", "control/naive", "control/sync-core",
                        "sentinel/wordpatch"], f"round {rd}: {kinds}")
    # The positive control tears (about half its exposed toggles on every machine seen).
    naive = [r for r in rows if r["protocol"] == "naive"]
    check(sum(r["failures"] for r in naive) > 0, "naive never failed: the harness cannot see tears")
    cal = glob.glob(os.path.join(out, "calibrate-*.json"))
    check(len(cal) == 1, "calibrate json")
    with open(cal[0]) as f:
        summary = json.load(f)
    verdict = summary["verdict"]["verdict"]
    check(verdict in ("bounded", "not-established", "unbounded"), f"verdict {verdict}")
    check(summary["status"] == verdict, "status")
    check((p.returncode == 1) == (verdict == "unbounded"), f"exit {p.returncode} with verdict {verdict}")
    import tomllib
    with open(tmax, "rb") as f:
        t = tomllib.load(f)
    check(t["schema_version"] == 2 and t["verdict"] == verdict, "tmax toml verdict")
    if verdict != "unbounded":
        check(t["tmax"]["recommended_ticks"] >= 100, "tmax toml")
        check(t["tmax"]["recommended_ticks"] % 50 == 0, "recommended not a multiple of 50")
        check(t["evidence"]["failures_at_or_above"] == 0, "evidence")
    check(f"verdict " in p.stdout and "wordpatch by round" in p.stdout, "report")


def t_control_fail(out):
    # sweep: a failing negative control is exit 1 with a banner.
    p = run(["sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "callpatch", "--waits", "0",
             "--straddles", "4", "--toggles", "2000", "--inject-control-failure"], timeout=120, expect=1)
    check("NEGATIVE CONTROL FAILED" in p.stderr, f"stderr {p.stderr!r}")
    _, rows, _ = read_sweep(out)
    check(len(rows) == 1 and rows[0]["failures"] > 0 and "injected" in rows[0]["note"], f"rows {rows}")
    # calibrate: exit 1, no Tmax config, status in the JSON.
    cal_out = out + "-cal"
    tmax = os.path.join(cal_out, "tmax.toml")
    p = run(["calibrate", "--preset", "smoke", "--budget", "4", "--out", cal_out, "--tmax-out", tmax, "--quiet",
             "--inject-control-failure"], timeout=240, expect=1)
    check("NEGATIVE CONTROL FAILED" in p.stderr, f"stderr {p.stderr!r}")
    check(not os.path.exists(tmax), "a Tmax config was written after a negative control failed")
    cal = glob.glob(os.path.join(cal_out, "calibrate-*.json"))
    check(len(cal) == 1, "calibrate json")
    with open(cal[0]) as f:
        check(json.load(f)["status"] == "negative-control-failed", "status")


def t_sigkill_resume(out):
    # SIGKILL the sweep mid-run (no handler runs), resume: every planned cell exactly once.
    base = [BIN, "sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "wordpatch,callpatch",
            "--waits", "0,200", "--straddles", "1,2,3,4", "--toggles", "3000", "--rounds", "2"]
    planned = 2 * 2 * 4 * 2
    p = subprocess.Popen(base, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline and p.poll() is None:
        csvs = glob.glob(os.path.join(out, "sweep-*.csv"))
        if csvs:
            with open(csvs[0]) as f:
                done = max(0, len(f.read().splitlines()) - 1)
        if done >= 3:
            break
        time.sleep(0.05)
    check(p.poll() is None, "the sweep finished before it could be killed; use more cells")
    p.kill()
    p.wait()
    _, rows, _ = read_sweep(out)
    check(0 < len(rows) < planned, f"{len(rows)} rows after SIGKILL")
    r = subprocess.run(base + ["--resume"], capture_output=True, text=True, timeout=300)
    check(r.returncode == 0, f"resume exit {r.returncode}: {r.stderr}")
    _, rows, _ = read_sweep(out)
    keys = [(r["protocol"], r["wait_ticks"], r["straddle"], r["rep"], r["round"]) for r in rows]
    check(len(keys) == planned and len(set(keys)) == planned, f"{len(keys)} rows, {len(set(keys))} distinct of {planned}")
    check({r["round"] for r in rows} == {0, 1}, "rounds")


def t_calibrate_resume(out):
    tmax = os.path.join(out, "tmax.toml")
    base = ["calibrate", "--preset", "smoke", "--budget", "6", "--out", out, "--tmax-out", tmax, "--quiet"]
    p = run(base, timeout=240, expect=None)
    check(p.returncode in (0, 1), f"calibrate exit {p.returncode}: {p.stderr}")
    path, rows1, _ = read_sweep(out)
    p = run(base + ["--resume"], timeout=240, expect=None)
    check(p.returncode in (0, 1), f"calibrate --resume exit {p.returncode}: {p.stderr}")
    check("nothing to resume" not in p.stderr, f"did not resume: {p.stderr!r}")
    path2, rows2, ctx = read_sweep(out)
    check(path2 == path, "resume wrote a new CSV")
    check(len(rows2) >= len(rows1), "rows lost")
    check(rows2[:len(rows1)] == rows1, "resumed rows changed")
    check(ctx["cells_resumed"] >= 1, f"cells_resumed {ctx['cells_resumed']}")


def t_soak(out):
    base = ["soak", "--wait", "3200", "--sentinel", "100", "--for", "3s", "--cell-s", "0.1", "--out", out, "--quiet"]
    p = run(base, timeout=120, expect=None)
    _, rows, ctx = read_sweep(out)
    check(ctx.get("run_kind") == "soak", "run_kind")
    tore = any(r["failures"] > 0 or r["crash"] or r["hang"] for r in rows if r["phase"] == "soak")
    check(p.returncode == (1 if tore else 0), f"exit {p.returncode} with tears at W: {tore}")
    check({r["phase"] for r in rows} == {"soak", "sentinel"}, "phases")
    check({r["wait_ticks"] for r in rows if r["phase"] == "soak"} == {3200}, "soaked wait")
    rounds = {r["round"] for r in rows}
    for rd in rounds:
        check(sorted(r["straddle"] for r in rows if r["round"] == rd and r["phase"] == "soak") == [1, 2, 3, 4],
              f"round {rd} lacks an S")
    n1 = len(rows)
    # Resume continues the same file with later rounds, never repeating one.
    # The resumed run counts the cells' time already spent, which on a loaded machine can
    # exceed the first --for: give it a few seconds beyond what the file holds.
    spent = sum(r["duration_s"] for r in rows)
    p = run(base[:6] + [f"{spent + 4:.0f}s"] + base[7:] + ["--resume"], timeout=180, expect=None)
    check(p.returncode in (0, 1), f"resume exit {p.returncode}: {p.stderr}")
    _, rows2, _ = read_sweep(out)
    check(len(rows2) > n1 and rows2[:n1] == rows, "resume did not append")
    keys = [(r["phase"], r["straddle"], r["round"]) for r in rows2]
    check(len(set(keys)) == len(keys), "a round was repeated")
    check("rounds in" in p.stdout and "an active round tears" in p.stdout or "TEARS" in p.stdout, p.stdout)
    # Bad input: one line, exit 2, nothing written.
    bad = os.path.join(out, "bad")
    for extra, needle in ((["--for", "3x"], "not a duration"), (["--sentinel", "5000"], "below the soaked")):
        args = ["soak", "--wait", "3200", "--out", bad, "--quiet"] + extra
        q = run(args, expect=2, timeout=60)
        check(needle in q.stderr and len(q.stderr.strip().splitlines()) == 1, q.stderr)
        check(not os.path.exists(bad), "bad input wrote files")


def t_stress_naive(out):
    run(["sweep", "--preset", "smoke", "--out", out, "--quiet", "--protocols", "naive", "--waits", "0",
         "--straddles", "1,2,3,4", "--toggles", "3000000", "--max-failures", "5", "--watchdog", "120"], timeout=900)
    _, rows, _ = read_sweep(out)
    for r in rows:
        check(r["failures"] > 0, f"naive did not tear at S={r['straddle']} within {r['toggles']} toggles")


TESTS = {"preset": t_preset, "hang": t_hang, "torn": t_torn, "crash": t_crash, "bad_input": t_bad_input,
         "resume": t_resume, "sigint": t_sigint, "calibrate": t_calibrate, "calibrate_resume": t_calibrate_resume, "stress_naive": t_stress_naive,
         "control_fail": t_control_fail, "sigkill_resume": t_sigkill_resume, "soak": t_soak}


def main():
    name = sys.argv[2]
    tmp = tempfile.mkdtemp(prefix=f"crossmod-smoke-{name}-")
    try:
        out = tmp if name == "bad_input" else os.path.join(tmp, "out")
        TESTS[name](out)
    except Fail as e:
        print(f"FAIL {name}: {e}", file=sys.stderr)
        print(f"(files kept in {tmp})", file=sys.stderr)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"PASS {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
