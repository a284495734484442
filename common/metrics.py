"""Benchmark metrics as pure functions, with upstream semantics.

* ``locomo_f1``: the official LoCoMo lexical score (snap-research/locomo
  ``task_eval/evaluation.py``), per-category rules included. It is *not* mem0's F1 (set-based,
  no stemming, no article removal); numbers from the two are not comparable.
* ``evidence_recall``: LoCoMo's share of gold evidence turns present in the retrieved context.
* ``accuracy`` / ``grouped_accuracy``: judge-label accuracy that keeps judge failures visible.

The definitions are written from shared/spec/benchmarks.md section 3 and pinned by the worked
values of its section 4 in tests/test_metrics.py.
"""

from __future__ import annotations

import re
import string
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, TypedDict

from nltk.stem import PorterStemmer

# Upstream treats "and" like an article, so "cats and dogs" matches "dogs, cats".
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)
# Category 5 (adversarial) is scored by whether the model refuses, with these exact phrases.
_REFUSALS = ("no information available", "not mentioned")


@lru_cache(maxsize=1)
def _stemmer() -> PorterStemmer:
    # Built lazily so importing this module costs nothing; default mode (NLTK_EXTENSIONS) is
    # what upstream's bare ``PorterStemmer()`` uses.
    return PorterStemmer()


def normalize_answer(text: str) -> str:
    """Normalise a string the way every LoCoMo F1 does before tokenising.

    Order matters and follows upstream: drop ',' (so "1,000" stays one token), lowercase, drop
    ``string.punctuation``, replace a/an/the/and with a space, collapse whitespace.
    """
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def token_f1(prediction: str, gold: str) -> float:
    """Multiset token F1 over normalised, Porter-stemmed tokens (upstream ``f1_score``)."""
    stem = _stemmer().stem
    pred_tokens = [stem(t) for t in normalize_answer(prediction).split()]
    gold_tokens = [stem(t) for t in normalize_answer(gold).split()]
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _multi_answer_f1(prediction: str, gold: str) -> float:
    # Multi-hop golds list several items ("a, b, c"): each gold item earns its best match
    # among the predicted items, and the item scores are averaged (partial credit).
    pred_parts = [p.strip() for p in prediction.split(",")]
    gold_parts = [g.strip() for g in gold.split(",")]
    best = [max(token_f1(p, g) for p in pred_parts) for g in gold_parts]
    return sum(best) / len(best)


def locomo_f1(prediction: str, gold: str, category: int) -> float:
    """Official LoCoMo per-question lexical score.

    Args:
        prediction: The model's answer.
        gold: ``str(answer)`` from the file; ignored for category 5.
        category: LoCoMo category 1-5 (see ``common.benchmarks.locomo.CATEGORY_NAMES``).

    Returns:
        A score in [0, 1]: cat 1 comma-split partial F1; cat 3 F1 against the gold cut at the
        first ';' (the alternatives after it are ignored upstream); cats 2 and 4 plain F1;
        cat 5 1.0 iff the lowercased prediction contains a refusal phrase.

    Raises:
        ValueError: Unknown category.
    """
    if category == 1:
        return _multi_answer_f1(prediction, gold)
    if category in (2, 4):
        return token_f1(prediction, gold)
    if category == 3:
        return token_f1(prediction, gold.split(";")[0].strip())
    if category == 5:
        lowered = prediction.lower()
        return 1.0 if any(phrase in lowered for phrase in _REFUSALS) else 0.0
    raise ValueError(f"unknown LoCoMo category {category!r}; expected 1-5")


def evidence_recall(gold_ids: Sequence[str], retrieved_ids: Iterable[str]) -> float | None:
    """Fraction of gold evidence turn ids present among the retrieved turn ids.

    Retrieved entries may be comma-joined ids ("D1:3,D1:4"), as upstream allows. Only the
    turn-level mode is implemented: the harness never retrieves session summaries ("S..." ids).

    Args:
        gold_ids: Cleaned gold ``dia_id``s (``Gold.evidence``).
        retrieved_ids: ``dia_id``s of every turn in the retrieved context.

    Returns:
        The recall, or None when there is no gold evidence. Upstream scores such questions 1.0;
        None lets the aggregator count and report them instead of inflating the mean.
    """
    if not gold_ids:
        return None
    retrieved = {part.strip() for entry in retrieved_ids for part in entry.split(",")}
    return sum(1 for gid in gold_ids if gid in retrieved) / len(gold_ids)


class AccuracySummary(TypedDict):
    """Accuracy of a list of judge labels, with failures kept visible."""

    k: int  # labels equal to 1
    n: int  # all labels, failures included
    accuracy: float | None  # k / n: a failed judgment counts as wrong (the reported number)
    n_failed: int  # labels that are None (judge call or parse failed)
    accuracy_clean: float | None  # k / (n - n_failed): for diagnosing judge failures only


def accuracy(labels: Iterable[int | None]) -> AccuracySummary:
    """Summarise judge labels (1 correct, 0 wrong, None failed).

    Failures are never dropped from the headline number: dropping them would reward a judge
    or answerer that fails on hard questions. ``accuracy_clean`` is reported beside it.

    Raises:
        ValueError: A label other than 0, 1 or None.
    """
    counts: Counter[int | None] = Counter()
    for label in labels:
        # bool is excluded so that a stray True/False from a parser is caught, not counted.
        if label is not None and (isinstance(label, bool) or label not in (0, 1)):
            raise ValueError(f"judge label must be 0, 1 or None, got {label!r}")
        counts[label] += 1
    k, n_failed = counts[1], counts[None]
    n = k + counts[0] + n_failed
    judged = n - n_failed
    return AccuracySummary(
        k=k,
        n=n,
        accuracy=k / n if n else None,
        n_failed=n_failed,
        accuracy_clean=k / judged if judged else None,
    )


def grouped_accuracy(
    rows: Iterable[Mapping[str, Any]], key: str, label_key: str = "label"
) -> dict[Any, AccuracySummary]:
    """``accuracy`` per group, e.g. per LoCoMo category or LongMemEval question type.

    Args:
        rows: Mappings holding a group value under ``key`` and a label under ``label_key``
            (e.g. judge rows joined with their gold category).
        key: Name of the grouping field.
        label_key: Name of the label field.

    Returns:
        Group value -> summary, sorted by group value so that tables are deterministic.
    """
    groups: defaultdict[Any, list[int | None]] = defaultdict(list)
    for row in rows:
        groups[row[key]].append(row[label_key])
    return {group: accuracy(groups[group]) for group in sorted(groups)}
