"""Figures of the main runs and of every system (``make figures``): accuracy per group with CIs, cost vs accuracy.

* ``figure_main_<benchmark>``: the main run's accuracy per LoCoMo category, LongMemEval question
  type or BEAM ability (the headline scoring), with its 95 % CI (the question bootstrap of
  ``metrics.json``; BEAM: the bootstrap over chats), one bar per group plus the overall. Every
  LoCoMo / LongMemEval bar is recounted from the gold and judge files first
  (``common.report.tables.runs.measured``), every BEAM bar by ``common.report.tables.beam.recount``.
* ``figure_systems``: one point per finished run of any memory system (LoCoMo, LongMemEval),
  its overall accuracy with its CI against the LLM tokens it spent per question (the ledger;
  imported runs made no call here and are listed in the sidecar, not drawn).

The main run is the one ``make tables`` uses (``Context.main_run``: ``RUN=``, else
``configs/experiments.yaml``'s, else the newest complete run of the paper's config). A partial
run says so in the figure's title (``PARTIAL 20 / 1,540``) and in its label.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any, Optional

from matplotlib.figure import Figure

from common.benchmarks.registry import adapter
from common.evaluation import beam
from common.report.tables import locomo_plus as plus_table
from common.report.tables.beam import recount
from common.report.tables.published import NOT_REPORTED, canonical_model, comparable, number
from common.report.tables.runs import Context, MissingRun, RunData, ci_bounds, differing_question_sets, measured
from common.report.tables.systems import BENCHMARKS, finished_runs, spent

MEASURED_COLOR, PARTIAL_COLOR, PAPER_COLOR = "#4C72B0", "#DD8452", "#9E9E9E"
GROUP_NAME = {"locomo": "category", "longmemeval": "question type", "beam": "ability", "realtalk": "category",
              "locomo_plus": "category"}
# The paper's accuracy table of each benchmark (configs/published.yaml) and its own method's rows in it:
# the main figure draws that row beside the measured bars. BEAM: the paper ran none.
PUBLISHED_TABLE = {"locomo": "table1", "longmemeval": "table2"}
PAPER_METHOD = "EnSIMem"


def judge_of(ctx: Context, run: RunData) -> str:
    """The primary judge of configs/experiments.yaml when the run has it, else the run's first judge."""
    names = run.judge_names()
    if not names:
        raise MissingRun(f"{run.metrics_path}: no judge in the run; run its judge stage")
    return ctx.exp.judges["primary"] if ctx.exp.judges["primary"] in names else names[0]


def _title_mark(run: RunData) -> str:
    return f" — {run.coverage.mark} questions (not the full benchmark)" if run.coverage.partial else ""


def _groups(ctx: Context, run: RunData, judge: str) -> list[dict[str, Any]]:
    """(group, value, k/n text, CI, source) per group and overall, verified against the per-question files."""
    out: list[dict[str, Any]] = []
    if run.benchmark == "beam":
        recount(run, judge)  # InconsistentRun when metrics.json disagrees with the per-question scores
        block = run.metrics["judges"][judge]
        head = block["variants"].get(block.get("headline") or "official") or {}
        for a in beam.ABILITIES:
            s = (head.get("by_ability") or {}).get(a) or {}
            out.append({"group": beam.SHORT_NAMES[a], "value": s.get("score"), "kn": f"{s.get('sum', 0):g}/"
                        f"{s.get('n', 0)}", "ci": ci_bounds(s.get("ci_cluster") or s.get("ci")),
                        "source": {"run_dir": str(run.dir), "metric": f"judges.{judge}.variants."
                                   f"{block.get('headline') or 'official'}.by_ability.{a}", "n": s.get("n"),
                                   "files": run.files("gold", judges=[judge])}})
        return out
    if run.benchmark == "locomo_plus":  # the headline parser's mean score, recounted first
        plus_table.recount(run, judge)
        block = run.metrics["judges"][judge]
        head = block["variants"][block.get("headline") or "official"]
        for g in [*adapter(run.benchmark).categories, None]:
            s = head["overall"] if g is None else head["by_category"].get(g)
            if s:
                out.append({"group": g or "overall", "value": s.get("score"), "kn": f"{s['sum']:g}/{s['n']}",
                            "ci": ci_bounds(s.get("ci_cluster") or s.get("ci")),
                            "source": {"run_dir": str(run.dir), "metric": f"judges.{judge}.variants."
                                       f"{block.get('headline')}." + (f"by_category.{g}" if g else "overall"),
                                       "n": s.get("n"), "files": run.files("gold", judges=[judge])}})
        return out
    for g in [*adapter(run.benchmark).categories, None]:
        m = measured(run, judge, g)
        if not m.summary.get("n"):
            continue
        out.append({"group": g or "overall", "value": m.summary.get("accuracy"),
                    "kn": f"{m.summary['k']}/{m.summary['n']}", "ci": ci_bounds(m.summary.get("ci")),
                    "source": m.source})
    return out


