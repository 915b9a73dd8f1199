"""scripts/dwell_ab.py with a stand-in `crossmod` that logs its calls and writes a
crosscheck CSV whose tears depend on the dwell: checks the A, B, A, B order, the pooled
table (tears, exposed, runs torn per dwell and detector) and the usage errors."""
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
out = a[a.index("--out") + 1]
os.makedirs(out, exist_ok=True)
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(f"{dwell}\n")
n = len(os.listdir(out))
hdr = "schema_version,round,order,impl,wait_ticks,straddle,toggles,exposed,tears,dwell_ticks\n"
tears = 3 if dwell == 5000 else 0
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


def test_interleaves_and_pools(tmp_path: Path):
    build = tmp_path / "build"
    build.mkdir()
    fake = build / "crossmod"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    log = tmp_path / "log"
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, SCRIPT, "--build", str(build), "--pairs", "3", "--dwells", "5000,14100",
                        "--out", str(out)], env=dict(os.environ, FAKE_LOG=str(log)), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert log.read_text().split() == ["5000", "14100"] * 3
    table = load().summarize(out)
    assert table[(5000, "harness")] == [18, 540, 3, 3]
    assert table[(14100, "harness")] == [0, 540, 3, 0]
    assert table[(14100, "reference")] == [6, 480, 3, 3]
    assert "0/540" in r.stdout and "18/540" in r.stdout


def test_bad_input_exits_two(tmp_path: Path):
    for args in (["--dwells", "5000"], ["--dwells", "5000,x", "--out", str(tmp_path)], []):
        r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1
