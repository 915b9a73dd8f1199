"""Plots of the `probes` suite of `crossmod bench` (probes/bench/probes_bench.cpp):
bench-<stamp>-probes.json (Google Benchmark) and bench-<stamp>-probes-latency.csv.

  probes_toggle_hist   toggle latency over every probe of the 20000-function program,
                       callpatch / wordpatch sync / wordpatch async (+ flush) (paper Fig. 10)
  probes_throughput    executor calls against 0 Hz at the same state mix, and the imbalance
                       factor, vs toggle rate, per strategy, mode and executor count
                       (paper Figs. 11, 12)
  probes_invocation    ticks per call through each provider's site, off / on, against a
                       direct call and an unregistered NOP site

`headline(bench)` gives the numbers the README table quotes (init cost per probe, the
geometric-mean imbalance factor, medians), for summary.json.
Single-threaded; writes only into the plot directory."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Optional

import numpy as np

from analysis import loaders
from analysis.plots import Machine, Skip, _figure, _fmt_hz, _save

STRATEGY_COLORS = {"callpatch": "#2ca02c", "wordpatch_sync": "#1f77b4",
                   "wordpatch_async": "#9467bd", "wordpatch_async_flush": "#bcbd22"}
MODE_LABELS = {"ad": "activate / deactivate", "aa": "activate(A) / activate(B)"}

# bench-<stamp>-probes.json and its CSV (stamps as in loaders: no '-' but "-<n>").
_STAMP = r"(?P<stamp>[^-]+(?:-\d+)?)"
PROBES_JSON = re.compile(rf"^bench-{_STAMP}-probes\.json$")
PROBES_CSV = re.compile(rf"^bench-{_STAMP}-probes-latency\.csv$")


def newest(folder: Path) -> tuple[Optional[Path], Optional[Path]]:
    """The newest probes JSON and the latency CSV of the same run (if present)."""
    found = sorted((p for p in folder.iterdir() if p.is_file() and PROBES_JSON.match(p.name)),
                   key=lambda p: (loaders._stamp_key(PROBES_JSON.match(p.name).group("stamp")),
                                  p.stat().st_mtime))
    if not found:
        return None, None
    js = found[-1]
    csv = folder / js.name.replace("-probes.json", "-probes-latency.csv")
    return js, (csv if csv.is_file() else None)


def _entry(bench: loaders.Bench, name: str) -> Optional[dict[str, float]]:
    for e in bench.entries:
        if e.name == name:
            return e.values
    return None


def _throughput(bench: loaders.Bench) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for e in bench.entries:
        m = re.match(r"^probes/throughput/executors:(\d+)$", e.name)
        if m:
            out[int(m.group(1))] = e.values
    return out


def _series(values: dict[str, float], strategy: str, mode: str, metric: str) -> list[tuple[float, float]]:
    pts = []
    pat = re.compile(rf"^{strategy}/{mode}/rate:(\d+)/{metric}$")
    for k, v in values.items():
        m = pat.match(k)
        if m:
            pts.append((float(m.group(1)), v))
    return sorted(pts)


def geomean(xs: list[float]) -> Optional[float]:
    xs = [x for x in xs if x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def headline(bench: loaders.Bench) -> dict[str, Any]:
    """Numbers for summary.json and the README: each is None if its benchmark is absent."""
    out: dict[str, Any] = {}
    for key, name in (("init_patchable_ticks_per_probe", "probes/init/patchable_scan/functions:20000"),
                      ("init_cyg_ticks_per_probe", "probes/init/cyg_discovery/functions:5000")):
        v = _entry(bench, name)
        out[key] = v.get("ticks_per_probe") if v else None
    tog = _entry(bench, "probes/toggle/all_probes")
    out["toggle"] = None if tog is None else {k: v for k, v in tog.items() if "ticks" in k or "probes" in k}
    imb: dict[str, Any] = {}
    undefined: dict[str, int] = {}  # windows where one state saw no call (not in the mean)
    for n, values in sorted(_throughput(bench).items()):
        for strategy in ("callpatch", "wordpatch_sync"):
            for mode in ("ad", "aa"):
                pts = [v for _, v in _series(values, strategy, mode, "imbalance")]
                imb[f"{strategy}/{mode}/executors:{n}"] = geomean(pts)
                undefined[f"{strategy}/{mode}/executors:{n}"] = sum(1 for v in pts if v <= 0)
    out["imbalance_geomean"] = imb
    out["imbalance_undefined_windows"] = undefined
    inv = _entry(bench, "probes/invoke")
    out["invoke_ticks_per_call"] = None if inv is None else {
        k.split("/")[0]: v for k, v in inv.items() if k.endswith("/ticks_per_call")}
    return out


def _subtitle(bench: loaders.Bench, machine: Machine, source: Path) -> str:
    ctx = bench.context
    text = machine.subtitle(source)
    if ctx.get("probes_wait_ticks") is not None:
        text += f"; wordpatch wait {ctx['probes_wait_ticks']} ticks"
    if ctx.get("probes_window_s") is not None:
        text += f"; windows {float(ctx['probes_window_s']):g} s x {ctx.get('probes_rounds', '?')} rounds, interleaved"
    return text


def toggle_hist(samples: dict, bench: Optional[loaders.Bench], machine: Machine, source: Path,
                out_dir: Path, svg: bool = True) -> list[Path]:
    ops = [op for op in ("callpatch", "wordpatch_sync", "wordpatch_async", "wordpatch_async_flush")
           if (op, 0) in samples and samples[(op, 0)]]
    if not ops:
        raise Skip(f"{source.name} has no probes/toggle/all_probes samples")
    sub = machine.subtitle(source)
    if bench is not None:
        t = _entry(bench, "probes/toggle/all_probes") or {}
        if "probes" in t:
            sub += f"; {int(t['probes'])} probes, {int(t.get('straddling_probes', 0))} straddle a line"
    fig, axes = _figure("Probe toggle latency over every probe (activate and deactivate)", sub,
                        len(ops), 1, figsize=(9.0, 1.2 + 2.0 * len(ops)), sharex=True)
    all_ticks = np.concatenate([np.asarray(samples[(op, 0)], dtype=float) for op in ops])
    lo, hi = max(1.0, all_ticks.min()), max(2.0, all_ticks.max())
    bins = np.logspace(math.log10(lo), math.log10(hi * 1.01), 80)
    for i, op in enumerate(ops):
        ax = axes[i, 0]
        v = np.asarray(samples[(op, 0)], dtype=float)
        ax.hist(v, bins=bins, color=STRATEGY_COLORS.get(op, "#7f7f7f"))
        ax.set_xscale("log")
        ax.set_yscale("log")
        p50, p99 = np.percentile(v, [50, 99])
        ax.set_title(f"{op}: n={len(v)}, p50 {p50:.0f}, p99 {p99:.0f} ticks", fontsize=9, loc="left")
        ax.set_ylabel("toggles")
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("ticks per toggle (TSC; log scale)")
    return _save(fig, out_dir, "probes_toggle_hist", svg, top=0.9)


def throughput(bench: loaders.Bench, machine: Machine, source: Path, out_dir: Path,
               svg: bool = True) -> list[Path]:
    tp = _throughput(bench)
    if not tp:
        raise Skip(f"{source.name} has no probes/throughput/executors:<n> results")
    fig, axes = _figure("Executors under toggling: calls vs 0 Hz at the same state mix, and imbalance",
                        _subtitle(bench, machine, source),
                        2, 2, figsize=(12.0, 8.5))
    markers = ["o", "s", "^", "D", "v"]
    for col, mode in enumerate(("ad", "aa")):
        for n, values in sorted(tp.items()):
            for strategy in ("callpatch", "wordpatch_sync"):
                # x: the toggle rate achieved (a loaded machine falls short of the request).
                achieved = dict(_series(values, strategy, mode, "toggles_per_s"))
                ratio = [(achieved.get(r, r), v) for r, v in _series(values, strategy, mode, "ratio_same_mix")]
                imb = [(achieved.get(r, r), v) for r, v in _series(values, strategy, mode, "imbalance")]
                style = dict(color=STRATEGY_COLORS[strategy], marker=markers[(n - 1) % len(markers)],
                             linestyle="-" if strategy == "callpatch" else "--",
                             label=f"{strategy}, {n} executor{'s' if n > 1 else ''}")
                if ratio:
                    axes[0, col].plot([r for r, _ in ratio], [v for _, v in ratio], **style)
                # 0 marks a window in which one state got no call at all (undefined):
                # drawn as an x on the axis floor, not as a value.
                shown = [(r, v) for r, v in imb if v > 0]
                if shown:
                    axes[1, col].plot([r for r, _ in shown], [v for _, v in shown], **style)
                for r, v in imb:
                    if v <= 0:
                        axes[1, col].plot([r], [1.0], marker="x", color=style["color"], markersize=9,
                                          linestyle="none")
        axes[0, col].axhline(1.0, color="black", linewidth=0.8, linestyle=":")
        axes[0, col].set_title(MODE_LABELS[mode], fontsize=10)
        axes[0, col].set_ylabel("calls per executor CPU-s / same at 0 Hz, same mix")
        axes[1, col].set_ylabel("imbalance (more / less frequent state, by calls)\n"
                                "x at 1: one state got no call (undefined)", fontsize=8)
        axes[1, col].set_yscale("log")
        for row in range(2):
            ax = axes[row, col]
            ax.set_xscale("log")
            ax.grid(True, alpha=0.3)
            rates = sorted({r for v in tp.values() for r, _ in _series(v, "callpatch", mode, "calls_per_s")})
            ax.set_xticks(rates)
            ax.set_xticklabels([_fmt_hz(r) + " Hz" for r in rates])
        axes[1, col].set_xlabel("toggles per second achieved (requested: 1 kHz .. 1 MHz)")
    axes[0, 0].legend(fontsize=7)
    return _save(fig, out_dir, "probes_throughput", svg, top=0.9)


_INVOKE_GROUPS = (("direct_call", "#7f7f7f"), ("nop5_site", "#7f7f7f"), ("manual", "#d62728"),
                  ("patchable", "#1f77b4"), ("cyg", "#ff7f0e"))


def invocation(bench: loaders.Bench, machine: Machine, source: Path, out_dir: Path,
               svg: bool = True) -> list[Path]:
    inv = _entry(bench, "probes/invoke")
    vals = {} if inv is None else {k[:-len("/ticks_per_call")]: v for k, v in inv.items()
                                   if k.endswith("/ticks_per_call")}
    if not vals:
        raise Skip(f"{source.name} has no probes/invoke results")
    names = []
    for prefix, _ in _INVOKE_GROUPS:
        names += sorted(n for n in vals if n.startswith(prefix) and n not in names)
    names += sorted(n for n in vals if n not in names)
    colors = [next((c for p, c in _INVOKE_GROUPS if n.startswith(p)), "#7f7f7f") for n in names]
    fig, axes = _figure("Probe invocation cost per provider (empty probe function)",
                        _subtitle(bench, machine, source), figsize=(10.0, 1.8 + 0.4 * len(names)))
    ax = axes[0, 0]
    y = np.arange(len(names))
    v = [vals[n] for n in names]
    ax.barh(y, v, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=8)
    ax.invert_yaxis()
    direct = vals.get("direct_call")
    for yi, (n, t) in enumerate(zip(names, v)):
        text = f"  {t:.1f} ticks"
        if machine.tsc_hz:
            text += f" / {t * 1e9 / machine.tsc_hz:.1f} ns"
        if direct:
            text += f"  (+{t - direct:.1f} vs direct)"
        ax.text(t, yi, text, va="center", fontsize=7)
    if direct:
        ax.axvline(direct, color="black", linestyle="--", linewidth=0.9, label=f"direct call {direct:.1f} ticks")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlim(0, max(v) * 1.5)
    ax.set_xlabel("TSC ticks per call, loop included (median over interleaved rounds)")
    ax.grid(True, axis="x", alpha=0.3)
    return _save(fig, out_dir, "probes_invocation", svg, top=0.86 if len(names) > 8 else 0.8)
