"""Uncertainty and paired comparisons of judge labels (bootstrap CIs, McNemar, kappa, Table 10).

Every function here works on per-question judge labels: 1 correct, 0 wrong, None failed (the
judge or the answer stage failed; ``JudgeRow.error`` says why). Two ways of treating failures
are offered wherever pairs are formed, and every result says which one it used:

* ``strict`` (default, the reported numbers): a failure counts as wrong, as in ``metrics.json``.
* ``clean``: a pair in which either side failed is dropped (and the number dropped reported).

The tests come from scipy/statsmodels; this module only shapes inputs and outputs into plain
JSON-serialisable values.
(``common.evaluation.labels`` joins a run's gold with one judge file.)
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional

import numpy as np

from common.evaluation.metrics import accuracy

Failures = Literal["strict", "clean"]
FAILURE_MODES: tuple[str, ...] = ("strict", "clean")


# ----------------------------------------------------------------------------- bootstrap
def _check_labels(labels: Iterable[Any]) -> np.ndarray:
    values = list(labels)
    for v in values:
        if v is None or isinstance(v, bool) or v not in (0, 1):
            raise ValueError(f"labels must be 0 or 1 (resolve failures as strict or clean first), got {v!r}")
    return np.asarray(values, dtype=float)


def _bootstrap_mean(values: np.ndarray, n_resamples: int, seed: int,
                    confidence: float) -> tuple[Optional[float], Optional[float]]:
    from scipy import stats

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")
    if values.size == 0:
        return None, None
    if np.all(values == values[0]):
        # Every resample of a constant sample has the same mean: the bootstrap distribution is
        # a point mass and BCa is undefined (scipy would return NaN with a warning).
        point = float(values[0])
        return point, point
    res = stats.bootstrap((values,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                          method="BCa", rng=np.random.default_rng(seed), batch=1000, vectorized=True)
    ci = res.confidence_interval
    return float(ci.low), float(ci.high)


def bootstrap_ci(labels: Sequence[int], *, n_resamples: int = 10_000, seed: int = 42,
                 confidence: float = 0.95) -> tuple[Optional[float], Optional[float]]:
    """Bootstrap confidence interval of an accuracy (mean of 0/1 labels).

    ``scipy.stats.bootstrap`` with the BCa method (scipy's default, which corrects the skew of
    an accuracy near 1) and a ``numpy`` Generator seeded with ``seed``, so the same labels in
    the same order give the same interval on every run (another order resamples differently and
    moves the bounds by Monte-Carlo noise only).

    Args:
        labels: 0/1 labels. Failures (None) must be resolved by the caller first (strict:
            as 0; clean: dropped), so that the interval is of the number the caller reports.

    Returns:
        ``(low, high)`` as fractions. Degenerate inputs, deterministically: no labels ->
        ``(None, None)``; all labels equal (this includes a single label) -> ``(p, p)``, the
        bootstrap's own answer (every resample is identical). A point interval at 0 or 1 is not
        a guarantee: with few questions the true accuracy can still be far from p.

    Raises:
        ValueError: A label other than 0 or 1, or a bad ``confidence``/``n_resamples``.
    """
    return _bootstrap_mean(_check_labels(labels), n_resamples, seed, confidence)


def paired_difference_ci(a: Sequence[int], b: Sequence[int], *, n_resamples: int = 10_000, seed: int = 42,
                         confidence: float = 0.95) -> tuple[Optional[float], Optional[float]]:
    """Paired bootstrap CI of ``mean(b) - mean(a)`` over the same questions (fractions).

    Resampling questions, not the two runs independently, keeps the pairing: the difference of
    means is the mean of per-question differences ``b_i - a_i`` in {-1, 0, 1}. Degenerate
    inputs behave as in ``bootstrap_ci``.
    """
    la, lb = _check_labels(a), _check_labels(b)
    if la.shape != lb.shape:
        raise ValueError(f"paired labels need equal lengths, got {la.size} and {lb.size}")
    return _bootstrap_mean(lb - la, n_resamples, seed, confidence)


def accuracy_with_ci(labels: Iterable[Optional[int]], *, n_resamples: int = 10_000, seed: int = 42,
                     confidence: float = 0.95) -> dict[str, Any]:
    """``common.evaluation.metrics.accuracy`` plus bootstrap CIs of the strict and the clean accuracy.

    Returns:
        ``{k, n, accuracy, n_failed, accuracy_clean, ci, ci_clean}`` where each CI is
        ``{low, high, confidence, method, n_resamples, seed}``: ``ci`` treats failures as wrong
        (like ``accuracy``, the reported number), ``ci_clean`` leaves them out.
    """
    values = list(labels)
    summary: dict[str, Any] = dict(accuracy(values))
    for key, sample in (("ci", [0 if v is None else v for v in values]),
                        ("ci_clean", [v for v in values if v is not None])):
        low, high = bootstrap_ci(sample, n_resamples=n_resamples, seed=seed, confidence=confidence)
        summary[key] = {"low": low, "high": high, "confidence": confidence, "method": "bootstrap BCa",
                        "n_resamples": n_resamples, "seed": seed}
    return summary


# ----------------------------------------------------------------------------- paired tests
def _check_mode(failures: str) -> None:
    if failures not in FAILURE_MODES:
        raise ValueError(f"failures must be one of {FAILURE_MODES}, got {failures!r}")


@dataclass(frozen=True)
class Pairs:
    """Labels of two sources on their shared questions, failures resolved by ``failures``."""

    failures: str
    qids: tuple[str, ...]  # shared and kept, sorted
    a: tuple[int, ...]
    b: tuple[int, ...]
    n_shared: int  # shared before dropping failed pairs
    n_dropped: int  # clean mode: shared pairs where either side failed
    only_in_a: int
    only_in_b: int


def pair_labels(a: Mapping[str, Optional[int]], b: Mapping[str, Optional[int]],
                failures: Failures = "strict") -> Pairs:
    """Align two ``qid -> label`` maps on their shared qids (sorted, so results are stable)."""
    _check_mode(failures)
    shared = sorted(set(a) & set(b))
    kept = [q for q in shared if failures == "strict" or (a[q] is not None and b[q] is not None)]
    fix = lambda v: 0 if v is None else v  # noqa: E731  strict: a failure is wrong
    la, lb = [fix(a[q]) for q in kept], [fix(b[q]) for q in kept]
    _check_labels(la)
    _check_labels(lb)
    return Pairs(failures=failures, qids=tuple(kept), a=tuple(la), b=tuple(lb), n_shared=len(shared),
                 n_dropped=len(shared) - len(kept), only_in_a=len(set(a) - set(b)),
                 only_in_b=len(set(b) - set(a)))


@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar test of two label sources on their shared questions."""

    failures: str  # strict | clean
    n_shared: int  # qids present in both
    n_used: int  # pairs in the test (n_shared minus n_dropped)
    n_dropped: int  # clean mode: pairs where either side failed
    only_in_a: int  # qids only in a (not in the test)
    only_in_b: int
    both_right: int
    only_a_right: int
    only_b_right: int
    both_wrong: int
    accuracy_a: Optional[float]  # on the used pairs
    accuracy_b: Optional[float]
    difference: Optional[float]  # accuracy_b - accuracy_a on the used pairs (fraction)
    p_value: Optional[float]  # two-sided exact binomial on the discordant pairs; None if no pairs

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _table(p: Pairs) -> np.ndarray:
    a, b = np.asarray(p.a, dtype=int), np.asarray(p.b, dtype=int)
    # Rows: a right / wrong; columns: b right / wrong.
    return np.array([[np.sum((a == 1) & (b == 1)), np.sum((a == 1) & (b == 0))],
                     [np.sum((a == 0) & (b == 1)), np.sum((a == 0) & (b == 0))]])


