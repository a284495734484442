"""The "systems" table: every finished run of any memory system, one row per run and judge.

Same cell format and provenance as Tables 1 and 2 (accuracy % [CI] (k/n), recounted from
``01_gold.jsonl`` + ``08_judge_<judge>.jsonl``), with the system (``method.name``), the answer
prompt, the answer model, the judge and the run's protocol fingerprint, so that a researcher's
own system sits beside EnSIMem, the baselines, mem0 and A-MEM; ``make compare A=... B=...`` then
gives the paired difference between any two rows.
"""
from __future__ import annotations

from typing import Any, Optional

from common.benchmarks.registry import ADAPTERS
from common.core import fingerprint
from common.core.yamlio import load_yaml
from common.evaluation import scoring
from common.pipeline import ledger
from common.report.tables import system_rows
from common.report.tables.locomo_plus import measured_score
from common.report.tables.published import DASH
from common.report.tables.runs import (
    MAKE_MAIN,
    Context,
    MissingRun,
    RunData,
    differing_question_sets,
    measured,
    open_run,
)
from common.report.tables.table import Table, fmt_acc
from common.systems import outcomes

# Every registered benchmark judged by accuracy; BEAM's rubric scores have their own table (beam.py).
BENCHMARKS = tuple(b for b in ADAPTERS if b != "beam")


def _settings(run: RunData) -> dict[str, Any]:
    path = run.dir / "config.resolved.yaml"
    cfg = load_yaml(path.read_text(encoding="utf-8")) if path.exists() else {}
    return {"system": str((cfg.get("method") or {}).get("name") or DASH),
            "prompt": str((cfg.get("answer") or {}).get("prompt") or "harness")}


def _fingerprint(run: RunData, judge: str) -> str:
    fp = run.fingerprint_for(judge)
    if isinstance(fp, dict):
        return f"{fp.get('run') or DASH} / {fp.get('judge') or DASH}"
    return str(fp or fingerprint.stored(run.dir) or DASH)


def spent(run: RunData) -> Optional[dict[str, float]]:
    """LLM calls, tokens and dollars (uncached, at the price file's rates) per question of a run,
    every stage's calls counted (an outside system's ingestion too, through its markers); None for
    an imported run (its calls were not made here) or one without questions."""
    questions = run.dir / "01_questions.jsonl"
    n = sum(1 for line in questions.read_text(encoding="utf-8").splitlines() if line.strip()) \
        if questions.exists() else 0
    if fingerprint.imported(run.dir) is not None or not n:
        return None
    total = ledger.ledger(run.dir)["total"]
    return {"calls": total["calls"] / n, "tokens": (total["prompt_tokens"] + total["completion_tokens"]) / n,
            "usd": total["cost_uncached_usd"] / n, "questions": n}


def _spent(run: RunData) -> dict[str, str]:
    """The table's cells of ``spent`` and where its numbers come from."""
    source = "imported" if fingerprint.imported(run.dir) is not None else "measured here"
    per_q = spent(run)
    if per_q is None:
        return {"Calls / q": DASH, "Tokens / q": DASH, "$ / q": DASH, "Source": source}
    return {"Calls / q": f"{per_q['calls']:.1f}", "Tokens / q": f"{per_q['tokens']:,.0f}",
            "$ / q": f"{per_q['usd']:.5f}", "Source": source}


def finished_runs(ctx: Context, benchmark: str) -> list[RunData]:
    """Every run of ``benchmark`` with a metrics.json under the results directory, by name."""
    root = ctx.results / benchmark
    return [open_run(ctx.results, benchmark, d.name, MAKE_MAIN.get(benchmark, f"make {benchmark}"))
            for d in (sorted(p for p in root.glob("*") if (p / "metrics.json").exists()) if root.exists() else [])]


def _buffers(run: RunData) -> dict[str, str]:
    """Evidence items and buffer tokens per question (mean / p95) and the memory system's counted
    outcomes (empty memories and buffers, ingestion errors), from 06's rows and markers."""
    if fingerprint.imported(run.dir) is not None:
        return {"Items / q (mean / p95)": DASH, "Buffer tokens / q (mean / p95)": DASH, "Outcomes": DASH}
    block = outcomes.summary(run.dir)

    def pair(stats: dict[str, Any], fmt: str) -> str:
        return DASH if stats["mean"] is None else f"{stats['mean']:{fmt}} / {stats['p95']:{fmt}}"

    return {"Items / q (mean / p95)": pair(block["evidence_items"], ".1f"),
            "Buffer tokens / q (mean / p95)": pair(block["buffer_tokens"], ",.0f"),
            "Outcomes": scoring.system_outcomes(block) or "none"}


