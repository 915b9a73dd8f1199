"""Tests of the crossmod profile loader, evaluation tables and plots on synthetic files
(no profiler needed): profile.json files written here with known numbers, a latency_lab
truth file, and a runs.csv as scripts/profile_eval.py writes it."""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
from pathlib import Path

import pytest

from analysis import profile as prof
from analysis import profile_cli
from analysis.loaders import InputError
from analysis.tests.conftest import assert_real_png

TRUTH = {"lab_a": 1000.0, "lab_b": 5000.0, "lab_c": 20000.0, "lab_rare": 50000.0}


def make_profile(policy: str, estimates: dict[str, tuple[float, float, float]], *, cpu_s: float = 2.0,
                 budget: float = 0.05, toggles_per_s: float = 1000.0, samples: int = 10,
                 oncpu: dict | None = None, switch_detection: str | None = None) -> dict:
    """estimates: name -> (mean, ci_low, ci_high); a name absent was not seen.
    oncpu (the fields added in session 2026-11-23 21:45; absent if None): name ->
    (oncpu_mean, lo, hi), or None for a function all of whose samples were switched;
    raw_mean_ticks is then mean + 100 and one sample per function was switched."""
    fns = []
    for i, (name, (mean, lo, hi)) in enumerate(sorted(estimates.items())):
        fns.append({"name": name, "object": "/x/latency_lab_cyg", "address": hex(0x401000 + 16 * i),
                    "provider": "cyg", "calls_observed": samples, "calls_estimated": 100.0 * samples,
                    "samples": samples, "mean_ticks": mean, "mean_ci_ticks": [lo, hi],
                    "p50_ticks": mean * 0.98, "p99_ticks": mean * 1.5, "share": 0.05 * (i + 1),
                    "hist": {"edges_ticks": [mean * 0.5, mean, mean * 1.5, mean * 2],
                             "counts": [2, samples - 3, 1]},
                    "converged": False})
        if oncpu is not None:
            o = oncpu.get(name)
            fns[-1].update({"raw_mean_ticks": mean + 100.0,
                            "switched_samples": 1 if o is not None else samples,
                            "oncpu_samples": samples - 1 if o is not None else 0,
                            "oncpu_mean_ticks": o[0] if o is not None else None,
                            "oncpu_mean_ci_ticks": [o[1], o[2]] if o is not None else None})
    run = {"wall_s": cpu_s / 2, "cpu_s": cpu_s, "user_s": cpu_s, "sys_s": 0.0, "tsc_hz": 2.5e9, "threads": 9}
    if switch_detection is not None:
        run["switch_detection"] = switch_detection
    return {
        "schema": 1, "tool": "crossmod profile", "command": ["latency_lab_cyg", "--threads", "8"],
        "policy": {"name": policy, "budget": budget, "period_s": 0.01, "samples": 10, "epoch_s": 0.01, "ci": 0.05},
        "exit": {"kind": "exit", "status": 0, "signal": None, "execs": 0},
        "run": run,
        "overhead": {"probes": 20, "functions": 10, "toggles": 500, "toggles_per_s": toggles_per_s,
                     "samples": 1000, "samples_per_s": 500.0, "instr_ticks": 1, "instr_share": 0.03,
                     "toggle_ticks": 1, "toggle_share": 0.001, "setup_share": 0.002},
        "timeline": [{"t_s": 0.01 * k, "instr_share": 0.04 + 0.001 * (k % 3), "budget": budget,
                      "active_probes": 10 - k % 4} for k in range(1, 30)],
        "functions": fns,
        "metrics": [], "notes": [],
    }


def write_truth(path: Path, scale: float = 1.0) -> None:
    fns = [{"name": n, "spin_ticks": int(m), "role": "", "calls": 1000, "mean_ticks": m * scale,
            "sd_ticks": 1.0, "preempted_calls": 0, "mean_unpreempted_ticks": m} for n, m in TRUTH.items()]
    fns.append({"name": "lab_tiny", "spin_ticks": 0, "role": "", "calls": 99, "mean_ticks": None,
                "sd_ticks": None, "preempted_calls": None, "mean_unpreempted_ticks": None})
    path.write_text(json.dumps({"schema": 1, "tool": "latency_lab", "threads": 8, "functions": fns}))


