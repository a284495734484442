"""The gateway: one local OpenAI-compatible endpoint through which an outside system reaches the
harness's LLM client and embedding model.

An outside system that brings its own OpenAI client (LangMem, Graphiti) is configured with the
gateway's ``base_url`` and ``api_key`` and nothing else. Each request it makes is served by the
harness's tools, so the system is as visible as one that takes ``ctx.llm``:

* ``POST /v1/chat/completions``: ``LLMClient.complete`` of the system's role (``memory``) with
  prompt id ``gateway.<system>``: the disk cache, retries, endpoint pools, call statistics and the
  ledger's call records are the harness's. The request's messages, ``response_format``, ``tools``,
  ``tool_choice``, ``max_tokens``, ``logprobs``, ``top_logprobs`` and ``logit_bias`` are forwarded
  (a reply's logprobs are cached with it and returned); model, temperature and seed are the
  role's (temperature 0, seed 42), whatever the system asks.
* ``POST /v1/embeddings``: the harness's embedding model (``ctx.embedder()``, cached), whatever
  model name the system sends; a text over the model's limit is truncated or embedded as windows
  (``embedding.long_texts``) and counted in the gateway's summary and in the account of the memory
  or search the request's token belongs to.
* ``GET /v1/models``: the role's model.

The server is ``aiohttp.web`` on 127.0.0.1, a free port chosen by the OS, in a background thread
with its own event loop; requests are answered from a thread pool (the LLM client is
synchronous). Every request must carry a bearer token made for this run (``secrets``); a token is
never written anywhere. ``session(spent)`` hands out a further token whose calls are recorded in
``spent`` (one per memory being ingested, one per search, so concurrent memories and questions
keep their own accounts); each record carries the role, so the ledger counts a search's calls
under it too. A call
that fails upstream comes back as an OpenAI error object with the upstream status (``http_429``
-> 429; a timeout -> 504; no connection, a bad body -> 502; a cache miss in read-only mode ->
503) and is counted in ``failures``; the system's own client then raises, and the harness counts
the memory or row as failed.
"""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import secrets
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from common.core import llm as llm_module
from common.core import long_texts
from common.core.llm import LLMCallError
from common.systems import outcomes
from common.systems.base import Spent

if TYPE_CHECKING:  # aiohttp (requirements-systems.txt) is imported when a gateway starts
    from aiohttp import web

PROMPT_PREFIX = "gateway."
# Request fields forwarded to ``LLMClient.complete``; everything else (model, temperature, seed,
# n, stream options) is the role's setting or refused.
FORWARDED = ("messages", "response_format", "tools", "tool_choice", "max_tokens", "max_completion_tokens",
             "logprobs", "top_logprobs", "logit_bias")
_CAUSE_STATUS = {"timeout": 504, "connection": 502, "bad_response": 502, "cache_miss": 503}


def status_of(cause: str) -> int:
    """The HTTP status a failed upstream call is answered with (``http_<n>`` keeps ``n``)."""
    if cause.startswith("http_") and cause[5:].isdigit():
        return int(cause[5:])
    return _CAUSE_STATUS.get(cause, 500)


