#!/usr/bin/env python3
"""Do the sampled calls see the machine's stalls as often as all calls do? Interleaved A/B
of the daemon's wake jitter (on: the default; off: CROSSMOD_PROFILE_NO_JITTER=1), or with
--cpu of where the daemon runs (one-cpu: the whole profiled run pinned to the last CPU with
taskset, so the daemon wakes on the worker's CPU; free: not pinned, so with one worker
thread it mostly wakes on another).

    profiler/scripts/stall_phase_ab.py [--cpu] BUILD_DIR ROUNDS [THREADS] [POLICY]

Each round runs latency_lab_cyg and latency_lab_pfe under `crossmod profile --policy
POLICY` (default paper, 1 thread, 24,000 iterations in all), once with and once without
the jitter, alternating. latency_lab's truth gives each function's on-CPU mean and the part
of it lost to stalls inside the spins (oncpu_stall_ticks_per_call: gaps between its TSC
reads, interrupts or the hypervisor). Prints, per function and arm, the median over runs of

    seen = (estimate - (truth - stall)) / stall

1 when the samples carry the stalls at the rate all calls do, 0 when they miss them all
(probe bias adds to it: read it for the functions where stall >> the probes' tens of
ticks), and, per arm, how often the on-CPU interval covers the whole call's truth
(lab_truth.call_truth, from the round's run without the profiler). Writes into a temporary folder; nothing is kept.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

from lab_truth import call_estimates


def main():
    argv = sys.argv[1:]
    by_cpu = bool(argv) and argv[0] == "--cpu"
    if by_cpu:
        argv = argv[1:]
    if len(argv) < 2:
        sys.exit(__doc__)
    build, rounds = argv[0], int(argv[1])
    threads = int(argv[2]) if len(argv) > 2 else 1
    policy = argv[3] if len(argv) > 3 else "paper"
    arms = ("one-cpu", "free") if by_cpu else ("jitter", "no-jitter")
    last_cpu = str(max(os.sched_getaffinity(0)))
    seen, cover = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for prov in ("cyg", "pfe"):
                lab = f"{build}/profiler/workloads/latency_lab_{prov}"
                args = ["--threads", str(threads), "--iterations", str(24000 // threads)]
                subprocess.run([lab, *args, "--truth", f"{tmp}/base.json"], check=True, stdout=subprocess.DEVNULL)
                for arm in arms if r % 2 == 0 else arms[::-1]:
                    d = f"{tmp}/r{r}-{prov}-{arm}"
                    env = dict(os.environ)
                    env.pop("CROSSMOD_PROFILE_NO_JITTER", None)
                    if arm == "no-jitter":
                        env["CROSSMOD_PROFILE_NO_JITTER"] = "1"
                    pin = ["taskset", "-c", last_cpu] if arm == "one-cpu" else []
                    subprocess.run([*pin, f"{build}/crossmod", "profile", "--policy", policy, "--quiet", "--out",
                                    d + "/p", "--", lab, *args, "--truth", d + ".json"],
                                   check=True, stdout=subprocess.DEVNULL, env=env)
                    for f, e, call, lo, hi in call_estimates(d + ".json", d + "/p/profile.json", f"{tmp}/base.json"):
                        c = cover.setdefault(arm, [0, 0])
                        c[0] += lo <= call <= hi
                        c[1] += 1
                        stall = f["oncpu_stall_ticks_per_call"]
                        if stall > 0:
                            seen.setdefault((f["name"], arm), []).append(
                                (e["oncpu_mean_ticks"] - (call - stall)) / stall)
            print(f"round {r + 1}/{rounds} done", file=sys.stderr)
    for (name, arm), v in sorted(seen.items()):
        print(f"{name:14} {arm:9} seen {statistics.median(v):6.2f}  (n={len(v)})")
    for arm, (k, n) in sorted(cover.items()):
        print(f"{arm:9} interval covers the call's truth {k}/{n}")


if __name__ == "__main__":
    main()
