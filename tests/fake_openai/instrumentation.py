"""What the fake server saw: the request log, per-kind counts, in-flight peaks and latencies.

``Instrumentation`` is the base of ``FakeOpenAI``: tests read its attributes straight off the
server (``server.requests``, ``server.counts_by_kind()``, ``server.peak_in_flight["bridge"]``...).
Every list is appended under one lock, in arrival order, and the lists are parallel: entry ``i`` of
``requests``, ``request_kinds`` and ``request_headers`` describe the same request.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from typing import Any, Iterator, Optional


class Instrumentation:
    """Request log and counters of one fake server (see module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.request_kinds: list[str] = []  # parallel to ``requests``
        self.request_headers: list[dict[str, str]] = []  # parallel to ``requests``; names lower-cased
        self.faults_injected: list[tuple[int, str, str]] = []  # (request index, kind, fault)
        # request index -> (HTTP status, text) of chat replies: the message content of a 200, the
        # error body of an HTTP error, None for a broken body. Recorded even if the client gave up.
        self.replies: dict[int, tuple[int, Optional[str]]] = {}
        # prompt kind -> the most requests of that kind answered at the same time (concurrency seen)
        self.peak_in_flight: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()
        # the most chat requests of any kind answered at the same time (an endpoint's bound, seen)
        self.peak_in_flight_total = 0
        # request index -> seconds from arrival to the reply being sent (chat requests that got one)
        self.latencies: dict[int, float] = {}
        # (request index, kind, message) of every scripted reply that would have carried a field its
        # request does not ask for (tests/fake_openai/contract.py); -1 for a batch line. Answered 400.
        self.contract_violations: list[tuple[int, str, str]] = []

    # -- inspection
    @property
    def request_count(self) -> int:
        """Every POST to /chat/completions or /embeddings, faulted or not (GET /models excluded)."""
        with self._lock:
            return len(self.requests)

    def counts_by_kind(self) -> dict[str, int]:
        with self._lock:
            return dict(Counter(self.request_kinds))

    def requests_of_kind(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r, k in zip(self.requests, self.request_kinds) if k == kind]

    def latencies_of_kind(self, kind: str) -> list[float]:
        """Served latencies (seconds) of the requests of one kind, in arrival order."""
        with self._lock:
            return [self.latencies[i] for i, k in enumerate(self.request_kinds) if k == kind and i in self.latencies]

    # -- recording (called from handler threads; the caller holds ``_lock`` where noted)
    def _log_request_locked(self, body: dict[str, Any], kind: str, headers: Optional[dict[str, str]]) -> int:
        """Append one request; the caller holds ``_lock`` (so a fault can be chosen atomically)."""
        index = len(self.requests)
        self.requests.append(body)
        self.request_kinds.append(kind)
        self.request_headers.append(dict(headers or {}))
        return index

    def _log_fault_locked(self, index: int, kind: str, fault: str) -> None:
        self.faults_injected.append((index, kind, fault))

    def _violated(self, index: int, kind: str, message: str) -> None:
        with self._lock:
            self.contract_violations.append((index, kind, message))

    def _reply(self, index: int, status: int, content: Optional[str]) -> None:
        with self._lock:
            self.replies[index] = (status, content)

    def _served(self, index: int, started: float) -> None:
        with self._lock:
            self.latencies[index] = time.perf_counter() - started

    @contextmanager
    def _in_flight_of(self, kind: str) -> Iterator[None]:
        """Count a request of ``kind`` as being answered, keeping the per-kind peak."""
        with self._lock:
            self._in_flight[kind] += 1
            self.peak_in_flight[kind] = max(self.peak_in_flight[kind], self._in_flight[kind])
            self.peak_in_flight_total = max(self.peak_in_flight_total, sum(self._in_flight.values()))
        try:
            yield
        finally:
            with self._lock:
                self._in_flight[kind] -= 1
