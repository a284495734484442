"""The paper's Figures 2 and 3, the main runs per group and the systems chart (``python -m common.report.figures``).

Figure 2: accuracy by episode granularity (left) and property granularity (right); Figure 3:
accuracy of fixed top-k budgets over k, with the adaptive budget as a dashed line. Bars and
lines are the harness's measured accuracies under the primary judge, each labelled k/n and
recounted from the per-question files (``common.report.tables.runs.measured``); the paper's printed values
(configs/published.yaml) are drawn as reference markers where the paper reports them. Each
figure is written to ``figures/`` as PNG and PDF, with ``figureN.sources.json`` mapping every
plotted value to its run, files, k and n. No LLM call is made.

Figures of the main runs (``figure_main_<benchmark>``: accuracy per category / question type /
ability with 95% CIs) and ``figure_systems`` (accuracy against tokens per question, one point per
run) come from ``common.report.run_figures``; ``figure_beam`` and ``figure_realtalk`` (every run of
the benchmark, its scores per ability or category side by side) from ``common.report.tables.beam``
and ``.realtalk``. A figure whose run is missing is skipped with the command that makes it, and a
partial run is marked on every figure.

    python -m common.report.figures [--results results] [--out figures] [--run NAME] [--subset all] [--only 2,3]
"""
from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from matplotlib.figure import Figure

from common.benchmarks.registry import ADAPTERS
from common.core.config import ConfigError
from common.report import run_figures
from common.report.tables.beam import beam_figure, beam_runs, question_set_warnings
from common.report.tables.command import cli
from common.report.tables.locomo_plus import locomo_plus_figure
from common.report.tables.published import NOT_REPORTED, comparable, number
from common.report.tables.realtalk import realtalk_figure
from common.report.tables.runs import (
    MAKE_ABLATIONS,
    Context,
    Measured,
    ablation_runs,
    ci_bounds,
    differing_question_sets,
    measured,
    subset_note,
)

DEFAULT_OUT = "figures"
MEASURED_COLOR, PAPER_COLOR = "#4C72B0", "black"


@dataclass(frozen=True)
class Point:
    """One plotted variant: its measured accuracy and the paper's value (None if not printed)."""

    variant: str
    label: str
    measured: Measured
    paper: Optional[float]
    question_set: str = ""  # the run's question-set id (common.evaluation.coverage)

    @property
    def percent(self) -> float:
        acc = self.measured.summary["accuracy"]
        return float("nan") if acc is None else 100 * acc

    @property
    def kn(self) -> str:
        return f"{self.measured.summary['k']}/{self.measured.summary['n']}"


@dataclass
class Panel:
    name: str
    points: list[Point]
    paper_source: str
    paper_comparable: str  # "yes" or "no (reasons)"
    subset_note: str
    coverage: str = ""  # the PARTIAL marks of its runs (common.evaluation.coverage), "" when all are complete
    warnings: list[str] = dataclasses.field(default_factory=list)  # its runs over different question sets


def load_panel(ctx: Context, name: str, variants: list[str]) -> Panel:
    """Measured and paper values of ``variants`` (in order) for one ablation panel."""
    runs, subset = ablation_runs(ctx.results, ctx.exp, variants, ctx.subset_choice)
    values, source, ident, figure = ctx.published.panel(name)
    judge = ctx.exp.judges["primary"]
    points = [Point(v, ctx.exp.variant(v).label, measured(runs[v], judge, judge_hint=MAKE_ABLATIONS["locomo"]),
                    number(values.get(v, NOT_REPORTED)), runs[v].question_set[0]) for v in variants]
    verdicts = {comparable(ident, runs[v].identity(judge, ctx.published)) for v in variants}
    ok = all(v[0] for v in verdicts)
    why = "; ".join(sorted({v[1] for v in verdicts if v[1]}))
    marks = sorted({runs[v].coverage.mark for v in variants if runs[v].coverage.partial})
    differ = differing_question_sets([(v, runs[v]) for v in variants])
    return Panel(name, points, f"{figure}: {source}", "yes" if ok else f"no ({why})", subset_note(subset, runs),
                 ", ".join(marks), differ)


