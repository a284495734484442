"""The one LLM client of the harness: the only module that imports ``openai``.

Every chat or embedding call of every stage goes through here, so that caching, retries,
concurrency, token accounting and secret handling are written once:

* Any OpenAI-compatible endpoint (OpenAI, vLLM, SGLang, Ollama, llama.cpp): ``base_url`` per
  role in the config (one URL or a list of replicas), else ``$OPENAI_BASE_URLS`` (comma-separated),
  else ``$OPENAI_BASE_URL``, else OpenAI itself when ``$OPENAI_API_KEY`` is set. The key is read
  from the environment only and never stored anywhere.
* Several endpoints per role (``common.core.endpoints``): each request goes to the endpoint with
  the fewest in flight, within that endpoint's own bound; one failing with connection errors is
  set aside for ``cooldown`` seconds and the request retried elsewhere. The cache key names the
  pool by its first endpoint, so it does not depend on which replica answered.
* A persistent SQLite cache keyed by a hash of everything that changes the output (endpoint,
  model, messages, decoding parameters, response format), so reruns never pay twice; identical
  requests in flight at the same time are sent once (the others wait and read the cache).
* Retries with capped exponential backoff on 408/409/429/5xx, timeouts, connection errors and
  200 replies without a usable completion (``BadResponse``); any other 4xx fails fast. A call
  that still fails raises ``LLMCallError`` whose ``cause`` names the class: ``http_<status>``,
  ``timeout``, ``connection``, ``bad_response`` or ``cache_miss``.
* Every call returns a ``Completion`` carrying the cache key, token usage and latency.
* ``llm.batch``: the calls of the offline roles go through the OpenAI Batch API instead
  (``common.core.batch``): ``map`` runs rows in rounds, queued requests are sent as one batch
  between rounds, and the replies land in the same cache under the same keys.
* A call names the prompt template that produced its messages (``prompt_id``, the file stem in
  ``common/prompts/``); it travels as the HTTP header ``X-Prompt-Id`` for servers and proxies that
  route or log by prompt, and is not part of the request body, so it never changes the cache key.
"""
from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from common.core.batch import Batcher, BatchOptions, Request
from common.core.endpoints import EndpointPool, EndpointSpec, QueueAbandoned
from common.core.lazy import lazy_module

# The client's parts, by concern; every name stays importable from this module.
from common.core.llm_cache import CACHE_VERSION, ResponseCache, cache_key, is_packed, pack_reply, unpack_reply
from common.core.llm_map import ConcurrentMap
from common.core.llm_replies import one_line, parse_json_object, reply_logprobs, reply_text, reply_tool_calls, scrub
from common.core.llm_types import (
    OPENAI_DEFAULT_BASE_URL,
    BadResponse,
    CallStats,
    Completion,
    EndpointNotConfigured,
    LLMCallError,
    RetryPolicy,
    RoleSettings,
    resolve_endpoint,
    resolve_endpoints,
)

if TYPE_CHECKING:
    import openai
else:
    # The SDK takes about a second to import; a stage whose calls are all cached (every rerun, and
    # stages 01/04/06/09) never touches it, so it is imported on first use of one of its names.
    openai = lazy_module("openai")

log = logging.getLogger(__name__)

PROMPT_ID_HEADER = "X-Prompt-Id"  # carries ``complete(prompt_id=...)``; never part of the cache key
T = TypeVar("T")
R = TypeVar("R")


__all__ = [
    "CACHE_VERSION", "OPENAI_DEFAULT_BASE_URL", "PROMPT_ID_HEADER", "BadResponse", "CallStats", "Completion",
    "EndpointNotConfigured", "EndpointProbe", "LLMCallError", "LLMClient", "ResponseCache", "RetryPolicy",
    "RoleSettings", "cache_key", "embed_texts", "failure_cause", "parse_json_object", "resolve_endpoint",
    "resolve_endpoints", "scrub", "system_sdk_client",
]


# --------------------------------------------------------------------------- retries
_RETRY_STATUS = {408, 409, 429}


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError, BadResponse)):
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in _RETRY_STATUS or exc.status_code >= 500
    return False


def _failure_cause(exc: BaseException) -> str:
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, openai.APIConnectionError):
        return "connection"
    if isinstance(exc, openai.APIStatusError):
        return f"http_{exc.status_code}"
    if isinstance(exc, BadResponse):
        return "bad_response"
    return type(exc).__name__


