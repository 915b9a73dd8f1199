"""`crossmod profile` results: a loader for profile.json (schema 1, see profiler/README.md,
"What the numbers mean"), the ground truth written by
profiler/workloads/latency_lab, and the evaluation tables of issue 12 computed from the
run list scripts/profile_eval.py writes (runs.csv):

- table3:   per workload and policy, CPU-time slowdown against the run without any
            preload (paired per round of the interleaving: median and min..max over
            rounds), the same against `none` of the round (the runtime loaded, no probe on:
            a policy's cost beyond start-up), toggle share, the runtime's set-up share
            (its scan, --trace attach and calibration: overhead.setup_share), toggles/s,
            samples/s, probes, functions (PLDI'16 Table 3).
- accuracy: per latency_lab function and run, the true mean latency against the estimate
            and its interval (covered? within 10%?); and the on-CPU mean (samples without
            a context switch, newer profilers) against the true mean of unpreempted calls.
- information: per run, what a policy kept of what full instrumentation (the same
            workload, the same round) got: functions seen, and latency estimates within 10%
            (of the ground truth where there is one, else of full's estimate); the same
            with p50 and with the on-CPU mean (kept_p50, kept_oncpu).
- dime_curve: information kept against slowdown for the `budget` policy at each budget
            (the dimeN runs, whose sampling only the budget limits, when present).

Pure functions over loaded data; every reader raises loaders.InputError naming the file
and the field at fault. Regenerate everything with `python3 -m analysis.profile_cli DIR`.
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from .loaders import InputError

PROFILE_SCHEMA = 1
POLICIES = ("paper", "budget", "converge", "full", "none")
# Policies in table order; "baseline" is the program with no preload at all.
TABLE_ORDER = ("baseline", "none", "full", "paper", "budget", "converge")
TOLERANCE = 0.10


# ---------------------------------------------------------------------------- profile.json

@dataclass
class FunctionStat:
    name: str
    object: str
    provider: str
    calls_observed: int
    calls_estimated: Optional[float]
    samples: int
    mean_ticks: Optional[float]
    mean_ci_ticks: Optional[tuple[float, float]]
    p50_ticks: Optional[float]
    p99_ticks: Optional[float]
    share: Optional[float]
    hist_edges: list[float] = field(default_factory=list)
    hist_counts: list[int] = field(default_factory=list)
    converged: bool = False
    address: str = ""
    # Added by the profiler in session 2026-11-23 21:45 (optional: older files lack them,
    # and null means unavailable): mean_ticks is then compensated for the instrumentation's
    # own time, raw_mean_ticks is the mean as timed; oncpu_* cover the samples during
    # which the thread was not context-switched (switched_samples were).
    raw_mean_ticks: Optional[float] = None
    switched_samples: Optional[int] = None
    oncpu_samples: Optional[int] = None
    oncpu_mean_ticks: Optional[float] = None
    oncpu_mean_ci_ticks: Optional[tuple[float, float]] = None
    # Since 2026-11-25 (optional): the systematic term (the part of the compensation made
    # of calibrated constants, mean per sample) and the intervals widened by it.
    mean_sys_ticks: Optional[float] = None
    mean_bound_ticks: Optional[tuple[float, float]] = None
    oncpu_mean_bound_ticks: Optional[tuple[float, float]] = None


@dataclass
class Profile:
    path: Path
    command: list[str]
    policy: dict[str, Any]
    exit: dict[str, Any]
    run: dict[str, Any]
    overhead: dict[str, Any]
    timeline: list[dict[str, Any]]
    functions: list[FunctionStat]
    notes: list[str]
    raw: dict[str, Any]

    @property
    def policy_name(self) -> str:
        return str(self.policy.get("name", ""))

    @property
    def tsc_hz(self) -> Optional[float]:
        v = self.run.get("tsc_hz")
        return float(v) if _is_num(v) and v > 0 else None

    def by_name(self) -> dict[str, FunctionStat]:
        """One entry per name; a name with several entries (same name in two objects, or
        several providers) keeps the one with the most samples."""
        out: dict[str, FunctionStat] = {}
        for f in self.functions:
            if f.name not in out or f.samples > out[f.name].samples:
                out[f.name] = f
        return out

    def seen(self) -> set[str]:
        return {f.name for f in self.functions if f.samples > 0 or f.calls_observed > 0}

    @property
    def switch_detection(self) -> Optional[str]:
        """run.switch_detection: "perf", "unavailable: <reason>", or None (older files)."""
        v = self.run.get("switch_detection")
        return v if isinstance(v, str) else None

    @property
    def has_oncpu(self) -> bool:
        """Whether this profile carries on-CPU estimates: the runtime detected context
        switches (run.switch_detection "perf"), or (a file without that key) some function
        has an oncpu_mean_ticks. A profile with detection on but no function at all (policy
        none) has them: it estimated nothing."""
        sd = self.switch_detection
        if sd is not None:
            return sd == "perf"
        return any(f.oncpu_mean_ticks is not None for f in self.functions)


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _opt_num(path: Path, where: str, obj: dict, key: str) -> Optional[float]:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_num(v):
        raise InputError(path, f"{where}.{key}: expected a number or null, got {v!r}")
    return float(v)


def _opt_count(path: Path, where: str, obj: dict, key: str) -> Optional[int]:
    v = obj.get(key)
    if v is None:
        return None
    if not _is_num(v) or v < 0 or v != int(v):
        raise InputError(path, f"{where}.{key}: expected a count (integer >= 0) or null, got {v!r}")
    return int(v)


def _opt_interval(path: Path, where: str, obj: dict, key: str, ordered: bool = False) -> Optional[tuple[float, float]]:
    ci = obj.get(key)
    if ci is None:
        return None
    if not (isinstance(ci, list) and len(ci) == 2 and all(_is_num(x) for x in ci)):
        raise InputError(path, f"{where}.{key}: expected [low, high] or null, got {ci!r}")
    if ordered and ci[0] > ci[1]:
        raise InputError(path, f"{where}.{key}: low {ci[0]!r} above high {ci[1]!r}")
    return float(ci[0]), float(ci[1])


def _req(path: Path, where: str, obj: Any, key: str, kind: type | tuple) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise InputError(path, f"{where}: missing key '{key}'")
    v = obj[key]
    if kind in (int, float, (int, float)):
        if not _is_num(v):
            raise InputError(path, f"{where}.{key}: expected a number, got {v!r}")
        return v
    if not isinstance(v, kind):
        raise InputError(path, f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {type(v).__name__}")
    return v


def _function(path: Path, i: int, f: Any) -> FunctionStat:
    where = f"functions[{i}]"
    if not isinstance(f, dict):
        raise InputError(path, f"{where}: expected an object")
    name = _req(path, where, f, "name", str)
    ci = _opt_interval(path, where, f, "mean_ci_ticks")
    hist = f.get("hist") or {}
    edges, counts = [], []
    if hist:
        if not isinstance(hist, dict):
            raise InputError(path, f"{where}.hist: expected an object")
        edges = hist.get("edges_ticks") or []
        counts = hist.get("counts") or []
        if not (isinstance(edges, list) and isinstance(counts, list) and all(_is_num(x) for x in edges + counts)):
            raise InputError(path, f"{where}.hist: edges_ticks and counts must be lists of numbers")
        if counts and len(edges) != len(counts) + 1:
            raise InputError(path, f"{where}.hist: {len(edges)} edges for {len(counts)} counts (want counts + 1)")
    return FunctionStat(
        name=name, object=str(f.get("object", "")), provider=str(f.get("provider", "")),
        calls_observed=int(_req(path, where, f, "calls_observed", (int, float))),
        calls_estimated=_opt_num(path, where, f, "calls_estimated"),
        samples=int(_req(path, where, f, "samples", (int, float))),
        mean_ticks=_opt_num(path, where, f, "mean_ticks"), mean_ci_ticks=ci,
        p50_ticks=_opt_num(path, where, f, "p50_ticks"), p99_ticks=_opt_num(path, where, f, "p99_ticks"),
        share=_opt_num(path, where, f, "share"),
        hist_edges=[float(x) for x in edges], hist_counts=[int(x) for x in counts],
        converged=bool(f.get("converged", False)), address=str(f.get("address", "")),
        raw_mean_ticks=_opt_num(path, where, f, "raw_mean_ticks"),
        switched_samples=_opt_count(path, where, f, "switched_samples"),
        oncpu_samples=_opt_count(path, where, f, "oncpu_samples"),
        oncpu_mean_ticks=_opt_num(path, where, f, "oncpu_mean_ticks"),
        oncpu_mean_ci_ticks=_opt_interval(path, where, f, "oncpu_mean_ci_ticks", ordered=True),
        mean_sys_ticks=_opt_num(path, where, f, "mean_sys_ticks"),
        mean_bound_ticks=_opt_interval(path, where, f, "mean_bound_ticks", ordered=True),
        oncpu_mean_bound_ticks=_opt_interval(path, where, f, "oncpu_mean_bound_ticks", ordered=True))


def load_profile(path: Path) -> Profile:
    """profile.json of `crossmod profile`, schema 1. A directory means DIR/profile.json, or
    DIR/profile.json.gz (scripts/profile_eval.py compresses the ones it keeps)."""
    path = Path(path)
    if path.is_dir():
        path = path / "profile.json" if (path / "profile.json").is_file() or not (path / "profile.json.gz").is_file() \
            else path / "profile.json.gz"
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    try:
        data = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (OSError, EOFError, UnicodeDecodeError) as e:   # gzip.BadGzipFile is an OSError
        raise InputError(path, f"not readable as {'gzip ' if path.suffix == '.gz' else ''}JSON: {e}") from None
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object")
    if data.get("schema") != PROFILE_SCHEMA:
        raise InputError(path, f"schema {data.get('schema')!r}, this reader knows schema {PROFILE_SCHEMA}")
    policy = _req(path, "profile", data, "policy", dict)
    run = _req(path, "profile", data, "run", dict)
    overhead = _req(path, "profile", data, "overhead", dict)
    for key in ("cpu_s", "wall_s"):
        _req(path, "run", run, key, (int, float))
    if run.get("switch_detection") is not None and not isinstance(run["switch_detection"], str):
        raise InputError(path, f"run.switch_detection: expected a string or null, got {run['switch_detection']!r}")
    functions = _req(path, "profile", data, "functions", list)
    timeline = data.get("timeline") or []
    if not isinstance(timeline, list) or not all(isinstance(t, dict) for t in timeline):
        raise InputError(path, "timeline: expected a list of objects")
    return Profile(path=path, command=list(data.get("command") or []), policy=policy,
                   exit=data.get("exit") or {}, run=run, overhead=overhead, timeline=timeline,
                   functions=[_function(path, i, f) for i, f in enumerate(functions)],
                   notes=[str(n) for n in data.get("notes") or []], raw=data)


# ---------------------------------------------------------------------------- ground truth

@dataclass
class TruthFn:
    name: str
    calls: int
    mean_ticks: Optional[float]
    mean_unpreempted_ticks: Optional[float]
    spin_ticks: int
    # What a call costs besides the spin its truth records (latency_lab measures it at
    # start; only an uninstrumented run's value is the functions' own): the file's top level.
    call_overhead_ticks: Optional[float] = None
    # Mean over the calls during which the thread did not leave the CPU (latency_lab reads
    # the same kernel switch sequence as the profiler around each spin); None in older files.
    mean_oncpu_ticks: Optional[float] = None
    # Of mean_oncpu_ticks, the part the spin lost to stalls that were no context switch
    # (gaps between its TSC reads: interrupts, the hypervisor); None in older files.
    oncpu_stall_ticks_per_call: Optional[float] = None
    # Calls made inside each call whose cost beyond their spin the truth leaves out
    # (lab_outer's two lab_inner_3k).
    nested_calls: int = 0
    # What those calls cost beyond their spins, per call that stayed on the CPU, as the
    # program timed them around each nested call; None in older files (then a whole call
    # is counted as 1 + nested_calls fixed call costs).
    oncpu_nested_cost_ticks: Optional[float] = None
    # What a call of this function cost beyond its recorded ticks, timed from its caller in
    # the workload (a rare function runs colder than call_overhead_ticks' hot loop: 200-216
    # ticks for lab_rare_50k against 31 on the Intel guest); None in older files.
    oncpu_call_cost_ticks: Optional[float] = None


def load_truth(path: Path) -> dict[str, TruthFn]:
    """The --truth file of latency_lab: name -> true calls and mean latency."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise InputError(path, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    if not isinstance(data, dict) or data.get("tool") != "latency_lab" or data.get("schema") != 1:
        raise InputError(path, "not a latency_lab truth file (schema 1)")
    out = {}
    overhead = _opt_num(path, "truth", data, "call_overhead_ticks")
    for i, f in enumerate(_req(path, "truth", data, "functions", list)):
        where = f"functions[{i}]"
        name = _req(path, where, f, "name", str)
        out[name] = TruthFn(name=name, calls=int(_req(path, where, f, "calls", (int, float))),
                            mean_ticks=_opt_num(path, where, f, "mean_ticks"),
                            mean_unpreempted_ticks=_opt_num(path, where, f, "mean_unpreempted_ticks"),
                            spin_ticks=int(f.get("spin_ticks") or 0), call_overhead_ticks=overhead,
                            mean_oncpu_ticks=_opt_num(path, where, f, "mean_oncpu_ticks"),
                            oncpu_stall_ticks_per_call=_opt_num(path, where, f, "oncpu_stall_ticks_per_call"),
                            nested_calls=int(f.get("nested_calls") or 0),
                            oncpu_nested_cost_ticks=_opt_num(path, where, f, "oncpu_nested_cost_ticks"),
                            oncpu_call_cost_ticks=_opt_num(path, where, f, "oncpu_call_cost_ticks"))
    return out


