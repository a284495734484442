"""Paired comparison of two runs, or of two judges of one run.

    python -m common.report.compare A B [--judge NAME] [--judge-b NAME] [--failures strict|clean] [--json out.json]
    python -m common.report.compare A --judge NAME --judge-b OTHER      # two judges of run A

Two runs (of the same benchmark): per category and overall, each run's accuracy with a
bootstrap CI, the paired difference B - A with a paired bootstrap CI, and the exact McNemar
test, both over the questions the runs share (how many are shared / only in A / only in B is
printed, with a warning when the sets differ). Two judges of one run: each judge's accuracy,
exact agreement, Cohen's kappa, McNemar, and the paper's Table 10 statistics (Appendix D).

Prints a Markdown table; ``--json`` also writes every number. Exit code 0 on success, 2 with a
one-line ``error: ...`` on bad input. Every statistic comes from ``common.evaluation.stats``.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from common.core.io import ArtifactError, write_json
from common.core.tabular import format_percent as _pct
from common.evaluation.coverage import question_set_id
from common.evaluation.labels import RunLabels, category_order, load_labels, run_benchmark, run_judges
from common.evaluation.loss import CLASSES as LOSS_CLASSES
from common.evaluation.loss import decompose as loss_decomposition
from common.evaluation.stats import (
    FAILURE_MODES,
    Failures,
    accuracy_with_ci,
    judge_agreement,
    mcnemar_exact,
    pair_labels,
    paired_difference_ci,
    paired_difference_cluster_ci,
    power_note,
    table10,
)
from common.pipeline.experiments import MAIN_CONFIGS, resolve_run

OVERALL = "overall"


# ----------------------------------------------------------------------------- inputs
def _pick_judge(run_dir: Path, name: Optional[str], exclude: Optional[str] = None) -> str:
    """``name`` if given, else the run's only judge (other than ``exclude``)."""
    if name:
        return name
    judges = [j for j in run_judges(run_dir) if j != exclude]
    if len(judges) == 1:
        return judges[0]
    if not judges:
        raise ArtifactError(f"{run_dir}: no 08_judge_<name>.jsonl file; run 08_judge first")
    raise ArtifactError(f"{run_dir}: several judges ({', '.join(judges)}); choose one with --judge/--judge-b")


def _same_benchmark(bench_a: str, bench_b: str, dir_a: str, dir_b: str) -> None:
    if bench_a != bench_b:
        raise ValueError(f"A ({dir_a}) is a {bench_a} run and B ({dir_b}) a {bench_b} run; "
                         "only runs of the same benchmark can be compared")


def _groups(benchmark: str, *runs: RunLabels) -> list[str]:
    """Categories present in any of the runs, in paper column order, then the overall."""
    present = {r.category for run in runs for r in run.records}
    return [c for c in category_order(benchmark) if c in present] + [OVERALL]


def _labels(run: RunLabels, group: str) -> dict[str, Optional[int]]:
    return {r.qid: r.label for r in run.records if group == OVERALL or r.category == group}


def _summary(run: RunLabels, labels: dict[str, Optional[int]]) -> dict[str, Any]:
    """Accuracy with the question and the cluster bootstrap CIs and the power note."""
    clusters = run.clusters()
    return accuracy_with_ci(labels.values(), clusters=[clusters[q] for q in labels])


def _side(run: RunLabels) -> dict[str, Any]:
    failed: dict[str, int] = {}
    for r in run.records:
        if r.cause:
            failed[r.cause] = failed.get(r.cause, 0) + 1
    return {"run_dir": run.run_dir, "judge": run.judge, "judge_models": list(run.judge_models),
            "scored": len(run.records), "failures": failed, "unknown_judge_rows": run.n_unknown_rows}


