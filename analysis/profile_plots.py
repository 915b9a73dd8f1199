"""Plots of `crossmod profile` output: top functions, latency distributions, the
instrumentation's share of time over the run against its budget (one profile.json each),
and the DIME*-style curve (information kept vs slowdown, from dime_curve rows).

Same conventions as plots.py: Agg backend, PNG (+ SVG), deterministic, raises plots.Skip
with the reason when the inputs cannot make the figure.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from .plots import Machine, Skip, _figure, _save, plt
from .profile import Profile

TOP_N = 15


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."


def _subtitle(profile: Profile, machine: Machine) -> str:
    pol = profile.policy
    desc = profile.policy_name
    if desc == "budget" and pol.get("budget") is not None:
        desc += f" {100 * float(pol['budget']):g}% of {1000 * float(pol.get('period_s') or 0):g} ms"
    cmd = " ".join(profile.command)[:80]
    return machine.subtitle(profile.path.parent.name + "/" + profile.path.name) + f"\npolicy {desc}: {cmd}"


def top_functions(profile: Profile, machine: Machine, out_dir: Path, svg: bool = True,
                  n: int = TOP_N) -> list[Path]:
    fns = [f for f in profile.functions if f.share is not None and f.samples > 0]
    if not fns:
        raise Skip("no function with samples and a share of run time")
    fns.sort(key=lambda f: f.share, reverse=True)
    fns = fns[:n][::-1]
    fig, axes = _figure(f"Top {len(fns)} functions by estimated share of run time", _subtitle(profile, machine),
                        figsize=(9.0, 1.2 + 0.32 * len(fns) + 1.6))
    ax = axes[0][0]
    y = np.arange(len(fns))
    ax.barh(y, [100 * f.share for f in fns], color="#1f77b4")
    ax.set_yticks(y, [_short(f.name) for f in fns], fontsize=7)
    for yi, f in zip(y, fns):
        mean = "-" if f.mean_ticks is None else f"{f.mean_ticks:,.0f}"
        ax.text(100 * f.share, yi, f"  mean {mean} ticks, {f.samples:,} samples", va="center", fontsize=7)
    ax.set_xlabel("share of run time (%)")
    ax.set_xlim(0, 100 * max(f.share for f in fns) * 1.6 + 1e-9)
    return _save(fig, out_dir, "profile_top_functions", svg)


def latency_distributions(profile: Profile, machine: Machine, out_dir: Path, svg: bool = True,
                          n: int = 6) -> list[Path]:
    fns = [f for f in profile.functions if f.hist_counts and sum(f.hist_counts) > 0]
    if not fns:
        raise Skip("no function has a latency histogram")
    fns.sort(key=lambda f: (f.share or 0.0, f.samples), reverse=True)
    fns = fns[:n]
    cols = 2 if len(fns) > 1 else 1
    rows = (len(fns) + cols - 1) // cols
    fig, axes = _figure("Latency distributions (sampled calls)", _subtitle(profile, machine),
                        nrows=rows, ncols=cols, figsize=(9.0, 1.6 + 2.3 * rows))
    for i, f in enumerate(fns):
        ax = axes[i // cols][i % cols]
        edges = np.asarray(f.hist_edges, dtype=float)
        ax.stairs(f.hist_counts, edges, fill=True, color="#1f77b4", alpha=0.7)
        if edges[0] > 0 and edges[-1] / edges[0] > 50:
            ax.set_xscale("log")
        for val, style, lab in ((f.p50_ticks, "--", "p50"), (f.p99_ticks, ":", "p99"), (f.mean_ticks, "-", "mean")):
            if val is not None and val > 0:
                ax.axvline(val, ls=style, color="#d62728", lw=1, label=f"{lab} {val:,.0f}")
        if f.oncpu_mean_ticks is not None and f.oncpu_mean_ticks > 0:
            ax.axvline(f.oncpu_mean_ticks, ls="-.", color="#2ca02c", lw=1,
                       label=f"on-CPU mean {f.oncpu_mean_ticks:,.0f}")
        if f.mean_ci_ticks:
            ax.axvspan(*f.mean_ci_ticks, color="#d62728", alpha=0.15, label="mean CI")
        ax.set_title(_short(f.name, 60), fontsize=8)
        ax.set_xlabel("latency (TSC ticks)")
        ax.set_ylabel("calls")
        ax.legend(fontsize=6)
    for j in range(len(fns), rows * cols):
        axes[j // cols][j % cols].set_visible(False)
    return _save(fig, out_dir, "profile_latency_distributions", svg)


def overhead_timeline(profile: Profile, machine: Machine, out_dir: Path, svg: bool = True) -> list[Path]:
    pts = [t for t in profile.timeline if isinstance(t.get("t_s"), (int, float))
           and isinstance(t.get("instr_share"), (int, float))]
    if not pts:
        raise Skip("profile.json has no timeline")
    t = [p["t_s"] for p in pts]
    fig, axes = _figure("Instrumentation's share of time over the run", _subtitle(profile, machine),
                        figsize=(9.0, 5.0))
    ax = axes[0][0]
    ax.plot(t, [100 * p["instr_share"] for p in pts], color="#1f77b4", lw=1, label="instrumentation share")
    budgets = [p.get("budget") for p in pts]
    if any(isinstance(b, (int, float)) for b in budgets):
        ax.plot(t, [100 * b if isinstance(b, (int, float)) else np.nan for b in budgets], color="#d62728",
                ls="--", lw=1, label="budget")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("share of the period (%)")
    if any(isinstance(p.get("active_probes"), (int, float)) for p in pts):
        ax2 = ax.twinx()
        ax2.plot(t, [p.get("active_probes", np.nan) for p in pts], color="#7f7f7f", lw=0.8, alpha=0.6,
                 label="active probes")
        ax2.set_ylabel("active probes")
        ax2.legend(loc="upper right", fontsize=7)
    ax.legend(loc="upper left", fontsize=7)
    return _save(fig, out_dir, "profile_overhead_timeline", svg)


def dime_curve(rows: list[dict[str, Any]], machine: Machine, out_dir: Path, svg: bool = True,
               source: Optional[str] = None) -> list[Path]:
    pts = [r for r in rows if r.get("slowdown_median") is not None and r.get("kept_median") is not None]
    if not pts:
        raise Skip("no dime_curve rows with both a slowdown and information kept")
    panels = [("kept_median", "means: seen + mean within 10%")]
    if any(r.get("kept_p50_median") is not None for r in pts):
        panels.append(("kept_p50_median", "medians: seen + p50 within 10%"))
    if any(r.get("kept_oncpu_median") is not None for r in pts):
        panels.append(("kept_oncpu_median", "on-CPU means: seen + on-CPU mean within 10%"))
    fig, axes = _figure("Information kept vs overhead (budget policy; full = 100%)",
                        machine.subtitle(source), ncols=len(panels), figsize=(6.0 * len(panels), 5.6))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, title) in zip(axes[0], panels):
        for i, w in enumerate(sorted({r["workload"] for r in pts})):
            ws = sorted((r for r in pts if r["workload"] == w and r.get(key) is not None), key=lambda r: r["budget"])
            x = [100 * (r["slowdown_median"] - 1) for r in ws]
            y = [100 * r[key] for r in ws]
            c = colors[i % len(colors)]
            ax.plot(x, y, "o-", color=c, label=w)
            for r, xi, yi in zip(ws, x, y):
                lo, hi = r.get("slowdown_min"), r.get("slowdown_max")
                if lo is not None and hi is not None:
                    ax.plot([100 * (lo - 1), 100 * (hi - 1)], [yi, yi], color=c, lw=0.8, alpha=0.4)
                lab = "full" if r["policy"] == "full" else f"{100 * r['budget']:g}%"
                ax.annotate(lab, (xi, yi), textcoords="offset points", xytext=(4, 4), fontsize=7, color=c)
        ax.axhline(95, color="#999999", ls=":", lw=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("CPU-time slowdown vs no preload (%; median, bar = min..max over rounds)")
        ax.set_ylabel("information kept vs full (%)")
        # kept can pass 100% where the reference is the truth (a policy closer to it than full).
        top = max([100 * r[key] for r in pts if r.get(key) is not None] + [100.0])
        ax.set_ylim(0, max(105.0, 1.05 * top))
        ax.legend(fontsize=7)
    return _save(fig, out_dir, "profile_dime_curve", svg)
