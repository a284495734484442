"""LoCoMo judging and aggregation (Table 1 format).

Judge accuracy per category with k/n (failed judgments count wrong in the strict number), the
official token F1 and evidence recall as lexical diagnostics, and the buffer-size summary.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from common.benchmarks.locomo import ADAPTER as DATA
from common.benchmarks.locomo import CATEGORY_NAMES, SCORED_CATEGORIES
from common.core.fingerprint import imported
from common.core.io import read_jsonl
from common.core.schema import Gold
from common.core.tabular import describe, format_accuracy, write_table
from common.evaluation.adversarial import adversarial_block
from common.evaluation.audited import audited_key, run_errata
from common.evaluation.judge import judge_answer
from common.evaluation.loss import decompose as loss_decomposition
from common.evaluation.metrics import (
    buffer_contribution_stats,
    evidence_recall,
    evidence_recall_official,
    evidence_recall_summary,
    locomo_f1,
)
from common.evaluation.repeats import describe_runs, n_runs, row_labels, runs_block
from common.evaluation.scoring import failure_cause, judge_block, method_label, partial_mark, score_note


def judge(client: Any, name: str, prompt_id: str, answer: Any, gold: Gold, repeat: int = 0) -> Any:
    """The Memora/mem0 CORRECT/WRONG judge (``common.evaluation.judge``); ``repeat``: judge run i."""
    return judge_answer(client, name, prompt_id, answer, gold, repeat=repeat)


def aggregate(run: Any, judges: list[str]) -> dict[str, Any]:
    """Judge accuracy per category (k/n, failures counted wrong) plus lexical diagnostics."""
    gold = [Gold(**g) for g in read_jsonl(run.path("gold"))]
    answers = {a["qid"]: a for a in read_jsonl(run.path("answers"))}
    # An imported run (common.pipeline.importer) has answers but no retrieval rows.
    rets = {r["qid"]: r for r in read_jsonl(run.path("retrievals"), missing_ok=True)}
    scored = [g for g in gold if g.category in SCORED_CATEGORIES]
    out: dict[str, Any] = {
        "benchmark": "locomo", "run": run.cfg.run.name, "config": "config.resolved.yaml",
        "category_names": {str(k): v for k, v in CATEGORY_NAMES.items()},
        "questions": {"total": len(gold), "scored": len(scored),
                      "excluded": {"5 (adversarial)": sum(g.category == 5 for g in gold)}},
        "judges": {},
    }
    errata = run_errata(run.cfg)
    source = imported(run.dir)
    if source is not None:  # a published run (common.pipeline.importer): say whose answers these are
        out["imported"] = {k: source.get(k) for k in ("file", "sha256", "answer_model", "judge_model", "reads_gold")}
    for j in judges:
        rows = {r["qid"]: r for r in read_jsonl(run.judge_path(j))}
        # A scored question with no judge row is a failure, never a dropped item.
        joined = [{"cat": DATA.category(g), "label": rows.get(g.qid, {}).get("label"),
                   "cause": failure_cause(rows.get(g.qid)), "cluster": g.memory_id} for g in scored]
        block = judge_block(joined, "cat")
        any_row = next(iter(rows.values()), {})
        out["judges"][j] = {
            "judge_model": any_row.get("judge_model"), "prompt_id": any_row.get("prompt_id"),
            "overall": block["overall"], "by_category": block["by_group"],
            "failures": block["failures"], "failures_total": block["failures_total"],
        }
        runs = n_runs(list(rows.values()))
        if runs > 1:  # judge.runs > 1 or an imported run with several published labels per answer
            rb = runs_block([{"cat": DATA.category(g), "labels": row_labels(rows.get(g.qid), runs)} for g in scored],
                            "cat", runs)
            out["judges"][j]["runs"] = {"n_runs": runs, "std_kind": rb["std_kind"], "overall": rb["overall"],
                                        "by_category": rb["by_group"],
                                        "label": "the row label is the majority vote of the runs"}
        out["judges"][j]["audited_key"] = audited_key(errata, scored, rows, DATA.category)
    f1: list[dict[str, Any]] = [
        {"cat": DATA.category(g), "f1": locomo_f1(answers.get(g.qid, {}).get("answer") or "", g.answer, g.category)}
        for g in scored]
    out["f1_official"] = {"overall": describe([r["f1"] for r in f1])["mean"],
                          "by_category": {c: describe([r["f1"] for r in f1 if r["cat"] == c])["mean"]
                                          for c in sorted({r["cat"] for r in f1})}}
    # Official (analyze_aggr_acc: no evidence counts 0, all questions in the denominator), the
    # per-question mean (no evidence = 1.0) and the harness's cleaned variant.
    out.update(evidence_recall_summary(
        {"cat": DATA.category(g), "scored": g.category in SCORED_CATEGORIES, "raw_n": len(g.raw_evidence),
         "official": evidence_recall_official(g.raw_evidence, rets.get(g.qid, {}).get("dia_ids", [])),
         "cleaned": evidence_recall(g.evidence, rets.get(g.qid, {}).get("dia_ids", []))}
        for g in gold))
    out["buffer_tokens"] = describe([float(rets[g.qid]["buffer_tokens"]) for g in scored if g.qid in rets])
    out["buffer"] = buffer_contribution_stats(rets[g.qid] for g in scored if g.qid in rets)
    if errata is not None:  # the same diagnostic against the audit's corrected evidence ids
        fixed = errata.corrected_evidence()
        have_a: list[dict[str, Any]] = [{"cat": DATA.category(g), "r": r} for g in scored
                  if (r := evidence_recall(fixed.get(g.qid, g.evidence), rets.get(g.qid, {}).get("dia_ids", [])))
                  is not None]
        out["evidence_recall_audited"] = {"overall": describe([r["r"] for r in have_a])["mean"], "n": len(have_a),
                                          "corrected_questions": sum(g.qid in fixed for g in scored),
                                          "by_category": {c: describe([r["r"] for r in have_a if r["cat"] == c])["mean"]
                                                          for c in sorted({r["cat"] for r in have_a})}}
    enabled = bool(getattr(getattr(run.cfg, "score", None), "adversarial", False))  # minimal handles: off
    out["adversarial"] = adversarial_block(gold, answers, enabled)
    out["answer_failures"] = sum(1 for g in scored if answers.get(g.qid, {}).get("answer") is None)
    out["loss"] = loss_decomposition(  # where the points went (common.evaluation.loss)
        run.dir, judges, corrected=errata.corrected_evidence() if errata is not None else None)
    return out


def write_tables(run: Any, metrics: dict[str, Any]) -> list[Path]:
    """Table 1 format, one Markdown+CSV pair per judge (judges are never averaged)."""
    paths: list[Path] = []
    for j, m in metrics["judges"].items():
        row = {"Method": f"{method_label(run.cfg, metrics)}, judge {m['judge_model']}"}
        for cat in DATA.categories:
            row[cat.capitalize()] = format_accuracy(m["by_category"].get(cat, {"accuracy": None}))
        row["Overall"] = format_accuracy(m["overall"])
        adv = metrics.get("adversarial") or {}
        if adv.get("status") == "scored":  # its own column, outside the paper's overall
            row["Adversarial (cat. 5, abstention rule)"] = format_accuracy(adv)
        title = (f"{partial_mark(metrics)}LoCoMo accuracy (LLM judge {m['judge_model']}, prompt {m['prompt_id']}; "
                 "categories 1-4, "
                 f"category 5 excluded: {metrics['questions']['excluded']['5 (adversarial)']}; "
                 f"failed judgments count as wrong: {m['overall']['n_failed']})\n\n{score_note(metrics, j)}")
        if "runs" in m:
            title += f"\n\n{describe_runs(m['runs'])}"
        if adv.get("status") == "scored":
            title += ("\n\nAdversarial (category 5) is not in Overall: no LLM judge; " + adv["rule"] + ".")
        rows = [{k: r.get(k, "") for k in row} for r in [row] + _audited_rows(m, row["Method"])]
        title += f"\n\n{_audited_note(m)}"
        paths += write_table(rows, run.dir / f"table_{j}.md", title)
    return paths


def _audited_rows(m: dict[str, Any], method: str) -> list[dict[str, str]]:
    """Rows on the audited answer key, labelled, under the original-key row (never merged into it)."""
    a = m.get("audited_key") or {}
    out = []
    n = a.get("wrong_golden_answers")
    variants = [("corrected", f"[audited key: {n} corrected answers re-judged]"),
                ("excluding_wrong_answers", f"[original key without its {n} wrong answers]")]
    for key, label in variants:
        block = a.get(key) or {}
        if "overall" not in block:
            continue
        row = {"Method": f"{method} {label}"}
        for cat in DATA.categories:
            row[cat.capitalize()] = format_accuracy(block["by_category"].get(cat, {"accuracy": None}))
        row["Overall"] = format_accuracy(block["overall"])
        out.append(row)
    return out


def _audited_note(m: dict[str, Any]) -> str:
    a = m.get("audited_key") or {}
    if a.get("status") != "configured":
        return "Audited answer key: not configured (data.errata). The first row uses the original key."
    note = (f"Audited answer key ({a['attribution']}; errata sha256 {a['sha256'][:12]}): "
            f"{a['wrong_golden_answers']} scored questions have a wrong golden answer, "
            f"{a['wrong_citations_only']} more only cite wrong evidence. The first row is the original key "
            "(the headline, as the paper reports it).")
    corrected = a.get("corrected") or {}
    if "status" in corrected:
        note += f" Corrected key: {corrected['status']}."
    else:
        note += f" Labels changed by the correction: {a.get('labels_changed_by_correction')}."
        if "runs" in corrected:  # every judge run on the corrected key, not only the majority
            note += f" Corrected key, {describe_runs(corrected['runs'])}."
    return note
