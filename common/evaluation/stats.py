"""Uncertainty and paired comparisons of judge labels (bootstrap CIs, McNemar, kappa, Table 10).

Two bootstraps sit side by side. The question bootstrap resamples questions, as if every question
were independent. The cluster bootstrap resamples clusters, the unit the memory is built from
(a LoCoMo conversation; a LongMemEval haystack, which holds one question, so there the two agree):
questions about one conversation share its memory, so their labels are correlated and the
question bootstrap is too narrow. ``design_effect`` measures that correlation (intraclass
correlation, ICC) and ``minimum_detectable_difference`` turns it into the smallest difference a
category can separate at its size (the power note).

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
import warnings
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


EXACT_METHOD = "Clopper-Pearson exact (statsmodels proportion_confint, method beta)"


def exact_ci(k: int, n: int, *, confidence: float = 0.95) -> tuple[Optional[float], Optional[float]]:
    """Clopper-Pearson interval of ``k`` correct of ``n``: defined at 0/n and n/n too.

    The bootstrap of an all-equal sample is the point ``[p, p]``, which says nothing about how far
    the true accuracy may be; the exact binomial interval stays honest there (0/20 gives
    [0, 16.8 %]). ``(None, None)`` when ``n`` is 0.
    """
    from statsmodels.stats.proportion import proportion_confint

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n <= 0:
        return None, None
    low, high = proportion_confint(k, n, alpha=1 - confidence, method="beta")
    return float(low), float(high)


def degenerate(ci: Optional[Mapping[str, Any]]) -> bool:
    """A bootstrap interval of one point (every label equal): show the exact interval beside it."""
    return bool(ci) and ci.get("low") is not None and ci.get("low") == ci.get("high")  # type: ignore[union-attr]


def accuracy_with_ci(labels: Iterable[Optional[int]], *, clusters: Optional[Sequence[Any]] = None,
                     n_resamples: int = 10_000, seed: int = 42, confidence: float = 0.95) -> dict[str, Any]:
    """``common.evaluation.metrics.accuracy`` plus bootstrap CIs of the strict and the clean accuracy.

    Args:
        labels: 1 correct, 0 wrong, None failed.
        clusters: Optional, one cluster id per label (the conversation or haystack the question
            belongs to). Given, the cluster bootstrap CIs and the power note are added.

    Returns:
        ``{k, n, accuracy, n_failed, accuracy_clean, ci, ci_clean}`` where each CI is
        ``{low, high, confidence, method, n_resamples, seed}``: ``ci`` treats failures as wrong
        (like ``accuracy``, the reported number), ``ci_clean`` leaves them out. With ``clusters``
        also ``ci_cluster`` and ``ci_cluster_clean`` (the same plus ``n_clusters``) and ``power``
        (``power_note`` of the strict labels). Always ``ci_exact`` and ``ci_exact_clean``: the
        Clopper-Pearson interval of the same two numbers (``exact_ci``), the one to read when
        the bootstrap interval is a single point (0/n or n/n).
    """
    values = list(labels)
    if clusters is not None:
        clusters = list(clusters)
        if len(clusters) != len(values):
            raise ValueError(f"one cluster per label needed, got {len(clusters)} clusters for {len(values)} labels")
    summary: dict[str, Any] = dict(accuracy(values))
    strict: list[int] = [0 if v is None else v for v in values]
    kept = [i for i, v in enumerate(values) if v is not None]
    clean: list[int] = [v for v in values if v is not None]
    for key, sample in (("ci", strict), ("ci_clean", clean)):
        low, high = bootstrap_ci(sample, n_resamples=n_resamples, seed=seed, confidence=confidence)
        summary[key] = {"low": low, "high": high, "confidence": confidence, "method": CI_METHOD,
                        "n_resamples": n_resamples, "seed": seed}
    for key, sample in (("ci_exact", strict), ("ci_exact_clean", clean)):
        low, high = exact_ci(sum(sample), len(sample), confidence=confidence)
        summary[key] = {"low": low, "high": high, "confidence": confidence, "method": EXACT_METHOD}
    if clusters is None:
        return summary
    for key, sample, groups in (("ci_cluster", strict, clusters),
                                ("ci_cluster_clean", clean, [clusters[i] for i in kept])):
        low, high, method = _cluster_bootstrap(_check_labels(sample), groups, n_resamples, seed, confidence)
        summary[key] = {"low": low, "high": high, "confidence": confidence, "method": method,
                        "n_resamples": n_resamples, "seed": seed, "n_clusters": len(set(groups))}
    summary["power"] = power_note(strict, clusters)
    return summary


# ----------------------------------------------------------------------------- cluster bootstrap
CI_METHOD = "bootstrap BCa"
CLUSTER_METHOD = "cluster bootstrap BCa (resampling clusters)"
# With fewer clusters than this the between-cluster variance cannot be estimated at all.
MIN_CLUSTERS = 2


def _cluster_sums(values: np.ndarray, clusters: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster (in first-seen order): the sum of the values and the number of questions."""
    if len(clusters) != values.size:
        raise ValueError(f"one cluster per label needed, got {len(clusters)} clusters for {values.size} labels")
    index: dict[Any, int] = {}
    ids = np.fromiter((index.setdefault(c, len(index)) for c in clusters), dtype=int, count=len(clusters))
    return np.bincount(ids, weights=values, minlength=len(index)), np.bincount(ids, minlength=len(index)).astype(float)


