"""Schema checks: good files load; malformed ones raise InputError naming the file, the
column and the line."""
import json
from pathlib import Path

import pytest

from analysis import loaders
from analysis.loaders import InputError
from analysis.tests.conftest import INTEL
from analysis.tests.fixtures import make_sweep_rows, write_csv


def _sweep_file(tmp_path: Path, rows=None, columns=loaders.SWEEP_COLUMNS) -> Path:
    path = tmp_path / "sweep-20260101T000000Z.csv"
    rows = make_sweep_rows(INTEL)[:6] if rows is None else rows
    write_csv(path, columns, [{c: r.get(c, "") for c in columns} for r in rows])
    return path


def test_fixture_sweep_loads(intel_data):
    sweep = intel_data["sweep"]
    assert len(sweep.rows) > 150
    assert sweep.ignored_selftest == 1
    assert {r["outcome"] for r in sweep.excluded} == {"blind", "error"}
    assert sweep.context["machine"]["slug"] == INTEL
    row = sweep.rows[0]
    assert isinstance(row["wait_ticks"], int) and isinstance(row["wait_ns"], float)


def test_missing_column_is_named(tmp_path):
    cols = [c for c in loaders.SWEEP_COLUMNS if c != "exposed_toggles"]
    path = _sweep_file(tmp_path, columns=cols)
    with pytest.raises(InputError) as e:
        loaders.load_sweep(path)
    assert str(path) in str(e.value) and "exposed_toggles" in str(e.value)


def test_columns_out_of_order(tmp_path):
    cols = list(loaders.SWEEP_COLUMNS)
    cols[4], cols[5] = cols[5], cols[4]
    with pytest.raises(InputError, match="not in schema order"):
        loaders.load_sweep(_sweep_file(tmp_path, columns=cols))


def test_wrong_schema_version(tmp_path):
    rows = make_sweep_rows(INTEL)[:3]
    rows[2]["schema_version"] = 3
    path = _sweep_file(tmp_path, rows)
    with pytest.raises(InputError) as e:
        loaders.load_sweep(path)
    assert path.name in str(e.value) and "line 4" in str(e.value) and "schema_version" in str(e.value)


def test_version_1_files_still_load(tmp_path):
    rows = make_sweep_rows(INTEL)[:6]
    for r in rows:
        r["schema_version"] = 1
    path = _sweep_file(tmp_path, rows, columns=loaders.SWEEP_COLUMNS_V1)
    sweep = loaders.load_sweep(path)
    assert len(sweep.rows) == 6
    assert all(r["round"] is None and r["c2c_ticks"] is None for r in sweep.rows)


def test_version_2_machine_state_columns_are_typed(tmp_path):
    rows = make_sweep_rows(INTEL)[:2]
    rows[0].update(start_utc_ms=1795000000123, steal_ms=20, c2c_ticks=338, round=4)
    rows[1].update(steal_ms="")
    sweep = loaders.load_sweep(_sweep_file(tmp_path, rows))
    assert sweep.rows[0]["start_utc_ms"] == 1795000000123 and sweep.rows[0]["round"] == 4
    assert sweep.rows[0]["c2c_ticks"] == 338.0 and sweep.rows[1]["steal_ms"] is None


def test_non_numeric_field_names_line_and_column(tmp_path):
    rows = make_sweep_rows(INTEL)[:5]
    rows[3]["failures"] = "many"
    path = _sweep_file(tmp_path, rows)
    with pytest.raises(InputError) as e:
        loaders.load_sweep(path)
    msg = str(e.value)
    assert path.name in msg and "line 5" in msg and "column failures" in msg and "'many'" in msg


@pytest.mark.parametrize("column,value,expect", [
    ("crash", "2", "not 0 or 1"),
    ("phase", "warmup", "phase"),
    ("outcome", "exploded", "outcome"),
    ("protocol", "magic", "protocol"),
    ("wait_ns", "nan", "not a number"),
    ("toggles", "-4", "negative"),
])
def test_bad_values(tmp_path, column, value, expect):
    rows = make_sweep_rows(INTEL)[:2]
    rows[1][column] = value
    with pytest.raises(InputError, match=expect):
        loaders.load_sweep(_sweep_file(tmp_path, rows))


