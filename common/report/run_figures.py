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

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from common.benchmarks.registry import adapter
from common.evaluation import beam
from common.report.tables import locomo_plus as plus_table
from common.report.tables.beam import recount
from common.report.tables.runs import Context, MissingRun, RunData, ci_bounds, measured
from common.report.tables.systems import BENCHMARKS, finished_runs, spent

MEASURED_COLOR, PARTIAL_COLOR = "#4C72B0", "#DD8452"
GROUP_NAME = {"locomo": "category", "longmemeval": "question type", "beam": "ability", "locomo_plus": "category"}


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


def main_figure(ctx: Context, benchmark: str) -> tuple[Figure, dict[str, Any]]:
    """Accuracy per group of the main run of ``benchmark``, with 95 % CIs; partial runs marked."""
    run = ctx.main_run(benchmark)
    judge = judge_of(ctx, run)
    groups = _groups(ctx, run, judge)
    fig = Figure(figsize=(max(6.0, 0.9 * len(groups) + 2), 4.4), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(groups)))
    heights = [float("nan") if g["value"] is None else 100 * g["value"] for g in groups]
    color = PARTIAL_COLOR if run.coverage.partial else MEASURED_COLOR
    ax.bar(xs, heights, color=color, width=0.6, label=f"run {run.name}, judge {run.judge_model(judge)}")
    have = [(x, h, g["ci"]) for x, h, g in zip(xs, heights, groups) if g["ci"] and h == h]
    if have:
        ax.errorbar([x for x, _, _ in have], [h for _, h, _ in have],
                    yerr=[[h - 100 * ci[0] for _, h, ci in have], [100 * ci[1] - h for _, h, ci in have]],
                    fmt="none", ecolor="dimgray", elinewidth=1, capsize=3, label="95% CI")
    for x, h, g in zip(xs, heights, groups):
        ax.text(x, 1.5, g["kn"], ha="center", va="bottom", fontsize=7, color="white" if h >= 12 else "black")
    ax.set_xticks(xs, [g["group"] for g in groups], fontsize=7, rotation=20, ha="right")
    ax.set_ylim(0, 105)
    ax.set_ylabel("Accuracy (%)" if benchmark not in ("beam", "locomo_plus") else "Score (%)")
    ax.set_title(f"{benchmark}: run {run.name} per {GROUP_NAME[benchmark]}{_title_mark(run)}", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()  # below the axes: never over a bar or a whisker
    fig.legend(handles, labels, loc="outside lower center", fontsize=7, frameon=False, ncols=2)
    sidecar = {"run": run.name, "run_dir": str(run.dir), "judge": judge, "coverage": run.coverage.to_dict(),
               "chosen": ctx.chosen.get(benchmark, ""),
               "points": [{**g["source"], "group": g["group"], "value": g["value"], "k_n": g["kn"],
                           "ci": list(g["ci"]) if g["ci"] else None} for g in groups]}
    return fig, sidecar


def _point(ctx: Context, run: RunData) -> dict[str, Any]:
    """One run's point: overall accuracy (recounted) with its CI, tokens and dollars per question."""
    judge = judge_of(ctx, run)
    m = plus_table.measured_score(run, judge) if run.benchmark == "locomo_plus" else measured(run, judge)
    cost = spent(run)
    system = (run.metrics.get("method") or {}).get("name") if isinstance(run.metrics.get("method"), dict) else None
    return {**m.source, "run": run.name, "benchmark": run.benchmark, "system": system or "not recorded",
            "judge": judge, "accuracy": m.summary.get("accuracy"), "k_n": f"{m.summary['k']}/{m.summary['n']}",
            "ci": ci_bounds(m.summary.get("ci")), "coverage": run.coverage.to_dict(),
            "tokens_per_question": None if cost is None else cost["tokens"],
            "usd_per_question": None if cost is None else cost["usd"]}


def systems_figure(ctx: Context) -> tuple[Figure, dict[str, Any]]:
    """Accuracy against tokens per question, one point per run (any system) with its 95 % CI."""
    points = [_point(ctx, r) for b in BENCHMARKS for r in finished_runs(ctx, b) if r.judge_names()]
    drawn = [p for p in points if p["tokens_per_question"] and p["accuracy"] is not None]
    if not drawn:
        raise MissingRun(f"{ctx.results}: no finished LoCoMo or LongMemEval run made here (imports spend no tokens "
                         "here); create one with `make locomo`")
    benches = [b for b in BENCHMARKS if any(p["benchmark"] == b for p in drawn)]
    fig = Figure(figsize=(6.0 * len(benches), 4.6), layout="constrained")
    axes = fig.subplots(1, len(benches), squeeze=False)[0]
    partial = [p for p in drawn if not p["coverage"]["complete"]]
    for ax, b in zip(axes, benches):
        for p in (q for q in drawn if q["benchmark"] == b):
            y = 100 * p["accuracy"]
            err = [[y - 100 * p["ci"][0]], [100 * p["ci"][1] - y]] if p["ci"] else None
            mark = "" if p["coverage"]["complete"] else f" [{p['coverage']['mark']}]"
            ax.errorbar([p["tokens_per_question"]], [y], yerr=err, fmt="o" if not mark else "s", capsize=3,
                        label=f"{p['run']} ({p['system']}){mark}")
        ax.set_xscale("log")
        ax.set_xlabel("LLM tokens per question (ledger, all stages)")
        ax.set_ylabel("Accuracy (%), 95% CI")
        ax.set_ylim(0, 105)
        ax.set_title(f"{b}: accuracy vs tokens per question", fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(handles, labels, fontsize=6, loc="upper left", bbox_to_anchor=(0, -0.15), frameon=False)
    if partial:
        fig.suptitle("PARTIAL runs (square markers): " + ", ".join(f"{p['run']} {p['coverage']['mark']}"
                                                                    for p in partial), fontsize=8)
    sidecar = {"points": [{**p, "ci": list(p["ci"]) if p["ci"] else None} for p in points],
               "not_drawn": [p["run"] for p in points if p not in drawn]}
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