def write_runs(folder: Path, rows: list[dict]) -> Path:
    """runs.csv as scripts/profile_eval.py writes it; returns the folder."""
    with (folder / "runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=prof.RUN_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return folder


def exact(names=TRUTH, scale: float = 1.0) -> dict:
    return {n: (TRUTH[n] * scale, TRUTH[n] * scale * 0.95, TRUTH[n] * scale * 1.05) for n in names}


def around(n: str, factor: float, half: float = 0.05) -> tuple[float, float, float]:
    """An estimate of TRUTH[n] x factor with the interval factor +- half (relative to TRUTH[n])."""
    return TRUTH[n] * factor, TRUTH[n] * (factor - half), TRUTH[n] * (factor + half)


@pytest.fixture
def eval_folder(tmp_path) -> Path:
    """Two rounds of baseline/none/full/paper/budget 5%/budget 1% on one lab workload.
    CPU seconds: baseline 2.0 then 4.0 (a slower round), full 3x, budget 5% 1.04x, 1% 1.01x.
    budget 1% misses lab_rare and is 20% off on lab_c; paper is 20% off on lab_a."""
    folder = tmp_path / "results" / "amd-fam25-mod17-step1-1pkg" / "profile"
    folder.mkdir(parents=True)
    configs = [("baseline", None, 1.0, None), ("none", None, 1.002, exact()), ("full", None, 3.0, exact()),
               ("paper", None, 1.2, {**exact(), "lab_a": (1200.0, 1150.0, 1250.0)}),
               ("budget", 0.05, 1.04, exact()),
               ("budget", 0.01, 1.01, {**exact(["lab_a", "lab_b"]), "lab_c": (24000.0, 23000.0, 25000.0)})]
    rows = []
    order = 0
    for rnd, base_cpu in ((0, 2.0), (1, 4.0)):
        for policy, budget, factor, est in configs:
            label = policy if budget is None or budget == 0.05 else f"budget{100 * budget:g}"
            run_dir = f"raw/lab-cyg/{label}-r{rnd}"
            (folder / run_dir).mkdir(parents=True)
            truth = f"{run_dir}/truth.json"
            write_truth(folder / truth)
            profile = ""
            if est is not None:
                est = {n: v for n, v in est.items()} if policy != "none" else {}
                data = make_profile(policy, est, cpu_s=base_cpu * factor, budget=budget or 0.05)
                (folder / run_dir / "profile.json").write_text(json.dumps(data))
                profile = run_dir
            rows.append({"round": rnd, "order": order, "workload": "lab-cyg", "provider": "cyg",
                         "policy": policy, "budget": "" if budget is None else budget, "label": label, "rc": 0,
                         "cpu_s": base_cpu * factor, "wall_s": 1.0, "launcher_cpu_s": base_cpu * factor,
                         "profile": profile, "truth": truth, "note": ""})
            order += 1
    return write_runs(folder, rows)


def test_load_profile_fields(tmp_path):
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(make_profile("budget", exact())))
    got = prof.load_profile(tmp_path)          # a directory means DIR/profile.json
    assert got.policy_name == "budget" and got.tsc_hz == 2.5e9
    assert got.run["cpu_s"] == 2.0 and got.overhead["probes"] == 20
    assert {f.name for f in got.functions} == set(TRUTH)
    a = got.by_name()["lab_a"]
    assert a.mean_ci_ticks == (950.0, 1050.0) and a.hist_counts == [2, 7, 1] and len(a.hist_edges) == 4
    assert got.seen() == set(TRUTH)


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema=2), "schema 2"),
    (lambda d: d.pop("run"), "missing key 'run'"),
    (lambda d: d["run"].pop("cpu_s"), "missing key 'cpu_s'"),
    (lambda d: d["functions"][0].update(mean_ci_ticks=[1.0]), "mean_ci_ticks"),
    (lambda d: d["functions"][0].update(samples="many"), "samples: expected a number"),
    (lambda d: d["functions"][0]["hist"].update(counts=[1]), "edges for 1 counts"),
])
def test_load_profile_rejects_malformed(tmp_path, mutate, message):
    data = make_profile("full", exact())
    mutate(data)
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        prof.load_profile(p)


def test_load_profile_not_json(tmp_path):
    p = tmp_path / "profile.json"
    p.write_text("{ nope")
    with pytest.raises(InputError, match="not JSON"):
        prof.load_profile(p)


def test_load_truth(tmp_path):
    write_truth(tmp_path / "t.json")
    t = prof.load_truth(tmp_path / "t.json")
    assert t["lab_b"].mean_ticks == 5000.0 and t["lab_tiny"].mean_ticks is None and t["lab_tiny"].calls == 99
    (tmp_path / "bad.json").write_text(json.dumps({"schema": 1, "tool": "other"}))
    with pytest.raises(InputError, match="not a latency_lab truth file"):
        prof.load_truth(tmp_path / "bad.json")


def test_table3_paired_slowdown(eval_folder):
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    t3 = {r["config"]: r for r in prof.table3(rows)}
    assert list(t3) == ["baseline", "none", "full", "paper", "budget", "budget1"]
    assert t3["baseline"]["slowdown_median"] == 1.0 and t3["baseline"]["cpu_s_median"] == 3.0
    # Paired per round: the 2 s and 4 s rounds both give exactly 3x.
    assert t3["full"]["slowdown_median"] == pytest.approx(3.0)
    assert t3["full"]["slowdown_min"] == pytest.approx(3.0) and t3["full"]["slowdown_max"] == pytest.approx(3.0)
    assert t3["budget"]["slowdown_median"] == pytest.approx(1.04)
    assert t3["budget"]["toggles_per_s"] == 1000.0 and t3["budget"]["probes"] == 20
    assert t3["baseline"]["probes"] is None
    # Against `none` of the same round (1.002x the baseline): what a policy adds to start-up.
    assert t3["none"]["vs_none_median"] == 1.0 and t3["baseline"]["vs_none_median"] is None
    assert t3["full"]["vs_none_median"] == pytest.approx(3.0 / 1.002)
    assert t3["budget"]["vs_none_median"] == pytest.approx(1.04 / 1.002)
    md = prof.table3_markdown(prof.table3(rows))
    assert "| lab-cyg | cyg | full | 2 | 9.000 | 3.000x (3.000..3.000) | - | 2.994x |" in md
    assert "| lab-cyg | cyg | none | 2 | 3.006 | 1.002x (1.002..1.002) | - | 1 (reference) |" in md
    assert "| lab-cyg | cyg | baseline | 2 | 3.000 | 1 (reference) | - | - |" in md
    # The runtime's set-up share beside the daemon's; "-" where no profile has one (baseline).
    assert t3["budget"]["setup_share"] == pytest.approx(0.002) and t3["baseline"]["setup_share"] is None
    assert "| 3.00% | 0.100% | - | 0.20% | 1,000 |" in md


