"""Command line: regenerate every plot of one or more results/<machine>/ folders.

    python3 -m analysis results/<slug> [results/<slug2> ...] [--out DIR] [--no-svg]

Exit codes: 0 done (plots whose inputs are missing are skipped, with the reason on
stderr), 2 bad usage or a malformed input file (the message names the file and problem).
Single-threaded; writes only into the plot directories.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from . import loaders, plots, probes_plots, stats
from .loaders import InputError


class UsageError(Exception):
    pass


PLOT_NAMES = ("failure_rate", *(f"heatmap_{p}" for p in loaders.PROTOCOLS), "controls",
              "latency_hist", "latency_cdf", "throughput_rate", "throughput_executors", "invocation",
              "tmax_overlay", "timeline", "probes_toggle_hist", "probes_throughput",
              "probes_invocation")


@dataclass
class FolderResult:
    folder: Path
    machine: plots.Machine
    sweep: Optional[loaders.Sweep]
    tmax: Optional[loaders.TmaxConfig]
    summary: dict[str, Any] = field(default_factory=dict)
    only: Optional[frozenset[str]] = None     # --only: the plots to draw (None: all)


def _rel(path: Optional[Path], base: Path) -> Optional[str]:
    if path is None:
        return None
    try:
        return os.path.relpath(path, base)
    except ValueError:
        return str(path)


def _tsc_from_rows(rows: list[dict]) -> Optional[float]:
    ratios = [r["wait_ticks"] / r["wait_ns"] * 1e9 for r in rows if r["wait_ns"] > 0 and r["wait_ticks"] > 0]
    return statistics.median(ratios) if ratios else None


def find_tmax_config(folder: Path, slugs: list[str]) -> Optional[Path]:
    """configs/tmax/<slug>.toml of the checkout the results folder lives in."""
    root = folder.resolve().parent.parent
    for slug in slugs:
        candidate = root / "configs" / "tmax" / f"{slug}.toml"
        if candidate.is_file():
            return candidate
    return None


def _json_safe(value):
    """NaN/inf (a rate over zero exposed toggles) become null: summary.json stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _zero_failure_claim(n: int, unit: str, cluster_bound: float | None, iid_bound: float | None) -> str:
    """What zero failures support: a bound over the independent units (rounds or cells),
    and the per-toggle bound only as what it is, an i.i.d. figure bursts contradict."""
    text = f" over {n} {unit}"
    if cluster_bound is not None:
        text += f": < {cluster_bound:.2g} of {unit} tear at 95%"
    if iid_bound is not None:
        text += f" (p < {iid_bound:.2g} per toggle only if toggles were independent)"
    return text


def _protocol_summary(sweep: loaders.Sweep) -> dict[str, Any]:
    out = {}
    for g in stats.aggregate(sweep.valid, ("protocol",)):
        out[g["protocol"]] = {
            "cells": g["cells"], "toggles": g["toggles"], "exposed_toggles": g["exposed"],
            "failures": g["failures"], "crash_cells": g["crash"], "hang_cells": g["hang"],
            "rate": g["rate"], "ci95": [g["ci_low"], g["ci_high"]],
            "upper_bound_95": g["upper_bound_one_sided"],
        }
        n, unit = stats.clusters([r for r in sweep.valid if r["protocol"] == g["protocol"]])
        out[g["protocol"]].update(clusters=n, cluster_unit=unit,
                                  cluster_bound_95=stats.zero_failure_cluster_bound(n))
    return out


def _run(name: str, fn: Callable[[], list[Path]], result: FolderResult, out_dir: Path) -> None:
    if result.only is not None and name not in result.only:
        return
    try:
        written = fn()
    except plots.Skip as e:
        result.summary["skipped"][name] = str(e)
        print(f"analysis: skip {name} for {result.folder}: {e}", file=sys.stderr)
        return
    result.summary["plots"] += [_rel(p, out_dir) for p in written]


