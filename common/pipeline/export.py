"""One portable per-question file of a run: ``<run>/export/questions.jsonl`` and ``.csv`` + ``manifest.json``.

``make export RUN=...`` (and the end of every ``09_aggregate``) joins what a reader otherwise
gathers from five files (``01_questions``, ``01_gold``, ``06_retrieve``, ``07_answer``, every
``08_judge_<judge>``) into one row per question:

``qid, benchmark, memory_id, category, scored, question, question_date, gold, answer,
answer_error, judges{<judge>: {label, labels, score, judge_model, error}}, evidence_ids,
episode_ids, buffer_tokens, calls, paid_calls, cost_usd``

``label`` is 1/0/null (null: the judgment failed, counted wrong in the strict accuracy);
``labels`` holds every repeat run of the judge (``judge.runs``; ``label`` is their majority) and
``score`` a numeric grade in [0, 1] for judges that give one (a rubric), else null. A rubric
judge (BEAM) also carries ``scores``: the question's score under each scoring variant
(``official``, ``float``, ``filled``, ``corrected``; null when not computed) and the
``headline`` one, which ``score`` repeats; the CSV has them as ``judge.<judge>.score_<variant>``. ``calls``,
``paid_calls`` and ``cost_usd`` (uncached price, ``configs/prices.yaml``) count the calls made
for this question (05-08); memory building (02-04, ingestion) is per memory, in ``ledger.json``.
The CSV holds the same columns flat (``judge.<judge>.label`` ...; lists joined by ``;``).

``manifest.json``: the benchmark file's sha256 and whether it is the official release
(``dataset``, as ``metrics.json``), the models, the prompts' hashes, the protocol fingerprint,
each judge's accuracy, and the sha256 of the two files. The importer reads the JSONL back
(``--format export``): an export imported elsewhere gives the same labels and accuracies.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Optional

from common.benchmarks import checksums
from common.benchmarks.registry import adapter
from common.core import artifacts, fingerprint
from common.core.io import read_jsonl, sha256_file, write_json, write_jsonl
from common.core.schema import Gold, from_dict
from common.pipeline import ledger
from common.pipeline.experiments import resolve_run

DIR = "export"
QUESTIONS = "questions.jsonl"
CSV = "questions.csv"
MANIFEST = "manifest.json"
FORMAT = "ensimem-export"
VERSION = 1
FIXED = ("qid", "benchmark", "memory_id", "category", "scored", "question", "question_date", "gold", "answer",
         "answer_error")
TAIL = ("evidence_ids", "episode_ids", "buffer_tokens", "calls", "paid_calls", "cost_usd")
JUDGE_FIELDS = ("label", "labels", "score", "judge_model", "error")
# A rubric judge's per-question scores (common.evaluation.beam.VARIANTS): exported beside the label.
SCORE_VARIANTS = ("official", "float", "filled", "corrected", "strict")  # strict: LoCoMo-Plus's JSON-only reading


def _by_qid(path: Path) -> dict[str, dict[str, Any]]:
    return {r["qid"]: r for r in read_jsonl(path, missing_ok=True)} if path.exists() else {}


def _benchmark(run_dir: Path) -> str:
    fp = json.loads((run_dir / fingerprint.FILE).read_text(encoding="utf-8"))
    return str(fp["run"]["components"]["benchmark"])


def question_rows(run_dir: Path) -> list[dict[str, Any]]:
    """One row per question of ``01_questions.jsonl`` (its order), joined across the stage files."""
    benchmark = _benchmark(run_dir)
    data = adapter(benchmark)
    gold = _by_qid(artifacts.path(run_dir, "gold"))
    plans = _by_qid(artifacts.path(run_dir, "plans"))
    rets = _by_qid(artifacts.path(run_dir, "retrievals"))
    answers = _by_qid(artifacts.path(run_dir, "answers"))
    judges = {j: _by_qid(artifacts.judge_path(run_dir, j)) for j in artifacts.judges(run_dir)}
    prices = ledger.load_prices()
    out = []
    for q in read_jsonl(artifacts.path(run_dir, "questions")):
        qid = q["qid"]
        g = from_dict(Gold, gold[qid]) if qid in gold else None
        ans, ret = answers.get(qid, {}), rets.get(qid, {})
        per_question = [r for r in (plans.get(qid), ret or None, ans or None, *(j.get(qid) for j in judges.values()))
                        if r]
        calls = [c for r in per_question for c in ledger._calls(r)]
        costs = [ledger.stage_entry("", "", [r], prices)["cost_uncached_usd"] for r in per_question]
        row: dict[str, Any] = {
            "qid": qid, "benchmark": benchmark, "memory_id": q["memory_id"],
            "category": data.category(g) if g is not None else None,
            "scored": data.is_scored(g) if g is not None else None,
            "question": q["question"], "question_date": q.get("question_date"),
            "gold": g.answer if g is not None else None,
            "answer": ans.get("answer"), "answer_error": ans.get("error") or "",
            "judges": {name: _judge_block(r[qid]) for name, r in judges.items() if qid in r},
            "evidence_ids": ret.get("dia_ids") or [], "episode_ids": ret.get("episode_ids") or [],
            "buffer_tokens": ret.get("buffer_tokens"),
            "calls": len(calls), "paid_calls": sum(1 for c in calls if not c.get("cached")),
            "cost_usd": round(sum(costs), 6),
        }
        out.append(row)
    return out


def _judge_block(r: dict[str, Any]) -> dict[str, Any]:
    """One judge's cell of a row. A rubric judge (BEAM) adds ``scores``: the question's score under
    each scoring variant computed (``official``, ``float``, ``filled``, ``corrected``, the others
    null) and ``headline``; its ``score`` is the headline variant's."""
    block = {"label": r.get("label"), "labels": r.get("labels") or [], "score": r.get("score"),
             "judge_model": r.get("judge_model"), "error": r.get("error") or ""}
    scores = r.get("scores") or {}
    if "gpt_score" in scores:  # REALTALK: the official GPT score (0-1) beside the LoCoMo judge's label
        return block | {"score": scores["gpt_score"], "score_error": scores.get("gpt_score_error") or ""}
    if scores:
        block["scores"] = {v: scores.get(v) for v in SCORE_VARIANTS} | {"headline": scores.get("headline")}
        block["score"] = scores.get(scores.get("headline") or "official")
    return block


