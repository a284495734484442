"""0/n and n/n: the bootstrap interval is one point, so an exact (Clopper-Pearson) interval stands beside it."""
from __future__ import annotations

import pytest
from scipy import stats as sps

from common.evaluation.scoring import score_note
from common.evaluation.stats import accuracy_with_ci, exact_ci
from common.report.tables.table import fmt_acc


def test_exact_interval_is_clopper_pearson_from_the_beta_quantiles():
    # Clopper-Pearson by its definition (beta quantiles), not by the library under test.
    for k, n in ((0, 20), (20, 20), (7, 20)):
        low = 0.0 if k == 0 else sps.beta.ppf(0.025, k, n - k + 1)
        high = 1.0 if k == n else sps.beta.ppf(0.975, k + 1, n - k)
        assert exact_ci(k, n) == pytest.approx((low, high), abs=1e-9)
    assert exact_ci(0, 0) == (None, None)


def test_all_correct_gets_an_exact_interval_beside_the_point_bootstrap():
    s = accuracy_with_ci([1] * 12 + [None], clusters=["c"] * 13)
    assert (s["ci_clean"]["low"], s["ci_clean"]["high"]) == (1.0, 1.0)  # the bootstrap is one point
    assert s["ci_exact_clean"]["low"] == pytest.approx(sps.beta.ppf(0.025, 12, 1)) and s["ci_exact_clean"]["high"] == 1
    assert s["ci_exact"]["low"] < s["accuracy"] < s["ci_exact"]["high"]  # 12/13 strict: a real interval
    assert "Clopper-Pearson" in s["ci_exact"]["method"]


def test_tables_show_the_exact_interval_only_where_the_bootstrap_is_a_point():
    none_right = accuracy_with_ci([0] * 20)
    cell = fmt_acc(none_right)
    assert cell == f"0.0 [0.0, 0.0; exact 0.0, {100 * exact_ci(0, 20)[1]:.1f}] (0/20)"
    assert "exact" not in fmt_acc(accuracy_with_ci([0, 1] * 10))
    metrics = {"judges": {"j": {"overall": none_right, "failures": {}}}, "fingerprint": {}, "coverage": {}}
    assert f"exact Clopper-Pearson [0.0, {100 * exact_ci(0, 20)[1]:.1f}]" in score_note(metrics, "j")
