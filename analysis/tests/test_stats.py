"""Clopper-Pearson and zero-failure bounds against published values, and the pooling and
Tmax rules of DESIGN.md ("Statistics and Tmax")."""
import math

import pytest

from analysis import stats


@pytest.mark.parametrize("x,n,lo,hi", [
    (0, 10, 0.0, 0.3085),
    (5, 10, 0.1871, 0.8129),
    (1, 100, 0.000253, 0.05446),
    (10, 10, 0.6915, 1.0),
])
def test_clopper_pearson_known_values(x, n, lo, hi):
    got_lo, got_hi = stats.clopper_pearson(x, n)
    assert got_lo == pytest.approx(lo, rel=2e-3, abs=1e-6)
    assert got_hi == pytest.approx(hi, rel=2e-3, abs=1e-6)


def test_zero_failure_one_sided_bound():
    assert stats.zero_failure_upper_bound(1000) == pytest.approx(0.002991, rel=1e-3)
    # The "rule of three": about 3/n for large n.
    assert stats.zero_failure_upper_bound(10**6) == pytest.approx(3e-6, rel=2e-3)
    assert stats.zero_failure_upper_bound(0) == 1.0


def test_betainc_identities():
    # I_x(1, 1) = x; I_x(a, 1) = x^a; symmetry I_x(a, b) = 1 - I_{1-x}(b, a).
    assert stats.betainc(1, 1, 0.3) == pytest.approx(0.3, abs=1e-12)
    assert stats.betainc(3, 1, 0.5) == pytest.approx(0.125, abs=1e-12)
    for a, b, x in ((2.5, 7, 0.2), (30, 400, 0.08), (1, 5000, 1e-4)):
        assert stats.betainc(a, b, x) == pytest.approx(1 - stats.betainc(b, a, 1 - x), abs=1e-10)
    # Binomial tail: P(X <= k) = I_{1-p}(n-k, k+1).
    n, k, p = 20, 3, 0.1
    tail = sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))
    assert stats.betainc(n - k, k + 1, 1 - p) == pytest.approx(tail, rel=1e-10)


def test_interval_contains_rate_and_large_n_is_fast():
    lo, hi = stats.clopper_pearson(50_000, 1_000_000)
    assert lo < 0.05 < hi and hi - lo < 0.001
    lo, hi = stats.clopper_pearson(3, 10**8)
    assert 0 < lo < 3e-8 < hi < 1e-7


def test_invalid_counts_raise():
    with pytest.raises(ValueError):
        stats.clopper_pearson(5, 4)
    with pytest.raises(ValueError):
        stats.betainc(0, 1, 0.5)


def _cell(protocol, wait, failures, exposed, straddle=1, **kw):
    row = dict(protocol=protocol, wait_ticks=wait, wait_ns=wait / 2.5, straddle=straddle,
               failures=failures, exposed_toggles=exposed, toggles=exposed + 10, crash=0, hang=0,
               outcome="ok", low_exposure=0)
    row.update(kw)
    return row


def test_aggregate_pools_cells_and_bounds_zeros():
    rows = [_cell("wordpatch", 100, 3, 1000), _cell("wordpatch", 100, 1, 1000),
            _cell("wordpatch", 200, 0, 1000)]
    groups = stats.aggregate(rows, ("wait_ticks",))
    assert [g["wait_ticks"] for g in groups] == [100, 200]
    assert groups[0]["failures"] == 4 and groups[0]["exposed"] == 2000 and groups[0]["cells"] == 2
    assert groups[0]["rate"] == pytest.approx(0.002)
    assert groups[1]["zero"] and groups[1]["upper_bound_one_sided"] == pytest.approx(0.002991, rel=1e-3)


def test_tmax_from_cells():
    rows = [_cell("wordpatch", 100, 5, 1000), _cell("wordpatch", 200, 0, 1000),
            _cell("wordpatch", 300, 1, 1000, straddle=4),   # a late failure moves Tmax up
            _cell("wordpatch", 400, 0, 5000), _cell("wordpatch", 500, 0, 5000),
            _cell("naive", 600, 40, 100)]                   # controls never count
    t = stats.tmax_from_cells(rows)
    assert t["observed_ticks"] == 400 and t["max_failing_ticks"] == 300
    assert t["exposed_at_or_above"] == 10_000
    assert t["failure_bound_95"] == pytest.approx(stats.zero_failure_upper_bound(10_000))
    # No rounds in these rows: the cells are the independent units, 2 of them at or above.
    assert (t["clusters_at_or_above"], t["cluster_unit"]) == (2, "cells")
    assert t["cluster_bound_95"] == pytest.approx(stats.zero_failure_upper_bound(2))


def test_zero_failure_bounds_count_rounds_not_toggles():
    # Three rounds of four cells each: three independent units, however many toggles.
    rows = [dict(_cell("wordpatch", 400, 0, 10**7), round=k // 4) for k in range(12)]
    assert stats.clusters(rows) == (3, "rounds")
    assert stats.zero_failure_cluster_bound(3) == pytest.approx(1 - 0.05 ** (1 / 3))
    assert stats.zero_failure_cluster_bound(0) is None
    t = stats.tmax_from_cells(rows)
    assert t["clusters_at_or_above"] == 3 and t["cluster_bound_95"] > 0.6
    assert t["failure_bound_95"] < 1e-6   # what the i.i.d. reading would claim


def test_tmax_evidence_rules_match_the_harness():
    # A crash counts as a failure even with failures recorded on an unexposed toggle; a
    # low-exposure or blind cell is never evidence of zero failures and adds no toggles.
    rows = [_cell("wordpatch", 100, 0, 1000), _cell("wordpatch", 200, 1, 1, crash=1, outcome="crash"),
            _cell("wordpatch", 300, 0, 20, low_exposure=1), _cell("wordpatch", 400, 0, 3, outcome="blind"),
            _cell("wordpatch", 500, 0, 4000), _cell("wordpatch", 500, 0, 9, low_exposure=1)]
    t = stats.tmax_from_cells(rows)
    assert t["observed_ticks"] == 500 and t["max_failing_ticks"] == 200
    assert t["cells_at_or_above"] == 1 and t["exposed_at_or_above"] == 4000


def test_tmax_above_tested_range():
    t = stats.tmax_from_cells([_cell("wordpatch", 100, 0, 100), _cell("wordpatch", 200, 2, 100)])
    assert t["observed_ticks"] is None and t["above_tested_range"]
    assert stats.tmax_from_cells([])["observed_ticks"] is None
