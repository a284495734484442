"""The importer's readers: the rows of each published format (locomo-audit, LongMemEval's
eval-results, this harness's export), each checked against the benchmark file, one error line
naming the file and the field (``common.pipeline.importer`` writes them as a run)."""
from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.core.io import read_json, read_jsonl
from common.pipeline import export
from common.pipeline.formats import SourceError

QUESTION_ID = re.compile(r"locomo_(\d+)_qa(\d+)")
JUDGMENT = re.compile(r"judgment_(\d+)")


def fail(source: Path, where: str, msg: str) -> SourceError:
    return SourceError(f"{source}: {where}: {msg}")


def judgment_labels(source: Path, where: str, judgments: Any) -> list[Optional[int]]:
    if judgments == {}:  # a file without published labels (the judge audit's gold set)
        return []
    if not isinstance(judgments, dict):
        raise fail(source, f"{where}.llm_judgments", f"expected an object of judgment_<i>: bool, got {judgments!r}")
    runs: dict[int, Optional[int]] = {}
    for key, value in judgments.items():
        m = JUDGMENT.fullmatch(key)
        if m is None:
            raise fail(source, f"{where}.llm_judgments.{key}", "expected keys judgment_1 .. judgment_N")
        if not isinstance(value, bool):
            raise fail(source, f"{where}.llm_judgments.{key}", f"expected true or false, got {value!r}")
        runs[int(m.group(1))] = int(value)
    if sorted(runs) != list(range(1, len(runs) + 1)):
        raise fail(source, f"{where}.llm_judgments", f"judgment numbers {sorted(runs)} are not 1..{len(runs)}")
    return [runs[i] for i in sorted(runs)]


def locomo_audit_rows(source: Path, doc: dict[str, Any], questions: list[dict[str, Any]],
                       gold: dict[str, dict[str, Any]]) -> list[tuple[str, str, Optional[str], list[Optional[int]]]]:
    """(qid, question, generated answer, labels) per source row, checked against the benchmark."""
    memories = list(dict.fromkeys(q["memory_id"] for q in questions))  # file order of locomo10.json
    text = {q["qid"]: q["question"] for q in questions}
    detailed = doc.get("detailed_results")
    if not isinstance(detailed, dict):
        raise fail(source, "detailed_results", "expected an object mapping a user key to a list of rows")
    out: list[tuple[str, str, Optional[str], list[Optional[int]]]] = []
    seen: dict[str, str] = {}
    n_runs = None
    for user, rows in detailed.items():
        if not isinstance(rows, list):
            raise fail(source, f"detailed_results.{user}", "expected a list of rows")
        for j, row in enumerate(rows):
            where = f"detailed_results.{user}[{j}]"
            if not isinstance(row, dict):
                raise fail(source, where, "expected an object")
            for field in ("question_id", "question", "generated_answer", "llm_judgments", "category"):
                if field not in row:
                    raise fail(source, f"{where}.{field}", "missing")
            m = QUESTION_ID.fullmatch(str(row["question_id"]))
            if m is None:
                raise fail(source, f"{where}.question_id", f"expected locomo_<c>_qa<i>, got {row['question_id']!r}")
            c, i = int(m.group(1)), int(m.group(2))
            if c >= len(memories):
                raise fail(source, f"{where}.question_id",
                            f"{row['question_id']}: conversation index {c} but the benchmark file has {len(memories)}")
            qid = f"{memories[c]}:q{i + 1:04d}"
            if qid not in text:
                raise fail(source, f"{where}.question_id", f"{row['question_id']} -> {qid}: no such question")
            if row["question"] != text[qid]:
                raise fail(source, f"{where}.question",
                            f"{row['question_id']} -> {qid}: text {row['question']!r} differs from the "
                            f"benchmark's {text[qid]!r}")
            if str(row["category"]) != str(gold[qid]["category"]):
                raise fail(source, f"{where}.category", f"{row['question_id']} -> {qid}: category "
                            f"{row['category']!r} differs from the benchmark's {gold[qid]['category']}")
            if qid in seen:
                raise fail(source, f"{where}.question_id", f"{row['question_id']} also at {seen[qid]}")
            seen[qid] = where
            labels = judgment_labels(source, where, row["llm_judgments"])
            if n_runs is not None and len(labels) != n_runs:
                raise fail(source, f"{where}.llm_judgments", f"{len(labels)} judgments, earlier rows have {n_runs}")
            n_runs = len(labels)
            answer = row["generated_answer"]
            if answer is not None and not isinstance(answer, str):
                raise fail(source, f"{where}.generated_answer", f"expected a string, got {answer!r}")
            out.append((qid, text[qid], answer, labels))
    return out


