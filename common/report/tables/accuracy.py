"""The accuracy table shared by Tables 1 and 2: paper rows, the main run under each judge, the baselines.

Every measured cell is a ``metrics.json`` accuracy recounted from the gold and judge files
(``common.report.tables.runs.measured``); a baseline or judge that has not been run is a row
marked "not run" with the command that makes it, so one missing run never hides the others.
"""
from __future__ import annotations

from typing import Callable, Optional

from common.core.config import ConfigError
from common.report.tables.published import (
    COMPARABLE_NOTE,
    DASH,
    NOT_REPORTED,
    NOT_RUN,
    Identity,
    PublishedRow,
    source_notes,
)
from common.report.tables.runs import (
    MAKE_BASELINES,
    MAKE_JUDGE2,
    MAKE_MAIN,
    Context,
    MissingRun,
    RunData,
    measured,
    open_run,
)
from common.report.tables.table import Table, fmt_acc


def accuracy_table(ctx: Context, name: str, benchmark: str, groups: list[str], headers: list[str],
                   title: str, extra: Optional[Callable[[RunData, str], tuple[str, dict]]] = None,
                   extra_header: str = "") -> Table:
    """Published rows, then the main run under each judge, then each baseline run.

    ``groups`` are the category/type names, ``headers`` their column titles plus the overall one;
    published values are read by ``tables.<name>.columns`` of published.yaml, in the same order.
    """
    pub_key = name
    pub_cols = list(ctx.published.tables[pub_key].get("columns") or [])
    if pub_cols[:len(groups)] != groups or len(pub_cols) != len(headers):
        raise ConfigError(f"{ctx.published.path}: tables.{pub_key}.columns: expected {groups} + one overall column")
    value_cols = headers + ([extra_header] if extra else [])
    table = Table(name, title, ["Ref", "Method", *value_cols, "Answer model", "Judge", "Protocol", "Comparable with"])
    pubs: list[tuple[str, PublishedRow]] = []
    for i, prow in enumerate(ctx.published.rows(pub_key), 1):
        ref = f"P{i}"
        pubs.append((ref, prow))
        cells = {h: prow.values.get(g, NOT_REPORTED) for g, h in zip(pub_cols, headers)}
        table.rows.append({"Ref": ref, "Method": prow.method, **cells, **({extra_header: DASH} if extra else {}),
                           "Answer model": prow.identity.answer_model, "Judge": prow.identity.judge_model,
                           "Protocol": prow.identity.protocol})
        table.add_published(ref, prow)
    meas: list[tuple[str, Identity]] = []
    main = ctx.main_run(benchmark)
    entries: list[tuple[str, Optional[RunData], str, str]] = []  # (method, run, judge, hint)
    for role in ("primary", "secondary"):
        judge = ctx.exp.judges[role]
        if role == "primary" or judge in main.judge_names():
            entries.append((f"EnSIMem (harness, run {main.name})", main, judge,
                            f"{MAKE_MAIN[benchmark]} RUN={main.name}"))
        else:
            entries.append((f"EnSIMem (harness, run {main.name}), judge {judge}", None, judge,
                            f"{MAKE_JUDGE2[benchmark]} RUN={main.name}"))
    for b in ctx.exp.baselines:
        try:
            baseline = open_run(ctx.results, benchmark, ctx.exp.baseline_run(b.name), MAKE_BASELINES[benchmark])
        except MissingRun:
            entries.append((b.label, None, "", MAKE_BASELINES[benchmark]))
            continue
        judges = [ctx.exp.judges["primary"]] + [j for j in baseline.judge_names() if j != ctx.exp.judges["primary"]]
        entries += [(b.label, baseline, j, MAKE_BASELINES[benchmark]) for j in judges]
    not_run: list[str] = []  # notes on measured rows: not run, partial coverage
    for i, (method, run, judge, hint) in enumerate(entries, 1):
        ref = f"M{i}"
        if run is None:
            table.rows.append({"Ref": ref, "Method": method, **{c: NOT_RUN for c in value_cols},
                               "Answer model": DASH, "Judge": judge or DASH, "Protocol": DASH, "Comparable with": DASH})
            not_run.append(f"{ref}: not run (`{hint}`)")
            continue
        row = {"Ref": ref, "Method": method}
        for g, h in zip(groups + [None], headers):
            m = measured(run, judge, g, judge_hint=hint)
            row[h] = fmt_acc(m.summary)
            table.add_cell(ref, h, row[h], m.source)
        if extra:
            row[extra_header], src = extra(run, judge)
            table.add_cell(ref, extra_header, row[extra_header], src)
        ident = run.identity(judge, ctx.published)
        row.update({"Answer model": ident.answer_model, "Judge": ident.judge_model, "Protocol": ident.protocol})
        table.rows.append(row)
        meas.append((ref, ident))
        if run.coverage_warning:
            not_run.append(f"{ref}: {run.coverage_warning}")
    table.link(pubs, meas)
    table.notes += [
        "P rows: transcribed from the paper (configs/published.yaml), values as printed. M rows: measured by "
        "this harness; each cell is accuracy % [95% CI when metrics.json has one] (k/n), recounted from "
        "01_gold.jsonl + 08_judge_<judge>.jsonl; failed judgments count as wrong.",
        COMPARABLE_NOTE, *source_notes(pubs, ctx.published), *ctx.published.tables[pub_key].get("notes", []), *not_run]
    return table
