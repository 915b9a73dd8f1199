#!/usr/bin/env python3
"""Interleaved CPU-time comparison of `crossmod profile` configurations on one workload.

    profiler/scripts/configs_ab.py [--build DIR] [--json FILE] ROUNDS WORKLOAD NAME=ARGS...

WORKLOAD as scripts/profile_eval.py defines it, at its evaluation sizes: sqlite3
(sqlite3_workload.sql at 400,000 rows, --trace 'sqlite3_*'), python3 (python_cpu.py 40,
--trace 'Py*'), lab-cyg / lab-pfe / kvpipe-cyg / kvpipe-pfe (8 threads); or cmd=COMMAND,
any program (split like a shell would; no --trace added: give it in ARGS). Each NAME=ARGS is
one configuration: ARGS are `crossmod profile` options (split like a shell would), where
a word ENV:K=V sets K=V in that run's environment (e.g. ENV:CROSSMOD_PROFILE_RETRACT=1) and
BUILD:DIR runs DIR/crossmod instead of --build's; ARGS `bare` runs the program with no
launcher (its ENV: words still apply: `bare ENV:LD_PRELOAD=build/probes/libcrossmod_probes.so`
loads a library alone). Every round runs every configuration once, the order rotated each
round (never block after block). CPU time = user + sys: the no-preload run's from rusage, a profiled
run's from its profile.json (run.user_s + run.sys_s, the program's own).

Prints per configuration the median CPU seconds and the median over rounds of its ratio to
the FIRST configuration in the same round, with the distribution-free 95% interval of
that median (binomial order statistics, analysis.profile.median_ci), and for profiled
configurations the medians of what profile.json says the instrumentation charged
(overhead.instr_share, daemon_cpu_s, setup_s, with the median over rounds of setup_s over the
first configuration's), toggles/s, samples/s and how many functions had samples. --json writes
the raw per-round CPU seconds. Example (the cost of installed-but-off tracepoints on sqlite3):

    profiler/scripts/configs_ab.py 24 sqlite3 none='--policy none' \\
        off='--policy paper --samples 1 --epoch 200ms' budget='--policy budget'
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))
import profile_eval  # noqa: E402  (the evaluation's workload definitions)
from analysis.profile import median_ci  # noqa: E402


def parse_config(spec):
    name, sep, args = spec.partition("=")
    if not sep or not name:
        raise ValueError(f"configuration {spec!r} is not NAME=ARGS")
    words = shlex.split(args)
    env, build, opts = {}, None, []
    for w in words:
        if w.startswith("ENV:"):
            k, eq, v = w[4:].partition("=")
            if not eq or not k:
                raise ValueError(f"{name}: {w!r} is not ENV:K=V")
            env[k] = v
        elif w.startswith("BUILD:"):
            build = w[6:]
        else:
            opts.append(w)
    bare = opts == ["bare"]
    return {"name": name, "env": env, "build": build, "opts": [] if bare else opts, "bare": bare}


def run(cfg, w, default_build, out):
    """CPU seconds of one run, and for a profiled one what its report says it charged."""
    inp = open(w.stdin) if w.stdin else open(os.devnull)
    with inp:
        if cfg["bare"]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(w.argv, stdin=inp, stdout=subprocess.DEVNULL, check=True,
                           env={**os.environ, **cfg["env"]})
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), None
        build = cfg["build"] or default_build
        cmd = [f"{build}/crossmod", "profile", "--quiet", "--out", out] + cfg["opts"]
        cmd += ["--trace", w.trace] if w.trace else []
        subprocess.run(cmd + ["--", *w.argv], stdin=inp, stdout=subprocess.DEVNULL, check=True,
                       env={**os.environ, **cfg["env"]})
    j = json.load(open(Path(out) / "profile.json"))
    o = j["overhead"]
    charged = {"instr_share": o.get("instr_share") or 0.0, "daemon_cpu_s": o.get("daemon_cpu_s") or 0.0,
               "setup_s": o.get("setup_s") or 0.0,
               "toggles_per_s": o.get("toggles_per_s") or 0.0, "samples_per_s": o.get("samples_per_s") or 0.0,
               "sampled": sum(1 for f in j["functions"] if f.get("samples"))}
    return j["run"]["user_s"] + j["run"]["sys_s"], charged


def command_workload(spec):
    """WORKLOAD cmd=COMMAND: any program, no --trace of its own; None if spec is not one."""
    if not spec.startswith("cmd="):
        return None
    argv = shlex.split(spec[4:])
    if not argv:
        raise ValueError("cmd= needs a command")
    return SimpleNamespace(argv=argv, stdin=None, trace=None)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(ROOT / "build"), help="build folder with crossmod (default build/)")
    p.add_argument("--json", help="write the per-round CPU seconds of every configuration here")
    p.add_argument("rounds", type=int)
    p.add_argument("workload")
    p.add_argument("configs", nargs="+", metavar="NAME=ARGS")
    a = p.parse_args()
    try:
        cfgs = [parse_config(s) for s in a.configs]
    except ValueError as e:
        print(f"configs_ab.py: {e}", file=sys.stderr)
        return 2
    if a.rounds < 1 or len({c["name"] for c in cfgs}) != len(cfgs):
        print("configs_ab.py: ROUNDS >= 1 and distinct configuration names, please", file=sys.stderr)
        return 2
    try:
        w = command_workload(a.workload)
    except ValueError as e:
        print(f"configs_ab.py: {e}", file=sys.stderr)
        return 2
    res = {c["name"]: [] for c in cfgs}
    charged = {c["name"]: [] for c in cfgs}
    with tempfile.TemporaryDirectory() as tmp:
        if w is None:
            args = SimpleNamespace(lab_iterations=3000, kv_ops=10000, py_scale=40, sql_rows=400000,
                                   out_dir=Path(tmp), python_trace="Py*", sqlite_trace="sqlite3_*")
            ws = profile_eval.workloads(args, Path(a.build) / "profiler" / "workloads")
            if a.workload not in ws:
                print(f"configs_ab.py: unknown workload {a.workload!r} (one of {', '.join(ws)}, or cmd=COMMAND)",
                      file=sys.stderr)
                return 2
            w = ws[a.workload]
            if w.stdin is not None and not w.stdin.exists():
                w.stdin.write_text(args.sql_to_write[1])
        for r in range(a.rounds):
            k = r % len(cfgs)
            for i, c in enumerate(cfgs[k:] + cfgs[:k]):
                cpu, ch = run(c, w, a.build, f"{tmp}/r{r}-{i}")
                res[c["name"]].append(cpu)
                if ch is not None:
                    charged[c["name"]].append(ch)
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    first = cfgs[0]["name"]
    for c in cfgs:
        v = res[c["name"]]
        ratios = [b / x for x, b in zip(res[first], v)]
        ci = median_ci(ratios)
        ci_s = f"{ci[0]:.3f}..{ci[1]:.3f}" if ci else "-"
        ch = charged[c["name"]]
        ch_s = ("" if not ch else
                f"   instr_share {statistics.median(x['instr_share'] for x in ch):.4f}"
                f"  daemon_cpu_s {statistics.median(x['daemon_cpu_s'] for x in ch):.4f}"
                f"  setup_s {statistics.median(x['setup_s'] for x in ch):.4f}"
                f"  toggles/s {statistics.median(x['toggles_per_s'] for x in ch):,.0f}"
                f"  samples/s {statistics.median(x['samples_per_s'] for x in ch):,.0f}"
                f"  sampled {statistics.median(x['sampled'] for x in ch):g}")
        ch0 = charged[first]
        if ch and ch0 and len(ch) == len(ch0) and all(x["setup_s"] > 0 for x in ch0):
            sr = [b["setup_s"] / x["setup_s"] for x, b in zip(ch0, ch)]
            sci = median_ci(sr)
            ch_s += (f"  setup / {first}: {statistics.median(sr):.3f}"
                     + (f" (95% {sci[0]:.3f}..{sci[1]:.3f})" if sci else ""))
        print(f"{c['name']:12} cpu {statistics.median(v):.3f} s   / {first}: {statistics.median(ratios):.3f} "
              f"(95% {ci_s}, {len(ratios)} rounds){ch_s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
