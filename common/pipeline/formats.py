"""Readers of published per-question result files that carry no question ids (Zep, mem0, Hindsight).

Each reader checks the file's structure (a malformed row is one ``SourceError`` line naming the
file, the row and the field), turns every row into a ``PublishedRow`` and maps the rows onto
benchmark qids with ``common.benchmarks.question_map`` (conversation, then normalised question
text; never a silent guess). ``own_accuracy`` recomputes the number the file's own code prints,
with that code's denominator, from all rows, mapped or not.

Formats (schemas as their code writes them):

* ``zep``: getzep/zep-papers ``kg_architecture_agent_memory/locomo_eval/data/zep_locomo_grades.json``
  written by ``zep_locomo_eval.py``: ``{"locomo_experiment_user_<i>": [{question, answer,
  golden_answer, grade: bool, category?}]}``; user i is conversation i of ``locomo10.json`` in file
  order, rows in the conversation's question order (category 5 left out). Printed score:
  ``sum(grade) / 1540``, i.e. correct over all rows.
* ``mem0``: the ``evals.py`` output of mem0's evaluation (``evaluation_metrics.json``):
  ``{"<conversation index>": [{question, answer (gold), response, category: "1".."4", bleu_score,
  f1_score, llm_score: 0|1}]}``, rows in question order; printed score (``generate_scores.py``):
  mean ``llm_score`` over the rows.
* ``hindsight``: vectorize-io/hindsight-benchmarks ``results/<benchmark>.json[.gz]`` written by
  ``benchmark_runner.py``: ``{overall_accuracy, total_correct, total_questions, total_invalid,
  item_results: [{item_id: sample_id, metrics: {detailed_results: [{question, correct_answer,
  predicted_answer, category, is_correct, is_invalid, question_index?}]}}]}``; rows in completion
  order (not question order), ``question_index`` (0-based into the item's qa list) only in newer
  files. Printed score: ``total_correct / (total_questions - total_invalid)`` in percent.
"""
from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from common.benchmarks.question_map import Mapping, SourceRow, map_rows
from common.core.schema import Gold, Question

NEW_FORMATS = ("zep", "mem0", "hindsight")
_TRAILING_INT = re.compile(r"(\d+)$")


class SourceError(ValueError):
    """A source row that cannot be read (message names the file and the row)."""


@dataclass(frozen=True)
class PublishedRow:
    where: str
    memory_id: str
    question: str
    answer: Optional[str]
    label: Optional[int]  # 1 correct, 0 wrong, None: no label (an excluded row)
    gold: Optional[str] = None
    category: Optional[int] = None
    position: Optional[int] = None
    excluded: str = ""  # why the file's own denominator leaves this row out ("" = counted)


@dataclass
class Parsed:
    fmt: str
    rows: list[PublishedRow]
    mapping: Mapping
    own_rule: str  # how the file's own code computes its printed number
    stated: dict[str, Any] = field(default_factory=dict)  # numbers the file itself states

    def own_accuracy(self) -> dict[str, Any]:
        """The file's number recomputed from its rows by its own rule (all rows, mapped or not)."""
        counted = [r for r in self.rows if not r.excluded]
        k = sum(1 for r in counted if r.label == 1)
        n = len(counted)
        return {"k": k, "n": n, "accuracy": k / n if n else None, "rows": len(self.rows),
                "excluded": len(self.rows) - n, "rule": self.own_rule}


def read_doc(source: Path) -> Any:
    """The JSON document of ``source`` (gzip-compressed when it ends in .gz)."""
    try:
        raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
        return json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{source}: not a JSON file ({exc.__class__.__name__}: {exc})") from None


def _fail(source: Path, where: str, msg: str) -> SourceError:
    return SourceError(f"{source}: {where}: {msg}")


class Memories:
    """Resolves a file's conversation key to a benchmark memory id: a memory id itself, a question
    id (a LongMemEval item is one question), or a key ending in the conversation's index."""

    def __init__(self, questions: Sequence[Question]) -> None:
        self.ids = list(dict.fromkeys(q.memory_id for q in questions))  # file order of the benchmark
        self.of_qid = {q.qid: q.memory_id for q in questions}

    def __call__(self, source: Path, key: str) -> str:
        if key in self.of_qid.values():
            return key
        if key in self.of_qid:
            return self.of_qid[key]
        m = _TRAILING_INT.search(key)
        if m is None or int(m.group(1)) >= len(self.ids):
            raise _fail(source, key, f"names no conversation: expected a sample id ({self.ids[0]} ...), a question "
                                     f"id, or a key ending in an index 0..{len(self.ids) - 1}")
        return self.ids[int(m.group(1))]


