"""Readers for crossmod result files: sweep CSV + context JSON, Tmax TOML, calibrate JSON,
Google Benchmark JSON and its per-sample latency CSV.

Every reader validates its schema and raises InputError naming the file and the field
(and line) at fault; nothing here scrapes console output. Pure functions, no global state.
"""
from __future__ import annotations

import csv
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

SWEEP_SCHEMA_VERSION = 2
SWEEP_SCHEMA_VERSIONS = (1, 2)   # version 1 files lack the machine-state columns
BENCH_SCHEMA_VERSION = 1

SWEEP_COLUMNS = (
    "schema_version", "cell_id", "phase", "protocol", "wait_ticks", "wait_ns", "straddle",
    "site_offset", "executors", "placement", "rep", "dwell_ticks", "toggles",
    "exposed_toggles", "executions", "state_a", "state_b", "traps", "late_traps", "sigill",
    "sigsegv", "sigbus", "stray_trap", "crash", "hang", "failures", "stopped_early",
    "low_exposure", "outcome", "duration_s", "patcher_pu", "executor_pus",
    "first_fault_pc_offset", "first_fault_bytes", "note",
    # schema 2: the machine's state per cell; empty = unknown
    "start_utc_ms", "steal_ms", "c2c_ticks", "round",
)
SWEEP_COLUMNS_V1 = SWEEP_COLUMNS[:-4]
_OPTIONAL_COLUMNS = {"start_utc_ms", "steal_ms", "c2c_ticks", "round"}
_INT_COLUMNS = {
    "schema_version", "cell_id", "wait_ticks", "straddle", "site_offset", "executors", "rep",
    "dwell_ticks", "toggles", "exposed_toggles", "executions", "state_a", "state_b", "traps",
    "late_traps", "sigill", "sigsegv", "sigbus", "stray_trap", "crash", "hang", "failures",
    "stopped_early", "low_exposure", "patcher_pu",
}
_FLOAT_COLUMNS = {"wait_ns", "duration_s", "steal_ms", "c2c_ticks"}
_INT_COLUMNS |= {"start_utc_ms", "round"}
_FLAG_COLUMNS = {"crash", "hang", "stopped_early", "low_exposure"}
_SIGNED_COLUMNS = {"patcher_pu"}   # -1: not pinned / unknown
PHASES = ("grid", "search", "confirm", "control", "sentinel", "soak")
PROTOCOLS = ("wordpatch", "naive", "callpatch", "aligned", "sync-core")
OUTCOMES = ("ok", "crash", "hang", "error", "blind")
# Cells whose counts mean nothing (no exposure, or the harness could not run them).
EXCLUDED_OUTCOMES = ("error", "blind")

LATENCY_COLUMNS = ("benchmark", "op", "executors", "sample_ticks", "count")
# Files written before the count column existed: one row per sample.
LATENCY_COLUMNS_V0 = ("benchmark", "op", "executors", "sample_ticks")