def test_short_row_and_empty_file(tmp_path):
    path = _sweep_file(tmp_path)
    with path.open("a") as f:
        f.write("1,99,grid,wordpatch\n")
    with pytest.raises(InputError, match="fields, expected 39"):
        loaders.load_sweep(path)
    path.write_text("")
    with pytest.raises(InputError, match="empty file"):
        loaders.load_sweep(path)


def test_header_only_is_an_empty_sweep(tmp_path):
    sweep = loaders.load_sweep(_sweep_file(tmp_path, rows=[]))
    assert sweep.rows == [] and sweep.context == {}


def test_bad_context_json(tmp_path):
    path = _sweep_file(tmp_path)
    ctx = path.with_suffix(".json")
    ctx.write_text("{not json")
    with pytest.raises(InputError) as e:
        loaders.load_sweep(path)
    assert ctx.name in str(e.value) and "not valid JSON" in str(e.value)
    ctx.write_text(json.dumps({"schema_version": 7, "kind": "crossmod-sweep-context"}))
    with pytest.raises(InputError, match="schema_version 7"):
        loaders.load_sweep(path)


def test_context_tolerates_missing_and_extra_keys(tmp_path):
    path = _sweep_file(tmp_path)
    path.with_suffix(".json").write_text(json.dumps({"schema_version": 1, "future_key": [1, 2]}))
    assert loaders.load_sweep(path).context["future_key"] == [1, 2]


def test_tmax_config(intel_data, tmp_path):
    cfg = intel_data["tmax"]
    assert cfg.observed_ticks == 1600 and cfg.recommended_ticks == 3200
    assert cfg.evidence["failure_bound_95"] == pytest.approx(2.5e-6)
    bad = tmp_path / "x.toml"
    bad.write_text("[tmax]\nobserved_ticks = 'soon'\n")
    with pytest.raises(InputError, match=r"\[tmax\] observed_ticks"):
        loaders.load_tmax(bad)
    bad.write_text("[tmax\n")
    with pytest.raises(InputError, match="not valid TOML"):
        loaders.load_tmax(bad)
    bad.write_text("[machine]\nslug = 'x'\n")
    with pytest.raises(InputError, match=r"missing \[tmax\]"):
        loaders.load_tmax(bad)


def test_bench_loads_and_parses_names(intel_data):
    bench = intel_data["bench"]
    assert bench.errors == [("latency/stop_the_world/executors:3", "more executors than PUs")]
    tp = [e for e in bench.group("throughput") if e.subject == "sync-core"]
    assert {e.params["rate"] for e in tp} == {0, 100, 1000, 10_000, 100_000}
    inv = {e.subject: e for e in bench.group("invoke")}
    assert inv["direct_call"].values["ns_per_call"] == pytest.approx(1.62)
    assert loaders.parse_bench_name("latency/callpatch_s3/executors:2") == \
        ("latency", "callpatch_s3", {"executors": 2.0})


def test_bench_prefers_median_of_repetitions(tmp_path):
    path = tmp_path / "bench-1.json"
    runs = [{"name": "invoke/direct_call", "run_name": "invoke/direct_call", "run_type": "iteration",
             "ns_per_call": v, "time_unit": "ns"} for v in (1.0, 2.0, 9.0)]
    runs.append({"name": "invoke/direct_call_median", "run_name": "invoke/direct_call",
                 "run_type": "aggregate", "aggregate_name": "median", "ns_per_call": 2.0})
    path.write_text(json.dumps({"context": {}, "benchmarks": runs}))
    (entry,) = loaders.load_bench(path).entries
    assert entry.values["ns_per_call"] == 2.0


def test_bench_malformed(tmp_path):
    path = tmp_path / "bench-1.json"
    path.write_text(json.dumps({"context": {}}))
    with pytest.raises(InputError, match="missing 'benchmarks'"):
        loaders.load_bench(path)
    path.write_text(json.dumps({"context": {"crossmod_schema_version": 3}, "benchmarks": []}))
    with pytest.raises(InputError, match="crossmod_schema_version"):
        loaders.load_bench(path)