def published(ctx: Context, run: RunData, judge: str, groups: list[str]) -> Optional[dict[str, Any]]:
    """The paper's printed values for the main figure of ``run``'s benchmark: the paper's own row
    (``PAPER_METHOD``) judged by the run's judge model where the paper has one, else its first;
    None where the paper prints no table for the benchmark."""
    table = PUBLISHED_TABLE.get(run.benchmark)
    if table not in ctx.published.tables:
        return None
    rows = [r for r in ctx.published.rows(table) if r.method.startswith(PAPER_METHOD)]
    if not rows:
        return None
    same = [r for r in rows if canonical_model(r.identity.judge_model) == canonical_model(run.judge_model(judge))]
    row = (same or rows)[0]
    columns = list(ctx.published.tables[table].get("columns") or [])
    values = {g: number(row.values.get(columns[-1] if g == "overall" else g, NOT_REPORTED)) for g in groups}
    ok, why = comparable(row.identity, run.identity(judge, ctx.published))
    return {"table": table, "method": row.method, "source": row.source, "judge_model": row.identity.judge_model,
            "values": values, "comparable": "yes" if ok else f"no ({why})"}


def main_figure(ctx: Context, benchmark: str) -> tuple[Figure, dict[str, Any]]:
    """Accuracy per group of the main run of ``benchmark``, with 95 % CIs, beside the paper's printed
    values (grey, hatched); partial runs marked, and a main run nobody named said so."""
    run = ctx.main_run(benchmark)
    judge = judge_of(ctx, run)
    groups = _groups(ctx, run, judge)
    paper = published(ctx, run, judge, [g["group"] for g in groups])
    fig = Figure(figsize=(max(6.5, 1.1 * len(groups) + 2), 4.8), layout="constrained")
    ax = fig.subplots()
    width = 0.38 if paper else 0.6
    xs = [x - width / 2 if paper else float(x) for x in range(len(groups))]
    heights = [float("nan") if g["value"] is None else 100 * g["value"] for g in groups]
    color = PARTIAL_COLOR if run.coverage.partial else MEASURED_COLOR
    ax.bar(xs, heights, color=color, width=width, label=f"run {run.name} (measured), judge {run.judge_model(judge)}")
    have = [(x, h, g["ci"]) for x, h, g in zip(xs, heights, groups) if g["ci"] and h == h]
    if have:
        ax.errorbar([x for x, _, _ in have], [h for _, h, _ in have],
                    yerr=[[h - 100 * ci[0] for _, h, ci in have], [100 * ci[1] - h for _, h, ci in have]],
                    fmt="none", ecolor="dimgray", elinewidth=1, capsize=3, label="95% CI")
    for x, h, g in zip(xs, heights, groups):
        ax.text(x, 1.5, g["kn"], ha="center", va="bottom", fontsize=6, rotation=90 if paper else 0,
                color="white" if h >= 12 else "black")
    if paper:
        values = [paper["values"][g["group"]] for g in groups]
        px = [x + width for x in xs]
        ax.bar(px, [math.nan if v is None else v for v in values], width=width, color=PAPER_COLOR, hatch="//",
               edgecolor="white", label=f"paper, as printed ({paper['table']}: {paper['method']}); comparable: "
                                        f"{paper['comparable']}")
        for x, v in zip(px, values):  # the printed value on top of its bar (the measured bars carry k/n)
            ax.text(x, 1.5 if v is None else v + 0.8, "n/r" if v is None else f"{v:.1f}", ha="center",
                    va="bottom", fontsize=6)
    ax.set_xticks(range(len(groups)), [g["group"] for g in groups], fontsize=7, rotation=20, ha="right")
    ax.set_ylim(0, 108)
    ax.set_ylabel("Accuracy (%)" if benchmark not in ("beam", "locomo_plus") else "Score (%)")
    title = [f"{benchmark}: run {run.name} per {GROUP_NAME.get(benchmark, 'group')}{_title_mark(run)}"]
    if benchmark in ctx.unnamed:  # nobody named the main run: say which was taken, in the figure itself
        title.append(f"{run.name} was taken as the newest run (RUN= names the main run)")
    if paper is None:
        title.append("no paper values transcribed for this benchmark")
    ax.set_title("\n".join(title), fontsize=8)  # one statement a line: a wrap never splits a PARTIAL mark
    handles, labels = ax.get_legend_handles_labels()  # below the axes: never over a bar or a whisker
    fig.legend(handles, [textwrap.fill(label, 90) for label in labels], loc="outside lower center", fontsize=7,
               frameon=False, ncols=1)
    sidecar = {"run": run.name, "run_dir": str(run.dir), "judge": judge, "coverage": run.coverage.to_dict(),
               "question_set": dict(zip(("id", "n"), run.question_set)),
               "chosen": ctx.chosen.get(benchmark, ""), "warnings": [ctx.unnamed[benchmark]]
               if benchmark in ctx.unnamed else [], "published": paper,
               "points": [{**g["source"], "group": g["group"], "value": g["value"], "k_n": g["kn"],
                           "ci": list(g["ci"]) if g["ci"] else None} for g in groups]}
    return fig, sidecar