def process_folder(folder: Path, out_dir: Path, svg: bool, all_sweeps: bool,
                   only: Optional[frozenset[str]] = None) -> FolderResult:
    if not folder.is_dir():
        raise UsageError(f"{folder}: not a directory")
    summary: dict[str, Any] = {"schema_version": 1, "kind": "crossmod-plots-summary",
                               "folder": str(folder), "inputs": {}, "plots": [], "skipped": {}}

    sweep_files = loaders.stamped_files(folder, "sweep")
    sweep = None
    if sweep_files:
        chosen = sweep_files if all_sweeps else sweep_files[-1:]
        sweep = loaders.merge_sweeps([loaders.load_sweep(p) for p in chosen])
        summary["inputs"]["sweep"] = [p.name for p in chosen]
        summary["inputs"]["sweep_context"] = sweep.context.get("machine") and _rel(sweep.context_path, folder)
    ctx_machine = sweep.context.get("machine", {}) if sweep else {}

    bench_path = loaders.newest(folder, "bench")
    bench = loaders.load_bench(bench_path) if bench_path else None
    latency_path = None
    if bench_path:
        same = folder / f"bench-{loaders.stamp_of(bench_path, 'bench')}-latency.csv"
        latency_path = same if same.is_file() else None
    latency_path = latency_path or loaders.newest(folder, "latency")
    latency = loaders.load_latency_csv(latency_path) if latency_path else None

    bench_summary_path = loaders.newest(folder, "bench_summary")
    if bench_summary_path:
        summary["bench_summary"] = loaders.load_json(bench_summary_path, "bench summary")
        summary["inputs"]["bench_summary"] = bench_summary_path.name
    calibrate_path = loaders.newest(folder, "calibrate")
    calibrate = loaders.load_json(calibrate_path, "calibrate summary") if calibrate_path else None

    slug = str(ctx_machine.get("slug") or (bench.context.get("machine_slug") if bench else "") or folder.resolve().name)
    tmax_path = find_tmax_config(folder, list(dict.fromkeys([slug, folder.resolve().name])))
    tmax = loaders.load_tmax(tmax_path) if tmax_path else None
    if tmax is None and calibrate is not None and calibrate_path is not None:
        tmax = loaders.tmax_from_calibrate(calibrate_path, calibrate)
        tmax_path = calibrate_path if tmax is not None else None
    if tmax is None:
        print(f"analysis: note: no configs/tmax/{slug}.toml beside {folder} (nor a Tmax in a "
              "calibrate-*.json); Tmax lines come from the sweep alone", file=sys.stderr)

    def number(v):
        # Google Benchmark custom context values are strings ("2500000000").
        if isinstance(v, bool):
            return None
        try:
            value = float(v)
        except (TypeError, ValueError):
            return None
        return value if math.isfinite(value) and value > 0 else None

    tsc_hz = (number(ctx_machine.get("tsc_hz")) or (tmax.tsc_hz if tmax else None)
              or (number(bench.context.get("tsc_hz")) if bench else None)
              or (_tsc_from_rows(sweep.rows) if sweep else None))
    brand = str(ctx_machine.get("brand") or (bench.context.get("cpu_brand") if bench else "")
                or (tmax.machine.get("brand", "") if tmax else ""))
    machine = plots.Machine(slug=slug, brand=brand, tsc_hz=tsc_hz)
    summary["machine"] = {"slug": slug, "brand": brand, "tsc_hz": tsc_hz}
    summary["inputs"].update(bench=_rel(bench_path, folder), latency=_rel(latency_path, folder),
                             calibrate=_rel(calibrate_path, folder), tmax_config=_rel(tmax_path, folder))
    result = FolderResult(folder=folder, machine=machine, sweep=sweep, tmax=tmax, summary=summary,
                          only=only)

    # Sweep plots.
    if sweep is not None:
        floor = plots.global_rate_floor(sweep) if sweep.valid else None
        _run("failure_rate", lambda: plots.failure_rate(sweep, machine, tmax, out_dir, svg), result, out_dir)
        _run("timeline", lambda: plots.timeline(sweep, machine, out_dir, svg), result, out_dir)
        for protocol in loaders.PROTOCOLS:
            _run(f"heatmap_{protocol}",
                 lambda p=protocol: plots.heatmap(sweep, machine, p, out_dir, svg, floor), result, out_dir)
        _run("controls", lambda: plots.controls(sweep, machine, out_dir, svg), result, out_dir)
        summary["sweep"] = {
            "cells": len(sweep.rows), "valid_cells": len(sweep.valid),
            "selftest_rows_ignored": sweep.ignored_selftest,
            "low_exposure_cells": sum(r["low_exposure"] for r in sweep.valid),
            "stopped_early_cells": sum(r["stopped_early"] for r in sweep.valid),
            "excluded": [{k: r[k] for k in ("cell_id", "phase", "protocol", "wait_ticks", "straddle",
                                             "executors", "placement", "rep", "outcome", "note")}
                         for r in sweep.excluded],
            "per_protocol": _protocol_summary(sweep),
            "interrupted": bool(sweep.context.get("interrupted", False)),
        }
    else:
        for name in ["failure_rate", *(f"heatmap_{p}" for p in loaders.PROTOCOLS), "controls"]:
            summary["skipped"][name] = f"no sweep-*.csv in {folder}"
        print(f"analysis: skip sweep plots for {folder}: no sweep-*.csv found", file=sys.stderr)

    # Bench plots.
    if latency is not None and latency_path is not None:
        _run("latency_hist", lambda: plots.latency_hist(latency, machine, latency_path, out_dir, svg), result, out_dir)
        _run("latency_cdf", lambda: plots.latency_cdf(latency, machine, latency_path, out_dir, svg), result, out_dir)
    else:
        for name in ("latency_hist", "latency_cdf"):
            summary["skipped"][name] = f"no bench-*-latency.csv in {folder}"
        print(f"analysis: skip latency plots for {folder}: no bench-*-latency.csv found", file=sys.stderr)
    if bench is not None:
        _run("throughput_rate", lambda: plots.throughput_rate(bench, machine, out_dir, svg), result, out_dir)
        _run("throughput_executors", lambda: plots.throughput_executors(bench, machine, out_dir, svg), result, out_dir)
        _run("invocation", lambda: plots.invocation(bench, machine, out_dir, svg), result, out_dir)
        summary["bench"] = {"results": len(bench.entries),
                            "errors": [{"name": n, "message": m} for n, m in bench.errors],
                            "tmax_ticks": bench.context.get("tmax_ticks"),
                            "tmax_source": bench.context.get("tmax_source"),
                            "tmax_is_default": bench.context.get("tmax_is_default")}
    else:
        for name in ("throughput_rate", "throughput_executors", "invocation"):
            summary["skipped"][name] = f"no bench-*.json in {folder}"
        print(f"analysis: skip bench plots for {folder}: no bench-*.json found", file=sys.stderr)

    # The probes suite (bench-<stamp>-probes.json and -probes-latency.csv).
    probes_json, probes_csv = probes_plots.newest(folder)
    probes_names = ("probes_toggle_hist", "probes_throughput", "probes_invocation")
    if probes_json is not None:
        pb = loaders.load_bench(probes_json)
        summary["inputs"].update(probes=_rel(probes_json, folder), probes_latency=_rel(probes_csv, folder))
        if probes_csv is not None:
            ps = loaders.load_latency_csv(probes_csv)
            _run("probes_toggle_hist",
                 lambda: probes_plots.toggle_hist(ps, pb, machine, probes_csv, out_dir, svg), result, out_dir)
        else:
            summary["skipped"]["probes_toggle_hist"] = f"no bench-*-probes-latency.csv beside {probes_json.name}"
        _run("probes_throughput", lambda: probes_plots.throughput(pb, machine, probes_json, out_dir, svg),
             result, out_dir)
        _run("probes_invocation", lambda: probes_plots.invocation(pb, machine, probes_json, out_dir, svg),
             result, out_dir)
        summary["probes"] = probes_plots.headline(pb)
    elif only is not None:
        # The probes suite is optional: its absence is a skip only when asked for by name.
        for name in probes_names:
            summary["skipped"][name] = f"no bench-*-probes.json in {folder}"

    summary["tmax"] = {
        "config": None if tmax is None else {
            "observed_ticks": tmax.observed_ticks, "observed_ns": tmax.observed_ns,
            "recommended_ticks": tmax.recommended_ticks, "recommended_ns": tmax.recommended_ns,
            "margin_rule": tmax.margin_rule, "evidence": tmax.evidence},
        "from_sweep": stats.tmax_from_cells(sweep.rows) if sweep else None,
    }
    if calibrate is not None:
        summary["calibrate"] = calibrate
    if only is not None:
        summary["skipped"] = {k: v for k, v in summary["skipped"].items() if k in only}
        summary["only"] = sorted(only)
    return result


