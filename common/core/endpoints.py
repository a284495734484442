"""Several OpenAI-compatible endpoints serving one role: which one gets the next request.

A role's ``base_url`` may name one endpoint or a list of them (replicas of the same model, e.g.
several vLLM servers); ``$OPENAI_BASE_URLS`` (comma-separated) does the same from the
environment. ``EndpointPool`` hands each request to the endpoint with the fewest requests in
flight, never more than that endpoint's own bound at once, and sets an endpoint aside for
``cooldown`` seconds when a request to it fails with a connection error (server down, port
closed), so the retry of that request, and every later one, goes elsewhere.

Which endpoint answered is not part of the cache key: replicas serve the same model under the
same name, so the pool is named in the key by its FIRST endpoint (``EndpointPool.identity``).
A run that grows from one server to several (the first one listed first) keeps its cache.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional, Union


@dataclass(frozen=True)
class EndpointSpec:
    """One endpoint of a role: its URL and how many requests it may have in flight (None: the
    client's ``llm.concurrency``)."""

    url: str
    concurrency: Optional[int] = None


BaseUrl = Union[str, tuple[EndpointSpec, ...], None]


def parse_endpoints(value: Any, where: str) -> tuple[EndpointSpec, ...]:
    """A config value (a URL, or a list of URLs and ``{url, concurrency}`` mappings) as specs.

    Raises ``ValueError`` naming ``where`` (``models.<role>.base_url[i]``) for anything else.
    """
    if isinstance(value, EndpointSpec):
        return (value,)
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"{where}: expected a URL or a non-empty list of URLs, got {value!r}")
    out = []
    for i, item in enumerate(items):
        at = f"{where}[{i}]" if not isinstance(value, str) else where
        if isinstance(item, EndpointSpec):
            out.append(item)
            continue
        if isinstance(item, dict):
            unknown = set(item) - {"url", "concurrency"}
            if unknown:
                raise ValueError(f"{at}: unknown field(s) {sorted(unknown)} (valid: url, concurrency)")
            url, conc = item.get("url"), item.get("concurrency")
        else:
            url, conc = item, None
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"{at}: expected a URL like http://host:8000/v1, got {item!r}")
        if conc is not None and (not isinstance(conc, int) or isinstance(conc, bool) or conc < 1):
            raise ValueError(f"{at}.concurrency: must be an integer >= 1, got {conc!r}")
        out.append(EndpointSpec(url.strip().rstrip("/"), conc))
    urls = [e.url for e in out]
    dup = sorted({u for u in urls if urls.count(u) > 1})
    if dup:
        raise ValueError(f"{where}: endpoint listed twice: {dup[0]}")
    return tuple(out)


def split_env(value: str) -> list[str]:
    """``$OPENAI_BASE_URLS``: comma-separated URLs (blanks ignored)."""
    return [u.strip() for u in value.split(",") if u.strip()]


class QueueAbandoned(RuntimeError):
    """A request that was still waiting for a free slot when its stage stopped (Ctrl-C): never sent."""


