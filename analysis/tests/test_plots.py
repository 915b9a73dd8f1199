"""Every plot writes a real, non-blank PNG (and an SVG by default); plot functions raise
Skip, not an error of their own, when their inputs are absent. The full set of plots is
rendered once by the session fixture `e2e` (the CLI on the Intel fixture folder)."""
import pytest

from analysis import loaders, plots
from analysis.tests.conftest import AMD, INTEL, assert_real_png

MACHINE = plots.Machine(INTEL, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", 2.5e9)
ALL_PLOTS = ["failure_rate", "controls", "latency_hist", "latency_cdf", "throughput_rate",
             "throughput_executors", "invocation", "timeline"] + [f"heatmap_{p}" for p in loaders.PROTOCOLS]


@pytest.mark.parametrize("name", ALL_PLOTS)
def test_every_plot_written(e2e, name):
    assert e2e["rc"] == 0
    assert_real_png(e2e["plots"] / f"{name}.png")
    svg = (e2e["plots"] / f"{name}.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    assert INTEL in svg or name == "tmax_overlay"   # machine slug in the subtitle


def test_plot_function_returns_paths(intel_data, tmp_path):
    written = plots.controls(intel_data["sweep"], MACHINE, tmp_path, svg=False)
    assert written == [tmp_path / "controls.png"]
    assert_real_png(written[0])


def test_overlay_function(intel_data, tree, tmp_path):
    amd = loaders.load_sweep(loaders.newest(tree / "results" / AMD, "sweep"))
    (png,) = plots.tmax_overlay([(MACHINE, intel_data["sweep"], intel_data["tmax"]),
                                 (plots.Machine(AMD, "AMD EPYC 7R13 Processor", 2.65e9), amd, None)],
                                tmp_path, svg=False)
    assert_real_png(png)
    with pytest.raises(plots.Skip):
        plots.tmax_overlay([(MACHINE, intel_data["sweep"], None)], tmp_path, svg=False)


def test_timeline_needs_schema_2_rows(intel_data, tmp_path):
    (png,) = plots.timeline(intel_data["sweep"], MACHINE, tmp_path, svg=False)
    assert_real_png(png)
    old = loaders.Sweep(path=intel_data["sweep"].path, context={}, context_path=None,
                        rows=[dict(r, start_utc_ms=None) for r in intel_data["sweep"].rows])
    with pytest.raises(plots.Skip, match="schema 1"):
        plots.timeline(old, MACHINE, tmp_path, svg=False)


def test_skips_when_inputs_absent(intel_data, tmp_path):
    empty = loaders.Sweep(path=intel_data["sweep"].path, rows=[], context={}, context_path=None)
    with pytest.raises(plots.Skip, match="no valid wordpatch"):
        plots.failure_rate(empty, MACHINE, None, tmp_path)
    with pytest.raises(plots.Skip):
        plots.controls(empty, MACHINE, tmp_path)
    with pytest.raises(plots.Skip):
        plots.heatmap(empty, MACHINE, "naive", tmp_path)
    with pytest.raises(plots.Skip):
        plots.latency_hist({}, MACHINE, intel_data["latency_path"], tmp_path)
    no_bench = loaders.Bench(path=intel_data["bench"].path, context={}, entries=[], errors=[])
    for fn in (plots.throughput_rate, plots.throughput_executors, plots.invocation):
        with pytest.raises(plots.Skip):
            fn(no_bench, MACHINE, tmp_path)
    assert not list(tmp_path.iterdir())


def test_throughput_without_baseline_skips(intel_data, tmp_path):
    bench = intel_data["bench"]
    no_zero = loaders.Bench(path=bench.path, context={}, errors=[],
                            entries=[e for e in bench.entries if e.params.get("rate") != 0])
    with pytest.raises(plots.Skip, match="rate:0 baseline"):
        plots.throughput_rate(no_zero, MACHINE, tmp_path)


def test_output_is_byte_identical_across_runs(intel_data, tmp_path):
    # Committed reference plots should only change when the data does.
    a = plots.controls(intel_data["sweep"], MACHINE, tmp_path / "a", svg=True)
    b = plots.controls(intel_data["sweep"], MACHINE, tmp_path / "b", svg=True)
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), x.name
