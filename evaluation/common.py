"""What every evaluation shares: running a command and taking its CPU and wall time,
the interleaving of configurations over rounds, and (from analysis.profile) the
distribution-free interval of a median. Single-threaded; each run is a child process waited for before the next starts.
"""
from __future__ import annotations

import os
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from analysis.profile import median_ci  # noqa: F401  (re-exported: one definition)


class UsageError(Exception):
    """Bad input: the entry point prints one line and exits 2, having written nothing."""


@dataclass
class RunResult:
    rc: Optional[int]          # None: killed at the timeout
    cpu_s: float               # user + sys of the command and every descendant it waited for
    wall_s: float
    stdout: bytes


def run_measured(argv: Sequence[str], *, stdin: Optional[Path] = None,
                 env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None,
                 timeout: float = 600.0) -> RunResult:
    """Runs argv to completion. CPU time comes from RUSAGE_CHILDREN before and after, so
    it includes every process the command waited for (a tracer's recorder, the traced
    program) and the kernel time the program spent in uprobe handlers."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(stdin if stdin else os.devnull, "rb") as inp:
        try:
            p = subprocess.run(list(argv), stdin=inp, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, env=env, cwd=cwd, timeout=timeout)
            rc, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            rc, out = None, e.stdout or b""
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return RunResult(rc, cpu, wall, out)


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """The order of one round: every configuration once, the start rotated each round, so
    no configuration always runs first (after an idle gap) or right after the same one."""
    k = round_index % len(names) if names else 0
    return list(names[k:]) + list(names[:k])


def fmt_interval(ci: Optional[tuple[float, float]], digits: int = 2) -> str:
    return "n/a" if ci is None else f"{ci[0]:.{digits}f}..{ci[1]:.{digits}f}"
