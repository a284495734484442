"""One request in flight per cache key across every worker of a run: claims on the run's cache.

Inside one process the LLM client already sends one request per key at a time (its single
flight); the Ray executor's workers are many processes on many machines, each with its own
client. Without more, two workers that miss the cache for the same key at the same moment (two
LongMemEval haystacks holding the same session) both pay for it. So a worker that misses asks the
run's cache to *claim* the key: the first asker holds the claim and sends the request; any other
asker waits until the holder's reply is merged into the run's cache (it then reads it from there,
a cache hit) or the claim is given up (the request failed: the waiter may send it itself).

A claim is a lease: its holder renews every claim it holds every ``CLAIM_RENEW`` seconds while the
request runs (retries and waits included), and a claim not renewed within ``CLAIM_LEASE`` seconds
is dropped, so a holder that died (its machine lost, its process killed) blocks the others for at
most that long; a holder on the cache's own machine whose process is gone loses its claims at once.

``ClaimingStore`` is the run's cache with the claims (the body of the Ray actor that serves it, or
plain Python in one process); ``ClaimingResponseCache`` is a worker's response cache that claims
on a miss and merges a claimed key's reply at once (not ``flush_every`` replies later).
"""
from __future__ import annotations

import json
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from common.core.cache_shards import CacheStore, Remote, ResponseRow, ShardedResponseCache
from common.core.llm import ResponseCache

CLAIM_LEASE = 30.0  # seconds a claim lives without renewal
CLAIM_RENEW = 5.0  # how often a holder renews the claims it holds
CLAIM_WAIT = 0.5  # the longest one ``claim`` call waits in the store before the waiter asks again


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Holder:
    """Who holds a claim: one worker cache (a task's process), on a node, with a pid."""

    id: str
    node: str = ""
    pid: int = 0


class Claims:
    """The claimed keys of one run (plain Python: the store's state, and the tests')."""

    def __init__(self, lease: float = CLAIM_LEASE, node: str = ""):
        self.lease, self.node = float(lease), node
        self.held: dict[str, tuple[Holder, float]] = {}  # key -> (holder, expiry)
        self.taken = 0  # claims granted (the tests count them)
        self.expired = 0  # claims dropped because their holder stopped renewing or died

    def _dead(self, holder: Holder, expiry: float, now: float) -> bool:
        return expiry < now or (bool(self.node) and holder.node == self.node and holder.pid > 0
                                and not process_alive(holder.pid))

    def take(self, key: str, holder: Holder, now: Optional[float] = None) -> bool:
        """Claim ``key`` for ``holder``: True when it is now the holder's (free, given up, its
        holder dead, or already its own), False while another live holder has it."""
        now = time.monotonic() if now is None else now
        held = self.held.get(key)
        if held is not None and held[0].id != holder.id:
            if not self._dead(held[0], held[1], now):
                return False
            self.expired += 1
        if held is None or held[0].id != holder.id:
            self.taken += 1
        self.held[key] = (holder, now + self.lease)
        return True

    def release(self, keys: list[str], holder_id: str) -> int:
        """Give up the holder's claims on ``keys`` (its reply is merged, or its request failed)."""
        gone = 0
        for key in keys:
            held = self.held.get(key)
            if held is not None and held[0].id == holder_id:
                del self.held[key]
                gone += 1
        return gone

    def renew(self, keys: list[str], holder_id: str, now: Optional[float] = None) -> int:
        now = time.monotonic() if now is None else now
        renewed = 0
        for key in keys:
            held = self.held.get(key)
            if held is not None and held[0].id == holder_id:
                self.held[key] = (held[0], now + self.lease)
                renewed += 1
        return renewed


