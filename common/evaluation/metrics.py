"""Benchmark metrics as pure functions, with upstream semantics.

* ``locomo_f1``: the official LoCoMo lexical score (snap-research/locomo
  ``task_eval/evaluation.py``), per-category rules included. It is *not* mem0's F1 (set-based,
  no stemming, no article removal); numbers from the two are not comparable.
* ``evidence_recall``: LoCoMo's share of gold evidence turns present in the retrieved context;
  ``gold_evidence_recall`` the same over any benchmark's ``Gold.evidence`` (BEAM's source_chat_ids).
* ``accuracy`` / ``grouped_accuracy``: judge-label accuracy that keeps judge failures visible.

The definitions are written from shared/spec/benchmarks.md section 3 and pinned by the worked
values of its section 4 in tests/test_metrics.py.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

import numpy as np
import regex

from common.core.tabular import describe

if TYPE_CHECKING:
    from nltk.stem import PorterStemmer

# Upstream treats "and" like an article, so "cats and dogs" matches "dogs, cats". Compiled with
# the third-party ``regex`` module, as upstream does: its word boundaries differ from ``re``'s
# next to combining marks (part of a word in ``regex``), superscripts and vulgar fractions (not
# part of a word in ``regex``), so "the½" loses its article only with ``regex``.
_ARTICLES = regex.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)
# Category 5 (adversarial) is scored by whether the model refuses, with these exact phrases.
_REFUSALS = ("no information available", "not mentioned")


@lru_cache(maxsize=1)
def _stemmer() -> PorterStemmer:
    # Imported and built lazily: importing nltk loads all of it (scipy.stats included, ~2 s), and
    # every stage process imports this module through the engine, while only 09 computes F1.
    # The default mode (NLTK_EXTENSIONS) is what upstream's bare ``PorterStemmer()`` uses.
    from nltk.stem import PorterStemmer

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
    # numpy's mean, as upstream: its pairwise sum differs from sum() in the last bit from 8 parts on.
    return float(np.mean(best))


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


def evidence_recall_official(raw_evidence: Sequence[str], retrieved_ids: Iterable[str]) -> float:
    """LoCoMo's per-question evidence recall exactly as upstream ``eval_question_answering`` scores it.

    Differences from ``evidence_recall`` (the harness's cleaned variant): a question without
    gold evidence scores 1.0 (it stays in the mean), and the gold entries are the file's raw
    ``evidence`` strings, compared as they are (a malformed entry such as "D8:6; D9:17" never
    matches). Retrieved entries that hold comma-joined ids are split, as upstream's RAG context
    builder does. Turn-level mode only (the harness never retrieves "S..." session summaries).
    """
    if len(raw_evidence) == 0:
        return 1.0
    retrieved = {part.strip() for entry in retrieved_ids for part in entry.split(",")}
    return sum(1 for ev in raw_evidence if ev in retrieved) / len(raw_evidence)


class GoldEvidence(Protocol):
    """What ``gold_evidence_recall`` reads of a gold row (``common.core.schema.Gold`` has it)."""

    qid: str
    evidence: list[str]


def gold_evidence_recall(golds: Iterable[GoldEvidence], retrieved: Mapping[str, Iterable[str]],
                         group: Callable[[Any], str]) -> dict[str, Any]:
    """Evidence recall of any benchmark whose gold rows list evidence turn ids (``Gold.evidence``).

    Per question ``evidence_recall(gold.evidence, retrieved[qid])``; a question without gold
    evidence is left out of the mean and counted in ``no_gold_evidence``; a question with
    evidence but no retrieval row (a stage that did not finish) counts 0 and is counted in
    ``missing_retrieval``, never dropped. ``group`` names a row's column (a LoCoMo category, a
    BEAM ability). Sums and counts stand beside every mean.
    """
    values: dict[str, list[float]] = defaultdict(list)
    empty: Counter[str] = Counter()
    missing = 0
    for g in golds:
        col = group(g)
        if not g.evidence:
            empty[col] += 1
            continue
        ids = retrieved.get(g.qid)
        if ids is None:
            missing += 1
        recall = evidence_recall(g.evidence, ids or [])
        values[col].append(0.0 if recall is None else recall)

    def summary(vals: list[float], no_evidence: int) -> dict[str, Any]:
        return {"recall": sum(vals) / len(vals) if vals else None, "sum": sum(vals), "n": len(vals),
                "no_gold_evidence": no_evidence}

    every = [v for vals in values.values() for v in vals]
    return {**summary(every, sum(empty.values())), "missing_retrieval": missing,
            "by_category": {c: summary(values.get(c, []), empty[c]) for c in sorted(set(values) | set(empty))}}


OFFICIAL_RECALL_DECIMALS = 3  # upstream evaluate_qa stores each question's recall as round(recall, 3)


def official_recall_sum(rows: Sequence[Mapping[str, Any]]) -> float | None:
    """Upstream ``evaluation_stats.analyze_aggr_acc`` (rag=True) over ``rows``: the stored
    per-question recalls (rounded to 3 decimals) summed over questions WITH evidence, divided by
    ALL the questions (a question without evidence adds 0 to the sum and 1 to the count)."""
    if not rows:
        return None
    total = sum(round(r["official"], OFFICIAL_RECALL_DECIMALS) for r in rows if r["raw_n"] > 0)
    return total / len(rows)


def evidence_recall_summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The evidence recalls of a run, under names that say which is which.

    Each row holds ``cat`` (category name), ``scored`` (True for the categories the accuracy
    table scores), ``raw_n`` (number of raw evidence entries), ``official``
    (``evidence_recall_official``, the per-question value) and ``cleaned`` (``evidence_recall``,
    None without gold evidence).

    * ``evidence_recall_official``: what the official pipeline prints
      (``evaluation_stats.analyze_aggr_acc`` after ``evaluate_qa``): per category and overall,
      every question the official script scores (all categories, 5 included) in the denominator;
      the numerator sums the per-question values rounded to 3 decimals over the questions WITH
      evidence, so the 4 LoCoMo questions without evidence (category 3) count 0
      (``no_gold_evidence_counted_0``). Overall = the sum over all categories / all questions.
    * ``evidence_recall_mean``: the plain mean of the per-question values, a question without
      evidence counting 1.0 (what ``eval_question_answering`` returns for it), unrounded.
    * ``evidence_recall_cleaned``: the harness's variant over the scored categories, questions
      without gold evidence left out of the mean and counted in ``no_gold_evidence``.
    """
    rows = list(rows)

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    cats = sorted({r["cat"] for r in rows})
    have = [r for r in rows if r["scored"] and r["cleaned"] is not None]
    no_evidence = sum(1 for r in rows if r["raw_n"] == 0)
    return {
        "evidence_recall_official": {
            "overall": official_recall_sum(rows), "n": len(rows), "no_gold_evidence_counted_0": no_evidence,
            "by_category": {c: official_recall_sum([r for r in rows if r["cat"] == c]) for c in cats},
        },
        "evidence_recall_mean": {
            "overall": mean([r["official"] for r in rows]), "n": len(rows),
            "no_gold_evidence_scored_1": no_evidence,
            "by_category": {c: mean([r["official"] for r in rows if r["cat"] == c]) for c in cats},
        },
        "evidence_recall_cleaned": {
            "overall": mean([r["cleaned"] for r in have]), "n": len(have),
            "no_gold_evidence": sum(1 for r in rows if r["scored"] and r["cleaned"] is None),
            "by_category": {c: mean([r["cleaned"] for r in have if r["cat"] == c])
                            for c in sorted({r["cat"] for r in have})},
        },
    }


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


