"""Published per-question result files read by a declarative field map (YAML), not by code per vendor.

A map (``configs/import_formats/<name>.yaml`` for the built-in ``zep``, ``mem0`` and
``hindsight``; any other YAML file passed by path as ``--format path/to/map.yaml``) says:

* ``rows``: where the rows are. ``at``: a dotted path to their container (``""``: the document).
  ``by``: ``key`` (an object mapping a conversation key to its list of rows), ``item`` (a list of
  per-conversation items; ``item_conversation`` names the item's conversation field and
  ``item_rows`` the dotted path to its rows) or ``row`` (a flat list of rows, or a JSONL file).
* ``fields``: the dotted path in a row of ``question``, ``answer`` (required), ``gold``,
  ``category`` (a LoCoMo category 1..5), ``question_type`` (LongMemEval files that carry their
  own), ``label``, ``score`` (a numeric grade kept beside the label), ``question_id``,
  ``conversation`` (``by: row``; ``"@file"``: the file name without its suffixes), ``position``
  (0-based index into the conversation's questions), ``excluded`` (a true/false flag: the file's
  own denominator leaves the row out; here it is a counted failure).
* ``label``: how a label reads as correct: ``kind: boolean`` (true/false), ``kind: values``
  (``correct: [...]`` and ``wrong: [...]``) or ``kind: threshold`` (a number ``>= threshold``);
  ``missing: error`` (default) or ``missing: no_label`` (null or absent: no label, a failure).
* ``match``: how rows find their question: ``conversation_text`` (conversation, then normalised
  question text; a ``position`` the row gives wins; with ``ordered: true`` repeated texts pair
  by their order in the conversation) or ``question_id`` (the row's id is the benchmark qid).
* ``labels`` (optional): the labels live in a second file (``--labels FILE``) keyed by question
  id: ``at`` (its rows), ``question_id`` and ``label`` (dotted paths); the main file's rows need
  ``fields.question_id``.
* ``own_rule`` (how the file's own code computes its printed number), ``stated`` (top-level
  numbers or objects the file states, copied into ``source.json``), ``benchmarks``.

The source may be a file (JSON, JSON.gz or JSONL), a directory or a glob of such files (one file
per conversation, say). Every row is checked (a malformed row is one ``SourceError`` line naming
the file, the row and the field; a malformed map is one line naming the map file and the key),
turned into a ``PublishedRow`` and mapped onto benchmark qids with
``common.benchmarks.question_map`` (never a silent guess). ``own_accuracy`` recomputes the
number the file's own code prints, with that code's denominator, from all rows, mapped or not.
"""
from __future__ import annotations

import glob
import gzip
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml

from common.benchmarks.question_map import Mapping, SourceRow, map_rows
from common.core.config import REPO_ROOT
from common.core.io import sha256_file
from common.core.schema import Gold, Question
from common.core.yamlio import load_yaml

MAP_DIR = REPO_ROOT / "configs" / "import_formats"
NEW_FORMATS = ("zep", "mem0", "hindsight")  # the built-in maps (MAP_DIR/<name>.yaml)
_TRAILING_INT = re.compile(r"(\d+)$")
_MISSING = object()


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
    qid: Optional[str] = None  # the row's own question id (match: question_id)
    question_type: Optional[str] = None
    score: Optional[float] = None


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


# ----------------------------------------------------------------------------- the map
FIELDS = ("question", "answer", "gold", "category", "question_type", "label", "score", "question_id",
          "conversation", "position", "excluded")
KEYS = {"format", "description", "benchmarks", "rows", "fields", "label", "match", "ordered", "own_rule", "stated",
        "labels", "source"}


@dataclass(frozen=True)
class LabelRule:
    kind: str = "boolean"  # boolean | values | threshold
    correct: tuple[Any, ...] = ()
    wrong: tuple[Any, ...] = ()
    threshold: float = 0.5
    missing: str = "error"  # error | no_label


@dataclass(frozen=True)
class FieldMap:
    name: str
    file: Path
    at: str
    by: str  # key | item | row
    item_conversation: str
    item_rows: str
    fields: dict[str, str]
    label: LabelRule
    match: str  # conversation_text | question_id
    ordered: bool
    own_rule: str
    stated: tuple[str, ...]
    benchmarks: tuple[str, ...]
    labels: Optional[dict[str, str]] = None
    builtin: bool = False