class ClaimingStore(CacheStore):
    """The run's caches (``CacheStore``) with the claims of its keys; safe to call from many
    threads (the Ray actor serving it runs its calls concurrently)."""

    def __init__(self, llm_path: str, embedding_path: str = "", *, lease: float = CLAIM_LEASE, node: str = ""):
        super().__init__(llm_path, embedding_path)
        self.claims = Claims(lease, node)
        self._changed = threading.Condition()
        # The replies merged here (paid by a worker of this run): after a Ctrl-C the driver keeps the
        # ones no row records yet, so the ledger counts them paid (common.pipeline.ledger.UNWRITTEN).
        self.paid: dict[str, dict[str, Any]] = {}

    def claim(self, key: str, holder: Holder, wait: float = CLAIM_WAIT) -> tuple[Optional[ResponseRow], bool]:
        """``(row, False)`` when the run's cache has the key; ``(None, True)`` when the caller now
        holds its claim (it sends the request); ``(None, False)`` when another holder still has it
        after ``wait`` seconds (the caller asks again)."""
        deadline = time.monotonic() + wait
        while True:
            row = self.get(key)
            if row is not None:
                return row, False
            with self._changed:
                if self.claims.take(key, holder):
                    # The holder before may have merged its reply and released the claim since the
                    # read above (a merge is written before its release): read once more, or this
                    # caller would send the request a second time.
                    row = self.get(key)
                    if row is not None:
                        self.claims.release([key], holder.id)
                        return row, False
                    return None, True
                left = deadline - time.monotonic()
                if left <= 0:
                    return None, False
                self._changed.wait(left)

    def put_many(self, rows: list[ResponseRow], holder_id: str = "") -> int:
        added = super().put_many(rows)
        with self._changed:
            for key, request, _, usage, _, latency in rows:
                self.paid[key] = {"model": json.loads(request or "{}").get("model"), "usage": json.loads(usage or "{}"),
                                  "latency": latency}
            if holder_id:
                self.claims.release([r[0] for r in rows], holder_id)
            self._changed.notify_all()
        return added

    def release(self, keys: list[str], holder_id: str) -> int:
        with self._changed:
            gone = self.claims.release(keys, holder_id)
            self._changed.notify_all()
        return gone

    def renew(self, keys: list[str], holder_id: str) -> int:
        with self._changed:
            return self.claims.renew(keys, holder_id)

    def paid_replies(self) -> dict[str, dict[str, Any]]:
        with self._changed:
            return dict(self.paid)

    def claim_counts(self) -> dict[str, int]:
        with self._changed:
            return {"taken": self.claims.taken, "expired": self.claims.expired, "held": len(self.claims.held)}


class ClaimingResponseCache(ShardedResponseCache):
    """A worker's response cache that claims a key it misses (``ClaimingStore.claim``): it either
    reads the reply another worker paid for or sends the request itself, never both."""

    def __init__(self, shard: str, mode: str, remote: Remote, flush_every: int, *, node: str = "",
                 renew_every: float = CLAIM_RENEW):
        super().__init__(shard, mode, remote, flush_every)
        self.holder = Holder(uuid.uuid4().hex, node, os.getpid())
        self.renew_every = float(renew_every)
        self._claimed: set[str] = set()
        self._claimed_lock = threading.Lock()
        self._renewer: Optional[threading.Thread] = None
        self._stop = threading.Event()

    def get(self, key: str) -> Optional[tuple[str, dict[str, int], float]]:
        hit = ResponseCache.get(self, key)  # the shard alone, not yet the run's cache
        if hit is not None or self.mode in ("off", "refresh"):
            return hit
        if self.mode == "ro":  # never sends: nothing to claim
            return super().get(key)
        while True:
            row, mine = self.remote.claim(key, self.holder)  # type: ignore[attr-defined]
            if row is not None:
                self._keep(row)
                return row[2], json.loads(row[3]), float(row[5] or 0.0)
            if mine:
                with self._claimed_lock:
                    self._claimed.add(key)
                self._start_renewing()
                return None

    def _keep(self, row: ResponseRow) -> None:
        # In the shard (not as a new entry: the run's cache has it) for the task's next lookup.
        self._conn().execute("INSERT OR IGNORE INTO responses (key, request, response, usage, created, latency)"
                             " VALUES (?,?,?,?,?,?)", row)

    def put(self, key: str, request: dict[str, Any], response: str, usage: dict[str, int], latency: float = 0.0):
        with self._claimed_lock:
            claimed = key in self._claimed
            self._claimed.discard(key)
        if not claimed:
            super().put(key, request, response, usage, latency)
            return
        ResponseCache.put(self, key, request, response, usage, latency)  # the shard
        row = (key, json.dumps(request, ensure_ascii=False), response, json.dumps(usage), time.time(), latency)
        # Merged now: the workers waiting on this key read it the moment it is in; the merge ends the claim.
        self.remote.put_many([row], self.holder.id)  # type: ignore[call-arg]
        self.flushed += 1

    def give_up(self, key: str) -> None:
        """The request of a claimed key failed (or was interrupted): a waiter may send it itself."""
        with self._claimed_lock:
            if key not in self._claimed:
                return
            self._claimed.discard(key)
        self.remote.release([key], self.holder.id)  # type: ignore[attr-defined]

    def _start_renewing(self) -> None:
        with self._claimed_lock:
            if self._renewer is not None:
                return
            self._renewer = threading.Thread(target=self._renew, daemon=True, name="claim-renewer")
        self._renewer.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_every):
            with self._claimed_lock:
                keys = sorted(self._claimed)
            if keys:
                try:
                    self.remote.renew(keys, self.holder.id)  # type: ignore[attr-defined]
                except Exception:  # noqa: BLE001 - the store gone (the run ended): nothing to renew
                    return

    def close(self) -> None:
        self._stop.set()
        with self._claimed_lock:
            keys, self._claimed = sorted(self._claimed), set()
        if keys:
            self.remote.release(keys, self.holder.id)  # type: ignore[attr-defined]
        super().close()

