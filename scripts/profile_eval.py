#!/usr/bin/python3
"""Evaluation of `crossmod profile` (issue 12): Table 3, accuracy against ground truth,
information kept vs full instrumentation, and the DIME*-style curve.

For each workload (latency_lab and kvpipe built with each compiler-assisted provider, and
with --workloads lab-trace latency_lab built without flags, through tracepoints;
Debian's python3 and sqlite3 through tracepoints) it runs, INTERLEAVED round after round
(every configuration once per round, never block after block):

    baseline   the program alone, no preload (CPU time from os.wait4's rusage)
    none       crossmod profile --policy none     (runtime loaded, no probe on)
    full       crossmod profile --policy full     (every probe on: the reference)
    paper      crossmod profile --policy paper
    budget     crossmod profile --policy budget   (--budget 5%, the default)
    converge   crossmod profile --policy converge
    dimeN      crossmod profile --policy budget --budget N% --samples 1000000
               (the DIME* curve: the budget, not the per-epoch sample quota, limits sampling)

and writes into results/<machine>/profile/ (the machine folder of the harness):
    runs.csv              one row per run (what ran, exit status, CPU seconds, files)
    raw/<workload>/<config>-r<round>/   cmd.txt, stdout.txt, stderr.txt, truth.json (latency_lab),
                          profile/ (what `crossmod profile --out` wrote; unless --keep-raw,
                          without its raw/ segment files and with profile.json gzipped)
    table3.csv/.md, accuracy.csv, accuracy_summary.csv, information.csv, dime_curve.csv
                          (computed by analysis/profile.py; regenerate them and the plots
                          with `/usr/bin/python3 -m analysis.profile_cli <that folder>`)
    eval.json             the command line, machine, versions, start and end

CPU time of a profiled run is profile.json's run.cpu_s (the program's, measured by the
launcher); the launcher's own rusage (program + launcher + report) is in launcher_cpu_s.
Slowdown = CPU time / the no-preload run's CPU time of the same round.

    scripts/profile_eval.py [--preset quick|full] [--rounds R] [--workloads a,b] [--dry-run]
Exit 0 done (failed runs are rows with their exit status), 2 bad usage, 1 nothing ran.
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN_COLUMNS = ("round", "order", "workload", "provider", "policy", "budget", "label", "rc",
               "cpu_s", "wall_s", "launcher_cpu_s", "profile", "truth", "note")
BASE_POLICIES = ("baseline", "none", "full", "paper", "budget", "converge")
DEFAULT_BUDGET = 0.05

PRESETS = {
    # rounds; latency_lab iterations per thread; kvpipe ops per thread; python SCALE; sqlite rows
    "quick": {"rounds": 3, "lab_iterations": 3000, "kv_ops": 10000, "py_scale": 15, "sql_rows": 200000,
              "budgets": "1,2,5,10,20,50", "timeout": 300},
    "full": {"rounds": 7, "lab_iterations": 12000, "kv_ops": 40000, "py_scale": 40, "sql_rows": 1200000,
             "budgets": "1,2,5,10,20,50", "timeout": 900},
}


class UsageError(Exception):
    pass


@dataclass
class Workload:
    name: str
    provider: str                 # cyg, patchable, tracepoint
    argv: list[str]
    trace: Optional[str] = None   # --trace pattern for tracepoint workloads
    stdin: Optional[Path] = None
    truth: bool = False           # latency_lab: pass --truth FILE
    check_stdout: bool = True     # output must equal the no-preload run's
    dime: bool = False            # also run the DIME* budgets
    needs: list[Path] = field(default_factory=list)


@dataclass
class Config:
    policy: str
    budget: Optional[float] = None
    dime: bool = False          # a DIME* curve point: the budget is the only limit on sampling

    @property
    def label(self) -> str:
        if self.dime:
            return f"dime{100 * (self.budget or DEFAULT_BUDGET):g}"
        if self.policy == "budget" and self.budget is not None and abs(self.budget - DEFAULT_BUDGET) > 1e-12:
            return f"budget{100 * self.budget:g}"
        return self.policy


# ---------------------------------------------------------------------------- machine

def machine_slug(crossmod: Path) -> str:
    """The harness's results folder name (engine machine_slug(), printed by `crossmod sysinfo`)."""
    if crossmod.is_file():
        try:
            out = subprocess.run([str(crossmod), "sysinfo"], capture_output=True, text=True, timeout=120).stdout
            m = re.search(r"^machine\s+(\S+)", out, re.M)
            if m:
                return m.group(1)
        except (OSError, subprocess.TimeoutExpired):
            pass
    # The same rule from /proc/cpuinfo: vendor-fam<F>-mod<M>-step<S>-<packages>pkg.
    info = Path("/proc/cpuinfo").read_text()
    first = info.split("\n\n")[0]

    def field_of(name: str) -> str:
        m = re.search(rf"^{name}\s*:\s*(.*)$", first, re.M)
        return m.group(1).strip() if m else ""
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(field_of("vendor_id"), "unknown")
    packages = len(set(re.findall(r"^physical id\s*:\s*(\d+)", info, re.M))) or 1
    return f"{vendor}-fam{field_of('cpu family')}-mod{field_of('model')}-step{field_of('stepping')}-{packages}pkg"


