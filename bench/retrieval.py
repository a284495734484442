"""Item 2: per-question latency of 06_retrieve over one conversation's finished index.

The index (stage 04 of the bench's full run) is loaded once; then every question of the
conversation is retrieved with its stage-05 plan, timing each ``Retriever.retrieve`` call, which
embeds the query side with the configured model. Two variants, each over all questions:

* ``pipeline``: the embedding cache exactly as stage 04 left it (what 06 meets in `make locomo`:
  texts the index embedded, e.g. ``entity: caroline``, are found there; no query text is);
* ``no_cache``: no embedding cache at all, every query-side text goes through the model.

Excluded, and reported apart: loading the model, the index and BM25, and the tokenizer (once
per process). No LLM is called: plans that declare a bridge are retrieved without resolving it
(the bridge call is LLM time; the full run's 06 makes it and records it in ``bridge_seconds``).
"""
from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from bench.pipeline import PipelineRun
from common.core import artifacts
from common.core.io import read_jsonl


class TimedEmbedder:
    """An embedder proxy that adds up the time and texts spent in ``encode``."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.seconds = 0.0
        self.calls = 0
        self.texts = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def encode(self, texts: Sequence[str], alone: bool = False) -> np.ndarray:
        t0 = time.perf_counter()
        try:
            return self.inner.encode(texts, alone=True) if alone else self.inner.encode(texts)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1
            self.texts += len(texts)

    def encode_alone(self, texts: Sequence[str]) -> np.ndarray:  # the query side's path (QueryVectors)
        return self.encode(texts, alone=True)


class CountingBackend:
    """A backend proxy counting the texts that reach the model (cache misses)."""

    def __init__(self, inner: Any):
        self.inner, self.texts, self.calls = inner, 0, 0
        self.model_id = inner.model_id
        if hasattr(inner, "alone_groups"):  # the query side groups its texts as the inner backend does
            self.alone_groups = inner.alone_groups

    @property
    def dim(self) -> int:
        return self.inner.dim

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        self.texts += len(texts)
        return self.inner.encode(texts)


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95 (linear interpolation between order statistics, numpy's default), mean and max."""
    if not values:
        return {"n": 0, "p50": None, "p95": None, "mean": None, "max": None}
    a = np.asarray(values, dtype=float)
    return {"n": len(values), "p50": round(float(np.percentile(a, 50)), 6),
            "p95": round(float(np.percentile(a, 95)), 6), "mean": round(float(a.mean()), 6),
            "max": round(float(a.max()), 6)}


def _torch_threads() -> int | None:
    try:
        import torch
    except ImportError:
        return None
    return int(torch.get_num_threads())


def snapshot_cache(src: Path, dst: Path) -> None:
    """A consistent copy of an sqlite cache (WAL included) through sqlite's backup API."""
    import sqlite3

    dst.unlink(missing_ok=True)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)


