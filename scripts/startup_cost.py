#!/usr/bin/python3
"""Start-up CPU cost of `crossmod profile` (issue 12): what the profiled program pays
before its own work, for builds compared INTERLEAVED (A, B, A, B..., the order of the
builds reversed every other round, never block after block).

For each round and each case (a short program, with and without --trace) it runs

    plain      the program alone, no preload (CPU from os.wait4's rusage), once per round
    BUILD      BUILD/crossmod profile --policy P --quiet [--trace T] --out TMP -- PROGRAM
               (run.cpu_s of profile.json: the program's CPU, the report is not in it)

(P: --policy, default none: nothing is switched on, so a tracepoint's jump is never
installed; a sampling policy switches every function on as it is found, and installs its
jump then) and prints, per case and build, the median and min..max of the CPU seconds and the median
minus plain's median (the start-up cost), and per build the start-up calibrations the
profiled runs reported (overhead.calib_ticks_per_hit, self_ticks and nest_ticks per
provider: median and min..max over the runs that had them). `--split` adds, per build, the program with only
BUILD/probes/libcrossmod_probes.so preloaded (the probes library: loading + its
constructor), so that a case's cost splits into probes library / runtime (segment,
calibration, ...) / --trace attach (the difference to the same program without --trace).

    scripts/startup_cost.py [--runs N] [--split] [--cases a,b] [--policy P] [--json FILE] BUILD [BUILD...]
    e.g. scripts/startup_cost.py --runs 10 build-old build
Exit 0 done, 2 bad usage (one line on stderr), 1 a run failed.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

POLICIES = ("none", "paper", "budget", "converge", "full")
# name -> (program argv, --trace pattern or None)
CASES: dict[str, tuple[list[str], str | None]] = {
    "python3-trace": (["/usr/bin/python3", "-c", "pass"], "Py*"),
    "python3": (["/usr/bin/python3", "-c", "pass"], None),
    "sqlite3-trace": (["/usr/bin/sqlite3", ":memory:", "select 1"], "sqlite3_*"),
    "sqlite3": (["/usr/bin/sqlite3", ":memory:", "select 1"], None),
}


def run_plain(argv: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds (user + sys) of argv, from wait4's rusage; its output discarded."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}")
    return ru.ru_utime + ru.ru_stime


def calibrations(profile: dict) -> dict[str, float]:
    """The start-up calibrations of a profile.json: calib_ticks_per_hit and
    self_ticks.P / nest_ticks.P for each provider P that was calibrated."""
    o = profile.get("overhead", {})
    out = {}
    if o.get("calib_ticks_per_hit") is not None:
        out["calib_ticks_per_hit"] = float(o["calib_ticks_per_hit"])
    for key in ("self_ticks", "nest_ticks"):
        for prov, v in (o.get(key) or {}).items():
            if v is not None:
                out[f"{key}.{prov}"] = float(v)
    return out


def run_profiled(build: Path, argv: list[str], trace: str | None, tmp: Path,
                 calib: dict[str, list[float]] | None = None, policy: str = "none") -> float:
    """run.cpu_s of `crossmod profile --policy POLICY` on argv; its calibrations are
    appended to `calib` (key -> values) when given."""
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(build / "crossmod"), "profile", "--policy", policy, "--quiet", "--out", str(out)]
    if trace is not None:
        cmd += ["--trace", trace]
    r = subprocess.run(cmd + ["--"] + argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    profile = json.loads((out / "profile.json").read_text())
    if calib is not None:
        for k, v in calibrations(profile).items():
            calib.setdefault(k, []).append(v)
    return float(profile["run"]["cpu_s"])


def summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def build_orders(builds: list[str], rounds: int) -> list[list[str]]:
    """The builds' order in each round: as given in even rounds, reversed in odd ones."""
    return [list(builds) if r % 2 == 0 else list(reversed(builds)) for r in range(rounds)]