# ---------------------------------------------------------------------------- plan

def workloads(args, wdir: Path) -> dict[str, Workload]:
    lab = ["--threads", "8", "--iterations", str(args.lab_iterations)]
    kv = ["--threads", "8", "--ops", str(args.kv_ops)]
    py_script = ROOT / "profiler" / "workloads" / "python_cpu.py"
    sql = ROOT / "profiler" / "workloads" / "sqlite3_workload.sql"
    if args.sql_rows != 100000 and args.out_dir is not None:
        # The same statements over more rows: a copy with the row count changed, kept with the results.
        text = sql.read_text()
        if "x < 100000)" not in text:
            raise UsageError(f"{sql}: no 'x < 100000)' to scale")
        scaled = args.out_dir / f"sqlite3_workload-{args.sql_rows}.sql"
        args.sql_to_write = (scaled, text.replace("x < 100000)", f"x < {args.sql_rows})", 1))
        sql = scaled
    out = {
        "lab-cyg": Workload("lab-cyg", "cyg", [str(wdir / "latency_lab_cyg"), *lab], truth=True,
                            check_stdout=False, dime=True, needs=[wdir / "latency_lab_cyg"]),
        "lab-pfe": Workload("lab-pfe", "patchable", [str(wdir / "latency_lab_pfe"), *lab], truth=True,
                            check_stdout=False, dime=True, needs=[wdir / "latency_lab_pfe"]),
        # latency_lab built without provider flags, through tracepoints (opt-in: --workloads lab-trace)
        "lab-trace": Workload("lab-trace", "tracepoint", [str(wdir / "latency_lab_plain"), *lab], trace="lab_*",
                              truth=True, check_stdout=False, dime=True, needs=[wdir / "latency_lab_plain"]),
        "kvpipe-cyg": Workload("kvpipe-cyg", "cyg", [str(wdir / "kvpipe_cyg"), *kv], dime=True,
                               needs=[wdir / "kvpipe_cyg"]),
        "kvpipe-pfe": Workload("kvpipe-pfe", "patchable", [str(wdir / "kvpipe_pfe"), *kv], dime=True,
                               needs=[wdir / "kvpipe_pfe"]),
        "python3": Workload("python3", "tracepoint", ["/usr/bin/python3", str(py_script), str(args.py_scale)],
                            trace=args.python_trace, needs=[Path("/usr/bin/python3"), py_script]),
        "sqlite3": Workload("sqlite3", "tracepoint", ["/usr/bin/sqlite3", ":memory:"], trace=args.sqlite_trace,
                            stdin=sql, needs=[Path("/usr/bin/sqlite3"), sql]),
    }
    return out


def plan(args, wls: dict[str, Workload]) -> list[tuple[int, Workload, Config]]:
    configs = [Config(p, DEFAULT_BUDGET if p == "budget" else None) for p in args.policies]
    dime = [Config("budget", b, dime=True) for b in args.budgets] if "budget" in args.policies else []
    runs = []
    for rnd in range(args.rounds):
        for name in args.workloads:
            w = wls[name]
            cs = configs + (dime if w.dime and name in args.dime_workloads else [])
            # Rotated each round, so that no configuration always runs first, or always right
            # after another one (whose after-effects, e.g. the launcher's report writing, it
            # would inherit every time): until 28 Nov every round ran baseline, none, budget
            # in that order.
            k = rnd % len(cs)
            runs.extend((rnd, w, c) for c in cs[k:] + cs[:k])
    return runs


