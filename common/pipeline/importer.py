"""Import a published per-question result file as an ordinary run directory.

``python -m common.import_run FILE --run NAME`` turns someone else's run into
``results/<benchmark>/<NAME>/`` with the files this harness writes itself: ``01_*`` from the
benchmark file (as 01_preprocess writes them), ``07_answer.jsonl`` (the published answers),
``08_judge_<judge>.jsonl`` (the published labels; several labels per answer go to the ``labels``
column, ``label`` being their majority, as ``judge.runs`` writes them), ``config.resolved.yaml``
and ``fingerprint.json``. Its RUN fingerprint hashes the source file's sha256 and the published
judge and answer prompts (not this harness's prompts), so ``09_aggregate``, ``make compare``,
statistics and another judge (``08_judge`` with a new ``judge.name``) work on it unchanged,
while stages that would re-derive its answers refuse to run (``engine.IMPORTED_RUN_STAGES``).

Formats:

* ``locomo-audit``: ``eval_results.json`` / ``ap_eval_results_scored.json`` of dial481/locomo-audit
  (``detailed_results`` maps a user key to rows ``question_id, question, golden_answer,
  generated_answer, llm_judgments{judgment_1..N}, category``). ``locomo_<c>_qa<i>`` is
  conversation c in file order of locomo10.json and 0-based qa index i, so ``conv-26:q<i+1>``;
  the question text and category must match the benchmark file (a mismatch is an error naming
  the row). The ``ap-baseline`` answers were written from the answer key: their answer manifest
  says ``reads_gold: true``.
* ``longmemeval``: the official ``eval-results`` JSONL of LongMemEval's ``evaluate_qa.py``
  (rows ``question_id, hypothesis, autoeval_label{model, label}``; several label runs may be
  given as ``autoeval_labels``, a list of such objects).
* ``export``: this harness's own ``export/questions.jsonl`` (``common.pipeline.export``), every
  judge under its own name, rows by ``qid`` (text and category checked).
* ``zep``, ``mem0``, ``hindsight`` or a field map YAML file (``--format``): read by the
  declarative maps of ``common.pipeline.formats`` (``configs/import_formats/``); rows map to a qid
  by id, or by conversation and normalised question text, and a row that maps to no question or
  to several is left out and listed, never guessed. Their labels are judge ``published``.

Every import also writes ``source.json``: the file and its sha256, the repository, path and
commit it was read from, the ``configs/claims.yaml`` claim it backs (``--claim``), the file's own
accuracy recomputed by its own rule from all its rows, and every unmapped row with its label.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.benchmarks.subset import load_selected
from common.core import fingerprint, progress
from common.core.config import ConfigError, load_config
from common.core.io import read_json, read_jsonl, sha256_file, write_json, write_jsonl
from common.core.schema import AnswerRow, JudgeRow, to_dict
from common.core.yamlio import load_yaml
from common.evaluation.claims import Claim, get_claim
from common.evaluation.coverage import Coverage, of_benchmark
from common.evaluation.repeats import majority
from common.pipeline import export, formats, stages
from common.pipeline.engine import Run, manifest, run_stage
from common.pipeline.formats import SourceError
from common.pipeline.graph import IDS as ID
from common.pipeline.graph import by_name

QUESTION_ID = re.compile(r"locomo_(\d+)_qa(\d+)")
JUDGMENT = re.compile(r"judgment_(\d+)")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def published_prompts(source: Path, prompts: Optional[Path], answer_prompt: Optional[str]) -> dict[str, Any]:
    """sha256 of the published judge prompt (system + user) and answer prompt, from ``prompts.yaml``.

    Without ``prompts`` the file is looked for next to the source and up to three folders above it
    (its place in the locomo-audit repository); not found is recorded, never guessed.
    """
    if prompts is None:
        for parent in list(source.resolve().parents)[:4]:
            if (parent / "prompts.yaml").exists():
                prompts = parent / "prompts.yaml"
                break
    if prompts is None:
        return {"file": None, "note": "prompts.yaml not found: the published prompts are not fingerprinted"}
    data = load_yaml(prompts.read_text(encoding="utf-8")) or {}
    judge = data.get("llm_judge") or {}
    out: dict[str, Any] = {"file": str(prompts), "file_sha256": sha256_file(prompts)}
    if judge:
        out["judge_prompt_sha256"] = _sha(f"{judge.get('system_prompt', '')}\n{judge.get('user_prompt', '')}")
    answers = (data.get("online_api") or {}).get("default") or {}
    if answer_prompt:
        text = answers.get(answer_prompt)
        out["answer_prompt"] = answer_prompt
        out["answer_prompt_sha256"] = _sha(text) if isinstance(text, str) else None
    return out


def _fail(source: Path, where: str, msg: str) -> SourceError:
    return SourceError(f"{source}: {where}: {msg}")


def _labels(source: Path, where: str, judgments: Any) -> list[Optional[int]]:
    if judgments == {}:  # a file without published labels (the judge audit's gold set)
        return []
    if not isinstance(judgments, dict):
        raise _fail(source, f"{where}.llm_judgments", f"expected an object of judgment_<i>: bool, got {judgments!r}")
    runs: dict[int, Optional[int]] = {}
    for key, value in judgments.items():
        m = JUDGMENT.fullmatch(key)
        if m is None:
            raise _fail(source, f"{where}.llm_judgments.{key}", "expected keys judgment_1 .. judgment_N")
        if not isinstance(value, bool):
            raise _fail(source, f"{where}.llm_judgments.{key}", f"expected true or false, got {value!r}")
        runs[int(m.group(1))] = int(value)
    if sorted(runs) != list(range(1, len(runs) + 1)):
        raise _fail(source, f"{where}.llm_judgments", f"judgment numbers {sorted(runs)} are not 1..{len(runs)}")
    return [runs[i] for i in sorted(runs)]


def _locomo_audit_rows(source: Path, doc: dict[str, Any], questions: list[dict[str, Any]],
                       gold: dict[str, dict[str, Any]]) -> list[tuple[str, str, Optional[str], list[Optional[int]]]]:
    """(qid, question, generated answer, labels) per source row, checked against the benchmark."""
    memories = list(dict.fromkeys(q["memory_id"] for q in questions))  # file order of locomo10.json
    text = {q["qid"]: q["question"] for q in questions}
    detailed = doc.get("detailed_results")
    if not isinstance(detailed, dict):
        raise _fail(source, "detailed_results", "expected an object mapping a user key to a list of rows")
    out: list[tuple[str, str, Optional[str], list[Optional[int]]]] = []
    seen: dict[str, str] = {}
    n_runs = None
    for user, rows in detailed.items():
        if not isinstance(rows, list):
            raise _fail(source, f"detailed_results.{user}", "expected a list of rows")
        for j, row in enumerate(rows):
            where = f"detailed_results.{user}[{j}]"
            if not isinstance(row, dict):
                raise _fail(source, where, "expected an object")
            for field in ("question_id", "question", "generated_answer", "llm_judgments", "category"):
                if field not in row:
                    raise _fail(source, f"{where}.{field}", "missing")
            m = QUESTION_ID.fullmatch(str(row["question_id"]))
            if m is None:
                raise _fail(source, f"{where}.question_id", f"expected locomo_<c>_qa<i>, got {row['question_id']!r}")
            c, i = int(m.group(1)), int(m.group(2))
            if c >= len(memories):
                raise _fail(source, f"{where}.question_id",
                            f"{row['question_id']}: conversation index {c} but the benchmark file has {len(memories)}")
            qid = f"{memories[c]}:q{i + 1:04d}"
            if qid not in text:
                raise _fail(source, f"{where}.question_id", f"{row['question_id']} -> {qid}: no such question")
            if row["question"] != text[qid]:
                raise _fail(source, f"{where}.question",
                            f"{row['question_id']} -> {qid}: text {row['question']!r} differs from the "
                            f"benchmark's {text[qid]!r}")
            if str(row["category"]) != str(gold[qid]["category"]):
                raise _fail(source, f"{where}.category", f"{row['question_id']} -> {qid}: category "
                            f"{row['category']!r} differs from the benchmark's {gold[qid]['category']}")
            if qid in seen:
                raise _fail(source, f"{where}.question_id", f"{row['question_id']} also at {seen[qid]}")
            seen[qid] = where
            labels = _labels(source, where, row["llm_judgments"])
            if n_runs is not None and len(labels) != n_runs:
                raise _fail(source, f"{where}.llm_judgments", f"{len(labels)} judgments, earlier rows have {n_runs}")
            n_runs = len(labels)
            answer = row["generated_answer"]
            if answer is not None and not isinstance(answer, str):
                raise _fail(source, f"{where}.generated_answer", f"expected a string, got {answer!r}")
            out.append((qid, text[qid], answer, labels))
    return out


def _longmemeval_rows(source: Path,
                      questions: list[dict[str, Any]]) -> list[tuple[str, str, Optional[str], list[Optional[int]]]]:
    """(qid, question, hypothesis, labels) from the official eval-results JSONL."""
    text = {q["qid"]: q["question"] for q in questions}
    out: list[tuple[str, str, Optional[str], list[Optional[int]]]] = []
    seen: set[str] = set()
    for n, row in enumerate(read_jsonl(source), 1):
        where = f"line {n}"
        qid = row.get("question_id")
        if not isinstance(qid, str):
            raise _fail(source, f"{where}.question_id", f"expected a string, got {qid!r}")
        if qid not in text:
            raise _fail(source, f"{where}.question_id", f"{qid!r} is not a question of the benchmark file")
        if qid in seen:
            raise _fail(source, f"{where}.question_id", f"{qid!r} appears twice")
        seen.add(qid)
        hyp = row.get("hypothesis")
        if not isinstance(hyp, str):
            raise _fail(source, f"{where}.hypothesis", f"expected a string, got {hyp!r}")
        raw = row.get("autoeval_labels") or ([row["autoeval_label"]] if "autoeval_label" in row else [])
        labels: list[Optional[int]] = []
        for k, lab in enumerate(raw):
            value = lab.get("label") if isinstance(lab, dict) else None
            if not isinstance(value, bool):
                raise _fail(source, f"{where}.autoeval_label[{k}].label", f"expected true or false, got {value!r}")
            labels.append(int(value))
        out.append((qid, text[qid], hyp, labels))
    return out


def _export_doc(source: Path, benchmark: str) -> dict[str, Any]:
    """An export's rows and its manifest (``common.pipeline.export``), checked for its format."""
    manifest_path = source.parent / export.MANIFEST
    if not manifest_path.is_file():
        raise SourceError(f"{source}: no {export.MANIFEST} beside it: not an export of this harness")
    doc = read_json(manifest_path, SourceError)
    if not isinstance(doc, dict) or doc.get("format") != export.FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else doc
        raise _fail(manifest_path, "format", f"expected {export.FORMAT!r}, got {got!r}")
    if doc.get("benchmark") != benchmark:
        raise _fail(manifest_path, "benchmark",
                    f"the export is of {doc.get('benchmark')!r}, not {benchmark} (--benchmark)")
    rows = read_jsonl(source)
    judges = sorted({j for r in rows for j in (r.get("judges") or {})})
    return {"manifest": doc, "rows": rows, "judges": judges}


