"""profiler/scripts/refusals_ab.py: the note parsing, a whole A/B against two fake builds,
and its usage errors."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "profiler" / "scripts" / "refusals_ab.py"


def load():
    spec = importlib.util.spec_from_file_location("refusals_ab", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_counts_read_the_start_up_and_late_refusals():
    note = ("  note: --trace: 16700 tracepoint probes, 299 functions refused (jump-only: ...), status ok;"
            " loaded later: 15 objects, 14722 probes, 61 refused\n")
    assert load().counts(note) == (299, 61)
    assert load().counts("  note: --trace: 2 tracepoint probes, 0 functions refused (...), status ok\n") == (0, 0)


def fake_build(folder: Path, start: int, late: int) -> Path:
    folder.mkdir()
    exe = folder / "crossmod"
    exe.write_text("#!/bin/sh\n"
                   f"echo '  note: --trace: 9 tracepoint probes, {start} functions refused (x), status ok;"
                   f" loaded later: 1 objects, 2 probes, {late} refused' >&2\n")
    exe.chmod(0o755)
    return folder


def test_each_build_gets_its_own_counts(tmp_path):
    a = fake_build(tmp_path / "a", 299, 61)
    b = fake_build(tmp_path / "b", 80, 55)
    r = subprocess.run([sys.executable, str(SCRIPT), str(a), str(b), "3", "x*", "/bin/true"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "refused at start-up: 299 299 299  (median 299)" in r.stdout
    assert "refused loaded later: 61 61 61  (median 61)" in r.stdout
    assert "refused at start-up: 80 80 80  (median 80)" in r.stdout
    assert "refused loaded later: 55 55 55  (median 55)" in r.stdout


@pytest.mark.parametrize("argv", [["x"], ["a", "b", "three"], ["a", "b", "0"], ["/nonexistent", "/nonexistent", "2"]])
def test_usage_errors_exit_2_with_one_line(argv):
    r = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True)
    assert r.returncode == 2, r
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