# ---------------------------------------------------------------------------- runs.csv

RUN_COLUMNS = ("round", "order", "workload", "provider", "policy", "budget", "label", "rc",
               "cpu_s", "wall_s", "launcher_cpu_s", "profile", "truth", "note")


def load_runs(path: Path) -> list[dict[str, Any]]:
    """runs.csv of scripts/profile_eval.py: one row per run, in the order they ran."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror or e}") from None
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in RUN_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(path, f"missing column(s) {', '.join(missing)}")
    rows = []
    for line, raw in enumerate(reader, start=2):
        try:
            row = dict(raw)
            row["round"] = int(raw["round"])
            row["order"] = int(raw["order"])
            row["rc"] = int(raw["rc"]) if raw["rc"] != "" else None
            for k in ("budget", "cpu_s", "wall_s", "launcher_cpu_s"):
                row[k] = float(raw[k]) if raw[k] != "" else None
        except (TypeError, ValueError):
            raise InputError(path, f"line {line}: a number column does not hold a number") from None
        rows.append(row)
    return rows


def _resolve(base: Path, rel: str) -> Optional[Path]:
    return (base / rel) if rel else None


def attach(rows: list[dict[str, Any]], base: Path) -> list[dict[str, Any]]:
    """Loads each run's profile.json and truth file (paths in runs.csv are relative to it)."""
    for r in rows:
        p = _resolve(base, r.get("profile", ""))
        t = _resolve(base, r.get("truth", ""))
        r["_profile"] = load_profile(p) if p is not None and (
            p.is_file() or (p / "profile.json").is_file() or (p / "profile.json.gz").is_file()) else None
        r["_truth"] = load_truth(t) if t is not None and t.is_file() else None
    return rows