def systems_table(ctx: Context) -> Table:
    table = Table("systems", "Memory systems: LLM-judge accuracy (%) of every finished run",
                  ["Ref", "Benchmark", "Run", "System", *system_rows.COLUMNS, "Answer prompt", "Coverage",
                   "Question set", "Overall", system_rows.PAIR_COLUMN, "Answer model", "Judge",
                   "Fingerprint (run / judge)", "Protocol",
                   "Items / q (mean / p95)", "Buffer tokens / q (mean / p95)", "Outcomes", "Calls / q", "Tokens / q",
                   "$ / q", "Source"])
    notes: list[str] = []
    judged: list[tuple[dict[str, str], RunData, str]] = []
    shown: list[tuple[str, RunData]] = []
    for benchmark in BENCHMARKS:
        for run in finished_runs(ctx, benchmark):
            about = _settings(run)
            spent = {**_spent(run), **_buffers(run)}
            what, card = system_rows.cells(run)
            for judge in run.judge_names():
                ref = f"S{len(table.rows) + 1}"
                # LoCoMo-Plus: the official mean score (partial counts 0.5), the number its tables report.
                m = measured_score(run, judge) if benchmark == "locomo_plus" else measured(run, judge)
                ident = run.identity(judge, ctx.published)
                row = {"Ref": ref, "Benchmark": benchmark, "Run": run.name, "System": about["system"], **what,
                       "Answer prompt": about["prompt"], "Coverage": run.coverage.mark,
                       "Question set": run.question_set_text, "Overall": fmt_acc(m.summary),
                       "Answer model": ident.answer_model, "Judge": ident.judge_model,
                       "Fingerprint (run / judge)": _fingerprint(run, judge), "Protocol": ident.protocol,
                       **spent}
                table.rows.append(row)
                table.add_cell(ref, "Overall", row["Overall"], m.source)
                if card is not None:
                    table.hrefs[(ref, "Departures")] = card
                judged.append((row, run, judge))
                shown.append((ref, run))
                if run.coverage_warning:
                    notes.append(f"{ref}: {run.coverage_warning}")
                if run.dataset_warning:
                    notes.append(f"{ref}: {run.dataset_warning}")
    system_rows.pair_protocols(judged)
    if not table.rows:
        raise MissingRun(f"{ctx.results}: no finished run (no <benchmark>/<run>/metrics.json); "
                         f"create one with `make locomo` or `make locomo SET=\"method.name=mem0\" RUN=mem0`")
    table.warnings += differing_question_sets(shown)
    table.notes += [
        "Coverage: the questions the run labels of the benchmark's full set; PARTIAL k / n when fewer. "
        "Question set: the id of the run's scored questions (a hash of their ids) and their number: two runs "
        "with equal coverage may still be over different questions; the fingerprint describes the protocol only.",
        "LoCoMo-Plus rows: Overall is the official mean score (correct 1, partial 0.5, wrong 0; sum of scores/n), "
        "under the run's headline parser; its CI resamples questions, cl the LoCoMo conversations.",
        "One row per finished run and judge under the results directory, any memory system (method.name). "
        "Each cell is accuracy % [95% CI when metrics.json has one] (k/n), recounted from 01_gold.jsonl + "
        "08_judge_<judge>.jsonl; failed judgments count as wrong. Calls, tokens and $ per question: every "
        "LLM call of the run (ingestion by an outside system included, through the gateway or its "
        "in-process client) from the ledger, $ uncached at the price file's rates. Items and buffer tokens per "
        "question (mean / p95): what the answer model read (evidence items, or EnSIMem's episodes; o200k tokens); "
        "a system's outcomes are counted, not failures of the judge: empty_memory (a memory holding no item "
        "after ingestion; inferred, and said so, for a system that reports no count and whose every search came "
        "back empty), empty_buffer (a search with no evidence), errors logged or reported while ingesting and "
        "while searching, ingestions and searches that failed (the system raised: their questions count as "
        "failures, retrieval_failed), fallbacks from the system's own retrieval, texts over the embedding "
        "limit, and what the memories hold (built). "
        "systems.buffer_tokens=N caps every buffer at N tokens, each system's own ranking kept (like-for-like rows).",
        "System protocol: common (the harness's answer prompt and judge; only the buffer is the system's) or "
        "native (the system as its reference evaluation runs it: its k, mode, rendering, answer prompt or agent). "
        "Departures: the harness's departures from the system's reference evaluation under that protocol, from "
        "its protocol card (the link; rendered in docs/memory-systems.md), with any setting or version where the "
        "card and the run disagree. Version: the system's as it ran. Embedding model: what the harness gave the "
        "system (its limit in word pieces, and how longer texts were embedded). Native - common: where one system "
        "has both runs with the same answer model and judge, the paired difference of strict accuracy "
        "(percentage points, 95% paired bootstrap CI) over the questions both scored.",
        "Rows are comparable when benchmark, question set, answer model, judge and protocol agree; the run "
        "fingerprint also "
        "covers the system's settings and answer prompt. Paired difference, CI and McNemar between any two: "
        "`make compare A=results/<benchmark>/<run> B=results/<benchmark>/<other run>`.",
        *notes]
    return table
