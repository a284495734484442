"""Before the first row: every endpoint a run will call answers at all.

Without this, a run against a server that is not up (a typo in the port, vLLM still loading)
retries every row's call until its retry budget is spent, which takes minutes, and then stops on
its error rate. One cheap request per endpoint (``GET /v1/models``, through the SDK, no cache, no
retries: ``common.core.llm.EndpointProbe``, as ``make doctor`` sends) tells a dead endpoint apart
at once. Only "no answer at all" fails here (cannot connect, timed out): an endpoint that answers
anything, even an HTTP error (some servers do not list models), is up, and its calls' own errors
are reported by the stages as before. ``make doctor`` checks much more (the model, JSON mode, seed).

Each endpoint URL is checked once per process: the whole pipeline in one process (``make locomo``)
checks before its first stage and never again.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable, Optional
from urllib.parse import urlsplit, urlunsplit

from common.core.llm import EndpointNotConfigured, EndpointProbe, RoleSettings, resolve_endpoints

# A probe is one tiny GET: a live server answers it in well under a second; a loaded one may be slow.
PROBE_TIMEOUT = 15.0
_answered: set[str] = set()  # URLs that answered in this process (a dead one is asked again next time)
_lock = threading.Lock()


class EndpointUnreachable(EndpointNotConfigured):
    """No endpoint of a role answers: the run stops before its first row, in one line."""


def why_dead(url: str, key: str, timeout: float = PROBE_TIMEOUT) -> Optional[str]:
    """None when ``url`` answers (any HTTP status), else why it does not (one line, key masked)."""
    with _lock:
        if url in _answered:
            return None
    why = EndpointProbe(url, key or "unused", timeout).unreachable()
    if why is None:
        with _lock:
            _answered.add(url)
    return why


def check_reachable(roles: Iterable[str], settings_of: Callable[[str], RoleSettings]) -> None:
    """Raise ``EndpointUnreachable`` when none of a role's endpoints answers (a role with several
    replicas runs as long as one is up: the pool routes around the others)."""
    for role in dict.fromkeys(roles):
        specs, key = resolve_endpoints(settings_of(role))
        reasons = [why for why in (why_dead(s.url, key) for s in specs) if why]
        if len(reasons) == len(specs):
            first = _shown(specs[0].url)
            where = first if len(specs) == 1 else f"{len(specs)} endpoints ({first}, ...)"
            raise EndpointUnreachable(
                f"models.{role}: {where} does not answer ({reasons[0]}); stopped before any row. Start the server "
                f"or fix the URL (OPENAI_BASE_URL or models.{role}.base_url); make doctor checks every endpoint")


def _shown(url: str) -> str:
    """The URL without any user:password in it: a message never carries a secret."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=(parts.hostname or "") + (f":{parts.port}" if parts.port else "")))