def _panel_variants(ctx: Context, name: str) -> list[str]:
    variants = ctx.exp.panels.get(name)
    if not variants:
        raise ConfigError(f"{ctx.exp.source}: ablations.panels.{name}: missing")
    return list(variants)


def short_label(label: str) -> str:
    """"EnSIMem (theme, broad, structured, adaptive)" -> "EnSIMem": tick labels stay on one line."""
    return label.split(" (")[0]


def caption(fig: Figure, panels: list[Panel]) -> None:
    """What the markers are and whether they are comparable, under the axes (details in the sidecar)."""
    verdicts = "; ".join(sorted({p.paper_comparable for p in panels}))
    text = (f"Bars/line: measured accuracy (k/n). Diamonds/dotted: paper values (Sec. 4.4); comparable: {verdicts}. "
            f"{panels[0].subset_note}")
    partial = sorted({p.coverage for p in panels if p.coverage})
    if partial:  # a partial run is never drawn like a full one
        text += f" PARTIAL runs: {'; '.join(partial)} questions each, not the full benchmark."
    if any(p.warnings for p in panels):
        text += " QUESTION SETS DIFFER between these runs (figureN.sources.json lists them)."
    # supxlabel is laid out by the constrained layout (fig.text would overlap the tick labels).
    fig.supxlabel(textwrap.fill(text, width=int(fig.get_figwidth() * 22)), fontsize=6)