failure_cause = _failure_cause  # the cause names of LLMCallError, for messages outside the client


def _checked(call: Callable[[], R]) -> R:
    """Run one SDK request, turning an unparsable 200 body into a retryable ``BadResponse``.

    The SDK lets ``json.JSONDecodeError`` escape for a cut-off JSON body, which would otherwise
    skip the retries and crash the stage instead of becoming a recorded failure.
    """
    try:
        return call()
    except json.JSONDecodeError as exc:
        raise BadResponse(f"response body is not valid JSON ({exc.msg})") from exc


def _passed(**fields: Any) -> dict[str, Any]:
    """The request fields a caller gave (None = not given: the body, and so the key, stay as before)."""
    return {k: v for k, v in fields.items() if v is not None}


class LLMClient(ConcurrentMap):
    """Chat completions and embeddings for all roles, with cache, retry and stats."""

    def __init__(
        self,
        roles: dict[str, RoleSettings],
        *,
        cache: ResponseCache,
        retry: RetryPolicy = RetryPolicy(),
        concurrency: int = 16,
        cooldown: float = 30.0,
        batch: Optional[BatchOptions] = None,
    ):
        self.roles = roles
        self.cache = cache
        self.retry = retry
        self.concurrency = max(1, int(concurrency))  # default bound of each endpoint
        self.cooldown = float(cooldown)  # seconds an endpoint with connection errors is set aside
        self.stats: dict[str, CallStats] = {}
        self._clients: dict[tuple[str, float], openai.OpenAI] = {}
        # One pool per distinct endpoint list: roles served by the same servers share their bounds.
        self._pools: dict[tuple[EndpointSpec, ...], EndpointPool] = {}
        self._rounds = 0  # > 0 while ``map`` runs rows in rounds (batch roles defer their calls)
        self.batcher = Batcher(
            batch, sdk=self._batch_sdk, call=self._retrying,
            store=lambda key, request, text, usage: self.cache.put(key, request, text, usage, 0.0),
        ) if batch and batch.roles else None
        self._lock = threading.Lock()
        self._inflight: dict[str, list[Any]] = {}  # cache key -> [lock, waiters]

    # ---- setup
    def check_endpoints(self, roles: Iterable[str]) -> None:
        """Fail at once, with one line, when a role needed by the stage has no endpoint."""
        for role in roles:
            resolve_endpoint(self.settings(role))

    def settings(self, role: str) -> RoleSettings:
        try:
            return self.roles[role]
        except KeyError:
            raise KeyError(f"no model configured for role '{role}' (models.{role})") from None

    def _client(self, base_url: str, api_key: str, timeout: float) -> openai.OpenAI:
        with self._lock:
            cli = self._clients.get((base_url, timeout))
            if cli is None:
                # SDK retries off: the policy below is the single source of retry behaviour.
                cli = openai.OpenAI(
                    base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
                )
                self._clients[(base_url, timeout)] = cli
            return cli

    def pool(self, role: str) -> tuple[EndpointPool, str]:
        """The endpoint pool of a role and the API key (``EndpointNotConfigured`` if none)."""
        specs, key = resolve_endpoints(self.settings(role))
        with self._lock:
            pool = self._pools.get(specs)
            if pool is None:
                pool = self._pools[specs] = self.new_pool(specs)
            return pool, key

    def new_pool(self, specs: tuple[EndpointSpec, ...]) -> EndpointPool:
        """The pool of one endpoint list (the Ray executor's workers add the cluster-wide bound)."""
        return EndpointPool(specs, self.concurrency, cooldown=self.cooldown)

    def _batch_sdk(self, role: str, url: str) -> openai.OpenAI:
        _, key = self.pool(role)
        return self._client(url, key, self.settings(role).timeout)

    def _retrying(self, fn: Callable[[], R]) -> R:
        """One Batch/Files API call with the retry policy; a final failure is an ``LLMCallError``
        (the stage stops with one line; a rerun re-attaches to what was submitted)."""
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_is_retryable), stop=stop_after_attempt(self.retry.max_attempts),
                wait=wait_exponential_jitter(multiplier=self.retry.initial_wait, max=self.retry.max_wait,
                                             jitter=self.retry.initial_wait),
                reraise=True,
            ):
                with attempt:
                    return _checked(fn)
        except (openai.OpenAIError, BadResponse) as exc:
            cause = _failure_cause(exc)
            secret = os.environ.get("OPENAI_API_KEY", "")
            raise LLMCallError(scrub(f"batch API call failed ({cause}): {one_line(exc)}", secret), cause) from None
        raise AssertionError("unreachable: tenacity reraises")

    def abandon_waiters(self, on: bool) -> None:
        """Every pool's requests still waiting for a slot give up (``EndpointPool.abandon_waiters``)."""
        with self._lock:
            pools = list(self._pools.values())
        for pool in pools:
            pool.abandon_waiters(on)

    def workers(self) -> int:
        """Requests ``map`` keeps in flight: enough to fill the largest pool of any configured role."""
        most = self.concurrency
        for role in self.roles:
            try:
                most = max(most, self.pool(role)[0].capacity)
            except (EndpointNotConfigured, ValueError):
                continue
        return most

    def _stat(self, role: str) -> CallStats:
        with self._lock:
            return self.stats.setdefault(role, CallStats())

    # ---- chat
    @staticmethod
    def request_body(settings: RoleSettings, messages: list[dict[str, str]], json_mode: bool) -> dict[str, Any]:
        """The chat request a role's settings make (also what ``make doctor`` probes an endpoint with)."""
        body: dict[str, Any] = {"model": settings.model, "messages": messages}
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.seed is not None:
            body["seed"] = settings.seed
        if settings.max_tokens is not None:
            body["max_tokens"] = settings.max_tokens
        if settings.top_p is not None:
            body["top_p"] = settings.top_p
        if json_mode and settings.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    def complete(
        self,
        role: str,
        messages: list[dict[str, str]],
        *,
        json_mode: bool = False,
        max_tokens: Optional[int] = None,
        prompt_id: Optional[str] = None,
        repeat: int = 0,
        response_format: Optional[dict[str, Any]] = None,
        tools: Optional[list[dict[str, Any]]] = None,
        tool_choice: Any = None,
        logprobs: Optional[bool] = None,
        top_logprobs: Optional[int] = None,
        logit_bias: Optional[dict[str, Any]] = None,
    ) -> Completion:
        """One chat completion, served from the cache when the same request was made before.

        ``prompt_id`` is the id of the template that produced ``messages`` (``prompts.fill``'s
        first argument; the repair template's id for a repair call). It is sent as the
        ``X-Prompt-Id`` header (none when None) and is not in the cache key: two calls that differ
        only in ``prompt_id`` share one cache entry. Every harness call site passes it.

        ``repeat`` = i > 0 asks the same request an i-th independent time (repeated judging): the
        seed becomes seed + i where one is set, and i enters the cache key, so an endpoint that
        ignores seeds still gets N distinct cached calls. Repeat 0 is the ordinary call (its key
        is unchanged, so existing caches stay valid).

        ``response_format`` (e.g. a ``json_schema``), ``tools`` and ``tool_choice`` are sent as
        given (the gateway forwards an outside system's requests): they replace ``json_mode``'s
        format and enter the cache key; a reply's tool calls are in ``Completion.tool_calls``.
        ``logprobs``, ``top_logprobs`` and ``logit_bias`` likewise (only when given: other keys
        stay as they were); the reply's logprobs are cached with it (``Completion.logprobs``).
        """
        settings = self.settings(role)
        if max_tokens is not None and settings.max_tokens is None:
            settings = _replace(settings, max_tokens=max_tokens)
        if repeat and settings.seed is not None:
            settings = _replace(settings, seed=settings.seed + repeat)
        pool, api_key = self.pool(role)
        base_url = pool.identity  # not the endpoint that will answer: see common.core.endpoints
        body = self.request_body(settings, messages, json_mode)
        body.update(_passed(response_format=response_format, tools=tools or None, tool_choice=tool_choice,
                            logprobs=logprobs or None, top_logprobs=top_logprobs, logit_bias=logit_bias or None))
        extra = dict(settings.extra_body)
        key = cache_key({"base_url": base_url, **body, "extra_body": extra, **({"repeat": repeat} if repeat else {})})
        stat = self._stat(role)
        with self._lock:
            stat.calls += 1
        headers = {PROMPT_ID_HEADER: prompt_id} if prompt_id else None  # not in ``key``
        # A request with tools or logprobs is never batched (the batch stores a reply's text only).
        if self.batcher and role in self.batcher.roles and self._rounds and self.cache.mode != "ro" \
                and not is_packed(body):
            done = self._from_batch(role, settings, key, stat)
            if done is not None:
                return done
            hit = self.cache.get(key)
            if hit is None and key not in self.batcher.live:
                with self._lock:
                    stat.calls -= 1  # counted when the batch has answered and the row runs again
                self.batcher.defer(Request(role, key, prompt_id, base_url, {**body, **extra},
                                           {"base_url": base_url, **body}))
        # Identical requests in flight at once (two questions with the same prompt, a stage and
        # a rerun sharing a cache) wait for the first: it is paid once, the others hit the cache.
        with self._single_flight(key):
            return self._complete_locked(role, settings, pool, api_key, body, extra, key, stat, headers)

    @contextmanager
    def _single_flight(self, key: str) -> Iterator[None]:
        with self._lock:
            entry = self._inflight.setdefault(key, [threading.Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._inflight[key]

    def _complete_locked(
        self, role: str, settings: RoleSettings, pool: EndpointPool, api_key: str,
        body: dict[str, Any], extra: dict[str, Any], key: str, stat: "CallStats",
        headers: Optional[dict[str, str]] = None,
    ) -> Completion:
        hit = self.cache.get(key)
        if hit is not None:
            with self._lock:
                stat.cached += 1
            # A cache hit reports the ORIGINAL call's latency (flagged cached): online-efficiency
            # tables stay meaningful when a run is rebuilt from the cache.
            text, calls, lp = unpack_reply(hit[0], is_packed(body))
            return Completion(text, key, True, settings.model, hit[1], hit[2], tool_calls=calls, logprobs=lp)
        if self.cache.mode == "ro":
            with self._lock:
                stat.failed += 1
                stat.failures["cache_miss"] = stat.failures.get("cache_miss", 0) + 1
            raise LLMCallError(f"cache miss in read-only mode (role {role})", "cache_miss")
        base_url = pool.identity
        t0 = time.perf_counter()
        # Seconds spent waiting for a free slot (the map runs a few more rows than the bound, so a
        # freed slot is taken at once): not the endpoint's latency, which the cache keeps.
        queued = [0.0]

        def _count_retry(state: RetryCallState) -> None:
            with self._lock:
                stat.retries += 1
            log.debug("retrying %s after %s", role,
                      scrub(str(state.outcome.exception()), api_key) if state.outcome else "")

        try:
            for attempt in Retrying(
                retry=retry_if_exception(_is_retryable),
                stop=stop_after_attempt(self.retry.max_attempts),
                wait=wait_exponential_jitter(
                    multiplier=self.retry.initial_wait, max=self.retry.max_wait, jitter=self.retry.initial_wait
                ),
                before_sleep=_count_retry,
                reraise=True,
            ):
                with attempt:
                    resp, text = self._send(pool, api_key, settings.timeout, body, extra, headers, queued)
        except QueueAbandoned:
            with self._lock:
                stat.calls -= 1  # never sent: neither paid nor failed
            raise
        except (openai.OpenAIError, BadResponse) as exc:
            cause = _failure_cause(exc)
            with self._lock:
                stat.failed += 1
                stat.failures[cause] = stat.failures.get(cause, 0) + 1
            # The message ends up in artifact rows and logs; a server may echo the key it was sent.
            raise LLMCallError(scrub(f"{role} call failed ({cause}): {one_line(exc)}", api_key), cause) from None
        latency = time.perf_counter() - t0 - queued[0]
        usage = {
            "prompt_tokens": getattr(resp.usage, "prompt_tokens", 0) or 0,
            "completion_tokens": getattr(resp.usage, "completion_tokens", 0) or 0,
        }
        with self._lock:
            stat.prompt_tokens += usage["prompt_tokens"]
            stat.completion_tokens += usage["completion_tokens"]
            stat.latencies.append(latency)
        calls = reply_tool_calls(resp) if "tools" in body else []
        lp = reply_logprobs(resp) if "logprobs" in body else None
        self.cache.put(key, {"base_url": base_url, **body}, pack_reply(text, calls, lp) if is_packed(body) else text,
                       usage, latency)
        return Completion(text, key, False, settings.model, usage, latency, tool_calls=calls, logprobs=lp)

    def _from_batch(self, role: str, settings: RoleSettings, key: str, stat: CallStats) -> Optional[Completion]:
        """This run's batch outcome of a request: its reply (paid, at the batch rate), or its failure."""
        assert self.batcher is not None
        result = self.batcher.results.get(key)
        if result is not None:
            with self._lock:
                stat.batch += 1
                stat.prompt_tokens += result.usage.get("prompt_tokens", 0)
                stat.completion_tokens += result.usage.get("completion_tokens", 0)
            # Latency 0: a batch reply's wait says nothing about the model (the ledger leaves it out).
            return Completion(result.text, key, False, settings.model, result.usage, 0.0, batch=True)
        failure = self.batcher.failures.get(key)
        if failure is not None:
            with self._lock:
                stat.failed += 1
                stat.failures[failure[0]] = stat.failures.get(failure[0], 0) + 1
            message = scrub(f"{role} call failed in a batch ({failure[0]}): {failure[1]}", self.pool(role)[1])
            raise LLMCallError(message, failure[0])
        return None

    def _send(self, pool: EndpointPool, api_key: str, timeout: float, body: dict[str, Any],
              extra: dict[str, Any], headers: Optional[dict[str, str]],
              queued: Optional[list[float]] = None) -> tuple[Any, str]:
        """One attempt on the pool's least-busy endpoint; a connection error sets it aside, so the
        retry of this request (and every other request meanwhile) goes to another endpoint.
        ``queued[0]`` gains the seconds this attempt waited for a free slot."""
        t0 = time.perf_counter()
        url = pool.acquire()
        if queued is not None:
            queued[0] += time.perf_counter() - t0
        ok = refused = False
        try:
            client = self._client(url, api_key, timeout)
            resp = _checked(lambda: client.chat.completions.create(
                **body, extra_body=extra or None, extra_headers=headers))
            text = reply_text(resp)
            ok = True
            return resp, text
        except openai.APIConnectionError as exc:
            # A timeout is a slow answer, not a dead server: only refused/reset connections count.
            refused = not isinstance(exc, openai.APITimeoutError)
            raise
        finally:
            pool.release(url, ok=ok, connection_error=refused)

    def endpoint_summary(self) -> dict[str, Any]:
        """Per endpoint of every pool with more than one: requests served, connection failures, bound."""
        with self._lock:
            pools = list(self._pools.values())
        return {u: v for p in pools if len(p.urls) > 1 for u, v in p.summary().items()}

    # ---- concurrency
    def summary(self) -> dict[str, Any]:
        out = {role: s.summary() for role, s in sorted(self.stats.items())}
        for role, entry in out.items():
            try:
                pool = self.pool(role)[0]
            except (EndpointNotConfigured, KeyError, ValueError):
                continue
            if len(pool.urls) > 1:  # which replica served how many (manifests of pooled runs)
                entry["endpoints"] = pool.summary()
            if self.batcher and self.batcher.summary(role):
                entry["batches"] = self.batcher.summary(role)
        return out


@functools.lru_cache(maxsize=8)
def _embedding_client(url: str, key: str, timeout: float) -> openai.OpenAI:
    # Building a client costs ~25 ms (its SSL context): stage 06 embeds per question.
    return openai.OpenAI(base_url=url, api_key=key, timeout=timeout, max_retries=0)


def system_sdk_client(base_url: str, api_key: str) -> openai.OpenAI:
    """A bare SDK client for an outside system's own calls (SimpleMem's LLM client and embedder),
    pointed at the gateway, which caches, retries and counts them: so no retries here."""
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)


def embed_texts(
    texts: list[str], *, model: str, base_url: Optional[str], timeout: float = 120.0,
    retry: RetryPolicy = RetryPolicy(),
) -> list[list[float]]:
    """Embeddings from an OpenAI-compatible ``/v1/embeddings`` endpoint (retried like chat).

    A batch that still fails raises ``LLMCallError`` (one line, key masked), like a chat call.
    """
    settings = RoleSettings(role="embedding", model=model, base_url=base_url, timeout=timeout)
    url, key = resolve_endpoint(settings)
    client = _embedding_client(url, key, timeout)
    out: list[list[float]] = []
    for start in range(0, len(texts), 256):
        batch = texts[start : start + 256]
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_is_retryable),
                stop=stop_after_attempt(retry.max_attempts),
                wait=wait_exponential_jitter(multiplier=retry.initial_wait, max=retry.max_wait,
                                             jitter=retry.initial_wait),
                reraise=True,
            ):
                with attempt:
                    # The lambda runs at once inside this attempt, so it sees this batch.
                    resp = _checked(lambda: client.embeddings.create(model=model, input=batch))  # noqa: B023
                    data = getattr(resp, "data", None)
                    if not isinstance(data, list):
                        raise BadResponse(f"response is not an embedding list: {type(resp).__name__}")
        except (openai.OpenAIError, BadResponse) as exc:
            cause = _failure_cause(exc)
            raise LLMCallError(scrub(f"embedding call failed ({cause}): {one_line(exc)}", key), cause) from None
        assert isinstance(data, list)  # checked inside the attempt that succeeded
        out.extend(d.embedding for d in sorted(data, key=lambda d: d.index))
    return out


