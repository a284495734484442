"""Table 1: LLM-judge accuracy on LoCoMo by category (1-4), paper rows beside the measured runs."""
from __future__ import annotations

from common.benchmarks.registry import adapter
from common.report.tables.accuracy import accuracy_table
from common.report.tables.runs import Context
from common.report.tables.table import Table


def table1(ctx: Context) -> Table:
    groups = list(adapter("locomo").categories)
    headers = [g.capitalize() for g in groups] + ["Overall"]
    table = accuracy_table(ctx, "table1", "locomo", groups, headers,
                           "Table 1: LLM-judge accuracy (%) on LoCoMo, categories 1-4 (category 5 excluded)")
    main = ctx.main_run("locomo")
    excluded = (main.metrics.get("questions") or {}).get("excluded")
    if excluded:
        shown = "; ".join(f"category {k}: {v} questions" for k, v in excluded.items())
        table.notes.append(f"Not judged in the main run (as in Memora/mem0): {shown}.")
    return table
