"""Binomial statistics for failure rates: Clopper-Pearson intervals and zero-failure bounds.

Pure Python (math only, no scipy): the regularized incomplete beta function is evaluated
with a continued fraction and inverted by bisection. Functions are pure and thread-safe.
"""
from __future__ import annotations

import functools
import math

CONFIDENCE = 0.95

_CF_MAX_ITER = 10_000
_CF_EPS = 1e-15
_TINY = 1e-300


def _beta_cf(a: float, b: float, x: float) -> float:
    """Continued fraction of I_x(a, b), evaluated with the modified Lentz method.

    Converges quickly for x < (a + 1) / (a + b + 2); betainc() uses the symmetry
    I_x(a, b) = 1 - I_{1-x}(b, a) to stay in that region.
    """
    qab = a + b
    qap = a + 1.0
    qam = a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    if abs(d) < _TINY:
        d = _TINY
    d = 1.0 / d
    h = d
    for m in range(1, _CF_MAX_ITER + 1):
        m2 = 2 * m
        # Even step of the fraction.
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = _TINY if abs(d) < _TINY else d
        c = 1.0 + aa / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        h *= d * c
        # Odd step.
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = _TINY if abs(d) < _TINY else d
        c = 1.0 + aa / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < _CF_EPS:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if a <= 0 or b <= 0:
        raise ValueError(f"betainc needs a, b > 0 (got a={a}, b={b})")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"betainc needs 0 <= x <= 1 (got {x})")
    if x == 0.0 or x == 1.0:
        return x
    # Prefactor x^a (1-x)^b / (a B(a, b)), in logs to survive large a and b.
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def beta_quantile(q: float, a: float, b: float, iterations: int = 200) -> float:
    """p such that I_p(a, b) = q, by bisection (I is increasing in p)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile level must be in [0, 1] (got {q})")
    lo, hi = 0.0, 1.0
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        if mid == lo or mid == hi:
            break
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _check_counts(failures: int, trials: int) -> None:
    if trials < 0 or failures < 0 or failures > trials:
        raise ValueError(f"need 0 <= failures <= trials (got {failures} of {trials})")


@functools.lru_cache(maxsize=65536)
def clopper_pearson(failures: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Two-sided exact (Clopper-Pearson) interval for a binomial proportion.

    lower = Beta^-1(alpha/2; x, n-x+1), upper = Beta^-1(1-alpha/2; x+1, n-x), with the
    conventions lower = 0 at x = 0 and upper = 1 at x = n. trials = 0 gives (0, 1).
    """
    _check_counts(failures, trials)
    if trials == 0:
        return (0.0, 1.0)
    alpha = 1.0 - confidence
    x, n = failures, trials
    lower = 0.0 if x == 0 else beta_quantile(alpha / 2.0, x, n - x + 1)
    upper = 1.0 if x == n else beta_quantile(1.0 - alpha / 2.0, x + 1, n - x)
    return (lower, upper)


def zero_failure_upper_bound(trials: int, confidence: float = CONFIDENCE) -> float:
    """One-sided upper bound on p after 0 failures in n trials: 1 - (1-conf)^(1/n) (~3/n)."""
    if trials <= 0:
        return 1.0
    return -math.expm1(math.log(1.0 - confidence) / trials)


def rate_and_bound(failures: int, trials: int) -> dict:
    """Point estimate plus the numbers a plot or summary needs for one aggregate."""
    lo, hi = clopper_pearson(failures, trials)
    out = {
        "failures": failures,
        "trials": trials,
        "rate": (failures / trials) if trials else float("nan"),
        "ci_low": lo,
        "ci_high": hi,
        "zero": failures == 0,
    }
    out["upper_bound_one_sided"] = zero_failure_upper_bound(trials) if failures == 0 else hi
    return out


