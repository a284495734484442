"""The cluster bootstrap, the design effect and the power note (common.evaluation.stats), and where
they appear: metrics.json (through 09_aggregate's code) and ``make compare``.

Known answers are derived here: the ANOVA intraclass correlation and the minimum detectable
difference by hand with ``math`` and ``statistics.NormalDist`` (not statsmodels), and the interval
widths from synthetic label sets whose cluster structure is known by construction.
"""
from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from common.core.schema import Gold
from common.evaluation import scoring
from common.evaluation.scoring import judge_block
from common.evaluation.stats import (
    accuracy_with_ci,
    bootstrap_ci,
    cluster_bootstrap_ci,
    design_effect,
    minimum_detectable_difference,
    paired_difference_ci,
    paired_difference_cluster_ci,
    power_note,
)
from common.report.compare import main as compare_main
from tests.test_stats import write_run


def correlated_set(n_clusters: int = 20, size: int = 20, seed: int = 3) -> tuple[list[int], list[str]]:
    """Clusters whose questions share one success rate drawn per cluster (0.1 or 0.9): strongly correlated."""
    rng = np.random.default_rng(seed)
    labels, clusters = [], []
    for c in range(n_clusters):
        p = 0.9 if c % 2 else 0.1
        labels += [int(x) for x in rng.random(size) < p]
        clusters += [f"conv-{c}"] * size
    return labels, clusters


def width(ci: tuple) -> float:
    return ci[1] - ci[0]


# ----------------------------------------------------------------------------- bootstrap
def test_correlated_clusters_make_the_clustered_ci_wider():
    labels, clusters = correlated_set()
    q, c = bootstrap_ci(labels), cluster_bootstrap_ci(labels, clusters)
    p = sum(labels) / len(labels)
    assert q[0] <= p <= q[1] and c[0] <= p <= c[1]
    # Between-cluster variance dominates: an ICC near (0.8^2 / 4) / (0.25) ~ 0.7 and clusters of 20
    # give a design effect near 14, so the clustered interval is several times wider (sqrt(14) ~ 3.7).
    assert width(c) > 2.5 * width(q)
    assert cluster_bootstrap_ci(labels, clusters) == c  # seeded
    deff = design_effect(labels, clusters)
    assert deff["icc"] > 0.5 and deff["design_effect"] > 10


def test_independent_clusters_of_size_one_agree_with_the_question_bootstrap():
    rng = np.random.default_rng(11)
    labels = [int(x) for x in rng.random(300) < 0.65]
    clusters = [f"haystack-{i}" for i in range(300)]  # LongMemEval: one question per haystack
    q, c = bootstrap_ci(labels), cluster_bootstrap_ci(labels, clusters)
    assert c[0] == pytest.approx(q[0], abs=0.01) and c[1] == pytest.approx(q[1], abs=0.01)
    assert design_effect(labels, clusters)["design_effect"] == 1.0


def test_independent_labels_in_real_clusters_give_about_the_same_width():
    """Clusters that carry no correlation: the cluster bootstrap must not invent width."""
    rng = np.random.default_rng(5)
    labels = [int(x) for x in rng.random(600) < 0.7]
    # 150 clusters of 4: enough clusters that the between-cluster variance is estimated within ~10%.
    clusters = [f"conv-{i // 4}" for i in range(600)]
    q, c = bootstrap_ci(labels), cluster_bootstrap_ci(labels, clusters)
    assert 0.8 < width(c) / width(q) < 1.2


def test_paired_clustered_difference_is_wider_when_differences_cluster():
    # B beats A on every question of half the conversations and loses on every question of the others
    # (plus a small edge): the per-question differences are perfectly correlated within a conversation.
    a, b, clusters = [], [], []
    for c in range(12):
        for i in range(15):
            a.append(0 if c % 2 else 1)
            b.append(1 if c % 2 or i == 0 else 0)
            clusters.append(f"conv-{c}")
    q, cl = paired_difference_ci(a, b), paired_difference_cluster_ci(a, b, clusters)
    assert width(cl) > 2 * width(q)
    assert paired_difference_cluster_ci(a, a, clusters) == (0.0, 0.0)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_difference_cluster_ci([1, 0], [1], ["x", "y"])


def test_cluster_bootstrap_degenerate_inputs():
    assert cluster_bootstrap_ci([], []) == (None, None)
    assert cluster_bootstrap_ci([1, 0, 1], ["c", "c", "c"]) == (None, None)  # one cluster: no spread to measure
    assert cluster_bootstrap_ci([1, 1, 1, 1], ["a", "a", "b", "b"]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="one cluster per label"):
        cluster_bootstrap_ci([1, 0], ["a"])
    with pytest.raises(ValueError, match="labels must be 0 or 1"):
        cluster_bootstrap_ci([1, None], ["a", "b"])  # type: ignore[list-item]


