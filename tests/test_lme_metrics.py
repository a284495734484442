"""LongMemEval retrieval metrics, pinned by the worked values of shared/spec/benchmarks.md section 4."""

from __future__ import annotations

import math

import pytest

from common.evaluation.metrics import (
    LME_KS,
    longmemeval_retrieval_metrics,
    ndcg_any_at_k,
    recall_all_at_k,
    recall_any_at_k,
    retrieval_skip_reason,
    turn_session_id,
    turn_to_session_ranking,
)

CORPUS = ["s1", "answer_x", "s3", "answer_y"]
RANKED = [CORPUS[i] for i in (1, 0, 3, 2)]  # ranking [1, 0, 3, 2]
CORRECT = {"answer_x", "answer_y"}


def test_worked_example_at_1() -> None:
    assert recall_any_at_k(RANKED, CORRECT, 1) == 1.0
    assert recall_all_at_k(RANKED, CORRECT, 1) == 0.0
    assert ndcg_any_at_k(RANKED, CORRECT, 1, CORPUS) == 1.0


def test_worked_example_at_3() -> None:
    assert recall_any_at_k(RANKED, CORRECT, 3) == 1.0
    assert recall_all_at_k(RANKED, CORRECT, 3) == 1.0
    assert ndcg_any_at_k(RANKED, CORRECT, 3, CORPUS) == pytest.approx(0.8155, abs=1e-4)
    # Standard nDCG would give 0.9197; the upstream variant leaves rank 2 undiscounted.
    standard = (1 + 1 / math.log2(4)) / (1 + 1 / math.log2(3))
    assert standard == pytest.approx(0.9197, abs=1e-4)


@pytest.mark.parametrize(("rank", "expected"), [(1, 1.0), (2, 1.0), (3, 0.6309)])
def test_single_relevant_ndcg_at_3(rank: int, expected: float) -> None:
    ranked = ["a", "b", "c", "d"]
    assert ndcg_any_at_k(ranked, {ranked[rank - 1]}, 3, ranked) == pytest.approx(expected, abs=1e-4)
    # Without a corpus the correct set is taken as the relevant corpus entries.
    assert ndcg_any_at_k(ranked, {ranked[rank - 1]}, 3) == pytest.approx(expected, abs=1e-4)


def test_ndcg_edge_cases() -> None:
    assert ndcg_any_at_k(["a", "b"], set(), 3, ["a", "b"]) == 0.0  # IDCG 0
    assert ndcg_any_at_k([], {"a"}, 3, ["a", "b"]) == 0.0  # nothing retrieved
    # Short ranked lists: missing positions count as misses, the ideal still uses the corpus.
    assert ndcg_any_at_k(["x"], {"a", "b"}, 5, ["a", "b", "x"]) == 0.0
    assert ndcg_any_at_k(["a"], {"a", "b"}, 5, ["a", "b", "x"]) == pytest.approx(0.5)
    # Repeated relevant corpus entries raise the ideal (turn->session mode).
    assert ndcg_any_at_k(["s", "t"], {"s"}, 2, ["s", "s", "t"]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="k must be"):
        ndcg_any_at_k(RANKED, CORRECT, 0)


def test_recall_edge_cases() -> None:
    assert recall_any_at_k(["a"], set(), 1) == 0.0
    assert recall_all_at_k(["a"], set(), 1) == 1.0  # vacuous, as upstream; skipped anyway
    assert recall_all_at_k(["a", "b"], ["a", "b"], 50) == 1.0  # k beyond the list is fine
    with pytest.raises(ValueError):
        recall_any_at_k(["a"], {"a"}, -1)


def test_turn_session_id() -> None:
    assert turn_session_id("answer_280352e9_5") == "answer_280352e9"
    assert turn_session_id("sharegpt_yywfIrx_0_12") == "sharegpt_yywfIrx_0"  # only the last suffix


