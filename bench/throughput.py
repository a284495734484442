"""Item 1: how well the LLM stages hide a fixed per-call latency behind their concurrency.

For a stage that made ``calls`` requests to an endpoint answering each after ``L`` seconds,
with ``c`` requests in flight, no schedule beats ``calls x L / c``; the ratio of the stage's
wall time to that bound is 1.0 for a perfect pipeline and grows with every second the stage
spends on anything else (prompt building, JSON, the cache, writing rows, idle slots).
"""
from __future__ import annotations

import math
from typing import Any

from bench.pipeline import LLM_STAGE_KINDS, StageResult


def ideal_seconds(calls: int, latency: float, concurrency: int) -> float:
    """The issue's bound: calls x L / concurrency."""
    return calls * latency / concurrency


def llm_stage_figures(results: list[StageResult], latency: float, concurrency: int,
                      target: float) -> list[dict[str, Any]]:
    """One row per LLM stage: calls, stage and process wall, bound, ratios, pass/fail."""
    rows = []
    for r in results:
        if r.stage not in LLM_STAGE_KINDS:
            continue
        calls = sum(r.requests.get(k, 0) for k in LLM_STAGE_KINDS[r.stage])
        llm = r.manifest.get("llm") or {}  # the stage's role: calls, cached, failed, latency_p50...
        stage_wall = float(r.manifest.get("wall_seconds", r.process.wall_seconds))
        ideal = ideal_seconds(calls, latency, concurrency)
        ratio = stage_wall / ideal if ideal else None
        rows.append({
            "stage": r.stage, "calls": calls,
            # the stage's own count of calls that were not cache hits: must equal `calls`
            "manifest_calls": (llm.get("calls", 0) - llm.get("cached", 0)) if llm else 0,
            "manifest_failed": llm.get("failed", 0) if llm else 0,
            "rows": r.manifest.get("rows"), "failed_rows": r.manifest.get("failed_rows"),
            "stage_wall_seconds": stage_wall, "process_wall_seconds": r.process.wall_seconds,
            "startup_seconds": round(r.process.wall_seconds - stage_wall, 3),
            "ideal_seconds": round(ideal, 3),
            # ceil: the last, partly filled wave of requests still costs a full L
            "ideal_waves_seconds": round(math.ceil(calls / concurrency) * latency, 3),
            "ratio": round(ratio, 3) if ratio is not None else None,
            "ratio_process": round(r.process.wall_seconds / ideal, 3) if ideal else None,
            "llm_latency_p50": llm.get("latency_p50") if llm else None,
            "llm_latency_p95": llm.get("latency_p95") if llm else None,
            "target": target, "passed": ratio is not None and ratio <= target,
        })
    return rows


def speedup(low: list[StageResult], high: list[StageResult], c_low: int, c_high: int,
            latency: float, whole: tuple[float, float] | None = None) -> dict[str, Any]:
    """The same conversation at two concurrencies: per LLM stage and summed walls, and their ratio.

    ``whole``: the two pipelines' walls when each ran in one process (`make locomo`); without it the
    pipeline's wall is the sum of one process per stage (their starts included).
    """
    def walls(results: list[StageResult]) -> dict[str, dict[str, float]]:
        return {r.stage: {"stage_wall_seconds": float(r.manifest.get("wall_seconds", r.process.wall_seconds)),
                          "process_wall_seconds": r.process.wall_seconds,
                          "calls": sum(r.requests.get(k, 0) for k in LLM_STAGE_KINDS[r.stage])}
                for r in results if r.stage in LLM_STAGE_KINDS}

    a, b = walls(low), walls(high)
    stages = []
    for s in a:
        wa, wb = a[s]["stage_wall_seconds"], b[s]["stage_wall_seconds"]
        calls = a[s]["calls"]
        stages.append({"stage": s, "calls_low": calls, "calls_high": b[s]["calls"],
                       f"wall_c{c_low}": wa, f"wall_c{c_high}": wb,
                       "speedup": round(wa / wb, 2) if wb else None,
                       "ideal_speedup": (round(math.ceil(calls / c_low) / math.ceil(calls / c_high), 2)
                                         if calls else None)})
    sum_a = sum(v["stage_wall_seconds"] for v in a.values())
    sum_b = sum(v["stage_wall_seconds"] for v in b.values())
    if whole is not None:
        total_a, total_b = whole
    else:
        total_a = sum(r.process.wall_seconds for r in low)
        total_b = sum(r.process.wall_seconds for r in high)
    return {"concurrency_low": c_low, "concurrency_high": c_high, "latency": latency, "stages": stages,
            "llm_stages_wall_low": round(sum_a, 3), "llm_stages_wall_high": round(sum_b, 3),
            "llm_stages_speedup": round(sum_a / sum_b, 2) if sum_b else None,
            "pipeline": "one process (make locomo)" if whole is not None else "one process per stage",
            "pipeline_wall_low": round(total_a, 3), "pipeline_wall_high": round(total_b, 3),
            "pipeline_speedup": round(total_a / total_b, 2) if total_b else None}
