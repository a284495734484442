"""Item 4: peak resident memory of the full run's stage processes, model weights declared.

The bench runs each stage as its own numbered script, so a stage's peak is that process's
``ru_maxrss`` and the item reports the largest (``make locomo`` runs the stages in one process,
whose peak is at least that: it keeps the embedding model loaded from 04 to 06). The stages that
load the embedding model hold its weights in that peak; their size (parameters and buffers, counted
from the loaded model) is subtracted from those stages only, and reported beside the raw figure.
"""
from __future__ import annotations

from typing import Any

from bench.pipeline import MODEL_STAGES, StageResult

GIB = 2**30


def model_weight_bytes(embedding_cfg: Any) -> dict[str, Any]:
    """Bytes of the embedding model's parameters and buffers (0 for an HTTP embedding backend)."""
    if embedding_cfg.backend != "sentence-transformers":
        return {"model": embedding_cfg.model, "backend": embedding_cfg.backend, "bytes": 0}
    from common.core.embeddings import load_sentence_transformer

    m = load_sentence_transformer(embedding_cfg.model, embedding_cfg.device)
    params = sum(p.numel() * p.element_size() for p in m.parameters())
    buffers = sum(b.numel() * b.element_size() for b in m.buffers())
    return {"model": embedding_cfg.model, "backend": embedding_cfg.backend, "bytes": int(params + buffers),
            "parameters": int(sum(p.numel() for p in m.parameters()))}


def peak_memory(results: list[StageResult], weights: int, target_bytes: float = 2 * GIB) -> dict[str, Any]:
    """Per stage peak RSS, and the run's peak with the model weights taken out of model stages."""
    stages: list[dict[str, Any]] = []
    for r in results:
        loads_model = r.stage in MODEL_STAGES
        rss = r.process.peak_rss_bytes
        stages.append({"stage": r.stage, "peak_rss_bytes": rss, "loads_model": loads_model,
                       "peak_rss_excl_weights_bytes": rss - weights if loads_model else rss})
    top = max(stages, key=lambda s: s["peak_rss_excl_weights_bytes"])
    raw = max(stages, key=lambda s: s["peak_rss_bytes"])
    return {"stages": stages, "model_weight_bytes": weights,
            "peak_rss_bytes": raw["peak_rss_bytes"], "peak_rss_stage": raw["stage"],
            "peak_rss_excl_weights_bytes": top["peak_rss_excl_weights_bytes"],
            "peak_rss_excl_weights_stage": top["stage"], "target_bytes": target_bytes,
            "passed": top["peak_rss_excl_weights_bytes"] < target_bytes}
