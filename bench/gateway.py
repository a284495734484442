"""Bench item ``gateway``: what the gateway (common/systems/gateway.py) costs an outside system.

* Overhead per call: the same number of distinct chat requests (cache misses) sent, at the same
  concurrency, once straight through the harness's client and once through the gateway by the
  ``openai`` SDK as an outside system sends them; the overhead is the difference of the mean
  per-call latencies (the fake server answers after ``latency`` seconds either way).
* Ingestion ratio: a LangMem ingestion (``method.name=langmem``, when langmem is installed) of the
  bench's memories through the gateway, its wall time over ``calls x latency / concurrency``
  (concurrency = memories ingested at once): 1.0 would mean the system and the gateway add
  nothing to the endpoint's own time (the wall time includes importing LangMem and loading the
  embedding model).
* The fake server, the gateway and the client share one process (and its GIL) here: the overhead
  is an upper bound of what a separate endpoint would show. Of it, ``server_per_call_seconds`` is
  the gateway's own request handling; the rest is the ``openai`` SDK's work on the caller's side.
"""
from __future__ import annotations

import importlib.util
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common.core.llm import LLMClient, ResponseCache, RoleSettings


def _client(base_url: str, cache: Path, concurrency: int) -> LLMClient:
    role = RoleSettings(role="memory", model="bench", base_url=base_url)
    return LLMClient({"memory": role}, cache=ResponseCache(str(cache)), concurrency=concurrency)


def _timed(fn: Any, n: int, concurrency: int) -> tuple[float, list[float]]:
    def one(i: int) -> float:
        started = time.perf_counter()
        fn(i)
        return time.perf_counter() - started

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        latencies = list(pool.map(one, range(n)))
    return time.perf_counter() - started, latencies


def overhead(base_url: str, workdir: Path, *, calls: int = 200, concurrency: int = 16) -> dict[str, Any]:
    """Mean per-call latency straight through the client and through the gateway, and the difference."""
    import openai

    from common.systems.gateway import Gateway

    tool = {"type": "function", "function": {"name": "Memory", "parameters": {
        "type": "object", "properties": {"content": {"type": "string"}}, "required": ["content"]}}}

    def messages(tag: str, i: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"bench {tag} request {i}: Alice adopted a cat."}]

    direct = _client(base_url, workdir / "gateway_direct.sqlite", concurrency)
    via = _client(base_url, workdir / "gateway_via.sqlite", concurrency)
    wall_d = wall_g = 0.0
    lat_d: list[float] = []
    lat_g: list[float] = []
    with Gateway(via, lambda: None, system="bench", workers=concurrency) as gw:
        sdk: Any = openai.OpenAI(base_url=gw.base_url, api_key=gw.api_key, max_retries=0)  # plain dicts below
        # A warm-up round each (connections, cache files), then alternating rounds, so that a change
        # of the machine's load during the measurement falls on both sides alike.
        for rnd in range(-1, 4):
            size = concurrency if rnd < 0 else calls // 4
            w, lat = _timed(lambda i: direct.complete("memory", messages(f"direct {rnd}", i),  # noqa: B023
                                                      tools=[tool], prompt_id="gateway.bench"), size, concurrency)
            if rnd >= 0:
                wall_d, lat_d = wall_d + w, lat_d + lat
            w, lat = _timed(lambda i: sdk.chat.completions.create(
                model="any", messages=messages(f"gateway {rnd}", i), tools=[tool]),  # noqa: B023
                size, concurrency)
            if rnd >= 0:
                wall_g, lat_g = wall_g + w, lat_g + lat
        summary = gw.summary()
    calls = len(lat_g)
    mean_d, mean_g = statistics.fmean(lat_d), statistics.fmean(lat_g)
    return {"calls": calls, "concurrency": concurrency,
            "direct": {"wall_seconds": round(wall_d, 3), "mean_latency": round(mean_d, 4)},
            "gateway": {"wall_seconds": round(wall_g, 3), "mean_latency": round(mean_g, 4),
                        "p95_latency": round(sorted(lat_g)[int(0.95 * (len(lat_g) - 1))], 4), "served": summary},
            "overhead_per_call_seconds": round(mean_g - mean_d, 4),
            # The gateway's own share: its request handling (aiohttp, the token, JSON, the hop to a
            # worker thread) minus the time inside the harness's client; the rest of the overhead is
            # the outside system's own SDK (building the request, parsing the reply).
            "server_per_call_seconds": round((summary["handler_seconds"] - summary["serve_seconds"])
                                             / max(1, summary["chat"]), 4)}


def ingestion_ratio(base_url: str, workdir: Path, config: str, data_sets: list[str], latency: float,
                    ingest_concurrency: int = 4) -> dict[str, Any]:
    """LangMem's ingestion wall time over calls x latency / concurrency (langmem installed), else why not."""
    if importlib.util.find_spec("langmem") is None:
        return {"skipped": "langmem not installed (requirements-systems.txt)"}
    import os

    from common.core.config import load_config
    from common.pipeline.engine import Run, run_stage

    sets = data_sets + [f"run.results_dir={workdir / 'results'}", "run.name=gateway-langmem", "method.name=langmem",
                        f"llm.cache_path={workdir / 'gateway_langmem.sqlite'}", "embedding.backend=openai",
                        f"embedding.cache_path={workdir / 'gateway_emb.sqlite'}",
                        f"systems.ingest_concurrency={ingest_concurrency}"]
    saved = os.environ.get("OPENAI_BASE_URL")
    os.environ["OPENAI_BASE_URL"] = base_url
    try:
        run = Run(load_config([config], sets), progress=False)
        for stage in ("preprocess", "retrieve"):
            run_stage(run, stage)
    finally:
        if saved is None:
            os.environ.pop("OPENAI_BASE_URL", None)
        else:
            os.environ["OPENAI_BASE_URL"] = saved
    ingest = json.loads((run.dir / "06_retrieve.manifest.json").read_text(encoding="utf-8"))["ingest"]
    calls, wall = ingest["spent_this_time"]["calls"], ingest["wall_seconds"]
    at_once = max(1, min(ingest_concurrency, ingest["memories"]))
    bound = calls * latency / at_once
    return {"memories": ingest["memories"], "calls": calls, "latency": latency, "concurrency": at_once,
            "wall_seconds": wall, "calls_x_latency_over_concurrency": round(bound, 3),
            "ratio": round(wall / bound, 3) if bound else None}
