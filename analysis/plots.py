"""Plot functions: each takes loaded data, writes one figure as PNG (+ SVG) and returns the
paths written, or raises Skip with the reason it cannot be drawn from the inputs present.

Uses matplotlib's Agg backend only; figures are closed after saving. Output is
deterministic for the same inputs (fixed SVG hash salt, no dates in metadata).
Not thread-safe (pyplot keeps global state).
"""
from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402

from . import stats  # noqa: E402
from .loaders import Bench, Sweep, TmaxConfig  # noqa: E402

matplotlib.rcParams["svg.hashsalt"] = "crossmod"
matplotlib.rcParams["font.size"] = 9

PROTOCOL_COLORS = {"wordpatch": "#1f77b4", "naive": "#d62728", "callpatch": "#2ca02c",
                   "aligned": "#9467bd", "sync-core": "#ff7f0e"}
STRADDLE_COLORS = {0: "#7f7f7f", 1: "#1f77b4", 2: "#ff7f0e", 3: "#2ca02c", 4: "#d62728"}
BOUND_MARKER = "v"


class Skip(Exception):
    """This plot cannot be drawn from the inputs present; the message says why."""


@dataclass
class Machine:
    slug: str
    brand: str = ""
    tsc_hz: Optional[float] = None

    def subtitle(self, *sources) -> str:
        """sources: Paths, or strings already naming the inputs (Sweep.source_label)."""
        who = self.slug + (f" — {self.brand}" if self.brand else "")
        files = ", ".join(p if isinstance(p, str) else p.name for p in sources if p is not None)
        return who + (f"\nfrom {files}" if files else "")

    def ticks_to_ns(self, ticks: float) -> Optional[float]:
        return ticks * 1e9 / self.tsc_hz if self.tsc_hz else None


def _figure(title: str, subtitle: str, nrows: int = 1, ncols: int = 1,
            figsize: tuple[float, float] = (9.0, 5.8), **kw):
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False, **kw)
    fig.suptitle(title, fontsize=12, fontweight="bold", y=0.995)
    # Wrap to the figure width (~16 characters per inch at 8 pt): pooled sweeps make long
    # source lists that would otherwise run off both edges.
    width = max(60, int(figsize[0] * 16))
    wrapped = "\n".join(textwrap.fill(line, width) for line in subtitle.split("\n"))
    fig.text(0.5, 0.935 if figsize[1] < 7 else 0.955, wrapped, ha="center", va="top",
             fontsize=8, color="#444444")
    return fig, axes


def _save(fig, out_dir: Path, name: str, svg: bool, top: float = 0.86,
          tight: bool = True) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    if tight:
        fig.tight_layout(rect=(0, 0, 1, top))
    png = out_dir / f"{name}.png"
    fig.savefig(png, dpi=110, metadata={"Software": None})
    written = [png]
    if svg:
        path = out_dir / f"{name}.svg"
        fig.savefig(path, metadata={"Date": None})
        written.append(path)
    plt.close(fig)
    return written


def _fmt_p(p: float) -> str:
    return f"{p:.1e}" if p < 0.01 else f"{p:.3f}"


def _wait_scale(ax, waits: list[float]) -> None:
    """Linear wait axis for the usual grids; symlog when the waits span more than ~two
    orders of magnitude (a search ladder that doubled far past the boundary), keeping W=0."""
    positive = [w for w in waits if w > 0]
    if positive and max(positive) / min(positive) > 64:
        ax.set_xscale("symlog", linthresh=min(positive), linscale=0.5)


def _ns_axis(ax, machine: Machine) -> None:
    """Second x axis in nanoseconds above a wait axis in TSC ticks."""
    if not machine.tsc_hz:
        return
    k = 1e9 / machine.tsc_hz
    sec = ax.secondary_xaxis("top", functions=(lambda t: t * k, lambda n: n / k))
    if ax.get_xscale() == "symlog":
        sec.set_xscale("symlog", linthresh=ax.xaxis.get_transform().linthresh * k, linscale=0.5)
    sec.set_xlabel(f"wait W (ns, at TSC {machine.tsc_hz / 1e9:.3g} GHz)")


def _rate_series(ax, groups: list[dict], x_key: str, color, label: str, floor: float,
                 band: bool = True, x_offset: float = 0.0, linestyle: str = "-",
                 trend: bool = True, bound_offset: float = 0.0,
                 bound_factor: float = 1.0) -> None:
    """Draw failure rate vs x: filled circles with Clopper-Pearson 95% intervals where
    failures occurred, downward triangles at the one-sided 95% upper bound where none did."""
    xs = np.array([g[x_key] for g in groups], dtype=float) + x_offset
    rates = np.array([g["rate"] for g in groups])
    lo = np.array([max(g["ci_low"], floor) for g in groups])
    hi = np.array([g["ci_high"] for g in groups])
    zero = np.array([g["zero"] for g in groups])
    bounds = np.array([g["upper_bound_one_sided"] for g in groups])
    nz = ~zero
    # A faint line through every point (rate, or bound where zero) shows the trend;
    # markers say which kind each point is.
    y_all = np.where(zero, bounds, rates)
    if trend:
        ax.plot(xs, y_all, color=color, linewidth=0.8, alpha=0.35, linestyle=":")
    if nz.any():
        ax.plot(xs[nz], rates[nz], color=color, marker="o", markersize=4.5, linewidth=1.4,
                linestyle=linestyle, label=label)
        ax.errorbar(xs[nz], rates[nz], yerr=[rates[nz] - lo[nz], hi[nz] - rates[nz]],
                    fmt="none", ecolor=color, elinewidth=0.9, capsize=2.5, alpha=0.8)
        if band and nz.sum() > 1:
            ax.fill_between(xs, lo, hi, where=nz, color=color, alpha=0.12, linewidth=0,
                            interpolate=False)
    else:
        ax.plot([], [], color=color, marker="o", linestyle=linestyle, label=label)
    if zero.any():
        # bound_offset nudges coinciding bound markers of several series apart.
        ax.plot(xs[zero] * bound_factor + bound_offset, bounds[zero], linestyle="none", marker=BOUND_MARKER, markersize=6,
                markerfacecolor="white", markeredgecolor=color, markeredgewidth=1.3)


