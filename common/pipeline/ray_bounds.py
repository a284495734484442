"""The endpoints' bounds across a Ray cluster: one lease actor per endpoint.

Each endpoint has an actor holding ``bound`` leases; a worker's pool takes one for each request
attempt besides its own per-process bound, so however many workers run, no endpoint has more
than its bound of requests in flight. A lease whose holder process died (a killed worker on the
driver's node) is taken back at once; any other expires after the role's timeout (the request it
covered has timed out by then).
"""
from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections import defaultdict
from typing import Any, Optional

from common.core.cache_claims import process_alive
from common.core.config import ROLES, Config
from common.core.endpoints import EndpointPool, EndpointSpec
from common.core.llm import EndpointNotConfigured, resolve_endpoints


class Leases:
    """``bound`` leases of one endpoint (the body of its actor; plain Python for the tests)."""

    def __init__(self, bound: int, node: str = ""):
        self.bound, self.node = int(bound), node
        self.held: dict[str, tuple[float, str, int]] = {}  # lease -> (expiry, node, pid)
        self.peak = 0

    def _reclaim(self) -> None:
        now = time.monotonic()
        for lease, (expiry, node, pid) in list(self.held.items()):
            if expiry < now or (node == self.node and not process_alive(pid)):
                del self.held[lease]

    def try_take(self, seconds: float, node: str, pid: int) -> Optional[str]:
        self._reclaim()
        if len(self.held) >= self.bound:
            return None
        lease = uuid.uuid4().hex
        self.held[lease] = (time.monotonic() + seconds, node, pid)
        self.peak = max(self.peak, len(self.held))
        return lease

    def give_back(self, lease: str) -> None:
        self.held.pop(lease, None)


class _BoundActor:
    """One endpoint's leases as an async actor: a waiting worker does not hold up the others."""

    def __init__(self, bound: int, node: str):
        self.leases = Leases(bound, node)
        self.freed: Optional[asyncio.Event] = None

    async def take(self, seconds: float, node: str, pid: int) -> str:
        if self.freed is None:
            self.freed = asyncio.Event()
        while True:
            lease = self.leases.try_take(seconds, node, pid)
            if lease is not None:
                return lease
            self.freed.clear()
            try:  # woken by a release, or soon after to take back leases of dead holders
                await asyncio.wait_for(self.freed.wait(), timeout=0.2)
            except asyncio.TimeoutError:
                pass

    async def give_back(self, lease: str) -> None:
        self.leases.give_back(lease)
        if self.freed is not None:
            self.freed.set()

    async def peak(self) -> int:
        return self.leases.peak


class SharedBoundPool(EndpointPool):
    """An endpoint pool that also holds one of the endpoint's cluster-wide leases per request.

    In a pool of one endpoint, a request that ends keeps its lease for this worker's next request
    (at most ``REUSE`` times in a row) and a lease nobody here took within ``IDLE`` seconds goes
    back to the actor: a busy worker does not pay the actor's round trip per request, an idle one
    holds nothing for long, and the bound counts the same leases.
    """

    REUSE = 16
    IDLE = 0.02

    def __init__(self, specs: tuple[EndpointSpec, ...], default_concurrency: int, *, cooldown: float,
                 bounds: dict[str, Any], lease_seconds: float):
        super().__init__(specs, default_concurrency, cooldown=cooldown)
        # A passed-on lease lives through up to REUSE requests: its expiry covers all of them.
        self.shared, self.lease_seconds = bounds, lease_seconds * (self.REUSE + 1)
        self._held: dict[tuple[int, str], list[tuple[str, int]]] = defaultdict(list)  # (thread, url) -> leases
        self._idle: dict[str, list[tuple[str, int, float]]] = defaultdict(list)  # url -> (lease, uses, since)
        self._leases_lock = threading.Lock()
        self._reaper: Optional[threading.Thread] = None

    def acquire(self) -> str:
        url = super().acquire()
        actor = self.shared.get(url)
        if actor is None:
            return url
        with self._leases_lock:
            kept = self._idle[url].pop() if self._idle[url] else None
        if kept is not None:
            passed = (kept[0], kept[1])
        else:
            import ray
            passed = (ray.get(actor.take.remote(self.lease_seconds, ray.get_runtime_context().get_node_id(),
                                                os.getpid())), 0)
        with self._leases_lock:
            self._held[(threading.get_ident(), url)].append(passed)
        return url

    def release(self, url: str, *, ok: bool, connection_error: bool = False) -> None:
        actor = self.shared.get(url)
        if actor is not None:
            with self._leases_lock:
                lease, uses = self._held[(threading.get_ident(), url)].pop()
                keep = len(self.urls) == 1 and uses + 1 < self.REUSE
                if keep:
                    self._idle[url].append((lease, uses + 1, time.monotonic()))
                    if self._reaper is None:
                        self._reaper = threading.Thread(target=self._give_back_idle, daemon=True,
                                                        name="lease-reaper")
                        self._reaper.start()
            if not keep:
                actor.give_back.remote(lease)  # no wait: the actor frees it in arrival order
        super().release(url, ok=ok, connection_error=connection_error)

    def _give_back_idle(self) -> None:
        while True:
            time.sleep(self.IDLE / 2)
            now = time.monotonic()
            with self._leases_lock:
                stale = [(url, lease) for url, kept in self._idle.items() for lease, _, since in kept
                         if now - since >= self.IDLE]
                for url in self._idle:
                    self._idle[url] = [k for k in self._idle[url] if now - k[2] < self.IDLE]
            for url, lease in stale:
                self.shared[url].give_back.remote(lease)


def bound_actors(ray: Any, cfg: Config, node: str) -> dict[str, Any]:
    """One lease actor per endpoint of every configured role, on the driver's node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    actor_cls = ray.remote(num_cpus=0)(_BoundActor)
    out: dict[str, Any] = {}
    for role in ROLES:
        try:
            specs, _ = resolve_endpoints(cfg.role(role))
        except (EndpointNotConfigured, ValueError, KeyError):
            continue
        for spec in specs:
            if spec.url not in out:
                bound = max(1, spec.concurrency or cfg.llm.concurrency)
                out[spec.url] = actor_cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(bound, node)
    return out
