"""`python3 -m analysis` end to end on the fixture folders: all plots and summary.json,
overlays for several folders, skipped plots for missing files (exit 0), exit 2 with the
file named for malformed input."""
import json
import os
import subprocess
import sys
from pathlib import Path

from analysis import cli
from analysis.loaders import SWEEP_COLUMNS
from analysis.tests.conftest import AMD, INTEL, assert_real_png
from analysis.tests.fixtures import STAMP, make_sweep_rows, sweep_context, write_csv

SWEEP_PLOTS = ["failure_rate", "heatmap_wordpatch", "heatmap_naive", "heatmap_callpatch",
               "heatmap_aligned", "heatmap_sync-core", "controls"]
BENCH_PLOTS = ["latency_hist", "latency_cdf", "throughput_rate", "throughput_executors", "invocation"]
REPO = Path(__file__).resolve().parents[2]


def test_end_to_end_single_folder(e2e):
    assert e2e["rc"] == 0
    out = e2e["plots"]
    for name in SWEEP_PLOTS + BENCH_PLOTS:
        assert_real_png(out / f"{name}.png")
        assert (out / f"{name}.svg").stat().st_size > 1000
    summary = json.loads((out / "summary.json").read_text())
    assert summary["machine"]["slug"] == INTEL
    assert summary["skipped"] == {}
    assert summary["tmax"]["config"]["observed_ticks"] == 1600
    assert summary["tmax"]["from_sweep"]["observed_ticks"] == 1600
    assert len(summary["sweep"]["excluded"]) == 2
    assert summary["sweep"]["per_protocol"]["callpatch"]["failures"] == 0
    assert summary["bench"]["errors"][0]["message"] == "more executors than PUs"
    assert "observed 1600 ticks" in e2e["stdout"] and "0 plots skipped" in e2e["stdout"]


def _wordpatch_only(tmp_path: Path, slug: str, seed: int) -> Path:
    """A small sweep-only folder: wordpatch grid cells of one placement, no bench files."""
    folder = tmp_path / "results" / slug
    folder.mkdir(parents=True)
    rows = [r for r in make_sweep_rows(slug, seed) if r["protocol"] == "wordpatch"
            and r["executors"] == 1 and r["placement"] == "spread"]
    write_csv(folder / f"sweep-{STAMP}.csv", SWEEP_COLUMNS, rows)
    (folder / f"sweep-{STAMP}.json").write_text(json.dumps(sweep_context(slug)))
    return folder


def test_overlay_two_folders_and_missing_inputs(tmp_path, capsys):
    # Neither folder has bench files or control cells: those plots are skipped with a
    # message and the exit code stays 0. --out collects everything in one place.
    a, b = _wordpatch_only(tmp_path, INTEL, 1), _wordpatch_only(tmp_path, AMD, 5)
    out = tmp_path / "out"
    only = "failure_rate,controls,heatmap_naive,invocation,latency_hist,tmax_overlay"
    assert cli.main([str(a), str(b), "--out", str(out), "--no-svg", "--only", only]) == 0
    assert_real_png(out / "tmax_overlay.png")
    for slug in (INTEL, AMD):
        assert_real_png(out / slug / "failure_rate.png")
        assert not (out / slug / "heatmap_wordpatch.png").exists()     # not in --only
        summary = json.loads((out / slug / "summary.json").read_text())
        assert set(summary["skipped"]) == {"controls", "heatmap_naive", "invocation", "latency_hist"}
        assert summary["tmax"]["config"] is None      # no configs/tmax beside these folders
        assert summary["tmax"]["from_sweep"]["observed_ticks"] is not None
    assert not list(out.glob("**/*.svg"))
    assert not (a / "plots").exists()
    err = capsys.readouterr().err
    assert "skip bench plots" in err and "skip controls" in err