def _text_summary(r: FolderResult, out_dir: Path) -> str:
    s = r.summary
    lines = [f"{r.folder}: {r.machine.slug}" + (f" ({r.machine.brand})" if r.machine.brand else "")]
    sw = s.get("sweep")
    n_sweeps = len(s.get('inputs', {}).get('sweep') or [])
    scope = "this sweep" if n_sweeps <= 1 else f"{n_sweeps} pooled sweeps"
    if sw:
        lines.append(f"  {', '.join(s['inputs']['sweep'])}: {sw['cells']} cells, "
                     f"{len(sw['excluded'])} blind/error excluded, {sw['selftest_rows_ignored']} selftest ignored")
    if sw and sw["excluded"]:
        for cell in sw["excluded"][:5]:
            lines.append(f"    excluded cell {cell['cell_id']} ({cell['outcome']}): {cell['protocol']} "
                         f"W={cell['wait_ticks']} S={cell['straddle']} N={cell['executors']} "
                         f"{cell['placement']} rep {cell['rep']}"
                         + (f": {cell['note']}" if cell["note"] else ""))
        if len(sw["excluded"]) > 5:
            lines.append(f"    ... {len(sw['excluded']) - 5} more in summary.json")
    if sw and sw.get("interrupted"):
        lines.append("  note: the sweep context says the run was interrupted; results are partial")
    cfg = s["tmax"]["config"]
    if cfg:
        lines.append(f"  Tmax ({r.tmax.path if r.tmax else ''}): observed {cfg['observed_ticks']:g} ticks"
                     + (f" ({cfg['observed_ns']:g} ns)" if cfg['observed_ns'] else "")
                     + (f", recommended {cfg['recommended_ticks']:g} ticks" if cfg['recommended_ticks'] else "")
                     + (f" ({cfg['recommended_ns']:g} ns)" if cfg['recommended_ns'] else ""))
    fs = s["tmax"]["from_sweep"]
    if fs:
        if fs["observed_ticks"] is not None:
            lines.append(f"  Tmax observed in {scope}: {fs['observed_ticks']} ticks; 0 failures in "
                         f"{fs['exposed_at_or_above']:,} exposed toggles at or above"
                         + _zero_failure_claim(fs["clusters_at_or_above"], fs["cluster_unit"],
                                               fs["cluster_bound_95"], fs["failure_bound_95"]))
        elif fs["above_tested_range"]:
            lines.append(f"  Tmax observed in {scope}: above the largest tested wait "
                         f"({fs['max_failing_ticks']} ticks still failed)")
        elif fs["waits_tested"]:
            lines.append(f"  Tmax observed in {scope}: none (no clean zero-failure evidence; "
                         f"{sw['low_exposure_cells'] if sw else 0} cells of the sweep had low exposure)")
    if sw:
        for p, v in sw["per_protocol"].items():
            if v["failures"]:
                lines.append(f"  {p:10s} {v['failures']:,} failures in {v['exposed_toggles']:,} exposed toggles")
            else:
                lines.append(f"  {p:10s} 0 failures in {v['exposed_toggles']:,} exposed toggles"
                             + _zero_failure_claim(v["clusters"], v["cluster_unit"], v["cluster_bound_95"],
                                                   v["upper_bound_95"]))
    lines.append(f"  {len(s['plots'])} files written to {out_dir}; {len(s['skipped'])} plots skipped")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m analysis",
                                description="Regenerate crossmod plots from results/<machine>/ folders.")
    p.add_argument("folders", nargs="+", type=Path, help="results/<machine> folders")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory (default <folder>/plots; with several folders each "
                        "folder's plots go to OUT/<folder name> and overlays to OUT)")
    p.add_argument("--svg", action=argparse.BooleanOptionalAction, default=True,
                   help="also write SVG next to each PNG (default on)")
    p.add_argument("--all-sweeps", action="store_true",
                   help="pool every sweep-*.csv of a folder instead of using the newest")
    p.add_argument("--only", metavar="NAME[,NAME...]", default=None,
                   help="draw only these plots: " + ", ".join(PLOT_NAMES))
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    only = None
    if args.only is not None:
        only = frozenset(n.strip() for n in args.only.split(",") if n.strip())
        unknown = sorted(only - set(PLOT_NAMES))
        if unknown:
            print(f"analysis: error: --only: unknown plot(s) {', '.join(unknown)} "
                  f"(known: {', '.join(PLOT_NAMES)})", file=sys.stderr)
            return 2
    try:
        results = []
        multi = len(args.folders) > 1
        for folder in args.folders:
            if args.out is None:
                out_dir = folder / "plots"
            else:
                out_dir = args.out / folder.resolve().name if multi else args.out
            r = process_folder(folder, out_dir, args.svg, args.all_sweeps, only)
            out_dir.mkdir(parents=True, exist_ok=True)
            summary_text = json.dumps(_json_safe(r.summary), indent=2, sort_keys=True, allow_nan=False)
            (out_dir / "summary.json").write_text(summary_text + "\n")
            print(_text_summary(r, out_dir))
            results.append(r)
            # `crossmod profile` evaluation (scripts/profile_eval.py) in <folder>/profile.
            if (folder / "profile" / "runs.csv").is_file() and only is None:
                from . import profile_cli
                written = profile_cli.process_eval_folder(folder / "profile", out_dir / "profile", args.svg,
                                                          profile_cli.profile_plots.TOP_N, False,
                                                          write_tables=False)
                print(f"  profile evaluation: {len(written)} files written for {folder / 'profile'}")
        if multi and (only is None or "tmax_overlay" in only):
            overlay_dir = args.out if args.out is not None else args.folders[0] / "plots"
            try:
                written = plots.tmax_overlay([(r.machine, r.sweep, r.tmax) for r in results
                                              if r.sweep is not None], overlay_dir, args.svg)
                print(f"overlay: {', '.join(str(p) for p in written)}")
            except plots.Skip as e:
                print(f"analysis: skip tmax_overlay: {e}", file=sys.stderr)
    except (InputError, UsageError) as e:
        print(f"analysis: error: {e}", file=sys.stderr)
        return 2
    return 0
