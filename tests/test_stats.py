"""common.evaluation.stats: bootstrap CIs, exact McNemar, Cohen's kappa, Table 10, label loading.

Expected values are computed here independently of scipy/statsmodels: McNemar p-values from
the binomial distribution with math.comb, kappa from its definition on a hand-made 2x2 table,
Table 10 with the statistics module and the paper's own Tables 1, 2 and 10.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import minimize

from common.core.io import ArtifactError
from common.core.schema import Gold, JudgeRow, to_dict
from common.evaluation.labels import load_labels
from common.evaluation.stats import (
    accuracy_with_ci,
    bootstrap_ci,
    judge_agreement,
    mcnemar_exact,
    paired_difference_ci,
    table10,
)


# ----------------------------------------------------------------------------- helpers
def exact_mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact McNemar: 2 * P(X <= min(b, c)), X ~ Binomial(b + c, 1/2), capped at 1."""
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


def maps_from_table(both_right: int, only_a: int, only_b: int, both_wrong: int, prefix: str = "q"):
    """Two qid -> label maps with exactly this 2x2 table."""
    cells = [(1, 1)] * both_right + [(1, 0)] * only_a + [(0, 1)] * only_b + [(0, 0)] * both_wrong
    a = {f"{prefix}{i:03d}": x for i, (x, _) in enumerate(cells)}
    b = {f"{prefix}{i:03d}": y for i, (_, y) in enumerate(cells)}
    return a, b


def pearson(x: list[float], y: list[float]) -> float:
    mx, my = statistics.fmean(x), statistics.fmean(y)
    cov = sum((u - mx) * (v - my) for u, v in zip(x, y))
    return cov / math.sqrt(sum((u - mx) ** 2 for u in x) * sum((v - my) ** 2 for v in y))


# ----------------------------------------------------------------------------- bootstrap
def test_bootstrap_ci_contains_the_accuracy_and_is_seeded():
    labels = [1] * 70 + [0] * 30
    low, high = bootstrap_ci(labels)
    assert 0 < low < 0.7 < high < 1
    assert bootstrap_ci(labels) == (low, high)  # same seed, same interval
    # Another seed (or order) resamples differently but must agree to Monte-Carlo precision.
    other = bootstrap_ci(labels, seed=7)
    assert other[0] == pytest.approx(low, abs=0.02) and other[1] == pytest.approx(high, abs=0.02)


def test_bootstrap_ci_width_matches_the_normal_approximation_and_narrows_with_n():
    p = 0.7
    widths = {}
    for n in (100, 1000):
        labels = [1] * int(p * n) + [0] * (n - int(p * n))
        low, high = bootstrap_ci(labels)
        widths[n] = high - low
        # Independent check: the Wald interval 2 * 1.96 * sqrt(p(1-p)/n) is accurate at these n.
        wald = 2 * 1.959964 * math.sqrt(p * (1 - p) / n)
        assert widths[n] == pytest.approx(wald, rel=0.15)
    assert widths[1000] < widths[100] / 2.5  # ~ 1/sqrt(10)


@pytest.mark.parametrize("k, n", [(95, 100), (90, 100), (1395, 1540)])
def test_bootstrap_ci_is_skewed_like_the_wilson_interval_near_1(k, n):
    # Near 1 an accuracy's interval is asymmetric (longer below). BCa corrects for this and
    # lands close to the Wilson score interval, computed here from its formula; a plain
    # "basic" bootstrap would be skewed the wrong way (about 0.02 off at 95/100).
    z, p = 1.959964, k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low, high = bootstrap_ci([1] * k + [0] * (n - k))
    assert low == pytest.approx(centre - half, abs=0.01) and high == pytest.approx(centre + half, abs=0.01)
    assert p - low > high - p