def aggregate(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
    """Pool cells that share `keys`: sum failures, exposed toggles and toggles, then attach
    the rate, its Clopper-Pearson interval and (for zero failures) the one-sided bound.
    Sorted by the key values."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        k = tuple(r[key] for key in keys)
        g = groups.setdefault(k, {"failures": 0, "exposed": 0, "toggles": 0, "cells": 0,
                                  "crash": 0, "hang": 0, "stopped_early": 0, "low_exposure": 0,
                                  "wait_ns_sum": 0.0})
        g["failures"] += r["failures"]
        g["exposed"] += r["exposed_toggles"]
        g["toggles"] += r["toggles"]
        g["cells"] += 1
        g["crash"] += r["crash"]
        g["hang"] += r["hang"]
        g["stopped_early"] += r.get("stopped_early", 0)
        g["low_exposure"] += r.get("low_exposure", 0)
        g["wait_ns_sum"] += r.get("wait_ns", 0.0)
    out = []
    for k in sorted(groups):
        g = groups[k]
        entry = dict(zip(keys, k))
        entry.update(g)
        entry["wait_ns"] = g["wait_ns_sum"] / g["cells"]
        del entry["wait_ns_sum"]
        entry.update({key: val for key, val in rate_and_bound(g["failures"], g["exposed"]).items()
                      if key not in ("failures", "trials")})
        out.append(entry)
    return out


def _failed(r: dict) -> bool:
    return r["failures"] > 0 or bool(r["crash"]) or bool(r["hang"])


def _clean_evidence(r: dict) -> bool:
    return r["outcome"] == "ok" and not _failed(r) and not r["low_exposure"]


def clusters(rows: list[dict]) -> tuple[int, str]:
    """Independent units among rows: the distinct rounds when the rows carry them (schema 2,
    round >= 0), otherwise the cells. Tears come in bursts, so toggles are not independent;
    rounds (or cells) are the units a bound may treat as independent."""
    rounds = {r.get("round", -1) for r in rows if r.get("round", -1) is not None and r.get("round", -1) >= 0}
    if rounds:
        return len(rounds), "rounds"
    return len(rows), "cells"


def zero_failure_cluster_bound(n_clusters: int, confidence: float = CONFIDENCE) -> float | None:
    """With no failing cluster among n, the one-sided upper bound on the fraction of
    clusters that fail (Clopper-Pearson, clusters as the trials); None for n = 0."""
    return zero_failure_upper_bound(n_clusters, confidence) if n_clusters > 0 else None


def tmax_from_cells(rows: list[dict], protocol: str = "wordpatch") -> dict:
    """Tmax_observed recomputed from result rows with the harness's rule (DESIGN.md
    "Statistics and Tmax"; harness/src/runs/calibrate.cpp derive_tmax): the smallest W with
    clean zero-failure evidence (outcome ok, no fault, not low exposure) above every W
    where any cell failed (fault, crash or hang), over all S, N and placements. Pass all
    rows: blind, error and low-exposure cells are never evidence, but their failures count.
    Also returns the evidence at and above it. observed_ticks is None when no clean W lies
    above the largest failing W (Tmax above the tested range) or nothing was tested."""
    cells = [r for r in rows if r["protocol"] == protocol]
    failing = sorted({r["wait_ticks"] for r in cells if _failed(r)})
    evidence = sorted({r["wait_ticks"] for r in cells if _clean_evidence(r)})
    result = {"observed_ticks": None, "observed_ns": None, "waits_tested": len({r["wait_ticks"] for r in cells}),
              "max_failing_ticks": failing[-1] if failing else None,
              "cells_at_or_above": 0, "exposed_at_or_above": 0, "toggles_at_or_above": 0,
              "failure_bound_95": None, "above_tested_range": False,
              "clusters_at_or_above": 0, "cluster_unit": "rounds", "cluster_bound_95": None}
    above = [w for w in evidence if not failing or w > failing[-1]]
    if not above:
        result["above_tested_range"] = bool(failing)
        return result
    observed = above[0]
    tail = [r for r in cells if r["wait_ticks"] >= observed and _clean_evidence(r)]
    exposed = sum(r["exposed_toggles"] for r in tail)
    result.update(observed_ticks=observed,
                  observed_ns=next(r["wait_ns"] for r in tail if r["wait_ticks"] == observed),
                  cells_at_or_above=len(tail), exposed_at_or_above=exposed,
                  toggles_at_or_above=sum(r["toggles"] for r in tail),
                  failure_bound_95=zero_failure_upper_bound(exposed))
    n, unit = clusters(tail)
    result.update(clusters_at_or_above=n, cluster_unit=unit, cluster_bound_95=zero_failure_cluster_bound(n))
    return result