# --------------------------------------------------------------------------- endpoint probes
# What a probe call may raise: the SDK's errors, and a 200 whose body is not a chat completion.
def __getattr__(name: str) -> Any:
    # ``PROBE_ERRORS``, computed on use so that importing this module does not import the SDK.
    if name == "PROBE_ERRORS":
        return (openai.OpenAIError, ValueError)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class EndpointProbe:
    """Raw calls to one endpoint for a preflight check (``make doctor``): no cache, no retries.

    A cached or retried reply would say nothing about the endpoint itself, so these bypass
    ``LLMClient``; they still go through the SDK, from this module, like every other call.
    """

    def __init__(self, url: str, key: str, timeout: float):
        self.key = key
        self.sdk = openai.OpenAI(base_url=url, api_key=key, timeout=timeout, max_retries=0)

    def model_ids(self) -> list[str]:
        """The ids ``/v1/models`` lists."""
        return [str(getattr(m, "id", m)) for m in self.sdk.models.list()]

    def unreachable(self) -> Optional[str]:
        """None when the endpoint answers ``GET /models`` at all, else why not (one line): only
        "no answer" counts here (cannot connect, timed out); an HTTP error or an odd body is an
        answer, from a server that is up."""
        try:
            self.sdk.models.list()
        except openai.APIConnectionError as exc:  # timeouts too (APITimeoutError is one)
            return self.describe(exc)[0]
        except Exception:  # noqa: BLE001 - any other failure still came from a live server
            return None
        return None

    def chat(self, body: dict[str, Any], *, prompt_id: str, extra_body: Optional[dict[str, Any]] = None
             ) -> tuple[str, float, dict[str, str]]:
        """(reply text, seconds, rate-limit headers) of one chat call; raises a ``PROBE_ERRORS``."""
        started = time.perf_counter()
        raw = self.sdk.chat.completions.with_raw_response.create(
            **body, extra_body=extra_body or None, extra_headers={PROMPT_ID_HEADER: prompt_id})
        reply = raw.parse()
        seconds = time.perf_counter() - started
        headers = {k.lower(): v for k, v in raw.headers.items() if k.lower().startswith("x-ratelimit-")}
        choices = getattr(reply, "choices", None)
        if not isinstance(choices, list) or not choices or getattr(choices[0], "message", None) is None:
            raise ValueError(f"the reply is not a chat completion: {str(reply)[:60]!r}")
        return choices[0].message.content or "", seconds, headers

    def describe(self, exc: BaseException) -> tuple[str, bool]:
        """(one line, key masked; True when the endpoint refused this request: a 400 or 422)."""
        refused = False
        if isinstance(exc, openai.APIStatusError):
            body = exc.body if isinstance(exc.body, dict) else {}
            message = body.get("message") or (body.get("error") or {}).get("message") or str(exc)
            text = f"HTTP {exc.status_code}: {message}"
            refused = exc.status_code in (400, 422)
        elif isinstance(exc, openai.APITimeoutError):
            text = "timed out"
        elif isinstance(exc, openai.APIConnectionError):
            text = f"cannot connect ({exc.__cause__ or exc})"
        else:
            text = f"{type(exc).__name__}: {exc}"
        return scrub(" ".join(text.split())[:200], self.key), refused


def _replace(settings: RoleSettings, **changes: Any) -> RoleSettings:
    from dataclasses import replace

    return replace(settings, **changes)