def command(args, w: Workload, c: Config, run_dir: Path) -> list[str]:
    prog = list(w.argv)
    if w.truth:
        prog += ["--truth", str(run_dir / "truth.json")]
    if c.policy == "baseline":
        return prog
    cmd = [str(args.crossmod), "profile", "--policy", c.policy, "--out", str(run_dir / "profile"), "--quiet"]
    if c.policy == "budget":
        cmd += ["--budget", f"{100 * (c.budget or DEFAULT_BUDGET):g}%"]
    if c.dime:
        cmd += ["--samples", str(args.dime_samples)]
    if w.trace:
        cmd += ["--trace", w.trace]
    cmd += list(args.profile_arg)
    return cmd + ["--", *prog]


# ---------------------------------------------------------------------------- running

def run_one(cmd: list[str], run_dir: Path, stdin: Optional[Path], timeout: float) -> tuple[Optional[int], float, float, str]:
    """Runs cmd in its own process group; returns (exit status or 128+signal, wall s,
    CPU s of it and its waited-for descendants, note)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "stdout.txt", "wb") as out, open(run_dir / "stderr.txt", "wb") as err, \
            (open(stdin, "rb") if stdin else open(os.devnull, "rb")) as inp:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdin=inp, stdout=out, stderr=err, start_new_session=True)
        note = ""
        deadline = t0 + timeout
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.monotonic() > deadline:
                note = f"timeout after {timeout:g} s; killed"
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        wall = time.monotonic() - t0
        proc.returncode = 0   # reaped by wait4; keep Popen from waiting again
    rc = os.waitstatus_to_exitcode(status)
    rc = 128 - rc if rc < 0 else rc
    return rc, wall, ru.ru_utime + ru.ru_stime, note


def _fmt_s(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def parse_budgets(text: str) -> list[float]:
    out = []
    for part in text.split(","):
        part = part.strip().rstrip("%")
        try:
            v = float(part)
        except ValueError:
            raise UsageError(f"--budgets: '{part}' is not a percentage") from None
        if not 0 < v <= 100:
            raise UsageError(f"--budgets: {v:g}% is outside (0, 100]")
        out.append(v / 100)
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="scripts/profile_eval.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="quick",
                   help="sizes and rounds (quick: 3 rounds of ~1 s runs; full: 7 rounds, 4x the work)")
    p.add_argument("--rounds", type=int, help="rounds of the interleaving (default from the preset)")
    p.add_argument("--workloads", default="lab-cyg,lab-pfe,kvpipe-cyg,kvpipe-pfe,python3,sqlite3")
    p.add_argument("--policies", default=",".join(BASE_POLICIES), help="subset of " + ",".join(BASE_POLICIES))
    p.add_argument("--budgets", help="DIME* budgets in %% (default 1,2,5,10,20,50)")
    p.add_argument("--dime-workloads", default="lab-cyg,lab-pfe,kvpipe-cyg,kvpipe-pfe",
                   help="workloads that also run every --budgets value")
    p.add_argument("--dime-samples", type=int, default=1000000,
                   help="--samples for the DIME* budget runs (default 1000000: the budget alone limits "
                        "sampling; with the default 10 per epoch the sample quota binds first)")
    p.add_argument("--lab-iterations", type=int, help="latency_lab iterations per thread")
    p.add_argument("--kv-ops", type=int, help="kvpipe operations per thread")
    p.add_argument("--py-scale", type=int, help="python_cpu.py SCALE")
    p.add_argument("--sql-rows", type=int, help="rows of sqlite3_workload.sql's table (file default 100000)")
    p.add_argument("--python-trace", default="Py*", help="--trace pattern for python3 (default 'Py*')")
    p.add_argument("--sqlite-trace", default="sqlite3_*", help="--trace pattern for sqlite3 (default 'sqlite3_*')")
    p.add_argument("--profile-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for every crossmod profile run (repeatable)")
    p.add_argument("--crossmod", type=Path, default=ROOT / "build" / "crossmod")
    p.add_argument("--workloads-dir", type=Path, default=None,
                   help="where latency_lab_*/kvpipe_* are (default build/profiler/workloads, "
                        "else build-workloads)")
    p.add_argument("--machine", help="results folder name (default: crossmod sysinfo's machine)")
    p.add_argument("--out", type=Path, help="output folder (default results/<machine>/profile)")
    p.add_argument("--timeout", type=float, help="seconds per run before it is killed")
    p.add_argument("--keep-raw", action="store_true",
                   help="keep each run's profile/raw/ (the runtime's segment files; deleted by default) "
                        "and its profile.json uncompressed")
    p.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        preset = PRESETS[args.preset]
        for key in ("rounds", "lab_iterations", "kv_ops", "py_scale", "sql_rows", "timeout", "dime_samples"):
            if getattr(args, key) is None:
                setattr(args, key, preset[key])
            if getattr(args, key) <= 0:
                raise UsageError(f"--{key.replace('_', '-')} wants a positive number")
        args.budgets = parse_budgets(args.budgets or preset["budgets"])
        args.policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        bad = [p for p in args.policies if p not in BASE_POLICIES]
        if bad or not args.policies:
            raise UsageError(f"--policies: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(BASE_POLICIES)})")
        if "baseline" not in args.policies:
            raise UsageError("--policies must include baseline: slowdowns are against it")
        wdir = args.workloads_dir or next((d for d in (ROOT / "build" / "profiler" / "workloads", ROOT / "build-workloads")
                                          if (d / "latency_lab_cyg").is_file()), ROOT / "build" / "profiler" / "workloads")
        machine = args.machine or machine_slug(args.crossmod)
        out = args.out or ROOT / "results" / machine / "profile"
        if not args.dry_run and (out / "runs.csv").exists():
            raise UsageError(f"{out}/runs.csv exists; move it away or give --out")
        args.out_dir = out
        wls = workloads(args, wdir)
        args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
        args.dime_workloads = [w.strip() for w in args.dime_workloads.split(",") if w.strip()]
        bad = [w for w in args.workloads + args.dime_workloads if w not in wls]
        if bad or not args.workloads:
            raise UsageError(f"--workloads: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(wls)})")
    except UsageError as e:
        print(f"profile_eval: {e}", file=sys.stderr)
        return 2

    runs = plan(args, wls)
    if args.dry_run:
        print(f"# {len(runs)} runs, {args.rounds} rounds, into {out}")
        for i, (rnd, w, c) in enumerate(runs):
            run_dir = out / "raw" / w.name / f"{c.label}-r{rnd}"
            cmd = command(args, w, c, run_dir)
            print(f"{i:4d} r{rnd} {w.name:11s} {c.label:9s} {' '.join(cmd)}" + (f" < {w.stdin}" if w.stdin else ""))
        return 0

    sql_to_write = getattr(args, "sql_to_write", None)
    missing = sorted({str(n) for _, w, _ in runs for n in w.needs if not n.exists()
                      and (sql_to_write is None or n != sql_to_write[0])})
    if not args.crossmod.is_file():
        missing.insert(0, str(args.crossmod))
    if missing:
        print(f"profile_eval: missing {', '.join(missing)} (build: cmake --build build --target crossmod "
              "profile_workloads)", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    if sql_to_write is not None and "sqlite3" in args.workloads:
        sql_to_write[0].write_text(sql_to_write[1])
    started = dt.datetime.now(dt.timezone.utc)
    context = {"tool": "scripts/profile_eval.py", "argv": sys.argv[1:] if argv is None else argv,
               "machine": machine, "start_utc": started.isoformat(timespec="seconds"),
               "git": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                     text=True).stdout.strip(),
               "rounds": args.rounds, "preset": args.preset,
               "sizes": {"lab_iterations": args.lab_iterations, "kv_ops": args.kv_ops, "py_scale": args.py_scale,
                         "sql_rows": args.sql_rows},
               "budgets": args.budgets, "dime_samples": args.dime_samples, "runs_planned": len(runs),
               "versions": {"python3": subprocess.run(["/usr/bin/python3", "--version"], capture_output=True,
                                                      text=True).stdout.strip(),
                            "sqlite3": subprocess.run(["/usr/bin/sqlite3", "--version"], capture_output=True,
                                                      text=True).stdout.split(" ")[0]}}
    (out / "eval.json").write_text(json.dumps(context, indent=2) + "\n")

    baseline_stdout: dict[str, bytes] = {}
    t_start = time.monotonic()
    with (out / "runs.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=RUN_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for i, (rnd, w, c) in enumerate(runs):
            run_dir = out / "raw" / w.name / f"{c.label}-r{rnd}"
            if run_dir.exists():
                shutil.rmtree(run_dir)
            cmd = command(args, w, c, run_dir)
            run_dir.mkdir(parents=True)
            (run_dir / "cmd.txt").write_text(" ".join(cmd) + (f" < {w.stdin}" if w.stdin else "") + "\n")
            rc, wall, launcher_cpu, note = run_one(cmd, run_dir, w.stdin, args.timeout)
            cpu = launcher_cpu if c.policy == "baseline" else None
            prof_rel = ""
            pj = run_dir / "profile" / "profile.json"
            if c.policy != "baseline":
                if pj.is_file():
                    prof_rel = os.path.relpath(pj.parent, out)
                    try:
                        cpu = float(json.loads(pj.read_text())["run"]["cpu_s"])
                    except (ValueError, KeyError, TypeError) as e:
                        note = (note + "; " if note else "") + f"profile.json unreadable ({e})"
                else:
                    note = (note + "; " if note else "") + "no profile.json"
            # The runtime's shared segments (sparse files of tens of MB, read into profile.json
            # by the launcher) are not kept unless asked for.
            if not args.keep_raw and (run_dir / "profile" / "raw").is_dir():
                shutil.rmtree(run_dir / "profile" / "raw")
            # profile.json compressed (byte-identical inside; analysis/profile.py reads both):
            # a few hundred runs of ~60 KB each.
            if not args.keep_raw and pj.is_file():
                with open(pj, "rb") as src, gzip.open(str(pj) + ".gz", "wb", compresslevel=9) as dst:
                    shutil.copyfileobj(src, dst)
                pj.unlink()
            stdout = (run_dir / "stdout.txt").read_bytes()
            # The workloads' output is deterministic: checked against the workload's latest
            # no-preload run (the rounds are rotated, so this round's may come later).
            if c.policy == "baseline":
                baseline_stdout[w.name] = stdout
            elif w.check_stdout and w.name in baseline_stdout and stdout != baseline_stdout[w.name]:
                note = (note + "; " if note else "") + "stdout differs from the no-preload run"
            truth = run_dir / "truth.json"
            writer.writerow({"round": rnd, "order": i, "workload": w.name, "provider": w.provider,
                             "policy": c.policy, "budget": "" if c.budget is None else f"{c.budget:g}",
                             "label": c.label, "rc": rc, "cpu_s": "" if cpu is None else f"{cpu:.6f}",
                             "wall_s": f"{wall:.6f}", "launcher_cpu_s": f"{launcher_cpu:.6f}",
                             "profile": prof_rel, "truth": os.path.relpath(truth, out) if truth.is_file() else "",
                             "note": note})
            fh.flush()
            elapsed = time.monotonic() - t_start
            eta = elapsed / (i + 1) * (len(runs) - i - 1)
            print(f"[{i + 1}/{len(runs)}] r{rnd} {w.name} {c.label}: rc {rc}, cpu "
                  f"{'-' if cpu is None else f'{cpu:.3f}'} s, wall {wall:.2f} s{' (' + note + ')' if note else ''}"
                  f" | elapsed {_fmt_s(elapsed)}, ETA {_fmt_s(eta)}", file=sys.stderr, flush=True)

    context["end_utc"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    (out / "eval.json").write_text(json.dumps(context, indent=2) + "\n")
    from analysis import profile as prof
    from analysis.loaders import InputError
    try:
        tables = prof.write_all(out)
    except InputError as e:
        print(f"profile_eval: the runs are in {out}/runs.csv but a table failed: {e}", file=sys.stderr)
        return 1
    print((out / "table3.md").read_text())
    for s in prof.summarize_accuracy(tables["accuracy"]):
        line = (f"accuracy {s['workload']} {s['config']}: {s['estimated']}/{s['function_runs']} estimated, "
                f"{s['covered']} covered by their interval, {s['within_10pct']} within 10% of the true mean")
        if s["oncpu_estimated"]:
            line += (f"; on-CPU: {s['oncpu_estimated']} estimated, {s['oncpu_covers_unpreempted']} covering the "
                     f"unpreempted true mean, {s['oncpu_within_10pct_unpreempted']} within 10% of it")
        print(line)
    for d in tables["dime"]:
        print(f"dime {d['workload']} {d['config']}: slowdown {d['slowdown_median']}, kept {d['kept_median']}"
              + (f", kept_oncpu {d['kept_oncpu_median']}" if d.get("kept_oncpu_median") is not None else ""))
    print(f"written: {out}; plots: /usr/bin/python3 -m analysis.profile_cli {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