def test_bootstrap_ci_confidence_level_orders_intervals():
    labels = [1] * 40 + [0] * 20
    lo90, hi90 = bootstrap_ci(labels, confidence=0.90)
    lo99, hi99 = bootstrap_ci(labels, confidence=0.99)
    assert lo99 < lo90 and hi90 < hi99


@pytest.mark.parametrize("labels, expected", [([], (None, None)), ([1], (1.0, 1.0)), ([0, 0, 0], (0.0, 0.0)),
                                              ([1] * 50, (1.0, 1.0))])
def test_bootstrap_ci_degenerate_inputs(labels, expected):
    assert bootstrap_ci(labels) == expected


@pytest.mark.parametrize("bad", [[1, None], [1, 2], [True, 0], [0.5]])
def test_bootstrap_ci_rejects_non_binary_labels(bad):
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        bootstrap_ci(bad)


def test_bootstrap_ci_rejects_bad_parameters():
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_ci([0, 1], confidence=95)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci([0, 1], n_resamples=0)


def test_paired_difference_ci():
    a = [1] * 60 + [0] * 40
    b = [1] * 60 + [1] * 20 + [0] * 20  # b is right on 20 more questions: +0.20
    low, high = paired_difference_ci(a, b)
    assert 0 < low < 0.2 < high
    assert paired_difference_ci(a, a) == (0.0, 0.0)  # every per-question difference is 0
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference_ci([1, 0], [1])


def test_accuracy_with_ci_counts_failures_as_wrong_and_is_json():
    labels = [1, 1, 0, None, 1, 0, 1, None]
    out = accuracy_with_ci(labels)
    assert (out["k"], out["n"], out["n_failed"]) == (4, 8, 2)
    assert out["accuracy"] == 4 / 8 and out["accuracy_clean"] == 4 / 6
    # The CI is of the strict number: failures enter the bootstrap as wrong.
    assert (out["ci"]["low"], out["ci"]["high"]) == bootstrap_ci([1, 1, 0, 0, 1, 0, 1, 0])
    assert (out["ci_clean"]["low"], out["ci_clean"]["high"]) == bootstrap_ci([1, 1, 0, 1, 0, 1])
    assert out["ci"]["confidence"] == 0.95 and out["ci"]["seed"] == 42
    assert json.loads(json.dumps(out)) == out
    empty = accuracy_with_ci([])
    assert empty["accuracy"] is None and empty["ci"]["low"] is None and empty["ci_clean"]["high"] is None
    failed = accuracy_with_ci([None, None])
    assert (failed["ci"]["low"], failed["ci"]["high"], failed["ci_clean"]["low"]) == (0.0, 0.0, None)


# ----------------------------------------------------------------------------- McNemar
@pytest.mark.parametrize("table", [(7, 2, 9, 4), (30, 1, 12, 5), (10, 4, 4, 2), (3, 0, 0, 3), (0, 0, 25, 0)])
def test_mcnemar_exact_matches_the_binomial(table):
    a, b = maps_from_table(*table)
    res = mcnemar_exact(a, b)
    assert (res.both_right, res.only_a_right, res.only_b_right, res.both_wrong) == table
    assert res.n_shared == res.n_used == sum(table)
    assert res.p_value == pytest.approx(exact_mcnemar_p(table[1], table[2]), rel=1e-12)
    assert res.accuracy_a == pytest.approx((table[0] + table[1]) / sum(table))
    assert res.difference == pytest.approx((table[2] - table[1]) / sum(table))
    assert res.failures == "strict"


def test_mcnemar_counts_only_shared_questions():
    a, b = maps_from_table(5, 1, 6, 2)
    a["only_a"], b["only_b1"], b["only_b2"] = 1, 0, 1
    res = mcnemar_exact(a, b)
    assert (res.n_shared, res.only_in_a, res.only_in_b) == (14, 1, 2)
    assert res.p_value == pytest.approx(exact_mcnemar_p(1, 6))


