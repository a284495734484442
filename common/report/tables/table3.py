"""Table 3: mean online cost per scored LoCoMo question of the main run (latencies, context tokens).

Per-question values come from ``common.pipeline.ledger.efficiency`` (through ``RunData.efficiency``),
the harness's one definition of these quantities; this module only refuses incomplete runs,
averages, and places the paper's rows beside the measured one.
"""
from __future__ import annotations

import statistics

from common.benchmarks.registry import adapter
from common.core.schema import Gold, from_dict
from common.report.tables.published import (
    COMPARABLE_NOTE,
    NOT_APPLICABLE,
    NOT_REPORTED,
    NOT_STATED,
    Identity,
    source_notes,
)
from common.report.tables.runs import MAKE_MAIN, Context, InconsistentRun
from common.report.tables.table import Table

EFFICIENCY_PROTOCOL = "online_efficiency_locomo"


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def table3(ctx: Context) -> Table:
    """Mean online cost per scored LoCoMo question of the main run (per-question values from
    ``common.pipeline.ledger.efficiency``, the harness's one definition of the Table 3 quantities)."""
    run = ctx.main_run("locomo")
    data = adapter("locomo")
    scored = [g["qid"] for g in run.rows("gold") if data.is_scored(from_dict(Gold, g))]
    names = ("plans", "retrievals", "answers")
    by = {n: {r["qid"]: r for r in run.rows(n)} for n in names}
    for n in names:  # the ledger would count a missing row as 0 s: refuse instead
        missing = [q for q in scored if q not in by[n]]
        if missing:
            raise InconsistentRun(f"{run.path(n)}: no row for scored question {missing[0]} ({len(missing)} missing); "
                                  f"finish the run with `{MAKE_MAIN['locomo']} RUN={run.name}`")
    eff = run.efficiency(set(scored))
    per_q = eff["per_question"]
    tokens = _mean([q["context_tokens"] for q in per_q])
    stored = (run.metrics.get("buffer_tokens") or {}).get("mean")
    if stored is not None and per_q and abs(stored - tokens) > 1e-3:
        raise InconsistentRun(f"{run.metrics_path}: buffer_tokens.mean: {stored!r} but {run.path('retrievals').name} "
                              f"gives {tokens!r} over the scored questions; rerun 09_aggregate")
    series = {"Planning (s)": ("plan_s", "sum of 05_plan.llm_calls[].latency", ["plans"]),
              "Retrieval (s)": ("retrieval_s", "06_retrieve.seconds", ["retrievals"]),
              "Search (s)": ("search_s", "planning + retrieval", ["plans", "retrievals"]),
              "Generation (s)": ("generation_s", "07_answer.latency", ["answers"]),
              "End-to-end (s)": ("end_to_end_s", "planning + retrieval + generation", list(names)),
              "Context tokens": ("context_tokens", "06_retrieve.buffer_tokens", ["retrievals"])}
    for q in per_q:
        q["search_s"] = q["plan_s"] + q["retrieval_s"]
    keys = ["planning_s", "retrieval_s", "search_s", "generation_s", "end_to_end_s", "context_tokens"]
    cols = list(series)
    table = Table("table3", "Table 3: mean online cost per question on LoCoMo (offline construction excluded)",
                  ["Ref", "System", *cols, "n", "Answer model", "Comparable with"])
    pubs = []
    for i, prow in enumerate(ctx.published.rows("table3"), 1):
        ref = f"P{i}"
        pubs.append((ref, prow))
        table.rows.append({"Ref": ref, "System": prow.method,
                           **{c: prow.values.get(k, NOT_REPORTED) for c, k in zip(cols, keys)},
                           "n": NOT_STATED, "Answer model": prow.identity.answer_model})
        table.add_published(ref, prow)
    ref = "M1"
    partial = f" [{run.coverage.mark}]" if run.coverage.partial else ""  # the same mark as every table
    row = {"Ref": ref, "System": f"EnSIMem (harness, run {run.name}){partial}", "n": str(eff["n"]),
           "Answer model": run.answer_model()}
    for col, (key, how, used) in series.items():
        value = _mean([q[key] for q in per_q])
        row[col] = f"{value:,.0f}" if col == "Context tokens" else f"{value:.2f}"
        table.add_cell(ref, col, row[col], {"run_dir": str(run.dir), "metric": f"mean over scored questions of {how}",
                                            "value": value, "n": eff["n"], "files": run.files("gold", *used),
                                            "fingerprint": run.fingerprint})
    table.rows.append(row)
    table.warnings += [ctx.unnamed["locomo"]] if "locomo" in ctx.unnamed else []
    table.link(pubs, [(ref, Identity(run.answer_model(), NOT_APPLICABLE, EFFICIENCY_PROTOCOL,
                                     run.coverage.mark if run.coverage.partial else ""))])
    n_calls = sum(len(by["plans"][q].get("llm_calls") or []) for q in scored) + len(scored)
    hits = f"Cache hits among the measured planning and answer calls: {eff['cached_calls']}/{n_calls}."
    if eff["cached_calls"]:
        hits += (" WARNING: these latencies include cache hits, which carry the original call's latency only "
                 "if the cache kept it (else 0 s), so the means may understate live latency; for timing, rerun "
                 "with SET=\"llm.cache_mode=off\" under a new RUN.")
    table.notes += [
        "M1: means over the scored questions (categories 1-4) of the main run; planning = sum of the latencies "
        "of the plan calls (repairs included), retrieval = 06 wall time, generation = answer call latency, "
        "context tokens = evidence buffer tokens (o200k_base).", hits,
        *([f"M1: {run.coverage_warning}"] if run.coverage_warning else []),
        *([f"Main run: {ctx.chosen['locomo']}."] if "locomo" in ctx.chosen else []),
        *([f"M1: {run.dataset_warning}"] if run.dataset_warning else []), COMPARABLE_NOTE,
        *source_notes(pubs, ctx.published), *ctx.published.tables["table3"].get("notes", [])]
    return table
