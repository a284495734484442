"""Table 10: consistency of the primary and secondary judges on the main runs of both benchmarks.

The paper's aggregate statistics (``common.evaluation.stats.table10``, from the verified
per-category accuracies) plus per-question agreement, Cohen's kappa and McNemar
(``common.evaluation.stats.judge_agreement``), which the paper could not report.
"""
from __future__ import annotations

import dataclasses

from common.evaluation import stats
from common.evaluation.labels import category_order
from common.report.tables.published import COMPARABLE_NOTE, NOT_REPORTED, source_notes
from common.report.tables.runs import MAKE_JUDGE2, MAKE_MAIN, Context, MissingRun, measured
from common.report.tables.table import Table

T10_COLUMNS = [("m", "m", "{:d}"), ("mean_delta", "mean Δ (pp)", "{:+.3f}"), ("mae", "MAE (pp)", "{:.2f}"),
               ("sd_delta", "SD(Δ) (pp)", "{:.2f}"), ("max_abs_delta", "max|Δ| (pp)", "{:.2f}"),
               ("abs_delta_overall", "|Δ overall| (pp)", "{:.3f}"), ("r", "r", "{:.3f}")]
STATS_KEYS = {"m": "m", "mean_delta": "mean_delta_pp", "mae": "mae_pp", "sd_delta": "sd_delta_pp",
              "max_abs_delta": "max_abs_delta_pp", "abs_delta_overall": "abs_delta_overall_pp", "r": "pearson_r"}


def table10(ctx: Context) -> Table:
    """Judge consistency on the main runs: the paper's aggregate statistics plus per-question agreement."""
    primary, secondary = ctx.exp.judges["primary"], ctx.exp.judges["secondary"]
    agree_cols = ["n paired", "Agreement (%)", "Cohen's κ", "McNemar p"]
    table = Table("table10",
                  f"Table 10: consistency of the {primary} and {secondary} judges (Δ = {secondary} − {primary})",
                  ["Ref", "Benchmark", *[h for _, h, _ in T10_COLUMNS], *agree_cols, "Judges", "Comparable with"])
    pubs_all = ctx.published.rows("table10")
    links_p, links_m = [], []
    errors = []
    for bi, benchmark in enumerate(("locomo", "longmemeval"), 1):
        try:
            run = ctx.main_run(benchmark)
            cats = category_order(benchmark)
            acc = {j: {c: measured(run, j, c, judge_hint=f"{hint} RUN={run.name}") for c in cats}
                   for j, hint in ((primary, MAKE_MAIN[benchmark]), (secondary, MAKE_JUDGE2[benchmark]))}
        except MissingRun as exc:
            errors.append(str(exc))
            continue
        overall = {j: measured(run, j) for j in (primary, secondary)}
        frac = {j: {c: acc[j][c].summary["accuracy"] for c in cats} for j in acc}
        present = [c for c in cats if frac[primary][c] is not None and frac[secondary][c] is not None]
        result = stats.table10({c: frac[primary][c] for c in present}, {c: frac[secondary][c] for c in present},
                               overall[primary].summary["accuracy"], overall[secondary].summary["accuracy"])
        agreement = stats.judge_agreement(run.labels(primary).by_qid(), run.labels(secondary).by_qid())
        ref = f"M{bi}"
        row: dict[str, str] = {"Ref": ref, "Benchmark": benchmark + (f" [{run.coverage.mark}]"
                                                                   if run.coverage.partial else "")}
        inputs = [m.source for j in acc for m in acc[j].values()] + [overall[j].source for j in overall]
        for key, header, fmt in T10_COLUMNS:
            value = result[STATS_KEYS[key]]
            row[header] = "n/a" if value is None else fmt.format(value)
            table.add_cell(ref, header, row[header], {
                "run_dir": str(run.dir), "metric": f"common.evaluation.stats.table10.{STATS_KEYS[key]}",
                "value": value, "categories": present, "inputs": inputs, "fingerprint": run.fingerprint})
        agree_src = {"run_dir": str(run.dir), "files": run.files("gold", judges=(primary, secondary)),
                     "failures": agreement.failures, "fingerprint": run.fingerprint}
        p, ag, kappa = agreement.mcnemar.p_value, agreement.agreement, agreement.kappa
        for header, value, text in (
                ("n paired", agreement.n, str(agreement.n)),
                ("Agreement (%)", ag, "n/a" if ag is None else f"{100 * ag:.1f}"),
                ("Cohen's κ", kappa, "n/a" if kappa is None else f"{kappa:.3f}"),
                ("McNemar p", p, "n/a" if p is None else f"{p:.3g}")):
            row[header] = text
            table.add_cell(ref, header, text, {
                **agree_src, "metric": f"common.evaluation.stats.judge_agreement.{header}", "value": value,
                "mcnemar": agreement.mcnemar.to_dict() if header == "McNemar p" else None})
        ident = dataclasses.replace(run.identity(primary, ctx.published),
                                    judge_model=f"{run.judge_model(primary)} vs {run.judge_model(secondary)}")
        row["Judges"] = ident.judge_model
        table.rows.append(row)
        if run.coverage_warning:
            table.notes.append(f"{ref}: {run.coverage_warning}")
        if run.dataset_warning:
            table.notes.append(f"{ref}: {run.dataset_warning}")
        links_m.append((ref, ident))
        for pi, prow in enumerate(pubs_all, 1):
            if prow.benchmark == benchmark:
                pref = f"P{pi}"
                links_p.append((pref, prow))
                table.rows.append({"Ref": pref, "Benchmark": f"{benchmark} (paper)",
                                   **{h: prow.values.get(k, NOT_REPORTED) for k, h, _ in T10_COLUMNS},
                                   **{h: NOT_REPORTED for h in agree_cols}, "Judges": prow.identity.judge_model})
                table.add_published(pref, prow)
    if errors and not links_m:
        raise MissingRun(" | ".join(errors))
    table.link(links_p, links_m)
    table.notes += [f"Not made (no run): {e}" for e in errors]  # the benchmarks whose runs exist are shown
    table.notes += [
        "M rows: computed by common.evaluation.stats from the main runs' per-category accuracies (verified against "
        "01_gold.jsonl + 08_judge files; failures count as wrong); r across categories, overall excluded; SD is "
        "the population SD. Agreement, Cohen's κ and the exact McNemar test pair the two judges' labels per "
        "question (strict: a failed judgment is wrong); the paper could not report them.",
        COMPARABLE_NOTE, *source_notes(links_p, ctx.published), *ctx.published.tables["table10"].get("notes", [])]
    return table
