"""The probes-suite plots (analysis/probes_plots.py) on synthetic, seeded output of
probes/bench/probes_bench.cpp: every plot is a real PNG, the headline numbers are what the
inputs say, and a folder without the probes files skips the plots without failing."""
import json
import math
import random

from analysis import cli, loaders, plots, probes_plots
from analysis.tests.conftest import assert_real_png

STAMP = "20260101T000000Z"
RATES = (1000, 10000, 100000, 1000000)


def _bench_json(executors=(1, 2)):
    rng = random.Random(7)
    tp = []
    for n in executors:
        counters = {}
        for strategy in ("callpatch", "wordpatch_sync"):
            counters[f"{strategy}/on/rate:0/calls_per_s"] = 1e7
            counters[f"{strategy}/off/rate:0/calls_per_s"] = 1e8
            for mode in ("ad", "aa"):
                for i, r in enumerate(RATES):
                    k = f"{strategy}/{mode}/rate:{r}/"
                    counters[k + "calls_per_s"] = 5e7 * (1 - 0.1 * i)
                    counters[k + "ratio_same_mix"] = 1 - 0.05 * i + rng.uniform(-0.01, 0.01)
                    counters[k + "imbalance"] = 2.0 ** (i + 1)  # geometric mean 2^2.5
                    counters[k + "toggles_per_s"] = r * 0.9
        tp.append({"name": f"probes/throughput/executors:{n}", "run_name": f"probes/throughput/executors:{n}",
                   "run_type": "iteration", "iterations": 1, "real_time": 1e9, "cpu_time": 1e8,
                   "time_unit": "ns", **counters})
    inv = {"direct_call/ticks_per_call": 6.0, "nop5_site/ticks_per_call": 8.0,
           "manual_off/ticks_per_call": 8.5, "manual_on/ticks_per_call": 40.0,
           "patchable_off/ticks_per_call": 6.5, "patchable_both_on/ticks_per_call": 95.0,
           "cyg_off/ticks_per_call": 9.0, "cyg_both_on/ticks_per_call": 60.0}
    benches = [
        {"name": "probes/init/patchable_scan/functions:20000", "run_name": "probes/init/patchable_scan/functions:20000",
         "run_type": "iteration", "iterations": 1, "real_time": 1.0, "time_unit": "ns",
         "ticks_per_probe": 1666.0, "probes": 40000.0},
        {"name": "probes/init/cyg_discovery/functions:5000", "run_name": "probes/init/cyg_discovery/functions:5000",
         "run_type": "iteration", "iterations": 1, "real_time": 1.0, "time_unit": "ns",
         "ticks_per_probe": 1935.0, "probes": 10000.0},
        {"name": "probes/toggle/all_probes", "run_name": "probes/toggle/all_probes", "run_type": "iteration",
         "iterations": 1, "real_time": 1.0, "time_unit": "ns", "probes": 2000.0, "straddling_probes": 125.0,
         "callpatch_ticks_p50": 180.0},
        *tp,
        {"name": "probes/invoke", "run_name": "probes/invoke", "run_type": "iteration", "iterations": 1,
         "real_time": 1.0, "time_unit": "ns", **inv},
    ]
    return {"context": {"machine_slug": "synthetic-probes", "probes_wait_ticks": "3000",
                        "probes_window_s": "0.2", "probes_rounds": "3"},
            "benchmarks": benches}


def _latency_csv(path):
    rng = random.Random(11)
    lines = ["benchmark,op,executors,sample_ticks"]
    for op, centre in (("callpatch", 200), ("wordpatch_sync", 230), ("wordpatch_async", 220),
                       ("wordpatch_async_flush", 80)):
        for i in range(2000):
            t = centre + rng.randint(0, 60)
            if op == "wordpatch_sync" and i % 16 == 0:
                t += 6000  # straddlers pay two waits: bimodal
            lines.append(f"probes/toggle/all_probes,{op},0,{t}")
    path.write_text("\n".join(lines) + "\n")


def _folder(tmp_path, csv=True):
    d = tmp_path / "synthetic-probes"
    d.mkdir()
    (d / f"bench-{STAMP}-probes.json").write_text(json.dumps(_bench_json()))
    if csv:
        _latency_csv(d / f"bench-{STAMP}-probes-latency.csv")
    return d


def test_every_probes_plot_is_written(tmp_path):
    d = _folder(tmp_path)
    out = tmp_path / "plots"
    rc = cli.main([str(d), "--out", str(out), "--only",
                   "probes_toggle_hist,probes_throughput,probes_invocation"])
    assert rc == 0
    for name in ("probes_toggle_hist", "probes_throughput", "probes_invocation"):
        assert_real_png(out / f"{name}.png")
        assert "synthetic-probes" in (out / f"{name}.svg").read_text()


def test_headline_numbers_come_from_the_inputs(tmp_path):
    d = _folder(tmp_path)
    js, csv = probes_plots.newest(d)
    assert js.name == f"bench-{STAMP}-probes.json" and csv is not None
    h = probes_plots.headline(loaders.load_bench(js))
    assert h["init_patchable_ticks_per_probe"] == 1666.0
    assert h["init_cyg_ticks_per_probe"] == 1935.0
    # Imbalance 2, 4, 8, 16 over the four rates: geometric mean 2^2.5.
    for key, value in h["imbalance_geomean"].items():
        assert math.isclose(value, 2 ** 2.5), key
    assert set(h["imbalance_geomean"]) == {f"{s}/{m}/executors:{n}" for s in ("callpatch", "wordpatch_sync")
                                           for m in ("ad", "aa") for n in (1, 2)}
    assert h["invoke_ticks_per_call"]["patchable_both_on"] == 95.0


def test_the_engine_bench_loader_does_not_take_the_probes_files(tmp_path):
    d = _folder(tmp_path)
    assert loaders.newest(d, "bench") is None
    assert loaders.newest(d, "latency") is None


def test_without_probes_files_the_plots_are_skipped(tmp_path):
    d = tmp_path / "empty-machine"
    d.mkdir()
    out = tmp_path / "plots"
    assert cli.main([str(d), "--out", str(out), "--only", "probes_throughput"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "probes_throughput" in summary["skipped"]
    assert not (out / "probes_throughput.png").exists()


def test_toggle_hist_skips_without_samples(tmp_path):
    import pytest
    with pytest.raises(plots.Skip):
        probes_plots.toggle_hist({}, None, plots.Machine("m"), tmp_path / "x.csv", tmp_path, svg=False)