def test_mcnemar_strict_and_clean_failures():
    a, b = maps_from_table(4, 1, 5, 2)
    # Three failed pairs: a failed / b right, a right / b failed, both failed.
    a.update({"f1": None, "f2": 1, "f3": None})
    b.update({"f1": 1, "f2": None, "f3": None})
    strict = mcnemar_exact(a, b)  # failures are wrong: f1 -> only b right, f2 -> only a right, f3 -> both wrong
    assert (strict.both_right, strict.only_a_right, strict.only_b_right, strict.both_wrong) == (4, 2, 6, 3)
    assert (strict.n_used, strict.n_dropped) == (15, 0)
    assert strict.p_value == pytest.approx(exact_mcnemar_p(2, 6))
    clean = mcnemar_exact(a, b, failures="clean")
    assert (clean.both_right, clean.only_a_right, clean.only_b_right, clean.both_wrong) == (4, 1, 5, 2)
    assert (clean.failures, clean.n_shared, clean.n_used, clean.n_dropped) == ("clean", 15, 12, 3)
    assert clean.p_value == pytest.approx(exact_mcnemar_p(1, 5))
    with pytest.raises(ValueError, match="failures"):
        mcnemar_exact(a, b, failures="lenient")  # type: ignore[arg-type]


def test_mcnemar_without_shared_questions():
    res = mcnemar_exact({"a": 1}, {"b": 0})
    assert res.n_used == 0 and res.p_value is None and res.difference is None
    assert json.loads(json.dumps(res.to_dict()))["only_in_a"] == 1


# ----------------------------------------------------------------------------- agreement
def test_judge_agreement_kappa_from_a_hand_computed_table():
    # Judge A right on 25, B right on 30 of 50; they agree on 20 right + 15 wrong.
    # p_o = 35/50 = 0.7; p_e = (25/50)(30/50) + (25/50)(20/50) = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4.
    a, b = maps_from_table(20, 5, 10, 15)
    res = judge_agreement(a, b)
    assert res.n == 50
    assert res.agreement == pytest.approx(0.7)
    assert res.kappa == pytest.approx(0.4)
    assert res.kappa_ci[0] < 0.4 < res.kappa_ci[1]
    assert res.mcnemar.p_value == pytest.approx(exact_mcnemar_p(5, 10))
    assert json.loads(json.dumps(res.to_dict()))["kappa"] == pytest.approx(0.4)


def test_judge_agreement_second_table_and_failures():
    # p_o = 0.6; A right 60/100, B right 70/100: p_e = 0.6*0.7 + 0.4*0.3 = 0.54; kappa = 0.06/0.46.
    a, b = maps_from_table(45, 15, 25, 15)
    assert judge_agreement(a, b).kappa == pytest.approx(0.06 / 0.46)
    # Two failed judgments on the same question: wrong for both in strict mode, dropped in clean.
    a["fail"], b["fail"] = None, None
    assert judge_agreement(a, b).n == 101
    assert judge_agreement(a, b).agreement == pytest.approx(61 / 101)
    clean = judge_agreement(a, b, failures="clean")
    assert (clean.n, clean.mcnemar.n_dropped) == (100, 1)
    assert clean.agreement == pytest.approx(0.6)


def test_judge_agreement_degenerate():
    a, b = maps_from_table(10, 0, 0, 0)  # both judges say "correct" everywhere: p_e = 1
    res = judge_agreement(a, b)
    assert res.agreement == 1.0 and res.kappa is None and res.kappa_ci == (None, None)
    one_sided = judge_agreement(*maps_from_table(6, 2, 0, 0))  # B says "correct" everywhere
    assert one_sided.kappa == pytest.approx(0.0) and one_sided.kappa_ci == (None, None)
    assert one_sided.agreement == pytest.approx(0.75)
    empty = judge_agreement({}, {})
    assert empty.n == 0 and empty.agreement is None and empty.kappa is None


