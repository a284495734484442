"""Metric definitions pinned by the worked values of shared/spec/benchmarks.md section 4."""

from __future__ import annotations

import pytest

from common.evaluation.metrics import (
    accuracy,
    evidence_recall,
    grouped_accuracy,
    locomo_f1,
    normalize_answer,
    token_f1,
)


@pytest.mark.parametrize(
    ("prediction", "gold", "category", "expected"),
    [
        ("Adoption agencies", "adoption agencies", 4, 1.0),
        # Stemming makes "researching" irrelevant but "adoption"/"agencies" match.
        ("researching adoption agencies", "Adoption agencies", 4, 0.8),
        # "and" is removed like an article, ',' is deleted, and F1 ignores order.
        ("cats and dogs", "dogs, cats", 4, 1.0),
        ("On 7 May, 2023", "7 May 2023", 2, 0.8571),
        # Multi-hop: per gold item the best predicted item, then the mean.
        ("psychology, counseling", "Psychology, counseling certification", 1, 0.8333),
        ("counseling certification", "Psychology, counseling certification", 1, 0.5),
    ],
)
def test_locomo_f1_worked_values(
    prediction: str, gold: str, category: int, expected: float
) -> None:
    assert locomo_f1(prediction, gold, category) == pytest.approx(expected, abs=1e-4)


def test_normalize_answer_follows_upstream_order() -> None:
    # ',' goes first so digit groups stay one token; then punctuation and articles.
    assert normalize_answer("The cat, a dog AND 1,000 (an) owl!") == "cat dog 1000 owl"


def test_token_f1_is_multiset_and_zero_without_overlap() -> None:
    # Counter intersection: a repeated gold token only matches as often as it occurs.
    assert token_f1("red red", "red blue") == pytest.approx(0.5)
    assert token_f1("", "anything") == 0.0
    assert token_f1("the", "a") == 0.0  # both normalise to nothing


def test_category_3_uses_first_alternative_only() -> None:
    assert locomo_f1("Paris", "Paris; London", 3) == 1.0
    assert locomo_f1("London", "Paris; London", 3) == 0.0


def test_category_5_is_refusal_substring() -> None:
    assert locomo_f1("That is Not Mentioned in the conversation.", "", 5) == 1.0
    assert locomo_f1("No information available", "Yes", 5) == 1.0
    # The distractor is never gold: repeating it scores 0.
    assert locomo_f1("Yes", "Yes", 5) == 0.0


def test_unknown_category_raises() -> None:
    with pytest.raises(ValueError, match="category"):
        locomo_f1("a", "b", 6)


def test_evidence_recall() -> None:
    assert evidence_recall([], ["D1:1"]) is None
    assert evidence_recall(["D1:1", "D2:3"], ["D1:1", "D1:2"]) == 0.5
    assert evidence_recall(["D1:1", "D2:3"], ["D1:1, D2:3"]) == 1.0  # comma-joined entries
    assert evidence_recall(["D1:1"], []) == 0.0


def test_accuracy_counts_failures_as_wrong() -> None:
    summary = accuracy([1, 1, 0, None])
    assert summary == {
        "k": 2,
        "n": 4,
        "accuracy": 0.5,
        "n_failed": 1,
        "accuracy_clean": pytest.approx(2 / 3),
    }


def test_accuracy_edge_cases() -> None:
    assert accuracy([])["accuracy"] is None
    only_failures = accuracy([None, None])
    assert only_failures["accuracy"] == 0.0 and only_failures["accuracy_clean"] is None
    with pytest.raises(ValueError, match="label"):
        accuracy([2])
    with pytest.raises(ValueError, match="label"):
        accuracy([True])  # a parser returning bools must be caught, not counted


def test_grouped_accuracy_sorted_by_group() -> None:
    rows: list[dict[str, int | None]] = [
        {"category": 4, "label": 1},
        {"category": 1, "label": 0},
        {"category": 4, "label": None},
        {"category": 1, "label": 1},
    ]
    grouped = grouped_accuracy(rows, "category")
    assert list(grouped) == [1, 4]
    assert grouped[1]["accuracy"] == 0.5
    assert grouped[4]["n_failed"] == 1 and grouped[4]["accuracy"] == 0.5
