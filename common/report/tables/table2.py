"""Table 2: LLM-judge accuracy on LongMemEval by question type, with the unweighted task average.

The paper's "Average" column is checked against each paper row's six values: it is reported
which mean (question-weighted or task-averaged) each printed average actually is.
"""
from __future__ import annotations

from typing import Any

from common.benchmarks.longmemeval import QUESTION_TYPES, SHORT_NAMES
from common.report.tables.accuracy import accuracy_table
from common.report.tables.published import number
from common.report.tables.runs import Context, InconsistentRun, RunData, measured, same_number
from common.report.tables.table import Table


def _task_average(run: RunData, judge: str) -> tuple[str, dict[str, Any]]:
    """The unweighted mean of the six type accuracies, recomputed from verified type accuracies."""
    parts = [measured(run, judge, t) for t in QUESTION_TYPES]
    accs = [p.summary["accuracy"] for p in parts]
    value = None if any(a is None for a in accs) else sum(accs) / len(accs)
    stored = run.metrics["judges"][judge].get("task_averaged")
    if stored is not None and value is not None and not same_number(stored, value):
        raise InconsistentRun(f"{run.metrics_path}: judges.{judge}.task_averaged: {stored!r} but the six verified "
                              f"type accuracies average {value!r}; rerun 09_aggregate")
    text = "n/a" if value is None else f"{100 * value:.1f}"
    return text, {"run_dir": str(run.dir), "metric": f"judges.{judge}.task_averaged", "value": value,
                  "computed_as": "mean of the six by_type accuracies", "inputs": [p.source for p in parts],
                  "fingerprint": run.fingerprint}


def _average_check(ctx: Context) -> str:
    """Which mean the paper's LongMemEval "Average" column is, recomputed from each row's values."""
    spec = ctx.published.tables["table2"]
    sizes: dict[str, int] = spec["type_sizes"]
    verdicts: dict[str, list[str]] = {}
    for i, row in enumerate(ctx.published.rows("table2"), 1):
        vals = {t: number(row.values[t]) for t in sizes}
        avg = number(row.values.get("average", ""))
        if avg is None or any(v is None for v in vals.values()):
            continue
        task = sum(vals.values()) / len(vals)  # type: ignore[arg-type]
        weighted = sum(vals[t] * n for t, n in sizes.items()) / sum(sizes.values())  # type: ignore[operator,misc]
        tol = 0.1  # the printed average and each printed input are rounded to 0.1
        kind = ("question-weighted overall" if abs(weighted - avg) <= tol else
                "task-averaged mean" if abs(task - avg) <= tol else
                f"neither (task mean {task:.2f}, question-weighted {weighted:.2f}, printed {avg})")
        verdicts.setdefault(kind, []).append(f"P{i}")
    found = "; ".join(f"{', '.join(refs)}: {kind}" for kind, refs in verdicts.items())
    return (f"Paper's Average, recomputed from each row's six values with LongMemEval_S type sizes "
            f"{'/'.join(str(n) for n in sizes.values())} (type order as the columns; match within 0.1 pp): {found}. "
            "We report overall accuracy over all questions (k/n) in the Average column, and the unweighted task "
            "average beside it.")


def table2(ctx: Context) -> Table:
    groups = list(QUESTION_TYPES)
    headers = [SHORT_NAMES[t] for t in groups] + ["Average (overall)"]
    table = accuracy_table(ctx, "table2", "longmemeval", groups, headers,
                           "Table 2: LLM-judge accuracy (%) on LongMemEval (official checker)",
                           extra=_task_average, extra_header="Task-avg")
    table.notes.append(_average_check(ctx))
    return table
