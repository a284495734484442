"""The LLM reply cache: the key of a request (a hash of everything that changes its reply) and the
store of request -> reply (a SQLite file, or a PostgreSQL database every worker shares), with the
stored form of a reply that is more than its text (tool calls, logprobs).

Split from ``common.core.llm`` (which re-exports every name): the cache is read by stages and
tools that never make a call (the ledger, ``make claims``, the report's audit).
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from typing import Any, Optional

from common.core import cache_store

CACHE_VERSION = 1


def cache_key(payload: dict[str, Any]) -> str:
    """sha256 over canonical JSON of everything that changes a reply."""
    blob = json.dumps({"v": CACHE_VERSION, **payload}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class ResponseCache:
    """Store of request -> reply: a SQLite (WAL) file, or a PostgreSQL database shared by every
    worker when ``path`` is a ``postgresql://`` URL (common/core/cache_store.py); one connection per thread."""

    def __init__(self, path: str, mode: str = "rw"):
        if mode not in ("rw", "ro", "off", "refresh"):
            raise ValueError(f"llm.cache_mode must be rw|ro|off|refresh, got {mode!r}")
        self.path, self.mode = path, mode
        # The shared store never lets a later writer replace a row other workers may already have
        # used (ON CONFLICT DO NOTHING), except to refresh; a SQLite file keeps its historical write.
        self.shared = cache_store.is_url(path)
        self._table: Optional[cache_store.Table] = None
        if mode != "off":
            if not self.shared:
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            # synchronous=NORMAL (as the embedding cache): in WAL mode a commit no longer waits for
            # an fsync, which with a row written per answered call capped a stage near one call per
            # fsync; a killed process loses nothing, a power cut at most the last calls (paid again).
            self._table = (cache_store.open_table(path, "responses") if self.shared
                           else cache_store.open_table(path, "responses", synchronous_normal=True))

    def __reduce__(self) -> tuple[Any, ...]:
        # Sent to another process (a Ray task) as its location: the receiver opens its own connections.
        return (type(self), (self.path, self.mode))

    def _conn(self) -> sqlite3.Connection:
        """The calling thread's SQLite connection (a file cache only)."""
        if not isinstance(self._table, cache_store.SqliteTable):
            raise TypeError(f"the cache {self.path} is not a SQLite file")
        return self._table._conn()

    def get(self, key: str) -> Optional[tuple[str, dict[str, int], float]]:
        """(reply, usage, latency of the original call) or None."""
        if self.mode in ("off", "refresh") or self._table is None:
            return None
        rows = self._table.lookup("response, usage, latency", "key=?", (key,))
        return (rows[0][0], json.loads(rows[0][1]), float(rows[0][2] or 0.0)) if rows else None

    def put(self, key: str, request: dict[str, Any], response: str, usage: dict[str, int], latency: float = 0.0):
        if self.mode in ("off", "ro") or self._table is None:
            return
        self._table.insert(
            [(key, json.dumps(request, ensure_ascii=False), response, json.dumps(usage), time.time(), latency)],
            replace=self.mode == "refresh" or not self.shared)

    def close(self) -> None:
        if self._table is not None:
            self._table.close()


def is_packed(body: dict[str, Any]) -> bool:
    """A request whose cached reply is more than its text (tools or logprobs asked for)."""
    return "tools" in body or "logprobs" in body


def pack_reply(text: str, calls: list[dict[str, Any]], logprobs: Optional[dict[str, Any]] = None) -> str:
    """The cached reply of a request with tools or logprobs: its text, its tool calls and (when
    asked for) its logprobs, as one JSON string."""
    packed: dict[str, Any] = {"content": text, "tool_calls": calls}
    if logprobs is not None:
        packed["logprobs"] = logprobs
    return json.dumps(packed, ensure_ascii=False)


def unpack_reply(stored: str, packed: bool) -> tuple[str, list[dict[str, Any]], Optional[dict[str, Any]]]:
    if not packed:
        return stored, [], None
    reply = json.loads(stored)
    return reply["content"], list(reply["tool_calls"]), reply.get("logprobs")