class InputError(Exception):
    """A result file exists but is malformed. The message names the file and the problem."""

    def __init__(self, path: Path | str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = Path(path)
        self.problem = problem


# ---------------------------------------------------------------------------- discovery

# Stamps are UTC "%Y%m%dT%H%M%SZ" (harness utc_stamp), with "-<n>" appended when two runs
# start in the same second. They contain no other '-', which keeps bench-<stamp>.json apart
# from bench-<stamp>-summary.json and bench-<stamp>-latency.csv.
_STAMP = r"(?P<stamp>[^-]+(?:-\d+)?)"
_STAMPED = {
    "sweep": re.compile(rf"^sweep-{_STAMP}\.csv$"),
    "calibrate": re.compile(rf"^calibrate-{_STAMP}\.json$"),
    "bench": re.compile(rf"^bench-{_STAMP}\.json$"),
    "bench_summary": re.compile(rf"^bench-{_STAMP}-summary\.json$"),
    "latency": re.compile(rf"^bench-{_STAMP}-latency\.csv$"),
}


def _stamp_key(stamp: str) -> tuple[str, int]:
    base, _, n = stamp.partition("-")
    return (base, int(n) if n.isdigit() else 1)


def stamped_files(folder: Path, kind: str) -> list[Path]:
    """Files of one kind in a results folder, oldest first (by stamp, then mtime)."""
    pattern = _STAMPED[kind]
    found = [p for p in folder.iterdir() if p.is_file() and pattern.match(p.name)]
    return sorted(found, key=lambda p: (_stamp_key(pattern.match(p.name).group("stamp")),
                                        p.stat().st_mtime))


def newest(folder: Path, kind: str) -> Optional[Path]:
    files = stamped_files(folder, kind)
    return files[-1] if files else None


def stamp_of(path: Path, kind: str) -> str:
    m = _STAMPED[kind].match(path.name)
    return m.group("stamp") if m else path.stem


# ---------------------------------------------------------------------------- sweep

@dataclass
class Sweep:
    path: Path
    rows: list[dict[str, Any]]          # typed rows, selftest-* protocols dropped
    context: dict[str, Any]             # the sibling JSON, {} when absent
    context_path: Optional[Path]
    ignored_selftest: int = 0
    paths: list[Path] = field(default_factory=list)   # every pooled file; [] = [path]

    @property
    def source_label(self) -> str:
        """The file name, or all of them when several sweeps were pooled."""
        files = self.paths or [self.path]
        if len(files) == 1:
            return files[0].name
        return f"{len(files)} sweeps pooled: " + ", ".join(p.name for p in files)

    @property
    def scope(self) -> str:
        return "this sweep" if len(self.paths) <= 1 else f"{len(self.paths)} pooled sweeps"

    @property
    def valid(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["outcome"] not in EXCLUDED_OUTCOMES]

    @property
    def excluded(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["outcome"] in EXCLUDED_OUTCOMES]


def _parse_int(text: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[+-]?\d+", text):
        raise ValueError
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text.strip())
    if not math.isfinite(value):
        raise ValueError
    return value


def load_sweep_csv(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Read and validate a sweep CSV. Returns (rows, number of selftest rows ignored)."""
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from e
    rows: list[dict[str, Any]] = []
    ignored = 0
    with handle:
        reader = csv.reader(handle)
        try:
            header = next(reader)
        except StopIteration:
            raise InputError(path, "empty file (expected a header line)") from None
        except (csv.Error, UnicodeDecodeError) as e:
            raise InputError(path, f"line 1: not CSV: {e}") from e
        header = [h.strip() for h in header]
        columns = SWEEP_COLUMNS_V1 if tuple(header) == SWEEP_COLUMNS_V1 else SWEEP_COLUMNS
        if tuple(header) != columns:
            missing = [c for c in SWEEP_COLUMNS if c not in header]
            extra = [c for c in header if c not in SWEEP_COLUMNS]
            if missing:
                raise InputError(path, f"header: missing column(s) {', '.join(missing)}")
            if extra:
                raise InputError(path, f"header: unexpected column(s) {', '.join(extra)}")
            raise InputError(path, "header: columns are not in schema order "
                                   f"(expected {','.join(SWEEP_COLUMNS)})")
        try:
            for fields in reader:
                line = reader.line_num
                if not fields or all(not f.strip() for f in fields):
                    continue
                if len(fields) != len(columns):
                    raise InputError(path, f"line {line}: {len(fields)} fields, expected "
                                           f"{len(columns)}")
                raw = dict(zip(columns, fields))
                for col in SWEEP_COLUMNS[len(columns):]:
                    raw[col] = ""
                row = _type_sweep_row(path, line, raw)
                if row["protocol"].startswith("selftest-"):
                    ignored += 1
                    continue
                rows.append(row)
        except csv.Error as e:
            raise InputError(path, f"line {reader.line_num}: not CSV: {e}") from e
        except UnicodeDecodeError as e:
            raise InputError(path, f"not UTF-8 text: {e}") from e
    return rows, ignored


def _type_sweep_row(path: Path, line: int, raw: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for col, text in raw.items():
        if col in _OPTIONAL_COLUMNS and not text.strip():
            row[col] = None
            continue
        if col in _INT_COLUMNS:
            try:
                row[col] = _parse_int(text)
            except ValueError:
                raise InputError(path, f"line {line}, column {col}: {text!r} is not an integer") from None
            if row[col] < 0 and col not in _SIGNED_COLUMNS:
                raise InputError(path, f"line {line}, column {col}: {text!r} is negative")
        elif col in _FLOAT_COLUMNS:
            try:
                row[col] = _parse_float(text)
            except ValueError:
                raise InputError(path, f"line {line}, column {col}: {text!r} is not a number") from None
        else:
            row[col] = text.strip()
    if row["schema_version"] not in SWEEP_SCHEMA_VERSIONS:
        raise InputError(path, f"line {line}, column schema_version: {row['schema_version']} "
                               f"(this analysis reads versions 1 and {SWEEP_SCHEMA_VERSION})")
    for col in _FLAG_COLUMNS:
        if row[col] not in (0, 1):
            raise InputError(path, f"line {line}, column {col}: {row[col]} is not 0 or 1")
    if row["phase"] not in PHASES:
        raise InputError(path, f"line {line}, column phase: {row['phase']!r} is not one of "
                               f"{', '.join(PHASES)}")
    proto = row["protocol"]
    if proto not in PROTOCOLS and not proto.startswith("selftest-"):
        raise InputError(path, f"line {line}, column protocol: {proto!r} is not one of "
                               f"{', '.join(PROTOCOLS)} (or selftest-*)")
    if row["outcome"] not in OUTCOMES:
        raise InputError(path, f"line {line}, column outcome: {row['outcome']!r} is not one of "
                               f"{', '.join(OUTCOMES)}")
    if row["exposed_toggles"] > row["toggles"]:
        raise InputError(path, f"line {line}, column exposed_toggles: {row['exposed_toggles']} "
                               f"exceeds toggles {row['toggles']}")
    if row["outcome"] not in EXCLUDED_OUTCOMES and row["failures"] > row["exposed_toggles"]:
        # A crash can happen on the first, unexposed toggle: count it against one exposure.
        if row["crash"] or row["hang"]:
            row["exposed_toggles"] = max(row["exposed_toggles"], row["failures"])
        else:
            raise InputError(path, f"line {line}, column failures: {row['failures']} exceeds "
                                   f"exposed_toggles {row['exposed_toggles']}")
    return row


def load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(path, f"not valid JSON ({what}): {e.msg} at line {e.lineno} column {e.colno}") from e
    if not isinstance(data, dict):
        raise InputError(path, f"{what} must be a JSON object, found {type(data).__name__}")
    return data


def load_sweep_context(path: Path) -> dict[str, Any]:
    ctx = load_json(path, "sweep context")
    version = ctx.get("schema_version")
    if version is not None and version not in SWEEP_SCHEMA_VERSIONS:
        raise InputError(path, f"schema_version {version!r} (this analysis reads versions 1 and "
                               f"{SWEEP_SCHEMA_VERSION})")
    kind = ctx.get("kind")
    if kind is not None and kind != "crossmod-sweep-context":
        raise InputError(path, f"kind {kind!r} is not 'crossmod-sweep-context'")
    if "machine" in ctx and not isinstance(ctx["machine"], dict):
        raise InputError(path, "machine must be an object")
    return ctx


def load_sweep(path: Path) -> Sweep:
    rows, ignored = load_sweep_csv(path)
    ctx_path = path.with_suffix(".json")
    ctx = load_sweep_context(ctx_path) if ctx_path.is_file() else {}
    return Sweep(path=path, rows=rows, context=ctx,
                 context_path=ctx_path if ctx_path.is_file() else None, ignored_selftest=ignored)


def merge_sweeps(sweeps: list[Sweep]) -> Sweep:
    """Pool several sweeps of one machine; the newest one's context describes the result."""
    rows = [r for s in sweeps for r in s.rows]
    last = sweeps[-1]
    return Sweep(path=last.path, rows=rows, context=last.context, context_path=last.context_path,
                 ignored_selftest=sum(s.ignored_selftest for s in sweeps),
                 paths=[p for s in sweeps for p in (s.paths or [s.path])])


# ---------------------------------------------------------------------------- Tmax config

@dataclass
class TmaxConfig:
    path: Path
    observed_ticks: Optional[float]
    recommended_ticks: Optional[float]
    observed_ns: Optional[float] = None
    recommended_ns: Optional[float] = None
    tsc_hz: Optional[float] = None
    margin_rule: str = ""
    c2c_one_way_ticks: Optional[float] = None   # the floor the margin rule used
    evidence: dict[str, Any] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)


def _opt_number(path: Path, table: dict, section: str, key: str) -> Optional[float]:
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(path, f"[{section}] {key} = {value!r} is not a number")
    return float(value)


def load_tmax(path: Path) -> TmaxConfig:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from e
    except tomllib.TOMLDecodeError as e:
        raise InputError(path, f"not valid TOML: {e}") from e
    tmax = data.get("tmax")
    if not isinstance(tmax, dict):
        raise InputError(path, "missing [tmax] table")
    if "observed_ticks" not in tmax and "recommended_ticks" not in tmax:
        raise InputError(path, "[tmax] has neither observed_ticks nor recommended_ticks")
    evidence = data.get("evidence", {})
    machine = data.get("machine", {})
    if not isinstance(evidence, dict):
        raise InputError(path, "[evidence] must be a table")
    if not isinstance(machine, dict):
        raise InputError(path, "[machine] must be a table")
    for key in ("toggles_at_or_above", "exposed_toggles_at_or_above", "failure_bound_95"):
        _opt_number(path, evidence, "evidence", key)
    return TmaxConfig(
        path=path,
        observed_ticks=_opt_number(path, tmax, "tmax", "observed_ticks"),
        recommended_ticks=_opt_number(path, tmax, "tmax", "recommended_ticks"),
        observed_ns=_opt_number(path, tmax, "tmax", "observed_ns"),
        recommended_ns=_opt_number(path, tmax, "tmax", "recommended_ns"),
        tsc_hz=_opt_number(path, tmax, "tmax", "tsc_hz"),
        margin_rule=str(tmax.get("margin_rule", "")),
        c2c_one_way_ticks=_opt_number(path, tmax, "tmax", "c2c_one_way_ticks"),
        evidence=evidence,
        machine=machine,
    )


def tmax_from_calibrate(path: Path, data: dict[str, Any]) -> Optional[TmaxConfig]:
    """The Tmax block of a calibrate-<stamp>.json summary, for folders whose configs/tmax
    file is not beside them. None when calibration found no boundary (nulls)."""
    tmax = data.get("tmax")
    if not isinstance(tmax, dict):
        return None
    if tmax.get("observed_ticks") is None and tmax.get("recommended_ticks") is None:
        return None
    evidence = data.get("evidence") if isinstance(data.get("evidence"), dict) else {}
    machine = data.get("machine") if isinstance(data.get("machine"), dict) else {}
    return TmaxConfig(
        path=path,
        observed_ticks=_opt_number(path, tmax, "tmax", "observed_ticks") if tmax.get("observed_ticks") is not None else None,
        recommended_ticks=(_opt_number(path, tmax, "tmax", "recommended_ticks")
                           if tmax.get("recommended_ticks") is not None else None),
        observed_ns=_opt_number(path, tmax, "tmax", "observed_ns") if tmax.get("observed_ns") is not None else None,
        recommended_ns=(_opt_number(path, tmax, "tmax", "recommended_ns")
                        if tmax.get("recommended_ns") is not None else None),
        tsc_hz=_opt_number(path, tmax, "tmax", "tsc_hz") if tmax.get("tsc_hz") is not None else None,
        margin_rule=str(tmax.get("margin_rule", "")),
        c2c_one_way_ticks=(_opt_number(path, tmax, "tmax", "c2c_one_way_ticks")
                           if tmax.get("c2c_one_way_ticks") is not None else None),
        evidence=evidence,
        machine=machine,
    )


# ---------------------------------------------------------------------------- bench

@dataclass
class BenchEntry:
    name: str
    group: str                  # latency | invoke | throughput | other
    subject: str                # op, variant or protocol
    params: dict[str, float]    # executors, rate, ...
    values: dict[str, float]    # real_time, cpu_time and every numeric counter
    time_unit: str


@dataclass
class Bench:
    path: Path
    context: dict[str, Any]
    entries: list[BenchEntry]
    errors: list[tuple[str, str]]   # (benchmark name, error message)

    def group(self, name: str) -> list[BenchEntry]:
        return [e for e in self.entries if e.group == name]


_NAME_SUFFIXES = {"real_time", "process_time", "manual_time"}
_RESERVED_KEYS = {"name", "run_name", "run_type", "aggregate_name", "aggregate_unit",
                  "family_index", "per_family_instance_index", "repetitions",
                  "repetition_index", "threads", "iterations", "time_unit", "label",
                  "error_occurred", "error_message"}


def parse_bench_name(name: str) -> tuple[str, str, dict[str, float]]:
    """'throughput/wordpatch/rate:1000/executors:2' -> ('throughput', 'wordpatch', {...})."""
    parts = [p for p in name.split("/") if p]
    if not parts:
        return ("other", name, {})
    group = parts[0]
    subject_parts: list[str] = []
    params: dict[str, float] = {}
    for part in parts[1:]:
        if ":" in part:
            key, _, value = part.partition(":")
            try:
                params[key] = float(value)
            except ValueError:
                subject_parts.append(part)
        elif part not in _NAME_SUFFIXES:
            subject_parts.append(part)
    if group not in ("latency", "invoke", "throughput"):
        return ("other", name, params)
    return (group, "/".join(subject_parts), params)


def load_bench(path: Path) -> Bench:
    data = load_json(path, "Google Benchmark output")
    context = data.get("context", {})
    if not isinstance(context, dict):
        raise InputError(path, "context must be an object")
    version = context.get("crossmod_schema_version")
    if version is not None:
        try:
            version_num = int(version)
        except (TypeError, ValueError):
            raise InputError(path, f"context.crossmod_schema_version {version!r} is not an integer") from None
        if version_num != BENCH_SCHEMA_VERSION:
            raise InputError(path, f"context.crossmod_schema_version {version!r} (this analysis "
                                   f"reads version {BENCH_SCHEMA_VERSION})")
    benchmarks = data.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise InputError(path, "missing 'benchmarks' list")

    # Group repetitions by run name; prefer the median aggregate, then the mean, then the
    # average of the iteration runs.
    by_run: dict[str, dict[str, list[dict]]] = {}
    errors: list[tuple[str, str]] = []
    for i, b in enumerate(benchmarks):
        if not isinstance(b, dict) or not isinstance(b.get("name"), str):
            raise InputError(path, f"benchmarks[{i}]: not an object with a string 'name'")
        if b.get("error_occurred"):
            errors.append((b["name"], str(b.get("error_message", "error_occurred"))))
            continue
        run = b.get("run_name", b["name"])
        kind = b.get("run_type", "iteration")
        slot = by_run.setdefault(run, {"iteration": [], "median": [], "mean": []})
        if kind == "aggregate":
            agg = b.get("aggregate_name")
            if agg in ("median", "mean"):
                slot[agg].append(b)
        else:
            slot["iteration"].append(b)

    entries: list[BenchEntry] = []
    for run, slot in by_run.items():
        chosen = slot["median"] or slot["mean"] or slot["iteration"]
        if not chosen:
            continue
        values: dict[str, list[float]] = {}
        for b in chosen:
            for key, value in b.items():
                if key in _RESERVED_KEYS or isinstance(value, bool):
                    continue
                if isinstance(value, (int, float)):
                    values.setdefault(key, []).append(float(value))
        group, subject, params = parse_bench_name(run)
        entries.append(BenchEntry(
            name=run, group=group, subject=subject, params=params,
            values={k: sum(v) / len(v) for k, v in values.items()},
            time_unit=str(chosen[0].get("time_unit", "ns"))))
    return Bench(path=path, context=context, entries=entries, errors=errors)


def load_latency_csv(path: Path) -> dict[tuple[str, int], list[int]]:
    """Per-sample latency: {(op, executors): [ticks, ...]}."""
    samples: dict[tuple[str, int], list[int]] = {}
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as e:
        raise InputError(path, f"cannot read: {e.strerror}") from e
    with handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise InputError(path, "empty file (expected a header line)") from None
        if tuple(header) == LATENCY_COLUMNS_V0:
            columns = LATENCY_COLUMNS_V0
        elif tuple(header) == LATENCY_COLUMNS:
            columns = LATENCY_COLUMNS
        else:
            missing = [c for c in LATENCY_COLUMNS if c not in header]
            if missing:
                raise InputError(path, f"header: missing column(s) {', '.join(missing)}")
            raise InputError(path, f"header: expected exactly {','.join(LATENCY_COLUMNS)}")
        try:
            for fields in reader:
                if not fields:
                    continue
                line = reader.line_num
                if len(fields) != len(columns):
                    raise InputError(path, f"line {line}: {len(fields)} fields, expected {len(columns)}")
                try:
                    executors = _parse_int(fields[2])
                except ValueError:
                    raise InputError(path, f"line {line}, column executors: {fields[2]!r} is not an integer") from None
                try:
                    ticks = _parse_int(fields[3])
                except ValueError:
                    raise InputError(path, f"line {line}, column sample_ticks: {fields[3]!r} is not an integer") from None
                count = 1
                if len(columns) == 5:
                    try:
                        count = _parse_int(fields[4])
                    except ValueError:
                        raise InputError(path, f"line {line}, column count: {fields[4]!r} is not an integer") from None
                    if count < 1:
                        raise InputError(path, f"line {line}, column count: {count} is not >= 1")
                samples.setdefault((fields[1].strip(), executors), []).extend([ticks] * count)
        except csv.Error as e:
            raise InputError(path, f"line {reader.line_num}: not CSV: {e}") from e
        except UnicodeDecodeError as e:
            raise InputError(path, f"not UTF-8 text: {e}") from e
    return samples