# ----------------------------------------------------------------------------- LongMemEval retrieval
# Official definitions (xiaowu0162/LongMemEval src/retrieval/eval_utils.py and run_retrieval.py,
# summarised in shared/spec/benchmarks.md section 3.2). Upstream ranks every corpus entry; our
# retrievers may return fewer, and an entry that was not returned simply counts as not retrieved.

LME_KS: tuple[int, ...] = (1, 3, 5, 10, 30, 50)
# Turn ids are "<session_id>_<j>"; the turn->session mapping drops this last suffix.
_TURN_SUFFIX = re.compile(r"_\d+$")
# Internal prefix for non-relevant turns of a session that has relevant turns. Upstream renames
# them answer->noans, so they map to a *different* session id than the relevant turns do.
_NOANS = "noans::"


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")


def recall_any_at_k(ranked_ids: Sequence[str], correct_ids: Iterable[str], k: int) -> float:
    """1.0 if any correct id is among the first ``k`` ranked ids, else 0.0 (0.0 if none are correct)."""
    _check_k(k)
    top = set(ranked_ids[:k])
    return float(any(c in top for c in set(correct_ids)))


def recall_all_at_k(ranked_ids: Sequence[str], correct_ids: Iterable[str], k: int) -> float:
    """1.0 if every correct id is among the first ``k`` ranked ids, else 0.0.

    As upstream (``all`` over the correct ids) an empty correct set gives 1.0; such questions
    are skipped by ``retrieval_skip_reason`` before averaging.
    """
    _check_k(k)
    top = set(ranked_ids[:k])
    return float(all(c in top for c in set(correct_ids)))


