"""How much of a benchmark (or of a claim's denominator) a number covers: the one definition.

A run, an import or a table row covers the questions it has a label row for (a scored question
with no judge row, ``missing_judgment``, is not covered). Against the benchmark's full scored
count (``EXPECTED_SCORED``) or a claim's stated denominator, fewer is PARTIAL, and every place
that prints a number beside a run (09_aggregate's tables, ``make tables``, ``make claims``,
``make figures``, the report header, an import) prints the same mark, ``PARTIAL 5 / 1,540``,
from ``Coverage``.

Two runs can cover as many questions and still cover different ones (conv-26's first ten and
conv-41's): the question-set id (``question_set_id``, a hash of the scored question ids) tells
them apart. It sits beside the protocol fingerprint (which describes the protocol, not the
selection) wherever runs are put side by side, and differing ids are warned about there.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Mapping, Optional

# The full benchmark sizes a complete run must cover (spec/benchmarks.md).
# LoCoMo-Plus: 1,986 + 401 Cognitive.
EXPECTED_SCORED = {"locomo": 1540, "longmemeval": 500, "realtalk": 728, "locomo_plus": 2387}


@dataclass(frozen=True)
class Coverage:
    """``covered`` questions of ``expected`` (None: the benchmark has no fixed size, e.g. BEAM)."""

    covered: int
    expected: Optional[int]
    complete: bool

    @property
    def partial(self) -> bool:
        return not self.complete

    @property
    def text(self) -> str:
        """``5 / 1,540`` (``5 questions`` when the full size is not fixed)."""
        return f"{self.covered:,} questions" if self.expected is None else f"{self.covered:,} / {self.expected:,}"

    @property
    def mark(self) -> str:
        """``PARTIAL 5 / 1,540`` for a partial number, else the plain coverage ``1,540 / 1,540``."""
        return f"PARTIAL {self.text}" if self.partial else self.text

    def to_dict(self) -> dict[str, Any]:
        return {"covered": self.covered, "expected": self.expected, "complete": self.complete, "text": self.text,
                "mark": self.mark}


def coverage(covered: int, expected: Optional[int], *, selection_cut: bool = False) -> Coverage:
    """The coverage of ``covered`` questions against ``expected``.

    With no fixed ``expected`` (BEAM: 20 questions per chat of the tier) a number is complete
    unless the selection (subset, limit, memories) cut it.
    """
    complete = covered >= expected if expected is not None else not selection_cut
    return Coverage(covered, expected, complete)


def of_benchmark(benchmark: str, covered: int, *, selection_cut: bool = False) -> Coverage:
    return coverage(covered, EXPECTED_SCORED.get(benchmark), selection_cut=selection_cut)


def of_metrics(metrics: Mapping[str, Any], benchmark: str = "") -> Coverage:
    """The coverage 09_aggregate recorded in ``metrics.json`` (``coverage``: scored, covered, expected)."""
    cov = metrics.get("coverage") if isinstance(metrics.get("coverage"), Mapping) else None
    if cov is None:  # an older metrics.json: the first judge's overall n
        judges = metrics.get("judges") or {}
        first: Mapping[str, Any] = next(iter(judges.values()), {}) if isinstance(judges, Mapping) else {}
        return of_benchmark(benchmark, int((first.get("overall") or {}).get("n") or 0))
    covered = cov.get("covered", cov.get("scored", 0))
    expected = cov.get("expected")
    return Coverage(int(covered or 0), None if expected is None else int(expected), bool(cov.get("complete")))


def denominator(stated: str, benchmark: str) -> Optional[int]:
    """A claim's stated denominator as a count ("1540", "1,540"), else the benchmark's full size."""
    text = str(stated or "").replace(",", "").strip()
    return int(text) if text.isdigit() else EXPECTED_SCORED.get(benchmark)


def question_set_id(qids: Iterable[str]) -> str:
    """``qs-3f2a9c1b0d``: the first 10 hex digits of the sha256 of the question ids, sorted, one a line.

    The same questions give the same id whatever their order or the run; it names which questions
    a number is over (a run's scored questions: its strict accuracy's denominator).
    """
    text = "\n".join(sorted(set(qids)))
    return "qs-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def question_sets_differ(runs: Mapping[str, tuple[str, int]]) -> str:
    """The warning for rows over different questions (``make compare``'s words), or ''.

    ``runs``: row label -> (question-set id, number of questions). One line naming each set and its rows.
    """
    by_set: dict[tuple[str, int], list[str]] = {}
    for label, key in runs.items():
        by_set.setdefault(key, []).append(label)
    if len(by_set) < 2:
        return ""
    parts = [f"{qs} ({n:,} questions): {', '.join(labels)}" for (qs, n), labels in by_set.items()]
    return ("QUESTION SETS DIFFER: " + "; ".join(parts) + ". Accuracies over different questions are not "
            "comparable; `make compare A=<run> B=<run>` pairs the questions two runs share")