def test_slowdown_skips_failed_runs(eval_folder):
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    for r in rows:
        if r["policy"] == "full" and r["round"] == 1:
            r["rc"] = 139
    t3 = {r["config"]: r for r in prof.table3(rows)}
    assert t3["full"]["failed_runs"] == 1 and t3["full"]["runs"] == 2
    assert t3["full"]["slowdown_min"] == t3["full"]["slowdown_max"] == pytest.approx(3.0)


def test_accuracy_flags(eval_folder):
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    acc = prof.accuracy(rows)
    paper_a = [a for a in acc if a["config"] == "paper" and a["function"] == "lab_a"]
    assert len(paper_a) == 2
    assert all(a["within_10pct"] is False and a["covered"] is False for a in paper_a)
    full_b = [a for a in acc if a["config"] == "full" and a["function"] == "lab_b"]
    assert all(a["within_10pct"] and a["covered"] for a in full_b)
    rare = [a for a in acc if a["config"] == "budget1" and a["function"] == "lab_rare"]
    assert all(a["est_mean_ticks"] is None and a["samples"] == 0 and a["covered"] is None for a in rare)
    tiny = [a for a in acc if a["function"] == "lab_tiny"]
    assert tiny and all(a["within_10pct"] is None for a in tiny)
    summary = {(s["config"]): s for s in prof.summarize_accuracy(acc)}
    assert summary["full"]["within_10pct"] == 8 and summary["paper"]["within_10pct"] == 6
    assert summary["budget1"]["estimated"] == 6 and summary["budget1"]["within_10pct"] == 4


def test_information_kept(eval_folder):
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    info = {(i["config"], i["round"]): i for i in prof.information(rows)}
    assert info[("full", 0)]["kept"] == 1.0
    b1 = info[("budget1", 0)]
    # budget 1%: 3 of 4 functions seen, 2 of 4 estimates within 10%: (3 + 2) / (4 + 4).
    assert (b1["seen"], b1["seen_full"], b1["accurate"], b1["accurate_full"]) == (3, 4, 2, 4)
    assert b1["kept"] == pytest.approx(5 / 8) and b1["basis"] == "truth"
    # p50 is 0.98 x mean in the synthetic profiles: within 10% wherever the mean is.
    assert (b1["p50_accurate"], b1["p50_accurate_full"]) == (2, 4) and b1["kept_p50"] == pytest.approx(5 / 8)
    assert info[("none", 0)]["kept"] == 0.0
    assert ("baseline", 0) not in info


def test_information_without_truth_uses_full(eval_folder):
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    for r in rows:
        r["_truth"] = None
    info = {(i["config"], i["round"]): i for i in prof.information(rows)}
    assert info[("paper", 0)]["basis"] == "full"
    assert info[("paper", 0)]["accurate"] == 3 and info[("paper", 0)]["kept"] == pytest.approx(7 / 8)


def test_dime_curve_sorted_by_budget(eval_folder):
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    dime = prof.dime_curve(rows)
    assert [d["config"] for d in dime] == ["budget1", "budget", "full"]
    assert dime[0]["slowdown_median"] == pytest.approx(1.01) and dime[0]["kept_median"] == pytest.approx(5 / 8)
    assert dime[1]["kept_median"] == 1.0 and dime[2]["budget"] == 1.0


def test_cli_eval_folder_writes_tables_and_plots(eval_folder):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = profile_cli.main([str(eval_folder), "--no-svg"])
    assert rc == 0
    for name in ("table3.csv", "table3.md", "accuracy.csv", "information.csv", "dime_curve.csv"):
        assert (eval_folder / name).is_file(), name
    with (eval_folder / "dime_curve.csv").open() as fh:
        assert [r["config"] for r in csv.DictReader(fh)] == ["budget1", "budget", "full"]
    assert_real_png(eval_folder / "plots" / "profile_dime_curve.png")
    run_plots = eval_folder / "plots" / "lab-cyg-budget-r0"
    for name in ("profile_top_functions", "profile_latency_distributions", "profile_overhead_timeline"):
        assert_real_png(run_plots / f"{name}.png")
    assert not (eval_folder / "plots" / "lab-cyg-budget-r1").exists()   # round 0 only by default


