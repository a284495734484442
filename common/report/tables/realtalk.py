"""The REALTALK table and figure: every REALTALK run's three scores per category, side by side.

Every REALTALK run under ``<results>/realtalk/`` with a ``metrics.json`` (``make realtalk``) gives one
row per judge and metric: the official token F1 (from the answers), the official GPT score and the
LoCoMo judge's accuracy (from the judge file), never averaged. Each cell is recounted from
``01_gold.jsonl``, ``07_answer.jsonl`` and the judge file and must equal metrics.json. No published
REALTALK row is transcribed: docs/realtalk.md, Published numbers, says why.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.figure import Figure

from common.core.schema import Gold, from_dict
from common.evaluation import realtalk
from common.evaluation.metrics import accuracy
from common.report.tables.runs import Context, InconsistentRun, MissingRun, RunData, benchmark_runs, same_number
from common.report.tables.table import Table

MAKE_REALTALK = "make realtalk"
NO_PAPER_ROWS = ("REALTALK paper rows are not transcribed: its memory-probing table could not be read in this "
                 "workplace, and the repository prints no numbers; see docs/realtalk.md, Published numbers.")
CATEGORIES = realtalk.DATA.categories


def realtalk_runs(results: Path) -> list[RunData]:
    """Every finished REALTALK run under ``results/realtalk/`` (sorted by name)."""
    return benchmark_runs(results, "realtalk")


def recount(run: RunData, judge: str) -> dict[str, dict[str, Optional[float]]]:
    """metric -> category (and ``overall``) -> its mean over the questions, recounted from the files and
    checked against metrics.json; ``InconsistentRun`` names the first cell that differs."""
    golds = [from_dict(Gold, g) for g in run.rows("gold")]
    answers = {a["qid"]: a for a in run.rows("answers")}
    rows = {r["qid"]: r for r in run.judge_rows(judge)}
    values: dict[str, dict[str, Optional[float]]] = {"f1": dict(realtalk.f1_scores(golds, answers)),
                                                     "gpt_score": realtalk.gpt_values(golds, rows)}
    stored = realtalk.metric_rows(run.metrics, judge)
    out: dict[str, dict[str, Optional[float]]] = {}
    for metric in realtalk.METRICS:
        out[metric] = {}
        for c in [*CATEGORIES, "overall"]:
            sel = [g for g in golds if c == "overall" or realtalk.DATA.category(g) == c]
            if not sel:
                continue
            if metric == "judge":
                got = accuracy([(rows.get(g.qid) or {}).get("label") for g in sel])["accuracy"]
                key = "accuracy"
            else:
                got = round(float(np.mean([values[metric].get(g.qid) or 0.0 for g in sel])), 4)  # as score_with_ci
                key = "mean"
            block = stored[metric]["overall"] if c == "overall" else stored[metric]["by_category"].get(c) or {}
            if not same_number(block.get(key), got):
                raise InconsistentRun(f"{run.metrics_path}: {realtalk.METRIC_LABELS[metric]} of {c} is "
                                      f"{block.get(key)} but the gold, answer and judge files give {got}; "
                                      "rerun 09_aggregate")
            out[metric][c] = got
    return out


def realtalk_table(ctx: Context) -> Table:
    columns = ["Ref", "Method", "Run", "Coverage", "Judge", "Metric", *CATEGORIES, "Overall"]
    table = Table("table_realtalk", "REALTALK: the official token F1 and GPT score and the LoCoMo judge's accuracy "
                  "per category (% [95% CI, bootstrap over chats] (sum or k/n); never averaged)", columns)
    runs = realtalk_runs(ctx.results)
    if not runs:
        raise MissingRun(f"{ctx.results / 'realtalk'}: no REALTALK run (no <run>/metrics.json); "
                         f"create one with `{MAKE_REALTALK}`")
    for run in runs:
        for j in run.judge_names():
            recount(run, j)
            blocks = realtalk.metric_rows(run.metrics, j)
            label = (run.metrics.get("method") or {}).get("label") or run.name  # 09's method_label
            gpt_model = run.metrics["judges"][j]["gpt_score"].get("model")
            for metric in realtalk.METRICS:
                ref = f"{run.name}/{j}/{metric}"
                what = realtalk.METRIC_LABELS[metric] + (f", model {gpt_model}" if metric == "gpt_score" else "")
                row = {"Ref": ref, "Method": f"{label} (answers {run.answer_model()})", "Run": run.name,
                       "Coverage": run.coverage.mark, "Judge": run.judge_model(j), "Metric": what}
                for c in [*CATEGORIES, "overall"]:
                    b = blocks[metric]["overall"] if c == "overall" else blocks[metric]["by_category"].get(c)
                    text = realtalk.judge_cell(b) if metric == "judge" else realtalk.cell(b)
                    column = "Overall" if c == "overall" else c
                    row[column] = text
                    table.add_cell(ref, column, text, {"run": run.name, "judge": j, "metric": metric,
                                                       "files": run.files("gold", "answers", judges=[j])})
                table.rows.append(row)
        for note in (run.coverage_warning, run.dataset_warning, run.metrics.get("data_quirks_note")):
            if note:
                table.notes.append(f"{run.name}: {note}")
    table.notes += [
        "Token F1 = evaluate_memory.py's lexical score (LoCoMo's F1: category 1 per comma-separated part, category 3 "
        "up to the first ';'); GPT score = its 0-1 score of each answer (the model under Metric); both the mean over "
        "the questions, failures counting 0. LLM judge = the LoCoMo CORRECT/WRONG judge, accuracy with k/n.",
        "Overall = over all questions (the official code prints per-category means of one chat only).",
        NO_PAPER_ROWS]
    return table


def realtalk_figure(ctx: Context) -> tuple[Figure, list[dict[str, Any]]]:
    """Grouped bars per category: each run/judge's three scores side by side."""
    runs = realtalk_runs(ctx.results)
    if not runs:
        raise MissingRun(f"{ctx.results / 'realtalk'}: no REALTALK run (no <run>/metrics.json); "
                         f"create one with `{MAKE_REALTALK}`")
    fig = Figure(figsize=(10, 4.2))
    ax = fig.subplots()
    series: list[dict[str, Any]] = []
    partial = [f"{r.name} {r.coverage.mark}" for r in runs if r.coverage.partial]
    for run in runs:
        mark = f" [{run.coverage.mark}]" if run.coverage.partial else ""  # a partial run never passes for a full one
        for j in run.judge_names():
            for metric, values in recount(run, j).items():
                series.append({"label": f"{run.name}{mark} / {realtalk.METRIC_LABELS[metric]}", "run": run.name,
                               "judge": j, "metric": metric, "coverage": run.coverage.to_dict(), "values": values})
    groups = [*CATEGORIES, "overall"]
    xs = list(range(len(groups)))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        heights = [100 * s["values"][g] if s["values"].get(g) is not None else math.nan for g in groups]
        ax.bar([x + i * width - 0.4 + width / 2 for x in xs], heights, width, label=s["label"])
    ax.set_xticks(xs, groups)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% (mean over the questions)")
    ax.set_title("REALTALK per category: token F1, GPT score, LLM judge (never averaged)"
                 + (f" (PARTIAL runs: {', '.join(partial)})" if partial else ""), fontsize=9)
    ax.legend(fontsize=6, loc="upper right")
    fig.tight_layout()
    return fig, series