def _ratio(sums: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
    # The pooled mean of the resampled clusters: big clusters weigh in proportion to their questions.
    return np.asarray(sums.sum(axis=axis) / sizes.sum(axis=axis))


def _cluster_bootstrap(values: np.ndarray, clusters: Sequence[Any], n_resamples: int, seed: int,
                       confidence: float) -> tuple[Optional[float], Optional[float], str]:
    from scipy import stats

    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples!r}")
    sums, sizes = _cluster_sums(values, clusters)
    if values.size == 0 or sums.size < MIN_CLUSTERS:
        return None, None, f"undefined with fewer than {MIN_CLUSTERS} clusters"
    if np.all(values == values[0]):  # every resample has the same mean (as in bootstrap_ci)
        point = float(values[0])
        return point, point, CLUSTER_METHOD
    # scipy resamples the (sum, size) pairs of whole clusters together (paired=True); BCa's
    # jackknife then leaves one cluster out at a time.
    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # BCa undefined -> NaN, handled below
            res = stats.bootstrap((sums, sizes), _ratio, paired=True, vectorized=True, n_resamples=n_resamples,
                                  confidence_level=confidence, method=method, rng=np.random.default_rng(seed),
                                  batch=1000)
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if not (math.isnan(low) or math.isnan(high)):
            name = CLUSTER_METHOD if method == "BCa" else "cluster bootstrap percentile (BCa undefined here)"
            return low, high, name
    return None, None, "undefined (degenerate resamples)"


def cluster_bootstrap_ci(labels: Sequence[int], clusters: Sequence[Any], *, n_resamples: int = 10_000,
                         seed: int = 42, confidence: float = 0.95) -> tuple[Optional[float], Optional[float]]:
    """Cluster bootstrap CI of an accuracy: resample whole clusters, not questions.

    Each resample draws as many clusters as there are, with replacement, and takes the accuracy
    over all their questions (sum of labels / number of questions). BCa as in ``bootstrap_ci``
    (its jackknife leaves out one cluster at a time), the percentile interval where BCa is
    undefined; seeded, so the same input gives the same interval.

    Args:
        labels: 0/1 labels, failures resolved by the caller (strict: 0; clean: dropped).
        clusters: One cluster id per label (any hashable: a LoCoMo conversation id, a
            LongMemEval haystack id).

    Returns:
        ``(low, high)``; ``(None, None)`` without labels or with fewer than two clusters (the
        spread between clusters cannot be estimated from one); ``(p, p)`` when all labels are
        equal. With clusters of one question each this is the question bootstrap.
    """
    low, high, _ = _cluster_bootstrap(_check_labels(labels), clusters, n_resamples, seed, confidence)
    return low, high