def test_cli_single_profile_and_bad_input(tmp_path, capsys):
    d = tmp_path / "run"
    d.mkdir()
    (d / "profile.json").write_text(json.dumps(make_profile("paper", exact())))
    assert profile_cli.main([str(d), "--no-svg"]) == 0
    assert_real_png(d / "plots" / "profile_top_functions.png")
    (d / "profile.json").write_text(json.dumps({"schema": 7}))
    assert profile_cli.main([str(d)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "schema 7" in err
    assert profile_cli.main([str(tmp_path / "missing")]) == 2


def test_timeline_plot_skips_without_timeline(tmp_path, capsys):
    data = make_profile("full", exact())
    data["timeline"] = []
    (tmp_path / "profile.json").write_text(json.dumps(data))
    assert profile_cli.main([str(tmp_path), "--no-svg"]) == 0
    assert not (tmp_path / "plots" / "profile_overhead_timeline.png").exists()
    assert "no timeline" in capsys.readouterr().err


def test_main_cli_includes_profile_folder(eval_folder):
    from analysis import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main([str(eval_folder.parent), "--no-svg"])
    assert rc == 0 and "profile evaluation" in out.getvalue()
    assert not (eval_folder / "table3.csv").exists()     # this CLI writes only plot directories
    assert_real_png(eval_folder.parent / "plots" / "profile" / "profile_dime_curve.png")


def test_load_profile_gzipped(tmp_path):
    import gzip
    (tmp_path / "profile.json.gz").write_bytes(gzip.compress(json.dumps(make_profile("paper", exact())).encode()))
    assert prof.load_profile(tmp_path).policy_name == "paper"
    (tmp_path / "profile.json.gz").write_bytes(b"not gzip")
    with pytest.raises(InputError, match="not readable as gzip JSON"):
        prof.load_profile(tmp_path)



# ---------------------------------------------------------------------------- on-CPU fields

def test_load_profile_oncpu_fields(tmp_path):
    data = make_profile("budget", exact(), oncpu={**exact(["lab_a", "lab_b", "lab_c"]), "lab_rare": None},
                        switch_detection="perf")
    (tmp_path / "profile.json").write_text(json.dumps(data))
    got = prof.load_profile(tmp_path)
    assert got.switch_detection == "perf" and got.has_oncpu
    a = got.by_name()["lab_a"]
    assert (a.raw_mean_ticks, a.switched_samples, a.oncpu_samples) == (1100.0, 1, 9)
    assert a.oncpu_mean_ticks == 1000.0 and a.oncpu_mean_ci_ticks == (950.0, 1050.0)
    rare = got.by_name()["lab_rare"]
    assert rare.oncpu_mean_ticks is None and rare.oncpu_mean_ci_ticks is None and rare.oncpu_samples == 0


def test_load_profile_without_oncpu_fields_still_loads(tmp_path):
    (tmp_path / "profile.json").write_text(json.dumps(make_profile("budget", exact())))
    got = prof.load_profile(tmp_path)
    a = got.by_name()["lab_a"]
    assert (a.raw_mean_ticks, a.switched_samples, a.oncpu_samples, a.oncpu_mean_ticks, a.oncpu_mean_ci_ticks) \
        == (None, None, None, None, None)
    assert got.switch_detection is None and not got.has_oncpu
    # Detection unavailable: the fields are null, and the profile has no on-CPU estimates.
    data = make_profile("budget", exact(), oncpu={}, switch_detection="unavailable: perf_event_open: EACCES")
    (tmp_path / "profile.json").write_text(json.dumps(data))
    got = prof.load_profile(tmp_path)
    assert not got.has_oncpu and got.by_name()["lab_a"].switched_samples == 10
    # No switch_detection key (a file in between), but on-CPU means present.
    data = make_profile("budget", exact(), oncpu=exact())
    (tmp_path / "profile.json").write_text(json.dumps(data))
    assert prof.load_profile(tmp_path).has_oncpu


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["functions"][0].update(raw_mean_ticks="slow"), "raw_mean_ticks: expected a number or null"),
    (lambda d: d["functions"][0].update(switched_samples="3"), "switched_samples: expected a count"),
    (lambda d: d["functions"][0].update(switched_samples=1.5), "switched_samples: expected a count"),
    (lambda d: d["functions"][0].update(oncpu_samples=-1), "oncpu_samples: expected a count"),
    (lambda d: d["functions"][0].update(oncpu_mean_ticks=[1.0]), "oncpu_mean_ticks: expected a number or null"),
    (lambda d: d["functions"][0].update(oncpu_mean_ci_ticks=[1.0]), r"oncpu_mean_ci_ticks: expected \[low, high\]"),
    (lambda d: d["functions"][0].update(oncpu_mean_ci_ticks={"lo": 1}), "oncpu_mean_ci_ticks: expected"),
    (lambda d: d["functions"][0].update(oncpu_mean_ci_ticks=[2.0, 1.0]), "low 2.0 above high 1.0"),
    (lambda d: d["run"].update(switch_detection=1), "run.switch_detection: expected a string or null"),
])
def test_load_profile_rejects_malformed_oncpu(tmp_path, mutate, message):
    data = make_profile("full", exact(), oncpu=exact(), switch_detection="perf")
    mutate(data)
    p = tmp_path / "profile.json"
    p.write_text(json.dumps(data))
    with pytest.raises(InputError, match=message):
        prof.load_profile(p)


PREEMPT = 3.0   # the true mean of all calls is 3x the true mean of unpreempted calls

# config -> (means, on-CPU means or None for a profile without the fields)
ONCPU_RUNS = {
    # full: its means include the preempted calls (3x); its on-CPU mean of lab_c is 20% off.
    "full": (exact(scale=PREEMPT), {**exact(), "lab_c": around("lab_c", 1.2)}),
    # budget: means miss the tail (1x); on-CPU lab_b 8% off with an interval that misses.
    "budget": (exact(), {**exact(), "lab_a": around("lab_a", 1.02), "lab_b": around("lab_b", 1.08, 0.03)}),
    # paper: on-CPU lab_a 30% off, lab_rare all samples switched.
    "paper": (exact(), {**exact(), "lab_a": around("lab_a", 1.3), "lab_rare": None}),
    # budget1: an older profiler, no on-CPU fields.
    "budget1": (exact(), None),
    "none": ({}, {}),
}


