"""Loss decomposition: where did the points go? Retrieval, reading or the judge.

Per scored question, the gold evidence is found fully / partly / not at all in the evidence
buffer the answer model read (``06_retrieve.jsonl`` ``dia_ids``), and crossed with the judge's
label:

=================  ===========================================================
``ok``             all gold evidence in the buffer, judged correct
``reading_error``  all gold evidence in the buffer, judged wrong
``partial``        part of the gold evidence in the buffer (either label; the matrix splits it)
``lucky``          no gold evidence in the buffer, judged correct
``retrieval_miss`` no gold evidence in the buffer, judged wrong
``no_gold_evidence`` the question has no gold evidence to look for (e.g. LongMemEval abstention)
``no_buffer``      the run has no retrieval row for it (an imported run: answers and labels only)
``failed``         the answer or the judgment failed (label null; scored wrong in the strict number)
=================  ===========================================================

The classes partition the scored questions, so they always add up to ``n``. Where a run has two
or more judges, ``judge_disagreement`` counts (beside the classes, not as one of them) the
questions on which the judges' labels differ: judges are never averaged.

Gold evidence: LoCoMo's cleaned ``evidence`` dia ids (``01_gold.jsonl``); LongMemEval's
``has_answer`` turns, else its answer sessions (a session counts as found when any of its turns is
in the buffer). ``corrected`` (a mapping qid -> dia ids, e.g. from an errata file) replaces the
gold evidence of the questions it names; the block then says how many it replaced.

Read only after judging (09_aggregate, reports, comparisons): it opens the gold file.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.core import artifacts, sources
from common.core.io import read_jsonl
from common.core.schema import Gold, from_dict
from common.evaluation.labels import load_labels, run_benchmark

# In the order a reader scans them: right answers first, then the ways to lose a point.
CLASSES = ("ok", "lucky", "partial", "reading_error", "retrieval_miss", "no_gold_evidence", "no_buffer", "failed")
COVERAGE = ("full", "partial", "none")
OVERALL = "overall"


@dataclass(frozen=True)
class Coverage:
    """How much of one question's gold evidence the buffer held."""

    state: str  # full | partial | none | no_gold (nothing to look for) | unknown (no retrieval row)
    found: int
    needed: int
    source: str  # evidence | has_answer | answer_sessions | corrected | none
    gold_ids: tuple[str, ...]  # the dia ids (or session ids, for answer_sessions) looked for


@dataclass(frozen=True)
class QuestionLoss:
    """One scored question under one judge."""

    qid: str
    category: str
    label: Optional[int]
    cause: str
    coverage: Coverage
    loss_class: str


def classify(state: str, label: Optional[int]) -> str:
    """The class of one question from its evidence coverage state and judge label."""
    if state == "unknown":
        return "no_buffer"
    if state == "no_gold":
        return "no_gold_evidence"
    if label is None:
        return "failed"
    if state == "partial":
        return "partial"
    if state == "full":
        return "ok" if label == 1 else "reading_error"
    return "lucky" if label == 1 else "retrieval_miss"


def evidence_coverage(gold: Gold, buffer_dia_ids: Optional[Sequence[str]],
                      session_of: Optional[Mapping[str, str]] = None,
                      corrected: Optional[Sequence[str]] = None) -> Coverage:
    """Gold evidence of ``gold`` found in a buffer.

    Args:
        gold: The question's gold row.
        buffer_dia_ids: The dia ids in the buffer the answer model read; None when the run has
            no retrieval row for the question.
        session_of: dia id -> official session id of the question's memory; needed only for
            LongMemEval questions whose evidence is whole answer sessions.
        corrected: Corrected evidence dia ids for this question (errata), used instead of gold.
    """
    if corrected is not None:
        ids, source = list(dict.fromkeys(corrected)), "corrected"
    elif gold.evidence:
        ids, source = list(dict.fromkeys(gold.evidence)), "evidence"
    elif gold.has_answer:
        ids, source = list(dict.fromkeys(gold.has_answer)), "has_answer"
    elif gold.answer_session_ids and not gold.abstention:
        ids, source = list(dict.fromkeys(gold.answer_session_ids)), "answer_sessions"
    else:
        ids, source = [], "none"
    if not ids:
        return Coverage("no_gold", 0, 0, source, ())
    if buffer_dia_ids is None:
        return Coverage("unknown", 0, len(ids), source, tuple(ids))
    if source == "answer_sessions":
        have = {(session_of or {}).get(d) for d in buffer_dia_ids}
    else:
        have = set(buffer_dia_ids)
    found = sum(i in have for i in ids)
    state = "full" if found == len(ids) else "none" if found == 0 else "partial"
    return Coverage(state, found, len(ids), source, tuple(ids))


