"""The audited LoCoMo answer key (``data.errata``): corrected golden answers and evidence ids.

The locomo-audit (dial481/locomo-audit, CC BY-NC 4.0; never committed here) lists 156 of the
1,540 judged questions in ``errors.json``: 99 have a wrong golden answer (error types
HALLUCINATION, TEMPORAL_ERROR, ATTRIBUTION_ERROR, AMBIGUOUS, INCOMPLETE; each with a
``correct_answer``) and 57 only cite the wrong evidence (WRONG_CITATION; ``correct_evidence``).
Rows are keyed ``locomo_<c>_qa<i>``: conversation c in file order of ``locomo10.json`` and the
0-based index i into its ``qa`` list, i.e. this harness's ``<sample_id>:q<i+1>``; the question
text must match the benchmark file (a mismatch is an error naming the row).

Only judging and metrics read this (it holds answers): 08_judge re-judges the corrected answers,
09_aggregate reports the audited key beside the original, and ``corrected_evidence`` gives the
evidence diagnostics (and the loss decomposition) the corrected turn ids. LoCoMo only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from common.benchmarks.base import DataError
from common.benchmarks.locomo import clean_evidence
from common.core.io import read_json, sha256_file
from common.core.schema import Question, Session

WRONG_CITATION = "WRONG_CITATION"  # the only error type whose golden answer stands
_QUESTION_ID = re.compile(r"locomo_(\d+)_qa(\d+)")


@dataclass(frozen=True)
class Erratum:
    """One audited question."""

    qid: str
    error_type: str
    golden_answer: str
    correct_answer: str
    correct_evidence: list[str] = field(default_factory=list)  # cleaned: real turn ids only
    cited_evidence: list[str] = field(default_factory=list)

    @property
    def wrong_answer(self) -> bool:
        """The golden answer itself is wrong (every type but WRONG_CITATION)."""
        return self.error_type != WRONG_CITATION


@dataclass(frozen=True)
class Errata:
    path: str
    sha256: str
    items: Mapping[str, Erratum]

    def corrected_answers(self) -> dict[str, str]:
        """qid -> corrected golden answer, for the questions whose golden answer is wrong."""
        return {q: e.correct_answer for q, e in self.items.items() if e.wrong_answer}

    def corrected_evidence(self) -> dict[str, list[str]]:
        """qid -> corrected evidence turn ids, for every audited question."""
        return {q: list(e.correct_evidence) for q, e in self.items.items()}


def load_errata(path: str | Path, memories: Sequence[str], questions: Sequence[Question],
                sessions: Sequence[Session]) -> Errata:
    """Read ``errors.json`` against the WHOLE benchmark file as loaded (``memories`` in file order).

    Raises:
        DataError: The file is missing or malformed, or a row names no question of the benchmark
            or a different question text (one line naming the file, the row and the field).
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: errata file not found (data.errata); e.g. ../shared/data/locomo-audit/errors.json")
    rows = read_json(path, DataError)
    if not isinstance(rows, list):
        raise DataError(f"{path}: expected a list of audited questions")
    text = {q.qid: q.question for q in questions}
    dia_ids: dict[str, set[str]] = {}
    for s in sessions:
        dia_ids.setdefault(s.memory_id, set()).update(t.dia_id for t in s.turns)
    items: dict[str, Erratum] = {}
    for n, row in enumerate(rows):
        where = f"{path}: [{n}]"
        if not isinstance(row, dict):
            raise DataError(f"{where}: expected an object")
        for key in ("question_id", "question", "error_type", "golden_answer", "correct_answer", "correct_evidence"):
            if key not in row:
                raise DataError(f"{where}.{key}: missing")
        m = _QUESTION_ID.fullmatch(str(row["question_id"]))
        if m is None:
            raise DataError(f"{where}.question_id: expected locomo_<c>_qa<i>, got {row['question_id']!r}")
        c, i = int(m.group(1)), int(m.group(2))
        if c >= len(memories):
            raise DataError(f"{where}.question_id: conversation index {c}; the benchmark has {len(memories)}")
        qid = f"{memories[c]}:q{i + 1:04d}"
        if qid not in text:
            raise DataError(f"{where}.question_id: {row['question_id']} -> {qid}: no such question in the benchmark")
        if row["question"] != text[qid]:
            raise DataError(f"{where}.question: {row['question_id']} -> {qid}: text {row['question']!r} differs "
                            f"from the benchmark's {text[qid]!r}")
        if qid in items:
            raise DataError(f"{where}.question_id: {row['question_id']} is listed twice")
        evidence = _strings(where, "correct_evidence", row["correct_evidence"])
        items[qid] = Erratum(qid=qid, error_type=str(row["error_type"]), golden_answer=str(row["golden_answer"]),
                             correct_answer=str(row["correct_answer"]),
                             correct_evidence=clean_evidence(evidence, dia_ids.get(memories[c], set())),
                             cited_evidence=_strings(where, "cited_evidence", row.get("cited_evidence", [])))
    return Errata(path=str(path), sha256=sha256_file(path), items=items)


def _strings(where: str, key: str, value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DataError(f"{where}.{key}: expected a list of turn ids, got {value!r}")
    return list(value)