def _flat(row: dict[str, Any], judges: list[str], scored: set[str]) -> dict[str, Any]:
    def cell(v: Any) -> Any:
        return ";".join(str(x) for x in v) if isinstance(v, list) else "" if v is None else v

    flat = {k: cell(row[k]) for k in FIXED}
    for j in judges:
        block = row["judges"].get(j, {})
        flat |= {f"judge.{j}.{f}": cell(block.get(f)) for f in JUDGE_FIELDS}
        if j in scored:
            flat |= {f"judge.{j}.score_{v}": cell((block.get("scores") or {}).get(v)) for v in SCORE_VARIANTS}
    return flat | {k: cell(row[k]) for k in TAIL}


def manifest(run_dir: Path, rows: list[dict[str, Any]], files: list[Path]) -> dict[str, Any]:
    stored = json.loads((run_dir / fingerprint.FILE).read_text(encoding="utf-8"))
    comps = stored["run"]["components"]
    metrics_path = artifacts.path(run_dir, "metrics")
    metrics = json.loads(metrics_path.read_text(encoding="utf-8")) if metrics_path.exists() else {}
    benchmark = str(comps["benchmark"])
    dataset = metrics.get("dataset")
    if dataset is None:  # exported before 09 ran: compare the hash 01 recorded
        data = adapter(benchmark)
        dataset = checksums.check(getattr(data, "official_sha256", ""), None, comps["dataset_sha256"],
                                  folder=bool(getattr(data, "official_is_folder", False)))
    judges = sorted({j for r in rows for j in r["judges"]})
    imported = comps.get("imported")
    if imported:
        models = {"answer": imported.get("answer_model"), "judge": imported.get("judge_model")}
        prompts: dict[str, Any] = {"published": imported.get("prompts")}
    else:
        models = {role: (spec or {}).get("model") for role, spec in (comps.get("roles") or {}).items()}
        prompts = dict(comps.get("prompts") or {})
    judge_info = {}
    for j in judges:
        jc = (stored.get(f"judge:{j}") or {}).get("components") or {}
        block = (metrics.get("judges") or {}).get(j, {}).get("overall") or {}
        judge_info[j] = {"fingerprint": (stored.get(f"judge:{j}") or {}).get("id"),
                         "judge_model": next((r["judges"][j]["judge_model"] for r in rows if j in r["judges"]), None),
                         "prompts": jc.get("judge_prompts") or jc.get("imported_judge"),
                         "runs": max((len(r["judges"][j]["labels"]) for r in rows if j in r["judges"]), default=0) or 1,
                         "accuracy": {k: block.get(k) for k in ("k", "n", "accuracy", "n_failed")} if block else None}
    return {"format": FORMAT, "version": VERSION, "run": run_dir.name, "benchmark": benchmark,
            "questions": len(rows), "scored": sum(1 for r in rows if r["scored"]),
            "dataset": dataset, "models": models, "prompts": prompts,
            "fingerprint": {"run": stored["run"].get("id"),
                            "judges": {j: judge_info[j]["fingerprint"] for j in judges}},
            "judges": judge_info, "imported_from": (imported or {}).get("sha256"),
            "files": {p.name: sha256_file(p) for p in files}}


def export_run(run_dir: Path, out_dir: Optional[Path] = None) -> dict[str, Path]:
    """Write ``questions.jsonl``, ``questions.csv`` and ``manifest.json`` (default ``<run>/export/``)."""
    run_dir = Path(run_dir)
    if not (run_dir / fingerprint.FILE).exists() or not artifacts.path(run_dir, "questions").exists():
        raise FileNotFoundError(f"{run_dir}: not a run directory (no {fingerprint.FILE} or 01_questions.jsonl)")
    out_dir = out_dir or run_dir / DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = question_rows(run_dir)
    judges = sorted({j for r in rows for j in r["judges"]})
    scored = {j for r in rows for j, b in r["judges"].items() if "scores" in b}
    jsonl, table = out_dir / QUESTIONS, out_dir / CSV
    write_jsonl(jsonl, rows)
    with table.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(_flat(rows[0], judges, scored)) if rows else list(FIXED + TAIL))
        writer.writeheader()
        writer.writerows(_flat(r, judges, scored) for r in rows)
    write_json(out_dir / MANIFEST, manifest(run_dir, rows, [jsonl, table]))
    return {"questions": jsonl, "csv": table, "manifest": out_dir / MANIFEST}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.pipeline.export", description=(__doc__ or "").split("\n")[0])
    p.add_argument("run", help="a run directory, or a run name under results/<benchmark>/")
    p.add_argument("--benchmark", choices=("locomo", "longmemeval", "beam", "realtalk", "locomo_plus"), default=None,
                   help="where to look for a run name (default: whichever has it)")
    p.add_argument("--results", type=Path, default=Path("results"), help="results root (default results)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default <run>/export)")
    a = p.parse_args(argv)

    try:
        paths = export_run(resolve_run(a.run, a.benchmark, a.results), a.out)
    except (FileNotFoundError, ValueError, KeyError, RuntimeError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(f"export: {paths['questions']}, {paths['csv'].name} and {paths['manifest'].name}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