def _export_rows(source: Path, exported: dict[str, Any], every: list[dict[str, Any]], full: Any, benchmark: str,
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
            raise _fail(source, f"{where}.qid", f"{qid!r} is not a question of the benchmark file")
        if qid in seen:
            raise _fail(source, f"{where}.qid", f"{qid!r} appears twice")
        seen.add(qid)
        if row.get("question") != text[qid]:
            raise _fail(source, f"{where}.question",
                        f"{qid}: text {row.get('question')!r} differs from the benchmark's")
        if row.get("category") is not None and qid in category and row["category"] != category[qid]:
            raise _fail(source, f"{where}.category", f"{qid}: {row['category']!r} differs from the benchmark's "
                                                     f"{category[qid]!r}")
        judged = row.get("judges") or {}
        if not isinstance(judged, dict):
            raise _fail(source, f"{where}.judges", "expected an object of judge name: {label, labels, ...}")
        labels_of: dict[str, tuple[list[Optional[int]], str, str]] = {}
        for name, block in judged.items():
            label, runs = block.get("label"), block.get("labels") or []
            for k, v in enumerate([label, *runs]):
                if v not in (0, 1, None) or isinstance(v, bool):
                    raise _fail(source, f"{where}.judges.{name}.{'label' if k == 0 else f'labels[{k - 1}]'}",
                                f"expected 1, 0 or null, got {v!r}")
            error = str(block.get("error") or "")
            if label is None and not error:
                error = f"no_label_in_file: exported row {where} has no label"
            labels_of[name] = (list(runs) or [label], error, str(block.get("judge_model") or "not stated"))
            if block.get("scores") is not None:  # a rubric judge's fractional scores (BEAM), kept as they are
                scores[name][qid] = _export_scores(source, f"{where}.judges.{name}.scores", block["scores"])
        answer = row.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise _fail(source, f"{where}.answer", f"expected a string or null, got {answer!r}")
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


def _export_scores(source: Path, where: str, value: Any) -> dict[str, Any]:
    """An exported rubric judge's ``scores`` ({variant: number in [0, 1] or null, headline}) as
    ``JudgeRow.scores`` holds them (``common.evaluation.beam``)."""
    if not isinstance(value, dict):
        raise _fail(source, where, f"expected an object of scoring variant: score, got {value!r}")
    for v in export.SCORE_VARIANTS:
        x = value.get(v)
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x <= 1):
            raise _fail(source, f"{where}.{v}", f"expected a number in [0, 1] or null, got {x!r}")
    headline = value.get("headline")
    if headline not in (None, *export.SCORE_VARIANTS):
        raise _fail(source, f"{where}.headline",
                    f"expected one of {', '.join(export.SCORE_VARIANTS)}, got {headline!r}")
    return {v: value.get(v) for v in export.SCORE_VARIANTS} | ({"headline": headline} if headline else {})


