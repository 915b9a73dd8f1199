"""The peers benchmark: what a probe hit costs under crossmod and under the tools people
would pick instead, on one generated program, interleaved and repeated.

    python3 -m evaluation peers [--build DIR] [--rounds R] [--iterations N] [--tools LIST]
                                [--out DIR]

The program (generated C, built here with gcc in four variants: plain, -pg,
-fpatchable-function-entry=5, -finstrument-functions) calls two tiny non-inlined
functions 2N times and prints a checksum. Each tool runs its variant at N and at 2N
iterations; the difference of the two CPU times divided by the 2N extra calls is the
marginal CPU cost per call, free of every fixed cost (start-up, attach, report). Every
round runs every (tool, size) once, the order rotated each round; a run counts only if it
exits 0 and prints the uninstrumented checksum. Reported per tool, as medians over rounds
with distribution-free 95% intervals: CPU ns per call (marginal), its excess over the
uninstrumented build of the same variant, and whole-run CPU and wall at 2N as ratios to
that build in the same round. Tools too slow for N (uprobes trap into the kernel on every
hit) run at N/100 and 2N/100, beside their baseline at the same sizes. A tool that is not installed or not permitted is skipped
with the reason.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .common import RunResult, UsageError, fmt_interval, median_ci, rotated, run_measured

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r"""
#include <stdio.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
/* The asm statements keep each body opaque, so the compiler can neither inline nor fold. */
NOINLINE unsigned leaf(unsigned x) { __asm__ volatile("" : "+r"(x)); return x * 2654435761u + 1u; }
NOINLINE unsigned mid(unsigned x) { __asm__ volatile("" : "+r"(x)); return leaf(x) ^ (x >> 3); }
int main(int argc, char** argv) {
  unsigned long n = argc > 1 ? strtoul(argv[1], 0, 10) : 1000000ul;
  unsigned acc = 1u;
  for (unsigned long i = 0; i < n; ++i) acc = mid(acc + (unsigned)i);
  printf("%u\n", acc);
  return 0;
}
"""

# Build variants: gcc flags beside -O2.
VARIANTS = {
    "plain": [],
    "pg": ["-pg"],
    "pfe": ["-fpatchable-function-entry=5"],
    "cyg": ["-finstrument-functions"],
}
FUNCTIONS = ("leaf", "mid")


@dataclass
class Env:
    crossmod: Path
    programs: dict[str, Path]
    scratch: Path


@dataclass
class Tool:
    name: str
    variant: str
    what: str                                   # one line for the report
    argv: Callable[[Env, Path, int], list[str]]  # (env, scratch dir of this run, iterations)
    needs: Callable[[Env], Optional[str]] = lambda e: None  # None, or why it is skipped
    scale: int = 1  # runs at N/scale and 2N/scale: for tools too slow for N (kernel traps)

    def sizes(self, n: int) -> tuple[int, int]:
        k = max(1, n // self.scale)
        return k, 2 * k


def _program(e: Env, variant: str, n: int) -> list[str]:
    return [str(e.programs[variant]), str(n)]


def _crossmod_profile(policy: str, variant: str, trace: bool) -> Callable[[Env, Path, int], list[str]]:
    def argv(e: Env, d: Path, n: int) -> list[str]:
        cmd = [str(e.crossmod), "profile", "--quiet", "--policy", policy, "--out", str(d / "p")]
        if trace:
            cmd += ["--trace", ":".join(FUNCTIONS)]
        return cmd + ["--"] + _program(e, variant, n)
    return argv


def _crossmod_trace(latency: bool) -> Callable[[Env, Path, int], list[str]]:
    def argv(e: Env, d: Path, n: int) -> list[str]:
        cmd = [str(e.crossmod), "trace", "--functions", ":".join(FUNCTIONS), "--out", str(d / "t.txt")]
        if latency:
            cmd.append("--latency")
        return cmd + ["--"] + _program(e, "plain", n)
    return argv


def _uftrace(variant: str, extra: list[str]) -> Callable[[Env, Path, int], list[str]]:
    def argv(e: Env, d: Path, n: int) -> list[str]:
        return ["uftrace", "record", "--no-pager", "-d", str(d / "uftrace.data"), *extra,
                *_program(e, variant, n)]
    return argv


def _bpftrace(e: Env, d: Path, n: int) -> list[str]:
    prog = e.programs["plain"]
    probes = ",".join(f"uprobe:{prog}:{f}" for f in FUNCTIONS)
    return ["bpftrace", "-q", "-e", probes + " { @hits = count(); }", "-c", f"{prog} {n}"]


def _needs_command(cmd: str) -> Callable[[Env], Optional[str]]:
    return lambda e: None if shutil.which(cmd) else f"{cmd} is not installed"


def _needs_uprobes(e: Env) -> Optional[str]:
    if shutil.which("bpftrace") is None:
        return "bpftrace is not installed"
    if os.geteuid() != 0:
        return "uprobes through bpftrace need root"
    if not Path("/sys/kernel/tracing/uprobe_events").exists() and \
            not Path("/sys/kernel/debug/tracing/uprobe_events").exists():
        return "no uprobe_events in tracefs (mount -t tracefs nodev /sys/kernel/tracing)"
    return None


def _none(variant: str) -> Tool:
    return Tool(f"none-{variant}", variant, f"the {variant} build alone",
                lambda e, d, n: _program(e, variant, n))


TOOLS: list[Tool] = [
    *(_none(v) for v in VARIANTS),
    Tool("crossmod-trace", "plain", "crossmod trace (entry tracepoints, call counts)",
         _crossmod_trace(False)),
    Tool("crossmod-trace-latency", "plain", "crossmod trace --latency (entry + exit)",
         _crossmod_trace(True)),
    Tool("crossmod-full-tp", "plain", "crossmod profile --policy full, tracepoints",
         _crossmod_profile("full", "plain", True)),
    Tool("crossmod-full-pfe", "pfe", "crossmod profile --policy full, patchable entry",
         _crossmod_profile("full", "pfe", False)),
    Tool("crossmod-full-cyg", "cyg", "crossmod profile --policy full, -finstrument-functions",
         _crossmod_profile("full", "cyg", False)),
    Tool("crossmod-budget-tp", "plain", "crossmod profile (budget 5%), tracepoints",
         _crossmod_profile("budget", "plain", True)),
    Tool("crossmod-budget-pfe", "pfe", "crossmod profile (budget 5%), patchable entry",
         _crossmod_profile("budget", "pfe", False)),
    Tool("uftrace-pg", "pg", "uftrace record on a -pg build (records every call)",
         _uftrace("pg", []), _needs_command("uftrace")),
    Tool("uftrace-pfe", "pfe", "uftrace record -P . (dynamic patching of patchable entries)",
         _uftrace("pfe", ["-P", "."]), _needs_command("uftrace")),
    Tool("uftrace-cyg", "cyg", "uftrace record on a -finstrument-functions build",
         _uftrace("cyg", []), _needs_command("uftrace")),
    Tool("bpftrace-uprobes", "plain", "bpftrace uprobes counting calls (kernel traps)",
         _bpftrace, _needs_uprobes, scale=100),
]


def build_programs(scratch: Path, cc: str = "gcc") -> dict[str, Path]:
    src = scratch / "peers_prog.c"
    src.write_text(PROGRAM)
    out = {}
    for variant, flags in VARIANTS.items():
        exe = scratch / f"peers_{variant}"
        subprocess.run([cc, "-O2", *flags, "-o", str(exe), str(src)], check=True)
        out[variant] = exe
    return out


@dataclass
class Row:
    round: int
    tool: str
    variant: str
    iterations: int
    rc: Optional[int]
    ok: bool
    cpu_s: float
    wall_s: float


def _checked(r: RunResult, expected: bytes) -> bool:
    """Exit 0 and the uninstrumented checksum line among the output lines (bpftrace
    prints its own lines around the program's)."""
    return r.rc == 0 and expected.strip() in r.stdout.splitlines()


def run_rounds(env: Env, tools: list[Tool], rounds: int, n: int,
               progress: Callable[[str], None]) -> list[Row]:
    by_name = {t.name: t for t in tools}
    jobs: dict[str, tuple[Tool, int]] = {}
    for t in tools:  # baselines run at N and 2N, and at a scaled tool's sizes too
        base = by_name[f"none-{t.variant}"]
        for who, k in [(t, k) for k in t.sizes(n)] + [(base, k) for k in (*t.sizes(n), n, 2 * n)]:
            jobs[f"{who.name}@{k}"] = (who, k)
    expected = {(t.variant, k): run_measured(_program(env, t.variant, k)).stdout
                for t, k in jobs.values()}
    rows: list[Row] = []
    for r in range(rounds):
        for label in rotated(list(jobs), r):
            tool, k = jobs[label]
            with tempfile.TemporaryDirectory(dir=env.scratch) as d:
                res = run_measured(tool.argv(env, Path(d), k))
            ok = _checked(res, expected[(tool.variant, k)])
            rows.append(Row(r, tool.name, tool.variant, k, res.rc, ok, res.cpu_s, res.wall_s))
        progress(f"round {r + 1}/{rounds}")
    return rows


@dataclass
class Summary:
    tool: str
    variant: str
    what: str
    rounds: int                      # rounds in which both sizes of tool and baseline were ok
    failed_runs: int
    per_call_ns: list[float] = field(default_factory=list)   # marginal CPU per call
    excess_ns: list[float] = field(default_factory=list)     # minus the baseline's, same round
    cpu_ratio: list[float] = field(default_factory=list)     # at 2N, to the baseline
    wall_ratio: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        def med(xs: list[float]) -> Optional[dict]:
            if not xs:
                return None
            ci = median_ci(xs)
            return {"median": statistics.median(xs), "ci95": list(ci) if ci else None}
        return {"tool": self.tool, "variant": self.variant, "what": self.what,
                "rounds": self.rounds, "failed_runs": self.failed_runs,
                "per_call_ns": med(self.per_call_ns), "excess_ns": med(self.excess_ns),
                "cpu_ratio": med(self.cpu_ratio), "wall_ratio": med(self.wall_ratio)}


def summarise(rows: list[Row], tools: list[Tool], n: int) -> list[Summary]:
    cell = {(r.round, r.tool, r.iterations): r for r in rows}
    out = []
    for t in tools:
        s = Summary(t.name, t.variant, t.what, 0,
                    sum(1 for r in rows if r.tool == t.name and not r.ok))
        base = f"none-{t.variant}"
        k1, k2 = t.sizes(n)
        calls = 2 * (k2 - k1)  # the extra calls of the larger run: 2 per iteration
        for rnd in sorted({r.round for r in rows}):
            a1, a2 = cell.get((rnd, t.name, k1)), cell.get((rnd, t.name, k2))
            b1, b2 = cell.get((rnd, base, k1)), cell.get((rnd, base, k2))
            # The baseline's own cost per call, taken where it is largest against noise.
            c1, c2 = cell.get((rnd, base, n)), cell.get((rnd, base, 2 * n))
            if not all(x is not None and x.ok for x in (a1, a2, b1, b2, c1, c2)):
                continue
            s.rounds += 1
            marginal = (a2.cpu_s - a1.cpu_s) / calls * 1e9
            s.per_call_ns.append(marginal)
            s.excess_ns.append(marginal - (c2.cpu_s - c1.cpu_s) / (2 * n) * 1e9)
            if b2.cpu_s > 0:
                s.cpu_ratio.append(a2.cpu_s / b2.cpu_s)
            if b2.wall_s > 0:
                s.wall_ratio.append(a2.wall_s / b2.wall_s)
        out.append(s)
    return out


def table(summaries: list[Summary], skipped: dict[str, str]) -> str:
    def cell(xs: list[float], digits: int) -> str:
        if not xs:
            return "n/a"
        return f"{statistics.median(xs):.{digits}f} ({fmt_interval(median_ci(xs), digits)})"
    lines = ["| tool | what | rounds | CPU ns/call | excess ns/call | CPU ratio (larger run) | wall ratio (larger run) |",
             "|---|---|---|---|---|---|---|"]
    for s in summaries:
        lines.append(f"| {s.tool} | {s.what} | {s.rounds} | {cell(s.per_call_ns, 1)} | "
                     f"{cell(s.excess_ns, 1)} | {cell(s.cpu_ratio, 2)} | {cell(s.wall_ratio, 2)} |")
    for name, why in skipped.items():
        lines.append(f"| {name} | skipped: {why} | 0 | | | | |")
    return "\n".join(lines)


def write_outputs(out: Path, rows: list[Row], summaries: list[Summary],
                  skipped: dict[str, str], context: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "peers-runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["round", "tool", "variant", "iterations", "rc", "ok", "cpu_s", "wall_s"])
        for r in rows:
            w.writerow([r.round, r.tool, r.variant, r.iterations, "" if r.rc is None else r.rc,
                        int(r.ok), repr(r.cpu_s), repr(r.wall_s)])
    doc = {"schema_version": 1, "context": context, "skipped": skipped,
           "tools": [s.as_dict() for s in summaries]}
    (out / "peers-summary.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "peers.md").write_text(table(summaries, skipped) + "\n")


def select_tools(spec: Optional[str]) -> list[Tool]:
    if not spec:
        return list(TOOLS)
    names = [x for x in spec.split(",") if x]
    known = {t.name: t for t in TOOLS}
    unknown = [x for x in names if x not in known]
    if unknown:
        raise UsageError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(known)}")
    # Every chosen tool needs its variant's baseline in the same rounds.
    chosen = [known[x] for x in names]
    for v in sorted({t.variant for t in chosen}):
        if f"none-{v}" not in names:
            chosen.insert(0, known[f"none-{v}"])
    return chosen


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--build", default=str(ROOT / "build"), help="crossmod build directory (default build/)")
    p.add_argument("--rounds", type=int, default=10, help="rounds; each runs every tool at N and 2N (default 10)")
    p.add_argument("--iterations", type=int, default=2_000_000,
                   help="N: iterations of the smaller run, 2 calls each (default 2000000)")
    p.add_argument("--tools", help="comma list of tools (default all): " + ",".join(t.name for t in TOOLS))
    p.add_argument("--out", help="write peers-runs.csv, peers-summary.json and peers.md here")


def main(args: argparse.Namespace) -> int:
    if args.rounds < 1 or args.iterations < 1:
        raise UsageError("--rounds and --iterations must be positive")
    crossmod = Path(args.build) / "crossmod"
    if not os.access(crossmod, os.X_OK):
        raise UsageError(f"{crossmod} is not built (scripts/bootstrap.sh)")
    if args.out and Path(args.out).exists() and any(Path(args.out).iterdir()):
        raise UsageError(f"--out {args.out} exists and is not empty")
    tools = select_tools(args.tools)
    with tempfile.TemporaryDirectory(prefix="crossmod-peers-") as scratch:
        env = Env(crossmod, build_programs(Path(scratch)), Path(scratch))
        skipped = {t.name: why for t in tools if (why := t.needs(env)) is not None}
        runnable = [t for t in tools if t.name not in skipped]
        clock = _Eta(args.rounds)
        rows = run_rounds(env, runnable, args.rounds, args.iterations, clock.tick)
    summaries = summarise(rows, runnable, args.iterations)
    print(table(summaries, skipped))
    if args.out:
        context = {"iterations": args.iterations, "rounds": args.rounds,
                   "command": " ".join(sys.argv), "uname": " ".join(os.uname()),
                   "uftrace": _version(["uftrace", "--version"]),
                   "bpftrace": _version(["bpftrace", "--version"])}
        write_outputs(Path(args.out), rows, summaries, skipped, context)
    return 0


class _Eta:
    """Progress on stderr: rounds done and the time left at the pace so far."""

    def __init__(self, total: int) -> None:
        import time
        self._time, self._t0, self._total, self._done = time.monotonic, time.monotonic(), total, 0

    def tick(self, what: str) -> None:
        self._done += 1
        elapsed = self._time() - self._t0
        left = elapsed / self._done * (self._total - self._done)
        print(f"peers: {what}, {elapsed:.0f} s elapsed, ~{left:.0f} s left", file=sys.stderr, flush=True)


def _version(argv: list[str]) -> Optional[str]:
    if shutil.which(argv[0]) is None:
        return None
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.stdout.strip().splitlines()[0] if p.stdout.strip() else None