# ----------------------------------------------------------------------------- design effect and power
def test_design_effect_by_hand():
    # Clusters [1,1] [0,0] [1,0]: grand mean 1/2; MSB = (2*.25 + 2*.25 + 0) / 2 = 0.5;
    # MSW = (0 + 0 + 0.5) / (6 - 3) = 1/6; m0 = (6 - 12/6) / 2 = 2;
    # ICC = (0.5 - 1/6) / (0.5 + 1/6) = 0.5; deff = 1 + (12/6 - 1) * 0.5 = 1.5.
    d = design_effect([1, 1, 0, 0, 1, 0], ["a", "a", "b", "b", "c", "c"])
    assert d["icc"] == pytest.approx(0.5) and d["design_effect"] == pytest.approx(1.5)
    assert (d["n"], d["n_clusters"], d["mean_cluster_size"]) == (6, 3, 2.0)
    # Unequal sizes [1,1,1] [0]: cluster means 1 and 0, grand mean 3/4;
    # MSB = 3*(1/4)^2 + 1*(3/4)^2 = 0.75; MSW = 0; ICC = 1; sum n_c^2 / N = 10/4; deff = 2.5.
    u = design_effect([1, 1, 1, 0], ["a", "a", "a", "b"])
    assert u["icc"] == pytest.approx(1.0) and u["design_effect"] == pytest.approx(2.5)
    # A negative estimate (clusters more alike across than within) is read as no clustering.
    assert design_effect([1, 0, 1, 0], ["a", "a", "b", "b"])["design_effect"] == 1.0


def hand_mdd(p: float, n_eff: float, alpha: float = 0.05, power: float = 0.8) -> float:
    z = NormalDist().inv_cdf
    h = (z(1 - alpha / 2) + z(power)) * math.sqrt(2 / n_eff)
    phi = math.asin(math.sqrt(p))
    return abs(p - math.sin(phi - h / 2 if p >= 0.5 else phi + h / 2) ** 2)


def test_minimum_detectable_difference_against_a_hand_computed_value():
    # p = 0.5, n = 100: h = (1.959964 + 0.841621) * sqrt(2/100) = 0.396203; the rate 0.5 moves to
    # sin^2(pi/4 - 0.198101) = 0.307040, a difference of 0.192960.
    assert minimum_detectable_difference(0.5, 100) == pytest.approx(0.192960, abs=1e-5)
    assert minimum_detectable_difference(0.5, 100) == pytest.approx(hand_mdd(0.5, 100), abs=1e-6)
    # A design effect of 2 halves the effective n.
    assert minimum_detectable_difference(0.8, 300, design_effect=2.0) == pytest.approx(hand_mdd(0.8, 150), abs=1e-6)
    assert minimum_detectable_difference(0.2, 300) == pytest.approx(hand_mdd(0.2, 300), abs=1e-6)
    # Defined at the boundary, and smaller than in the middle (a rate near 1 is pinned down faster).
    assert 0 < minimum_detectable_difference(1.0, 100) < minimum_detectable_difference(0.5, 100)
    assert minimum_detectable_difference(0.5, 3) is None  # no rate in [0, 1] is far enough away
    assert minimum_detectable_difference(None, 10) is None and minimum_detectable_difference(0.5, 0) is None


def test_power_note_uses_the_design_effect_of_its_clusters():
    labels, clusters = correlated_set()
    note = power_note(labels, clusters)
    deff = design_effect(labels, clusters)["design_effect"]
    assert note["design_effect"] == pytest.approx(deff) and note["n_effective"] == pytest.approx(400 / deff)
    assert note["mdd"] == pytest.approx(hand_mdd(sum(labels) / 400, 400 / deff), abs=1e-6)
    assert power_note(labels, None)["mdd"] == pytest.approx(hand_mdd(sum(labels) / 400, 400), abs=1e-6)


# ----------------------------------------------------------------------------- where they appear
def test_accuracy_with_ci_adds_cluster_cis_and_power_only_with_clusters():
    labels, clusters = correlated_set()
    labels[0] = None  # type: ignore[call-overload]  # a failure: strict counts it wrong, clean drops it
    plain = accuracy_with_ci(labels)
    assert "ci_cluster" not in plain and "power" not in plain
    out = accuracy_with_ci(labels, clusters=clusters)
    assert out["ci"] == plain["ci"]  # the question bootstrap is unchanged
    strict = [0 if v is None else v for v in labels]
    assert (out["ci_cluster"]["low"], out["ci_cluster"]["high"]) == cluster_bootstrap_ci(strict, clusters)
    assert (out["ci_cluster_clean"]["low"], out["ci_cluster_clean"]["high"]) == cluster_bootstrap_ci(
        labels[1:], clusters[1:])
    assert out["ci_cluster"]["n_clusters"] == 20 and out["ci_cluster"]["seed"] == 42
    assert out["power"]["mdd"] == power_note(strict, clusters)["mdd"]
    json.dumps(out)
    with pytest.raises(ValueError, match="one cluster per label"):
        accuracy_with_ci([1, 0], clusters=["a"])