# ----------------------------------------------------------------------------- Table 10
# The paper's Table 1 (LoCoMo) and Table 2 (LongMemEval) EnSIMem rows, in percent (rounded to
# 0.1), GPT-4o-mini judge first, Qwen3-32B second; then the paper's Table 10 row.
LOCOMO = (
    {"multi-hop": 88.7, "temporal": 89.0, "open-domain": 70.8, "single-hop": 94.2}, 90.6,
    {"multi-hop": 83.3, "temporal": 89.6, "open-domain": 72.9, "single-hop": 94.5}, 90.0,
    {"m": 4, "mean_delta_pp": -0.620, "mae_pp": 2.11, "sd_delta_pp": 2.88, "max_abs_delta_pp": 5.46,
     "abs_delta_overall_pp": 0.610, "pearson_r": 0.946, "max_abs_delta_category": "multi-hop"},
)
LONGMEMEVAL = (
    {"single-session-preference": 83.3, "single-session-assistant": 91.7, "temporal-reasoning": 89.3,
     "multi-session": 93.0, "knowledge-update": 96.2, "single-session-user": 98.6}, 92.8,
    {"single-session-preference": 86.7, "single-session-assistant": 94.6, "temporal-reasoning": 89.1,
     "multi-session": 91.4, "knowledge-update": 96.1, "single-session-user": 98.6}, 92.8,
    {"m": 6, "mean_delta_pp": 0.750, "mae_pp": 1.37, "sd_delta_pp": 1.79, "max_abs_delta_pp": 3.37,
     "abs_delta_overall_pp": 0.030, "pearson_r": 0.936, "max_abs_delta_category": "single-session-preference"},
)


def _frac(d: dict[str, float]) -> dict[str, float]:
    return {k: v / 100 for k, v in d.items()}


@pytest.mark.parametrize("case", [LOCOMO, LONGMEMEVAL], ids=["locomo", "longmemeval"])
def test_table10_on_rounded_table_values_matches_an_independent_computation(case):
    g, g_all, q, q_all, _ = case
    out = table10(_frac(g), _frac(q), g_all / 100, q_all / 100)
    delta = [q[c] - g[c] for c in g]
    assert out["m"] == len(g)
    assert out["mean_delta_pp"] == pytest.approx(statistics.fmean(delta))
    assert out["mae_pp"] == pytest.approx(statistics.fmean(abs(d) for d in delta))
    assert out["sd_delta_pp"] == pytest.approx(statistics.pstdev(delta))
    assert out["max_abs_delta_pp"] == pytest.approx(max(abs(d) for d in delta))
    assert out["abs_delta_overall_pp"] == pytest.approx(abs(q_all - g_all), abs=1e-9)
    assert out["pearson_r"] == pytest.approx(pearson(list(g.values()), list(q.values())))
    assert out["delta_pp_by_category"] == pytest.approx(dict(zip(g, delta)))


