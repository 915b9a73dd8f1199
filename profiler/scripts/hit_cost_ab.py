#!/usr/bin/env python3
"""What a probe hit costs the program against what the budget's accounting charges it.

    profiler/scripts/hit_cost_ab.py [--build DIR] [--trace PATTERN] ROUNDS cmd=COMMAND

COMMAND is any program (split like a shell would), profiled through --trace PATTERN or
through its own provider build. Every round runs `--policy none` and `--policy full` once
each, in alternating order. Under full every call of a function with
an entry and an exit probe is two hits, so a round's real cost per hit is

    (CPU of full - CPU of none) x tsc_hz / (2 x calls observed)

and what the accounting charged per hit is full's instr_ticks less its set-up, over the
same hits (the daemon's time is not in instr_ticks under full). Prints both per round, their
medians, and the part of the charge that is the providers' nest share (extra_ticks). Both
runs' CPU is the program's own (profile.json run.user_s + sys_s). Example:

    profiler/scripts/hit_cost_ab.py --trace 'Py*' 8 "cmd=/usr/bin/python3 profiler/workloads/python_cpu.py 10"
"""
import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import configs_ab  # noqa: E402  (the command workload and the run helper)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(configs_ab.ROOT / "build"), help="build folder with crossmod (default build/)")
    p.add_argument("--trace", help="--trace pattern (default: none, the program's own provider build)")
    p.add_argument("rounds", type=int)
    p.add_argument("workload")
    a = p.parse_args()
    if a.rounds < 1:
        print("hit_cost_ab.py: ROUNDS >= 1, please", file=sys.stderr)
        return 2
    try:
        w = configs_ab.command_workload(a.workload)
    except ValueError as e:
        print(f"hit_cost_ab.py: {e}", file=sys.stderr)
        return 2
    if w is None:
        print(f"hit_cost_ab.py: the workload must be cmd=COMMAND, not {a.workload!r}", file=sys.stderr)
        return 2
    w.trace = a.trace
    cfgs = {n: configs_ab.parse_config(f"{n}=--policy {n}") for n in ("none", "full")}
    real, charged, extra = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            cpu = {}
            for n in (("none", "full") if r % 2 == 0 else ("full", "none")):
                out = f"{tmp}/r{r}-{n}"
                cpu[n], _ = configs_ab.run(cfgs[n], w, a.build, out)
                if n == "full":
                    j = json.load(open(Path(out) / "profile.json"))
            o, hz = j["overhead"], j["run"]["tsc_hz"]
            hits = 2 * sum(f["calls_observed"] for f in j["functions"])
            if hits == 0:
                print(f"hit_cost_ab.py: round {r}: no calls observed under full", file=sys.stderr)
                return 1
            real.append((cpu["full"] - cpu["none"]) * hz / hits)
            charged.append((o["instr_ticks"] - o.get("setup_s", 0.0) * hz) / hits)
            extra.append(o.get("extra_ticks", 0) / hits)
            print(f"round {r + 1}/{a.rounds}: cpu none {cpu['none']:.3f} s, full {cpu['full']:.3f} s, {hits} hits: "
                  f"real {real[-1]:.0f} ticks/hit, charged {charged[-1]:.0f} (nest share {extra[-1]:.0f})", flush=True)
    m_real, m_charged = statistics.median(real), statistics.median(charged)
    print(f"medians over {a.rounds} rounds: real {m_real:.0f} ticks/hit, charged {m_charged:.0f} "
          f"(nest share {statistics.median(extra):.0f}); charged / real {m_charged / m_real:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