def _lme_dcg(relevances: Sequence[float]) -> float:
    # Upstream's variant: rank 1 undiscounted, rank i >= 2 divided by log2(i), so ranks 1 and 2
    # both count fully (standard DCG divides rank i by log2(i + 1)).
    return sum(rel if i == 1 else rel / math.log2(i) for i, rel in enumerate(relevances, start=1))


def ndcg_any_at_k(
    ranked_ids: Sequence[str],
    correct_ids: Iterable[str],
    k: int,
    corpus_ids: Sequence[str] | None = None,
) -> float:
    """Official LongMemEval ``ndcg_any@k`` with binary relevance and the non-standard DCG.

    DCG = rel_1 + sum_{i=2..k} rel_i / log2(i) over the first ``k`` ranked ids; IDCG is the same
    formula on all corpus relevances sorted in descending order and cut to ``k``; 0.0 if IDCG
    is 0.

    Args:
        ranked_ids: What the retriever returned, best first (may be shorter than the corpus and,
            in turn->session mode, hold repeats: each position is scored on its own).
        correct_ids: The relevant ids.
        k: Cut-off, >= 1.
        corpus_ids: The whole corpus, repeats included (the ideal ranking counts every relevant
            corpus entry). If None, the corpus is assumed to hold each correct id once.
    """
    _check_k(k)
    correct = set(correct_ids)
    if corpus_ids is None:
        n_relevant = len(correct)
    else:
        n_relevant = sum(1 for c in corpus_ids if c in correct)
    ideal = _lme_dcg([1.0] * min(k, n_relevant))
    if ideal == 0:
        return 0.0
    return _lme_dcg([1.0 if r in correct else 0.0 for r in ranked_ids[:k]]) / ideal


def turn_session_id(turn_id: str) -> str:
    """``<session_id>_<j>`` -> ``<session_id>`` (drops only the last ``_<digits>``)."""
    return _TURN_SUFFIX.sub("", turn_id)


def turn_to_session_ranking(ranked_turn_ids: Sequence[str], k: int) -> list[str]:
    """Map a turn ranking to sessions for the official turn->session metrics.

    Every turn id loses its last ``_<n>``; the effective cut-off ``k_eff`` starts at ``k`` and
    grows until the first ``k_eff`` turns cover ``k`` distinct sessions, or the list ends.

    Returns:
        The session-mapped ranking cut at ``k_eff`` (repeats kept: each position is one turn).
        Upstream grows ``k_eff`` into the rest of its full corpus ranking; with a shorter list
        the metrics should be cut at ``max(k, len(result))`` (unreturned turns count as misses).
    """
    return widen_to_sessions([turn_session_id(t) for t in ranked_turn_ids], k)


def widen_to_sessions(ranked_unit_sessions: Sequence[str], k: int) -> list[str]:
    """The session of each ranked unit (turn, episode), cut where ``k`` distinct sessions are covered.

    Upstream ``evaluate_retrieval_turn2session``: ``k_eff`` starts at ``k`` and grows until the
    first ``k_eff`` units cover ``k`` distinct sessions, or the list ends. Repeats are kept.
    """
    _check_k(k)
    seen: set[str] = set()
    k_eff = 0
    for k_eff, session in enumerate(ranked_unit_sessions, start=1):
        seen.add(session)
        if k_eff >= k and len(seen) >= k:
            break
    return list(ranked_unit_sessions[:k_eff])


