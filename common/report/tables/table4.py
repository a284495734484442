"""Table 4: the retrieval-route ablation on LoCoMo, measured beside the paper's values (primary judge)."""
from __future__ import annotations

from common.report.tables.published import COMPARABLE_NOTE, DASH, NOT_REPORTED, comparable
from common.report.tables.runs import (
    MAKE_ABLATIONS,
    Context,
    TableError,
    ablation_runs,
    differing_question_sets,
    measured,
    subset_note,
)
from common.report.tables.table import Table, fmt_acc


def table4(ctx: Context) -> Table:
    variants = ctx.exp.panels.get("retrieval_route")
    if not variants:
        raise TableError(f"{ctx.exp.source}: ablations.panels.retrieval_route: missing")
    runs, subset = ablation_runs(ctx.results, ctx.exp, variants, ctx.subset_choice)
    values, source, pub_ident, figure = ctx.published.panel("retrieval_route")
    judge = ctx.exp.judges["primary"]
    table = Table("table4", "Table 4: retrieval-route ablation on LoCoMo (accuracy %, primary judge)",
                  ["Retrieval variant", "Measured", "Paper", "Run", "Question set", "Paper comparable"])
    for v in variants:
        run = runs[v]
        m = measured(run, judge, None, judge_hint=MAKE_ABLATIONS["locomo"])
        text = fmt_acc(m.summary, digits=2)
        ok, why = comparable(pub_ident, run.identity(judge, ctx.published))
        paper = values.get(v, NOT_REPORTED)
        verdict = DASH if paper == NOT_REPORTED else ("yes" if ok else f"no ({why})")
        table.rows.append({"Retrieval variant": ctx.exp.variant(v).label, "Measured": text, "Paper": paper,
                           "Run": run.name, "Question set": run.question_set_text, "Paper comparable": verdict})
        table.add_cell(v, "Measured", text, m.source)
    table.warnings += differing_question_sets([(ctx.exp.variant(v).label, runs[v]) for v in variants])
    table.published.append({"panel": "retrieval_route", "values": values, "source": source, "figure": figure,
                            "answer_model": pub_ident.answer_model, "judge_model": pub_ident.judge_model,
                            "protocol": pub_ident.protocol})
    table.notes += [f"Measured: {judge} judge, accuracy % (k/n) recounted from 01_gold.jsonl + 08_judge_{judge}.jsonl.",
                    f"Paper: {source}; answer model {pub_ident.answer_model}, judge {pub_ident.judge_model}.",
                    subset_note(subset, runs), COMPARABLE_NOTE]
    return table