def _legend_kinds() -> list:
    return [
        Line2D([], [], color="#555555", marker="o", markersize=4.5, linestyle="-",
               label="failures / exposed toggles, 95% Clopper-Pearson interval"),
        Line2D([], [], color="#555555", marker=BOUND_MARKER, markersize=6, markerfacecolor="white",
               linestyle="none", label="0 failures: one-sided 95% upper bound (not a rate)"),
    ]


def _floor(groups: list[dict]) -> float:
    vals = [g["upper_bound_one_sided"] if g["zero"] else g["rate"] for g in groups]
    vals += [g["ci_low"] for g in groups if g["ci_low"] > 0]
    vals = [v for v in vals if v > 0]
    return max(min(vals) / 4.0, 1e-12) if vals else 1e-6


def _tmax_lines(ax, tmax: Optional[TmaxConfig], sweep_tmax: Optional[dict],
                to_x=lambda t: t, color="black", prefix: str = "") -> list:
    handles = []
    cfg_obs = tmax.observed_ticks if tmax else None
    if tmax and tmax.observed_ticks is not None:
        ax.axvline(to_x(tmax.observed_ticks), color=color, linestyle="--", linewidth=1.2)
        handles.append(Line2D([], [], color=color, linestyle="--",
                              label=f"{prefix}Tmax observed = {tmax.observed_ticks:g} ticks"
                              + (f" ({tmax.observed_ns:g} ns)" if tmax.observed_ns else "")))
    if tmax and tmax.recommended_ticks is not None:
        ax.axvline(to_x(tmax.recommended_ticks), color=color, linestyle="-.", linewidth=1.2)
        handles.append(Line2D([], [], color=color, linestyle="-.",
                              label=f"{prefix}Tmax recommended = {tmax.recommended_ticks:g} ticks"
                              + (f" ({tmax.recommended_ns:g} ns)" if tmax.recommended_ns else "")))
    if sweep_tmax and sweep_tmax.get("observed_ticks") is not None \
            and sweep_tmax["observed_ticks"] != cfg_obs:
        t = sweep_tmax["observed_ticks"]
        dotted = "#888888" if color == "black" else color
        ax.axvline(to_x(t), color=dotted, linestyle=":", linewidth=1.4)
        handles.append(Line2D([], [], color=dotted, linestyle=":",
                              label=f"{prefix}Tmax observed in the sweep data = {t:g} ticks"))
    return handles


# ---------------------------------------------------------------------------- sweep plots