def test_latency_csv(intel_data, tmp_path):
    samples = intel_data["latency"]
    assert ("callpatch_s0", 1) in samples and len(samples[("callpatch_s0", 1)]) == 100
    path = tmp_path / "bench-1-latency.csv"
    path.write_text("benchmark,op,executors\nx,y,1\n")
    with pytest.raises(InputError, match="missing column.*sample_ticks"):
        loaders.load_latency_csv(path)
    path.write_text("benchmark,op,executors,sample_ticks\nlatency/a/executors:1,a,1,12\n"
                    "latency/a/executors:1,a,1,1.5e3\n")
    with pytest.raises(InputError, match="line 3, column sample_ticks"):
        loaders.load_latency_csv(path)
    # Current format: one row per distinct value with its count, expanded on load.
    path.write_text("benchmark,op,executors,sample_ticks,count\n"
                    "latency/a/executors:1,a,1,78,3\nlatency/a/executors:1,a,1,104,1\n")
    assert loaders.load_latency_csv(path)[("a", 1)] == [78, 78, 78, 104]
    path.write_text("benchmark,op,executors,sample_ticks,count\nlatency/a/executors:1,a,1,78,0\n")
    with pytest.raises(InputError, match="line 2, column count"):
        loaders.load_latency_csv(path)


def test_newest_file_by_stamp(tmp_path):
    for stamp in ("20260101T000000Z", "20261121T045700Z", "20250505T000000Z"):
        (tmp_path / f"bench-{stamp}.json").write_text("{}")
        (tmp_path / f"bench-{stamp}-latency.csv").write_text("")
    assert loaders.newest(tmp_path, "bench").name == "bench-20261121T045700Z.json"
    assert loaders.newest(tmp_path, "latency").name == "bench-20261121T045700Z-latency.csv"
    assert loaders.newest(tmp_path, "sweep") is None
    # The bench summary written beside the Google Benchmark JSON is not a bench file.
    (tmp_path / "bench-20261121T045700Z-summary.json").write_text("{}")
    assert loaders.newest(tmp_path, "bench").name == "bench-20261121T045700Z.json"
    assert loaders.newest(tmp_path, "bench_summary").name == "bench-20261121T045700Z-summary.json"
    # Two runs in one second: the harness appends -2, -3, ...; -10 is newer than -9.
    for name in ("sweep-20261121T045700Z.csv", "sweep-20261121T045700Z-2.csv",
                 "sweep-20261121T045700Z-10.csv", "sweep-20261121T045700Z-9.csv"):
        (tmp_path / name).write_text("")
    assert [p.name for p in loaders.stamped_files(tmp_path, "sweep")] == [
        "sweep-20261121T045700Z.csv", "sweep-20261121T045700Z-2.csv",
        "sweep-20261121T045700Z-9.csv", "sweep-20261121T045700Z-10.csv"]


def test_tmax_from_calibrate_summary(tmp_path):
    path = tmp_path / "calibrate-1.json"
    data = {"kind": "crossmod-calibrate", "status": "ok",
            "tmax": {"observed_ticks": 1600, "observed_ns": 640.0, "recommended_ticks": 3200,
                     "recommended_ns": 1280.0, "tsc_hz": 2.5e9, "margin_rule": "2x"},
            "evidence": {"exposed_toggles_at_or_above": 120000}}
    cfg = loaders.tmax_from_calibrate(path, data)
    assert cfg.observed_ticks == 1600 and cfg.recommended_ticks == 3200 and cfg.path == path
    data["tmax"].update(observed_ticks=None, recommended_ticks=None)
    assert loaders.tmax_from_calibrate(path, data) is None
    data["tmax"]["observed_ticks"] = "soon"
    with pytest.raises(InputError, match="observed_ticks"):
        loaders.tmax_from_calibrate(path, data)


def test_merged_sweeps_name_every_source_file():
    from pathlib import Path
    from analysis import loaders
    a = loaders.Sweep(path=Path("sweep-1.csv"), rows=[{"outcome": "ok"}], context={}, context_path=None)
    b = loaders.Sweep(path=Path("sweep-2.csv"), rows=[{"outcome": "ok"}], context={}, context_path=None)
    assert a.source_label == "sweep-1.csv" and a.scope == "this sweep"
    m = loaders.merge_sweeps([a, b])
    assert len(m.rows) == 2
    assert m.source_label == "2 sweeps pooled: sweep-1.csv, sweep-2.csv"
    assert m.scope == "2 pooled sweeps"