SOURCE_FILE = "source.json"  # in the run directory: where the rows came from, the claim, unmapped rows


def _model(stated: Optional[str]) -> Optional[str]:
    """A model name from a registry text such as ``gpt-4o-mini (zep_locomo_eval.py, ...)``."""
    if not stated or stated.startswith("not stated"):
        return None
    return stated.split(" (")[0].split(",")[0].strip() or None


def import_run(source: Path, run_name: str, *, benchmark: str = "locomo", judge: Optional[str] = None,
               answer_model: Optional[str] = None, judge_model: Optional[str] = None,
               prompts: Optional[Path] = None, config: Optional[str] = None, overrides: tuple[str, ...] = (),
               force: bool = False, reuse: bool = False, aggregate: bool = True,
               reads_gold: Optional[bool] = None, fmt: Optional[str] = None, claim_id: Optional[str] = None,
               origin: Optional[dict[str, Optional[str]]] = None, labels_file: Optional[Path] = None) -> Path:
    """Write the run directory of ``source``; returns it. Runs ``09_aggregate`` on it at the end.

    ``fmt``: the file's format (default ``locomo-audit`` for LoCoMo, ``longmemeval`` for
    LongMemEval; ``export``: this harness's own export, every judge; ``zep``, ``mem0``, ``hindsight``
    or a field map YAML file: ``common.pipeline.formats``, ``labels_file`` the map's second file of
    labels; a map format's source may be a directory or a glob). ``claim_id``: the
    ``configs/claims.yaml`` entry the file backs (its models and per-question source are the
    defaults). ``origin``: repository, path and commit the file was read from (default: the
    claim's). ``reuse``: a directory already imported from a file with the same sha256 is kept as
    it is (the judge audit resumes in it). ``aggregate=False`` leaves 09 to the caller.
    """
    started = time.time()
    fmt = fmt or ("locomo-audit" if benchmark == "locomo" else "longmemeval")
    new_format = formats.is_map_format(fmt)
    field_map = formats.load_map(fmt) if new_format else None
    if fmt == "export" and source.is_dir():
        source = source / export.QUESTIONS
    if new_format:
        formats.source_files(source)  # a file, a directory or a glob; none: one line
    elif not source.is_file():
        raise SourceError(f"{source}: not found")
    if fmt not in ("locomo-audit", "longmemeval", "export") and not new_format:
        formats.load_map(fmt)  # the one-line "unknown format" error
    if fmt == "longmemeval" and benchmark != "longmemeval" or fmt == "locomo-audit" and benchmark != "locomo" \
            or field_map is not None and benchmark not in field_map.benchmarks:
        raise SourceError(f"{source}: format {fmt} is not a {benchmark} format (--benchmark)")
    try:
        claim = get_claim(claim_id) if claim_id else None
    except ConfigError as exc:
        raise SourceError(str(exc)) from None
    if claim is not None and claim.benchmark != benchmark:
        raise SourceError(f"claim {claim.id} is a {claim.benchmark} claim, not {benchmark}")
    exported = _export_doc(source, benchmark) if fmt == "export" else None
    if benchmark == "longmemeval" or new_format or exported is not None:  # read by their own readers below
        doc: dict[str, Any] = {}
    else:
        doc = read_json(source, SourceError)
        if not isinstance(doc, dict):
            raise SourceError(f"{source}: expected a JSON object with detailed_results")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _fail(source, "metadata", "expected an object")
    if benchmark == "longmemeval" and fmt == "longmemeval" and not judge_model:  # the rows name their judge
        first = next(iter(read_jsonl(source)), {})
        label = first.get("autoeval_label") or (first.get("autoeval_labels") or [None])[0]
        judge_model = label.get("model") if isinstance(label, dict) else None
    if claim is not None:
        answer_model = answer_model or _model(claim.answer_model)
        judge_model = judge_model or _model(claim.judge_model)
    if exported is not None:
        answer_model = answer_model or (exported["manifest"].get("models") or {}).get("answer")
        judge = judge or (exported["judges"][0] if exported["judges"] else None)
        judge_model = judge_model or (exported["manifest"].get("judges") or {}).get(judge or "", {}).get("judge_model")
    answer_model = answer_model or meta.get("answer_model") or "not stated"
    judge_model = judge_model or meta.get("judge_model") or (
        "gpt-4o-mini" if benchmark == "locomo" and not new_format else "not stated")
    # The published labels of the new formats are judge "published"; the older formats keep
    # their judge model's name (runs imported before stay as they are).
    judge = judge or ("published" if new_format else re.sub(r"[^A-Za-z0-9._-]+", "-", judge_model))
    answer_prompt = meta.get("answer_prompt")
    # The ap-baseline answers were written by the audit from the answer key (deliberately wrong).
    if reads_gold is None:
        reads_gold = source.name.startswith("ap_eval_results")
    # The import's own settings come last: a user override cannot rename the published judge.
    sets = [*overrides, f"run.name={run_name}", f"models.answer.model={answer_model}",
            f"models.judge.model={judge_model}", f"judge.name={judge}", "method.name=full_context"]
    try:
        cfg = load_config([config or f"configs/{benchmark}.yaml"], sets)
    except ConfigError as exc:
        raise SourceError(f"config error: {exc}") from None
    run = Run(cfg, force=True, progress=progress.interactive())
    before = fingerprint.imported(run.dir) if run.dir.exists() else None
    if reuse and not force and before is not None and before.get("sha256") == formats.source_sha256(source):
        return run.dir
    if run.dir.exists() and any(run.dir.iterdir()):
        if not force:
            raise SourceError(f"{run.dir} exists: choose another --run or pass --force to import over it")
    # Every row is checked before anything is written. Ids map through the WHOLE benchmark file
    # (conversation index = file order); rows outside a selection (data.memories, a limit, a
    # subset) are then left out and counted.
    full = adapter(benchmark).load(adapter(benchmark).data_path(cfg))
    every = [to_dict(q) for q in full.questions]
    errors: dict[str, str] = {}  # qid -> why its published row has no label
    parsed = None
    answer_errors: dict[str, str] = {}  # qid -> the exported answer's own error
    more_judges: dict[str, dict[str, tuple[list[Optional[int]], str, str]]] = {}  # export: other judges
    if exported is not None:
        rows, answer_errors, more_judges = _export_rows(source, exported, every, full, benchmark, judge, errors)
    elif new_format:
        parsed = formats.parse(fmt, source, full.questions, full.gold, benchmark, labels=labels_file)
        text = {q.qid: q.question for q in full.questions}
        rows = []
        for r, qid in zip(parsed.rows, parsed.mapping.qids):
            if qid is None:
                continue
            rows.append((qid, text[qid], r.answer, [r.label]))
            if r.label is None:
                errors[qid] = (f"no_answer: answer_api_error: published row {r.where} is_invalid" if r.excluded
                               else f"no_label_in_file: published row {r.where} has no label")
        if not rows:
            raise SourceError(f"{source}: none of its {len(parsed.rows)} rows maps to a question "
                              f"({parsed.mapping.summary()['unmapped_by_reason']})")
    elif benchmark == "locomo":
        rows = _locomo_audit_rows(source, doc, every, {g.qid: to_dict(g) for g in full.gold})
    else:
        rows = _longmemeval_rows(source, every)
    if len({len(r[3]) for r in rows}) > 1:
        raise SourceError(f"{source}: rows carry different numbers of judge labels "
                          f"({sorted({len(r[3]) for r in rows})}); every answer needs the same runs")
    own = _own(parsed, rows)
    selected = {q.qid for q in load_selected(cfg)[1].questions}
    outside = sum(1 for r in rows if r[0] not in selected)
    rows = [r for r in rows if r[0] in selected]
    if not rows:
        raise SourceError(f"{source}: no rows (in the selected questions)")
    if run.dir.exists() and any(run.dir.iterdir()):  # --force: the old protocol record goes with it
        (run.dir / fingerprint.FILE).unlink(missing_ok=True)
    stages.preprocess(run)  # 01_* exactly as a run of this harness writes them
    questions = read_jsonl(run.path("questions"))
    n_runs = len(rows[0][3])
    memory = {q["qid"]: q["memory_id"] for q in questions}
    answer_prompt_id = f"published:{answer_prompt or 'not stated'}"
    judge_prompt_id = ("published:export" if exported is not None
                       else f"published:{field_map.name}" if field_map is not None
                       else "published:llm_judge" if benchmark == "locomo" else "published:official")
    answers = [AnswerRow(qid=qid, memory_id=memory[qid], question=q, answer=a, model=answer_model,
                         prompt_id=answer_prompt_id,
                         error=answer_errors[qid] if qid in answer_errors
                         else errors.get(qid, "").removeprefix("no_answer: ") if qid in errors and a is None
                         else "" if a else "empty_answer: published answer is empty")
               for qid, q, a, _ in rows]
    scores_of = (exported or {}).get("scores") or {}
    judged = [JudgeRow(qid=qid, judge=judge, judge_model=judge_model, prompt_id=judge_prompt_id,
                       label=labels[0] if len(labels) == 1 else majority(labels), parse_ok=qid not in errors,
                       labels=labels if len(labels) > 1 else [], error=errors.get(qid, ""),
                       scores=scores_of.get(judge or "", {}).get(qid) or {})
              for qid, _, _, labels in rows]
    # One stage order for answers and labels: the benchmark's question order.
    order = {q["qid"]: i for i, q in enumerate(questions)}
    answers.sort(key=lambda r: order[r.qid])
    judged.sort(key=lambda r: order[r.qid])
    source_sha = formats.source_sha256(source) if new_format else sha256_file(source)
    if exported is not None:
        prompt_info = {"file": str(source.parent / export.MANIFEST), "exported": exported["manifest"].get("prompts"),
                       "judge_prompts": {j: b.get("prompts") for j, b in
                                         (exported["manifest"].get("judges") or {}).items()}}
    elif new_format:
        prompt_info = {"file": None, "note": f"the {fmt} file names no prompts; see its claim's judge_prompt"}
    else:
        prompt_info = published_prompts(source, prompts, answer_prompt)
    if field_map is not None:
        fmt = field_map.name
    elif exported is None:
        fmt = "locomo-audit" if benchmark == "locomo" else "longmemeval-eval-results"
    published: dict[str, Any] = {"file": str(source), "sha256": source_sha, "format": fmt,
                                 "answer_model": answer_model, "judge_model": judge_model,
                                 "judge_runs": n_runs, "prompts": prompt_info,
                                 "reads_gold": reads_gold,
                                 "metadata": {k: v for k, v in meta.items() if not isinstance(v, dict)}}
    if field_map is not None and not field_map.builtin:  # a user's map: its file is part of the protocol
        published["format_map"] = {"file": str(field_map.file), "sha256": sha256_file(field_map.file)}
    if exported is not None:
        published["exported_run"] = {k: exported["manifest"].get(k) for k in ("run", "fingerprint", "dataset")}
    dataset_sha = fingerprint_dataset(run)
    run_components = {"imported": published, "benchmark": benchmark, "dataset_sha256": dataset_sha}
    stored = {"run": {"id": fingerprint.short(run_components), "components": run_components}}
    judge_components = {"run": stored["run"]["id"], "imported_judge": {
        "judge_model": judge_model, "judge_runs": n_runs,
        "judge_prompt_sha256": prompt_info.get("judge_prompt_sha256")}}
    if n_runs:
        stored[f"judge:{judge}"] = {"id": fingerprint.short(judge_components), "components": judge_components}
    for other, by_qid in more_judges.items():  # an export's other judges, each with its own fingerprint
        comps = {"run": stored["run"]["id"], "imported_judge": {
            "judge_model": next(iter(by_qid.values()))[2], "judge_runs": max(len(v[0]) for v in by_qid.values()),
            "judge_prompt_sha256": None}}
        stored[f"judge:{other}"] = {"id": fingerprint.short(comps), "components": comps}
    write_json(run.dir / fingerprint.FILE, stored)
    data = adapter(benchmark)
    scored = {g.qid for g in full.gold if data.is_scored(g)}
    cov = of_benchmark(benchmark, len(scored & {r[0] for r in rows}))
    checked = stated_checks({**(parsed.stated if parsed else {}), **_stated_meta(meta)}, own)
    record = _source_record(source, source_sha, fmt, judge, claim, origin, parsed, own, outside)
    write_json(run.dir / SOURCE_FILE, {**record, "coverage": cov.to_dict(), "stated_checks": checked})
    write_jsonl(run.path("answers"), (to_dict(a) for a in answers))
    manifest(run, ID["answer"], inputs=[source], outputs=[run.path("answers")], rows=len(answers), started=started,
             extra={"imported_from": str(source), "source_sha256": source_sha, "reads_gold": reads_gold,
                    "rows_outside_selection": outside})
    if n_runs:  # a file with published labels
        write_jsonl(run.judge_path(judge), (to_dict(r) for r in judged))
        manifest(run, by_name("judge").instance(judge), inputs=[source], outputs=[run.judge_path(judge)],
                 rows=len(judged), started=started, extra={"imported_from": str(source),
                                                           "source_sha256": source_sha, "judge_runs": n_runs})
    selected_rows = {r[0] for r in rows}
    for other, by_qid in more_judges.items():
        extra = [JudgeRow(qid=qid, judge=other, judge_model=model, prompt_id=judge_prompt_id,
                          label=labels[0] if len(labels) == 1 else majority(labels), parse_ok=not error,
                          labels=labels if len(labels) > 1 else [], error=error,
                          scores=scores_of.get(other, {}).get(qid) or {})
                 for qid, (labels, error, model) in by_qid.items() if qid in selected_rows]
        extra.sort(key=lambda r: order[r.qid])
        write_jsonl(run.judge_path(other), (to_dict(r) for r in extra))
        manifest(run, by_name("judge").instance(other), inputs=[source], outputs=[run.judge_path(other)],
                 rows=len(extra), started=started, extra={"imported_from": str(source), "source_sha256": source_sha})
    unmapped = len(parsed.mapping.unmapped) if parsed else 0
    for line in _what_it_covers(cov, benchmark, checked):
        print(line, flush=True)
    print(f"import: {len(rows)} answers, {n_runs} judge label(s) each, from {source} -> {run.dir}"
          + (f" ({outside} rows outside the selected questions left out)" if outside else "")
          + (f"; {unmapped} rows map to no single question (listed in {SOURCE_FILE})" if unmapped else ""),
          flush=True)
    if own.get("accuracy") is not None:
        print(f"import: the file's own accuracy {100 * own['accuracy']:.2f}% ({own['rule']})", flush=True)
    if aggregate:
        run_stage(run, "aggregate")
    return run.dir