def test_malformed_input_exit_2(intel_copy, capsys):
    sweep = next(intel_copy.glob("sweep-*.csv"))
    lines = sweep.read_text().splitlines()
    fields = lines[3].split(",")
    fields[4] = "fast"   # wait_ticks
    lines[3] = ",".join(fields)
    sweep.write_text("\n".join(lines) + "\n")
    assert cli.main([str(intel_copy), "--no-svg"]) == 2
    err = capsys.readouterr().err
    assert sweep.name in err and "line 4, column wait_ticks" in err


def test_missing_folder_empty_folder_and_bad_only(tmp_path, capsys):
    assert cli.main([str(tmp_path / "nope")]) == 2
    assert cli.main([str(tmp_path), "--only", "failure_rate,pie_chart"]) == 2
    assert "unknown plot(s) pie_chart" in capsys.readouterr().err
    empty = tmp_path / "results" / "empty"
    empty.mkdir(parents=True)
    assert cli.main([str(empty)]) == 0
    summary = json.loads((empty / "plots" / "summary.json").read_text())
    assert len(summary["skipped"]) == len(SWEEP_PLOTS + BENCH_PLOTS)


def test_module_entry_point_runs(tmp_path):
    # The real `python3 -m analysis` in a subprocess, with only --help to keep it quick.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "analysis", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "results/<machine>" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path / "missing")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a directory" in proc.stderr


def test_newest_sweep_by_default_all_with_flag(tmp_path):
    folder = _wordpatch_only(tmp_path, INTEL, 1)
    old = folder / "sweep-20250101T000000Z.csv"
    write_csv(old, SWEEP_COLUMNS, make_sweep_rows(INTEL, 9)[:4])
    out = tmp_path / "out"
    assert cli.main([str(folder), "--out", str(out), "--no-svg", "--only", "controls"]) == 0
    newest_only = json.loads((out / "summary.json").read_text())
    assert newest_only["inputs"]["sweep"] == [f"sweep-{STAMP}.csv"]
    assert cli.main([str(folder), "--out", str(out), "--no-svg", "--all-sweeps", "--only", "controls"]) == 0
    pooled = json.loads((out / "summary.json").read_text())
    assert pooled["inputs"]["sweep"] == [old.name, f"sweep-{STAMP}.csv"]
    assert pooled["sweep"]["cells"] == newest_only["sweep"]["cells"] + 4


def test_bench_only_folder_uses_bench_context(tree, tmp_path):
    # No sweep and no latency CSV: brand and TSC rate come from the bench context (whose
    # custom values are strings), sweep and latency plots are skipped, exit 0.
    folder = tmp_path / "results" / INTEL
    folder.mkdir(parents=True)
    src = tree / "results" / INTEL
    for f in src.glob("bench-*.json"):
        (folder / f.name).write_bytes(f.read_bytes())
    assert cli.main([str(folder), "--no-svg"]) == 0
    summary = json.loads((folder / "plots" / "summary.json").read_text())
    assert summary["machine"] == {"slug": INTEL, "brand": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
                                  "tsc_hz": 2.5e9}
    assert set(summary["skipped"]) == set(SWEEP_PLOTS) | {"latency_hist", "latency_cdf"}
    for name in ("throughput_rate", "throughput_executors", "invocation"):
        assert_real_png(folder / "plots" / f"{name}.png")


def test_tmax_from_calibrate_when_config_is_absent(tree, tmp_path):
    # A results folder copied without configs/: the calibrate summary supplies Tmax.
    folder = tmp_path / "elsewhere" / INTEL
    folder.mkdir(parents=True)
    for f in (tree / "results" / INTEL).glob("[sc]*-*.*"):      # sweep-* and calibrate-*
        (folder / f.name).write_bytes(f.read_bytes())
    assert cli.main([str(folder), "--no-svg", "--only", "failure_rate"]) == 0
    summary = json.loads((folder / "plots" / "summary.json").read_text())
    assert summary["inputs"]["tmax_config"].startswith("calibrate-")
    assert summary["tmax"]["config"]["recommended_ticks"] == 3200