def _variant(run: PipelineRun, memory_id: str, cache: str, targets: dict[str, float]) -> dict[str, Any]:
    """Time every question of ``memory_id`` with an embedder whose cache is ``cache`` ("" = none)."""
    from common.core.embeddings import Embedder
    from common.core.schema import PlanRow, from_dict
    from common.core.tokens import count_tokens
    from common.method.index import MemoryIndex
    from common.method.retrieve import Retriever
    from common.pipeline.engine import Run, load_questions, load_views

    cfg = run.cfg()
    r = Run(cfg, progress=False)
    questions = [q for q in load_questions(r) if q.memory_id == memory_id]
    if not questions:
        raise ValueError(f"{r.path('questions')}: no question of memory {memory_id!r}")
    plans = {p["qid"]: from_dict(PlanRow, p).plan for p in read_jsonl(r.path("plans")) if p["memory_id"] == memory_id}
    index_row = next(x for x in read_jsonl(r.path("index")) if x["memory_id"] == memory_id)
    view = load_views(r)[memory_id]

    setup: dict[str, float] = {}
    t0 = time.perf_counter()
    inner = Embedder.from_config(dataclasses.replace(cfg.embedding, cache_path=cache))
    backend = inner.backend = CountingBackend(inner.backend)
    embedder = TimedEmbedder(inner)
    backend.encode(["warm-up"])  # loads the model, bypassing the cache
    setup["model_load_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    count_tokens("warm-up")
    setup["tokenizer_load_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = MemoryIndex.load(r.dir / index_row["path"])
    retriever = Retriever(index, view, embedder, cfg.retrieve, cfg.episodes.include_images)
    _ = index.bm25  # built lazily on first use; part of loading, not of a question
    setup["index_load_seconds"] = time.perf_counter() - t0
    backend.texts = backend.calls = 0

    per_question: list[dict[str, Any]] = []
    for q in questions:
        e0, c0, m0 = embedder.seconds, embedder.calls, backend.texts
        t0 = time.perf_counter()
        row = retriever.retrieve(q, plans[q.qid])
        dt = time.perf_counter() - t0
        per_question.append({"qid": q.qid, "seconds": round(dt, 6), "row_seconds": row.seconds,
                             "embed_seconds": round(embedder.seconds - e0, 6), "encode_calls": embedder.calls - c0,
                             "model_texts": backend.texts - m0, "hops": len(plans[q.qid].hops),
                             "scope": row.scope, "episodes": len(row.episode_ids), "buffer_tokens": row.buffer_tokens})
    inner.close()
    secs = [p["seconds"] for p in per_question]
    stats = percentiles(secs)
    n = len(per_question)
    return {
        "embedding_cache": cache or None, "embedding_model": embedder.model_id, "torch_threads": _torch_threads(),
        "setup": {k: round(v, 4) for k, v in setup.items()},
        "latency": stats,
        "embedding": {"share_of_time": round(embedder.seconds / sum(secs), 3) if secs else None,
                      "per_question": percentiles([p["embed_seconds"] for p in per_question]),
                      "encode_calls_per_question": round(sum(p["encode_calls"] for p in per_question) / n, 2),
                      "model_texts_per_question": round(backend.texts / n, 2),
                      "model_calls_per_question": round(backend.calls / n, 2)},
        "non_embedding": percentiles([p["seconds"] - p["embed_seconds"] for p in per_question]),
        "passed": {"p50": stats["p50"] is not None and stats["p50"] <= targets["p50"],
                   "p95": stats["p95"] is not None and stats["p95"] <= targets["p95"]},
        "per_question": per_question,
    }


def retrieval_latency(run: PipelineRun, memory_id: str, cache_after_04: Path | None, scratch: Path, *,
                      p50_target: float, p95_target: float) -> dict[str, Any]:
    """Both variants on ``memory_id``, plus the `seconds` the full run's own 06 recorded."""

    targets = {"p50": p50_target, "p95": p95_target}
    variants = {}
    if cache_after_04 is not None and cache_after_04.exists():
        cache = scratch / "embeddings.retrieval.sqlite"
        shutil.copyfile(cache_after_04, cache)  # a copy: the variant's writes stay out of the snapshot
        variants["pipeline"] = _variant(run, memory_id, str(cache), targets)
    variants["no_cache"] = _variant(run, memory_id, "", targets)
    rows = read_jsonl(artifacts.path(run.run_dir, "retrievals"))
    index_row = next(x for x in read_jsonl(artifacts.path(run.run_dir, "index")) if x["memory_id"] == memory_id)
    head = variants.get("pipeline", variants["no_cache"])
    return {
        "memory_id": memory_id, "questions": head["latency"]["n"],
        "index": {k: index_row.get(k) for k in ("episodes", "records", "chunks", "properties")},
        "headline": "pipeline" if "pipeline" in variants else "no_cache",
        "targets": targets, "variants": variants,
        # The stage as `make locomo` ran it in the full run: own process, cache as 04 left it.
        "full_run_06_seconds_this_memory": percentiles([x["seconds"] for x in rows if x["memory_id"] == memory_id]),
        "full_run_06_seconds_all": percentiles([x["seconds"] for x in rows]),
        # A row's ``seconds`` adds its bridge calls' endpoint latency (L of the fake server, one call
        # or more per bridge hop): without it, the retrieval's own time in that process.
        "full_run_06_retrieval_seconds_all": percentiles([x["seconds"] - (x.get("bridge_seconds") or 0.0)
                                                          for x in rows]),
        "full_run_06_bridge_questions": sum(1 for x in rows if x.get("bridge_seconds")),
        "passed": head["passed"],
    }