def _mcnemar(p: Pairs) -> McNemarResult:
    from statsmodels.stats.contingency_tables import mcnemar

    t = _table(p)
    n = int(t.sum())
    acc_a = (t[0, 0] + t[0, 1]) / n if n else None
    acc_b = (t[0, 0] + t[1, 0]) / n if n else None
    return McNemarResult(
        failures=p.failures, n_shared=p.n_shared, n_used=n, n_dropped=p.n_dropped,
        only_in_a=p.only_in_a, only_in_b=p.only_in_b,
        both_right=int(t[0, 0]), only_a_right=int(t[0, 1]), only_b_right=int(t[1, 0]), both_wrong=int(t[1, 1]),
        accuracy_a=None if acc_a is None else float(acc_a), accuracy_b=None if acc_b is None else float(acc_b),
        difference=None if acc_a is None or acc_b is None else float(acc_b - acc_a),
        # With no discordant pairs the exact test gives p = 1 (no evidence of a difference).
        p_value=float(mcnemar(t, exact=True).pvalue) if n else None,
    )


def mcnemar_exact(a: Mapping[str, Optional[int]], b: Mapping[str, Optional[int]], *,
                  failures: Failures = "strict") -> McNemarResult:
    """Exact McNemar test (statsmodels, binomial on discordant pairs) over the SHARED qids.

    Args:
        a, b: ``qid -> label`` (1, 0, None) of two runs, or of two judges of one run.
        failures: ``strict`` counts a failure as wrong; ``clean`` drops the pairs where either
            side failed. The result records the mode and how many pairs were dropped.
    """
    return _mcnemar(pair_labels(a, b, failures))


