"""One short batch of texts through a loaded sentence-transformers model, as its ``encode`` does.

Stage 06 embeds a hop's query texts (one to a few short texts) per call. ``SentenceTransformer.encode``
spends part of such a call on bookkeeping meant for long runs (every module put in eval mode,
every parameter's device checked); ``encode`` here runs the same steps without it.
"""
from __future__ import annotations

from typing import Any

import numpy as np


def fits(m: Any) -> bool:
    """Whether ``encode`` can run this model: sentence-transformers' own steps, by name, on the CPU
    (elsewhere encode also moves the batch to the model's device; that case keeps encode)."""
    return (callable(getattr(m, "preprocess", None)) and callable(getattr(m, "_input_length", None))
            and str(getattr(m, "device", "")) == "cpu")


def encode(m: Any, texts: list[str]) -> np.ndarray:
    """``m.encode(texts, normalize_embeddings=True)`` for texts that fit one batch, without its
    per-call bookkeeping (putting every module in eval mode, checking every parameter's device).

    A query-side call of stage 06 is one to three short texts, for which that bookkeeping was
    about a sixth of the call's CPU time. The steps are encode's own, in its order (texts sorted
    longest first, one padded batch, the model, L2 normalisation), so the vectors are the same to
    the bit (``tests/test_query_vectors.py``)."""
    import torch

    if m.training:  # a model as loaded is in training mode: eval (no dropout) once, as encode would
        m.eval()
    order = np.argsort([-m._input_length(t) for t in texts])
    with torch.inference_mode():
        features = m.preprocess([texts[i] for i in order])
        out = m(features)["sentence_embedding"]
        out = torch.nn.functional.normalize(out, p=2, dim=1).cpu().numpy()
    result = np.empty_like(out)
    result[order] = out
    return result