def paired_difference_cluster_ci(a: Sequence[int], b: Sequence[int], clusters: Sequence[Any], *,
                                 n_resamples: int = 10_000, seed: int = 42,
                                 confidence: float = 0.95) -> tuple[Optional[float], Optional[float]]:
    """Paired cluster bootstrap CI of ``mean(b) - mean(a)``: whole clusters of question pairs resampled.

    The per-question differences ``b_i - a_i`` are summed per cluster; a resample of clusters keeps
    both the pairing and the correlation within a cluster. Degenerate inputs as in
    ``cluster_bootstrap_ci``.
    """
    la, lb = _check_labels(a), _check_labels(b)
    if la.shape != lb.shape:
        raise ValueError(f"paired labels need equal lengths, got {la.size} and {lb.size}")
    low, high, _ = _cluster_bootstrap(lb - la, clusters, n_resamples, seed, confidence)
    return low, high


def design_effect(values: Sequence[float], clusters: Sequence[Any]) -> dict[str, Any]:
    """Intraclass correlation and design effect of per-question values grouped in clusters.

    ICC by the one-way ANOVA estimator, ``(MSB - MSW) / (MSB + (m0 - 1) MSW)`` with
    ``m0 = (N - sum(n_c^2) / N) / (C - 1)``, truncated at 0 (a negative estimate is read as no
    clustering). Design effect (Kish, unequal cluster sizes): ``1 + (sum(n_c^2) / N - 1) * ICC``,
    the factor by which clustering inflates the variance of the accuracy, so that
    ``N / deff`` questions are worth that many independent ones.

    Returns:
        ``{n, n_clusters, mean_cluster_size, weighted_cluster_size, icc, design_effect}``; ``icc``
        is None when it cannot be estimated (fewer than two clusters, every cluster of size 1,
        or no variation at all), and the design effect is then 1 (clusters of one question are
        independent by definition; with no variation there is nothing to inflate).
    """
    y = np.asarray(list(values), dtype=float)
    sums, sizes = _cluster_sums(y, list(clusters))
    n, c = int(y.size), int(sums.size)
    out: dict[str, Any] = {"n": n, "n_clusters": c, "mean_cluster_size": n / c if c else None,
                           "weighted_cluster_size": float((sizes ** 2).sum() / n) if n else None,
                           "icc": None, "design_effect": 1.0}
    if c < MIN_CLUSTERS or n <= c:
        return out
    means = sums / sizes
    grand = y.mean()
    index: dict[Any, int] = {}
    ids = np.fromiter((index.setdefault(k, len(index)) for k in clusters), dtype=int, count=n)
    msb = float((sizes * (means - grand) ** 2).sum() / (c - 1))
    msw = float(((y - means[ids]) ** 2).sum() / (n - c))
    m0 = (n - (sizes ** 2).sum() / n) / (c - 1)
    denominator = msb + (m0 - 1) * msw
    if denominator <= 0:
        return out
    icc = max(0.0, (msb - msw) / denominator)
    out["icc"] = float(icc)
    out["design_effect"] = float(1 + (out["weighted_cluster_size"] - 1) * icc)
    return out


def minimum_detectable_difference(p: Optional[float], n: int, *, design_effect: float = 1.0, alpha: float = 0.05,
                                  power: float = 0.8) -> Optional[float]:
    """The smallest accuracy difference (fraction) a two-sided test separates with this power.

    Method: two samples of ``n / design_effect`` effectively independent questions each, the
    normal test on Cohen's h (arcsine-transformed rates; statsmodels ``NormalIndPower``): the
    detectable h is ``(z_{1-alpha/2} + z_{power}) * sqrt(2 / n_eff)``, and the difference is
    converted back to rates starting from the observed rate ``p`` and moving toward 50 %
    (the direction in which a rate is hardest to pin down, so the answer is the larger of the
    two). It is conservative for two runs on the same questions, whose paired test gains from
    their correlation (unknown from one run), and it stays defined at p = 0 or 1.

    Returns:
        The difference as a fraction, or None when ``p`` is None, ``n`` is 0, or no rate in
        [0, 1] is far enough from ``p`` (too few questions to separate anything).
    """
    from statsmodels.stats.power import NormalIndPower

    if p is None or n <= 0:
        return None
    if design_effect < 1 or not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"need design_effect >= 1 and alpha, power in (0, 1); got {design_effect}, {alpha}, {power}")
    h = float(NormalIndPower().solve_power(effect_size=None, nobs1=n / design_effect, alpha=alpha, power=power,
                                           ratio=1.0, alternative="two-sided"))
    phi = math.asin(math.sqrt(p))
    target = phi - h / 2 if p >= 0.5 else phi + h / 2
    if not 0 <= target <= math.pi / 2:
        return None
    return abs(p - math.sin(target) ** 2)


