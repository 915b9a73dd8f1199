"""Tests of the crossmod profile loader, evaluation tables and plots on synthetic files
(no profiler needed): profile.json files written here with known numbers, a latency_lab
truth file, and a runs.csv as scripts/profile_eval.py writes it."""
from __future__ import annotations

import contextlib
import csv
import io
import json
from pathlib import Path

import pytest

from analysis import profile as prof
from analysis import profile_cli
from analysis.loaders import InputError
from analysis.tests.conftest import assert_real_png

TRUTH = {"lab_a": 1000.0, "lab_b": 5000.0, "lab_c": 20000.0, "lab_rare": 50000.0}


def make_profile(policy: str, estimates: dict[str, tuple[float, float, float]], *, cpu_s: float = 2.0,
                 budget: float = 0.05, toggles_per_s: float = 1000.0, samples: int = 10) -> dict:
    """estimates: name -> (mean, ci_low, ci_high); a name absent was not seen."""
    fns = []
    for i, (name, (mean, lo, hi)) in enumerate(sorted(estimates.items())):
        fns.append({"name": name, "object": "/x/latency_lab_cyg", "address": hex(0x401000 + 16 * i),
                    "provider": "cyg", "calls_observed": samples, "calls_estimated": 100.0 * samples,
                    "samples": samples, "mean_ticks": mean, "mean_ci_ticks": [lo, hi],
                    "p50_ticks": mean * 0.98, "p99_ticks": mean * 1.5, "share": 0.05 * (i + 1),
                    "hist": {"edges_ticks": [mean * 0.5, mean, mean * 1.5, mean * 2],
                             "counts": [2, samples - 3, 1]},
                    "converged": False})
    return {
        "schema": 1, "tool": "crossmod profile", "command": ["latency_lab_cyg", "--threads", "8"],
        "policy": {"name": policy, "budget": budget, "period_s": 0.01, "samples": 10, "epoch_s": 0.01, "ci": 0.05},
        "exit": {"kind": "exit", "status": 0, "signal": None, "execs": 0},
        "run": {"wall_s": cpu_s / 2, "cpu_s": cpu_s, "user_s": cpu_s, "sys_s": 0.0, "tsc_hz": 2.5e9, "threads": 9},
        "overhead": {"probes": 20, "functions": 10, "toggles": 500, "toggles_per_s": toggles_per_s,
                     "samples": 1000, "samples_per_s": 500.0, "instr_ticks": 1, "instr_share": 0.03,
                     "toggle_ticks": 1, "toggle_share": 0.001},
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


def exact(names=TRUTH) -> dict:
    return {n: (TRUTH[n], TRUTH[n] * 0.95, TRUTH[n] * 1.05) for n in names}


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
    with (folder / "runs.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=prof.RUN_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return folder


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
    md = prof.table3_markdown(prof.table3(rows))
    assert "| lab-cyg | cyg | full | 2 | 9.000 | 3.000x (3.000..3.000) |" in md


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
