"""LoCoMo judging and aggregation (Table 1 format).

Judge accuracy per category with k/n (failed judgments count wrong in the strict number), the
official token F1 and evidence recall as lexical diagnostics, and the buffer-size summary.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from common.benchmarks.locomo import ADAPTER as DATA
from common.benchmarks.locomo import CATEGORY_NAMES, SCORED_CATEGORIES
from common.core.io import read_jsonl
from common.core.schema import Gold
from common.core.tabular import describe, format_accuracy, write_table
from common.evaluation.judge import judge_answer
from common.evaluation.metrics import evidence_recall, locomo_f1
from common.evaluation.scoring import failure_cause, judge_block, score_note


def judge(client: Any, name: str, prompt_id: str, answer: Any, gold: Gold) -> Any:
    """The Memora/mem0 CORRECT/WRONG judge (``common.evaluation.judge``)."""
    return judge_answer(client, name, prompt_id, answer, gold)


def aggregate(run: Any, judges: list[str]) -> dict[str, Any]:
    """Judge accuracy per category (k/n, failures counted wrong) plus lexical diagnostics."""
    gold = [Gold(**g) for g in read_jsonl(run.path("gold"))]
    answers = {a["qid"]: a for a in read_jsonl(run.path("answers"))}
    rets = {r["qid"]: r for r in read_jsonl(run.path("retrievals"))}
    scored = [g for g in gold if g.category in SCORED_CATEGORIES]
    out: dict[str, Any] = {
        "benchmark": "locomo", "run": run.cfg.run.name, "config": "config.resolved.yaml",
        "category_names": {str(k): v for k, v in CATEGORY_NAMES.items()},
        "questions": {"total": len(gold), "scored": len(scored),
                      "excluded": {"5 (adversarial)": sum(g.category == 5 for g in gold)}},
        "judges": {},
    }
    for j in judges:
        rows = {r["qid"]: r for r in read_jsonl(run.judge_path(j))}
        # A scored question with no judge row is a failure, never a dropped item.
        joined = [{"cat": DATA.category(g), "label": rows.get(g.qid, {}).get("label"),
                   "cause": failure_cause(rows.get(g.qid))} for g in scored]
        block = judge_block(joined, "cat")
        any_row = next(iter(rows.values()), {})
        out["judges"][j] = {
            "judge_model": any_row.get("judge_model"), "prompt_id": any_row.get("prompt_id"),
            "overall": block["overall"], "by_category": block["by_group"],
            "failures": block["failures"], "failures_total": block["failures_total"],
        }
    f1: list[dict[str, Any]] = [
        {"cat": DATA.category(g), "f1": locomo_f1(answers.get(g.qid, {}).get("answer") or "", g.answer, g.category)}
        for g in scored]
    recall: list[dict[str, Any]] = [
        {"cat": DATA.category(g), "r": evidence_recall(g.evidence, rets.get(g.qid, {}).get("dia_ids", []))}
        for g in scored]
    out["f1_official"] = {"overall": describe([r["f1"] for r in f1])["mean"],
                          "by_category": {c: describe([r["f1"] for r in f1 if r["cat"] == c])["mean"]
                                          for c in sorted({r["cat"] for r in f1})}}
    have = [r for r in recall if r["r"] is not None]
    out["evidence_recall"] = {"overall": describe([r["r"] for r in have])["mean"], "n": len(have),
                              "no_gold_evidence": len(recall) - len(have),
                              "by_category": {c: describe([r["r"] for r in have if r["cat"] == c])["mean"]
                                              for c in sorted({r["cat"] for r in have})}}
    out["buffer_tokens"] = describe([float(rets[g.qid]["buffer_tokens"]) for g in scored if g.qid in rets])
    out["answer_failures"] = sum(1 for g in scored if answers.get(g.qid, {}).get("answer") is None)
    return out


def write_tables(run: Any, metrics: dict[str, Any]) -> list[Path]:
    """Table 1 format, one Markdown+CSV pair per judge (judges are never averaged)."""
    paths: list[Path] = []
    for j, m in metrics["judges"].items():
        row = {"Method": f"EnSIMem (this harness, run {metrics['run']}), judge {m['judge_model']}"}
        for cat in DATA.categories:
            row[cat.capitalize()] = format_accuracy(m["by_category"].get(cat, {"accuracy": None}))
        row["Overall"] = format_accuracy(m["overall"])
        title = (f"LoCoMo accuracy (LLM judge {m['judge_model']}, prompt {m['prompt_id']}; categories 1-4, "
                 f"category 5 excluded: {metrics['questions']['excluded']['5 (adversarial)']}; "
                 f"failed judgments count as wrong: {m['overall']['n_failed']})\n\n{score_note(metrics, j)}")
        paths += write_table([row], run.dir / f"table_{j}.md", title)
    return paths
