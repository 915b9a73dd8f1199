#!/usr/bin/python3
"""Does `--policy budget` charge what the instrumentation really costs? Interleaved rounds of
    none       crossmod profile --policy none (runtime loaded, no probe ever on)
    dimeB      crossmod profile --policy budget --budget B% --samples 1000000
on one program; prints per run the CPU seconds, the extra CPU over `none` of the same round
as a share of the run's CPU ("measured"), and what the profiler charged itself
(overhead.instr_share + toggle_share, "charged") and its calibration (calib_ticks_per_hit).

    profiler/scripts/budget_overspend.py BUILD ROUNDS BUDGET% -- PROGRAM ARGS...
"""
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def run(crossmod, args, prog):
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "p"
        subprocess.run([crossmod, "profile", "--quiet", "--out", str(out), *args, "--", *prog],
                       check=True, stdout=subprocess.DEVNULL)
        return json.loads((out / "profile.json").read_text())


def main():
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        sys.exit(2)
    crossmod = str(Path(sys.argv[1]) / "crossmod")
    rounds, budget, prog = int(sys.argv[2]), sys.argv[3], sys.argv[5:]
    rows = []
    for r in range(rounds):
        none = run(crossmod, ["--policy", "none"], prog)
        dime = run(crossmod, ["--policy", "budget", "--budget", budget, "--samples", "1000000"], prog)
        cn, cd = none["run"]["cpu_s"], dime["run"]["cpu_s"]
        o = dime["overhead"]
        measured = (cd - cn) / cd
        charged = o["instr_share"] + o["toggle_share"]
        rows.append((measured, charged))
        print(f"round {r}: none {cn:.3f} s, budget {budget} {cd:.3f} s, measured {measured:+.1%}, "
              f"charged {charged:.1%} (instr {o['instr_share']:.1%}, toggle {o['toggle_share']:.1%}), "
              f"calib {o['calib_ticks_per_hit']} ticks/hit, samples/s {o['samples_per_s']:.0f}, "
              f"toggles/s {o['toggles_per_s']:.0f}")
    print(f"median measured {statistics.median(m for m, _ in rows):+.1%}, "
          f"median charged {statistics.median(c for _, c in rows):.1%}")


if __name__ == "__main__":
    main()
