"""Stage 06's query side: the texts a hop embeds, embedded together, each distinct text once per memory.

A question's retrieval embeds, per hop, the anchor's fields (``entity: caroline``, ...) for the
structured route and one dense query (the question and the anchor's fields). They were several
encode calls of one or two texts each, and a call's fixed cost (the model's bookkeeping, a cache
round trip) was a large part of a question's time; the fields also repeat across a memory's
questions. ``QueryVectors`` embeds a hop's texts in one embedder call and keeps every vector it
made; each text gets the vector it gets alone, so no vector depends on which question came first.
"""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from common.core.schema import Anchor
from common.method.index import EMBEDDED_FIELDS, field_text

# Fields the dense query lists under the question (the entity type is left out).
DENSE_FIELDS = ("entity", "property", "value", "condition_property", "condition_value")
# Distinct texts one memory's retriever keeps; past this the memo starts over (memory stays bounded).
QUERY_MEMO_MAX = 4096


def anchor_texts(anchor: Anchor) -> dict[str, str]:
    """The anchor's embedded fields as the index embeds them (``field_text``), by field."""
    return {f: field_text(f, getattr(anchor, f)) for f in EMBEDDED_FIELDS if getattr(anchor, f)}


def dense_text(question: str, anchor: Anchor) -> str:
    """The dense route's query: the question, then one ``field: value`` line per anchor field."""
    return "\n".join([question] + [f"{f}: {getattr(anchor, f)}" for f in DENSE_FIELDS if getattr(anchor, f)])


class QueryVectors:
    """Unit vectors of query-side texts through ``embedder`` (which has its own cache), kept by text."""

    def __init__(self, embedder: Any, limit: int = QUERY_MEMO_MAX):
        self.embedder, self.limit = embedder, limit
        self._vecs: dict[str, np.ndarray] = {}

    def load_seconds(self) -> float:
        """The embedder's one-off loading so far (``Embedder.load_seconds``; 0 for one without)."""
        return float(getattr(self.embedder, "load_seconds", 0.0) or 0.0)

    def prefetch(self, texts: Iterable[str]) -> None:
        """Embed in ONE call every distinct non-empty text not held yet."""
        missing = [t for t in dict.fromkeys(texts) if t and t not in self._vecs]
        if not missing:
            return
        # Each text's vector as if embedded alone (``Embedder.encode_alone``): which texts are
        # missing here depends on the questions this memory answered before, so with one padded
        # call a shared text's bits would depend on the order 06's threads ran the questions in.
        encode = getattr(self.embedder, "encode_alone", self.embedder.encode)
        vecs = np.asarray(encode(missing), np.float32)
        if len(self._vecs) + len(missing) > self.limit:
            self._vecs.clear()
        self._vecs.update(zip(missing, vecs))

    def get(self, text: str) -> np.ndarray:
        self.prefetch([text])
        return self._vecs[text]