def failure_rate(sweep: Sweep, machine: Machine, tmax: Optional[TmaxConfig], out_dir: Path,
                 svg: bool = True) -> list[Path]:
    cells = [r for r in sweep.valid if r["protocol"] == "wordpatch"]
    if not cells:
        raise Skip(f"{sweep.path.name} has no valid wordpatch cells")
    groups = stats.aggregate(cells, ("straddle", "wait_ticks"))
    floor = _floor(groups)
    sweep_tmax = stats.tmax_from_cells(sweep.rows)
    fig, axes = _figure("wordpatch: failure probability per exposed toggle vs wait W",
                        machine.subtitle(sweep.source_label) + f"; cells of equal (W, S) pooled over executors, "
                        f"placements, reps and phases; {len(sweep.excluded)} blind/error cells excluded",
                        figsize=(10.0, 7.6))
    ax = axes[0, 0]
    straddles = sorted({g["straddle"] for g in groups})
    waits = [g["wait_ticks"] for g in groups]
    _wait_scale(ax, waits)
    symlog = ax.get_xscale() == "symlog"
    nudge = 0.0 if symlog else 0.006 * (max(waits) - min(waits) or 1)
    for k, s in enumerate(straddles):
        sub = [g for g in groups if g["straddle"] == s]
        fails = sum(g["failures"] for g in sub)
        exposed = sum(g["exposed"] for g in sub)
        _rate_series(ax, sub, "wait_ticks", STRADDLE_COLORS.get(s, None), floor=floor,
                     label=f"S = {s} ({s} byte{'s' if s != 1 else ''} before the line): "
                           f"{fails:,} failures in {exposed:,} exposed",
                     bound_offset=(k - (len(straddles) - 1) / 2) * nudge,
                     bound_factor=1.0 + (0.03 * (k - (len(straddles) - 1) / 2) if symlog else 0.0))
    handles = _tmax_lines(ax, tmax, sweep_tmax)
    c2c = (tmax.c2c_one_way_ticks if tmax and tmax.c2c_one_way_ticks else None) or _c2c_ticks(sweep.context)
    if c2c:
        ax.axvline(c2c, color="#7f7f7f", linestyle=(0, (1, 3)), linewidth=1.2)
        handles.append(Line2D([], [], color="#7f7f7f", linestyle=(0, (1, 3)),
                              label=f"core-to-core line transfer, one way = {c2c:g} ticks (Tmax floor)"))
    if sweep_tmax["observed_ticks"] is not None:
        claim = (f"wordpatch at W ≥ {sweep_tmax['observed_ticks']} ticks ({sweep.scope}): 0 failures in "
                 f"{sweep_tmax['exposed_at_or_above']:,} exposed toggles,\n"
                 f"< {_fmt_p(sweep_tmax['cluster_bound_95'])} of {sweep_tmax['cluster_unit']} tear at 95% "
                 f"({sweep_tmax['clusters_at_or_above']} {sweep_tmax['cluster_unit']}; "
                 f"p < {_fmt_p(sweep_tmax['failure_bound_95'])} per toggle only if toggles were independent)")
    elif sweep_tmax["above_tested_range"]:
        claim = (f"failures up to the largest tested wait ({sweep_tmax['max_failing_ticks']} ticks): "
                 "Tmax lies above the tested range")
    else:
        claim = f"no zero-failure evidence in {sweep.scope}"
    low = sum(r["low_exposure"] for r in cells)
    if low:
        claim += (f"\n{low} of {len(cells)} wordpatch cells had low exposure: plotted, "
                  "but not evidence for Tmax")
    ax.text(0.99, 0.98, claim, transform=ax.transAxes, ha="right", va="top", fontsize=7.5,
            bbox=dict(facecolor="white", edgecolor="#999999", alpha=0.9))
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor, top=1.5)
    if symlog:
        ax.set_xlim(left=-0.1 * min(w for w in waits if w > 0))
    ax.set_xlabel("wait W between patch steps (TSC ticks)")
    ax.set_ylabel("failure probability per exposed toggle (log)")
    ax.grid(True, which="major", alpha=0.3)
    _ns_axis(ax, machine)
    line_handles, _ = ax.get_legend_handles_labels()
    # Below the axes: low failure rates put data in every corner of the plot.
    ax.legend(handles=line_handles + _legend_kinds() + handles, fontsize=7.5, loc="upper center",
              bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    return _save(fig, out_dir, "failure_rate", svg, top=0.90)


def _c2c_ticks(context: dict) -> Optional[float]:
    """Measured one-way core-to-core line transfer from the sweep context, if recorded
    (machine.c2c.one_way_ticks, or machine.c2c_one_way_ticks)."""
    m = context.get("machine", {}) if isinstance(context.get("machine"), dict) else {}
    c2c = m.get("c2c")
    value = c2c.get("one_way_ticks") if isinstance(c2c, dict) and c2c.get("ok", True) else None
    value = value if value is not None else m.get("c2c_one_way_ticks")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        return None
    return float(value)


def _y_key(cells: list[dict]) -> tuple[str, str]:
    if len({r["straddle"] for r in cells}) == 1 and len({r["site_offset"] for r in cells}) > 1:
        return "site_offset", "site offset in the cache line (bytes)"
    return "straddle", "straddle S (bytes before the line boundary)"


def global_rate_floor(sweep: Sweep) -> float:
    groups = stats.aggregate(sweep.valid, ("protocol", "straddle", "site_offset", "wait_ticks",
                                           "executors", "placement"))
    return _floor(groups)


def heatmap(sweep: Sweep, machine: Machine, protocol: str, out_dir: Path, svg: bool = True,
            floor: Optional[float] = None) -> list[Path]:
    cells = [r for r in sweep.valid if r["protocol"] == protocol]
    if not cells:
        raise Skip(f"{sweep.path.name} has no valid {protocol} cells")
    excluded = [r for r in sweep.excluded if r["protocol"] == protocol]
    ykey, ylabel = _y_key(cells)
    facets = sorted({(r["executors"], r["placement"]) for r in cells})
    waits = sorted({r["wait_ticks"] for r in cells})
    ys = sorted({r[ykey] for r in cells})
    groups_all = stats.aggregate(cells, ("executors", "placement", ykey, "wait_ticks"))
    floor = floor if floor is not None else _floor(groups_all)
    vmax = max([g["rate"] for g in groups_all if not g["zero"]] + [0.1])
    norm = LogNorm(vmin=floor, vmax=max(vmax, floor * 10))
    cmap = plt.get_cmap("viridis").copy()
    cmap.set_bad("#e6e6e6")

    facet_w = 1.0 + 0.62 * len(waits)
    facet_h = 1.3 + 0.55 * len(ys)
    ncols = max(1, min(len(facets), int(15.0 // facet_w)))
    nrows = math.ceil(len(facets) / ncols)
    fig_w, fig_h = max(9.0, ncols * facet_w + 2.2), nrows * facet_h + 1.95
    fig, axes = _figure(f"{protocol}: failure rate per exposed toggle, wait W × "
                        f"{'site offset' if ykey == 'site_offset' else 'straddle S'}",
                        machine.subtitle(sweep.source_label) + f"; {len(excluded)} blind/error cells excluded",
                        nrows, ncols, figsize=(fig_w, fig_h), sharey=True)
    annotate = len(waits) * len(ys) <= 90
    image = None
    for i, (executors, placement) in enumerate(facets):
        ax = axes[i // ncols, i % ncols]
        grid = np.full((len(ys), len(waits)), np.nan)
        sub = [g for g in groups_all if g["executors"] == executors and g["placement"] == placement]
        for g in sub:
            yi, xi = ys.index(g[ykey]), waits.index(g["wait_ticks"])
            if not g["zero"]:
                grid[yi, xi] = g["rate"]
        image = ax.imshow(np.ma.masked_invalid(grid), norm=norm, cmap=cmap, aspect="auto",
                          origin="lower", interpolation="nearest")
        for g in sub:
            yi, xi = ys.index(g[ykey]), waits.index(g["wait_ticks"])
            flags = ("*" if g["stopped_early"] else "") + ("°" if g["low_exposure"] else "")
            if g["zero"]:
                ax.add_patch(Rectangle((xi - 0.5, yi - 0.5), 1, 1, facecolor="white",
                                       edgecolor="#9a9a9a", hatch="////", linewidth=0.0))
                if annotate:
                    ax.text(xi, yi, f"0/{g['exposed']}{flags}\n<{_fmt_p(g['upper_bound_one_sided'])}",
                            ha="center", va="center", fontsize=5.5, color="#222222",
                            bbox=dict(facecolor="white", edgecolor="none", pad=0.5, alpha=0.8))
            elif annotate:
                light = norm(g["rate"]) < 0.6
                ax.text(xi, yi, f"{_fmt_p(g['rate'])}\n{g['failures']}/{g['exposed']}{flags}",
                        ha="center", va="center", fontsize=5.5, color="white" if light else "black")
        ax.set_xticks(range(len(waits)))
        ax.set_xticklabels([str(w) for w in waits], rotation=60, fontsize=7)
        ax.set_yticks(range(len(ys)))
        if ykey == "site_offset":
            line = int(sweep.context.get("machine", {}).get("cache_line") or 64)
            short = {"aligned, within 8 bytes": "within 8 B", "aligned, crosses an 8-byte boundary":
                     "crosses 8 B", "aligned, crosses a 16-byte boundary": "crosses 16 B"}
            ax.set_yticklabels([f"{y}\n({short[_aligned_class(y, line)]})" for y in ys], fontsize=7)
        else:
            ax.set_yticklabels([str(y) for y in ys])
        ax.set_title(f"executors = {executors}, placement = {placement}", fontsize=9)
        ax.set_xlabel("wait W (TSC ticks)")
        if i % ncols == 0:
            ax.set_ylabel(ylabel)
    for j in range(len(facets), nrows * ncols):
        axes[j // ncols, j % ncols].set_visible(False)
    top, bottom = 1.0 - 1.25 / fig_h, 1.2 / fig_h
    left, right = (1.5 if ykey == "site_offset" else 1.2) / fig_w, 1.0 - 1.0 / fig_w
    fig.subplots_adjust(top=top, bottom=bottom, left=left, right=right,
                        hspace=1.0 / facet_h * 1.6, wspace=0.12)
    cax = fig.add_axes((right + 0.25 / fig_w, bottom, 0.15 / fig_w, top - bottom))
    cbar = fig.colorbar(image, cax=cax)
    cbar.set_label("failures per exposed toggle (log)")
    legend = [Patch(facecolor="white", edgecolor="#9a9a9a", hatch="////",
                    label="0 failures (text: 0/exposed toggles, one-sided 95% upper bound)"),
              Patch(facecolor="#e6e6e6", label="not tested")]
    if annotate:
        legend += [Patch(facecolor="none", edgecolor="none",
                         label="*  a cell stopped early at its failure limit"),
                   Patch(facecolor="none", edgecolor="none",
                         label="°  a cell had low exposure (not Tmax evidence)")]
    fig.legend(handles=legend, loc="lower left", fontsize=7, ncol=2, frameon=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"heatmap_{protocol}"
    written = [out_dir / f"{name}.png"]
    fig.savefig(written[0], dpi=110, metadata={"Software": None})
    if svg:
        written.append(out_dir / f"{name}.svg")
        fig.savefig(written[1], metadata={"Date": None})
    plt.close(fig)
    return written


def _aligned_class(offset: int, line: int) -> str:
    o = offset % line
    if (o % 16) + 5 > 16:
        return "aligned, crosses a 16-byte boundary"
    if (o % 8) + 5 > 8:
        return "aligned, crosses an 8-byte boundary"
    return "aligned, within 8 bytes"


def controls(sweep: Sweep, machine: Machine, out_dir: Path, svg: bool = True) -> list[Path]:
    line = int(sweep.context.get("machine", {}).get("cache_line") or 64)
    control_protocols = ("naive", "aligned", "callpatch", "sync-core")
    cells = [dict(r) for r in sweep.valid if r["protocol"] in control_protocols]
    if not cells:
        raise Skip(f"{sweep.path.name} has no valid control cells (naive, aligned, callpatch, sync-core)")
    waits = sorted({r["wait_ticks"] for r in cells})
    reference = [dict(r) for r in sweep.valid if r["protocol"] == "wordpatch" and r["wait_ticks"] in waits]
    for r in cells + reference:
        r["series"] = _aligned_class(r["site_offset"], line) if r["protocol"] == "aligned" else r["protocol"]
    order = ["wordpatch", "naive", "aligned, within 8 bytes", "aligned, crosses an 8-byte boundary",
             "aligned, crosses a 16-byte boundary", "callpatch", "sync-core"]
    groups = stats.aggregate(cells + reference, ("series", "wait_ticks"))
    floor = _floor(groups)
    present = [s for s in order if any(g["series"] == s for g in groups)]
    fig, axes = _figure("Controls: failure probability per exposed toggle at the same waits",
                        machine.subtitle(sweep.source_label) + "; pooled over straddle, executors and "
                        "placements (wordpatch shown for reference)", figsize=(10.0, 7.4))
    ax = axes[0, 0]
    width = 0.8 / max(1, len(present))
    aligned_colors = {"aligned, within 8 bytes": "#9467bd", "aligned, crosses an 8-byte boundary": "#c5b0d5",
                      "aligned, crosses a 16-byte boundary": "#8c564b"}
    for k, series in enumerate(present):
        sub = [g for g in groups if g["series"] == series]
        for g in sub:
            g["x"] = waits.index(g["wait_ticks"])
        fails = sum(g["failures"] for g in sub)
        exposed = sum(g["exposed"] for g in sub)
        if fails:
            summary = f"{fails:,} failures in {exposed:,} exposed"
        else:
            summary = (f"0 in {exposed:,} exposed, p < {_fmt_p(stats.zero_failure_upper_bound(exposed))} "
                       "if toggles were independent")
        color = aligned_colors.get(series, PROTOCOL_COLORS.get(series, "#333333"))
        _rate_series(ax, sub, "x", color, f"{series}: {summary}", floor, band=False,
                     x_offset=(k - (len(present) - 1) / 2) * width,
                     linestyle="--" if series == "wordpatch" else "-", trend=False)
    ax.set_xticks(range(len(waits)))
    labels = []
    for w in waits:
        ns = machine.ticks_to_ns(w)
        labels.append(f"{w}" + (f"\n({ns:.0f} ns)" if ns is not None else ""))
    ax.set_xticklabels(labels)
    ax.set_xlim(-0.6, len(waits) - 0.4)
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor, top=1.5)
    ax.set_xlabel("wait W between patch steps (TSC ticks; ns)")
    ax.set_ylabel("failure probability per exposed toggle (log)")
    ax.grid(True, axis="y", alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + _legend_kinds(), fontsize=7.5, loc="upper center",
              bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    return _save(fig, out_dir, "controls", svg, top=0.90)


# ---------------------------------------------------------------------------- bench plots

_OP_FAMILIES = (("wordpatch", "wordpatch"), ("callpatch", "callpatch"),
                ("synccore", "sync-core (membarrier)"), ("", "baselines"))


def _family(op: str) -> str:
    for prefix, name in _OP_FAMILIES:
        if prefix and op.startswith(prefix):
            return name
    return "baselines"


def _op_order(keys) -> list[str]:
    ops = sorted({op for op, _ in keys})
    return sorted(ops, key=lambda op: ([n for _, n in _OP_FAMILIES].index(_family(op)), op))


def latency_hist(samples: dict, machine: Machine, source: Path, out_dir: Path,
                 svg: bool = True) -> list[Path]:
    """One histogram per op, log-spaced bins over that op's own range (latencies span
    10 ticks to tens of ms across ops); y is the fraction of samples so runs with
    different sample counts compare."""
    samples = {k: np.asarray(v, dtype=float) for k, v in samples.items() if len(v)}
    if not samples:
        raise Skip(f"{source.name} has no samples")
    ops = _op_order(samples)
    ncols = 4
    nrows = math.ceil(len(ops) / ncols)
    fig, axes = _figure("Patch latency per operation (histograms of per-sample TSC ticks)",
                        machine.subtitle(source) + "; each panel has its own log x range, ending at the largest p99.5 "
                        "(samples above it counted as off-scale); notes in ticks",
                        nrows, ncols, figsize=(15.0, 1.6 + 2.3 * nrows))
    execs = sorted({e for _, e in samples})
    cmap = plt.get_cmap("tab10")
    for i, op in enumerate(ops):
        ax = axes[i // ncols, i % ncols]
        present = [(j, e, samples[(op, e)]) for j, e in enumerate(execs) if (op, e) in samples]
        # The x range ends at the largest p99.5 so rare multi-millisecond outliers (preemption,
        # noisy hosts) do not squash the body into one bin; the CDF plot shows the full tail.
        lo = max(1.0, min(float(d.min()) for _, _, d in present))
        hi = max(float(np.percentile(d, 99.5)) for _, _, d in present)
        bins = np.geomspace(lo, max(hi * 1.01, lo * 2), 45)
        notes = []
        for j, e, data in present:
            shown = data[data <= bins[-1]]
            weights = np.full(len(shown), 1.0 / len(data))
            ax.hist(shown, bins=bins, weights=weights, histtype="stepfilled", alpha=0.35, color=cmap(j))
            ax.hist(shown, bins=bins, weights=weights, histtype="step", color=cmap(j))
            p50, p99 = (float(v) for v in np.percentile(data, [50, 99]))
            ns = machine.ticks_to_ns(p50)
            above = len(data) - len(shown)
            notes.append(f"N={e}: p50 {p50:,.0f}" + (f" ({ns:,.0f} ns)" if ns is not None else "")
                         + f", p99 {p99:,.0f}" + (f", {above} off-scale" if above else ""))
        ax.set_xscale("log")
        ax.set_title(op, fontsize=8.5, y=1.0)  # fixed y: auto title placement is slow
        ax.text(0.98, 0.95, "\n".join(notes), transform=ax.transAxes, ha="right", va="top",
                fontsize=6, bbox=dict(facecolor="white", alpha=0.8, edgecolor="none"))
        ax.set_ylim(top=ax.get_ylim()[1] * 1.35)   # room for the notes
        ax.tick_params(which="both", labelsize=6.5)
        if i % ncols == 0:
            ax.set_ylabel("fraction of samples")
        ax.set_xlabel("latency (TSC ticks, log)", fontsize=7.5)
    for j in range(len(ops), nrows * ncols):
        axes[j // ncols, j % ncols].set_visible(False)
    handles = [Patch(facecolor=cmap(j), alpha=0.5, label=f"{e} executor(s)") for j, e in enumerate(execs)]
    fig.legend(handles=handles, loc="upper right", fontsize=8, frameon=False)
    # tight_layout over a dozen log axes costs seconds; the grid is regular, so fixed margins
    # in inches do the same job.
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.05, right=0.99, top=1.0 - 1.25 / height, bottom=0.6 / height,
                        hspace=0.62, wspace=0.2)
    return _save(fig, out_dir, "latency_hist", svg, tight=False)


def latency_cdf(samples: dict, machine: Machine, source: Path, out_dir: Path,
                svg: bool = True) -> list[Path]:
    samples = {k: np.sort(np.asarray(v, dtype=float)) for k, v in samples.items() if len(v)}
    if not samples:
        raise Skip(f"{source.name} has no samples")
    families = [name for _, name in _OP_FAMILIES if any(_family(op) == name for op, _ in samples)]
    ncols = 2
    nrows = math.ceil(len(families) / ncols)
    fig, axes = _figure("Patch latency per operation: cumulative distributions",
                        machine.subtitle(source) + "; all panels share the log x axis",
                        nrows, ncols, figsize=(12.0, 1.8 + 3.4 * nrows), sharex=True, sharey=True)
    execs = sorted({e for _, e in samples})
    styles = ["-", "--", ":", "-."]
    for i, fam in enumerate(families):
        ax = axes[i // ncols, i % ncols]
        ops = [op for op in _op_order(samples) if _family(op) == fam]
        cmap = plt.get_cmap("tab10")
        for k, op in enumerate(ops):
            for j, e in enumerate(execs):
                data = samples.get((op, e))
                if data is None:
                    continue
                y = np.arange(1, len(data) + 1) / len(data)
                if len(data) > 1500:
                    # 1500 evenly spaced ranks keep the curve exact to 0.07% and keep the
                    # figure (and its SVG) small for runs with 10^5 samples per op.
                    idx = np.unique(np.linspace(0, len(data) - 1, 1500).astype(int))
                    data, y = data[idx], y[idx]
                ax.step(data, y, where="post", color=cmap(k % 10), linestyle=styles[j % len(styles)],
                        linewidth=1.2, label=f"{op}, {e} exec")
        ax.set_xscale("log")
        ax.set_ylim(0, 1.02)
        ax.set_title(fam)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=6.5, loc="best", ncol=1 if len(ops) * len(execs) <= 10 else 2)
        ax.set_xlabel("latency (TSC ticks, log)")
        ax.xaxis.set_tick_params(labelbottom=True)
        if i % ncols == 0:
            ax.set_ylabel("fraction of samples ≤ latency")
    for j in range(len(families), nrows * ncols):
        axes[j // ncols, j % ncols].set_visible(False)
    return _save(fig, out_dir, "latency_cdf", svg, top=0.93)


def _bench_subtitle(bench: Bench, machine: Machine, extra: str = "") -> str:
    """Subtitle for bench plots: which Tmax the engine ran with, flagged when it was the
    built-in default rather than a calibrated value."""
    ctx = bench.context
    text = machine.subtitle(bench.path)
    if ctx.get("tmax_ticks") is not None:
        text += f"; engine Tmax {ctx['tmax_ticks']} ticks"
        if ctx.get("tmax_is_default") in (True, "true", 1):
            text += " (BUILT-IN DEFAULT, not calibrated)"
        elif ctx.get("tmax_source"):
            text += f" from {ctx['tmax_source']}"
    return text + extra


def _throughput_table(bench: Bench) -> dict[tuple[str, int], dict[float, dict]]:
    table: dict[tuple[str, int], dict[float, dict]] = {}
    for e in bench.group("throughput"):
        if "calls_per_s" not in e.values or "rate" not in e.params:
            continue
        key = (e.subject, int(e.params.get("executors", 1)))
        table.setdefault(key, {})[e.params["rate"]] = e.values
    return table


_THROUGHPUT_METRICS = (
    ("calls_per_s", "executor calls/s (wall clock)"),
    # On a shared or oversubscribed host the executors do not get whole CPUs; calls per
    # executor CPU-second separates the cost of toggling from the scheduler's share.
    ("calls_per_executor_cpu_s", "executor calls per executor CPU-second"),
)


def _fmt_hz(rate: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if rate >= scale:
            return f"{rate / scale:g}{unit}"
    return f"{rate:g}"


def throughput_rate(bench: Bench, machine: Machine, out_dir: Path, svg: bool = True) -> list[Path]:
    table = _throughput_table(bench)
    if not table:
        raise Skip(f"{bench.path.name} has no throughput/<protocol>/rate:<hz>/executors:<n> results")
    metrics = [(k, label) for k, label in _THROUGHPUT_METRICS
               if any(k in v for by_rate in table.values() for v in by_rate.values())]
    fig, axes = _figure("Executor throughput while toggling, relative to no toggling (0 Hz)",
                        _bench_subtitle(bench, machine, "; point labels: requested rate"),
                        1, len(metrics), figsize=(7.0 * len(metrics), 6.0))
    markers = ["o", "s", "^", "D", "v", "P"]
    execs = sorted({e for _, e in table})
    skipped: set[str] = set()
    for m, (metric, label) in enumerate(metrics):
        ax = axes[0, m]
        ys_all = []
        for (protocol, e), by_rate in sorted(table.items()):
            base = by_rate.get(0.0)
            if not base or not base.get(metric):
                skipped.add(f"{protocol}/{e}")
                continue
            rates = sorted(r for r in by_rate if r > 0 and metric in by_rate[r])
            xs = [by_rate[r].get("achieved_toggles_per_s") or r for r in rates]
            # Newer bench files carry the 0 Hz rate at each run's own state mix (1.0 =
            # toggling is free); older ones only the always-active 0 Hz run.
            ys = [by_rate[r][metric] / (by_rate[r].get(f"{metric}_same_mix_0hz") or base[metric]) for r in rates]
            ys_all += ys
            color = PROTOCOL_COLORS.get(protocol, "#333333")
            ax.plot(xs, ys, color=color, marker=markers[execs.index(e) % len(markers)], linewidth=1.3,
                    linestyle=["-", "--", ":", "-."][execs.index(e) % 4],
                    label=f"{protocol}, {e} executor{'s' if e != 1 else ''}")
            for x, y, r in zip(xs, ys, rates):
                ax.annotate(_fmt_hz(r), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=6,
                            color=color)
        if not ys_all:
            continue
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.annotate("1.0 = same calls without toggling (0 Hz, same state mix)", (0.99, 1.0),
                    xycoords=("axes fraction", "data"),
                    ha="right", va="bottom", fontsize=7)
        ax.set_xscale("log")
        positive = [y for y in ys_all if y > 0]
        if positive and min(positive) < 0.05:
            ax.set_yscale("log")    # a stalled executor is orders of magnitude down
        ax.set_xlabel("achieved toggle rate (toggles/s, log)")
        ax.set_ylabel(f"{label}, relative to 0 Hz")
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=7.5, loc="lower left", ncol=2)
    if not any(ax.lines for ax in axes.ravel()):
        plt.close(fig)
        raise Skip(f"{bench.path.name}: no throughput series has a rate:0 baseline to normalise to")
    if skipped:
        axes[0, 0].text(0.01, 0.99, "no 0 Hz baseline, not shown: " + ", ".join(sorted(skipped)),
                        transform=axes[0, 0].transAxes, fontsize=7, color="#aa0000", va="top")
    return _save(fig, out_dir, "throughput_rate", svg, top=0.88)


def throughput_executors(bench: Bench, machine: Machine, out_dir: Path, svg: bool = True) -> list[Path]:
    table = _throughput_table(bench)
    if not table:
        raise Skip(f"{bench.path.name} has no throughput/<protocol>/rate:<hz>/executors:<n> results")
    protocols = sorted({p for p, _ in table})
    rates = sorted({r for by_rate in table.values() for r in by_rate})
    fig, axes = _figure("Executor throughput vs number of executors, per toggle rate",
                        _bench_subtitle(bench, machine, "; calls/s summed over all executors"),
                        1, len(protocols), figsize=(max(7.0, 4.2 * len(protocols)), 5.2),
                        sharey=True)
    cmap = plt.get_cmap("viridis")
    for i, protocol in enumerate(protocols):
        ax = axes[0, i]
        execs = sorted(e for p, e in table if p == protocol)
        for k, rate in enumerate(rates):
            pts = [(e, table[(protocol, e)][rate]["calls_per_s"]) for e in execs
                   if rate in table[(protocol, e)]]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], marker="o",
                    color=cmap(k / max(1, len(rates) - 1) * 0.9),
                    label="no toggling (0 Hz)" if rate == 0 else f"{rate:,.0f} toggles/s")
        ax.set_title(protocol)
        ax.set_xlabel("executors")
        ax.set_xticks(execs)
        ax.grid(True, alpha=0.3)
        if i == 0:
            ax.set_ylabel("executor throughput (million calls/s)")
        ax.legend(fontsize=7, loc="upper left")
    return _save(fig, out_dir, "throughput_executors", svg, top=0.86)


_INVOKE_ORDER = ("empty_loop", "direct_call", "flag_guard_off", "flag_guard_on", "active_site",
                 "nop5_site", "nop5_prefixed_site")
_INVOKE_NOTES = {
    "empty_loop": "loop overhead only", "direct_call": "plain call (baseline)",
    "flag_guard_off": "static probe, flag off", "flag_guard_on": "static probe, flag on",
    "active_site": "patched site, probe on", "nop5_site": "patched site, probe off (5-byte NOP)",
    "nop5_prefixed_site": "probe off, prefixed NOP",
}


def invocation(bench: Bench, machine: Machine, out_dir: Path, svg: bool = True) -> list[Path]:
    entries = {e.subject: e.values for e in bench.group("invoke") if "ns_per_call" in e.values}
    if not entries:
        raise Skip(f"{bench.path.name} has no invoke/<variant> results with ns_per_call")
    names = [n for n in _INVOKE_ORDER if n in entries] + sorted(n for n in entries if n not in _INVOKE_ORDER)
    values = [entries[n]["ns_per_call"] for n in names]
    fig, axes = _figure("Invocation cost per call: probe sites against the baselines",
                        _bench_subtitle(bench, machine), figsize=(10.0, 1.8 + 0.38 * len(names)))
    ax = axes[0, 0]
    colors = []
    for n in names:
        if n in ("empty_loop", "direct_call"):
            colors.append("#7f7f7f")
        elif n.startswith("flag_guard"):
            colors.append("#bcbd22")
        elif n.startswith("callpatch"):
            colors.append(PROTOCOL_COLORS["callpatch"])
        else:
            colors.append(PROTOCOL_COLORS["wordpatch"])
    y = np.arange(len(names))
    ax.barh(y, values, color=colors)
    ax.set_yticks(y)
    ax.set_yticklabels([f"{n}\n({_INVOKE_NOTES[n]})" if n in _INVOKE_NOTES else n for n in names],
                       fontsize=7.5)
    ax.invert_yaxis()
    direct = entries.get("direct_call", {}).get("ns_per_call")
    for yi, (n, v) in enumerate(zip(names, values)):
        ticks = entries[n].get("ticks_per_call")
        text = f"{v:.2f} ns" + (f" / {ticks:.1f} ticks" if ticks is not None else "")
        if direct:
            text += f"  ({v / direct:.2f}× direct call)"
        ax.text(v, yi, "  " + text, va="center", fontsize=7)
    for base, style in (("empty_loop", ":"), ("direct_call", "--")):
        if base in entries:
            ax.axvline(entries[base]["ns_per_call"], color="black", linestyle=style, linewidth=0.9,
                       label=f"{base} = {entries[base]['ns_per_call']:.2f} ns")
    ax.set_xlim(0, max(values) * 1.6)
    ax.set_xlabel("time per call (ns)")
    ax.grid(True, axis="x", alpha=0.3)
    legend = [Patch(color="#7f7f7f", label="baselines"), Patch(color="#bcbd22", label="flag-guarded static probe"),
              Patch(color=PROTOCOL_COLORS["wordpatch"], label="wordpatch site"),
              Patch(color=PROTOCOL_COLORS["callpatch"], label="callpatch site (off), split s0..s4")]
    lines, _ = ax.get_legend_handles_labels()
    ax.legend(handles=legend + lines, fontsize=7, loc="lower right")
    return _save(fig, out_dir, "invocation", svg, top=0.88 if len(names) > 8 else 0.82)


# ---------------------------------------------------------------------------- overlay

def tmax_overlay(machines: list[tuple[Machine, Sweep, Optional[TmaxConfig]]], out_dir: Path,
                 svg: bool = True) -> list[Path]:
    """wordpatch failure rate vs wait in ns (ticks differ between machines), one line per
    machine, with each machine's Tmax as vertical lines in its colour."""
    usable = [(m, s, t) for m, s, t in machines
              if any(r["protocol"] == "wordpatch" for r in s.valid)]
    if len(usable) < 2:
        raise Skip("an overlay needs at least two folders with valid wordpatch cells")
    fig, axes = _figure("Tmax across machines: wordpatch failure probability vs wait",
                        "pooled over straddle, executors and placements; x in ns so machines with "
                        "different TSC rates compare", figsize=(10.0, 7.6))
    ax = axes[0, 0]
    cmap = plt.get_cmap("tab10")
    all_groups = []
    per_machine = []
    for m, s, t in usable:
        groups = stats.aggregate([r for r in s.valid if r["protocol"] == "wordpatch"], ("wait_ticks",))
        if m.tsc_hz:
            for g in groups:
                g["x_ns"] = g["wait_ticks"] * 1e9 / m.tsc_hz
        else:
            for g in groups:
                g["x_ns"] = g["wait_ns"]
        all_groups += groups
        per_machine.append((m, s, t, groups))
    floor = _floor(all_groups)
    xs_ns = [g["x_ns"] for g in all_groups]
    _wait_scale(ax, xs_ns)
    extra = []
    for i, (m, s, t, groups) in enumerate(per_machine):
        color = cmap(i % 10)
        label = m.slug + (f" ({m.brand})" if m.brand else "")
        _rate_series(ax, groups, "x_ns", color, label, floor)
        k = (1e9 / m.tsc_hz) if m.tsc_hz else None
        to_ns = (lambda ticks, k=k: ticks * k) if k else (lambda ticks: ticks)
        sweep_tmax = stats.tmax_from_cells(s.rows)
        if t is not None and t.observed_ns is not None and not k:
            to_ns = (lambda ticks, t=t: ticks * t.observed_ns / t.observed_ticks)
        extra += _tmax_lines(ax, t, sweep_tmax, to_x=to_ns, color=color, prefix=f"{m.slug}: ")
    ax.set_yscale("log")
    ax.set_ylim(bottom=floor, top=1.5)
    if ax.get_xscale() == "symlog":
        ax.set_xlim(left=-0.1 * min(x for x in xs_ns if x > 0))
    ax.set_xlabel("wait W between patch steps (ns)")
    ax.set_ylabel("failure probability per exposed toggle (log)")
    ax.grid(True, alpha=0.3)
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(handles=handles + _legend_kinds() + extra, fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    return _save(fig, out_dir, "tmax_overlay", svg, top=0.92)


def timeline(sweep: Sweep, machine: Machine, out_dir: Path, svg: bool = True) -> list[Path]:
    """Tears over wall-clock time per wordpatch W, with steal and the core-to-core sample
    of every cell underneath: bursts of tearing, and what the machine was doing then, are
    visible at a glance (issue 9). Needs results schema 2 (start_utc_ms per cell)."""
    rows = [r for r in sweep.valid if r.get("start_utc_ms")]
    if not rows:
        raise Skip("no cell records its start time (results schema 1 files only)")
    t0 = min(r["start_utc_ms"] for r in rows)
    minutes = lambda r: (r["start_utc_ms"] - t0) / 60000.0  # noqa: E731
    wp = [r for r in rows if r["protocol"] == "wordpatch"]
    if not wp:
        raise Skip("no wordpatch cells with a start time")
    waits = sorted({r["wait_ticks"] for r in wp})
    ypos = {w: i for i, w in enumerate(waits)}
    fig, axes = _figure("Tears over time per wait W, with the machine's state",
                        machine.subtitle(sweep.source_label), nrows=3, ncols=1,
                        figsize=(10.0, 8.0), sharex=True,
                        gridspec_kw={"height_ratios": [3, 1, 1]})
    ax, ax_steal, ax_c2c = axes[0][0], axes[1][0], axes[2][0]
    clean = [r for r in wp if not (r["failures"] or r["crash"] or r["hang"])]
    torn = [r for r in wp if r["failures"] or r["crash"] or r["hang"]]
    ax.scatter([minutes(r) for r in clean], [ypos[r["wait_ticks"]] for r in clean], s=6, marker="|",
               color="#bbbbbb", label="cell, no tear")
    sentinel = [r for r in torn if r["phase"] == "sentinel"]
    other = [r for r in torn if r["phase"] != "sentinel"]
    for group, color, label in ((other, "#d62728", "cell with tears (size: failing toggles)"),
                                (sentinel, "#ff7f0e", "sentinel cell with tears")):
        if group:
            ax.scatter([minutes(r) for r in group], [ypos[r["wait_ticks"]] for r in group],
                       s=[12 + 10 * math.sqrt(max(1, r["failures"])) for r in group], color=color,
                       alpha=0.8, edgecolors="none", label=label)
    ax.set_yticks(range(len(waits)))
    ax.set_yticklabels([str(w) for w in waits])
    ax.set_ylabel("W (ticks)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", fontsize=7, ncol=3, bbox_to_anchor=(0, 1.13), frameon=False)
    steal = [(minutes(r), r["steal_ms"] / max(r["duration_s"], 1e-3) / 10.0) for r in rows
             if r.get("steal_ms") is not None]
    if steal:
        ax_steal.plot([s[0] for s in steal], [s[1] for s in steal], ".", ms=2, color="#7f7f7f")
    ax_steal.set_ylabel("steal\n(% of a PU)")
    ax_steal.grid(alpha=0.3)
    c2c = [(minutes(r), r["c2c_ticks"]) for r in rows if r.get("c2c_ticks") is not None]
    if c2c:
        ax_c2c.plot([c[0] for c in c2c], [c[1] for c in c2c], ".", ms=2, color="#1f77b4")
    ax_c2c.set_ylabel("c2c one-way\n(ticks)")
    ax_c2c.set_xlabel("minutes since the first cell")
    ax_c2c.grid(alpha=0.3)
    if not steal and not c2c:
        ax_steal.text(0.5, 0.5, "no steal or c2c samples", transform=ax_steal.transAxes, ha="center")
    return _save(fig, out_dir, "timeline", svg, top=0.88)
