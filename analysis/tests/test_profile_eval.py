"""scripts/profile_eval.py end to end with stand-ins: a fake `crossmod` whose `profile`
runs the program and writes a schema-1 profile.json, and fake workload programs (a
latency_lab that writes a truth file). Checks the interleaving, runs.csv, the tables, the
stdout check and the usage errors; needs neither the profiler nor a build."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "profile_eval.py"

FAKE_CROSSMOD = r'''#!/usr/bin/python3
import json, os, resource, subprocess, sys
args = sys.argv[1:]
if args[:1] == ["sysinfo"]:
    print("machine            fake-fam1-mod2-step3-1pkg"); sys.exit(0)
assert args[0] == "profile", args
sep = args.index("--")
opts, prog = args[1:sep], args[sep + 1:]
policy = opts[opts.index("--policy") + 1]
out = opts[opts.index("--out") + 1]
budget = float(opts[opts.index("--budget") + 1].rstrip("%")) / 100 if "--budget" in opts else 0.05
rc = subprocess.call(prog)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
os.makedirs(out)
fns = []
truth = prog[prog.index("--truth") + 1] if "--truth" in prog else None
if truth and policy != "none":
    for f in json.load(open(truth))["functions"]:
        m = f["mean_ticks"]
        if m is None or (policy == "budget" and budget < 0.02 and f["name"] == "lab_b"):
            continue
        m = m * (1.3 if policy == "paper" else 1.0)
        fns.append({"name": f["name"], "calls_observed": 5, "calls_estimated": 50.0, "samples": 5,
                    "mean_ticks": m, "mean_ci_ticks": [0.9 * m, 1.1 * m], "share": 0.1})
        if os.environ.get("FAKE_ONCPU"):
            # The newer profiler's fields: on-CPU mean = the unpreempted truth (paper 30% off).
            u = f["mean_unpreempted_ticks"] * (1.3 if policy == "paper" else 1.0)
            fns[-1].update({"raw_mean_ticks": m + 50.0, "switched_samples": 1, "oncpu_samples": 4,
                            "oncpu_mean_ticks": u, "oncpu_mean_ci_ticks": [0.95 * u, 1.05 * u]})
factor = {"full": 3.0, "paper": 1.2}.get(policy, 1.0 + budget)
run = {"cpu_s": 1.0 * factor, "wall_s": 0.5, "tsc_hz": 1e9}
if os.environ.get("FAKE_ONCPU"):
    run["switch_detection"] = "perf"
json.dump({"schema": 1, "policy": {"name": policy, "budget": budget},
           "run": run,
           "overhead": {"probes": 4, "functions": 2, "toggles_per_s": 10.0, "samples_per_s": 20.0,
                        "toggle_share": 0.001, "instr_share": 0.01},
           "timeline": [], "functions": fns}, open(os.path.join(out, "profile.json"), "w"))
sys.exit(rc)
'''

FAKE_LAB = r'''#!/usr/bin/python3
import json, sys
a = sys.argv[1:]
if "--truth" in a:
    json.dump({"schema": 1, "tool": "latency_lab", "functions": [
        {"name": "lab_a", "calls": 10, "mean_ticks": 1000.0, "mean_unpreempted_ticks": 900.0},
        {"name": "lab_b", "calls": 10, "mean_ticks": 5000.0, "mean_unpreempted_ticks": 4000.0}]},
        open(a[a.index("--truth") + 1], "w"))
print("lab done")
'''

FAKE_KV = r'''#!/usr/bin/python3
import os
print("kv", os.environ.get("FAKE_KV_NOISE", ""))
'''


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def fakes(tmp_path):
    _exe(tmp_path / "crossmod", FAKE_CROSSMOD)
    wdir = tmp_path / "w"
    wdir.mkdir()
    for v in ("cyg", "pfe"):
        _exe(wdir / f"latency_lab_{v}", FAKE_LAB)
        _exe(wdir / f"kvpipe_{v}", FAKE_KV)
    return tmp_path


def run(fakes: Path, *extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--crossmod", str(fakes / "crossmod"),
                           "--workloads-dir", str(fakes / "w"), "--out", str(fakes / "out"), *extra],
                          capture_output=True, text=True, timeout=300,
                          env=None if env is None else {**os.environ, **env})


def test_dry_run_plans_interleaved_rounds(fakes):
    p = run(fakes, "--dry-run", "--rounds", "2", "--workloads", "lab-cyg", "--budgets", "1,5")
    assert p.returncode == 0, p.stderr
    lines = [ln.split() for ln in p.stdout.splitlines() if not ln.startswith("#")]
    labels = [(ln[1], ln[3]) for ln in lines]
    per_round = ["baseline", "none", "full", "paper", "budget", "converge", "dime1", "dime5"]
    # Every configuration once per round, the order rotated by one each round.
    assert labels == [(f"r{r}", c) for r in range(2) for c in per_round[r:] + per_round[:r]]
    assert not (fakes / "out").exists()


@pytest.mark.parametrize("argv, message", [
    (("--policies", "none,full"), "must include baseline"),
    (("--workloads", "nope"), "unknown nope"),
    (("--budgets", "150"), "outside"),
    (("--rounds", "0"), "--rounds wants a positive number"),
])
def test_usage_errors_exit_2_and_write_nothing(fakes, argv, message):
    p = run(fakes, *argv)
    assert p.returncode == 2 and message in p.stderr and p.stderr.count("\n") == 1
    assert not (fakes / "out").exists()


def test_full_pipeline_with_fake_profiler(fakes):
    p = run(fakes, "--rounds", "2", "--workloads", "lab-cyg,kvpipe-pfe", "--dime-workloads", "lab-cyg",
            "--budgets", "1,5,50")
    assert p.returncode == 0, p.stderr
    out = fakes / "out"
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert len(rows) == 2 * (9 + 6)
    assert [int(r["order"]) for r in rows] == list(range(len(rows)))
    assert all(r["rc"] == "0" and r["note"] == "" for r in rows), [r for r in rows if r["note"]]
    assert "ETA" in p.stderr
    t3 = {(r["workload"], r["config"]): r for r in csv.DictReader((out / "table3.csv").open())}
    # Fake CPU: the profiled runs claim 1 s x a factor; the baseline is the real (tiny) CPU time.
    assert float(t3[("lab-cyg", "full")]["cpu_s_median"]) == pytest.approx(3.0)
    assert float(t3[("lab-cyg", "dime1")]["cpu_s_median"]) == pytest.approx(1.01)
    info = {(r["config"], r["round"]): r for r in csv.DictReader((out / "information.csv").open())
            if r["workload"] == "lab-cyg"}
    # budget 1% (fake) drops lab_b: 1 of 2 seen, 1 of 2 accurate; paper is 30% off everywhere.
    assert float(info[("dime1", "0")]["kept"]) == pytest.approx(0.5)
    assert float(info[("paper", "0")]["kept"]) == pytest.approx(0.5)
    dime = [r["config"] for r in csv.DictReader((out / "dime_curve.csv").open()) if r["workload"] == "lab-cyg"]
    assert dime == ["dime1", "dime5", "dime50", "full"]
    assert (out / "raw" / "lab-cyg" / "full-r0" / "profile" / "profile.json.gz").is_file()
    assert not (out / "raw" / "lab-cyg" / "full-r0" / "profile" / "profile.json").exists()
    assert "--samples 1000000" in (out / "raw" / "lab-cyg" / "dime1-r0" / "cmd.txt").read_text()
    acc = list(csv.DictReader((out / "accuracy.csv").open()))
    assert {r["function"] for r in acc} == {"lab_a", "lab_b"}
    assert json.loads((out / "eval.json").read_text())["rounds"] == 2
    # A second run into the same folder refuses instead of mixing runs.
    again = run(fakes, "--rounds", "1", "--workloads", "lab-cyg")
    assert again.returncode == 2 and "exists" in again.stderr


def test_stdout_difference_is_noted(fakes):
    # kvpipe's output must equal the no-preload run's; the fake profiler changes it via env.
    text = (fakes / "crossmod").read_text().replace("rc = subprocess.call(prog)",
                                                    "rc = subprocess.call(prog, env={**os.environ, 'FAKE_KV_NOISE': 'x'})")
    _exe(fakes / "crossmod", text)
    p = run(fakes, "--rounds", "1", "--workloads", "kvpipe-cyg", "--dime-workloads", "kvpipe-cyg", "--budgets", "5")
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader((fakes / "out" / "runs.csv").open()))
    assert all("stdout differs" in r["note"] for r in rows if r["policy"] != "baseline")
    assert rows[0]["note"] == ""



def test_pipeline_with_oncpu_fields(fakes):
    # A profiler that writes the on-CPU fields; only the latency_lab workloads, one round.
    p = run(fakes, "--rounds", "1", "--workloads", "lab-cyg,lab-pfe", "--dime-workloads", "lab-pfe",
            "--budgets", "1,5", env={"FAKE_ONCPU": "1"})
    assert p.returncode == 0, p.stderr
    out = fakes / "out"
    rows = list(csv.DictReader((out / "runs.csv").open()))
    assert {r["workload"] for r in rows} == {"lab-cyg", "lab-pfe"} and len(rows) == 6 + 8
    assert all(r["rc"] == "0" and r["note"] == "" for r in rows)
    # Nothing new is passed to crossmod profile.
    cmd = (out / "raw" / "lab-cyg" / "budget-r0" / "cmd.txt").read_text().split()
    assert cmd[1:9] == ["profile", "--policy", "budget", "--out", str(out / "raw" / "lab-cyg" / "budget-r0" / "profile"),
                        "--quiet", "--budget", "5%"] and cmd[9] == "--"
    acc = {(r["workload"], r["config"], r["function"]): r for r in csv.DictReader((out / "accuracy.csv").open())}
    full_b = acc[("lab-cyg", "full", "lab_b")]
    assert float(full_b["est_oncpu_mean_ticks"]) == 4000.0 and float(full_b["est_raw_mean_ticks"]) == 5050.0
    assert (full_b["oncpu_ci_lo"], full_b["oncpu_ci_hi"]) == ("3800", "4200")
    assert full_b["oncpu_covers_unpreempted"] == "1" and full_b["oncpu_within_10pct_unpreempted"] == "1"
    paper_b = acc[("lab-cyg", "paper", "lab_b")]
    assert paper_b["oncpu_covers_unpreempted"] == "0" and paper_b["oncpu_within_10pct_unpreempted"] == "0"
    info = {(r["workload"], r["config"]): r for r in csv.DictReader((out / "information.csv").open())}
    assert float(info[("lab-cyg", "budget")]["kept_oncpu"]) == 1.0
    assert float(info[("lab-cyg", "paper")]["kept_oncpu"]) == pytest.approx(0.5)   # 2 seen + 0 of 2
    assert float(info[("lab-pfe", "dime1")]["kept_oncpu"]) == pytest.approx(0.5)   # lab_b dropped: (1 + 1) / 4
    dime = {(r["workload"], r["config"]): r for r in csv.DictReader((out / "dime_curve.csv").open())}
    assert float(dime[("lab-pfe", "dime5")]["kept_oncpu_median"]) == 1.0
    assert "on-CPU: 2 estimated, 2 covering the unpreempted true mean" in p.stdout
    assert "kept_oncpu 1.0" in p.stdout


def test_pipeline_without_oncpu_fields_leaves_them_empty(fakes):
    p = run(fakes, "--rounds", "1", "--workloads", "lab-cyg", "--dime-workloads", "lab-cyg", "--budgets", "5")
    assert p.returncode == 0, p.stderr
    out = fakes / "out"
    acc = list(csv.DictReader((out / "accuracy.csv").open()))
    assert acc and all(r["est_oncpu_mean_ticks"] == "" and r["oncpu_covers_unpreempted"] == "" for r in acc)
    assert all(r["kept_oncpu"] == "" for r in csv.DictReader((out / "information.csv").open()))
    assert all(r["kept_oncpu_median"] == "" for r in csv.DictReader((out / "dime_curve.csv").open()))
    assert "on-CPU" not in p.stdout and "kept_oncpu" not in p.stdout
