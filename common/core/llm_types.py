"""What an LLM call is and what it gives back: a role's resolved settings, the completion, the
per-role counters, the retry policy and the errors a call raises; and where a role's endpoint is.

Split from ``common.core.llm`` (which re-exports every name) so that code which only reads these
records (stages, the ledger, the doctor) does not depend on the client; none of it imports the SDK.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional

from common.core.endpoints import BaseUrl, EndpointSpec, parse_endpoints, split_env

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"


class EndpointNotConfigured(RuntimeError):
    """No endpoint for a role: raised before any work starts."""


class BadResponse(Exception):
    """An HTTP 200 that carries no usable completion: a body that is not JSON (cut off by a
    proxy, an HTML error page) or a completion without choices. Retried like a 5xx, never cached."""


class LLMCallError(RuntimeError):
    """A call failed after its retries (or failed fast). ``cause`` names the failure class."""

    def __init__(self, message: str, cause: str):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class RoleSettings:
    """Resolved settings of one role (partition, extract, plan, answer, judge, ...)."""

    role: str
    model: str
    base_url: BaseUrl = None  # one URL, or replicas of the same model (``EndpointSpec``s)
    temperature: Optional[float] = 0.0  # None: not sent (REALTALK's official client sends none)
    seed: Optional[int] = 42
    max_tokens: Optional[int] = None
    top_p: Optional[float] = None
    timeout: float = 120.0
    json_mode: bool = True  # send response_format={"type": "json_object"} for JSON prompts
    extra_body: dict[str, Any] = field(default_factory=dict)  # e.g. vLLM chat_template_kwargs


@dataclass
class Completion:
    text: str
    cache_key: str
    cached: bool
    model: str
    usage: dict[str, int]
    latency: float
    batch: bool = False  # answered through the Batch API in this run (priced at the batch rate)
    # The reply's tool calls (OpenAI wire format) when the request offered ``tools``.
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # The reply's ``choices[0].logprobs`` (wire format) when the request asked for ``logprobs``.
    logprobs: Optional[dict[str, Any]] = None

    def record(self, prompt_id: str) -> dict[str, Any]:
        """The audit entry stored in artifact rows (no text: that is in the cache)."""
        entry = {
            "prompt_id": prompt_id,
            "model": self.model,
            "cache_key": self.cache_key,
            "cached": self.cached,
            "usage": self.usage,
            "latency": round(self.latency, 4),
        }
        if self.batch:
            entry["batch"] = True
        return entry


def resolve_endpoints(settings: RoleSettings) -> tuple[tuple[EndpointSpec, ...], str]:
    """Return (endpoints, api_key) for a role or raise ``EndpointNotConfigured``.

    Order: the role's ``base_url`` (config), ``$OPENAI_BASE_URLS``, ``$OPENAI_BASE_URL``, then
    OpenAI itself when ``$OPENAI_API_KEY`` is set.
    """
    key = os.environ.get("OPENAI_API_KEY", "")
    base: Any = settings.base_url or split_env(os.environ.get("OPENAI_BASE_URLS", "")) \
        or os.environ.get("OPENAI_BASE_URL", "")
    where = f"models.{settings.role}.base_url" if settings.base_url else "OPENAI_BASE_URL(S)"
    if not base and key:
        base = OPENAI_DEFAULT_BASE_URL
    if not base:
        raise EndpointNotConfigured(
            f"no LLM endpoint for role '{settings.role}': export OPENAI_API_KEY (OpenAI) or "
            "OPENAI_BASE_URL=http://host:port/v1 (vLLM, Ollama, llama.cpp; OPENAI_BASE_URLS=url1,url2 "
            f"for replicas), or set models.{settings.role}.base_url in the config"
        )
    # Local servers accept any key; the SDK insists on a non-empty one.
    return parse_endpoints(base, where), key or "EMPTY"


def resolve_endpoint(settings: RoleSettings) -> tuple[str, str]:
    """Return (base_url, api_key) for a role or raise ``EndpointNotConfigured``; for several
    endpoints, the first: the name of the pool in the cache key."""
    specs, key = resolve_endpoints(settings)
    return specs[0].url, key


@dataclass
class CallStats:
    """Per-role counters, reported at the end of each stage and stored in its manifest."""

    calls: int = 0
    cached: int = 0
    failed: int = 0
    retries: int = 0
    batch: int = 0  # calls answered through the Batch API
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)
        pick = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 4)) if lat else None
        return {
            "calls": self.calls,
            "cached": self.cached,
            "new": self.calls - self.cached - self.failed,
            "failed": self.failed,
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_mean": round(sum(lat) / len(lat), 4) if lat else None,
            "latency_p50": pick(0.5) if pick else None,
            "latency_p95": pick(0.95) if pick else None,
            "failures": dict(self.failures),
            **({"batch": self.batch} if self.batch else {}),
        }


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    initial_wait: float = 1.0
    max_wait: float = 30.0