def _common_warnings(runs: dict[str, RunLabels]) -> list[str]:
    out = []
    for name, run in runs.items():
        if len(run.judge_models) > 1:
            out.append(f"{name}: judge file mixes judge models {list(run.judge_models)}")
        if run.n_unknown_rows:
            out.append(f"{name}: {run.n_unknown_rows} judge rows name questions absent from 01_gold.jsonl "
                       "(stale file?)")
        metrics = Path(run.run_dir) / "metrics.json"
        dataset = (json.loads(metrics.read_text(encoding="utf-8")).get("dataset") or {}) if metrics.is_file() else {}
        if dataset.get("warning"):
            out.append(f"{name}: {dataset['warning']}")
    return out


def _run_dir(value: str, benchmark: Optional[str], results: Path) -> Path:
    """A run directory, or a run name under ``results/<benchmark>/``: the same rule as ``make report`` and
    ``make export`` (``common.pipeline.experiments.resolve_run``)."""
    if Path(value).is_dir():
        return Path(value)
    try:
        return resolve_run(value, benchmark, results)
    except ArtifactError as exc:
        raise ArtifactError(f"{value}: not a run directory, nor a run name ({exc})") from None


# ----------------------------------------------------------------------------- the two modes
def compare_runs(a: RunLabels, b: RunLabels, failures: Failures = "strict") -> dict[str, Any]:
    """Per category and overall: both accuracies with CIs, paired difference, McNemar."""
    from statsmodels.stats.multitest import multipletests

    _same_benchmark(a.benchmark, b.benchmark, a.run_dir, b.run_dir)
    warnings = _common_warnings({"A": a, "B": b})
    everything = pair_labels(a.by_qid(), b.by_qid(), "strict")
    if everything.only_in_a or everything.only_in_b:
        warnings.append(f"QUESTION SETS DIFFER (A {question_set_id(a.by_qid())}, B {question_set_id(b.by_qid())}): "
                        f"{everything.n_shared} shared, {everything.only_in_a} only in A, "
                        f"{everything.only_in_b} only in B; each accuracy is over its run's own questions, "
                        "the difference and McNemar over the shared ones only")
    cats_a, cats_b = a.categories(), b.categories()
    moved = sum(cats_a[q] != cats_b[q] for q in everything.qids)
    if moved:
        warnings.append(f"{moved} shared questions have a different category in A and B (different gold?)")
    if set(a.judge_models) != set(b.judge_models):
        warnings.append(f"A was judged by {list(a.judge_models)} and B by {list(b.judge_models)}: "
                        "the difference mixes the method and the judge")
    rows: list[dict[str, Any]] = []
    cluster_of = a.clusters()
    for group in _groups(a.benchmark, a, b):
        la, lb = _labels(a, group), _labels(b, group)
        pairs = pair_labels(la, lb, failures)
        low, high = paired_difference_ci(pairs.a, pairs.b)
        # The clusters of A: a question's memory is the same in both runs of one benchmark.
        clusters = [cluster_of[q] for q in pairs.qids]
        c_low, c_high = paired_difference_cluster_ci(pairs.a, pairs.b, clusters)
        rows.append({"category": group, "a": _summary(a, la), "b": _summary(b, lb),
                     "mcnemar": mcnemar_exact(la, lb, failures=failures).to_dict(),
                     "difference_ci": {"low": low, "high": high},
                     "difference_ci_cluster": {"low": c_low, "high": c_high, "n_clusters": len(set(clusters)),
                                               "method": "paired cluster bootstrap BCa (resampling clusters)"},
                     # The smallest difference these shared questions can separate (A's rate).
                     "power": power_note(list(pairs.a), clusters)})
    # Each category is its own test; Holm keeps the family-wise error of the set at 5%.
    tested = [r for r in rows if r["category"] != OVERALL and r["mcnemar"]["p_value"] is not None]
    if tested:
        adjusted = multipletests([r["mcnemar"]["p_value"] for r in tested], method="holm")[1]
        for r, p in zip(tested, adjusted):
            r["mcnemar"]["p_holm"] = float(p)
    return {"mode": "runs", "benchmark": a.benchmark, "failures": failures, "a": _side(a), "b": _side(b),
            "questions": {"shared": everything.n_shared, "only_in_a": everything.only_in_a,
                          "only_in_b": everything.only_in_b},
            "warnings": warnings, "rows": rows,
            # Where each run lost its points (each over its own scored questions).
            "loss": {"a": _loss(a), "b": _loss(b)}}


