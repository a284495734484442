"""Repeated judging: N judge labels per answer, reported the ways the field reports them.

mem0, MemOS and the locomo-audit report LLM-judge accuracy as the mean +- std of three judge
runs; EverMemOS reports the majority vote. ``judge.runs: N`` asks the judge N times per answer
(run i with seed 42+i and its own cache entry, ``common.core.llm.LLMClient.complete(repeat=i)``)
and keeps every run's label in the row's ``labels`` column; imported runs with several published
labels per answer use the same column (``common.pipeline.importer``). This module turns those
columns into per-run accuracy, mean +- std (population std, ddof 0, as those papers compute it),
the majority vote and the fraction of questions whose label flips between runs.

A failed run (label None) counts wrong in that run's accuracy (strict, as everywhere); the row's
own ``label`` is then None too, so the question is a counted failure and a rerun redoes it (the
runs that succeeded come from the cache).
"""
from __future__ import annotations

import statistics
from typing import Any, Callable, Mapping, Optional, Sequence

from common.core.schema import JudgeRow


def majority(labels: Sequence[Optional[int]]) -> Optional[int]:
    """1 when more than half the runs say correct, else 0; None when any run failed.

    A tie (an even number of runs split evenly) counts wrong: the conservative reading.
    """
    if not labels or any(x is None for x in labels):
        return None
    return int(sum(1 for x in labels if x == 1) * 2 > len(labels))


def judge_repeated(judge_once: Callable[[int], JudgeRow], runs: int) -> JudgeRow:
    """``runs`` judge calls for one answer (``judge_once(i)`` is run i) combined into one row.

    With one run the row is returned unchanged (no ``labels`` column: old rows read the same).
    Otherwise the first run's row carries ``labels`` (one per run), ``label`` = their majority,
    and the first failed run's error prefixed by its run index (its cause stays first, so
    ``common.evaluation.scoring.failure_cause`` reads it).
    """
    rows = [judge_once(i) for i in range(runs)]
    if runs == 1:
        return rows[0]
    failed = next((i for i, r in enumerate(rows) if r.label is None), None)
    first = rows[0]
    first.labels = [r.label for r in rows]
    first.label = majority(first.labels)
    if failed is not None:
        first.error = f"{rows[failed].error} (judge run {failed + 1} of {runs})"
        first.parse_ok = False
    first.usage = _sum_usage([r.usage for r in rows])
    first.latency = round(sum(r.latency for r in rows), 4)
    first.cached = all(r.cached for r in rows)
    return first


def _sum_usage(usages: Sequence[Mapping[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for u in usages:
        for k, v in u.items():
            out[k] = out.get(k, 0) + int(v)
    return out


def row_labels(row: Optional[Mapping[str, Any]], runs: int) -> list[Optional[int]]:
    """A judge row's per-run labels (a single-run row: its label), padded with None to ``runs``."""
    if row is None:
        return [None] * runs
    labels = list(row.get("labels") or [row.get("label")])
    return labels + [None] * (runs - len(labels))


def n_runs(rows: Sequence[Mapping[str, Any]]) -> int:
    """The number of judge runs in a judge file (1 for single-run rows)."""
    return max((len(r.get("labels") or [1]) for r in rows), default=1)


def _summary(per_question: Sequence[Sequence[Optional[int]]]) -> dict[str, Any]:
    n = len(per_question)
    runs = len(per_question[0]) if per_question else 0
    per_run = []
    for i in range(runs):
        k = sum(1 for labels in per_question if labels[i] == 1)
        per_run.append({"k": k, "n": n, "accuracy": k / n if n else None})
    accs = [r["accuracy"] for r in per_run if r["accuracy"] is not None]
    votes = [majority(labels) for labels in per_question]
    k_major = sum(1 for v in votes if v == 1)
    # A question flips when its valid labels disagree (a failed run is a failure, not a flip).
    flips = sum(1 for labels in per_question if len({x for x in labels if x is not None}) > 1)
    return {
        "per_run": per_run,
        "mean": statistics.fmean(accs) if accs else None,
        "std": statistics.pstdev(accs) if accs else None,
        "majority": {"k": k_major, "n": n, "accuracy": k_major / n if n else None},
        "flips": {"k": flips, "n": n, "fraction": flips / n if n else None},
    }


def runs_block(joined: Sequence[Mapping[str, Any]], group_key: str, runs: int) -> dict[str, Any]:
    """``overall`` and per-group per-run accuracy, mean +- std, majority and flips.

    ``joined`` rows carry ``labels`` (length ``runs``) and the group value under ``group_key``;
    a scored question with no judge row carries ``[None] * runs``.
    """
    groups: dict[Any, list[Sequence[Optional[int]]]] = {}
    for r in joined:
        groups.setdefault(r[group_key], []).append(r["labels"])
    return {"n_runs": runs, "std_kind": "population (ddof 0)",
            "overall": _summary([r["labels"] for r in joined]),
            "by_group": {g: _summary(groups[g]) for g in sorted(groups)}}


def describe_runs(block: Mapping[str, Any]) -> str:
    """One line for a table: mean +- std over the runs, the per-run values, majority, flips."""
    o = block["overall"]
    if o["mean"] is None:
        return f"{block['n_runs']} judge runs: no scored question"
    runs = ", ".join(f"{100 * r['accuracy']:.2f}" for r in o["per_run"])
    return (f"{block['n_runs']} judge runs: mean {100 * o['mean']:.2f} +- {100 * o['std']:.2f} (population std; "
            f"runs {runs}); majority vote {100 * o['majority']['accuracy']:.2f} "
            f"({o['majority']['k']}/{o['majority']['n']}); labels flip on {o['flips']['k']}/{o['flips']['n']} "
            f"questions ({100 * o['flips']['fraction']:.2f}%)")