# ---------------------------------------------------------------------------- statistics

def _median(xs: list[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def median_ci(xs: list[float], level: float = 0.95) -> Optional[tuple[float, float]]:
    """Distribution-free interval for the median of independent draws (the rounds: each
    a separate run, interleaved): [x_(k), x_(n+1-k)] of the sorted values with the largest
    k such that P(Binomial(n, 1/2) < k) <= (1 - level) / 2, so it covers the median with
    probability >= level whatever the distribution. None when n is too small for any k
    (n < 6 at 95%)."""
    n = len(xs)
    alpha = (1 - level) / 2
    k, tail = 0, 0.0
    while k < n and tail + math.comb(n, k) / 2 ** n <= alpha:
        tail += math.comb(n, k) / 2 ** n
        k += 1
    if k == 0:
        return None
    v = sorted(xs)
    return v[k - 1], v[n - k]


def _config(r: dict) -> str:
    return r["label"]


def paired_slowdowns(rows: list[dict[str, Any]], reference: str = "baseline") -> dict[tuple[str, str], list[float]]:
    """(workload, label) -> CPU-time ratio to the run labelled `reference` of the same round:
    the no-preload baseline, or `none` (the runtime loaded, every probe off: what a policy
    costs beyond the runtime's start-up)."""
    base = {(r["workload"], r["round"]): r["cpu_s"] for r in rows
            if _config(r) == reference and r["rc"] == 0 and r["cpu_s"]}
    out: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        b = base.get((r["workload"], r["round"]))
        if _config(r) == reference or r["policy"] == "baseline" or b is None or r["cpu_s"] is None or r["rc"] != 0:
            continue
        out.setdefault((r["workload"], _config(r)), []).append(r["cpu_s"] / b)
    return out


def table3(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (workload, configuration), in run order of first appearance."""
    slow = paired_slowdowns(rows)
    over_none = paired_slowdowns(rows, "none")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["workload"], _config(r)), []).append(r)
    out = []
    for (workload, label), rs in groups.items():
        ok = [r for r in rs if r["rc"] == 0]
        profs = [r["_profile"] for r in ok if r.get("_profile") is not None]

        def med(key: str, src: str = "overhead") -> Optional[float]:
            vals = [float(getattr(p, src).get(key)) for p in profs if _is_num(getattr(p, src).get(key))]
            return _median(vals)

        s = slow.get((workload, label), [])
        ci = median_ci(s) or (None, None)
        sn = over_none.get((workload, label), [])
        ci_n = median_ci(sn) or (None, None)
        out.append({
            "workload": workload, "provider": rs[0]["provider"], "config": label,
            "policy": rs[0]["policy"], "budget": rs[0]["budget"],
            "runs": len(rs), "failed_runs": len(rs) - len(ok),
            "cpu_s_median": _median([r["cpu_s"] for r in ok if r["cpu_s"] is not None]),
            "slowdown_median": 1.0 if rs[0]["policy"] == "baseline" and ok else _median(s),
            "slowdown_min": min(s) if s else None, "slowdown_max": max(s) if s else None,
            "slowdown_ci_lo": ci[0], "slowdown_ci_hi": ci[1],
            "vs_none_median": 1.0 if label == "none" and ok else _median(sn),
            "vs_none_ci_lo": ci_n[0], "vs_none_ci_hi": ci_n[1],
            "instr_share": med("instr_share"), "toggle_share": med("toggle_share"),
            "daemon_share": med("daemon_share"), "setup_share": med("setup_share"),
            "toggles_per_s": med("toggles_per_s"), "samples_per_s": med("samples_per_s"),
            "probes": med("probes"), "functions": med("functions"),
        })
    return out


def _within(est: Optional[float], ref: Optional[float], tol: float = TOLERANCE) -> Optional[bool]:
    if est is None or ref is None or ref <= 0:
        return None
    return abs(est - ref) <= tol * ref


def _covers(ci: Optional[tuple[float, float]], ref: Optional[float]) -> Optional[bool]:
    if ci is None or ref is None:
        return None
    return ci[0] <= ref <= ci[1]


def baseline_overheads(rows: list[dict[str, Any]]) -> dict[tuple[str, Any], float]:
    """(workload, round) -> call_overhead_ticks of that round's run without any preload:
    the spin functions' own fixed cost, which a profiled run's truth file cannot give (its
    measurement runs under the probes)."""
    out = {}
    for r in rows:
        t = r.get("_truth")
        if r.get("policy") in ("", None, "baseline") and t:
            v = next(iter(t.values())).call_overhead_ticks
            if v is not None:
                out[(r["workload"], r["round"])] = v
    return out


def _baseline_per_function(rows: list[dict[str, Any]], attr: str) -> dict[tuple[str, Any], dict[str, float]]:
    """(workload, round) -> {function: the TruthFn attribute attr} of that round's run
    without any preload, for the functions that have it."""
    out = {}
    for r in rows:
        t = r.get("_truth")
        if r.get("policy") in ("", None, "baseline") and t:
            values = {n: getattr(f, attr) for n, f in t.items() if getattr(f, attr) is not None}
            if values:
                out[(r["workload"], r["round"])] = values
    return out


def baseline_nested_costs(rows: list[dict[str, Any]]) -> dict[tuple[str, Any], dict[str, float]]:
    """(workload, round) -> {function: oncpu_nested_cost_ticks} of that round's run without
    any preload: what the nested calls a truth leaves out cost in the program itself (a
    profiled run's value holds the probes on them)."""
    return _baseline_per_function(rows, "oncpu_nested_cost_ticks")


def baseline_call_costs(rows: list[dict[str, Any]]) -> dict[tuple[str, Any], dict[str, float]]:
    """(workload, round) -> {function: oncpu_call_cost_ticks} of that round's run without
    any preload: each function's fixed cost as the workload runs it, timed from its caller
    (a profiled run's value holds the probes). Where present it replaces call_overhead_ticks."""
    return _baseline_per_function(rows, "oncpu_call_cost_ticks")


def _call_truth(t: "TruthFn", overhead: Optional[float], nested_cost: Optional[float] = None) -> Optional[float]:
    """A call's true length on CPU: the spin mean over the calls without a context switch
    (the profiler's on-CPU estimand; the unpreempted mean in older truth files) plus the
    fixed cost of the call, plus what the calls it makes whose cost the truth leaves out
    cost in the uninstrumented run (nested_cost; nested_calls fixed costs without it)."""
    spin = t.mean_oncpu_ticks if t.mean_oncpu_ticks is not None else t.mean_unpreempted_ticks
    if spin is None or overhead is None:
        return None
    if t.nested_calls == 0:
        return spin + overhead
    return spin + overhead + (nested_cost if nested_cost is not None else t.nested_calls * overhead)


def _busy_call_truth(t: "TruthFn", overhead: Optional[float], nested_cost: Optional[float] = None) -> Optional[float]:
    """The same without the stalls inside the spins (time the machine took from the thread
    without a context switch): the lower end of what a sample of the calls can show."""
    call = _call_truth(t, overhead, nested_cost)
    if call is None or t.oncpu_stall_ticks_per_call is None:
        return None
    return call - t.oncpu_stall_ticks_per_call


def _meets(ci: Optional[tuple[float, float]], lo: Optional[float], hi: Optional[float]) -> Optional[bool]:
    """Whether the interval ci and [lo, hi] overlap (None if either is missing)."""
    if ci is None or lo is None or hi is None:
        return None
    return ci[0] <= hi and lo <= ci[1]


def accuracy(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per latency_lab function, per profiled run with a truth file.

    est_mean_ticks is profile.json's mean_ticks (compensated for the instrumentation's own
    time by profilers that write raw_mean_ticks; est_raw_mean_ticks is then the uncompensated
    one) against the true mean of all calls. The on-CPU columns (empty for profiles without
    them) put the mean over the samples without a context switch, and its interval, against
    the true mean of the calls the kernel did not preempt, and against the same plus the
    call's fixed cost measured by the round's uninstrumented run (true_call_ticks, see
    baseline_overheads): what a compensated estimate of a whole call should be."""
    out = []
    overheads, nested_costs = baseline_overheads(rows), baseline_nested_costs(rows)
    call_costs = baseline_call_costs(rows)
    for r in rows:
        prof, truth = r.get("_profile"), r.get("_truth")
        if prof is None or truth is None:
            continue
        overhead = overheads.get((r["workload"], r["round"]))
        nested = nested_costs.get((r["workload"], r["round"]), {})
        costs = call_costs.get((r["workload"], r["round"]), {})
        est = prof.by_name()
        for name, t in truth.items():
            own = costs.get(name, overhead)  # the function's own fixed cost, else the hot one
            call, busy = _call_truth(t, own, nested.get(name)), _busy_call_truth(t, own, nested.get(name))
            f = est.get(name)
            ci = f.mean_ci_ticks if f else None
            mean = f.mean_ticks if f else None
            oncpu = f.oncpu_mean_ticks if f else None
            oci = f.oncpu_mean_ci_ticks if f else None
            bound = f.mean_bound_ticks if f else None
            obound = f.oncpu_mean_bound_ticks if f else None
            out.append({
                "workload": r["workload"], "config": _config(r), "round": r["round"], "function": name,
                "true_calls": t.calls, "calls_estimated": f.calls_estimated if f else None,
                "samples": f.samples if f else 0,
                "true_mean_ticks": t.mean_ticks, "true_mean_unpreempted_ticks": t.mean_unpreempted_ticks,
                "est_mean_ticks": mean, "est_p50_ticks": f.p50_ticks if f else None,
                "ci_low": ci[0] if ci else None, "ci_high": ci[1] if ci else None,
                "covered": _covers(ci, t.mean_ticks),
                "within_10pct": _within(mean, t.mean_ticks),
                "within_10pct_unpreempted": _within(mean, t.mean_unpreempted_ticks),
                "p50_within_10pct_unpreempted": _within(f.p50_ticks if f else None, t.mean_unpreempted_ticks),
                "est_raw_mean_ticks": f.raw_mean_ticks if f else None,
                "switched_samples": f.switched_samples if f else None,
                "oncpu_samples": f.oncpu_samples if f else None,
                "est_oncpu_mean_ticks": oncpu,
                "oncpu_ci_lo": oci[0] if oci else None, "oncpu_ci_hi": oci[1] if oci else None,
                "oncpu_covers_unpreempted": _covers(oci, t.mean_unpreempted_ticks),
                "oncpu_within_10pct_unpreempted": _within(oncpu, t.mean_unpreempted_ticks),
                "true_call_ticks": call,
                "oncpu_covers_call": _covers(oci, call),
                "oncpu_within_10pct_call": _within(oncpu, call),
                "true_stall_ticks": t.oncpu_stall_ticks_per_call,
                "true_busy_call_ticks": busy,
                "oncpu_covers_busy_call": _covers(oci, busy),
                "oncpu_meets_busy_to_call": _meets(oci, busy, call),
                "sys_ticks": f.mean_sys_ticks if f else None,
                "bound_covered": _covers(bound, t.mean_ticks),
                "oncpu_bound_covers_unpreempted": _covers(obound, t.mean_unpreempted_ticks),
                "oncpu_bound_covers_call": _covers(obound, call),
            })
    return out


def information(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each run kept of what full instrumentation got (same workload, same round).
    With a truth file, 'accurate' means within 10% of the true mean of the run's own truth
    file, over the truth's timed functions; without, within 10% of full's estimate over the
    functions full saw. kept = (seen + accurate) / (full's seen + full's accurate);
    kept_p50 is the same with p50 against the true mean of unpreempted calls (or full's p50);
    kept_oncpu the same with the on-CPU mean (oncpu_mean_ticks) against the true mean of
    unpreempted calls (or full's oncpu_mean_ticks), None unless both this run's and full's
    profile carry on-CPU estimates (Profile.has_oncpu)."""
    full = {(r["workload"], r["round"]): r for r in rows
            if r["policy"] == "full" and r["rc"] == 0 and r.get("_profile") is not None}
    overheads, nested_costs = baseline_overheads(rows), baseline_nested_costs(rows)
    # The noise floor where there is no truth: the next round's full judged against this
    # round's full like any other run (config "full-next"), i.e. what rerunning full
    # instrumentation itself keeps. Not made for workloads with a truth file.
    reruns = []
    for (w, rnd), fr in full.items():
        nxt = full.get((w, rnd + 1)) if isinstance(rnd, int) else None
        if nxt is not None and fr.get("_truth") is None:
            reruns.append({**nxt, "round": rnd, "label": "full-next", "policy": "full-next"})
    out = []
    for r in list(rows) + reruns:
        prof = r.get("_profile")
        ref = full.get((r["workload"], r["round"]))
        if prof is None or ref is None or r["rc"] != 0:
            continue
        fprof = ref["_profile"]
        truth, ftruth = r.get("_truth"), ref.get("_truth")
        oncpu = prof.has_oncpu and fprof.has_oncpu
        if truth is not None and ftruth is not None:
            universe = [n for n, t in truth.items() if t.mean_ticks is not None]

            def accurate(p: Profile, tr: dict[str, TruthFn]) -> set[str]:
                est = p.by_name()
                return {n for n in universe if n in est and _within(est[n].mean_ticks, tr[n].mean_ticks)}
            def robust(p: Profile, tr: dict[str, TruthFn]) -> set[str]:
                est = p.by_name()
                return {n for n in universe if n in est
                        and _within(est[n].p50_ticks, tr[n].mean_unpreempted_ticks)}

            # On-CPU means against a whole call's true length (unpreempted spin + the fixed
            # cost from the round's uninstrumented run) when that run is there, else against
            # the unpreempted spin mean alone.
            overhead = overheads.get((r["workload"], r["round"]))
            nested = nested_costs.get((r["workload"], r["round"]), {})

            def oncpu_ok(p: Profile, tr: dict[str, TruthFn]) -> set[str]:
                est = p.by_name()
                ref = {n: (_call_truth(t, overhead, nested.get(n)) if overhead is not None else t.mean_unpreempted_ticks)
                       for n, t in tr.items()}
                return {n for n in tr if n in est and _within(est[n].oncpu_mean_ticks, ref[n])}
            seen_p = prof.seen() & set(truth)
            seen_f = fprof.seen() & set(truth)
            acc_p, acc_f = accurate(prof, truth), accurate(fprof, ftruth)
            rob_p, rob_f = robust(prof, truth), robust(fprof, ftruth)
            onc_p, onc_f = oncpu_ok(prof, truth), oncpu_ok(fprof, ftruth)
            basis = "truth"
        else:
            seen_f = fprof.seen()
            seen_p = prof.seen() & seen_f
            fe, pe = fprof.by_name(), prof.by_name()
            # A reference of 0 or less (a compensated mean of an empty function can be) has
            # no 10% band: such a function is left out of the accurate sets.
            acc_f = {n for n in seen_f if fe[n].mean_ticks is not None and fe[n].mean_ticks > 0
                     and fe[n].samples > 0} if seen_f else set()
            acc_p = {n for n in acc_f if n in pe and _within(pe[n].mean_ticks, fe[n].mean_ticks)}
            rob_p = {n for n in acc_f if n in pe and _within(pe[n].p50_ticks, fe[n].p50_ticks)}
            rob_f = {n for n in acc_f if fe[n].p50_ticks is not None and fe[n].p50_ticks > 0}
            onc_f = {n for n in seen_f if fe[n].samples > 0 and fe[n].oncpu_mean_ticks is not None
                     and fe[n].oncpu_mean_ticks > 0}
            onc_p = {n for n in onc_f if n in pe and _within(pe[n].oncpu_mean_ticks, fe[n].oncpu_mean_ticks)}
            basis = "full"
        info_p, info_f = len(seen_p) + len(acc_p), len(seen_f) + len(acc_f)
        out.append({
            "workload": r["workload"], "config": _config(r), "policy": r["policy"], "budget": r["budget"],
            "round": r["round"], "basis": basis,
            "seen": len(seen_p), "seen_full": len(seen_f), "accurate": len(acc_p), "accurate_full": len(acc_f),
            "kept_seen": len(seen_p) / len(seen_f) if seen_f else None,
            "kept_accurate": len(acc_p) / len(acc_f) if acc_f else None,
            "kept": info_p / info_f if info_f else None,
            # The same with medians: p50 within 10% of the true mean of unpreempted calls
            # (truth), or of full's p50: robust to the rare preempted calls.
            "p50_accurate": len(rob_p), "p50_accurate_full": len(rob_f),
            "kept_p50": (len(seen_p) + len(rob_p)) / (len(seen_f) + len(rob_f)) if seen_f or rob_f else None,
            # The same with the mean over the samples without a context switch, against the
            # true mean of unpreempted calls (truth) or full's on-CPU mean.
            "oncpu_accurate": len(onc_p) if oncpu else None,
            "oncpu_accurate_full": len(onc_f) if oncpu else None,
            "kept_oncpu": (len(seen_p) + len(onc_p)) / (len(seen_f) + len(onc_f))
                          if oncpu and (seen_f or onc_f) else None,
        })
    return out


def dime_curve(rows: list[dict[str, Any]], info: Optional[list[dict]] = None) -> list[dict[str, Any]]:
    """Per workload and budget-policy configuration: median slowdown and information kept."""
    info = information(rows) if info is None else info
    slow = paired_slowdowns(rows)
    kept: dict[tuple[str, str], list[dict]] = {}
    for i in info:
        kept.setdefault((i["workload"], i["config"]), []).append(i)
    # The curve's points: the dimeN runs (budget only, see scripts/profile_eval.py) when a
    # workload has them, else its budget-policy runs; and full.
    has_dime = {w for (w, label) in kept if label.startswith("dime")}
    out = []
    for (workload, label), items in kept.items():
        if items[0]["policy"] not in ("budget", "full"):
            continue
        if workload in has_dime and items[0]["policy"] == "budget" and not label.startswith("dime"):
            continue
        s = slow.get((workload, label), [])

        def med(key: str) -> Optional[float]:
            return _median([x[key] for x in items if x[key] is not None])
        out.append({"workload": workload, "config": label, "policy": items[0]["policy"],
                    "budget": items[0]["budget"] if items[0]["policy"] == "budget" else 1.0,
                    "rounds": len(items), "slowdown_median": _median(s),
                    "slowdown_min": min(s) if s else None, "slowdown_max": max(s) if s else None,
                    "kept_median": med("kept"), "kept_seen_median": med("kept_seen"),
                    "kept_accurate_median": med("kept_accurate"), "kept_p50_median": med("kept_p50"),
                    "kept_oncpu_median": med("kept_oncpu")})
    out.sort(key=lambda d: (d["workload"], d["budget"] if d["budget"] is not None else 2.0))
    return out


# ---------------------------------------------------------------------------- writers

def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def write_csv(path: Path, rows: list[dict[str, Any]], columns: Optional[Iterable[str]] = None) -> Path:
    cols = list(columns) if columns is not None else (list(rows[0].keys()) if rows else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(cols)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in cols])
    return path


def _pct(v: Optional[float], digits: int = 2) -> str:
    return "-" if v is None else f"{100 * v:.{digits}f}%"


def _num(v: Optional[float]) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}"


def table3_markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| workload | provider | config | runs | CPU s (median) | slowdown (median, min..max) "
             "| median's 95% interval | vs none (median, 95% interval) | instr share | toggle share | daemon share "
             "| set-up share | toggles/s | samples/s | probes | functions |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["slowdown_median"] is None:
            slow = "-"
        elif r["policy"] == "baseline":
            slow = "1 (reference)"
        else:
            slow = f"{r['slowdown_median']:.3f}x"
            if r["slowdown_min"] is not None:
                slow += f" ({r['slowdown_min']:.3f}..{r['slowdown_max']:.3f})"
        cpu = "-" if r["cpu_s_median"] is None else f"{r['cpu_s_median']:.3f}"
        ci = "-" if r.get("slowdown_ci_lo") is None else f"{r['slowdown_ci_lo']:.3f}..{r['slowdown_ci_hi']:.3f}"
        if r.get("vs_none_median") is None:
            vs_none = "-"
        elif r["config"] == "none":
            vs_none = "1 (reference)"
        else:
            vs_none = f"{r['vs_none_median']:.3f}x"
            if r.get("vs_none_ci_lo") is not None:
                vs_none += f" ({r['vs_none_ci_lo']:.3f}..{r['vs_none_ci_hi']:.3f})"
        runs = f"{r['runs']}" + (f" ({r['failed_runs']} failed)" if r["failed_runs"] else "")
        lines.append(f"| {r['workload']} | {r['provider']} | {r['config']} | {runs} | {cpu} | {slow} | {ci} | {vs_none} | "
                     f"{_pct(r['instr_share'])} | {_pct(r['toggle_share'], 3)} | {_pct(r['daemon_share'])} | "
                     f"{_pct(r['setup_share'])} | {_num(r['toggles_per_s'])} | "
                     f"{_num(r['samples_per_s'])} | {_num(r['probes'])} | {_num(r['functions'])} |")
    return "\n".join(lines) + "\n"


def summarize_accuracy(acc: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (workload, config): functions with an estimate, covered by their interval,
    within 10% of the true mean (over timed functions); and the on-CPU estimates (0 for
    profiles without them): how many, how many with an interval, how many intervals cover
    the unpreempted true mean, how many within 10% of it, and the same against a whole
    call's true length (true_call_ticks), against it without the stalls in the spins
    (true_busy_call_ticks), and how many intervals meet the range between the two; and how
    many of the intervals widened by the systematic term (mean_bound_ticks,
    oncpu_mean_bound_ticks) cover the true mean and the whole call's length."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for a in acc:
        if a["true_mean_ticks"] is None:
            continue
        groups.setdefault((a["workload"], a["config"]), []).append(a)
    out = []
    for (w, c), items in groups.items():
        est = [a for a in items if a["est_mean_ticks"] is not None]
        oncpu = [a for a in items if a.get("est_oncpu_mean_ticks") is not None]
        out.append({"workload": w, "config": c, "function_runs": len(items), "estimated": len(est),
                    "covered": sum(1 for a in est if a["covered"]),
                    "within_10pct": sum(1 for a in est if a["within_10pct"]),
                    "within_10pct_unpreempted": sum(1 for a in est if a["within_10pct_unpreempted"]),
                    "oncpu_estimated": len(oncpu),
                    "oncpu_with_ci": sum(1 for a in oncpu if a.get("oncpu_ci_lo") is not None),
                    "oncpu_covers_unpreempted": sum(1 for a in oncpu if a.get("oncpu_covers_unpreempted")),
                    "oncpu_within_10pct_unpreempted": sum(1 for a in oncpu
                                                          if a.get("oncpu_within_10pct_unpreempted")),
                    "oncpu_covers_call": sum(1 for a in oncpu if a.get("oncpu_covers_call")),
                    "oncpu_within_10pct_call": sum(1 for a in oncpu if a.get("oncpu_within_10pct_call")),
                    "oncpu_covers_busy_call": sum(1 for a in oncpu if a.get("oncpu_covers_busy_call")),
                    "oncpu_meets_busy_to_call": sum(1 for a in oncpu if a.get("oncpu_meets_busy_to_call")),
                    "bound_covered": sum(1 for a in est if a.get("bound_covered")),
                    "oncpu_bound_covers_call": sum(1 for a in oncpu if a.get("oncpu_bound_covers_call"))})
    return out


def compute_all(folder: Path) -> dict[str, Any]:
    """The evaluation tables of `folder` from its runs.csv and the files it names."""
    rows = attach(load_runs(folder / "runs.csv"), folder)
    info = information(rows)
    return {"rows": rows, "table3": table3(rows), "accuracy": accuracy(rows), "information": info,
            "dime": dime_curve(rows, info)}


def write_all(folder: Path) -> dict[str, Any]:
    """Recomputes table3.csv/.md, accuracy.csv, information.csv and dime_curve.csv in
    `folder` from its runs.csv and the files it names. Returns the computed tables."""
    tables = compute_all(folder)
    rows, t3, acc, info, dime = (tables[k] for k in ("rows", "table3", "accuracy", "information", "dime"))
    write_csv(folder / "table3.csv", t3, list(t3[0].keys()) if t3 else ["workload"])
    (folder / "table3.md").write_text(table3_markdown(t3))
    write_csv(folder / "accuracy.csv", acc, list(acc[0].keys()) if acc else ["workload"])
    write_csv(folder / "accuracy_summary.csv", summarize_accuracy(acc))
    write_csv(folder / "information.csv", info, list(info[0].keys()) if info else ["workload"])
    write_csv(folder / "dime_curve.csv", dime, list(dime[0].keys()) if dime else ["workload"])
    return {"rows": rows, "table3": t3, "accuracy": acc, "information": info, "dime": dime}