class EndpointPool:
    """Least-in-flight choice among endpoints, each with its own bound; failing ones set aside.

    ``acquire`` blocks while every usable endpoint is at its bound. An endpoint set aside is not
    chosen until its cooldown has passed, unless every endpoint is set aside: then the one set aside
    longest ago is tried (the caller's retry backoff paces those attempts), so a pool of one
    behaves exactly like a single endpoint.
    """

    def __init__(self, specs: tuple[EndpointSpec, ...], default_concurrency: int, *, cooldown: float = 30.0,
                 clock: Callable[[], float] = time.monotonic):
        if not specs:
            raise ValueError("an endpoint pool needs at least one endpoint")
        self.urls = [s.url for s in specs]
        self.bounds = {s.url: max(1, s.concurrency or default_concurrency) for s in specs}
        self.cooldown = float(cooldown)
        self._clock = clock
        self._cond = threading.Condition()
        self.in_flight: Counter[str] = Counter()
        self.served: Counter[str] = Counter()  # requests answered, per endpoint
        self.connection_failures: Counter[str] = Counter()
        self._aside_until: dict[str, float] = {}
        self._abandon = False  # set while a stopping stage drains: waiting requests give up unsent

    @property
    def identity(self) -> str:
        """The pool's name in the cache key: its first endpoint (see module docstring)."""
        return self.urls[0]

    @property
    def capacity(self) -> int:
        return sum(self.bounds.values())

    def _usable(self) -> list[str]:
        now = self._clock()
        ok = [u for u in self.urls if self._aside_until.get(u, 0.0) <= now]
        if ok:
            return ok
        # Everything is set aside: probe the endpoint whose cooldown ends first.
        return [min(self.urls, key=lambda u: self._aside_until[u])]

    def acquire(self) -> str:
        """The usable endpoint with a free slot and the fewest requests in flight (ties: the first
        listed); the caller must ``release`` it."""
        with self._cond:
            while True:
                if self._abandon:
                    raise QueueAbandoned("the stage stopped while this request waited for a free slot")
                free = [u for u in self._usable() if self.in_flight[u] < self.bounds[u]]
                if free:
                    url = min(free, key=lambda u: self.in_flight[u])
                    self.in_flight[url] += 1
                    return url
                # Wake up at the latest when a cooldown ends, which may free a new endpoint.
                self._cond.wait(timeout=0.05)

    def abandon_waiters(self, on: bool) -> None:
        """While on, ``acquire`` raises ``QueueAbandoned`` instead of waiting or taking a slot: a stage
        stopped by Ctrl-C lets the requests in flight finish (paid, cached) and sends no new one."""
        with self._cond:
            self._abandon = on
            self._cond.notify_all()

    def release(self, url: str, *, ok: bool, connection_error: bool = False) -> None:
        with self._cond:
            self.in_flight[url] -= 1
            if ok:
                self.served[url] += 1
            if connection_error:
                self.connection_failures[url] += 1
                self._aside_until[url] = self._clock() + self.cooldown
            self._cond.notify_all()

    def set_aside(self) -> dict[str, float]:
        """Endpoints currently set aside -> seconds until they are used again."""
        now = self._clock()
        with self._cond:
            return {u: round(t - now, 3) for u, t in self._aside_until.items() if t > now}

    def summary(self) -> dict[str, Any]:
        with self._cond:
            return {u: {"served": self.served[u], "connection_failures": self.connection_failures[u],
                        "bound": self.bounds[u]} for u in self.urls}


def cause_hint(cause: str, url: str = "") -> str:
    """What to try when calls fail with ``cause`` (``LLMCallError.cause``: ``http_404``, ``connection``,
    ...) against ``url``: a stage that stops on its error rate and ``make doctor`` say the same."""
    from urllib.parse import urlsplit

    path = urlsplit(url).path.rstrip("/") if url else ""
    if cause == "http_404":
        if url and not path.endswith("/v1"):
            return (f"the base URL {url} has no /v1 (OpenAI-compatible servers answer at /v1/chat/completions): "
                    f"try {url.rstrip('/')}/v1")
        return "the server does not know this model or path: check the model name (make doctor lists the models)"
    if cause in ("http_401", "http_403"):
        return "the key was refused: check OPENAI_API_KEY"
    if cause == "http_429":
        return "rate limited: lower llm.concurrency, or run again later (only the failed rows are redone)"
    if cause == "connection":
        return f"nothing answers at {url or 'the base URL'}: is the server running, and is the port right?"
    if cause == "timeout":
        return "the calls timed out: raise models.<role>.timeout or lower llm.concurrency"
    if cause.startswith("http_5"):
        return "the server failed: look at its log; run again to redo only the failed rows"
    if cause in ("bad_response", "invalid_json", "judge_parse_error"):
        return "the replies were not what the stage asked for: check the model with make doctor (JSON mode)"
    return ""