def unit_session_metrics(
    ranked_unit_sessions: Sequence[str],
    corpus_unit_sessions: Sequence[str],
    relevant_sessions: Iterable[str],
    ks: Iterable[int] = LME_KS,
) -> dict[str, float]:
    """Session-level metrics of a ranking of sub-session units, repeated session ids counted.

    The harness retrieves episodes (or, for baselines, turns), several of which may come from one
    session. Upstream's only rule for units finer than a session is ``evaluate_retrieval_turn2session``:
    every unit is mapped to its session WITHOUT de-duplication, ``k`` widens until ``k`` distinct
    sessions are covered, and ``ndcg_any`` scores every position (a second episode of a relevant
    session counts again), its ideal taken over the corpus of units mapped to sessions.

    Args:
        ranked_unit_sessions: The official session id of each retrieved unit, best first.
        corpus_unit_sessions: The official session id of every unit of the memory.
        relevant_sessions: The relevant (answer) sessions.
    """
    relevant = set(relevant_sessions)
    out: dict[str, float] = {}
    for k in ks:
        mapped = widen_to_sessions(ranked_unit_sessions, k)
        scores = _three(mapped, relevant, max(k, len(mapped)), corpus_unit_sessions)
        out.update({name.split("@")[0] + f"@{k}": v for name, v in scores.items()})
    return out


def retrieval_skip_reason(gold_abstention: bool, user_has_answer_count: int) -> str | None:
    """Why the official retrieval averages leave a question out, or None if it is scored.

    Upstream ``run_retrieval`` skips abstention (``_abs``) questions, and questions where no
    user turn carries ``has_answer`` (their evidence is absent or only in assistant turns, as in
    most single-session-assistant items), at every granularity.
    """
    if gold_abstention:
        return "abstention"
    if user_has_answer_count <= 0:
        return "no_user_has_answer"
    return None


def _three(ranked: Sequence[str], correct: Iterable[str], k: int, corpus: Sequence[str]) -> dict[str, float]:
    correct = set(correct)
    return {
        f"recall_any@{k}": recall_any_at_k(ranked, correct, k),
        f"recall_all@{k}": recall_all_at_k(ranked, correct, k),
        f"ndcg_any@{k}": ndcg_any_at_k(ranked, correct, k, corpus),
    }


def longmemeval_retrieval_metrics(
    ranked_session_ids: Sequence[str],
    ranked_turn_ids: Sequence[str],
    corpus_session_ids: Sequence[str],
    relevant_sessions: Iterable[str],
    corpus_turn_ids: Sequence[str],
    relevant_turns: Iterable[str],
    ks: Iterable[int] = LME_KS,
) -> dict[str, dict[str, float]]:
    """Official LongMemEval retrieval metrics of one question at every k.

    All ids are official ids (``common.benchmarks.longmemeval.official_session_id`` /
    ``official_turn_id``; ``retrieval_gold`` builds the corpus and gold lists):

    * session level: the corpus is every haystack session; relevant = answer sessions with at
      least one user turn flagged ``has_answer`` (upstream relabels the others answer->noans).
    * turn level: the corpus is the **user** turns only, ``<session_id>_<j>`` with j 1-based over
      all turns; relevant = flagged user turns of answer sessions.
    * turn_as_session: the turn ranking mapped to sessions (``turn_to_session_ranking``); a
      position is relevant iff its turn is relevant; non-relevant turns of a relevant session
      count as a separate pseudo-session, as upstream's answer->noans renaming makes them.

    Skip rules (apply ``retrieval_skip_reason`` before averaging, not here): upstream averages
    exclude abstention questions (``_abs`` in the id) and questions with no user turn flagged
    ``has_answer``; the mean is a plain mean over the remaining questions.

    Args:
        ranked_session_ids / ranked_turn_ids: What our retriever returned, best first; items
            not returned are simply absent.
        ks: Cut-offs (default 1, 3, 5, 10, 30, 50).

    Returns:
        ``{"session": {...}, "turn": {...}, "turn_as_session": {...}}``, each mapping
        ``recall_any@k``, ``recall_all@k`` and ``ndcg_any@k`` to floats.
    """
    ks = list(ks)
    rel_turns = set(relevant_turns)
    rel_turn_sessions = {turn_session_id(t) for t in rel_turns}

    def relabel(turn_id: str) -> str:
        if turn_id not in rel_turns and turn_session_id(turn_id) in rel_turn_sessions:
            return _NOANS + turn_id
        return turn_id

    mapped_corpus = [turn_session_id(relabel(t)) for t in corpus_turn_ids]
    relabeled = [relabel(t) for t in ranked_turn_ids]
    out: dict[str, dict[str, float]] = {"session": {}, "turn": {}, "turn_as_session": {}}
    for k in ks:
        out["session"].update(_three(ranked_session_ids, relevant_sessions, k, corpus_session_ids))
        out["turn"].update(_three(ranked_turn_ids, rel_turns, k, corpus_turn_ids))
        mapped = turn_to_session_ranking(relabeled, k)
        k_eff = max(k, len(mapped))
        scores = _three(mapped, rel_turn_sessions, k_eff, mapped_corpus)
        out["turn_as_session"].update({name.replace(f"@{k_eff}", f"@{k}"): v for name, v in scores.items()})
    return out