def _rows_of(source: Path, doc: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise _fail(source, where, "expected a list of row objects")
    return doc


def _text(source: Path, where: str, row: dict[str, Any], key: str, *, optional: bool = False) -> Optional[str]:
    if key not in row:
        if optional:
            return None
        raise _fail(source, f"{where}.{key}", "missing")
    value = row[key]
    if value is None and optional:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # LoCoMo has integer answers; the published files keep them as numbers
    if not isinstance(value, str):
        raise _fail(source, f"{where}.{key}", f"expected a string, got {value!r}")
    return value


def _category(source: Path, where: str, value: Any) -> Optional[int]:
    if value is None:
        return None
    try:
        c = int(value)
    except (TypeError, ValueError):
        raise _fail(source, f"{where}.category", f"expected a LoCoMo category 1..5, got {value!r}") from None
    if str(c) != str(value).strip() or not 1 <= c <= 5:
        raise _fail(source, f"{where}.category", f"expected a LoCoMo category 1..5, got {value!r}")
    return c


def _zep(source: Path, doc: Any, memories: Memories, benchmark: str) -> tuple[list[PublishedRow], str, dict]:
    if not isinstance(doc, dict):
        raise SourceError(f"{source}: expected an object mapping a user key to a list of graded rows")
    out = []
    for user, rows in doc.items():
        memory = memories(source, str(user))
        for j, row in enumerate(_rows_of(source, rows, str(user))):
            where = f"{user}[{j}]"
            grade = row.get("grade", "missing")
            if not isinstance(grade, bool):
                raise _fail(source, f"{where}.grade", f"expected true or false, got {grade!r}")
            out.append(PublishedRow(where, memory, str(_text(source, where, row, "question")),
                                    _text(source, where, row, "answer"), int(grade),
                                    gold=_text(source, where, row, "golden_answer", optional=True),
                                    category=_category(source, where, row.get("category"))))
    return out, "correct rows / all rows (zep_locomo_eval.py: score / 1540)", {}


def _mem0(source: Path, doc: Any, memories: Memories, benchmark: str) -> tuple[list[PublishedRow], str, dict]:
    if not isinstance(doc, dict):
        raise SourceError(f"{source}: expected an object mapping a conversation index to a list of rows")
    out = []
    for key, rows in doc.items():
        memory = memories(source, str(key))
        for j, row in enumerate(_rows_of(source, rows, str(key))):
            where = f"{key}[{j}]"
            score = row.get("llm_score", "missing")
            if isinstance(score, bool) or score not in (0, 1):
                raise _fail(source, f"{where}.llm_score", f"expected 0 or 1, got {score!r}")
            out.append(PublishedRow(where, memory, str(_text(source, where, row, "question")),
                                    _text(source, where, row, "response"), int(score),
                                    gold=_text(source, where, row, "answer", optional=True),
                                    category=_category(source, where, row.get("category"))))
    return out, "mean llm_score over all rows (generate_scores.py)", {}


def _hindsight(source: Path, doc: Any, memories: Memories,
               benchmark: str) -> tuple[list[PublishedRow], str, dict]:
    if not isinstance(doc, dict) or not isinstance(doc.get("item_results"), list):
        raise SourceError(f"{source}: item_results: expected a list of per-conversation results")
    out = []
    for i, item in enumerate(doc["item_results"]):
        if not isinstance(item, dict) or not isinstance(item.get("metrics"), dict):
            raise _fail(source, f"item_results[{i}].metrics", "expected an object")
        memory = memories(source, str(item.get("item_id")))
        details = _rows_of(source, item["metrics"].get("detailed_results"),
                           f"item_results[{i}].metrics.detailed_results")
        for j, row in enumerate(details):
            where = f"item_results[{i}]({item.get('item_id')}).detailed_results[{j}]"
            invalid, correct = row.get("is_invalid", False), row.get("is_correct")
            if not isinstance(invalid, bool):
                raise _fail(source, f"{where}.is_invalid", f"expected true or false, got {invalid!r}")
            if correct is not None and not isinstance(correct, bool):
                raise _fail(source, f"{where}.is_correct", f"expected true, false or null, got {correct!r}")
            position = row.get("question_index")
            if position is not None and (isinstance(position, bool) or not isinstance(position, int)):
                raise _fail(source, f"{where}.question_index", f"expected an integer, got {position!r}")
            out.append(PublishedRow(
                where, memory, str(_text(source, where, row, "question")),
                None if invalid else _text(source, where, row, "predicted_answer"),
                None if invalid or correct is None else int(correct),
                gold=_text(source, where, row, "correct_answer", optional=True),
                category=_category(source, where, row.get("category")) if benchmark == "locomo" else None,
                position=position, excluded="is_invalid" if invalid else ""))
    stated = {k: doc[k] for k in ("overall_accuracy", "total_correct", "total_questions", "total_invalid",
                                  "total_valid") if k in doc}
    if isinstance(doc.get("model_config"), dict):
        stated["model_config"] = doc["model_config"]
    return out, "correct rows / rows without is_invalid, in percent (benchmark_runner.py)", stated


READERS: dict[str, Callable[[Path, Any, Memories, str], tuple[list[PublishedRow], str, dict]]] = {
    "zep": _zep, "mem0": _mem0, "hindsight": _hindsight}
# Files whose rows follow the benchmark's question order (duplicates may be paired by order).
ORDERED = {"zep": True, "mem0": True, "hindsight": False}


def parse(fmt: str, source: Path, questions: Sequence[Question], gold: Sequence[Gold], benchmark: str) -> Parsed:
    """Read ``source`` in format ``fmt`` and map its rows onto the WHOLE benchmark file's qids."""
    if fmt not in READERS:
        raise SourceError(f"{source}: unknown format {fmt!r}; known: {', '.join(READERS)}")
    rows, rule, stated = READERS[fmt](source, read_doc(source), Memories(questions), benchmark)
    if not rows:
        raise SourceError(f"{source}: no rows")
    mapping = map_rows([SourceRow(r.where, r.memory_id, r.question, r.category, r.gold, r.position) for r in rows],
                       questions, gold, ordered=ORDERED[fmt])
    return Parsed(fmt, rows, mapping, rule, stated)