def _loss(run: RunLabels) -> dict[str, Any]:
    """The overall loss decomposition of one run under its judge (``common.evaluation.loss``)."""
    return loss_decomposition(run.run_dir, [run.judge])["judges"][run.judge]["overall"]


def compare_judges(a: RunLabels, b: RunLabels, failures: Failures = "strict") -> dict[str, Any]:
    """Two judges of the same answers: accuracies, agreement, kappa, McNemar, Table 10."""
    if a.run_dir != b.run_dir:
        raise ValueError("compare_judges needs two judges of one run")
    warnings = _common_warnings({f"judge {a.judge}": a, f"judge {b.judge}": b})
    rows: list[dict[str, Any]] = []
    for group in _groups(a.benchmark, a, b):
        la, lb = _labels(a, group), _labels(b, group)
        rows.append({"category": group, "a": _summary(a, la), "b": _summary(b, lb),
                     "agreement": judge_agreement(la, lb, failures=failures).to_dict()})
    by_cat = {r["category"]: r for r in rows if r["category"] != OVERALL and r["a"]["n"]}
    overall = rows[-1]
    stats10 = None
    if by_cat:
        # The reported (strict) accuracies, as in the paper's Tables 1, 2 and 10.
        stats10 = table10({c: r["a"]["accuracy"] for c, r in by_cat.items()},
                          {c: r["b"]["accuracy"] for c, r in by_cat.items()},
                          overall["a"]["accuracy"], overall["b"]["accuracy"])
    return {"mode": "judges", "benchmark": a.benchmark, "failures": failures, "a": _side(a), "b": _side(b),
            "warnings": warnings, "rows": rows, "table10": stats10,
            # One decomposition per judge over the same buffers, with the questions they disagree on.
            "loss": {side: block["overall"] for side, block in
                     zip(("a", "b"), loss_decomposition(a.run_dir, [a.judge, b.judge])["judges"].values())}}


# ----------------------------------------------------------------------------- rendering
def _acc(s: dict[str, Any]) -> str:
    """``75.0 [50.0, 91.7; cl 41.7, 95.0] (9/12)``: question bootstrap CI, then the cluster one when defined."""
    clustered = s.get("ci_cluster") or {}
    cl = f"; cl {_pct(clustered['low'])}, {_pct(clustered['high'])}" if clustered.get("low") is not None else ""
    return f"{_pct(s['accuracy'])} [{_pct(s['ci']['low'])}, {_pct(s['ci']['high'])}{cl}] ({s['k']}/{s['n']})"


def _pp(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}"


def _cluster_diff(row: dict[str, Any]) -> str:
    c = row.get("difference_ci_cluster") or {}
    if c.get("low") is None:
        return f"n/a ({c.get('n_clusters', 0)})"
    return f"[{_pp(c['low'])}, {_pp(c['high'])}] ({c['n_clusters']})"


def _mdd(power: Optional[dict[str, Any]]) -> str:
    if not power or power.get("mdd") is None:
        return "n/a"
    return f"{100 * power['mdd']:.1f} ({power['design_effect']:.2f})"