@pytest.mark.parametrize("case", [LOCOMO, LONGMEMEVAL], ids=["locomo", "longmemeval"])
def test_table10_is_consistent_with_the_paper(case):
    """The paper computed Table 10 from unrounded accuracies; Tables 1/2 show them to 0.1 pp.

    Each true category accuracy is within 0.05 pp of the table, so each true Δ_c is within
    0.1 pp of the Δ from rounded values. Hence mean Δ, MAE, max|Δ| and |Δ_overall| move by at
    most 0.1 pp, and so does the population SD (it is a norm of the centred Δ divided by
    sqrt(m), and the triangle inequality bounds the change by the RMS of the errors). Table 10
    itself is rounded to 3 significant digits (+0.005 at most here). For r there is no simple
    bound, so the test finds the smallest and largest r reachable inside the rounding box
    (bounded optimisation of our table10) and checks that the paper's r lies in between.
    """
    g, g_all, q, q_all, paper = case
    out = table10(_frac(g), _frac(q), g_all / 100, q_all / 100)
    assert out["m"] == paper["m"]
    assert out["max_abs_delta_category"] == paper["max_abs_delta_category"]
    for key in ("mean_delta_pp", "mae_pp", "sd_delta_pp", "max_abs_delta_pp", "abs_delta_overall_pp"):
        assert out[key] == pytest.approx(paper[key], abs=0.1 + 0.005), key

    cats, m = list(g), len(g)
    x0 = np.array([g[c] for c in cats] + [q[c] for c in cats]) / 100
    box = [(v - 0.0005, v + 0.0005) for v in x0]

    def r_of(x: np.ndarray) -> float:
        return table10(dict(zip(cats, x[:m])), dict(zip(cats, x[m:])), 0.5, 0.5)["pearson_r"]

    r_min = minimize(r_of, x0, method="L-BFGS-B", bounds=box).fun
    r_max = -minimize(lambda x: -r_of(x), x0, method="L-BFGS-B", bounds=box).fun
    assert r_min - 0.0005 <= paper["pearson_r"] <= r_max + 0.0005
    assert r_max - r_min < 0.02  # the bracket is tight, so this is a real check
    assert out["pearson_r"] == pytest.approx(paper["pearson_r"], abs=0.002)


def test_table10_small_hand_example():
    # g = 50, 60, 90; q = 60, 50, 90 (pp). Δ = +10, -10, 0: mean 0, MAE 20/3, SD sqrt(200/3).
    # Centred g*3 = (-50, -20, 70), q*3 = (-20, -50, 70): r = (1000+1000+4900)/(2500+400+4900) = 69/78.
    out = table10({"x": 0.5, "y": 0.6, "z": 0.9}, {"x": 0.6, "y": 0.5, "z": 0.9}, 0.70, 0.66)
    assert out["mean_delta_pp"] == pytest.approx(0.0, abs=1e-9)
    assert out["mae_pp"] == pytest.approx(20 / 3)
    assert out["sd_delta_pp"] == pytest.approx(math.sqrt(200 / 3))
    assert out["max_abs_delta_pp"] == pytest.approx(10.0) and out["max_abs_delta_category"] == "x"
    assert out["abs_delta_overall_pp"] == pytest.approx(4.0)
    assert out["pearson_r"] == pytest.approx(69 / 78)


def test_table10_undefined_r_and_bad_inputs():
    assert table10({"a": 0.5}, {"a": 0.6}, 0.5, 0.6)["pearson_r"] is None  # m = 1
    assert table10({"a": 0.5, "b": 0.5}, {"a": 0.6, "b": 0.7}, 0.5, 0.6)["pearson_r"] is None  # constant
    with pytest.raises(ValueError, match="same categories"):
        table10({"a": 0.5}, {"b": 0.5}, 0.5, 0.5)
    with pytest.raises(ValueError, match="not a percentage"):
        table10({"a": 88.7}, {"a": 83.3}, 0.9, 0.9)
    with pytest.raises(ValueError, match="primary_overall"):
        table10({"a": 0.5}, {"a": 0.5}, None, 0.5)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- load_labels