def power_note(labels: Sequence[int], clusters: Optional[Sequence[Any]], *, alpha: float = 0.05,
               power: float = 0.8) -> dict[str, Any]:
    """The ``power`` block beside an accuracy: design effect and minimum detectable difference.

    ``labels`` are the strict 0/1 labels the accuracy is of; without clusters every question is
    its own cluster (design effect 1).
    """
    values = list(labels)
    groups = list(clusters) if clusters is not None else list(range(len(values)))
    deff = design_effect(values, groups)
    p = sum(values) / len(values) if values else None
    return {"alpha": alpha, "power": power, "n": len(values), "n_clusters": deff["n_clusters"],
            "icc": deff["icc"], "design_effect": deff["design_effect"],
            "n_effective": len(values) / deff["design_effect"] if values else 0.0,
            "mdd": minimum_detectable_difference(p, len(values), design_effect=deff["design_effect"], alpha=alpha,
                                                 power=power),
            "method": "two-sided test of two independent samples of n / design_effect questions on Cohen's h "
                      "(arcsine), from the observed rate toward 50%; design effect 1 + (sum n_c^2 / n - 1) * ICC "
                      "(ANOVA ICC, truncated at 0)"}


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


# ----------------------------------------------------------------------------- fractional scores
def score_with_ci(values: Sequence[Optional[float]], clusters: Sequence[Any], *, n_resamples: int = 10_000,
                  seed: int = 42, confidence: float = 0.95, pooled: bool = False) -> dict[str, Any]:
    """Fractional per-question scores in [0, 1] (a rubric score, a normalised tau) with their sums.

    Failures (None) count 0, as strict accuracy counts them wrong. The reported number is the
    mean over clusters of each cluster's mean (``mean_of_clusters``: BEAM's official aggregation,
    one chat one vote); the pooled mean over questions is given beside it with its sum and count.

    CIs: ``ci`` is the question bootstrap (BCa) of the pooled mean; ``ci_cluster`` resamples whole
    clusters and recomputes the mean of cluster means, i.e. the bootstrap of the cluster means
    (BCa, or a point interval when they are all equal; undefined with fewer than two clusters).
    ``pooled``: a number reported as the pooled mean (LoCoMo-Plus's) gets the cluster CI of that mean.
    """
    if len(clusters) != len(values):
        raise ValueError(f"one cluster per score needed, got {len(clusters)} clusters for {len(values)} scores")
    for v in values:
        if v is not None and (isinstance(v, bool) or not 0.0 <= float(v) <= 1.0):
            raise ValueError(f"scores must be in [0, 1] or None, got {v!r}")
    strict = np.asarray([0.0 if v is None else float(v) for v in values], dtype=float)
    sums, sizes = _cluster_sums(strict, list(clusters)) if len(values) else (np.zeros(0), np.zeros(0))
    means = sums / sizes if sizes.size else np.zeros(0)
    out: dict[str, Any] = {
        "n": len(values), "sum": round(float(strict.sum()), 4), "n_failed": sum(v is None for v in values),
        "mean": round(float(strict.mean()), 4) if len(values) else None,
        "n_clusters": int(sizes.size),
        "mean_of_clusters": round(float(means.mean()), 4) if means.size else None,
    }
    low, high = _bootstrap_mean(strict, n_resamples, seed, confidence)
    out["ci"] = {"low": low, "high": high, "confidence": confidence, "method": CI_METHOD,
                 "n_resamples": n_resamples, "seed": seed}
    if means.size < MIN_CLUSTERS:
        clow, chigh, method = None, None, f"undefined with fewer than {MIN_CLUSTERS} clusters"
    elif pooled:  # whole clusters resampled, the pooled mean of their questions recomputed
        clow, chigh, method = _cluster_bootstrap(strict, list(clusters), n_resamples, seed, confidence)
    else:
        clow, chigh = _bootstrap_mean(means, n_resamples, seed, confidence)
        method = "cluster bootstrap BCa of the mean of cluster means (resampling clusters)"
    out["ci_cluster"] = {"low": clow, "high": chigh, "confidence": confidence, "method": method,
                         "n_resamples": n_resamples, "seed": seed, "n_clusters": int(sizes.size)}
    return out
