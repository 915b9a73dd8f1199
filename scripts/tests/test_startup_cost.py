"""scripts/startup_cost.py with stand-in builds: a fake `crossmod` whose `profile` runs the
program and writes a profile.json with a CPU time chosen per build, logging the order of
its calls. Checks the interleaving, the table, the split and the usage errors; needs
neither the profiler nor a build (the plain runs are the real /usr/bin/python3)."""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # scripts/tests/ -> the repo
SCRIPT = ROOT / "scripts" / "startup_cost.py"

FAKE_CROSSMOD = r'''#!/usr/bin/python3
import json, os, subprocess, sys
args = sys.argv[1:]
assert args[0] == "profile", args
sep = args.index("--")
opts, prog = args[1:sep], args[sep + 1:]
assert opts[opts.index("--policy") + 1] == os.environ.get("FAKE_POLICY", "none")
out = opts[opts.index("--out") + 1]
here = os.path.dirname(os.path.abspath(__file__))
trace = opts[opts.index("--trace") + 1] if "--trace" in opts else "-"
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(f"{os.path.basename(here)} {trace}\n")
rc = subprocess.call(prog, stdout=subprocess.DEVNULL)
if os.path.exists(os.path.join(here, "fail")):
    sys.exit(3)
os.makedirs(out)
cpu = float(open(os.path.join(here, "cpu")).read()) + (0.1 if trace != "-" else 0.0)
overhead = {"calib_ticks_per_hit": 40 if trace == "-" else 44,
            "self_ticks": {"cyg": -20, "patchable": None, "tracepoint": -7 if trace != "-" else None},
            "nest_ticks": {"cyg": 3, "patchable": None, "tracepoint": None}}
json.dump({"schema": 1, "run": {"cpu_s": cpu}, "overhead": overhead}, open(os.path.join(out, "profile.json"), "w"))
sys.exit(rc)
'''


def load():
    spec = importlib.util.spec_from_file_location("startup_cost", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def fake_build(tmp: Path, name: str, cpu: float) -> Path:
    b = tmp / name
    (b / "probes").mkdir(parents=True)
    exe = b / "crossmod"
    exe.write_text(FAKE_CROSSMOD)
    exe.chmod(0o755)
    (b / "cpu").write_text(str(cpu))
    return b


@pytest.fixture
def env(tmp_path, monkeypatch):
    log = tmp_path / "log.txt"
    monkeypatch.setenv("FAKE_LOG", str(log))
    return tmp_path, log


def test_orders_alternate():
    m = load()
    assert m.build_orders(["a", "b"], 3) == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert m.build_orders(["a"], 2) == [["a"], ["a"]]


def test_interleaved_table_and_json(env, capsys):
    tmp, log = env
    m = load()
    a, b = fake_build(tmp, "A", 0.5), fake_build(tmp, "B", 0.25)
    js = tmp / "s.json"
    assert m.main(["--runs", "2", "--cases", "python3,python3-trace", "--json", str(js), str(a), str(b)]) == 0
    # Round 1: A then B for each case; round 2: B then A.
    assert log.read_text().split("\n")[:-1] == [
        "A -", "B -", "A Py*", "B Py*", "B -", "A -", "B Py*", "A Py*"]
    out = capsys.readouterr().out
    assert f"| python3 | {a} | 0.5000 | 0.5000..0.5000 |" in out
    assert f"| python3-trace | {b} | 0.3500 | 0.3500..0.3500 |" in out
    # The calibrations of every profiled run of a build; null (uncalibrated) ones left out.
    assert f"| {a} | calib_ticks_per_hit | 42 | 40..44 | 4 |" in out
    assert f"| {a} | self_ticks.tracepoint | -7 | -7..-7 | 2 |" in out
    assert f"| {b} | nest_ticks.cyg | 3 | 3..3 | 4 |" in out
    assert "self_ticks.patchable" not in out
    samples = json.loads(js.read_text())
    assert samples["python3"][str(a)] == [0.5, 0.5]
    assert len(samples["python3"]["plain"]) == 2
    assert f"split python3 {a}" not in out  # no --split: no probes-only runs


def test_split_line(env, capsys):
    tmp, _ = env
    m = load()
    a = fake_build(tmp, "A", 0.5)
    # The probes-only run preloads A/probes/libcrossmod_probes.so, absent here: ld.so warns
    # and runs the program anyway.
    assert m.main(["--runs", "1", "--split", "--cases", "python3,python3-trace", str(a)]) == 0
    out = capsys.readouterr().out
    assert f"| python3 | probes-only:{a} |" in out
    line = next(l for l in out.splitlines() if l.startswith(f"split python3 {a}:"))
    assert "--trace attach +0.1000 s" in line


def test_usage_errors(env, capsys):
    tmp, _ = env
    m = load()
    a = fake_build(tmp, "A", 0.5)
    assert m.main(["--cases", "nope", str(a)]) == 2
    assert m.main(["--runs", "0", str(a)]) == 2
    assert m.main([str(tmp / "missing")]) == 2
    assert m.main(["--policy", "sometimes", str(a)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(l.startswith("startup_cost: ") for l in err)


def test_policy_reaches_the_profiled_runs(env, monkeypatch, capsys):
    tmp, log = env
    m = load()
    a = fake_build(tmp, "A", 0.5)
    monkeypatch.setenv("FAKE_POLICY", "paper")  # the fake asserts the --policy it gets
    assert m.main(["--runs", "1", "--cases", "python3-trace", "--policy", "paper", str(a)]) == 0
    assert log.read_text().split("\n")[:-1] == ["A Py*"]
    assert f"| python3-trace | {a} | 0.6000 |" in capsys.readouterr().out


def test_failed_run_exits_1(env, capsys):
    tmp, _ = env
    m = load()
    a = fake_build(tmp, "A", 0.5)
    (a / "fail").write_text("")
    assert m.main(["--runs", "1", "--cases", "python3", str(a)]) == 1
    assert "exit 3" in capsys.readouterr().err
