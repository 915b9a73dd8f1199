"""evaluation.peers: the marginal-cost arithmetic on made-up rows, tool selection, bad
usage, and one tiny real run when the build exists."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from evaluation import peers
from evaluation.__main__ import main as evaluation_main
from evaluation.common import UsageError, rotated

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"


def rows_for(tool, variant, n, cpu_small, cpu_large, rounds=6, scale=1):
    k = max(1, n // scale)
    return [r for rnd in range(rounds) for r in (
        peers.Row(rnd, tool, variant, k, 0, True, cpu_small, cpu_small),
        peers.Row(rnd, tool, variant, 2 * k, 0, True, cpu_large, cpu_large))]


def test_marginal_cost_per_call_cancels_fixed_costs():
    n = 1_000_000
    # Baseline: 1 ns per call (2n calls per n iterations) plus 0.01 s start-up.
    base = rows_for("none-plain", "plain", n, 0.01 + 2e-3, 0.01 + 4e-3)
    # Tool: 0.5 s fixed cost, 11 ns per call.
    tool = rows_for("t", "plain", n, 0.5 + 22e-3, 0.5 + 44e-3)
    t = peers.Tool("t", "plain", "made up", lambda e, d, k: [])
    base_tool = peers.Tool("none-plain", "plain", "made up", lambda e, d, k: [])
    [sb, st] = peers.summarise(base + tool, [base_tool, t], n)
    assert st.rounds == 6 and sb.rounds == 6
    assert st.per_call_ns == pytest.approx([11.0] * 6)
    assert st.excess_ns == pytest.approx([10.0] * 6)
    assert st.cpu_ratio == pytest.approx([(0.5 + 44e-3) / (0.01 + 4e-3)] * 6)
    assert sb.excess_ns == pytest.approx([0.0] * 6)


def test_a_failed_run_drops_its_round_only():
    n = 1000
    base = rows_for("none-plain", "plain", n, 1.0, 2.0)
    tool = rows_for("t", "plain", n, 1.0, 3.0)
    tool[0].ok = False
    t = peers.Tool("t", "plain", "", lambda e, d, k: [])
    [st] = peers.summarise(base + tool, [t], n)
    assert st.rounds == 5 and st.failed_runs == 1


def test_scaled_tool_uses_its_own_sizes_and_the_full_size_baseline():
    n = 100_000
    t = peers.Tool("slow", "plain", "", lambda e, d, k: [], scale=100)
    base = rows_for("none-plain", "plain", n, 1.0, 1.0 + 2 * n * 2e-9) + \
        rows_for("none-plain", "plain", n, 1.0, 1.0 + 2 * 1000 * 2e-9, scale=100)
    tool = rows_for("slow", "plain", n, 1.0, 1.0 + 2 * 1000 * 20e-6, scale=100)
    [st] = peers.summarise(base + tool, [t], n)
    assert st.per_call_ns == pytest.approx([20_000.0] * 6)
    assert st.excess_ns == pytest.approx([20_000.0 - 2.0] * 6)


def test_select_adds_the_baseline_of_each_variant():
    names = [t.name for t in peers.select_tools("crossmod-full-pfe,uftrace-pg")]
    assert set(names[:2]) == {"none-pg", "none-pfe"}
    assert "crossmod-full-pfe" in names and "uftrace-pg" in names
    with pytest.raises(UsageError):
        peers.select_tools("crossmod-full-pfe,nosuchtool")


def test_rotation_visits_every_configuration_once_per_round():
    names = ["a", "b", "c"]
    assert [rotated(names, r)[0] for r in range(3)] == ["a", "b", "c"]
    assert sorted(rotated(names, 7)) == names


@pytest.mark.parametrize("argv", [["peers", "--rounds", "0"], ["peers", "--tools", "nope"],
                                  ["peers", "--build", "/nonexistent"]])
def test_bad_usage_exits_2_and_writes_nothing(argv, tmp_path, capsys):
    out = tmp_path / "out"
    assert evaluation_main(argv + ["--out", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("evaluation peers:")


@pytest.mark.skipif(not os.access(BUILD / "crossmod", os.X_OK) or shutil.which("gcc") is None,
                    reason="needs build/crossmod (scripts/bootstrap.sh) and gcc")
def test_tiny_real_run_writes_runs_and_summary(tmp_path):
    out = tmp_path / "peers"
    rc = evaluation_main(["peers", "--build", str(BUILD), "--rounds", "1", "--iterations", "20000",
                          "--tools", "crossmod-trace", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "peers-summary.json").read_text())
    by_tool = {t["tool"]: t for t in doc["tools"]}
    assert by_tool["crossmod-trace"]["rounds"] == 1 and by_tool["crossmod-trace"]["failed_runs"] == 0
    assert (out / "peers-runs.csv").read_text().count("\n") == 1 + 4
