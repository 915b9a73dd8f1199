"""scripts/dwell_ab.py with a stand-in `crossmod` that logs its calls and writes a
crosscheck CSV whose tears depend on the dwell and the site entry: checks the A, B, A, B
order, the pooled table (tears, exposed, runs torn per dwell, entry and detector), that
runs without a recorded entry count as fallthrough, and the usage errors."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "dwell_ab.py"

FAKE = r'''#!/usr/bin/python3
import os, sys, time
a = sys.argv[1:]
assert a[0] == "crosscheck", a
dwell = int(a[a.index("--dwell") + 1])
entry = a[a.index("--site-entry") + 1]
ref = a[a.index("--reference-entry") + 1] if "--reference-entry" in a else None
out = a[a.index("--out") + 1]
os.makedirs(out, exist_ok=True)
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(f"{dwell}-{entry}\n")
n = len(os.listdir(out))
hdr = "schema_version,round,order,impl,wait_ticks,straddle,toggles,exposed,tears,dwell_ticks\n"
tears = 3 if dwell == 5000 else 0
tears += 1 if entry == "call" else 0
with open(os.path.join(out, f"crosscheck-{n}.json"), "w") as f:
    f.write('{"config": {"site_entry": "%s"%s}}' % (entry, ', "reference_site_entry": "%s"' % ref if ref else ""))
with open(os.path.join(out, f"crosscheck-{n}.csv"), "w") as f:
    f.write(hdr)
    for s in (1, 2):
        f.write(f"1,1,1,harness,1500,{s},100,90,{tears},{dwell}\n")
        f.write(f"1,1,2,reference,1500,{s},100,80,1,{dwell}\n")
'''


def load():
    spec = importlib.util.spec_from_file_location("dwell_ab", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_ab(tmp_path: Path, *args: str):
    """dwell_ab.py against the stand-in crossmod; returns (completed process, out dir, call log)."""
    build = tmp_path / "build"
    build.mkdir()
    fake = build / "crossmod"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    log = tmp_path / "log"
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, SCRIPT, "--build", str(build), *args, "--out", str(out)],
                       env=dict(os.environ, FAKE_LOG=str(log)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r, out, log


def test_interleaves_and_pools(tmp_path: Path):
    r, out, log = run_ab(tmp_path, "--pairs", "3", "--dwells", "5000,14100")
    assert log.read_text().split() == ["5000-call", "14100-call"] * 3
    assert sorted(p.name for p in out.iterdir()) == ["d14100", "d5000"]
    table = load().summarize(out)
    assert table[(5000, "call", "harness")] == [24, 540, 3, 3]
    assert table[(14100, "call", "harness")] == [6, 540, 3, 3]
    assert table[(14100, "call", "reference")] == [6, 480, 3, 3]
    assert "6/540" in r.stdout and "24/540" in r.stdout


def test_entries_are_arms_too(tmp_path: Path):
    r, out, log = run_ab(tmp_path, "--pairs", "2", "--dwells", "14100", "--entries", "call,fallthrough")
    assert log.read_text().split() == ["14100-call", "14100-fallthrough"] * 2
    table = load().summarize(out)
    assert table[(14100, "call", "harness")] == [4, 360, 2, 2]
    assert table[(14100, "fallthrough", "harness")] == [0, 360, 2, 0]
    # A run from before --site-entry existed (no site_entry in its JSON) fell through.
    for j in (out / "d14100-call").glob("*.json"):
        j.write_text('{"config": {}}')
    assert load().summarize(out)[(14100, "fallthrough", "harness")] == [4, 720, 4, 2]


def test_reference_entry_same_gives_the_reference_the_arms_entry(tmp_path: Path):
    r, out, _ = run_ab(tmp_path, "--pairs", "1", "--dwells", "14100", "--entries", "call,fallthrough",
                       "--reference-entry", "same")
    table = load().summarize(out)
    assert table[(14100, "fallthrough", "reference")] == [2, 160, 1, 1]
    assert table[(14100, "call", "reference")] == [2, 160, 1, 1]


def test_bad_input_exits_two(tmp_path: Path):
    for args in (["--dwells", "5000"], ["--dwells", "5000,x", "--out", str(tmp_path)], [],
                 ["--dwells", "5000", "--entries", "call,jmp", "--out", str(tmp_path)],
                 ["--dwells", "5000", "--entries", "call,call", "--out", str(tmp_path)]):
        r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
