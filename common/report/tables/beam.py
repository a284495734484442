"""The BEAM table and figure: every BEAM run's score per ability, official and corrected side by side.

Every BEAM run under ``<results>/beam/`` with a ``metrics.json`` (``make beam``) gives one row per
judge and scoring variant (``common.evaluation.beam.VARIANTS``; the placeholder-filled ones only
when the run made those calls). Each cell is recounted from ``01_gold.jsonl`` and the judge file
(the per-question scores through ``report_results``' aggregation) and must equal metrics.json.
The BEAM paper's 100K and 500K rows are not transcribed: its per-ability tables could not be read
here (docs/beam.md says which numbers exist and why none is printed).
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from common.evaluation import beam
from common.report.tables.runs import (
    Context,
    InconsistentRun,
    MissingRun,
    RunData,
    benchmark_runs,
    differing_question_sets,
    same_number,
)
from common.report.tables.table import Table

MAKE_BEAM = "make beam"
NO_PAPER_ROWS = ("BEAM paper rows (100K and 500K tables, per answer model) are not transcribed: the paper's "
                 "tables could not be read in this workplace; see docs/beam.md, Published numbers.")


def beam_runs(results: Path) -> list[RunData]:
    """Every finished BEAM run under ``results/beam/`` (sorted by name)."""
    return benchmark_runs(results, "beam")


def question_set_warnings(runs: list[RunData]) -> list[str]:
    """The warning of the BEAM table and figure when its runs are over different questions."""
    return differing_question_sets([(run.name, run) for run in runs])


def recount(run: RunData, judge: str) -> dict[str, dict[str, Any]]:
    """variant -> ability -> score (and ``overall``), recounted from the per-question files and checked
    against metrics.json; ``InconsistentRun`` names the first cell that differs."""
    golds = run.rows("gold")
    rows = {r["qid"]: r for r in run.judge_rows(judge)}
    stored = run.metrics["judges"][judge]["variants"]
    out: dict[str, dict[str, Any]] = {}
    for v in beam.VARIANTS:
        if "by_ability" not in stored.get(v, {}):
            continue
        triples = [(g["memory_id"], g["question_type"], ((rows.get(g["qid"]) or {}).get("scores") or {}).get(v))
                   for g in golds]
        report: dict[str, Any] = dict(beam.official_report(triples))
        report["overall"] = beam.overall(report)
        for a in beam.ABILITIES:
            kept = (stored[v]["by_ability"].get(a) or {}).get("score")
            if not same_number(kept, report[a]):
                raise InconsistentRun(f"{run.metrics_path}: judges.{judge}.variants.{v}.by_ability.{a}.score is "
                                      f"{kept} but the gold and judge files give {report[a]}; rerun 09_aggregate")
        out[v] = report
    return out


def _cell(summary: dict[str, Any] | None) -> str:
    if not summary or summary.get("score") is None:
        return "n/a"
    ci = summary.get("ci_cluster") or {}
    band = f" [{100 * ci['low']:.1f}, {100 * ci['high']:.1f}]" if ci.get("low") is not None else ""
    return f"{100 * summary['score']:.1f}{band} ({summary['sum']:g}/{summary['n']})"


def beam_table(ctx: Context) -> Table:
    columns = ["Ref", "Method", "Run", "Coverage", "Question set", "Judge", "Scoring",
               *[beam.SHORT_NAMES[a] for a in beam.ABILITIES], "Overall"]
    table = Table("table_beam", "BEAM: score % per ability (mean over chats of the chat means; "
                  "[95% CI, bootstrap over chats] (sum of question scores/questions); EO = tau_norm)", columns)
    runs = beam_runs(ctx.results)
    for run in runs:
        for j in run.judge_names():
            recount(run, j)
            m = run.metrics["judges"][j]
            for v, block in m["variants"].items():
                if "by_ability" not in block:
                    continue
                ref = f"{run.name}/{j}/{v}"
                label = (run.metrics.get("method") or {}).get("label") or run.name  # 09's method_label
                row = {"Ref": ref, "Method": f"{label} (answers {run.answer_model()})", "Run": run.name,
                       "Coverage": run.coverage.mark, "Question set": run.question_set_text,
                       "Judge": run.judge_model(j),
                       "Scoring": beam.VARIANT_LABELS[v] + (" (headline)" if v == m.get("headline") else "")}
                for a in beam.ABILITIES:
                    text = _cell(block["by_ability"].get(a))
                    row[beam.SHORT_NAMES[a]] = text
                    table.add_cell(ref, beam.SHORT_NAMES[a], text, {"run": run.name, "judge": j, "variant": v,
                                                                    "files": run.files("gold", judges=[j])})
                o = block.get("overall")
                row["Overall"] = "n/a" if o is None else f"{100 * o:.1f}"
                table.rows.append(row)
        for note in (run.coverage_warning, run.dataset_warning):
            if note:
                table.notes.append(f"{run.name}: {note}")
    if not runs:
        raise MissingRun(f"{ctx.results / 'beam'}: no BEAM run (no <run>/metrics.json); create one with `{MAKE_BEAM}`")
    table.warnings += question_set_warnings(runs)
    table.notes += [
        "Official = compute_metrics.py as published (int(score): a 0.5 verdict counts 0; the prompt's <question> "
        "never filled). Float scores: the same judge replies read with float(). <question> filled: its own judge "
        "calls (score.beam_fill_question). Failures count 0.",
        "Overall = unweighted mean of the ten ability scores (the official report prints none).",
        NO_PAPER_ROWS]
    return table


def beam_figure(ctx: Context) -> tuple[Figure, list[dict[str, Any]]]:
    """Grouped bars per ability: each run/judge/variant's score, the official and corrected side by side.

    A score of 0 is drawn (a tick and its value at the foot of the bar), a missing score is written
    ``n/a``, so the two never look alike; each series names its run's coverage and question set."""
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax = fig.subplots()
    series: list[dict[str, Any]] = []
    runs = beam_runs(ctx.results)
    if not runs:
        raise MissingRun(f"{ctx.results / 'beam'}: no BEAM run (no <run>/metrics.json); create one with `{MAKE_BEAM}`")
    partial = [f"{r.name} {r.coverage.mark}" for r in runs if r.coverage.partial]
    warnings = question_set_warnings(runs)
    for run in runs:
        mark = f" [{run.coverage.mark}]" if run.coverage.partial else ""  # a partial run never passes for a full one
        for j in run.judge_names():
            for v, report in recount(run, j).items():
                label = f"{run.name}{mark} {run.question_set[0]} / {run.judge_model(j)} / {beam.VARIANT_LABELS[v]}"
                series.append({"label": label, "run": run.name, "judge": j, "variant": v,
                               "coverage": run.coverage.to_dict(), "question_set": run.question_set[0],
                               "values": {a: report[a] for a in beam.ABILITIES}})
    xs = list(range(len(beam.ABILITIES)))
    width = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        at = [x + i * width - 0.4 + width / 2 for x in xs]
        values = [s["values"][a] for a in beam.ABILITIES]
        bars = ax.bar(at, [math.nan if v is None else 100 * v for v in values], width, label=s["label"])
        color = bars.patches[0].get_facecolor() if bars.patches else "black"
        for x, v in zip(at, values):
            if v is None:  # no score: written, never an empty slot that reads as 0
                ax.text(x, 1, "n/a", ha="center", va="bottom", fontsize=6, rotation=90, color="dimgray")
            elif v == 0:  # a real 0: a tick on the axis and its value
                ax.plot([x], [0], marker="_", markersize=max(4.0, 60 * width), markeredgewidth=2.5, color=color,
                        clip_on=False)
                ax.text(x, 1, "0", ha="center", va="bottom", fontsize=6, color=color)
    ax.set_xticks(xs, [beam.SHORT_NAMES[a] for a in beam.ABILITIES])
    ax.set_ylim(0, 100)
    ax.set_ylabel("score % (mean over chats)")
    title = "BEAM per ability: official vs corrected scoring" + (f" (PARTIAL runs: {', '.join(partial)})"
                                                                  if partial else "")
    if warnings:
        title += "; QUESTION SETS DIFFER between the runs (ids in the legend)"
    ax.set_title(textwrap.fill(title, width=150), fontsize=9)
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=6, frameon=False,
               ncols=2 if len(series) > 4 else 1)
    return fig, series