def _own(parsed: Optional[formats.Parsed], rows: list[tuple[str, str, Optional[str], list[Optional[int]]]]
         ) -> dict[str, Any]:
    """The number the file's own code prints, recomputed from ALL its rows (before any selection)."""
    if parsed is not None:
        return parsed.own_accuracy()
    n_runs = len(rows[0][3]) if rows else 0
    if not n_runs:
        return {"accuracy": None, "rule": "no published labels"}
    per_run = [sum(1 for r in rows if r[3][i] == 1) for i in range(n_runs)]
    n = len(rows)
    return {"k_per_run": per_run, "n": n, "accuracy": sum(k / n for k in per_run) / n_runs, "rows": n,
            "excluded": 0, "rule": "mean over judge runs of correct rows / all rows" if n_runs > 1
            else "correct rows / all rows"}


def _stated_meta(meta: dict[str, Any]) -> dict[str, Any]:
    """The accuracy a locomo-audit file's ``metadata`` states (its own code's printed number)."""
    return {f"metadata.{k}": v for k, v in meta.items() if k in ("mean_accuracy", "overall_accuracy", "accuracy")}


def _decimals(value: float) -> int:
    text = repr(float(value))
    return len(text.split(".")[1]) if "." in text and "e" not in text else 6


def stated_checks(stated: dict[str, Any], own: dict[str, Any]) -> list[dict[str, Any]]:
    """Every accuracy the file states (a top-level ``*accuracy*`` number) beside the one its own rows give.

    A stated value above 1 is a percentage. It is reproduced when the rows' accuracy, rounded
    to the stated value's decimals, is the stated value; otherwise the import says so.
    """
    mine = own.get("accuracy")
    out: list[dict[str, Any]] = []
    for key, value in stated.items():
        if "accuracy" not in key.lower() or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        scale = 100.0 if value > 1 else 1.0
        d = _decimals(value)
        reproduced = mine is not None and abs(round(scale * mine, d) - value) < 0.5 * 10 ** -d + 1e-12
        out.append({"field": key, "stated": value, "own": mine, "scale": "percent" if scale == 100 else "fraction",
                    "reproduced": reproduced, "rule": own.get("rule")})
    return out


