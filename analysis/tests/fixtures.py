"""Deterministic, realistic result files for the tests: a results/<slug>/ folder with a
sweep CSV + context JSON, a calibrate summary, a Google Benchmark JSON and its latency CSV,
and configs/tmax/<slug>.toml beside it. Values follow the shapes crossmod records (failure
rate falling with the wait W until Tmax, zero-failure controls), drawn from a seeded RNG.
"""
from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

from analysis.loaders import SWEEP_COLUMNS

STAMP = "20261121T045700Z"

MACHINES = {
    "intel-fam6-mod85-step7-1pkg": {
        "vendor": "GenuineIntel", "brand": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz",
        "family": 6, "model": 85, "stepping": 7, "tsc_hz": 2_500_000_000,
        "tmax_true": 1400, "p0": 0.08, "scale": 450.0,
    },
    "amd-fam25-mod1-step1-1pkg": {
        "vendor": "AuthenticAMD", "brand": "AMD EPYC 7R13 Processor",
        "family": 25, "model": 1, "stepping": 1, "tsc_hz": 2_650_000_000,
        "tmax_true": 900, "p0": 0.05, "scale": 300.0,
    },
}

GRID_WAITS = [0, 100, 200, 400, 600, 800, 1000, 1200, 1600, 2000, 3000]


def _binomial(rng: random.Random, n: int, p: float) -> int:
    if p <= 0.0 or n <= 0:
        return 0
    if n * p > 30:  # normal approximation keeps fixture generation fast
        return max(0, min(n, round(rng.gauss(n * p, math.sqrt(n * p * (1 - p))))))
    # Poisson-ish by inversion for small means.
    k, prod, limit = 0, rng.random(), math.exp(-n * p)
    while prod > limit:
        k += 1
        prod *= rng.random()
    return min(k, n)


def _row(cell_id: int, **kw) -> dict:
    row = {c: "" for c in SWEEP_COLUMNS}
    row.update(schema_version=2, cell_id=cell_id, site_offset=0, rep=0, dwell_ticks=20000,
               state_a=0, state_b=0, traps=0, sigill=0, late_traps=0, sigsegv=0, sigbus=0, stray_trap=0,
               crash=0, hang=0, stopped_early=0, low_exposure=0, outcome="ok",
               patcher_pu=0, executor_pus="1", first_fault_pc_offset="",
               first_fault_bytes="", note="")
    row.update(kw)
    return row