def _map_error(path: Path, key: str, msg: str) -> SourceError:
    return SourceError(f"{path}: {key}: {msg}")


def _str(path: Path, key: str, value: Any, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str) or (not allow_empty and not value):
        raise _map_error(path, key, f"expected a {'non-empty ' if not allow_empty else ''}string, got {value!r}")
    return value


def _known(path: Path, where: str, got: dict[str, Any], allowed: Sequence[str]) -> None:
    for key in got:
        if key not in allowed:
            raise _map_error(path, f"{where}{key}", f"unknown key (known: {', '.join(allowed)})")


def load_map(fmt: str | Path) -> FieldMap:
    """A built-in map by name, or a YAML map file by path; validated (one-line errors)."""
    text = str(fmt)
    builtin = text in NEW_FORMATS
    path = MAP_DIR / f"{text}.yaml" if builtin else Path(text)
    if not builtin and not (text.endswith((".yaml", ".yml")) or path.is_file()):
        known = ", ".join(("locomo-audit", "longmemeval", "export", *NEW_FORMATS))
        raise SourceError(f"unknown format {text!r}; known: {known}, or a field map YAML file")
    if not path.is_file():
        raise SourceError(f"{path}: field map not found")
    try:
        doc = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SourceError(f"{path}: not YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(doc, dict):
        raise SourceError(f"{path}: expected a mapping of format, rows, fields, label, match ...")
    _known(path, "", doc, sorted(KEYS))
    rows = doc.get("rows") or {}
    if not isinstance(rows, dict):
        raise _map_error(path, "rows", "expected a mapping (at, by, item_conversation, item_rows)")
    _known(path, "rows.", rows, ("at", "by", "item_conversation", "item_rows"))
    by = rows.get("by", "row")
    if by not in ("key", "item", "row"):
        raise _map_error(path, "rows.by", f"expected key, item or row, got {by!r}")
    if by == "item":
        for k in ("item_conversation", "item_rows"):
            _str(path, f"rows.{k}", rows.get(k), allow_empty=False)
    fields = doc.get("fields")
    if not isinstance(fields, dict):
        raise _map_error(path, "fields", "expected a mapping of a field name to a dotted path in a row")
    _known(path, "fields.", fields, FIELDS)
    for k, v in fields.items():
        if v is not None:
            _str(path, f"fields.{k}", v, allow_empty=False)
    fields = {k: v for k, v in fields.items() if v is not None}
    for k in ("question", "answer"):
        if k not in fields:
            raise _map_error(path, f"fields.{k}", "missing (required)")
    labels = doc.get("labels")
    if labels is not None:
        if not isinstance(labels, dict):
            raise _map_error(path, "labels", "expected a mapping (at, question_id, label)")
        _known(path, "labels.", labels, ("at", "question_id", "label"))
        for k in ("question_id", "label"):
            _str(path, f"labels.{k}", labels.get(k), allow_empty=False)
        _str(path, "labels.at", labels.get("at", ""))
        if "question_id" not in fields:
            raise _map_error(path, "fields.question_id", "missing: labels in a second file are joined by it")
    elif "label" not in fields:
        raise _map_error(path, "fields.label", "missing (or give labels: for a second file of labels)")
    if by == "row" and "conversation" not in fields and "question_id" not in fields:
        raise _map_error(path, "fields.conversation", "missing: flat rows need a conversation or a question_id")
    rule = doc.get("label") or {}
    if not isinstance(rule, dict):
        raise _map_error(path, "label", "expected a mapping (kind, correct, wrong, threshold, missing)")
    _known(path, "label.", rule, ("kind", "correct", "wrong", "threshold", "missing"))
    kind = rule.get("kind", "boolean")
    if kind not in ("boolean", "values", "threshold"):
        raise _map_error(path, "label.kind", f"expected boolean, values or threshold, got {kind!r}")
    if kind == "values":
        for k in ("correct", "wrong"):
            if not isinstance(rule.get(k), list) or not rule[k]:
                raise _map_error(path, f"label.{k}", "expected a non-empty list of values")
    threshold = rule.get("threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise _map_error(path, "label.threshold", f"expected a number, got {threshold!r}")
    missing = rule.get("missing", "error")
    if missing not in ("error", "no_label"):
        raise _map_error(path, "label.missing", f"expected error or no_label, got {missing!r}")
    match = doc.get("match", "question_id" if "question_id" in fields else "conversation_text")
    if match not in ("conversation_text", "question_id"):
        raise _map_error(path, "match", f"expected conversation_text or question_id, got {match!r}")
    if match == "question_id" and "question_id" not in fields:
        raise _map_error(path, "fields.question_id", "missing: match question_id needs it")
    if match == "conversation_text" and by == "row" and "conversation" not in fields:
        raise _map_error(path, "fields.conversation", "missing: match conversation_text on flat rows needs it")
    ordered = doc.get("ordered", False)
    if not isinstance(ordered, bool):
        raise _map_error(path, "ordered", f"expected true or false, got {ordered!r}")
    stated = doc.get("stated") or []
    if not isinstance(stated, list) or not all(isinstance(s, str) for s in stated):
        raise _map_error(path, "stated", "expected a list of top-level field names")
    benchmarks = doc.get("benchmarks") or ["locomo", "longmemeval"]
    if not isinstance(benchmarks, list) or not set(benchmarks) <= {"locomo", "longmemeval"}:
        raise _map_error(path, "benchmarks", f"expected a list of locomo, longmemeval; got {benchmarks!r}")
    return FieldMap(
        name=_str(path, "format", doc.get("format", path.stem), allow_empty=False), file=path,
        at=_str(path, "rows.at", rows.get("at", "")), by=by,
        item_conversation=str(rows.get("item_conversation", "")), item_rows=str(rows.get("item_rows", "")),
        fields=fields, label=LabelRule(kind, tuple(rule.get("correct") or ()), tuple(rule.get("wrong") or ()),
                                       float(threshold), missing),
        match=match, ordered=ordered, own_rule=_str(path, "own_rule", doc.get("own_rule", "correct rows / all rows")),
        stated=tuple(stated), benchmarks=tuple(benchmarks), labels=labels, builtin=builtin)


def is_map_format(fmt: Optional[str]) -> bool:
    """A format read by a field map: a built-in map's name or a YAML file."""
    return bool(fmt) and (fmt in NEW_FORMATS or str(fmt).endswith((".yaml", ".yml")))


# ----------------------------------------------------------------------------- the files
def source_files(source: Path) -> list[Path]:
    """The files of a source: the file itself, a directory's files, or a glob's matches (sorted)."""
    text = str(source)
    if source.is_file():
        return [source]
    if source.is_dir():
        files = sorted(p for p in source.iterdir() if p.is_file() and not p.name.startswith("."))
    elif any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text) if Path(p).is_file())
    else:
        raise SourceError(f"{source}: not found")
    if not files:
        raise SourceError(f"{source}: no files")
    return files