@pytest.fixture
def oncpu_folder(tmp_path) -> Path:
    """One round of baseline/none/full/paper/budget/budget1 on lab-cyg, truth with
    preempted calls (true mean 3x the unpreempted one), profiles as in ONCPU_RUNS."""
    folder = tmp_path / "results" / "m" / "profile"
    folder.mkdir(parents=True)
    rows = []
    for order, label in enumerate(["baseline", "none", "full", "paper", "budget", "budget1"]):
        policy = "budget" if label.startswith("budget") else label
        budget = {"budget": 0.05, "budget1": 0.01}.get(label)
        run_dir = f"raw/lab-cyg/{label}-r0"
        (folder / run_dir).mkdir(parents=True)
        write_truth(folder / run_dir / "truth.json", scale=PREEMPT)
        profile = ""
        if label != "baseline":
            means, oncpu = ONCPU_RUNS[label]
            data = make_profile(policy, means, cpu_s=2.0 * (1 + order / 10), budget=budget or 0.05, oncpu=oncpu,
                                switch_detection=None if oncpu is None else "perf")
            (folder / run_dir / "profile.json").write_text(json.dumps(data))
            profile = run_dir
        rows.append({"round": 0, "order": order, "workload": "lab-cyg", "provider": "cyg", "policy": policy,
                     "budget": "" if budget is None else budget, "label": label, "rc": 0,
                     "cpu_s": 2.0 * (1 + order / 10), "wall_s": 1.0, "launcher_cpu_s": 2.0,
                     "profile": profile, "truth": f"{run_dir}/truth.json", "note": ""})
    return write_runs(folder, rows)


def test_accuracy_oncpu_columns(oncpu_folder):
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    acc = {(a["config"], a["function"]): a for a in prof.accuracy(rows)}
    a = acc[("budget", "lab_a")]
    assert a["est_oncpu_mean_ticks"] == pytest.approx(1020.0) and a["est_raw_mean_ticks"] == pytest.approx(1100.0)
    assert (a["oncpu_ci_lo"], a["oncpu_ci_hi"]) == (pytest.approx(970.0), pytest.approx(1070.0))
    assert a["oncpu_covers_unpreempted"] is True and a["oncpu_within_10pct_unpreempted"] is True
    assert (a["switched_samples"], a["oncpu_samples"]) == (1, 9)
    # The old columns still compare the mean with the true mean of all calls: missed (1x vs 3x).
    assert a["covered"] is False and a["within_10pct"] is False and a["within_10pct_unpreempted"] is True
    # 8% off, its interval [1.05, 1.11] x truth misses the truth: within 10% but not covered.
    b = acc[("budget", "lab_b")]
    assert b["oncpu_covers_unpreempted"] is False and b["oncpu_within_10pct_unpreempted"] is True
    assert acc[("paper", "lab_a")]["oncpu_covers_unpreempted"] is False
    assert acc[("paper", "lab_a")]["oncpu_within_10pct_unpreempted"] is False
    rare = acc[("paper", "lab_rare")]
    assert rare["est_oncpu_mean_ticks"] is None and rare["oncpu_samples"] == 0 and rare["switched_samples"] == 10
    assert rare["oncpu_covers_unpreempted"] is None and rare["oncpu_within_10pct_unpreempted"] is None
    c = acc[("full", "lab_c")]
    assert c["covered"] is True and c["oncpu_covers_unpreempted"] is False and c["oncpu_within_10pct_unpreempted"] is False
    old = acc[("budget1", "lab_a")]
    assert all(old[k] is None for k in ("est_raw_mean_ticks", "switched_samples", "oncpu_samples",
                                        "est_oncpu_mean_ticks", "oncpu_ci_lo", "oncpu_ci_hi",
                                        "oncpu_covers_unpreempted", "oncpu_within_10pct_unpreempted"))
    tiny = acc[("budget", "lab_tiny")]
    assert tiny["oncpu_covers_unpreempted"] is None
    summary = {s["config"]: s for s in prof.summarize_accuracy(prof.accuracy(rows))}
    got = {c: (s["oncpu_estimated"], s["oncpu_with_ci"], s["oncpu_covers_unpreempted"],
               s["oncpu_within_10pct_unpreempted"]) for c, s in summary.items()}
    assert got == {"full": (4, 4, 3, 3), "budget": (4, 4, 3, 4), "paper": (3, 3, 2, 2), "budget1": (0, 0, 0, 0),
                   "none": (0, 0, 0, 0)}
    assert summary["full"]["covered"] == 4 and summary["budget"]["covered"] == 0


def test_information_kept_oncpu_against_truth(oncpu_folder):
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    info = {i["config"]: i for i in prof.information(rows)}
    # full: 4 seen, 3 on-CPU means within 10% of the unpreempted truth (lab_c is 20% off).
    assert (info["full"]["oncpu_accurate"], info["full"]["oncpu_accurate_full"]) == (3, 3)
    assert info["full"]["kept_oncpu"] == 1.0
    # budget: 4 seen + 4 within 10% over full's 4 + 3: better than full.
    assert info["budget"]["oncpu_accurate"] == 4 and info["budget"]["kept_oncpu"] == pytest.approx(8 / 7)
    # paper: lab_a 30% off, lab_rare without an on-CPU mean: (4 + 2) / (4 + 3).
    assert info["paper"]["kept_oncpu"] == pytest.approx(6 / 7)
    # The mean-based measure is unchanged: budget's means miss every 3x true mean.
    assert info["budget"]["kept"] == pytest.approx(4 / 8)
    # none: detection on, nothing seen or estimated.
    assert info["none"]["kept_oncpu"] == 0.0
    # An older profile: no on-CPU information, None rather than 0.
    assert info["budget1"]["kept_oncpu"] is None and info["budget1"]["oncpu_accurate"] is None
    assert info["budget1"]["kept"] is not None