def _p(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _describe(name: str, side: dict[str, Any]) -> str:
    failed = sum(side["failures"].values())
    causes = ", ".join(f"{k} {v}" for k, v in sorted(side["failures"].items())) or "none"
    return (f"{name}: {side['run_dir']}  judge {side['judge']} ({', '.join(side['judge_models']) or '?'}); "
            f"{side['scored']} scored questions, {failed} failed ({causes})")


def format_loss(a: dict[str, Any], b: dict[str, Any], what: str = "run") -> str:
    """Loss decomposition lines: each class's count and rate in A and in B (two runs or two judges)."""
    body = [[c, f"{a['counts'][c]} ({_pct(a['rates'][c])}%)", f"{b['counts'][c]} ({_pct(b['rates'][c])}%)",
             f"{b['counts'][c] - a['counts'][c]:+d}"] for c in LOSS_CLASSES]
    if "judge_disagreement" in a or "judge_disagreement" in b:
        body.append(["judge_disagreement (beside the classes)", str(a.get("judge_disagreement", "n/a")),
                     str(b.get("judge_disagreement", "n/a")), ""])
    return (f"Loss decomposition (gold evidence in the buffer x judge label; each {what} over its own "
            f"{a['n']} / {b['n']} scored questions):\n\n" + _markdown(["Loss class", "A", "B", "B-A"], body))


def format_comparison(report: dict[str, Any]) -> str:
    """The comparison as Markdown: a header, the warnings, one table (two for judges)."""
    strict = report["failures"] == "strict"
    rule = ("failed or missing judgments count as wrong (strict)" if strict else
            "pairs where either side failed are dropped from the paired numbers (clean); accuracies stay strict")
    out = [f"# {report['benchmark']}: compare {'two runs' if report['mode'] == 'runs' else 'two judges of one run'}",
           "", _describe("A", report["a"]), _describe("B", report["b"]), f"Failures: {rule}."]
    if report["mode"] == "runs":
        q = report["questions"]
        out.append(f"Questions: {q['shared']} shared, {q['only_in_a']} only in A, {q['only_in_b']} only in B.")
    out += [f"WARNING: {w}" for w in report["warnings"]]
    out.append("")
    if report["mode"] == "runs":
        header = ["Category", "A % [95% CI; clustered] (k/n)", "B % [95% CI; clustered] (k/n)", "Pairs",
                  "B-A pp [95% CI]", "B-A clustered CI (clusters)", "MDD pp (deff)", "A only / B only right",
                  "McNemar p", "Holm p"]
        body = [[r["category"], _acc(r["a"]), _acc(r["b"]), str(r["mcnemar"]["n_used"]),
                 f"{_pp(r['mcnemar']['difference'])} [{_pp(r['difference_ci']['low'])}, "
                 f"{_pp(r['difference_ci']['high'])}]", _cluster_diff(r), _mdd(r.get("power")),
                 f"{r['mcnemar']['only_a_right']} / {r['mcnemar']['only_b_right']}",
                 _p(r["mcnemar"]["p_value"]), _p(r["mcnemar"].get("p_holm"))] for r in report["rows"]]
        out += [_markdown(header, body), "",
                "Paired columns use the shared questions; CIs are seeded BCa bootstraps (10,000 resamples): "
                "the first resamples questions, 'cl' and the clustered difference resample whole clusters "
                "(LoCoMo conversations, LongMemEval haystacks; questions of one memory are not independent). "
                "MDD: the smallest difference these questions can separate (two-sided alpha .05, power .8, "
                "from A's rate and the design effect of its clusters; see docs/statistics.md). "
                "McNemar is the exact binomial test; Holm adjusts the category p-values together."]
        if report.get("loss"):
            out += ["", format_loss(report["loss"]["a"], report["loss"]["b"])]
        return "\n".join(out)
    header = ["Category", f"{report['a']['judge']} % [95% CI] (k/n)", f"{report['b']['judge']} % [95% CI] (k/n)",
              "B-A pp", "Pairs", "Agreement %", "kappa [95% CI]", "A only / B only right", "McNemar p"]
    body = []
    for r in report["rows"]:
        ag, m = r["agreement"], r["agreement"]["mcnemar"]
        kappa = "n/a" if ag["kappa"] is None else f"{ag['kappa']:.3f}"
        if ag["kappa_ci"][0] is not None:
            kappa += f" [{ag['kappa_ci'][0]:.3f}, {ag['kappa_ci'][1]:.3f}]"
        diff = None if r["a"]["accuracy"] is None or r["b"]["accuracy"] is None else (
            r["b"]["accuracy"] - r["a"]["accuracy"])
        body.append([r["category"], _acc(r["a"]), _acc(r["b"]), _pp(diff), str(ag["n"]), _pct(ag["agreement"]),
                     kappa, f"{m['only_a_right']} / {m['only_b_right']}", _p(m["p_value"])])
    out.append(_markdown(header, body))
    t = report["table10"]
    if t:
        r = "n/a" if t["pearson_r"] is None else f"{t['pearson_r']:.3f}"
        out += ["", f"Table 10 statistics (Appendix D; delta = {report['b']['judge']} - {report['a']['judge']}, "
                    "pp, on the strict accuracies):", "",
                _markdown(["m", "mean delta", "MAE", "SD(delta)", "max abs delta", "abs delta overall", "r"],
                          [[str(t["m"]), f"{t['mean_delta_pp']:+.3f}", f"{t['mae_pp']:.2f}", f"{t['sd_delta_pp']:.2f}",
                            f"{t['max_abs_delta_pp']:.2f} ({t['max_abs_delta_category']})",
                            f"{t['abs_delta_overall_pp']:.3f}", r]])]
    if report.get("loss"):
        out += ["", format_loss(report["loss"]["a"], report["loss"]["b"], "judge")]
    return "\n".join(out)


# ----------------------------------------------------------------------------- CLI
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m common.report.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a", metavar="A", help="run name (under --results/<benchmark>/) or directory, e.g. paper or "
                                          "results/locomo/paper")
    p.add_argument("b", metavar="B", nargs="?", default=None,
                   help="second run, name or directory (omit, or repeat A, to compare two judges of A)")
    p.add_argument("--benchmark", choices=tuple(MAIN_CONFIGS), default=None,
                   help="the benchmark of run names (needed only when a name exists under several)")
    p.add_argument("--results", default="results", help="results root for run names (default results)")
    p.add_argument("--judge", default=None, help="judge of A (default: the run's only judge)")
    p.add_argument("--judge-b", default=None, help="judge of B (default: --judge, or B's only judge)")
    p.add_argument("--failures", choices=FAILURE_MODES, default="strict",
                   help="paired numbers: strict = a failure is wrong (default); clean = drop failed pairs")
    p.add_argument("--json", default=None, metavar="PATH", help="also write every number to this JSON file")
    return p


