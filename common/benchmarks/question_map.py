"""Map published result rows that carry no question id onto benchmark qids, never by guessing.

Some published per-question files name only the conversation (a user key, a conversation index or
a ``sample_id``) and give each row's question text. A row is mapped to a qid of that conversation
by its normalised question text (Unicode NFKC, case-folded, whitespace collapsed), then:

* exactly one question of the conversation has that text: mapped;
* none has it: unmapped, reason ``no_qid``;
* several have it (LoCoMo conv-48 asks eleven questions twice, conv-30 one question in two
  categories): a category the row states narrows them first (a fact of the row, not a guess);
  if several remain and the file lists its rows in the benchmark's order (``ordered``) and holds
  exactly as many rows with that text as there are such questions, the k-th row takes the k-th
  question (conversation order). Otherwise every such row is unmapped, reason ``ambiguous``, with
  the qids it could be.
* a row whose text occurs more often in the file than in the conversation: reason ``ambiguous``.

A row that gives its own question id (a map's ``match: question_id``) is mapped by it when the id
is a question of the benchmark file with the same text (else ``no_qid`` / ``text_differs``).
A row may instead give its 0-based index into the conversation's question list
(``position``): then the question at that index is taken when its text matches, else the row is
unmapped (``text_differs``). Mapped rows whose stated category or golden answer differs from the
benchmark's are listed beside the mapping (``category_differs``, ``gold_differs``); they stay
mapped, the question text being the key.
"""
from __future__ import annotations

import unicodedata
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from common.core.schema import Gold, Question


def normalise(text: Any) -> str:
    """The comparison form of a question or answer text."""
    return " ".join(unicodedata.normalize("NFKC", str(text)).casefold().split())


@dataclass(frozen=True)
class SourceRow:
    """One published row, as read from its file (``where`` names it for reports)."""

    where: str
    memory_id: str
    question: str
    category: Optional[int] = None
    gold: Optional[str] = None
    position: Optional[int] = None  # 0-based index into the conversation's question list, if given
    qid: Optional[str] = None  # the row's own question id: mapped by it (its text checked), not by text
    question_type: Optional[str] = None  # a LongMemEval type the row states (compared, never used to map)


@dataclass(frozen=True)
class Unmapped:
    where: str
    question: str
    reason: str  # no_qid | ambiguous | text_differs
    candidates: tuple[str, ...] = ()


@dataclass
class Mapping:
    """The result: ``qid`` per row index (None for an unmapped row) and what was noticed."""

    qids: list[Optional[str]]
    unmapped: list[Unmapped] = field(default_factory=list)
    by_order: int = 0  # rows whose duplicate text was resolved by conversation order
    out_of_order: int = 0  # mapped rows whose qid comes before the previous row's (ordered files)
    category_differs: list[str] = field(default_factory=list)
    gold_differs: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        reasons: dict[str, int] = defaultdict(int)
        for u in self.unmapped:
            reasons[u.reason] += 1
        return {"rows": len(self.qids), "mapped": sum(q is not None for q in self.qids),
                "unmapped": len(self.unmapped), "unmapped_by_reason": dict(sorted(reasons.items())),
                "resolved_by_conversation_order": self.by_order, "out_of_order": self.out_of_order,
                "category_differs": len(self.category_differs), "gold_differs": len(self.gold_differs)}


def map_rows(rows: Sequence[SourceRow], questions: Sequence[Question], gold: Sequence[Gold], *,
             ordered: bool) -> Mapping:
    """Map ``rows`` onto the qids of ``questions`` (the whole benchmark file, in file order)."""
    by_memory: dict[str, list[Question]] = defaultdict(list)
    for question in questions:
        by_memory[question.memory_id].append(question)
    golds = {g.qid: g for g in gold}
    result = Mapping(qids=[None] * len(rows))
    # Group rows by (conversation, normalised text): duplicates are decided per group.
    groups: dict[tuple[str, str, Optional[int]], list[int]] = defaultdict(list)
    text_of = {q.qid: q.question for q in questions}
    for i, r in enumerate(rows):
        if r.qid is not None:
            if r.qid not in text_of:
                result.unmapped.append(Unmapped(r.where, r.question, "no_qid"))
            elif normalise(text_of[r.qid]) != normalise(r.question):
                result.unmapped.append(Unmapped(r.where, r.question, "text_differs", (r.qid,)))
            else:
                result.qids[i] = r.qid
            continue
        if r.position is not None:
            qs = by_memory.get(r.memory_id, [])
            at = qs[r.position] if 0 <= r.position < len(qs) else None
            if at is not None and normalise(at.question) == normalise(r.question):
                result.qids[i] = at.qid
            else:
                result.unmapped.append(Unmapped(r.where, r.question, "text_differs" if at else "no_qid",
                                                (at.qid,) if at else ()))
            continue
        groups[(r.memory_id, normalise(r.question), r.category)].append(i)
    for (memory, text, category), idx in groups.items():
        same = [q for q in by_memory.get(memory, []) if normalise(q.question) == text]
        if len(same) > 1 and category is not None:  # the row's stated category narrows them
            same = [q for q in same if golds.get(q.qid) and golds[q.qid].category == category] or same
        _decide(result, rows, idx, same, ordered)
    taken: dict[str, str] = {}
    for i, qid in enumerate(result.qids):
        if qid is None:
            continue
        if qid in taken:  # a position-given row and a text-mapped row on one question
            result.unmapped.append(Unmapped(rows[i].where, rows[i].question, "ambiguous", (qid,)))
            result.qids[i] = None
            continue
        taken[qid] = rows[i].where
        g = golds.get(qid)
        if g is not None and rows[i].category is not None and rows[i].category != g.category:
            result.category_differs.append(f"{rows[i].where} -> {qid}: {rows[i].category} vs {g.category}")
        if g is not None and rows[i].question_type is not None and rows[i].question_type != g.question_type:
            result.category_differs.append(f"{rows[i].where} -> {qid}: {rows[i].question_type} vs {g.question_type}")
        if g is not None and rows[i].gold is not None and normalise(rows[i].gold) != normalise(g.answer):
            result.gold_differs.append(f"{rows[i].where} -> {qid}")
    if ordered:
        last: dict[str, int] = {}
        order = {q.qid: n for n, q in enumerate(questions)}
        for i, qid in enumerate(result.qids):
            if qid is None:
                continue
            m = rows[i].memory_id
            if m in last and order[qid] < last[m]:
                result.out_of_order += 1
            last[m] = order[qid]
    result.unmapped.sort(key=lambda u: u.where)
    return result


def _decide(result: Mapping, rows: Sequence[SourceRow], idx: list[int], same: list[Question],
            ordered: bool) -> None:
    if not same:
        for i in idx:
            result.unmapped.append(Unmapped(rows[i].where, rows[i].question, "no_qid"))
        return
    if len(same) == len(idx) and (len(same) == 1 or ordered):
        for i, q in zip(idx, same):  # idx in file order, same in conversation order
            result.qids[i] = q.qid
        if len(same) > 1:
            result.by_order += len(idx)
        return
    for i in idx:
        result.unmapped.append(Unmapped(rows[i].where, rows[i].question, "ambiguous", tuple(q.qid for q in same)))