# ----------------------------------------------------------------------------- evidence buffer size
PAPER_MEAN_CONTEXT_TOKENS = 7470  # EnSIMem Table 3: mean answer-context tokens on LoCoMo (o200k_base)


def buffer_contribution_stats(retrieval_rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What reached the answer model, per plan scope and per route, beside the paper's 7,470 tokens.

    Reads the 06 rows' ``buffer_tokens`` (the rendered buffer) and ``contributions`` (episodes and
    tokens each route put in it; rows without them, e.g. baselines, count under their scope with
    no routes). For each scope (and ``all``): the distribution (n, mean, p50, p95, max) of buffer
    tokens and episodes, and per route of the episodes and tokens it contributed (0 when absent),
    plus how many episodes the caps dropped and how often they fired (``caps_fired``: questions
    where a cap dropped anything, of how many; per cap; episodes dropped per route).
    """
    rows = list(retrieval_rows)
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups["all"].append(r)
        groups[str((r.get("contributions") or {}).get("scope") or r.get("scope") or "none")].append(r)
    out: dict[str, Any] = {"paper_mean_context_tokens": PAPER_MEAN_CONTEXT_TOKENS, "by_scope": {}}
    for scope in sorted(groups, key=lambda s: (s != "all", s)):
        rs = groups[scope]
        contrib = [r.get("contributions") or {} for r in rs]
        routes = sorted({route for c in contrib for route in (c.get("routes") or {})})
        out["by_scope"][scope] = {
            "buffer_tokens": describe([float(r.get("buffer_tokens") or 0) for r in rs]),
            "episodes": describe([float(len(r.get("episode_ids") or [])) for r in rs]),
            "dropped_by_caps": sum(int(c.get("dropped_by_caps") or 0) for c in contrib),
            "caps_fired": _caps_fired(contrib),
            "routes": {route: {k: describe([float(((c.get("routes") or {}).get(route) or {}).get(k, 0))
                                                 for c in contrib]) for k in ("episodes", "tokens")}
                       for route in routes},
        }
    return out


def _caps_fired(contrib: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """How often the buffer caps bound among these questions (06 ``contributions.caps``)."""
    caps = [c.get("caps") or {} for c in contrib]
    routes: Counter[str] = Counter()
    for c in caps:
        routes.update({r: int(n) for r, n in (c.get("routes") or {}).items()})
    return {"questions": sum(1 for c in contrib if int(c.get("dropped_by_caps") or 0) > 0), "of": len(contrib),
            "max_episodes": sum(1 for c in caps if c.get("max_episodes")),
            "max_buffer_tokens": sum(1 for c in caps if c.get("max_buffer_tokens")),
            "dropped_by_route": dict(sorted(routes.items()))}