def _point(ctx: Context, run: RunData) -> dict[str, Any]:
    """One run's point: overall accuracy (recounted) with its CI, tokens and dollars per question."""
    judge = judge_of(ctx, run)
    m = plus_table.measured_score(run, judge) if run.benchmark == "locomo_plus" else measured(run, judge)
    cost = spent(run)
    system = (run.metrics.get("method") or {}).get("name") if isinstance(run.metrics.get("method"), dict) else None
    qs, n = run.question_set
    return {**m.source, "run": run.name, "benchmark": run.benchmark, "system": system or "not recorded",
            "judge": judge, "accuracy": m.summary.get("accuracy"), "k_n": f"{m.summary['k']}/{m.summary['n']}",
            "ci": ci_bounds(m.summary.get("ci")), "coverage": run.coverage.to_dict(),
            "question_set": {"id": qs, "n": n},
            "tokens_per_question": None if cost is None else cost["tokens"],
            "usd_per_question": None if cost is None else cost["usd"]}


def _spread(points: list[dict[str, Any]]) -> list[float]:
    """x of each point: its tokens per question, points that would sit on one another (same tokens and
    accuracy to the pixel) moved apart by a few percent so that every one of them shows."""
    xs = [float(p["tokens_per_question"]) for p in points]
    groups: dict[tuple[float, float], list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault((round(math.log10(xs[i]), 2), round(100 * p["accuracy"])), []).append(i)
    for members in groups.values():
        for k, i in enumerate(members):
            xs[i] *= 10 ** (0.025 * (k - (len(members) - 1) / 2))
    return xs


def _draw(ax: Any, points: list[dict[str, Any]], xs: list[float], numbers: list[int]) -> None:
    for p, x, n in zip(points, xs, numbers):
        y = 100 * p["accuracy"]
        err = [[y - 100 * p["ci"][0]], [100 * p["ci"][1] - y]] if p["ci"] else None
        mark = "" if p["coverage"]["complete"] else f" [{p['coverage']['mark']}]"
        ax.errorbar([x], [y], yerr=err, fmt="s" if mark else "o", capsize=3,
                    label=f"{n}: {p['run']} ({p['system']}){mark} {p['question_set']['id']}")
        ax.annotate(str(n), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)


def systems_figure(ctx: Context) -> tuple[Figure, dict[str, Any]]:
    """Accuracy against tokens per question, one numbered point per run (any system) with its 95 % CI.

    Every run with an accuracy is drawn: an imported run spent no tokens here, so it stands in a
    narrow panel of its own beside the axis; runs on the same spot are moved apart. A partial run
    is a square marker; each legend entry names the run's coverage and question set, and runs over
    different question sets are warned about in the title and the sidecar.
    """
    runs = [r for b in BENCHMARKS for r in finished_runs(ctx, b) if r.judge_names()]
    points = [_point(ctx, r) for r in runs]
    drawn = [p for p in points if p["accuracy"] is not None]
    if not drawn:
        raise MissingRun(f"{ctx.results}: no finished run of {', '.join(BENCHMARKS)} with an accuracy; create one "
                         "with `make locomo`")
    benches = [b for b in BENCHMARKS if any(p["benchmark"] == b for p in drawn)]
    rows = [(b, [p for p in drawn if p["benchmark"] == b]) for b in benches]
    legend_lines = max(len(ps) for _, ps in rows)
    fig = Figure(figsize=(8.0, (3.6 + 0.13 * legend_lines) * len(benches) + 0.6), layout="constrained")
    grid = fig.subplots(len(benches), 2, squeeze=False, width_ratios=[6, 1], sharey="row")
    numbers = {id(p): i for i, p in enumerate(drawn, 1)}
    warnings = differing_question_sets([(p["run"], r) for p, r in zip(points, runs) if p in drawn])
    for (b, ps), (ax, side) in zip(rows, grid):
        made = [p for p in ps if p["tokens_per_question"]]
        imported = [p for p in ps if not p["tokens_per_question"]]
        if made:
            xs = _spread(made)
            _draw(ax, made, xs, [numbers[id(p)] for p in made])
            ax.set_xscale("log")
            ax.set_xlim(min(xs) / 1.6, max(xs) * 1.6)
        ax.set_xlabel("LLM tokens per question (ledger, all stages)")
        ax.set_ylabel("Accuracy (%), 95% CI")
        ax.set_ylim(0, 105)
        ax.set_title(f"{b}: accuracy vs tokens per question", fontsize=9)
        if imported:
            _draw(side, imported, [float(i) for i in range(len(imported))], [numbers[id(p)] for p in imported])
            side.set_xlim(-0.8, len(imported) - 0.2)
        side.set_xticks([])
        side.set_title("imported:\nno tokens\nmeasured here", fontsize=7)
        handles, labels = ax.get_legend_handles_labels()
        more, extra = side.get_legend_handles_labels()
        order = sorted(range(len(labels + extra)), key=lambda i: int((labels + extra)[i].split(":")[0]))
        ax.legend([(handles + more)[i] for i in order], [(labels + extra)[i] for i in order], fontsize=6,
                  loc="upper left", bbox_to_anchor=(0, -0.16), frameon=False)
    partial = [p for p in drawn if not p["coverage"]["complete"]]
    title = f"Accuracy vs LLM tokens per question: {len(drawn)} runs"
    if partial:
        title += f"; {len(partial)} PARTIAL (square markers, coverage in the legend)"
    if warnings:
        title += "; QUESTION SETS DIFFER (ids in the legend): accuracies over different questions"
    fig.suptitle(textwrap.fill(title, width=110), fontsize=8)
    sidecar = {"points": [{**p, "ci": list(p["ci"]) if p["ci"] else None} for p in points],
               "drawn": len(drawn), "not_drawn": [p["run"] for p in points if p not in drawn],
               "warnings": warnings}
    return fig, sidecar


def save(name: str, fig: Figure, sidecar: dict[str, Any], out: Path, meta: dict[str, Any]) -> list[Path]:
    """PNG + PDF (no timestamps) and ``<name>.sources.json``, as the paper's figures are written."""
    import json

    out.mkdir(parents=True, exist_ok=True)
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    fig.savefig(png, dpi=200, metadata={"Software": None})
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None})
    side = out / f"{name}.sources.json"
    side.write_text(json.dumps({"figure": name, **meta, **sidecar}, ensure_ascii=False, indent=2) + "\n",
                    encoding="utf-8")
    return [png, pdf, side]
