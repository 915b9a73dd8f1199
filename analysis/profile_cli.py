"""Command line for `crossmod profile` results.

    python3 -m analysis.profile_cli PATH [PATH ...] [--out DIR] [--no-svg] [--top N]

PATH is a profile.json, a directory holding one (`crossmod profile --out DIR`), or an
evaluation folder of scripts/profile_eval.py (results/<machine>/profile, holding runs.csv):
for that one the tables (table3.csv/.md, accuracy.csv, accuracy_summary.csv,
information.csv, dime_curve.csv) are recomputed from runs.csv and the profile.json files it
names, and the DIME* curve is drawn, with the per-profile plots of round 0's `full` and
`budget` (5%) runs of each workload (--profiles: of every run).

Plots go to <PATH>/plots (or --out). Exit 0 done (a plot whose inputs are missing is
skipped with the reason on stderr), 2 bad usage or a malformed input (one line naming it).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from . import profile as prof
from . import profile_plots
from .loaders import InputError
from .plots import Machine, Skip


def _machine_for(path: Path, tsc_hz: Optional[float] = None) -> Machine:
    # results/<machine>/profile/...: the machine folder names the machine.
    for parent in [path, *path.parents]:
        if parent.parent.name == "results":
            return Machine(slug=parent.name, tsc_hz=tsc_hz)
    return Machine(slug=path.resolve().name, tsc_hz=tsc_hz)


def _draw(name: str, fn, written: list[Path]) -> None:
    try:
        written += fn()
    except Skip as e:
        print(f"analysis: skip {name}: {e}", file=sys.stderr)


def profile_plots_for(p: prof.Profile, out_dir: Path, svg: bool, top: int) -> list[Path]:
    machine = _machine_for(p.path.parent, p.tsc_hz)
    written: list[Path] = []
    _draw(f"top_functions for {p.path}", lambda: profile_plots.top_functions(p, machine, out_dir, svg, top), written)
    _draw(f"latency_distributions for {p.path}",
          lambda: profile_plots.latency_distributions(p, machine, out_dir, svg), written)
    _draw(f"overhead_timeline for {p.path}", lambda: profile_plots.overhead_timeline(p, machine, out_dir, svg),
          written)
    return written


def process_eval_folder(folder: Path, out_dir: Path, svg: bool, top: int, all_profiles: bool,
                        write_tables: bool = True) -> list[Path]:
    """Tables (rewritten in `folder` unless write_tables is False) and plots (into out_dir)."""
    written: list[Path] = []
    if write_tables:
        tables = prof.write_all(folder)
        written += [folder / n for n in ("table3.csv", "table3.md", "accuracy.csv", "accuracy_summary.csv",
                                         "information.csv", "dime_curve.csv")]
    else:
        tables = prof.compute_all(folder)
    machine = _machine_for(folder)
    _draw("dime_curve", lambda: profile_plots.dime_curve(tables["dime"], machine, out_dir, svg,
                                                         source=f"{folder.name}/dime_curve.csv"), written)
    for r in tables["rows"]:
        p = r.get("_profile")
        if p is None or (not all_profiles and (r["round"] != 0 or r["label"] not in ("full", "budget"))):
            continue
        written += profile_plots_for(p, out_dir / f"{r['workload']}-{r['label']}-r{r['round']}", svg, top)
    return written


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m analysis.profile_cli",
                                description="Tables and plots from crossmod profile output.")
    p.add_argument("paths", nargs="+", type=Path,
                   help="profile.json files, crossmod profile --out directories, or profile_eval folders")
    p.add_argument("--out", type=Path, default=None, help="output directory (default PATH/plots)")
    p.add_argument("--svg", action=argparse.BooleanOptionalAction, default=True,
                   help="also write SVG next to each PNG (default on)")
    p.add_argument("--top", type=int, default=profile_plots.TOP_N, help="functions in the top-functions plot")
    p.add_argument("--profiles", action="store_true",
                   help="in an evaluation folder, plot every run's profile (default: round 0's full and budget)")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.top < 1:
        print("analysis: error: --top wants a positive number", file=sys.stderr)
        return 2
    try:
        for path in args.paths:
            if path.is_dir() and (path / "runs.csv").is_file():
                out_dir = args.out or path / "plots"
                written = process_eval_folder(path, out_dir, args.svg, args.top, args.profiles)
            elif path.is_file() or (path.is_dir() and ((path / "profile.json").is_file()
                                                        or (path / "profile.json.gz").is_file())):
                p = prof.load_profile(path)
                out_dir = args.out or p.path.parent / "plots"
                written = profile_plots_for(p, out_dir, args.svg, args.top)
            else:
                print(f"analysis: error: {path}: neither a profile.json, a directory holding one, "
                      "nor an evaluation folder with runs.csv", file=sys.stderr)
                return 2
            print(f"{path}: {len(written)} files written")
    except InputError as e:
        print(f"analysis: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
