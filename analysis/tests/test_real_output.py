"""The analysis against files the crossmod harness itself wrote (tests/data, see its
README): schemas accepted, machine context picked up, every plot drawn or skipped cleanly."""
import json
import shutil
from pathlib import Path

from analysis import cli, loaders
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
    assert summary["skipped"] == {}
    assert summary["bench_summary"]           # headline ratios carried over
    for png in sorted(plots.glob("*.png")):
        assert_real_png(png)
    assert len(list(plots.glob("*.png"))) == 12
    # Every wordpatch cell of this smoke run had low exposure: no Tmax claimed.
    assert summary["tmax"]["from_sweep"]["observed_ticks"] is None
    assert "none (no clean zero-failure evidence" in capsys.readouterr().out