def build(args: argparse.Namespace) -> dict[str, Any]:
    """Decide the mode from the arguments, load the labels, compute the report."""
    results = Path(getattr(args, "results", None) or "results")
    dir_a = _run_dir(args.a, getattr(args, "benchmark", None), results)
    bench_b = getattr(args, "benchmark", None) or run_benchmark(dir_a)
    dir_b_named = _run_dir(args.b, bench_b, results) if args.b else None
    same_run = dir_b_named is None or dir_b_named.resolve() == dir_a.resolve()
    if same_run:
        if not args.judge_b:
            raise ValueError("give a second run B, or --judge-b NAME to compare two judges of A")
        judge_a = _pick_judge(dir_a, args.judge, exclude=args.judge_b)
        if judge_a == args.judge_b:
            raise ValueError(f"--judge and --judge-b are both {judge_a!r}: nothing to compare")
        return compare_judges(load_labels(dir_a, judge_a), load_labels(dir_a, args.judge_b), args.failures)
    dir_b = dir_b_named
    assert dir_b is not None
    # Refuse early, before reading any labels, with the one line that matters.
    _same_benchmark(run_benchmark(dir_a), run_benchmark(dir_b), str(dir_a), str(dir_b))
    judge_a = _pick_judge(dir_a, args.judge)
    judge_b = _pick_judge(dir_b, args.judge_b or args.judge)
    return compare_runs(load_labels(dir_a, judge_a), load_labels(dir_b, judge_b), args.failures)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        report = build(args)
    except (ArtifactError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for w in report["warnings"]:  # also on stderr, so a redirected table does not hide them
        print(f"WARNING: {w}", file=sys.stderr)
    print(format_comparison(report))
    if args.json:
        write_json(Path(args.json), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