def make_sweep_rows(slug: str, seed: int = 1) -> list[dict]:
    m = MACHINES[slug]
    rng = random.Random(seed)
    tsc_ghz = m["tsc_hz"] / 1e9
    rows: list[dict] = []

    def cell(phase, protocol, wait, straddle, executors, placement, toggles, p, rep=0,
             site_offset=None, outcome="ok"):
        exposed = int(toggles * rng.uniform(0.93, 0.99))
        failures = _binomial(rng, exposed, p)
        executions = exposed * rng.randint(40, 60)
        pus = ";".join(str(1 + i) for i in range(executors)) if placement == "spread" else \
            ";".join(str(2 + i) for i in range(executors))
        kw = dict(phase=phase, protocol=protocol, wait_ticks=wait,
                  wait_ns=f"{wait / tsc_ghz:.1f}", straddle=straddle,
                  site_offset=(64 - straddle) if site_offset is None else site_offset,
                  executors=executors, placement=placement, rep=rep, toggles=toggles,
                  exposed_toggles=exposed, executions=executions,
                  state_a=executions // 2, state_b=executions - executions // 2,
                  traps=exposed * rng.randint(1, 4) if protocol in ("wordpatch", "sync-core") else 0,
                  sigill=failures, failures=failures, outcome=outcome,
                  duration_s=f"{toggles * 2.1e-5 + 0.05:.3f}", patcher_pu=0, executor_pus=pus,
                  # schema 2: the machine's state (one cell every ~2 s)
                  start_utc_ms=1795000000000 + 2000 * len(rows), steal_ms=rng.choice([0, 0, 0, 10, 20]),
                  c2c_ticks=rng.choice([65, 70, 338]), round=len(rows) // 20)
        if failures:
            kw.update(first_fault_pc_offset=str(64 - straddle), first_fault_bytes="0f 1f 44 45 fb")
        if failures > 50:
            kw.update(stopped_early=1)
        rows.append(_row(len(rows), **kw))

    def wp_p(wait, straddle):
        if wait >= m["tmax_true"]:
            return 0.0
        return m["p0"] * math.exp(-wait / m["scale"]) * (0.6 + 0.2 * straddle)

    for executors, placement in ((1, "spread"), (2, "spread"), (1, "smt")):
        for wait in GRID_WAITS:
            for s in (1, 2, 3, 4):
                cell("grid", "wordpatch", wait, s, executors, placement, 2000, wp_p(wait, s))
    for wait in (1200, 1600):
        for s in (1, 2, 3, 4):
            cell("confirm", "wordpatch", wait, s, 2, "spread", 50000, wp_p(wait, s))
    for wait in (0, 400, 1600):
        for s in (1, 2, 3, 4):
            cell("control", "naive", wait, s, 1, "spread", 2000, 0.12 + 0.02 * s)
            cell("control", "callpatch", wait, s, 1, "spread", 5000, 0.0)
            cell("control", "sync-core", wait, s, 1, "spread", 1000, 0.0)
        for offset in (0, 6, 12):
            cell("control", "aligned", wait, 0, 1, "spread", 5000, 0.0, site_offset=offset)

    # A crash, a hang, a blind cell and an error cell, as the harness records them.
    rows.append(_row(len(rows), phase="grid", protocol="wordpatch", wait_ticks=100,
                     wait_ns=f"{100 / tsc_ghz:.1f}", straddle=3, site_offset=61, executors=2,
                     placement="spread", rep=1, toggles=37, exposed_toggles=35,
                     executions=1800, traps=40, failures=1, crash=1, outcome="crash",
                     duration_s="0.021", executor_pus="1;2", note="child killed by SIGABRT"))
    rows.append(_row(len(rows), phase="grid", protocol="naive", wait_ticks=0, wait_ns="0.0",
                     straddle=2, site_offset=62, executors=1, placement="spread", rep=1,
                     toggles=12, exposed_toggles=12, executions=600, failures=1, hang=1,
                     outcome="hang", duration_s="5.000", note="watchdog deadline"))
    rows.append(_row(len(rows), phase="grid", protocol="wordpatch", wait_ticks=3000,
                     wait_ns=f"{3000 / tsc_ghz:.1f}", straddle=1, site_offset=63, executors=2,
                     placement="smt", rep=0, toggles=2000, exposed_toggles=3, executions=5,
                     failures=0, low_exposure=1, outcome="blind", duration_s="0.300",
                     executor_pus="1;5", note="executors starved"))
    rows.append(_row(len(rows), phase="grid", protocol="aligned", wait_ticks=0, wait_ns="0.0",
                     straddle=0, site_offset=13, executors=1, placement="spread", toggles=0,
                     exposed_toggles=0, executions=0, failures=0, outcome="error",
                     duration_s="0.001", note="site setup refused: halves equal"))
    rows.append(_row(len(rows), phase="grid", protocol="selftest-torn", wait_ticks=0,
                     wait_ns="0.0", straddle=2, site_offset=62, executors=1,
                     placement="spread", toggles=10, exposed_toggles=10, executions=10,
                     failures=10, sigill=10, duration_s="0.010"))
    return rows


def write_csv(path: Path, columns, rows) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def sweep_context(slug: str) -> dict:
    m = MACHINES[slug]
    return {
        "schema_version": 1, "kind": "crossmod-sweep-context", "git_sha": "53b7bda",
        "compiler": "GCC 12.2.0",
        "machine": {
            "slug": slug, "vendor": m["vendor"], "brand": m["brand"], "family": m["family"],
            "model": m["model"], "stepping": m["stepping"], "microcode": "0x5003604",
            "kernel": "6.1.0-26-amd64", "hypervisor": "", "tsc_hz": m["tsc_hz"],
            "tsc_source": "cpuid.15h", "invariant_tsc": True, "cache_line": 64,
            "topology": {"packages": 1, "cores": 2, "pus": 4}, "c2c_one_way_ticks": 180,
        },
        "config": {"preset": "quick", "protocols": ["wordpatch", "naive", "callpatch",
                                                    "aligned", "sync-core"]},
        "command": "crossmod calibrate", "started": "2026-11-21T04:57:00Z",
        "finished": "2026-11-21T05:05:12Z",
    }


def tmax_toml(slug: str) -> str:
    m = MACHINES[slug]
    observed = 1600 if slug.startswith("intel") else 1000
    recommended = -(-max(2 * observed, 180, 100) // 50) * 50   # the harness's margin rule
    ghz = m["tsc_hz"] / 1e9
    return f"""# Written by crossmod calibrate
[tmax]
observed_ticks = {observed}
observed_ns = {observed / ghz:.1f}
recommended_ticks = {recommended}
recommended_ns = {recommended / ghz:.1f}
tsc_hz = {m["tsc_hz"]}
margin_rule = "recommended = max(2 x observed, measured core-to-core one-way line transfer, 100 ticks), rounded up to a multiple of 50 ticks"

[evidence]
toggles_at_or_above = 1240000
exposed_toggles_at_or_above = 1190000
failure_bound_95 = 2.5e-6
results = "results/{slug}/sweep-{STAMP}.csv"

[machine]
slug = "{slug}"
brand = "{m["brand"]}"
"""


def bench_json(slug: str, seed: int = 2) -> dict:
    m = MACHINES[slug]
    rng = random.Random(seed)
    ghz = m["tsc_hz"] / 1e9
    benches = []
    # A subset of the ops crossmod bench measures keeps the synthetic plots quick; the full
    # list is exercised by the real output in tests/data.
    latency_ops = {
        "wordpatch_inline_activate": 160, "wordpatch_async_batch16": 90,
        **{f"wordpatch_straddle_s{s}": 2 * m["tmax_true"] + 300 for s in (1, 3)},
        **{f"callpatch_s{s}": 110 + 10 * s for s in (0, 2)},
        "synccore_straddle_s1": 5200, "stop_the_world": 24000, "mprotect_callpatch": 9000,
    }
    for op, ticks in latency_ops.items():
        for executors in (1, 2):
            t = ticks * (1 + 0.15 * (executors - 1)) * rng.uniform(0.95, 1.05)
            benches.append({
                "name": f"latency/{op}/executors:{executors}", "run_name": f"latency/{op}/executors:{executors}",
                "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1,
                "iterations": 20000, "real_time": t / ghz, "cpu_time": t / ghz, "time_unit": "ns",
                "ticks_mean": t, "ticks_p50": 0.95 * t, "ticks_p90": 1.3 * t, "ticks_p99": 2.2 * t,
                "ns_mean": t / ghz})
    invoke = {"empty_loop": 0.41, "direct_call": 1.62, "flag_guard_off": 1.05, "flag_guard_on": 2.1,
              "active_site": 1.71, "nop5_site": 0.52, "nop5_prefixed_site": 0.55,
              **{f"callpatch_off_s{s}": 0.6 + 0.05 * s for s in range(5)}}
    for variant, ns in invoke.items():
        benches.append({"name": f"invoke/{variant}", "run_name": f"invoke/{variant}",
                        "run_type": "iteration", "iterations": 10_000_000, "real_time": ns,
                        "cpu_time": ns, "time_unit": "ns", "ns_per_call": ns,
                        "ticks_per_call": ns * ghz})
    for protocol, cost in (("wordpatch", 0.9), ("callpatch", 0.15), ("sync-core", 3.0)):
        for executors in (1, 2, 3):
            base = 6.0e8 * executors * (1 - 0.05 * (executors - 1))
            for rate in (0, 100, 1000, 10_000, 100_000):
                slowdown = 1.0 / (1.0 + cost * rate / 1.0e5 * (1 + 0.3 * executors))
                calls = base * slowdown * rng.uniform(0.98, 1.02)
                benches.append({
                    "name": f"throughput/{protocol}/rate:{rate}/executors:{executors}/real_time",
                    "run_name": f"throughput/{protocol}/rate:{rate}/executors:{executors}/real_time",
                    "run_type": "iteration", "iterations": 1, "real_time": 1.0e9, "cpu_time": 2.0e8,
                    "time_unit": "ns", "calls_per_s": calls,
                    "calls_per_executor_cpu_s": calls / executors / 0.97,
                    "calls_per_s_rel": slowdown, "executor_cpu_share": 0.97,
                    "achieved_toggles_per_s": rate * rng.uniform(0.97, 1.0),
                    "state_a_fraction": 0.5 if rate else 1.0, "imbalance": rng.uniform(0.0, 0.04)})
    benches.append({"name": "latency/stop_the_world/executors:3", "run_type": "iteration",
                    "error_occurred": True, "error_message": "more executors than PUs",
                    "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ns"})
    return {
        "context": {"date": "2026-11-21T05:10:00+00:00", "host_name": "bench-host",
                    "executable": "build/crossmod", "num_cpus": 4, "mhz_per_cpu": 2500,
                    "cpu_scaling_enabled": False, "library_build_type": "release",
                    "caches": [],
                    # AddCustomContext values are strings, as crossmod bench writes them.
                    "tmax_ticks": "3200", "tmax_source": f"configs/tmax/{slug}.toml",
                    "tmax_is_default": "false", "machine_slug": slug, "cpu_brand": m["brand"],
                    "tsc_hz": str(m["tsc_hz"]), "crossmod_schema_version": "1"},
        "benchmarks": benches,
    }


def latency_rows(slug: str, bench: dict, samples: int = 100, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for b in bench["benchmarks"]:
        if not b["name"].startswith("latency/") or b.get("error_occurred"):
            continue
        op = b["name"].split("/")[1]
        executors = int(b["name"].rsplit(":", 1)[1])
        median = b["ticks_p50"]
        for _ in range(samples):
            rows.append({"benchmark": b["name"], "op": op, "executors": executors,
                         "sample_ticks": max(1, int(median * math.exp(rng.gauss(0, 0.35))))})
    return rows


def make_results_tree(root: Path, slug: str, *, bench: bool = True, tmax: bool = True,
                      calibrate: bool = True, seed: int = 1) -> Path:
    """Create root/results/<slug>/ (and root/configs/tmax/<slug>.toml); return the folder."""
    folder = root / "results" / slug
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / f"sweep-{STAMP}.csv", SWEEP_COLUMNS, make_sweep_rows(slug, seed))
    (folder / f"sweep-{STAMP}.json").write_text(json.dumps(sweep_context(slug), indent=2))
    if calibrate:
        observed = 1600 if slug.startswith("intel") else 1000
        m_tsc = MACHINES[slug]["tsc_hz"]
        (folder / f"calibrate-{STAMP}.json").write_text(json.dumps({
            "schema_version": 1, "kind": "crossmod-calibrate", "status": "ok",
            "machine_slug": slug, "results": f"sweep-{STAMP}.csv",
            "tmax_config": f"configs/tmax/{slug}.toml",
            "tmax": {"observed_ticks": observed, "observed_ns": observed / m_tsc * 1e9,
                     "recommended_ticks": 2 * observed, "recommended_ns": 2 * observed / m_tsc * 1e9,
                     "tsc_hz": m_tsc, "margin_rule": "recommended = max(2 x observed, c2c, 100)",
                     "c2c_one_way_ticks": 180, "largest_failing_ticks": 1200},
            "evidence": {"toggles_at_or_above": 1240000, "exposed_toggles_at_or_above": 1190000,
                         "failures_at_or_above": 0, "failure_bound_95": 2.5e-6},
            "cells": 170, "notes": []}, indent=2))
    if tmax:
        cfg = root / "configs" / "tmax"
        cfg.mkdir(parents=True, exist_ok=True)
        (cfg / f"{slug}.toml").write_text(tmax_toml(slug))
    if bench:
        data = bench_json(slug)
        (folder / f"bench-{STAMP}.json").write_text(json.dumps(data, indent=1))
        write_csv(folder / f"bench-{STAMP}-latency.csv", ("benchmark", "op", "executors", "sample_ticks"),
                  latency_rows(slug, data))
    return folder