def test_information_kept_oncpu_against_full(oncpu_folder):
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    for r in rows:
        r["_truth"] = None
    info = {i["config"]: i for i in prof.information(rows)}
    assert info["budget"]["basis"] == "full"
    # Against full's on-CPU means: budget's lab_c (1.0x) is 17% below full's 1.2x: (4 + 3) / (4 + 4).
    assert (info["budget"]["oncpu_accurate"], info["budget"]["oncpu_accurate_full"]) == (3, 4)
    assert info["budget"]["kept_oncpu"] == pytest.approx(7 / 8)
    # paper: lab_a, lab_c off, lab_rare missing: (4 + 1) / (4 + 4).
    assert info["paper"]["kept_oncpu"] == pytest.approx(5 / 8)
    assert info["budget1"]["kept_oncpu"] is None


def test_information_kept_oncpu_none_when_full_lacks_fields(oncpu_folder):
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    full = next(r for r in rows if r["label"] == "full")
    full["_profile"] = prof.load_profile(next(r for r in rows if r["label"] == "budget1")["_profile"].path)
    info = {i["config"]: i for i in prof.information(rows)}
    assert info["budget"]["kept_oncpu"] is None and info["budget"]["kept"] is not None


def test_dime_curve_kept_oncpu(oncpu_folder):
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    dime = {d["config"]: d for d in prof.dime_curve(rows)}
    assert dime["budget"]["kept_oncpu_median"] == pytest.approx(8 / 7)
    assert dime["full"]["kept_oncpu_median"] == 1.0
    assert dime["budget1"]["kept_oncpu_median"] is None


def test_cli_writes_oncpu_columns_and_panel(oncpu_folder):
    with contextlib.redirect_stdout(io.StringIO()):
        assert profile_cli.main([str(oncpu_folder), "--no-svg"]) == 0
    with (oncpu_folder / "accuracy.csv").open() as fh:
        acc = list(csv.DictReader(fh))
    for col in ("est_raw_mean_ticks", "est_oncpu_mean_ticks", "oncpu_ci_lo", "oncpu_ci_hi",
                "oncpu_covers_unpreempted", "oncpu_within_10pct_unpreempted"):
        assert col in acc[0], col
    b = next(a for a in acc if a["config"] == "budget" and a["function"] == "lab_b")
    assert (b["oncpu_covers_unpreempted"], b["oncpu_within_10pct_unpreempted"]) == ("0", "1")
    old = next(a for a in acc if a["config"] == "budget1" and a["function"] == "lab_b")
    assert old["est_oncpu_mean_ticks"] == "" and old["oncpu_covers_unpreempted"] == ""
    with (oncpu_folder / "accuracy_summary.csv").open() as fh:
        summary = {r["config"]: r for r in csv.DictReader(fh)}
    assert summary["budget"]["oncpu_covers_unpreempted"] == "3"
    with (oncpu_folder / "dime_curve.csv").open() as fh:
        dime = {r["config"]: r for r in csv.DictReader(fh)}
    assert float(dime["budget"]["kept_oncpu_median"]) == pytest.approx(8 / 7, rel=1e-5) and dime["budget1"]["kept_oncpu_median"] == ""
    assert_real_png(oncpu_folder / "plots" / "profile_dime_curve.png")
    assert_real_png(oncpu_folder / "plots" / "lab-cyg-budget-r0" / "profile_latency_distributions.png")


def test_information_full_basis_skips_references_at_or_below_zero(eval_folder):
    # A compensated mean can be ~0 or below for an empty function: no 10% band around it,
    # so it leaves full's accurate set instead of counting as unreachable.
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    for r in rows:
        r["_truth"] = None
    full0 = next(r for r in rows if r["label"] == "full" and r["round"] == 0)["_profile"]
    full0.by_name()["lab_b"].mean_ticks = -3.0
    info = {(i["config"], i["round"]): i for i in prof.information(rows)}
    paper = info[("paper", 0)]
    assert (paper["accurate"], paper["accurate_full"]) == (2, 3) and paper["kept"] == pytest.approx(6 / 7)
    assert info[("full", 0)]["kept"] == 1.0
    assert info[("paper", 1)]["accurate_full"] == 4


def test_call_truth_adds_the_baseline_runs_overhead(oncpu_folder):
    """With call_overhead_ticks in the uninstrumented run's truth, on-CPU estimates are judged
    against unpreempted + overhead (a whole call); a profiled run's own value is ignored."""
    base = oncpu_folder / "raw/lab-cyg/baseline-r0/truth.json"
    data = json.loads(base.read_text())
    data["call_overhead_ticks"] = 0.10 * TRUTH["lab_a"]   # lab_a's whole call: 1.10x its spin
    base.write_text(json.dumps(data))
    budget = oncpu_folder / "raw/lab-cyg/budget-r0/truth.json"
    data = json.loads(budget.read_text())
    data["call_overhead_ticks"] = 1e9   # measured under probes: must not be used
    budget.write_text(json.dumps(data))
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    acc = {(a["config"], a["function"]): a for a in prof.accuracy(rows)}
    a = acc[("budget", "lab_a")]   # estimate 1.02x [0.97, 1.07]x of the spin
    assert a["true_call_ticks"] == pytest.approx(1.10 * TRUTH["lab_a"])
    assert a["oncpu_covers_call"] is False and a["oncpu_within_10pct_call"] is True
    assert a["oncpu_covers_unpreempted"] is True   # the spin-only columns are unchanged
    assert acc[("budget", "lab_tiny")]["true_call_ticks"] is None
    summary = {s["config"]: s for s in prof.summarize_accuracy(prof.accuracy(rows))}
    assert summary["budget"]["oncpu_within_10pct_call"] >= 1
    info = {i["config"]: i for i in prof.information(rows)}
    # paper's lab_a (1.3x of the spin) is 18% over the whole call: still not accurate.
    assert info["paper"]["oncpu_accurate"] <= 2
    assert prof.baseline_overheads(rows) == {("lab-cyg", 0): pytest.approx(0.10 * TRUTH["lab_a"])}