def _sessions_of(run_dir: Path) -> dict[str, dict[str, str]]:
    """memory id -> dia id -> official session id (source id when the session has one)."""
    out: dict[str, dict[str, str]] = {}
    official = sources.session_sources(run_dir)  # gold side; older runs kept them in the sessions
    for s in read_jsonl(artifacts.path(run_dir, "sessions"), missing_ok=True):
        sid = official.get((s["memory_id"], s["session_id"])) or s.get("source_id") or s["session_id"]
        out.setdefault(s["memory_id"], {}).update({t["dia_id"]: sid for t in s.get("turns", [])})
    return out


def question_losses(run_dir: str | Path, judge: str,
                    corrected: Optional[Mapping[str, Sequence[str]]] = None) -> list[QuestionLoss]:
    """Every scored question of a run under ``judge``, in gold order, with its loss class.

    ``corrected`` maps qids to corrected evidence dia ids; other questions keep their gold evidence.
    """
    run_dir = Path(run_dir)
    labels = load_labels(run_dir, judge)
    gold = {g["qid"]: from_dict(Gold, g) for g in read_jsonl(artifacts.path(run_dir, "gold"))}
    rets = {r["qid"]: r.get("dia_ids") or [] for r in read_jsonl(artifacts.path(run_dir, "retrievals"),
                                                                    missing_ok=True)}
    needs_sessions = any(not g.evidence and not g.has_answer and g.answer_session_ids for g in gold.values())
    sessions = _sessions_of(run_dir) if needs_sessions else {}
    out = []
    for rec in labels.records:
        g = gold[rec.qid]
        cov = evidence_coverage(g, rets.get(rec.qid), sessions.get(g.memory_id, {}),
                                (corrected or {}).get(rec.qid))
        out.append(QuestionLoss(rec.qid, rec.category, rec.label, rec.cause, cov, classify(cov.state, rec.label)))
    return out


def disagreements(labels_by_judge: Mapping[str, Mapping[str, Optional[int]]]) -> set[str]:
    """Questions judged (not failed) by at least two judges with different labels."""
    seen: dict[str, set[int]] = {}
    for labels in labels_by_judge.values():
        for qid, label in labels.items():
            if label is not None:
                seen.setdefault(qid, set()).add(label)
    return {q for q, values in seen.items() if len(values) > 1}


def _block(losses: list[QuestionLoss], disagree: Optional[set[str]]) -> dict[str, Any]:
    n = len(losses)
    counts = {c: sum(q.loss_class == c for q in losses) for c in CLASSES}
    matrix = {state: {"right": sum(q.label == 1 for q in losses if q.coverage.state == state),
                      "wrong": sum(q.label == 0 for q in losses if q.coverage.state == state),
                      "failed": sum(q.label is None for q in losses if q.coverage.state == state)}
              for state in COVERAGE}
    block: dict[str, Any] = {"n": n, "counts": counts,
                             "rates": {c: (counts[c] / n if n else None) for c in CLASSES},
                             "coverage": matrix}
    if disagree is not None:
        block["judge_disagreement"] = sum(q.qid in disagree for q in losses)
        block["judge_disagreement_rate"] = block["judge_disagreement"] / n if n else None
    return block


def summarize(losses: list[QuestionLoss], categories: Iterable[str],
              disagree: Optional[set[str]] = None) -> dict[str, Any]:
    """Counts and rates per category (in ``categories`` order) and overall."""
    present = {q.category for q in losses}
    return {"overall": _block(losses, disagree),
            "by_category": {c: _block([q for q in losses if q.category == c], disagree)
                            for c in categories if c in present}}


def decompose(run_dir: str | Path, judges: Sequence[str],
              corrected: Optional[Mapping[str, Sequence[str]]] = None) -> dict[str, Any]:
    """The ``loss`` block of ``metrics.json``: per judge, class counts and rates per category.

    Args:
        run_dir: The run directory (``01_gold.jsonl``, ``06_retrieve.jsonl``, ``08_judge_*.jsonl``).
        judges: The judges to decompose (each gets its own block; never averaged).
        corrected: Optional corrected evidence, qid -> dia ids (errata); replaces the gold
            evidence of the questions it names.
    """
    run_dir = Path(run_dir)
    categories = list(adapter(run_benchmark(run_dir)).categories)
    per_judge = {j: question_losses(run_dir, j, corrected) for j in judges}
    disagree = disagreements({j: {q.qid: q.label for q in ls} for j, ls in per_judge.items()}) \
        if len(per_judge) > 1 else None
    first = next(iter(per_judge.values()), [])
    sources: dict[str, int] = {}
    for q in first:
        sources[q.coverage.source] = sources.get(q.coverage.source, 0) + 1
    return {"classes": list(CLASSES), "evidence_sources": sources,
            "corrected_evidence": sum(q.coverage.source == "corrected" for q in first),
            "judges": {j: summarize(ls, categories, disagree) for j, ls in per_judge.items()}}


def as_row(q: QuestionLoss) -> dict[str, Any]:
    """A JSON-ready dict of one question's decomposition (for reports)."""
    row = asdict(q)
    row["coverage"]["gold_ids"] = list(q.coverage.gold_ids)
    return row