def test_turn_to_session_widening() -> None:
    turns = ["s1_1", "s1_3", "s2_1", "s1_5", "s3_2", "s4_1"]
    assert turn_to_session_ranking(turns, 1) == ["s1"]
    # The first 2 turns cover one session: widen to 3 turns.
    assert turn_to_session_ranking(turns, 2) == ["s1", "s1", "s2"]
    assert turn_to_session_ranking(turns, 3) == ["s1", "s1", "s2", "s1", "s3"]
    # The list ends before k distinct sessions: everything is returned.
    assert turn_to_session_ranking(turns, 10) == ["s1", "s1", "s2", "s1", "s3", "s4"]
    assert turn_to_session_ranking(["s1_1", "s1_2"], 2) == ["s1", "s1"]
    assert turn_to_session_ranking([], 3) == []


def test_skip_reason() -> None:
    assert retrieval_skip_reason(True, 3) == "abstention"
    assert retrieval_skip_reason(True, 0) == "abstention"
    assert retrieval_skip_reason(False, 0) == "no_user_has_answer"
    assert retrieval_skip_reason(False, 1) is None


def test_full_metrics_dict() -> None:
    corpus_sessions = ["s1", "answer_a", "s2", "answer_b"]
    # User turns only; answer_a has a flagged user turn (_3) and an unflagged one (_1).
    corpus_turns = ["s1_1", "answer_a_1", "answer_a_3", "s2_1", "s2_3", "answer_b_1"]
    relevant_turns = ["answer_a_3", "answer_b_1"]
    out = longmemeval_retrieval_metrics(
        ranked_session_ids=["answer_a", "s1", "answer_b", "s2"],
        ranked_turn_ids=["answer_a_1", "s1_1", "answer_a_3", "answer_b_1"],
        corpus_session_ids=corpus_sessions,
        relevant_sessions=["answer_a", "answer_b"],
        corpus_turn_ids=corpus_turns,
        relevant_turns=relevant_turns,
    )
    assert set(out) == {"session", "turn", "turn_as_session"}
    for level in out.values():
        assert set(level) == {f"{m}@{k}" for m in ("recall_any", "recall_all", "ndcg_any") for k in LME_KS}
    assert out["session"]["recall_any@1"] == 1.0 and out["session"]["recall_all@1"] == 0.0
    assert out["session"]["ndcg_any@3"] == pytest.approx(0.8155, abs=1e-4)
    assert out["turn"]["recall_any@1"] == 0.0  # answer_a_1 carries no has_answer
    assert out["turn"]["recall_any@3"] == 1.0 and out["turn"]["recall_all@3"] == 0.0
    assert out["turn"]["recall_all@5"] == 1.0
    # Turn->session: answer_a_1 is not relevant, and (as upstream's answer->noans renaming) it
    # counts as a session of its own, so @1 covers [noans(answer_a)] and @2 needs 2 turns.
    tas = out["turn_as_session"]
    assert tas["recall_any@1"] == 0.0 and tas["ndcg_any@1"] == 0.0
    assert tas["recall_any@3"] == 1.0 and tas["recall_all@3"] == 0.0
    # @3 covers [noans(a), s1, answer_a]: DCG = 1/log2(3); IDCG (2 relevant turns) = 1 + 1.
    assert tas["ndcg_any@3"] == pytest.approx((1 / math.log2(3)) / 2)
    assert tas["recall_all@50"] == 1.0


def test_turn_as_session_matches_upstream_on_single_answer_session() -> None:
    # Real-item shape: one answer session, its flagged user turn ranked 2nd.
    out = longmemeval_retrieval_metrics(
        ranked_session_ids=["answer_z"],
        ranked_turn_ids=["f_1", "answer_z_5", "answer_z_1"],
        corpus_session_ids=["f", "answer_z"],
        relevant_sessions=["answer_z"],
        corpus_turn_ids=["f_1", "answer_z_1", "answer_z_5"],
        relevant_turns=["answer_z_5"],
        ks=(1, 3),
    )
    assert out["session"] == {
        "recall_any@1": 1.0, "recall_all@1": 1.0, "ndcg_any@1": 1.0,
        "recall_any@3": 1.0, "recall_all@3": 1.0, "ndcg_any@3": 1.0,
    }
    assert out["turn"]["ndcg_any@3"] == 1.0  # rank 2 is undiscounted
    assert out["turn_as_session"]["recall_any@1"] == 0.0
    assert out["turn_as_session"]["ndcg_any@3"] == 1.0