def _what_it_covers(cov: Coverage, benchmark: str, checked: list[dict[str, Any]]) -> list[str]:
    """The import's lines on what it covers and whether the file's stated figure is its rows' own."""
    lines = [f"import: covers {cov.text} scored {benchmark} questions"
             + (f" (PARTIAL {cov.text}: the questions without a row count as missing, not as answered)"
                if cov.partial else "")]
    for c in checked:
        own = "n/a" if c["own"] is None else f"{100 * c['own']:.2f}%"
        if not c["reproduced"]:
            lines.append(f"import: WARNING: the file states {c['field']}: {c['stated']} but its own rows give {own} "
                         f"({c['rule']}): the stated figure is not reproduced")
    return lines


def _source_record(source: Path, sha: str, fmt: str, judge: str, claim: Optional[Claim],
                   origin: Optional[dict[str, Optional[str]]], parsed: Optional[formats.Parsed],
                   own: dict[str, Any], outside: int) -> dict[str, Any]:
    """``source.json``: where the rows came from, the claim they back, and every row not mapped."""
    stated = claim.per_question if claim is not None else None
    where = {k: (origin or {}).get(k) or (getattr(stated, k) if stated is not None else None) or "not stated"
             for k in ("repository", "path", "commit")}
    out: dict[str, Any] = {"file": str(source), "sha256": sha, "format": fmt, "judge": judge, "origin": where,
                           "claim": claim.to_dict() if claim is not None else None, "own_accuracy": own,
                           "rows_outside_selection": outside}
    if stated is not None and stated.sha256 and stated.sha256 != sha:
        out["sha256_differs_from_claim"] = stated.sha256
    if parsed is not None:
        m = parsed.mapping
        out["mapping"] = m.summary()
        out["unmapped"] = [dataclasses.asdict(u) for u in m.unmapped]
        by_where = {r.where: r for r in parsed.rows}
        # Their labels and exclusions: the file's own number counts them (make claims recomputes it).
        out["unmapped_labels"] = {u.where: {"label": by_where[u.where].label, "excluded": by_where[u.where].excluded}
                                  for u in m.unmapped}
        out["category_differs"], out["gold_differs"] = m.category_differs, m.gold_differs
        out["stated"] = parsed.stated
    else:
        out["mapping"] = {"rows": own.get("rows"), "mapped": own.get("rows"), "unmapped": 0,
                          "note": "every row names its question id"}
        out["unmapped"] = []
    return out


