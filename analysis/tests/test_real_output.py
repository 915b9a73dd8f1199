"""The analysis against files the crossmod harness itself wrote (tests/data, see its
README): schemas accepted, machine context picked up, every plot drawn or skipped cleanly."""
import json
import shutil
from pathlib import Path

import pytest

from analysis import cli, loaders, stats
from analysis.tests.conftest import assert_real_png

DATA = Path(__file__).parent / "data" / "amd-fam26-mod2-step1-1pkg"


def test_real_files_load():
    sweep = loaders.load_sweep(loaders.newest(DATA, "sweep"))
    assert len(sweep.rows) == 20 and sweep.context["machine"]["slug"] == DATA.name
    assert {r["protocol"] for r in sweep.rows} == set(loaders.PROTOCOLS)
    bench = loaders.load_bench(loaders.newest(DATA, "bench"))
    assert {e.group for e in bench.entries} == {"latency", "invoke", "throughput"}
    assert bench.context["tmax_is_default"] == "true"
    samples = loaders.load_latency_csv(loaders.newest(DATA, "latency"))
    assert ("wordpatch_inline_activate", 0) in samples


def test_real_folder_end_to_end(tmp_path, capsys):
    folder = tmp_path / "results" / DATA.name
    shutil.copytree(DATA, folder)
    assert cli.main([str(folder), "--no-svg"]) == 0
    plots = folder / "plots"
    summary = json.loads((plots / "summary.json").read_text())
    assert summary["machine"]["brand"] == "AMD EPYC" and summary["machine"]["tsc_hz"] > 2e9
    # This committed smoke run is results schema 1: no start times, so no timeline.
    assert set(summary["skipped"]) == {"timeline"}
    assert summary["bench_summary"]           # headline ratios carried over
    for png in sorted(plots.glob("*.png")):
        assert_real_png(png)
    assert len(list(plots.glob("*.png"))) == 12
    # Every wordpatch cell of this smoke run had low exposure: no Tmax claimed.
    assert summary["tmax"]["from_sweep"]["observed_ticks"] is None
    assert "none (no clean zero-failure evidence" in capsys.readouterr().out


CALIBRATED = Path(__file__).parent / "data" / "calibrate-smoke"
SLUG = "amd-fam26-mod2-step1-1pkg"


def test_tmax_recomputed_from_csv_matches_the_harness():
    # The Python rule and the C++ derive_tmax must agree on the same rows.
    folder = CALIBRATED / "results" / SLUG
    sweep = loaders.load_sweep(loaders.newest(folder, "sweep"))
    cfg = loaders.load_tmax(CALIBRATED / "configs" / "tmax" / f"{SLUG}.toml")
    t = stats.tmax_from_cells(sweep.rows)
    assert t["observed_ticks"] == cfg.observed_ticks == 1200
    assert t["max_failing_ticks"] == cfg.evidence["largest_failing_ticks"] == 800
    assert t["exposed_at_or_above"] == cfg.evidence["exposed_toggles_at_or_above"]
    assert t["toggles_at_or_above"] == cfg.evidence["toggles_at_or_above"]
    assert t["cells_at_or_above"] == cfg.evidence["cells_at_or_above"]
    assert t["failure_bound_95"] == pytest.approx(cfg.evidence["failure_bound_95"], rel=1e-9)


def test_calibrated_folder_plots(tmp_path):
    shutil.copytree(CALIBRATED, tmp_path / "checkout")
    folder = tmp_path / "checkout" / "results" / SLUG
    assert cli.main([str(folder), "--no-svg", "--only", "failure_rate,heatmap_wordpatch"]) == 0
    summary = json.loads((folder / "plots" / "summary.json").read_text())
    assert summary["tmax"]["config"]["recommended_ticks"] == 2400
    assert summary["tmax"]["from_sweep"]["observed_ticks"] == 1200
    assert_real_png(folder / "plots" / "failure_rate.png")