def error_body(message: str, type_: str, code: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": None}}


@dataclass
class GatewayStats:
    """What went through the gateway: requests by route, failures by cause, seconds spent serving."""

    chat: int = 0
    embeddings: int = 0
    embedded_texts: int = 0
    # distinct texts over the embedding model's limit (truncated or windowed: embedding.long_texts)
    long: long_texts.Tally = field(default_factory=long_texts.Tally)
    failures: dict[str, int] = field(default_factory=dict)
    serve_seconds: float = 0.0  # wall time inside the harness's client / embedder
    handler_seconds: float = 0.0  # wall time of whole requests in the server (overhead = the difference)

    def summary(self) -> dict[str, Any]:
        return {"chat": self.chat, "embeddings": self.embeddings, "embedded_texts": self.embedded_texts,
                "long_texts": self.long.count, "failed": sum(self.failures.values()), "failures": dict(self.failures),
                "serve_seconds": round(self.serve_seconds, 4), "handler_seconds": round(self.handler_seconds, 4)}


class Gateway:
    """``with Gateway(llm, embedder, system="langmem") as gw:`` -> ``gw.base_url``, ``gw.api_key``.

    ``llm`` is the harness's ``LLMClient`` (``complete``), ``embedder`` a callable returning the
    harness's embedding model (loaded on the first embedding request), ``role`` the LLM role the
    calls are made (and counted) under.
    """

    def __init__(self, llm: Any, embedder: Callable[[], Any], *, system: str, role: str = "memory",
                 workers: int = 32) -> None:
        self.llm, self.embedder, self.system, self.role = llm, embedder, system, role
        self.prompt_id = f"{PROMPT_PREFIX}{system}"
        self.api_key = secrets.token_urlsafe(24)
        self.spent = Spent()  # calls made with ``api_key`` itself (outside any session)
        self.stats = GatewayStats()
        self._sessions: dict[str, Spent] = {self.api_key: self.spent}
        # The harness's account current where a session was made or rebound (a memory's ingestion,
        # a question's search): its embedding requests' long texts are counted there.
        self._accounts: dict[str, Optional[outcomes.Account]] = {}
        self._lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="gateway")
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner: Optional["web.AppRunner"] = None
        self.port = 0

    # ---- lifecycle
    @property
    def base_url(self) -> str:
        if not self.port:
            raise RuntimeError("the gateway is not running (use it as a context manager)")
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> "Gateway":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> "Gateway":
        # The SDK is imported lazily (common.core.lazy) and Python 3.11's LazyLoader is not thread
        # safe: the pool's first chat and embedding requests would race on it. Load it once here.
        assert llm_module.openai.OpenAI is not None
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            ready.set()
            loop.run_forever()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=f"gateway-{self.system}", daemon=True)
        self._thread.start()
        ready.wait()
        asyncio.run_coroutine_threadsafe(self._serve(), loop).result(timeout=30)
        return self

    async def _serve(self) -> None:
        from aiohttp import web

        @web.middleware
        async def auth(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
            return await self._auth(request, handler)

        app = web.Application(middlewares=[auth], client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = getattr(site, "_server", None)
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1])

    def stop(self) -> None:
        if self._loop is None:
            return
        loop, self._loop = self._loop, None
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=30)
        loop.close()
        self._pool.shutdown(wait=True)
        self.port = 0

    @contextmanager
    def session(self, spent: Spent) -> Iterator["Session"]:
        """A token of its own whose calls are recorded in ``spent`` (valid inside the block)."""
        token = secrets.token_urlsafe(24)
        with self._lock:
            self._sessions[token] = spent
            self._accounts[token] = outcomes.current()
        try:
            yield Session(self.base_url, token, spent)
        finally:
            with self._lock:
                self._sessions.pop(token, None)
                self._accounts.pop(token, None)

    def rebind(self, token: str, spent: Spent) -> None:
        """Record the further calls of a live session's ``token`` in ``spent`` (a long-lived child
        process keeps its token; each of its searches has its own account)."""
        with self._lock:
            if token not in self._sessions:
                raise KeyError("rebind: not a live session token of this gateway")
            self._sessions[token] = spent
            self._accounts[token] = outcomes.current()

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return self.stats.summary()

    # ---- request handling
    async def _auth(self, request: "web.Request", handler: Callable[["web.Request"], Any]) -> "web.StreamResponse":
        from aiohttp import web

        if self._account(request) is None:
            return web.json_response(error_body("the gateway needs its bearer token", "invalid_request_error",
                                                "invalid_api_key"), status=401)
        started = time.perf_counter()
        try:
            response: "web.StreamResponse" = await handler(request)
            return response
        finally:
            with self._lock:
                self.stats.handler_seconds += time.perf_counter() - started

    def _token(self, request: "web.Request") -> Optional[str]:
        """The request's bearer token when it is a live one (compared in constant time), else None."""
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        with self._lock:
            return next((t for t in self._sessions if hmac.compare_digest(t, given)), None)

    def _account(self, request: "web.Request") -> Optional[Spent]:
        """Where the calls of a request are recorded: its bearer token's account (None: no such token)."""
        token = self._token(request)
        with self._lock:
            return None if token is None else self._sessions.get(token)

    async def _body(self, request: "web.Request") -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None

    async def _models(self, request: "web.Request") -> "web.Response":
        from aiohttp import web

        model = self.llm.settings(self.role).model
        return web.json_response({"object": "list", "data": [
            {"id": model, "object": "model", "created": 0, "owned_by": "harness"}]})

    async def _chat(self, request: "web.Request") -> "web.Response":
        from aiohttp import web

        body = await self._body(request)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
            return web.json_response(error_body("'messages' must be a non-empty list", "invalid_request_error"),
                                     status=400)
        if body.get("stream"):
            return web.json_response(error_body("the gateway does not stream", "invalid_request_error"), status=400)
        loop = asyncio.get_running_loop()
        spent = self._account(request)
        assert spent is not None  # the middleware let the request in
        try:
            payload = await loop.run_in_executor(self._pool, self._complete, body, spent)
        except LLMCallError as exc:
            with self._lock:
                self.stats.failures[exc.cause] = self.stats.failures.get(exc.cause, 0) + 1
            return web.json_response(error_body(str(exc), "upstream_error", exc.cause), status=status_of(exc.cause))
        return web.json_response(payload)

    def _complete(self, body: dict[str, Any], spent: Spent) -> dict[str, Any]:
        limit = body.get("max_tokens") or body.get("max_completion_tokens")
        started = time.perf_counter()
        try:
            c = self.llm.complete(self.role, body["messages"], prompt_id=self.prompt_id,
                                  max_tokens=int(limit) if limit else None,
                                  response_format=body.get("response_format"), tools=body.get("tools"),
                                  tool_choice=body.get("tool_choice"), logprobs=bool(body.get("logprobs")) or None,
                                  top_logprobs=body.get("top_logprobs"), logit_bias=body.get("logit_bias"))
        finally:
            seconds = time.perf_counter() - started
            with self._lock:
                self.stats.chat += 1
                self.stats.serve_seconds += seconds
                spent.calls += 1
                spent.seconds = round(spent.seconds + seconds, 4)
        with self._lock:
            spent.llm_calls.append({**c.record(self.prompt_id), "role": self.role})
            spent.prompt_tokens += c.usage.get("prompt_tokens", 0)
            spent.completion_tokens += c.usage.get("completion_tokens", 0)
        message: dict[str, Any] = {"role": "assistant", "content": c.text if c.text or not c.tool_calls else None}
        if c.tool_calls:
            message["tool_calls"] = c.tool_calls
        usage = {k: c.usage.get(k, 0) for k in ("prompt_tokens", "completion_tokens")}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return {"id": f"chatcmpl-{c.cache_key[:24]}", "object": "chat.completion", "created": 0,
                "model": c.model,
                "choices": [{"index": 0, "message": message, "logprobs": c.logprobs,
                             "finish_reason": "tool_calls" if c.tool_calls else "stop"}],
                "usage": usage}

    async def _embeddings(self, request: "web.Request") -> "web.Response":
        from aiohttp import web

        body = await self._body(request)
        inp = body.get("input") if isinstance(body, dict) else None
        texts = [inp] if isinstance(inp, str) else inp
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            return web.json_response(error_body("'input' must be a string or a list of strings (token ids are not "
                                                "accepted: send text)", "invalid_request_error"), status=400)
        loop = asyncio.get_running_loop()
        token = self._token(request)
        with self._lock:
            account = self._accounts.get(token) if token else None
        vectors = await loop.run_in_executor(self._pool, self._embed, texts, account)
        # The openai SDK asks for base64 unless told otherwise (and decodes it itself).
        as_b64 = body.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode("ascii") if as_b64 else v}
                for i, v in enumerate(vectors)]
        return web.json_response({"object": "list", "data": data, "model": "harness-embedder",
                                  "usage": {"prompt_tokens": 0, "total_tokens": 0}})

    def _embed(self, texts: list[str], account: Optional[outcomes.Account] = None) -> list[list[float]]:
        started = time.perf_counter()
        with self._embed_lock, long_texts.tallying(self.stats.long), contextlib.ExitStack() as stack:
            if account is not None:  # the memory's or the search's count too
                stack.enter_context(long_texts.tallying(account.long))
            # one model, shared by every memory being ingested
            vectors = [[float(x) for x in v] for v in self.embedder().encode(texts)]
        with self._lock:
            self.stats.embeddings += 1
            self.stats.embedded_texts += len(texts)
            self.stats.serve_seconds += time.perf_counter() - started
        return vectors


@dataclass
class Session:
    """One ``Gateway.session``: the gateway's URL, this session's token and where its calls go."""

    base_url: str
    api_key: str
    spent: Spent
