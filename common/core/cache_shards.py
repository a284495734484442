"""Per-worker cache shards: how the Ray executor's workers share the run's caches without opening them.

A worker on another machine must not open the run's SQLite files (SQLite's WAL needs shared
memory, which a network file system does not give). Each worker keeps its own shard, a local
SQLite file with the same table and the same content-addressed keys as the run's cache:

* a lookup reads the shard first and, on a miss, asks the run's cache (``CacheStore``, which a
  driver-side actor serves; entries another worker merged a moment ago are found there);
* a new entry goes to the shard and to a list of unmerged entries, which is merged into the run's
  cache by key (``INSERT OR IGNORE``: an entry already there is never replaced) every
  ``flush_every`` entries and when the task ends, so a killed worker loses at most that many
  answered calls.

The LLM response cache (``common.core.llm.ResponseCache``) and the embedding cache
(``common.core.embeddings.EmbeddingCache``) are both sharded this way. ``CacheStore`` is plain
Python over the run's two files; ``common.pipeline.ray_executor`` wraps it (with the claims of
``common.core.cache_claims``) in a Ray actor and hands the workers a ``Remote`` that calls it. The
workers' response caches claim the keys they miss and merge a claimed key's reply at once
(``cache_claims.ClaimingResponseCache``), so another worker waiting for it is not held up.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Optional, Protocol, Sequence

import numpy as np

from common.core import cache_store
from common.core.embeddings import EmbeddingCache
from common.core.llm import ResponseCache

# One response entry as it travels: (key, request JSON, response, usage JSON, created, latency).
ResponseRow = tuple[str, str, str, str, float, float]


class Remote(Protocol):
    """The run's caches as a worker reaches them (``CacheStore`` itself, or an actor's proxy)."""

    def get(self, key: str) -> Optional[ResponseRow]: ...

    def put_many(self, rows: list[ResponseRow]) -> int: ...

    def vectors(self, namespace: str, hashes: list[str], dim: Optional[int]) -> dict[str, bytes]: ...

    def put_vectors(self, namespace: str, items: list[tuple[str, bytes]]) -> int: ...


class CacheStore:
    """The run's response and embedding caches, opened where they live: the driver's SQLite files,
    or the shared PostgreSQL database of ``llm.cache_url`` (through the same table seam,
    ``common.core.cache_store``, so a merge is ``INSERT OR IGNORE`` / ``ON CONFLICT DO NOTHING``)."""

    def __init__(self, llm_path: str, embedding_path: str = ""):
        self.responses = ResponseCache(llm_path, "rw")
        self.embeddings = EmbeddingCache(embedding_path) if embedding_path else None
        self.merged = 0  # entries added by workers (an entry already present is not counted)

    def _responses(self) -> cache_store.Table:
        assert self.responses._table is not None  # opened rw above
        return self.responses._table

    def get(self, key: str) -> Optional[ResponseRow]:
        rows = self._responses().lookup("key, request, response, usage, created, latency", "key=?", (key,))
        if not rows:
            return None
        row = rows[0]
        return (row[0], row[1], row[2], row[3], float(row[4] or 0.0), float(row[5] or 0.0))

    def put_many(self, rows: list[ResponseRow]) -> int:
        added = self._responses().insert(rows, replace=False)
        self.merged += added
        return added

    def vectors(self, namespace: str, hashes: list[str], dim: Optional[int]) -> dict[str, bytes]:
        if self.embeddings is None:
            return {}
        return {h: v.astype(np.float32).tobytes() for h, v in self.embeddings.get_many(namespace, hashes, dim).items()}

    def put_vectors(self, namespace: str, items: list[tuple[str, bytes]]) -> int:
        if self.embeddings is None or not items:
            return 0
        return self.embeddings._table.insert([(namespace, h, blob) for h, blob in items], replace=False)


class ShardedResponseCache(ResponseCache):
    """A worker's response cache: its shard, the run's cache behind it, merged every ``flush_every``."""

    def __init__(self, shard: str, mode: str, remote: Remote, flush_every: int):
        super().__init__(shard, mode)  # ro: reads the run's cache, adds nothing; off: neither
        self.remote, self.flush_every = remote, max(1, int(flush_every))
        self._pending: list[ResponseRow] = []
        self._pending_lock = threading.Lock()
        self.flushed = 0

    def get(self, key: str) -> Optional[tuple[str, dict[str, int], float]]:
        hit = super().get(key)
        if hit is not None or self.mode in ("off", "refresh"):
            return hit
        row = self.remote.get(key)
        if row is None:
            return None
        # Kept in the shard (not as a new entry: the run's cache has it) for the task's next lookup.
        self._conn().execute("INSERT OR IGNORE INTO responses (key, request, response, usage, created, latency)"
                             " VALUES (?,?,?,?,?,?)", row)
        return row[2], json.loads(row[3]), float(row[5] or 0.0)

    def put(self, key: str, request: dict[str, Any], response: str, usage: dict[str, int], latency: float = 0.0):
        if self.mode in ("off", "ro"):
            return
        super().put(key, request, response, usage, latency)
        row = (key, json.dumps(request, ensure_ascii=False), response, json.dumps(usage), time.time(), latency)
        with self._pending_lock:
            self._pending.append(row)
            due = len(self._pending) >= self.flush_every
        if due:
            self.flush()

    def flush(self) -> int:
        """Merge the unmerged entries into the run's cache; returns how many were sent."""
        with self._pending_lock:
            rows, self._pending = self._pending, []
        if rows:
            self.remote.put_many(rows)
            self.flushed += len(rows)
        return len(rows)

    @property
    def unmerged(self) -> int:
        with self._pending_lock:
            return len(self._pending)


class ShardedEmbeddingCache(EmbeddingCache):
    """A worker's embedding cache: its shard, the run's cache behind it, merged every ``flush_every``
    vectors."""

    def __init__(self, shard: str | Path, remote: Remote, flush_every: int):
        super().__init__(shard)
        self.remote, self.flush_every = remote, max(1, int(flush_every))
        self._pending: dict[str, list[tuple[str, bytes]]] = {}
        self._pending_lock = threading.Lock()

    def get_many(self, namespace: str, hashes: Sequence[str], dim: Optional[int] = None) -> dict[str, np.ndarray]:
        found = super().get_many(namespace, hashes, dim)
        missing = [h for h in dict.fromkeys(hashes) if h not in found]
        if missing:
            remote = self.remote.vectors(namespace, missing, dim)
            if remote:
                vecs = {h: np.frombuffer(b, dtype=np.float32) for h, b in remote.items()}
                super().put_many(namespace, vecs.items())
                found.update(vecs)
        return found

    def put_many(self, namespace: str, items: Iterable[tuple[str, np.ndarray]]) -> None:
        items = [(h, np.asarray(v, dtype=np.float32)) for h, v in items]
        super().put_many(namespace, items)
        with self._pending_lock:
            self._pending.setdefault(namespace, []).extend((h, v.tobytes()) for h, v in items)
            due = sum(len(v) for v in self._pending.values()) >= self.flush_every
        if due:
            self.flush()

    def flush(self) -> int:
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for namespace, items in pending.items():
            self.remote.put_vectors(namespace, items)
        return sum(len(v) for v in pending.values())