def measure(builds: list[Path], cases: list[str], rounds: int, split: bool,
            calib: dict[str, dict[str, list[float]]] | None = None, policy: str = "none") -> dict:
    """samples[case][label] = CPU seconds per round; labels: plain, each build, and with
    --split each build's 'probes-only:BUILD'. calib[BUILD][key]: the runs' calibrations."""
    samples: dict[str, dict[str, list[float]]] = {c: {} for c in cases}
    if calib is None:
        calib = {}
    names = [str(b) for b in builds]
    with tempfile.TemporaryDirectory(prefix="startup_cost_") as td:
        tmp = Path(td)
        for order in build_orders(names, rounds):
            for case in cases:
                argv, trace = CASES[case]
                samples[case].setdefault("plain", []).append(run_plain(argv))
                for name in order:
                    b = Path(name)
                    samples[case].setdefault(name, []).append(
                        run_profiled(b, argv, trace, tmp, calib.setdefault(name, {}), policy))
                    if split and trace is None:
                        env = dict(os.environ, LD_PRELOAD=str(b / "probes" / "libcrossmod_probes.so"))
                        samples[case].setdefault("probes-only:" + name, []).append(run_plain(argv, env))
    return samples


def report(samples: dict, builds: list[str], calib: dict | None = None) -> str:
    lines = ["| case | run | median s | min..max s | median - plain s | n |", "|---|---|---|---|---|---|"]
    for case, by in samples.items():
        plain = statistics.median(by["plain"])
        for label, xs in by.items():
            s = summary(xs)
            extra = "-" if label == "plain" else f"{s['median'] - plain:+.4f}"
            lines.append(f"| {case} | {label} | {s['median']:.4f} | {s['min']:.4f}..{s['max']:.4f} | {extra} | {s['n']} |")
    # The split: probes library / runtime / --trace attach, per build, from medians.
    for b in builds:
        for prog in sorted({c.removesuffix("-trace") for c in samples}):
            base, traced = samples.get(prog), samples.get(prog + "-trace")
            if base is None or "probes-only:" + b not in base:
                continue
            plain = statistics.median(base["plain"])
            probes = statistics.median(base["probes-only:" + b]) - plain
            runtime = statistics.median(base[b]) - plain - probes
            line = f"split {prog} {b}: probes library {probes:+.4f} s, runtime {runtime:+.4f} s"
            if traced is not None:
                line += f", --trace attach {statistics.median(traced[b]) - statistics.median(base[b]):+.4f} s"
            lines.append(line)
    if calib and any(calib.values()):
        lines += ["", "| build | calibration (ticks) | median | min..max | n |", "|---|---|---|---|---|"]
        for b in builds:
            for key, xs in sorted(calib.get(b, {}).items()):
                s = summary(xs)
                lines.append(f"| {b} | {key} | {s['median']:g} | {s['min']:g}..{s['max']:g} | {s['n']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("builds", nargs="+", help="build folders (with crossmod, probes/, profiler/)")
    ap.add_argument("--runs", type=int, default=10, help="rounds (default 10)")
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated: " + ",".join(CASES))
    ap.add_argument("--split", action="store_true", help="also the probes library alone (cases without --trace)")
    ap.add_argument("--policy", default="none", help="the profiled runs' --policy (default none)")
    ap.add_argument("--json", help="write the samples here")
    a = ap.parse_args(argv)
    cases = [c for c in a.cases.split(",") if c]
    bad = [c for c in cases if c not in CASES]
    if bad or not cases:
        print(f"startup_cost: unknown case {','.join(bad) or '(none)'}; known: {','.join(CASES)}", file=sys.stderr)
        return 2
    if a.policy not in POLICIES:
        print(f"startup_cost: unknown --policy {a.policy}; known: {','.join(POLICIES)}", file=sys.stderr)
        return 2
    if a.runs < 1:
        print("startup_cost: --runs must be at least 1", file=sys.stderr)
        return 2
    for b in a.builds:
        if not os.access(Path(b) / "crossmod", os.X_OK):
            print(f"startup_cost: {b}/crossmod is not an executable (not a build folder?)", file=sys.stderr)
            return 2
    for c in cases:
        if not os.access(CASES[c][0][0], os.X_OK):
            print(f"startup_cost: {CASES[c][0][0]} is missing (case {c})", file=sys.stderr)
            return 2
    calib: dict[str, dict[str, list[float]]] = {}
    try:
        samples = measure([Path(b) for b in a.builds], cases, a.runs, a.split, calib, a.policy)
    except RuntimeError as e:
        print(f"startup_cost: {e}", file=sys.stderr)
        return 1
    if a.json:
        Path(a.json).write_text(json.dumps(samples, indent=1))
    print(report(samples, a.builds, calib))
    return 0


if __name__ == "__main__":
    sys.exit(main())