@dataclass(frozen=True)
class AgreementResult:
    """How two judges of the same answers agree (on the same pairs as ``mcnemar``)."""

    failures: str
    n: int  # pairs compared
    agreement: Optional[float]  # share of pairs with equal labels
    kappa: Optional[float]  # Cohen's kappa; None if undefined (both judges constant and equal)
    # Asymptotic 95% CI (statsmodels), clipped to [-1, 1]; None when a judge is constant.
    kappa_ci: tuple[Optional[float], Optional[float]]
    mcnemar: McNemarResult

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["kappa_ci"] = list(self.kappa_ci)
        return out


def judge_agreement(a: Mapping[str, Optional[int]], b: Mapping[str, Optional[int]], *,
                    failures: Failures = "strict") -> AgreementResult:
    """Exact agreement, Cohen's kappa (statsmodels) and McNemar for two judges of one run.

    The same pairs feed all three numbers (``failures`` as in ``mcnemar_exact``): in strict mode
    two judges that both failed on a question agree on "wrong".
    """
    from statsmodels.stats.inter_rater import cohens_kappa

    p = pair_labels(a, b, failures)
    test = _mcnemar(p)
    t = _table(p)
    n = int(t.sum())
    if n == 0:
        return AgreementResult(failures, 0, None, None, (None, None), test)
    agreement = float(np.trace(t) / n)
    # Chance agreement is 1 when both judges give one and the same label everywhere: kappa is
    # 0/0 there, so report None instead of NaN.
    p_a, p_b = t.sum(axis=1) / n, t.sum(axis=0) / n
    if math.isclose(float(p_a @ p_b), 1.0):
        return AgreementResult(failures, n, agreement, None, (None, None), test)
    with np.errstate(divide="ignore", invalid="ignore"):  # its z-test divides by 0 when a judge is constant
        k = cohens_kappa(t)
    if min(p_a.min(), p_b.min()) == 0:
        # One judge gives one label everywhere: kappa is 0 by definition and its asymptotic
        # standard error is 0, so the interval [0, 0] would claim a certainty it does not have.
        return AgreementResult(failures, n, agreement, float(k.kappa), (None, None), test)
    # The asymptotic (normal) interval can leave [-1, 1] on small samples; kappa cannot.
    ci = (max(-1.0, float(k.kappa_low)), min(1.0, float(k.kappa_upp)))
    return AgreementResult(failures, n, agreement, float(k.kappa), ci, test)


# ----------------------------------------------------------------------------- Table 10
def _check_fraction(name: str, value: Any) -> float:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name}: expected an accuracy in [0, 1] (a fraction, not a percentage), got {value!r}")
    return float(value)


def table10(primary_by_category: Mapping[str, float], secondary_by_category: Mapping[str, float],
            primary_overall: float, secondary_overall: float) -> dict[str, Any]:
    """The paper's Appendix D / Table 10 consistency statistics of two judges.

    With ``Δ_c = secondary_c - primary_c`` in percentage points: ``m`` categories, mean signed
    ``Δ``, MAE (mean ``|Δ|``), population SD of ``Δ`` (ddof 0, as the paper states), ``max|Δ|``
    (and its category), ``|Δ_overall|``, and Pearson r across the category accuracies
    (``scipy.stats.pearsonr``; the overall is not a category and is left out of r).

    Args:
        primary_by_category / secondary_by_category: ``category -> accuracy`` as fractions in
            [0, 1], same keys (the paper: GPT-4o-mini primary, Qwen3-32B secondary).
        primary_overall / secondary_overall: Overall accuracies, fractions.

    Returns:
        A JSON-able dict; ``pearson_r`` is None when undefined (m < 2, or either side has the
        same accuracy in every category). Values are unrounded.
    """
    from scipy.stats import pearsonr

    if set(primary_by_category) != set(secondary_by_category):
        diff = sorted(set(primary_by_category) ^ set(secondary_by_category))
        raise ValueError(f"table10: both judges need the same categories; differing: {diff}")
    if not primary_by_category:
        raise ValueError("table10: no categories")
    cats = list(primary_by_category)
    g = np.array([_check_fraction(f"primary[{c}]", primary_by_category[c]) for c in cats]) * 100
    q = np.array([_check_fraction(f"secondary[{c}]", secondary_by_category[c]) for c in cats]) * 100
    overall = 100 * (_check_fraction("secondary_overall", secondary_overall)
                     - _check_fraction("primary_overall", primary_overall))
    delta = q - g
    worst = int(np.argmax(np.abs(delta)))
    r = None
    if len(cats) >= 2 and np.ptp(g) > 0 and np.ptp(q) > 0:
        r = float(pearsonr(g, q).statistic)
    return {
        "m": len(cats),
        "mean_delta_pp": float(delta.mean()),
        "mae_pp": float(np.abs(delta).mean()),
        "sd_delta_pp": float(delta.std(ddof=0)),
        "max_abs_delta_pp": float(abs(delta[worst])),
        "max_abs_delta_category": cats[worst],
        "abs_delta_overall_pp": float(abs(overall)),
        "pearson_r": r,
        "delta_pp_by_category": {c: float(d) for c, d in zip(cats, delta)},
    }