def test_metrics_blocks_carry_the_clustered_cis_per_group():
    labels, clusters = correlated_set(10, 10)
    joined = [{"cat": "multi-hop" if i % 2 else "temporal", "label": lab, "cause": "", "cluster": c}
              for i, (lab, c) in enumerate(zip(labels, clusters))]
    block = judge_block(joined, "cat")
    assert block["overall"]["ci_cluster"]["n_clusters"] == 10
    temporal = [r for r in joined if r["cat"] == "temporal"]
    got = block["by_group"]["temporal"]["ci_cluster"]
    assert (got["low"], got["high"]) == cluster_bootstrap_ci([r["label"] for r in temporal],
                                                              [r["cluster"] for r in temporal])
    assert "ci_cluster" not in judge_block([{k: v for k, v in r.items() if k != "cluster"} for r in joined],
                                           "cat")["overall"]


def test_locomo_aggregate_clusters_by_conversation(tmp_path):
    """09_aggregate's LoCoMo code: metrics.json has clustered CIs with one cluster per conversation."""
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    qids = [f"conv-{i % 3}:q{i:04d}" for i in range(len(LOCOMO_MAIN))]
    d = make_run(tmp_path / "results", "locomo", "paper", LOCOMO_MAIN, {PRIMARY: [x[1] for x in LOCOMO_MAIN]},
                 qids=qids)
    m = json.loads((d / "metrics.json").read_text())["judges"][PRIMARY]
    assert m["overall"]["ci_cluster"]["n_clusters"] == 3
    assert m["overall"]["power"]["n"] == m["overall"]["n"] and m["overall"]["power"]["mdd"] is not None


def _compare_runs(tmp_path):
    golds, a, b = [], {}, {}
    for c in range(8):
        for i in range(10):
            q = f"conv-{c}:q{i}"
            golds.append(Gold(qid=q, memory_id=f"conv-{c}", answer="x", category=1 + i % 4))
            a[q] = 0 if c % 2 else 1
            b[q] = 1 if c % 2 or i == 0 else 0
    return (write_run(tmp_path / "locomo" / "a", "locomo", golds, {"gpt": a}),
            write_run(tmp_path / "locomo" / "b", "locomo", golds, {"gpt": b}), a, b, golds)


def test_compare_reports_the_paired_clustered_difference_and_the_mdd(tmp_path, capsys):
    run_a, run_b, a, b, golds = _compare_runs(tmp_path)
    out_json = tmp_path / "cmp.json"
    assert compare_main([str(run_a), str(run_b), "--json", str(out_json)]) == 0
    printed = capsys.readouterr().out
    overall = json.loads(out_json.read_text())["rows"][-1]
    qids = sorted(a)
    clusters = [q.split(":")[0] for q in qids]
    expect = paired_difference_cluster_ci([a[q] for q in qids], [b[q] for q in qids], clusters)
    got = overall["difference_ci_cluster"]
    assert (got["low"], got["high"], got["n_clusters"]) == (*expect, 8)
    assert width(expect) > 2 * (overall["difference_ci"]["high"] - overall["difference_ci"]["low"])
    assert overall["a"]["ci_cluster"]["n_clusters"] == 8
    assert overall["power"]["mdd"] == pytest.approx(power_note([a[q] for q in qids], clusters)["mdd"])
    assert "B-A clustered CI (clusters)" in printed and "MDD pp (deff)" in printed and "; cl " in printed
    assert f"[{100 * expect[0]:+.1f}, {100 * expect[1]:+.1f}] (8)" in printed


def test_clustered_accuracy_of_a_run_directory(tmp_path):
    from common.evaluation.labels import clustered_accuracy, load_labels

    run_a, _, a, _, _ = _compare_runs(tmp_path)
    run = load_labels(run_a, "gpt")
    qids = [r.qid for r in run.records]
    out = clustered_accuracy(run)
    assert (out["k"], out["n"]) == (sum(a.values()), 80)
    expect = cluster_bootstrap_ci([a[q] for q in qids], [q.split(":")[0] for q in qids])
    assert (out["ci_cluster"]["low"], out["ci_cluster"]["high"]) == expect and out["ci_cluster"]["n_clusters"] == 8
    multi = clustered_accuracy(run, "multi-hop", n_resamples=2000)
    # Category 1 (multi-hop) where i % 4 == 0: 3 questions in each of the 8 conversations.
    assert multi["n"] == 24 and multi["ci_cluster"]["n_resamples"] == 2000


def test_the_line_under_table_judge_names_the_clustered_ci_and_the_power(tmp_path):
    from tests.test_tables import LOCOMO_MAIN, PRIMARY, make_run

    qids = [f"conv-{i % 3}:q{i:04d}" for i in range(len(LOCOMO_MAIN))]
    d = make_run(tmp_path / "results", "locomo", "paper", LOCOMO_MAIN, {PRIMARY: [x[1] for x in LOCOMO_MAIN]},
                 qids=qids)
    metrics = json.loads((d / "metrics.json").read_text())
    o = metrics["judges"][PRIMARY]["overall"]
    line = scoring.score_note(metrics, PRIMARY)
    assert (f"clustered by memory (3 clusters) [{100 * o['ci_cluster']['low']:.1f}, "
            f"{100 * o['ci_cluster']['high']:.1f}]") in line
    assert f"smallest separable difference {100 * o['power']['mdd']:.1f} pp" in line