def fingerprint_dataset(run: Run) -> str:
    """The benchmark file's sha256, as 01_preprocess recorded it."""
    entry = json.loads((run.dir / fingerprint.FILE).read_text(encoding="utf-8")).get("run", {})
    return str(entry.get("components", {}).get("dataset_sha256", ""))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.import_run", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("file", type=Path, help="the published per-question result file")
    p.add_argument("--run", required=True, help="run name: results/<benchmark>/<run>/")
    p.add_argument("--format", dest="fmt", default=None,
                   help=f"the file's format: locomo-audit (the default), longmemeval, export (this harness's "
                        f"export/questions.jsonl), {', '.join(formats.NEW_FORMATS)}, or a field map YAML file "
                        f"(configs/import_formats/*.yaml show the keys)")
    p.add_argument("--labels", type=Path, default=None,
                   help="a second file holding the labels by question id (a field map's labels: section)")
    p.add_argument("--benchmark", choices=("locomo", "longmemeval", "beam"), default=None,
                   help="default locomo (longmemeval for --format longmemeval)")
    p.add_argument("--claim", default=None, help="the configs/claims.yaml entry this file backs")
    p.add_argument("--repository", default=None, help="owner/name the file was read from (default: the claim's)")
    p.add_argument("--path", dest="repo_path", default=None, help="its path in that repository")
    p.add_argument("--commit", default=None, help="the commit it was read at")
    p.add_argument("--judge", default=None, help="judge name (file suffix); default: the published judge model")
    p.add_argument("--answer-model", default=None, help="when the file's metadata does not name it")
    p.add_argument("--judge-model", default=None, help="when the file's metadata does not name it")
    p.add_argument("--prompts", type=Path, default=None, help="the published prompts.yaml (default: found near FILE)")
    p.add_argument("--config", default=None, help="base config (default configs/<benchmark>.yaml)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="config override, e.g. data.path=... or run.results_dir=...")
    p.add_argument("--force", action="store_true", help="import over an existing run directory")
    a = p.parse_args(argv)
    try:
        benchmark = a.benchmark or ("longmemeval" if a.fmt == "longmemeval" else "locomo")
        import_run(a.file, a.run, benchmark=benchmark, judge=a.judge, answer_model=a.answer_model,
                   judge_model=a.judge_model, prompts=a.prompts, config=a.config, overrides=tuple(a.set),
                   force=a.force, fmt=a.fmt, claim_id=a.claim, labels_file=a.labels,
                   origin={"repository": a.repository, "path": a.repo_path, "commit": a.commit})
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0

