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
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

from common.benchmarks.registry import adapter
from common.benchmarks.subset import load_selected
from common.core import fingerprint
from common.core.config import ConfigError, load_config
from common.core.io import read_json, read_jsonl, sha256_file, write_json, write_jsonl
from common.core.schema import AnswerRow, JudgeRow, to_dict
from common.evaluation.repeats import majority
from common.pipeline import stages
from common.pipeline.engine import Run, manifest, run_stage
from common.pipeline.graph import IDS as ID
from common.pipeline.graph import by_name

QUESTION_ID = re.compile(r"locomo_(\d+)_qa(\d+)")
JUDGMENT = re.compile(r"judgment_(\d+)")


class SourceError(ValueError):
    """A source row that cannot be mapped onto the benchmark (message names the file and the row)."""


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
    data = yaml.safe_load(prompts.read_text(encoding="utf-8")) or {}
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


def import_run(source: Path, run_name: str, *, benchmark: str = "locomo", judge: Optional[str] = None,
               answer_model: Optional[str] = None, judge_model: Optional[str] = None,
               prompts: Optional[Path] = None, config: Optional[str] = None, overrides: tuple[str, ...] = (),
               force: bool = False, reuse: bool = False, aggregate: bool = True,
               reads_gold: Optional[bool] = None) -> Path:
    """Write the run directory of ``source``; returns it. Runs ``09_aggregate`` on it at the end.

    ``reuse``: a directory already imported from a file with the same sha256 is kept as it is (the
    judge audit resumes in it). ``aggregate=False`` leaves 09 to the caller.
    """
    if not source.is_file():
        raise SourceError(f"{source}: not found")
    started = time.time()
    if benchmark == "longmemeval":  # JSONL, whatever the name (the official one ends .eval-results-<model>)
        doc: dict[str, Any] = {}
    else:
        doc = read_json(source, SourceError)
        if not isinstance(doc, dict):
            raise SourceError(f"{source}: expected a JSON object with detailed_results")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise _fail(source, "metadata", "expected an object")
    if benchmark == "longmemeval" and not judge_model:  # the official rows name their judge model
        first = next(iter(read_jsonl(source)), {})
        label = first.get("autoeval_label") or (first.get("autoeval_labels") or [None])[0]
        judge_model = label.get("model") if isinstance(label, dict) else None
    answer_model = answer_model or meta.get("answer_model") or "not stated"
    judge_model = judge_model or meta.get("judge_model") or ("gpt-4o-mini" if benchmark == "locomo" else "not stated")
    judge = judge or re.sub(r"[^A-Za-z0-9._-]+", "-", judge_model)
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
    run = Run(cfg, force=True, progress=False)
    before = fingerprint.imported(run.dir) if run.dir.exists() else None
    if reuse and not force and before is not None and before.get("sha256") == sha256_file(source):
        return run.dir
    if run.dir.exists() and any(run.dir.iterdir()):
        if not force:
            raise SourceError(f"{run.dir} exists: choose another --run or pass --force to import over it")
    # Every row is checked before anything is written. Ids map through the WHOLE benchmark file
    # (conversation index = file order); rows outside a selection (data.memories, a limit, a
    # subset) are then left out and counted.
    full = adapter(benchmark).load(adapter(benchmark).data_path(cfg))
    every = [to_dict(q) for q in full.questions]
    rows = (_locomo_audit_rows(source, doc, every, {g.qid: to_dict(g) for g in full.gold})
            if benchmark == "locomo" else _longmemeval_rows(source, every))
    if len({len(r[3]) for r in rows}) > 1:
        raise SourceError(f"{source}: rows carry different numbers of judge labels "
                          f"({sorted({len(r[3]) for r in rows})}); every answer needs the same runs")
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
    judge_prompt_id = "published:llm_judge" if benchmark == "locomo" else "published:official"
    answers = [AnswerRow(qid=qid, memory_id=memory[qid], question=q, answer=a, model=answer_model,
                         prompt_id=answer_prompt_id, error="" if a else "empty_answer: published answer is empty")
               for qid, q, a, _ in rows]
    judged = [JudgeRow(qid=qid, judge=judge, judge_model=judge_model, prompt_id=judge_prompt_id,
                       label=labels[0] if len(labels) == 1 else majority(labels), parse_ok=True,
                       labels=labels if len(labels) > 1 else [])
              for qid, _, _, labels in rows]
    # One stage order for answers and labels: the benchmark's question order.
    order = {q["qid"]: i for i, q in enumerate(questions)}
    answers.sort(key=lambda r: order[r.qid])
    judged.sort(key=lambda r: order[r.qid])
    source_sha = sha256_file(source)
    prompt_info = published_prompts(source, prompts, answer_prompt)
    fmt = "locomo-audit" if benchmark == "locomo" else "longmemeval-eval-results"
    published: dict[str, Any] = {"file": str(source), "sha256": source_sha, "format": fmt,
                                 "answer_model": answer_model, "judge_model": judge_model,
                                 "judge_runs": n_runs, "prompts": prompt_info,
                                 "reads_gold": reads_gold,
                                 "metadata": {k: v for k, v in meta.items() if not isinstance(v, dict)}}
    dataset_sha = fingerprint_dataset(run)
    run_components = {"imported": published, "benchmark": benchmark, "dataset_sha256": dataset_sha}
    stored = {"run": {"id": fingerprint.short(run_components), "components": run_components}}
    judge_components = {"run": stored["run"]["id"], "imported_judge": {
        "judge_model": judge_model, "judge_runs": n_runs,
        "judge_prompt_sha256": prompt_info.get("judge_prompt_sha256")}}
    if n_runs:
        stored[f"judge:{judge}"] = {"id": fingerprint.short(judge_components), "components": judge_components}
    write_json(run.dir / fingerprint.FILE, stored)
    write_jsonl(run.path("answers"), (to_dict(a) for a in answers))
    manifest(run, ID["answer"], inputs=[source], outputs=[run.path("answers")], rows=len(answers), started=started,
             extra={"imported_from": str(source), "source_sha256": source_sha, "reads_gold": reads_gold,
                    "rows_outside_selection": outside})
    if n_runs:  # a file with published labels
        write_jsonl(run.judge_path(judge), (to_dict(r) for r in judged))
        manifest(run, by_name("judge").instance(judge), inputs=[source], outputs=[run.judge_path(judge)],
                 rows=len(judged), started=started, extra={"imported_from": str(source),
                                                           "source_sha256": source_sha, "judge_runs": n_runs})
    print(f"import: {len(rows)} answers, {n_runs} judge label(s) each, from {source} -> {run.dir}"
          + (f" ({outside} rows outside the selected questions left out)" if outside else ""), flush=True)
    if aggregate:
        run_stage(run, "aggregate")
    return run.dir


def fingerprint_dataset(run: Run) -> str:
    """The benchmark file's sha256, as 01_preprocess recorded it."""
    entry = json.loads((run.dir / fingerprint.FILE).read_text(encoding="utf-8")).get("run", {})
    return str(entry.get("components", {}).get("dataset_sha256", ""))


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.import_run", description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("file", type=Path, help="the published per-question result file")
    p.add_argument("--run", required=True, help="run name: results/<benchmark>/<run>/")
    p.add_argument("--benchmark", choices=("locomo", "longmemeval"), default="locomo")
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
        import_run(a.file, a.run, benchmark=a.benchmark, judge=a.judge, answer_model=a.answer_model,
                   judge_model=a.judge_model, prompts=a.prompts, config=a.config, overrides=tuple(a.set),
                   force=a.force)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return 0

