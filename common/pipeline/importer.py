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
import json
import re
import sys
import time
from pathlib import Path
from typing import Any, Optional

from common.benchmarks.registry import adapter
from common.benchmarks.subset import load_selected
from common.core import fingerprint, progress
from common.core.config import ConfigError, load_config
from common.core.io import read_json, read_jsonl, sha256_file, write_json, write_jsonl
from common.core.schema import AnswerRow, JudgeRow, to_dict
from common.evaluation.claims import get_claim
from common.evaluation.coverage import of_benchmark
from common.evaluation.repeats import majority
from common.pipeline import export, formats, stages
from common.pipeline.engine import Run, manifest, run_stage
from common.pipeline.formats import SourceError
from common.pipeline.graph import IDS as ID
from common.pipeline.graph import by_name
from common.pipeline.import_record import (
    SOURCE_FILE,
    own_accuracy,
    published_prompts,
    source_record,
    stated_checks,
    stated_meta,
    what_it_covers,
)
from common.pipeline.import_sources import (
    export_doc,
    export_rows,
    fail,
    locomo_audit_rows,
    longmemeval_rows,
)


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
    exported = export_doc(source, benchmark) if fmt == "export" else None
    if benchmark == "longmemeval" or new_format or exported is not None:  # read by their own readers below
        doc: dict[str, Any] = {}
    else:
        doc = read_json(source, SourceError)
        if not isinstance(doc, dict):
            raise SourceError(f"{source}: expected a JSON object with detailed_results")
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict):
        raise fail(source, "metadata", "expected an object")
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
        rows, answer_errors, more_judges = export_rows(source, exported, every, full, benchmark, judge, errors)
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
        rows = locomo_audit_rows(source, doc, every, {g.qid: to_dict(g) for g in full.gold})
    else:
        rows = longmemeval_rows(source, every)
    if len({len(r[3]) for r in rows}) > 1:
        raise SourceError(f"{source}: rows carry different numbers of judge labels "
                          f"({sorted({len(r[3]) for r in rows})}); every answer needs the same runs")
    own = own_accuracy(parsed, rows)
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
    checked = stated_checks({**(parsed.stated if parsed else {}), **stated_meta(meta)}, own)
    record = source_record(source, source_sha, fmt, judge, claim, origin, parsed, own, outside)
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
    for line in what_it_covers(cov, benchmark, checked):
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
