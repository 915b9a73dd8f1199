"""profiler/scripts/configs_ab.py: configuration parsing and its usage errors (the runs
themselves need a build and are not exercised here)."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "profiler" / "scripts" / "configs_ab.py"


def load():
    spec = importlib.util.spec_from_file_location("configs_ab", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_options_env_and_build_words_are_split():
    c = load().parse_config("r=--policy budget --budget '5%' ENV:CROSSMOD_PROFILE_RETRACT=1 BUILD:/tmp/b")
    assert c == {"name": "r", "env": {"CROSSMOD_PROFILE_RETRACT": "1"}, "build": "/tmp/b",
                 "opts": ["--policy", "budget", "--budget", "5%"], "bare": False}


def test_bare_runs_without_preload():
    c = load().parse_config("plain=bare")
    assert c["bare"] and c["opts"] == []


@pytest.mark.parametrize("spec", ["noequals", "=--policy none", "x=ENV:NOVALUE"])
def test_bad_configuration_is_refused(spec):
    with pytest.raises(ValueError):
        load().parse_config(spec)


def test_cmd_workload_is_any_command():
    w = load().command_workload("cmd=java 'Hello World.java' -Xint")
    assert w.argv == ["java", "Hello World.java", "-Xint"] and w.trace is None and w.stdin is None
    assert load().command_workload("sqlite3") is None


@pytest.mark.parametrize("argv", [["3", "sqlite3", "noequals"], ["3", "sqlite3", "a=bare", "a=bare"],
                                  ["0", "sqlite3", "a=bare"], ["3", "nosuch", "a=bare"], ["3", "cmd=", "a=bare"]])
def test_usage_errors_exit_2_with_one_line(argv, tmp_path):
    # --build points at an empty folder: every refusal comes before any run.
    r = subprocess.run([sys.executable, str(SCRIPT), "--build", str(tmp_path), *argv],
                       capture_output=True, text=True)
    assert r.returncode == 2, r
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