def longmemeval_rows(source: Path,
                      questions: list[dict[str, Any]]) -> list[tuple[str, str, Optional[str], list[Optional[int]]]]:
    """(qid, question, hypothesis, labels) from the official eval-results JSONL."""
    text = {q["qid"]: q["question"] for q in questions}
    out: list[tuple[str, str, Optional[str], list[Optional[int]]]] = []
    seen: set[str] = set()
    for n, row in enumerate(read_jsonl(source), 1):
        where = f"line {n}"
        qid = row.get("question_id")
        if not isinstance(qid, str):
            raise fail(source, f"{where}.question_id", f"expected a string, got {qid!r}")
        if qid not in text:
            raise fail(source, f"{where}.question_id", f"{qid!r} is not a question of the benchmark file")
        if qid in seen:
            raise fail(source, f"{where}.question_id", f"{qid!r} appears twice")
        seen.add(qid)
        hyp = row.get("hypothesis")
        if not isinstance(hyp, str):
            raise fail(source, f"{where}.hypothesis", f"expected a string, got {hyp!r}")
        raw = row.get("autoeval_labels") or ([row["autoeval_label"]] if "autoeval_label" in row else [])
        labels: list[Optional[int]] = []
        for k, lab in enumerate(raw):
            value = lab.get("label") if isinstance(lab, dict) else None
            if not isinstance(value, bool):
                raise fail(source, f"{where}.autoeval_label[{k}].label", f"expected true or false, got {value!r}")
            labels.append(int(value))
        out.append((qid, text[qid], hyp, labels))
    return out


def export_doc(source: Path, benchmark: str) -> dict[str, Any]:
    """An export's rows and its manifest (``common.pipeline.export``), checked for its format."""
    manifest_path = source.parent / export.MANIFEST
    if not manifest_path.is_file():
        raise SourceError(f"{source}: no {export.MANIFEST} beside it: not an export of this harness")
    doc = read_json(manifest_path, SourceError)
    if not isinstance(doc, dict) or doc.get("format") != export.FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else doc
        raise fail(manifest_path, "format", f"expected {export.FORMAT!r}, got {got!r}")
    if doc.get("benchmark") != benchmark:
        raise fail(manifest_path, "benchmark",
                    f"the export is of {doc.get('benchmark')!r}, not {benchmark} (--benchmark)")
    rows = read_jsonl(source)
    judges = sorted({j for r in rows for j in (r.get("judges") or {})})
    return {"manifest": doc, "rows": rows, "judges": judges}