def _legend(fig: Figure, ax: Any) -> None:
    """One legend beside the axes, so it never hides a bar, a whisker or a marker."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=7, frameon=False)


def _ci_bars(ax: Any, xs: list[int], points: list[Point]) -> None:
    """Bootstrap CI whiskers where metrics.json carries a CI for the accuracy."""
    have: list[tuple[int, Point, tuple[float, float]]] = []
    for x, p in zip(xs, points):
        ci = ci_bounds(p.measured.summary.get("ci"))
        if ci:
            have.append((x, p, ci))
    if have:
        ax.errorbar([x for x, _, _ in have], [p.percent for _, p, _ in have],
                    yerr=[[p.percent - 100 * ci[0] for _, p, ci in have],
                          [100 * ci[1] - p.percent for _, p, ci in have]],
                    fmt="none", ecolor="dimgray", elinewidth=1, capsize=3, label="95% CI (measured)")


def _bars(ax: Any, panel: Panel, title: str) -> None:
    xs = list(range(len(panel.points)))
    ax.bar(xs, [p.percent for p in panel.points], color=MEASURED_COLOR, width=0.6, label="measured (this harness)")
    _ci_bars(ax, xs, panel.points)
    for x, p in zip(xs, panel.points):
        # At the foot of the bar, clear of the CI whisker and the paper marker at the top.
        inside = p.percent >= 12
        ax.text(x, 1.5 if inside else p.percent + 1.5, f"{p.percent:.1f}\n{p.kn}", ha="center", va="bottom",
                fontsize=7, color="white" if inside else "black")
    paper = [(x, p.paper) for x, p in zip(xs, panel.points) if p.paper is not None]
    if paper:
        ax.scatter([x for x, _ in paper], [v for _, v in paper], marker="D", s=28, color=PAPER_COLOR, zorder=3,
                   label="paper (Sec. 4.4)")
    ax.set_xticks(xs, [short_label(p.label) for p in panel.points], fontsize=8)
    ax.set_ylim(0, 110)
    ax.set_ylabel("Accuracy (%)")
    ax.set_title(title, fontsize=10)


def figure2(ctx: Context) -> tuple[Figure, list[Panel]]:
    names = ("episode_granularity", "property_granularity")
    # Resolve every run of both panels first so that one error lists every missing run.
    ablation_runs(ctx.results, ctx.exp, [v for n in names for v in _panel_variants(ctx, n)], ctx.subset_choice)
    panels = [load_panel(ctx, n, _panel_variants(ctx, n)) for n in names]
    fig = Figure(figsize=(11.5, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    _bars(left, panels[0], "Episode granularity")
    _bars(right, panels[1], "Property granularity")
    fig.suptitle(f"Figure 2: LoCoMo ablations, {ctx.exp.judges['primary']} judge", fontsize=11)
    _legend(fig, left)
    caption(fig, panels)
    return fig, panels


def _fixed_k(ctx: Context, variant: str) -> int:
    k = ctx.exp.variant(variant).set.get("retrieve.fixed_k")
    if not isinstance(k, int):
        raise ConfigError(f"{ctx.exp.source}: ablations.variants.{variant}: set.retrieve.fixed_k: expected an integer")
    return k


def figure3(ctx: Context) -> tuple[Figure, list[Panel]]:
    variants = _panel_variants(ctx, "budget")
    ks = [_fixed_k(ctx, v) for v in variants]
    panel = load_panel(ctx, "budget", variants + ["base"])
    fixed, adaptive = panel.points[:-1], panel.points[-1]
    fig = Figure(figsize=(9, 4.8), layout="constrained")
    ax = fig.subplots()
    ax.plot(ks, [p.percent for p in fixed], marker="o", color=MEASURED_COLOR, label="fixed top-k (measured)")
    _ci_bars(ax, ks, fixed)
    for k, p in zip(ks, fixed):
        ax.annotate(p.kn, (k, p.percent), textcoords="offset points", xytext=(4, -12), ha="left", fontsize=7)
    ax.axhline(adaptive.percent, linestyle="--", color=MEASURED_COLOR,
               label=f"adaptive (measured) {adaptive.percent:.1f}% ({adaptive.kn})")
    paper = [(k, p.paper) for k, p in zip(ks, fixed) if p.paper is not None]
    if paper:
        ax.scatter([k for k, _ in paper], [v for _, v in paper], marker="D", s=28, color=PAPER_COLOR, zorder=3,
                   label="fixed top-k (paper, where printed)")
    if adaptive.paper is not None:
        ax.axhline(adaptive.paper, linestyle=":", color="gray", label=f"adaptive (paper) {adaptive.paper:.2f}%")
    ax.set_xticks(ks)
    ax.set_xlabel("Fixed retrieval budget k (episodes)")
    ax.set_ylabel("Accuracy (%)")
    ax.set_ylim(0, 105)
    _legend(fig, ax)
    ax.set_title(f"Figure 3: fixed top-k vs adaptive budget (LoCoMo, {ctx.exp.judges['primary']} judge)", fontsize=11)
    caption(fig, [panel])
    return fig, [panel]


BUILDERS = {"2": figure2, "3": figure3}


def _series_writer(name: str, build: Callable[[Context], tuple[Figure, list[dict[str, Any]]]],
                   warn: Optional[Callable[[Context], list[str]]] = None
                   ) -> Callable[[Context, Path, dict[str, Any]], list[Path]]:
    """A figure of series per group (figure_beam: BEAM per ability, official vs corrected,
    common.report.tables.beam; figure_realtalk: REALTALK's three scores per category,
    common.report.tables.realtalk) and its sources sidecar, with the runs' warnings (question sets
    that differ) printed and kept there."""
    def run(ctx: Context, out: Path, meta: dict[str, Any]) -> list[Path]:
        fig, series = build(ctx)
        warnings = warn(ctx) if warn else []
        for warning in warnings:
            print(f"{name}: WARNING: {warning}")
        out.mkdir(parents=True, exist_ok=True)
        png, pdf = out / f"{name}.png", out / f"{name}.pdf"
        fig.savefig(png, dpi=200, metadata={"Software": None})
        fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None})
        sidecar = out / f"{name}.sources.json"
        sidecar.write_text(json.dumps({"figure": name, **meta, "series": series, "warnings": warnings},
                                      ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        return [png, pdf, sidecar]
    return run


def _write_locomo_plus(ctx: Context, out: Path, meta: dict[str, Any]) -> list[Path]:
    """figure_locomo_plus: LoCoMo-Plus per category, both parser readings (common.report.tables.locomo_plus)."""
    fig, series = locomo_plus_figure(ctx)
    return run_figures.save("figure_locomo_plus", fig, {"series": series}, out, meta)


def write(name: str, fig: Figure, panels: list[Panel], out: Path, meta: dict[str, Any]) -> list[Path]:
    """PNG + PDF (no timestamps, so reruns give the same PDF) and the sources sidecar."""
    out.mkdir(parents=True, exist_ok=True)
    png, pdf = out / f"{name}.png", out / f"{name}.pdf"
    fig.savefig(png, dpi=200, metadata={"Software": None})
    fig.savefig(pdf, metadata={"CreationDate": None, "ModDate": None})
    sidecar = out / f"{name}.sources.json"
    sidecar.write_text(json.dumps({"figure": name, **meta, "panels": [
        {"panel": p.name, "paper_source": p.paper_source, "paper_comparable": p.paper_comparable,
         "subset": p.subset_note, "warnings": p.warnings,
         "points": [{"variant": q.variant, "label": q.label, "paper": q.paper, "question_set": q.question_set,
                     **q.measured.source} for q in p.points]}
        for p in panels]}, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return [png, pdf, sidecar]


def _writer(number: str, build: Callable[[Context], tuple[Figure, list[Panel]]]
            ) -> Callable[[Context, Path, dict[str, Any]], list[Path]]:
    """The CLI builder of figure ``number``: build it, then write its files."""
    def run(ctx: Context, out: Path, meta: dict[str, Any]) -> list[Path]:
        fig, panels = build(ctx)
        for warning in dict.fromkeys(w for p in panels for w in p.warnings):
            print(f"figure {number}: WARNING: {warning}")
        return write(f"figure{number}", fig, panels, out, meta)
    return run


def _main_run_writer(benchmark: str) -> Callable[[Context, Path, dict[str, Any]], list[Path]]:
    """figure_main_<benchmark>: the main run per category / type / ability (common.report.run_figures)."""
    def run(ctx: Context, out: Path, meta: dict[str, Any]) -> list[Path]:
        return _saved(f"figure_main_{benchmark}", *run_figures.main_figure(ctx, benchmark), out, meta)
    return run


def _write_systems(ctx: Context, out: Path, meta: dict[str, Any]) -> list[Path]:
    return _saved("figure_systems", *run_figures.systems_figure(ctx), out, meta)


def _saved(name: str, fig: Figure, sidecar: dict[str, Any], out: Path, meta: dict[str, Any]) -> list[Path]:
    """Save a figure; its warnings (an unnamed main run, question sets that differ) on the console too."""
    for warning in sidecar.get("warnings") or []:
        print(f"figure {name}: WARNING: {warning}")
    return run_figures.save(name, fig, sidecar, out, meta)


def main(argv: Optional[list[str]] = None) -> int:
    return cli(argv, prog="python -m common.report.figures", doc=__doc__ or "", kind="figure", default_out=DEFAULT_OUT,
               builders={**{f"main_{b}": _main_run_writer(b) for b in ADAPTERS}, "systems": _write_systems,
                         **{f: _writer(f, b) for f, b in BUILDERS.items()},
                         "beam": _series_writer("figure_beam", beam_figure,
                                                lambda ctx: question_set_warnings(beam_runs(ctx.results))),
                         "realtalk": _series_writer("figure_realtalk", realtalk_figure),
                         "locomo_plus": _write_locomo_plus})


if __name__ == "__main__":
    sys.exit(main())
