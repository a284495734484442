"""The LoCoMo-Plus table and figure: every run's official mean score per category, both parser readings.

Every LoCoMo-Plus run under ``<results>/locomo_plus/`` with a ``metrics.json`` gives one row per judge
and parser reading (``common.evaluation.locomo_plus.VARIANTS``): the six categories, the overall mean
over all questions, LoCoMo's five together, and the Cognitive items whose cue lands right before
their trigger. Each cell is recounted from ``01_gold.jsonl`` and the judge file first (``recount``),
so a table never prints a number its per-question files do not give. The paper's rows are not
transcribed (docs/locomo-plus.md, Published numbers).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from common.benchmarks.locomo_plus import CATEGORIES, COGNITIVE
from common.core.io import read_json
from common.core.schema import Gold, from_dict
from common.evaluation import locomo_plus as lp
from common.report.tables.runs import InconsistentRun, Measured, MissingRun, RunData, TableError
from common.report.tables.table import Table

BENCHMARK = "locomo_plus"
MAKE = "make locomo-plus"
SHORT = {"multi-hop": "MH", "temporal": "TMP", "common-sense": "CS", "single-hop": "SH", "adversarial": "ADV",
         COGNITIVE: "COG"}
NO_PAPER_ROWS = ("LoCoMo-Plus paper rows are not transcribed: the paper could not be read in this workplace and the "
                 "repository prints no numbers; see docs/locomo-plus.md, Published numbers.")


def runs(results: Path) -> list[RunData]:
    """Every finished LoCoMo-Plus run under ``results/locomo_plus/`` (sorted by name)."""
    out = []
    for path in sorted((results / BENCHMARK).glob("*/metrics.json")):
        data = read_json(path, TableError)
        if data.get("benchmark") == BENCHMARK and isinstance(data.get("judges"), dict):
            out.append(RunData(BENCHMARK, path.parent.name, path.parent, data))
    return out


def recount(run: RunData, judge: str) -> dict[str, dict[str, Any]]:
    """variant -> category (and ``overall``) -> mean score, recounted from the per-question files and
    checked against metrics.json; ``InconsistentRun`` names the first cell that differs."""
    golds = [from_dict(Gold, g) for g in run.rows("gold")]
    rows = {r["qid"]: r for r in run.judge_rows(judge)}
    stored = run.metrics["judges"][judge]["variants"]
    out: dict[str, dict[str, Any]] = {}
    for v in lp.VARIANTS:
        scores = lp.question_scores(rows, v)
        mean = {c: _mean([scores.get(g.qid) for g in golds if g.question_type == c]) for c in CATEGORIES}
        mean["overall"] = _mean([scores.get(g.qid) for g in golds])
        for c, value in mean.items():
            block = stored[v]["overall"] if c == "overall" else stored[v]["by_category"].get(c)
            kept = (block or {}).get("score")
            # metrics.json keeps 4 decimals of the mean: equal within that rounding.
            if kept is None or value is None:
                differs = (kept is None) != (value is None)
            else:
                differs = abs(float(kept) - value) > 6e-5
            if differs:
                where = "overall" if c == "overall" else f"by_category.{c}"
                raise InconsistentRun(f"{run.metrics_path}: judges.{judge}.variants.{v}.{where}.score is {kept} but "
                                      f"the gold and judge files give {value}; rerun 09_aggregate")
        out[v] = mean
    return out


def _mean(values: list[Any]) -> Any:
    return None if not values else sum(0.0 if s is None else float(s) for s in values) / len(values)


def measured_score(run: RunData, judge: str) -> Measured:
    """The headline overall mean as a systems-table cell (``fmt_acc``'s shape: the score, its CIs, sum/n),
    after ``recount``."""
    recount(run, judge)
    m = run.metrics["judges"][judge]
    head = m["variants"][m.get("headline") or "official"]["overall"] or {}
    summary = {"accuracy": head.get("score"), "k": head.get("sum"), "n": head.get("n"),
               "n_failed": head.get("n_failed"), "ci": head.get("ci"), "ci_cluster": head.get("ci_cluster")}
    source = {"run_dir": str(run.dir), "metric": f"judges.{judge}.variants.{m.get('headline')}.overall.score",
              "files": run.files("metrics", "gold", judges=[judge]), "recounted_from": ["01_gold.jsonl", judge],
              "k": summary["k"], "n": summary["n"], "accuracy": summary["accuracy"],
              "judge_model": m.get("judge_model"), "ci": summary["ci"], "ci_cluster": summary["ci_cluster"],
              "fingerprint": run.fingerprint_for(judge),
              "measure": "official mean score (correct 1, partial 0.5, wrong 0), not an accuracy"}
    return Measured(summary, source)


def locomo_plus_table(ctx: Any) -> Table:
    columns = ["Ref", "Method", "Run", "Coverage", "Judge", "Parser", *[SHORT[c] for c in CATEGORIES], "Overall",
               "LoCoMo 5", "COG cue before trigger"]
    table = Table("table_locomo_plus", "LoCoMo-Plus: official mean score % per category (correct 1, partial 0.5, "
                  "wrong 0; [95% CI; cl: the LoCoMo conversations resampled] (sum of scores/questions))", columns)
    found = runs(ctx.results)
    for run in found:
        for j in run.judge_names():
            recount(run, j)
            m = run.metrics["judges"][j]
            for v in lp.VARIANTS:
                block = m["variants"][v]
                ref = f"{run.name}/{j}/{v}"
                label = (run.metrics.get("method") or {}).get("label") or run.name
                row = {"Ref": ref, "Method": f"{label} (answers {run.answer_model()})", "Run": run.name,
                       "Coverage": run.coverage.mark, "Judge": run.judge_model(j),
                       "Parser": lp.VARIANT_LABELS[v] + (" (headline)" if v == m.get("headline") else "")}
                cells = {SHORT[c]: block["by_category"].get(c) for c in CATEGORIES}
                cells.update({"Overall": block["overall"], "LoCoMo 5": block["locomo_categories"],
                              "COG cue before trigger": block["subsets"].get("cue_before_trigger")})
                for column, summary in cells.items():
                    row[column] = lp.cell(summary)
                    table.add_cell(ref, column, row[column], {"run": run.name, "judge": j, "variant": v,
                                                              "files": run.files("gold", judges=[j])})
                table.rows.append(row)
        for note in (run.coverage_warning, run.dataset_warning):
            if note:
                table.notes.append(f"{run.name}: {note}")
    if not found:
        raise MissingRun(f"{ctx.results / BENCHMARK}: no LoCoMo-Plus run (no <run>/metrics.json); create one with "
                         f"`{MAKE}`")
    table.notes += [
        "Official parser = llm_as_judge._parse_judge_response as published (a reply that is not JSON is read by "
        "looking for 'correct' before 'wrong': 'incorrect' scores 1). Strict parser = the same replies, JSON only; "
        "anything else a counted failure. Failures count 0.",
        "Overall = the official mean over all questions (every category weighted by its questions); LoCoMo 5 = the "
        "five LoCoMo categories together; COG cue before trigger = the Cognitive items whose cue lands right before "
        "their trigger (no session between them: a gap of 7 days or less, or one that did not parse).",
        NO_PAPER_ROWS]
    return table


def locomo_plus_figure(ctx: Any) -> tuple[Figure, list[dict[str, Any]]]:
    """Grouped bars per category and overall: every run, judge and parser reading, with the
    conversation-clustered 95 % CI; partial runs marked."""
    found = runs(ctx.results)
    if not found:
        raise MissingRun(f"{ctx.results / BENCHMARK}: no LoCoMo-Plus run (no <run>/metrics.json); create one with "
                         f"`{MAKE}`")
    groups = [*CATEGORIES, "overall"]
    series: list[dict[str, Any]] = []
    for run in found:
        for j in run.judge_names():
            recount(run, j)
            mark = f" [{run.coverage.mark}]" if run.coverage.partial else ""
            for v in lp.VARIANTS:
                block = run.metrics["judges"][j]["variants"][v]
                summaries = {c: block["by_category"].get(c) for c in CATEGORIES} | {"overall": block["overall"]}
                series.append({"label": f"{run.name}{mark} / {run.judge_model(j)} / {lp.VARIANT_LABELS[v]}",
                               "run": run.name, "judge": j, "variant": v, "coverage": run.coverage.to_dict(),
                               "values": {c: (s or {}).get("score") for c, s in summaries.items()},
                               "ci": {c: ((s or {}).get("ci_cluster") or {}) for c, s in summaries.items()}})
    fig = Figure(figsize=(max(7.0, 1.1 * len(groups) + 0.25 * len(series)), 4.6), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        heights = [100 * s["values"][c] if s["values"][c] is not None else math.nan for c in groups]
        ax.bar(xs, heights, width=width, label=s["label"])
        have = [(x, h, s["ci"][c]) for x, h, c in zip(xs, heights, groups) if s["ci"][c].get("low") is not None]
        if have:
            ax.errorbar([x for x, _, _ in have], [h for _, h, _ in have],
                        yerr=[[h - 100 * ci["low"] for _, h, ci in have], [100 * ci["high"] - h for _, h, ci in have]],
                        fmt="none", ecolor="dimgray", elinewidth=1, capsize=2)
    ax.set_xticks(range(len(groups)), [SHORT.get(c, c) for c in groups])
    ax.set_ylim(0, 105)
    ax.set_ylabel("Official mean score (%), 95% CI over conversations")
    partial = any(s["coverage"]["complete"] is False for s in series)
    ax.set_title("LoCoMo-Plus per category: official vs strict parser" + (" (PARTIAL runs marked)" if partial else ""),
                 fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", fontsize=6, frameon=False, ncols=2)
    return fig, series