def export_rows(source: Path, exported: dict[str, Any], every: list[dict[str, Any]], full: Any, benchmark: str,
                 judge: Optional[str], errors: dict[str, str]
                 ) -> tuple[list[tuple[str, str, Optional[str], list[Optional[int]]]], dict[str, str],
                            dict[str, dict[str, tuple[list[Optional[int]], str, str]]]]:
    """(qid, question, answer, labels of ``judge``) per exported row; answer errors; the other judges' labels."""
    text = {q["qid"]: q["question"] for q in every}
    data = adapter(benchmark)
    category = {g.qid: data.category(g) for g in full.gold}
    if judge is not None and exported["judges"] and judge not in exported["judges"]:
        raise SourceError(f"{source}: no judge {judge!r} in the export (it has {', '.join(exported['judges'])})")
    out: list[tuple[str, str, Optional[str], list[Optional[int]]]] = []
    answer_errors: dict[str, str] = {}
    others: dict[str, dict[str, tuple[list[Optional[int]], str, str]]] = {}
    scores: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)  # judge -> qid -> scores
    seen: set[str] = set()
    for n, row in enumerate(exported["rows"], 1):
        where = f"line {n}"
        qid = row.get("qid")
        if qid not in text:
            raise fail(source, f"{where}.qid", f"{qid!r} is not a question of the benchmark file")
        if qid in seen:
            raise fail(source, f"{where}.qid", f"{qid!r} appears twice")
        seen.add(qid)
        if row.get("question") != text[qid]:
            raise fail(source, f"{where}.question",
                        f"{qid}: text {row.get('question')!r} differs from the benchmark's")
        if row.get("category") is not None and qid in category and row["category"] != category[qid]:
            raise fail(source, f"{where}.category", f"{qid}: {row['category']!r} differs from the benchmark's "
                                                     f"{category[qid]!r}")
        judged = row.get("judges") or {}
        if not isinstance(judged, dict):
            raise fail(source, f"{where}.judges", "expected an object of judge name: {label, labels, ...}")
        labels_of: dict[str, tuple[list[Optional[int]], str, str]] = {}
        for name, block in judged.items():
            label, runs = block.get("label"), block.get("labels") or []
            for k, v in enumerate([label, *runs]):
                if v not in (0, 1, None) or isinstance(v, bool):
                    raise fail(source, f"{where}.judges.{name}.{'label' if k == 0 else f'labels[{k - 1}]'}",
                                f"expected 1, 0 or null, got {v!r}")
            error = str(block.get("error") or "")
            if label is None and not error:
                error = f"no_label_in_file: exported row {where} has no label"
            labels_of[name] = (list(runs) or [label], error, str(block.get("judge_model") or "not stated"))
            if block.get("scores") is not None:  # a rubric judge's fractional scores (BEAM), kept as they are
                scores[name][qid] = export_scores(source, f"{where}.judges.{name}.scores", block["scores"])
        answer = row.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise fail(source, f"{where}.answer", f"expected a string or null, got {answer!r}")
        if row.get("answer_error"):
            answer_errors[qid] = str(row["answer_error"])
        if judge is not None and judge in labels_of:
            labels, error, _ = labels_of.pop(judge)
            if error:
                errors[qid] = error
        else:
            labels = []
            if judge is not None and exported["judges"]:
                continue  # not judged by the main judge (an unscored question): left out as 09 leaves it
        for name, value in labels_of.items():
            others.setdefault(name, {})[qid] = value
        out.append((qid, text[qid], answer, labels))
    exported["scores"] = dict(scores)
    return out, answer_errors, others


def export_scores(source: Path, where: str, value: Any) -> dict[str, Any]:
    """An exported rubric judge's ``scores`` ({variant: number in [0, 1] or null, headline}) as
    ``JudgeRow.scores`` holds them (``common.evaluation.beam``)."""
    if not isinstance(value, dict):
        raise fail(source, where, f"expected an object of scoring variant: score, got {value!r}")
    for v in export.SCORE_VARIANTS:
        x = value.get(v)
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1):
            raise fail(source, f"{where}.{v}", f"expected a number in [0, 1] or null, got {x!r}")
    headline = value.get("headline")
    if headline not in (None, *export.SCORE_VARIANTS):
        raise fail(source, f"{where}.headline",
                    f"expected one of {', '.join(export.SCORE_VARIANTS)}, got {headline!r}")
    return {v: value.get(v) for v in export.SCORE_VARIANTS} | ({"headline": headline} if headline else {})
