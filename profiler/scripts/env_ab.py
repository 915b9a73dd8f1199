#!/usr/bin/env python3
"""Interleaved A/B of one runtime setting (an environment variable) of `crossmod profile`.

    profiler/scripts/env_ab.py BUILD_DIR ROUNDS NAME=VALUE [--stdin FILE] -- PROFILE_ARGS... -- PROGRAM ARGS...

Each round runs, in a rotated order, `crossmod profile PROFILE_ARGS -- PROGRAM` with
NAME=VALUE (A), without NAME (B), and with `--policy none` instead of the given policy
(the reference: probes found, never switched on), each with --quiet and its own --out in a
temporary folder; FILE (optional) is the program's stdin. Prints the medians of the
program's CPU seconds (profile.json run.cpu_s), the per-round ratios A/none, B/none and
A/B with their medians and distribution-free 95% intervals (analysis.profile.median_ci),
and the medians of overhead.toggle_share and overhead.retracts.
Example (tracepoint retraction on sqlite3):
    profiler/scripts/env_ab.py build 15 CROSSMOD_PROFILE_RETRACT=1 \\
        --stdin results/amd-fam25-mod17-step1-1pkg/profile/sqlite3_workload-400000.sql \\
        -- --policy budget --trace 'sqlite3_*' -- /usr/bin/sqlite3 :memory:
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from analysis.profile import median_ci  # noqa: E402


def main():
    argv = sys.argv[1:]
    if len(argv) < 5 or "--" not in argv:
        sys.exit(__doc__)
    build, rounds, setting = argv[0], int(argv[1]), argv[2]
    name, _, value = setting.partition("=")
    rest = argv[3:]
    stdin = None
    if rest[0] == "--stdin":
        stdin, rest = rest[1], rest[2:]
    if rest[0] != "--" or "--" not in rest[1:]:
        sys.exit(__doc__)
    cut = rest.index("--", 1)
    prof_args, program = rest[1:cut], rest[cut + 1:]
    none_args = list(prof_args)
    if "--policy" in none_args:
        none_args[none_args.index("--policy") + 1] = "none"
    else:
        none_args = ["--policy", "none"] + none_args
    arms = {"A": (prof_args, True), "B": (prof_args, False), "none": (none_args, False)}
    cpu = {a: [] for a in arms}
    extra = {a: {"toggle_share": [], "retracts": []} for a in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            order = list(arms)[r % 3:] + list(arms)[:r % 3]
            for arm in order:
                args, with_setting = arms[arm]
                env = dict(os.environ)
                env.pop(name, None)
                if with_setting:
                    env[name] = value
                out = f"{tmp}/{r}-{arm}"
                with open(stdin) if stdin else open(os.devnull) as fin:
                    subprocess.run([f"{build}/crossmod", "profile", "--quiet", *args, "--out", out, "--", *program],
                                   stdin=fin, stdout=subprocess.DEVNULL, env=env, check=True)
                j = json.load(open(f"{out}/profile.json"))
                cpu[arm].append(j["run"]["cpu_s"])
                for k in extra[arm]:
                    extra[arm][k].append(j["overhead"].get(k) or 0)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)

    def line(label, xs):
        ci = median_ci(xs)
        ci_s = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "(too few rounds)"
        print(f"{label:10} median {statistics.median(xs):.3f}  95% interval {ci_s}")

    for arm in arms:
        print(f"{arm:5} cpu_s median {statistics.median(cpu[arm]):.3f}  toggle_share "
              f"{statistics.median(extra[arm]['toggle_share']):.4f}  retracts {statistics.median(extra[arm]['retracts']):.0f}")
    line("A/none", [a / n for a, n in zip(cpu["A"], cpu["none"])])
    line("B/none", [b / n for b, n in zip(cpu["B"], cpu["none"])])
    line("A/B", [a / b for a, b in zip(cpu["A"], cpu["B"])])


if __name__ == "__main__":
    main()