def test_information_full_next_is_the_noise_floor_without_truth(eval_folder):
    """Without a truth file, round r+1's full is judged against round r's full ('full-next');
    with a truth file no such row is made."""
    rows = prof.attach(prof.load_runs(eval_folder / "runs.csv"), eval_folder)
    assert not any(i["config"] == "full-next" for i in prof.information(rows))
    for r in rows:
        r["_truth"] = None
    info = [i for i in prof.information(rows) if i["config"] == "full-next"]
    assert [i["round"] for i in info] == [0]   # two rounds: one pair
    assert info[0]["basis"] == "full" and info[0]["kept_seen"] == 1.0


def test_call_truth_counts_nested_calls_and_stalls(oncpu_folder):
    """A truth function with nested_calls adds one overhead per nested call; its stall ticks
    give the busy truth, and the range between the two is what a sample can show."""
    base = oncpu_folder / "raw/lab-cyg/baseline-r0/truth.json"
    data = json.loads(base.read_text())
    data["call_overhead_ticks"] = 0.01 * TRUTH["lab_a"]
    base.write_text(json.dumps(data))
    budget = oncpu_folder / "raw/lab-cyg/budget-r0/truth.json"
    data = json.loads(budget.read_text())
    for f in data["functions"]:
        if f["name"] == "lab_a":
            f["nested_calls"] = 2
            f["oncpu_stall_ticks_per_call"] = 0.10 * TRUTH["lab_a"]
    budget.write_text(json.dumps(data))
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    acc = {(a["config"], a["function"]): a for a in prof.accuracy(rows)}
    a = acc[("budget", "lab_a")]   # estimate 1.02x [0.97, 1.07]x of the spin
    assert a["true_call_ticks"] == pytest.approx(1.03 * TRUTH["lab_a"])
    assert a["true_busy_call_ticks"] == pytest.approx(0.93 * TRUTH["lab_a"])
    assert a["oncpu_covers_call"] is True and a["oncpu_covers_busy_call"] is False
    assert a["oncpu_meets_busy_to_call"] is True
    other = acc[("budget", "lab_b")]   # no stall field: the busy columns stay empty
    assert other["true_busy_call_ticks"] is None and other["oncpu_meets_busy_to_call"] is None
    summary = {s["config"]: s for s in prof.summarize_accuracy(prof.accuracy(rows))}
    assert summary["budget"]["oncpu_meets_busy_to_call"] >= 1


def test_call_truth_takes_the_nested_calls_cost_from_the_baseline_run(oncpu_folder):
    """With oncpu_nested_cost_ticks in the uninstrumented run's truth, a function with nested
    calls is its spin + one fixed cost + that measured cost (not nested_calls fixed costs);
    the profiled run's own value (with probes on the nested calls) is not used."""
    for run, cost in (("baseline-r0", 0.05), ("budget-r0", 9.0)):
        path = oncpu_folder / f"raw/lab-cyg/{run}/truth.json"
        data = json.loads(path.read_text())
        data["call_overhead_ticks"] = 0.01 * TRUTH["lab_a"]
        for f in data["functions"]:
            if f["name"] == "lab_a":
                f["nested_calls"] = 2
                f["oncpu_nested_cost_ticks"] = cost * TRUTH["lab_a"]
        path.write_text(json.dumps(data))
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    assert prof.baseline_nested_costs(rows) == {("lab-cyg", 0): {"lab_a": pytest.approx(0.05 * TRUTH["lab_a"])}}
    acc = {(a["config"], a["function"]): a for a in prof.accuracy(rows)}
    a = acc[("budget", "lab_a")]   # estimate 1.02x [0.97, 1.07]x of the spin
    assert a["true_call_ticks"] == pytest.approx(1.06 * TRUTH["lab_a"])
    assert a["oncpu_covers_call"] is True
    assert acc[("budget", "lab_b")]["true_call_ticks"] == pytest.approx(TRUTH["lab_b"] + 0.01 * TRUTH["lab_a"])


def test_call_truth_takes_each_functions_own_cost_from_the_baseline_run(oncpu_folder):
    """With oncpu_call_cost_ticks in the uninstrumented run's truth, a function's whole call
    is its spin + that cost instead of the hot call_overhead_ticks; a function without it
    keeps the hot one, and the profiled run's own value (probes in it) is not used."""
    for run, cost in (("baseline-r0", 0.04), ("budget-r0", 9.0)):
        path = oncpu_folder / f"raw/lab-cyg/{run}/truth.json"
        data = json.loads(path.read_text())
        data["call_overhead_ticks"] = 0.01 * TRUTH["lab_a"]
        for f in data["functions"]:
            if f["name"] == "lab_a":
                f["oncpu_call_cost_ticks"] = cost * TRUTH["lab_a"]
        path.write_text(json.dumps(data))
    rows = prof.attach(prof.load_runs(oncpu_folder / "runs.csv"), oncpu_folder)
    assert prof.baseline_call_costs(rows) == {("lab-cyg", 0): {"lab_a": pytest.approx(0.04 * TRUTH["lab_a"])}}
    acc = {(a["config"], a["function"]): a for a in prof.accuracy(rows)}
    assert acc[("budget", "lab_a")]["true_call_ticks"] == pytest.approx(1.04 * TRUTH["lab_a"])
    assert acc[("budget", "lab_b")]["true_call_ticks"] == pytest.approx(TRUTH["lab_b"] + 0.01 * TRUTH["lab_a"])