def write_run(run_dir: Path, benchmark: str, golds: list[Gold], judges: dict[str, dict[str, int | None]],
              errors: dict[str, str] | None = None) -> Path:
    """A run directory by hand: config, gold and one judge file per judge (absent qid = no row)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.resolved.yaml").write_text(f"benchmark: {benchmark}\nrun:\n  name: {run_dir.name}\n")
    (run_dir / "01_gold.jsonl").write_text("".join(json.dumps(to_dict(g)) + "\n" for g in golds))
    for name, labels in judges.items():
        rows = [JudgeRow(qid=q, judge=name, judge_model=f"{name}-model", prompt_id="p", label=lab,
                         error=(errors or {}).get(q, "") if lab is None else "") for q, lab in labels.items()]
        (run_dir / f"08_judge_{name}.jsonl").write_text("".join(json.dumps(to_dict(r)) + "\n" for r in rows))
    return run_dir


def locomo_gold(qid: str, category: int) -> Gold:
    return Gold(qid=qid, memory_id="conv-1", answer="x", category=category)


def test_load_labels_locomo_scores_categories_1_to_4_and_keeps_failures(tmp_path):
    golds = [locomo_gold("c:q1", 1), locomo_gold("c:q2", 2), locomo_gold("c:q3", 5),
             locomo_gold("c:q4", 4), locomo_gold("c:q5", 3), locomo_gold("c:q6", 4)]
    run = write_run(tmp_path / "r", "locomo", golds,
                    {"j": {"c:q1": 1, "c:q2": None, "c:q3": 1, "c:q4": 0, "c:q6": None, "stale": 1}},
                    errors={"c:q2": "judge_parse_error: not JSON", "c:q6": ""})
    got = load_labels(run, "j")
    assert got.benchmark == "locomo" and got.judge_models == ("j-model",) and got.n_unknown_rows == 1
    assert [(r.qid, r.category, r.label, r.cause) for r in got.records] == [
        ("c:q1", "multi-hop", 1, ""),
        ("c:q2", "temporal", None, "judge_parse_error"),
        ("c:q4", "single-hop", 0, ""),
        ("c:q5", "open-domain", None, "missing_judgment"),  # no row: a failure, not dropped
        ("c:q6", "single-hop", None, "unknown"),
    ]  # c:q3 is category 5: not scored


def test_load_labels_longmemeval_uses_question_type(tmp_path):
    golds = [Gold(qid="a1", memory_id="m", answer="x", category=0, question_type="multi-session"),
             Gold(qid="a2_abs", memory_id="m", answer="x", category=0, question_type="temporal-reasoning",
                  abstention=True)]
    run = write_run(tmp_path / "r", "longmemeval", golds, {"j": {"a1": 0, "a2_abs": 1}})
    got = load_labels(run, "j")
    assert [(r.qid, r.category, r.label) for r in got.records] == [
        ("a1", "multi-session", 0), ("a2_abs", "temporal-reasoning", 1)]


def test_load_labels_errors_name_the_file(tmp_path):
    run = write_run(tmp_path / "r", "locomo", [locomo_gold("c:q1", 1)], {"j": {"c:q1": 1}})
    with pytest.raises(ArtifactError, match=r"08_judge_other\.jsonl: not found \(judges in this run: j\)"):
        load_labels(run, "other")
    (run / "08_judge_bad.jsonl").write_text(json.dumps({"qid": "c:q1", "label": "CORRECT"}) + "\n")
    with pytest.raises(ArtifactError, match=r"08_judge_bad\.jsonl: row 1 \(c:q1\): label"):
        load_labels(run, "bad")
    (run / "08_judge_dup.jsonl").write_text(2 * (json.dumps({"qid": "c:q1", "label": 1}) + "\n"))
    with pytest.raises(ArtifactError, match="judged twice"):
        load_labels(run, "dup")
    (run / "config.resolved.yaml").write_text("benchmark: hotpotqa\n")
    with pytest.raises(ArtifactError, match=r"config\.resolved\.yaml: benchmark: expected one of locomo, longmemeval"):
        load_labels(run, "j")
    with pytest.raises(ArtifactError, match="config.resolved.yaml: not found"):
        load_labels(tmp_path / "nowhere", "j")
    run2 = write_run(tmp_path / "r2", "locomo", [locomo_gold("c:q1", 1)], {"j": {"c:q1": 1}})
    (run2 / "01_gold.jsonl").write_text(json.dumps({"qid": "c:q1", "colour": "red"}) + "\n")
    with pytest.raises(ArtifactError, match=r"01_gold\.jsonl: row 1: .*colour"):
        load_labels(run2, "j")
    (run2 / "01_gold.jsonl").unlink()
    with pytest.raises(ArtifactError, match="01_gold.jsonl"):
        load_labels(run2, "j")