def source_sha256(source: Path) -> str:
    """The sha256 of a file; of a directory or glob: of its files' names and sha256s, in order."""
    files = source_files(source)
    if len(files) == 1 and files[0] == source:
        return sha256_file(source)
    return hashlib.sha256("".join(f"{sha256_file(p)}  {p.name}\n" for p in files).encode()).hexdigest()


def read_doc(source: Path) -> Any:
    """The JSON document of ``source`` (gzip-compressed when it ends in .gz; JSONL: a list of rows)."""
    try:
        raw = gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_bytes()
        text = raw.decode("utf-8")
        if source.name.removesuffix(".gz").endswith(".jsonl"):
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return json.loads(text)
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


def dig(obj: Any, dotted: str) -> Any:
    """The value at a dotted path (``metrics.detailed_results``), ``_MISSING`` when absent."""
    for part in dotted.split(".") if dotted else []:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


def _rows_of(source: Path, doc: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
        raise _fail(source, where, "expected a list of row objects")
    return doc


def _text(source: Path, where: str, row: dict[str, Any], key: str, *, optional: bool = False) -> Optional[str]:
    value = dig(row, key)
    if value is _MISSING:
        if optional:
            return None
        raise _fail(source, f"{where}.{key}", "missing")
    if value is None and optional:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # LoCoMo has integer answers; the published files keep them as numbers
    if not isinstance(value, str):
        raise _fail(source, f"{where}.{key}", f"expected a string, got {value!r}")
    return value


def _category(source: Path, where: str, key: str, value: Any) -> Optional[int]:
    if value is None or value is _MISSING:
        return None
    try:
        c = int(value)
    except (TypeError, ValueError):
        raise _fail(source, f"{where}.{key}", f"expected a LoCoMo category 1..5, got {value!r}") from None
    if str(c) != str(value).strip() or not 1 <= c <= 5:
        raise _fail(source, f"{where}.{key}", f"expected a LoCoMo category 1..5, got {value!r}")
    return c


def _same(a: Any, b: Any) -> bool:
    """Equal, a boolean only to a boolean (``True`` is not the label ``1``)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def read_label(source: Path, where: str, key: str, value: Any, rule: LabelRule) -> Optional[int]:
    """1 correct, 0 wrong, None no label (``missing: no_label``); else a one-line error."""
    if value is _MISSING or value is None:
        if rule.missing == "no_label":
            return None
        value = "missing" if value is _MISSING else None
    if rule.kind == "boolean":
        if not isinstance(value, bool):
            nulls = ", false or null" if rule.missing == "no_label" else " or false"
            raise _fail(source, f"{where}.{key}", f"expected true{nulls}, got {value!r}")
        return int(value)
    if rule.kind == "values":
        if any(_same(value, c) for c in rule.correct):
            return 1
        if any(_same(value, w) for w in rule.wrong):
            return 0
        allowed = " or ".join(repr(v) if isinstance(v, str) else json.dumps(v) for v in rule.correct + rule.wrong)
        raise _fail(source, f"{where}.{key}", f"expected {allowed}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(source, f"{where}.{key}", f"expected a number (correct at >= {rule.threshold:g}), got {value!r}")
    return int(value >= rule.threshold)


def _flag(source: Path, where: str, key: str, value: Any) -> bool:
    if value is _MISSING:
        return False
    if not isinstance(value, bool):
        raise _fail(source, f"{where}.{key}", f"expected true or false, got {value!r}")
    return value


def _conversations(source: Path, doc: Any, fm: FieldMap) -> list[tuple[Optional[str], str, list[dict[str, Any]]]]:
    """(conversation key or None, where-prefix, rows) per conversation of one document."""
    container = dig(doc, fm.at)
    at = fm.at or "the document"
    if fm.by == "key":
        if not isinstance(container, dict):
            raise _fail(source, at, "expected an object mapping a conversation key to a list of rows")
        return [(str(k), str(k), _rows_of(source, rows, str(k))) for k, rows in container.items()]
    if fm.by == "item":
        if not isinstance(container, list):
            raise _fail(source, at, "expected a list of per-conversation items")
        out: list[tuple[Optional[str], str, list[dict[str, Any]]]] = []
        parts = fm.item_rows.split(".")
        for i, item in enumerate(container):
            for depth in range(1, len(parts)):
                head = ".".join(parts[:depth])
                if not isinstance(dig(item, head), dict):
                    raise _fail(source, f"{fm.at}[{i}].{head}", "expected an object")
            conv = dig(item, fm.item_conversation)
            if conv is _MISSING or conv is None:
                raise _fail(source, f"{fm.at}[{i}].{fm.item_conversation}", "missing: names no conversation")
            conv_text = str(conv)
            rows = dig(item, fm.item_rows) if isinstance(item, dict) else _MISSING
            out.append((conv_text, f"{fm.at}[{i}]({conv_text}).{parts[-1]}",
                        _rows_of(source, None if rows is _MISSING else rows, f"{fm.at}[{i}].{fm.item_rows}")))
        return out
    if not isinstance(container, list):
        raise _fail(source, at, "expected a list of rows")
    return [(None, "line" if source.name.removesuffix(".gz").endswith(".jsonl") and not fm.at else fm.at or "rows",
             _rows_of(source, container, at))]


def _read_labels(path: Path, fm: FieldMap) -> dict[str, Any]:
    """question id -> its raw label, from the second file (``labels``)."""
    spec = fm.labels or {}
    out: dict[str, Any] = {}
    for file in source_files(path):
        doc = read_doc(file)
        container = dig(doc, spec.get("at", ""))
        for j, row in enumerate(_rows_of(file, None if container is _MISSING else container, spec.get("at") or "rows")):
            qid = dig(row, spec["question_id"])
            if qid is _MISSING or qid is None:
                raise _fail(file, f"[{j}].{spec['question_id']}", "missing")
            if str(qid) in out:
                raise _fail(file, f"[{j}].{spec['question_id']}", f"{qid!r} appears twice")
            out[str(qid)] = dig(row, spec["label"])
    return out


def read_rows(fm: FieldMap, source: Path, memories: Memories, benchmark: str,
              labels_file: Optional[Path] = None) -> tuple[list[PublishedRow], dict[str, Any]]:
    """Every row of ``source`` (a file, a directory or a glob) as ``PublishedRow``, and the stated numbers."""
    f = fm.fields
    labels = _read_labels(labels_file, fm) if labels_file is not None else None
    if fm.labels is not None and labels is None:
        raise SourceError(f"{fm.file}: labels: the map keeps its labels in a second file: pass it with --labels")
    files = source_files(source)
    out: list[PublishedRow] = []
    stated: dict[str, Any] = {}
    for file in files:
        doc = read_doc(file)
        prefix = f"{file.name}:" if len(files) > 1 else ""
        if isinstance(doc, dict):
            for k in fm.stated:
                if k in doc and (len(files) == 1 or k not in stated):
                    stated[k] = doc[k]
        for conv, where0, rows in _conversations(file, doc, fm):
            memory_of_conv = memories(file, conv) if conv is not None else None
            for j, row in enumerate(rows):
                where = f"{prefix}{where0} {j + 1}" if where0 == "line" else f"{prefix}{where0}[{j}]"
                memory = memory_of_conv
                if "conversation" in f:
                    value = file.name.split(".")[0] if f["conversation"] == "@file" else dig(row, f["conversation"])
                    if value is _MISSING or value is None:
                        raise _fail(file, f"{where}.{f['conversation']}", "missing")
                    memory = memories(file, str(value))
                qid = None
                if "question_id" in f:
                    raw = dig(row, f["question_id"])
                    if raw is _MISSING or raw is None:
                        raise _fail(file, f"{where}.{f['question_id']}", "missing")
                    qid = str(raw)
                    if memory is None:
                        memory = memories.of_qid.get(qid, "")
                excluded = _flag(file, where, f["excluded"], dig(row, f["excluded"])) if "excluded" in f else False
                if labels is not None and fm.labels is not None:  # a question without a label: a failure
                    raw_label = labels.get(str(qid), _MISSING)
                    label = None if excluded or raw_label is _MISSING else read_label(
                        labels_file or file, str(qid), fm.labels["label"], raw_label, fm.label)
                else:
                    label = None if excluded else read_label(file, where, f["label"], dig(row, f["label"]), fm.label)
                position = dig(row, f["position"]) if "position" in f else None
                if position is _MISSING:
                    position = None
                if position is not None and (isinstance(position, bool) or not isinstance(position, int)):
                    raise _fail(file, f"{where}.{f['position']}", f"expected an integer, got {position!r}")
                score = dig(row, f["score"]) if "score" in f else None
                if score is _MISSING:
                    score = None
                if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
                    raise _fail(file, f"{where}.{f['score']}", f"expected a number, got {score!r}")
                qtype = _text(file, where, row, f["question_type"], optional=True) if "question_type" in f else None
                out.append(PublishedRow(
                    where, memory or "", str(_text(file, where, row, f["question"])),
                    None if excluded else _text(file, where, row, f["answer"]), label,
                    gold=_text(file, where, row, f["gold"], optional=True) if "gold" in f else None,
                    category=_category(file, where, f["category"], dig(row, f["category"]))
                    if "category" in f and benchmark == "locomo" else None,
                    position=position, excluded=f["excluded"] if excluded else "", qid=qid, question_type=qtype,
                    score=None if score is None else float(score)))
    return out, stated


def parse(fmt: str, source: Path, questions: Sequence[Question], gold: Sequence[Gold], benchmark: str,
          labels: Optional[Path] = None) -> Parsed:
    """Read ``source`` by the field map ``fmt`` and map its rows onto the WHOLE benchmark file's qids."""
    fm = load_map(fmt)
    if benchmark not in fm.benchmarks:
        raise SourceError(f"{source}: format {fm.name} is not a {benchmark} format (--benchmark)")
    rows, stated = read_rows(fm, source, Memories(questions), benchmark, labels)
    if not rows:
        raise SourceError(f"{source}: no rows")
    by_id = fm.match == "question_id"
    mapping = map_rows([SourceRow(r.where, r.memory_id, r.question, r.category, r.gold, r.position,
                                  qid=r.qid if by_id else None, question_type=r.question_type) for r in rows],
                       questions, gold, ordered=fm.ordered)
    return Parsed(fm.name, rows, mapping, fm.own_rule, stated)