def test_median_ci_takes_the_binomial_order_statistics():
    xs = [float(i) for i in range(1, 22)]   # 21 rounds: P(B(21,1/2) <= 5) = 0.013 <= 0.025 < P(<= 6)
    assert prof.median_ci(xs) == (6.0, 16.0)
    assert prof.median_ci([5.0, 1.0, 3.0, 7.0, 2.0, 6.0, 4.0]) == (1.0, 7.0)   # 7: min..max (98.4%)
    assert prof.median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None   # 5 rounds: no 95% interval exists
    assert prof.median_ci([]) is None


def test_median_ci_covers_the_median_in_simulation():
    """Coverage on skewed, heavy-tailed draws like the slowdown ratios (lognormal, and a
    mixture with a 20% slow mode): at least 95% for the round counts the evaluation uses."""
    import random
    rng = random.Random(12)
    dists = {
        "lognormal": (lambda: math.exp(rng.gauss(0.0, 0.15)), 1.0),
        # 80% ~N(1, 0.03), 20% ~N(1.3, 0.05): the median solves 0.8 F1 + 0.2 F2 = 1/2
        "bimodal": (lambda: rng.gauss(1.0, 0.03) if rng.random() < 0.8 else rng.gauss(1.3, 0.05), None),
    }
    # The mixture's median, from a large sample (its error, ~0.001, is far below the intervals' width).
    big = sorted(dists["bimodal"][0]() for _ in range(200_001))
    dists["bimodal"] = (dists["bimodal"][0], big[100_000])
    for name, (draw, true_median) in dists.items():
        for n in (7, 21):
            reps, hit = 3000, 0
            for _ in range(reps):
                lo, hi = prof.median_ci([draw() for _ in range(n)])
                hit += lo <= true_median <= hi
            assert hit / reps >= 0.95, (name, n, hit / reps)


# ---------------------------------------------------------------------------- systematic term

def test_bound_widens_the_interval_by_the_systematic_term(tmp_path):
    # lab_a: estimate 1020 +- 10 misses the truth 1000; the systematic term 25 reaches it.
    # lab_b: estimate 5400 +- 50 misses 5000 even with its term 100.
    data = make_profile("paper", {"lab_a": (1020.0, 1010.0, 1030.0), "lab_b": (5400.0, 5350.0, 5450.0)},
                        oncpu={"lab_a": (1020.0, 1010.0, 1030.0), "lab_b": (5400.0, 5350.0, 5450.0)},
                        switch_detection="perf")
    for f, sys in zip(data["functions"], (25.0, 100.0)):
        lo, hi = f["mean_ci_ticks"]
        f.update(mean_sys_ticks=sys, mean_bound_ticks=[lo - sys, hi + sys],
                 oncpu_mean_bound_ticks=[lo - sys, hi + sys])
    (tmp_path / "profile.json").write_text(json.dumps(data))
    p = prof.load_profile(tmp_path)
    a = p.by_name()["lab_a"]
    assert a.mean_sys_ticks == 25.0 and a.mean_bound_ticks == (985.0, 1055.0)
    truth = {n: prof.TruthFn(name=n, calls=10, mean_ticks=m, mean_unpreempted_ticks=m, spin_ticks=int(m) - 20,
                             call_overhead_ticks=20.0)
             for n, m in (("lab_a", 1000.0), ("lab_b", 5000.0))}
    rows = [{"workload": "lab-cyg", "round": 0, "policy": "baseline", "label": "baseline", "_profile": None,
             "_truth": truth},
            {"workload": "lab-cyg", "round": 0, "policy": "paper", "label": "paper", "_profile": p, "_truth": truth}]
    acc = {a["function"]: a for a in prof.accuracy(rows)}
    assert acc["lab_a"]["covered"] is False and acc["lab_a"]["bound_covered"] is True
    assert acc["lab_a"]["oncpu_bound_covers_call"] is True and acc["lab_a"]["sys_ticks"] == 25.0
    assert acc["lab_b"]["covered"] is False and acc["lab_b"]["bound_covered"] is False
    s = prof.summarize_accuracy(list(acc.values()))[0]
    assert (s["covered"], s["bound_covered"], s["oncpu_bound_covers_call"]) == (0, 1, 1)
    # Older files have none of the three: None, not False.
    data2 = make_profile("paper", {"lab_a": (1020.0, 1010.0, 1030.0)})
    (tmp_path / "profile.json").write_text(json.dumps(data2))
    old = prof.load_profile(tmp_path).by_name()["lab_a"]
    assert (old.mean_sys_ticks, old.mean_bound_ticks, old.oncpu_mean_bound_ticks) == (None, None, None)
    data2["functions"][0]["mean_bound_ticks"] = [2.0, 1.0]
    (tmp_path / "profile.json").write_text(json.dumps(data2))
    with pytest.raises(InputError, match="low 2.0 above high 1.0"):
        prof.load_profile(tmp_path)
