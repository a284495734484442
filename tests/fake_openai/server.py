"""The fake OpenAI-compatible HTTP server: routing, prompt-kind lookup and fault injection.

The server speaks just enough of the OpenAI HTTP protocol for the official ``openai`` SDK:

* ``GET  /v1/models``            -> one model, ``fake-model`` (or ``Capabilities.models``)
* ``POST /v1/chat/completions``  -> a deterministic, schema-valid reply chosen from the prompt kind
* ``POST /v1/embeddings``        -> deterministic unit vectors (dimension 32 unless ``dimensions``)
* ``/v1/files``, ``/v1/batches``  -> the Batch API (``batches.FakeBatches``; ``server.batch.plan``
  makes batches slow, held, expired or rejected)

The prompt kind of a chat request is read from its ``X-Prompt-Id`` header (the id of the prompt
template that produced the messages, which ``LLMClient.complete(prompt_id=...)`` sends) through the
table ``scripted.PROMPT_KINDS``. A request without a known id whose body says what it wants (a
``gateway.*`` id, a json_schema ``response_format`` or ``tools``) gets the generic reply
(``scripted.generic_reply``: a ``SCHEMA_KINDS`` entry, a synthesized schema instance, a tool call);
any other request without the header, or with an id not in the table, gets
a 400 ``unknown_prompt_kind`` that names the header. The message text never decides the kind. A reply
carries only the fields its request asks for (``contract.py``: its JSON schema, or the JSON its prompt
shows); a scripted reply that would carry another is the fake's own defect, answered with a 400
``fake_reply_contract`` naming the fields and logged in ``contract_violations``. A
``FaultPlan`` injects HTTP errors, slow answers, broken content and broken response bodies so
retry/repair paths can be tested; ``Capabilities`` makes it a server that lacks a feature (JSON
mode, JSON-schema ``response_format``, ``seed``, deterministic replies, a model) or sends rate-limit
headers, as ``make doctor`` probes them; ``instrumentation.Instrumentation`` records every request
body, its headers and what was sent back.

The server binds 127.0.0.1 on an ephemeral port and runs in a daemon thread.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from tests.fake_openai.batches import FakeBatches, parse_multipart
from tests.fake_openai.contract import ContractError
from tests.fake_openai.instrumentation import Instrumentation
from tests.fake_openai.scripted import (
    EMBEDDING_DIM,
    EMBEDDINGS_KIND,
    FAKE_MODEL,
    FAULTABLE_KINDS,
    GENERIC_KIND,
    GRAPHITI_RERANK_KIND,
    PROMPT_ID_HEADER,
    SCHEMA_CHAT_KINDS,
    UNKNOWN_KIND,
    approx_tokens,
    embed_text,
    generic_reply,
    kind_for_prompt_id,
    kind_for_request,
    prompt_text,
    rerank_logprobs,
    schema_content,
    schema_kind,
    scripted_content,
)

# --------------------------------------------------------------------------- faults
# "401" echoes the key the client presented in its message, as a careless server or proxy may.
HTTP_FAULTS = frozenset({"429", "500", "503", "400", "401"})
# A 200 whose message content is broken JSON / cut off / empty (the model's fault, not the server's).
CONTENT_FAULTS = frozenset({"malformed", "truncated", "empty"})
# A 200 whose HTTP body itself is broken: cut-off JSON (with a matching Content-Length, as a buggy
# proxy sends it), an HTML error page, or a JSON object without ``choices``.
BODY_FAULTS = frozenset({"truncated_body", "html_body", "no_choices"})
ALL_FAULTS = HTTP_FAULTS | CONTENT_FAULTS | BODY_FAULTS | {"timeout"}
NO_FAULT = frozenset({"", "ok", "none"})  # script entries that mean "answer normally"
MALFORMED_CONTENT = "Sure! here it is: {oops"
CONTRACT_CODE = "fake_reply_contract"  # the error code of a scripted reply that broke the contract


@dataclass
class FaultPlan:
    """Which chat requests to break, and how.

    ``script`` gives explicit faults for the first eligible chat requests in arrival order
    (``"ok"``/``""`` leaves that request alone); after the script is used up, each eligible
    request is faulted with probability ``rate``, the type drawn from ``types``, both from a
    ``random.Random(seed)`` so a sequential run is reproducible. ``kinds`` restricts which
    prompt kinds are eligible (``None`` = every recognised chat kind). Embeddings and
    unknown-kind requests are never faulted.

    ``keyed=True`` draws each random fault from a hash of (seed, request body, how many times that
    body was seen before) instead of from the arrival order, so a concurrent run gets the same
    faults on the same requests every time, and a retry of a faulted request gets a fresh draw.

    ``pinned`` maps a prompt kind to faults for the 1st, 2nd, ... *distinct* request bodies of
    that kind (in order of first arrival); the fault is repeated on every retry of that body, so
    ``{"answer": ["500"]}`` makes exactly one answer call fail for good whatever the concurrency.
    Pinned faults take precedence over ``script`` and ``rate``.
    """

    rate: float = 0.0
    script: list[str] = field(default_factory=list)
    kinds: Optional[set[str]] = None
    seed: int = 0
    types: list[str] = field(default_factory=lambda: ["429", "500", "timeout", "malformed", "truncated"])
    timeout_seconds: float = 2.0
    keyed: bool = False
    pinned: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"FaultPlan.rate must be in [0, 1], got {self.rate}")
        for name in self.script:
            if name not in ALL_FAULTS and name.lower() not in NO_FAULT:
                raise ValueError(f"FaultPlan.script: unknown fault {name!r}")
        for name in self.types:
            if name not in ALL_FAULTS:
                raise ValueError(f"FaultPlan.types: unknown fault {name!r}")
        if self.rate > 0 and not self.types:
            raise ValueError("FaultPlan.types must not be empty when rate > 0")
        for kind, names in self.pinned.items():
            if kind not in FAULTABLE_KINDS | SCHEMA_CHAT_KINDS:
                raise ValueError(f"FaultPlan.pinned: unknown prompt kind {kind!r}")
            for name in names:
                if name not in ALL_FAULTS and name.lower() not in NO_FAULT:
                    raise ValueError(f"FaultPlan.pinned[{kind!r}]: unknown fault {name!r}")
        if self.kinds is not None:
            self.kinds = set(self.kinds)


@dataclass
class Capabilities:
    """What the server supports, for probing an endpoint (``make doctor``); the defaults accept
    everything, as before.

    ``models``: the models ``/v1/models`` lists and chat answers; a chat request for any other
    model gets OpenAI's 404 ``model_not_found`` (``None``: list ``fake-model``, answer any name).
    ``json_mode`` / ``json_schema`` / ``seed``: ``False`` rejects a request carrying
    ``response_format`` of that type / a ``seed`` with a 400, as servers without them do.
    ``deterministic=False`` makes each reply to the same request differ (a counter in the content).
    ``rate_limit_headers`` are sent with every chat reply."""

    models: Optional[tuple[str, ...]] = None
    json_mode: bool = True
    json_schema: bool = True
    seed: bool = True
    deterministic: bool = True
    rate_limit_headers: dict[str, str] = field(default_factory=dict)
    # Only the /v1/... paths answer (as OpenAI and vLLM do): a base URL without /v1 gets 404s.
    v1_only: bool = False

    def refusal(self, body: dict[str, Any]) -> Optional[tuple[int, dict[str, Any]]]:
        """(status, error body) for a chat request this server cannot serve, else None."""
        model = body.get("model")
        if self.models is not None and model not in self.models:
            return 404, _error_body(f"The model `{model}` does not exist or you do not have access to it.",
                                    "invalid_request_error", "model_not_found")
        fmt = (body.get("response_format") or {}).get("type")
        if (fmt == "json_object" and not self.json_mode) or (fmt == "json_schema" and not self.json_schema):
            return 400, _error_body(f"Invalid parameter: 'response_format' of type '{fmt}' is not supported "
                                    "with this model.", "invalid_request_error", None, "response_format")
        if "seed" in body and not self.seed:
            return 400, _error_body("Unrecognized request argument supplied: seed", "invalid_request_error",
                                    None, "seed")
        return None


def _error_body(message: str, type_: str, code: Optional[str] = None, param: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def unknown_kind_message(prompt_id: Optional[str]) -> str:
    """The 400 message for a chat request whose kind is unknown: it names the header to send."""
    if not prompt_id:
        return (f"fake-openai: unrecognised prompt kind: the request has no {PROMPT_ID_HEADER} header "
                "(pass prompt_id= to LLMClient.complete, or send the header with the prompt id).")
    return (f"fake-openai: unrecognised prompt kind: {PROMPT_ID_HEADER} header {prompt_id!r} is not a known "
            "prompt id (see tests/fake_openai/scripted.py PROMPT_KINDS).")


_HTTP_FAULT_BODIES = {
    "429": ("Rate limit reached for fake-model (injected fault).", "rate_limit_exceeded", "rate_limit_exceeded"),
    "500": ("The server had an error while processing your request (injected fault).", "server_error", None),
    "503": ("The engine is currently overloaded (injected fault).", "server_error", None),
    "400": ("Invalid request (injected fault).", "invalid_request_error", None),
    "401": ("Incorrect API key provided: {key} (injected fault).", "invalid_request_error", "invalid_api_key"),
}


# --------------------------------------------------------------------------- server
class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr logging
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.fake._track(self.connection, add=False)

    # -- plumbing
    def _send_json(self, status: int, payload: Any, headers: Optional[dict[str, str]] = None,
                   *, raw: Optional[bytes] = None, content_type: str = "application/json") -> None:
        body = raw if raw is not None else json.dumps(payload).encode("utf-8")
        if self.server.fake.killed:  # a dead server answers nothing: the client sees a reset
            self.close_connection = True
            return
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError):
            self.close_connection = True  # the client gave up (e.g. its timeout fired)

    def _read_body(self) -> Optional[Any]:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw.decode("utf-8")) if raw else {}
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    # -- routes
    def do_GET(self) -> None:  # noqa: N802
        path, batches = self._path(), self.server.fake.batch
        if path.startswith("/v1/files/") and path.endswith("/content"):
            data = batches.content(path.split("/")[3])
            if data is None:
                self._send_json(404, _error_body(f"No such File object: {path}", "invalid_request_error"))
            else:
                self._send_json(200, None, raw=data, content_type="application/octet-stream")
        elif path == "/v1/batches":
            self._send_json(200, batches.list())
        elif path.startswith("/v1/batches/"):
            self._send_json(*batches.retrieve(path.split("/")[3]))
        elif self._path() in ("/v1/models", "/models"):
            listed = self.server.fake.capabilities.models or (FAKE_MODEL,)
            self._send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 1700000000, "owned_by": "fake-openai"} for m in listed
            ]})
        elif self._path() in (f"/v1/models/{FAKE_MODEL}", f"/models/{FAKE_MODEL}"):
            self._send_json(200, {"id": FAKE_MODEL, "object": "model", "created": 1700000000,
                                  "owned_by": "fake-openai"})
        else:
            self._send_json(404, _error_body(f"Unknown path {self.path}", "invalid_request_error", "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        path = self._path()
        if path == "/v1/files":
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            self._send_json(*self.server.fake.batch.upload(parse_multipart(self.headers.get("Content-Type", ""), raw)))
            return
        if path == "/v1/batches":
            body = self._read_body()
            self._send_json(*self.server.fake.batch.create(body if isinstance(body, dict) else {}))
            return
        bare = () if self.server.fake.capabilities.v1_only else ("/chat/completions", "/embeddings")
        if path in ("/v1/chat/completions", *bare[:1]):
            route = "chat"
        elif path in ("/v1/embeddings", *bare[1:]):
            route = "embeddings"
        else:
            self._read_body()
            self._send_json(404, _error_body(f"Unknown path {self.path}", "invalid_request_error", "not_found"))
            return
        body = self._read_body()
        fake = self.server.fake
        headers = {k.lower(): v for k, v in self.headers.items()}
        if not isinstance(body, dict):
            fake._record({"_invalid_json": True}, "invalid", headers)
            self._send_json(400, _error_body("Request body is not a JSON object.", "invalid_request_error"))
            return
        if route == "embeddings":
            fake._record(body, EMBEDDINGS_KIND, headers)
            fake._sleep(fake.latency)
            self._embeddings(body)
        else:
            self._chat(body, headers)

    def _embeddings(self, body: dict[str, Any]) -> None:
        inp = body.get("input")
        if isinstance(inp, str):
            inputs = [inp]
        elif isinstance(inp, list) and inp and all(isinstance(x, int) for x in inp):
            inputs = [" ".join(map(str, inp))]  # a single pre-tokenised input
        elif isinstance(inp, list) and inp:
            inputs = [x if isinstance(x, str) else " ".join(map(str, x)) for x in inp]
        else:
            self._send_json(400, _error_body("'input' must be a non-empty string or list.",
                                             "invalid_request_error", param="input"))
            return
        dim = body.get("dimensions") or EMBEDDING_DIM
        if not isinstance(dim, int) or dim <= 0:
            self._send_json(400, _error_body("'dimensions' must be a positive integer.",
                                             "invalid_request_error", param="dimensions"))
            return
        as_b64 = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(inputs):
            vec = embed_text(text, dim)
            emb: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode("ascii") if as_b64 else vec
            data.append({"object": "embedding", "index": i, "embedding": emb})
        tokens = sum(approx_tokens(t) for t in inputs)
        self._send_json(200, {
            "object": "list",
            "data": data,
            "model": body.get("model") or FAKE_MODEL,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })

    def _chat(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        fake = self.server.fake
        started = time.perf_counter()
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            fake._record(body, "invalid", headers)
            self._send_json(400, _error_body("'messages' must be a non-empty list.",
                                             "invalid_request_error", param="messages"))
            return
        prompt_id = headers.get(PROMPT_ID_HEADER.lower())
        kind = kind_for_request(prompt_id, body)
        if kind in (UNKNOWN_KIND, GENERIC_KIND):  # graphiti: its schema's name (or logprobs) says
            kind = schema_kind(body) or kind
        index, fault = fake._record(body, kind, headers)
        fake._wait_if_held(index)
        with fake._in_flight_of(kind):
            fake._sleep(fake.kind_latency.get(kind, fake.latency))
        if kind == UNKNOWN_KIND:
            self._send_json(400, _error_body(unknown_kind_message(prompt_id),
                                             "invalid_request_error", "unknown_prompt_kind", PROMPT_ID_HEADER))
            return
        refused = fake.capabilities.refusal(body)
        if refused is not None:
            fake._reply(index, refused[0], json.dumps(refused[1]))
            self._send_json(*refused)
            fake._served(index, started)
            return
        if fault in HTTP_FAULTS:
            message, type_, code = _HTTP_FAULT_BODIES[fault]
            message = message.replace("{key}", headers.get("authorization", "").removeprefix("Bearer "))
            extra = {"retry-after": "0"} if fault == "429" else None
            fake._reply(index, int(fault), json.dumps(_error_body(message, type_, code)))
            self._send_json(int(fault), _error_body(message, type_, code), extra)
            fake._served(index, started)
            return
        if fault == "timeout":
            fake._sleep(fake.faults.timeout_seconds if fake.faults else 2.0)
        text = prompt_text(messages)
        tool_calls: list[dict[str, Any]] = []
        try:
            if kind in SCHEMA_CHAT_KINDS:
                content = schema_content(kind, body, text)
            elif kind == GENERIC_KIND:
                content, tool_calls = generic_reply(body, text, prompt_id)
            else:
                content = scripted_content(kind, text)
        except ContractError as exc:
            self._contract_violation(index, kind, exc, started)
            return
        if not fake.capabilities.deterministic:
            content = _vary(content, index)
        finish_reason = "stop"
        if fault == "malformed":
            content = MALFORMED_CONTENT
        elif fault == "truncated":
            content, finish_reason = content[: len(content) // 2], "length"  # as when max_tokens cuts a reply
        elif fault == "empty":
            content = ""
        prompt_tokens = approx_tokens(text)
        completion_tokens = approx_tokens(content)
        payload = {
            "id": f"chatcmpl-fake-{index:06d}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or FAKE_MODEL,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content,
                            **({"tool_calls": tool_calls} if tool_calls else {})},
                "finish_reason": "tool_calls" if tool_calls and finish_reason == "stop" else finish_reason,
                "logprobs": _logprobs(kind, text) if body.get("logprobs") else None,
            }],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        if fault in BODY_FAULTS:
            fake._reply(index, 200, None)
            if fault == "truncated_body":
                full = json.dumps(payload).encode("utf-8")
                self._send_json(200, None, raw=full[: len(full) // 2])
            elif fault == "html_body":
                self._send_json(200, None, raw=b"<html><body>502 Bad Gateway</body></html>", content_type="text/html")
            else:  # no_choices
                self._send_json(200, {"id": payload["id"], "object": "chat.completion", "model": payload["model"]})
            fake._served(index, started)
            return
        fake._reply(index, 200, content)
        self._send_json(200, payload, fake.capabilities.rate_limit_headers or None)
        fake._served(index, started)


    def _contract_violation(self, index: int, kind: str, exc: ContractError, started: float) -> None:
        """A scripted reply that would carry a field its request never asks for is the fake's own
        defect: it is recorded (``contract_violations``) and answered with a 400 naming the fields,
        never sent (a 400, so the client does not retry it)."""
        fake = self.server.fake
        fake._violated(index, kind, str(exc))
        error = _error_body(str(exc), "invalid_request_error", CONTRACT_CODE)
        fake._reply(index, 400, json.dumps(error))
        self._send_json(400, error)
        fake._served(index, started)


def _logprobs(kind: str, text: str) -> dict[str, Any]:
    """``choices[0].logprobs`` of a request asking for them (graphiti's reranker reads the top two)."""
    token, logprob = rerank_logprobs(text) if kind == GRAPHITI_RERANK_KIND else ("Unknown", 0.0)
    other = "False" if token == "True" else "True"
    top = [{"token": token, "logprob": logprob, "bytes": None},
           {"token": other, "logprob": math.log(max(1e-9, 1 - math.exp(logprob))), "bytes": None}]
    return {"content": [{"token": token, "logprob": logprob, "bytes": None, "top_logprobs": top}], "refusal": None}


def _vary(content: str, n: int) -> str:
    """The reply of a non-deterministic server: the n-th reply differs from every other. A JSON object
    stays one with the same keys (a reply carries only the fields its request asks for): the counter
    goes into its first string value."""
    try:
        obj = json.loads(content)
    except json.JSONDecodeError:
        return f"{content} ({n})"
    key = next((k for k, v in obj.items() if isinstance(v, str)), None) if isinstance(obj, dict) else None
    return json.dumps({**obj, key: f"{obj[key]} ({n})"}) if key is not None else f"{content} ({n})"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # A client opening llm.concurrency connections at once overflows socketserver's default
    # backlog of 5; the dropped connects are retried by the kernel after 1 s.
    request_queue_size = 128
    fake: "FakeOpenAI"

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up or was killed mid-request resets its connection: expected in
        # timeout and interruption tests, so no traceback. Anything else is a bug in the fake.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            super().handle_error(request, client_address)


class FakeOpenAI(Instrumentation):
    """Scripted OpenAI-compatible server on 127.0.0.1 (see module docstring).

    Usage::

        with FakeOpenAI() as server:
            client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
            client.chat.completions.create(..., extra_headers={"X-Prompt-Id": "plan_user"})
    """

    def __init__(self, *, faults: Optional[FaultPlan] = None, latency: float = 0.0,
                 kind_latency: Optional[dict[str, float]] = None,
                 capabilities: Optional[Capabilities] = None) -> None:
        super().__init__()  # the request log, counters and ``_lock``
        self.faults = faults
        self.capabilities = capabilities or Capabilities()
        self.latency = float(latency)  # seconds each request waits before it is answered
        self.kind_latency = dict(kind_latency or {})  # prompt kind -> latency, overriding ``latency``
        self._rng = random.Random(faults.seed if faults else 0)
        self._eligible_seen = 0
        self._body_seen: Counter[str] = Counter()  # canonical body -> arrivals so far
        self._hold_from: Optional[int] = None  # chat requests from this index on wait for release
        self._released = threading.Event()
        self._released.set()
        self._pinned_bodies: dict[str, list[str]] = {}  # kind -> distinct bodies, first-arrival order
        self.batch = FakeBatches(self._answer_batch_line)  # files and batches (not in ``requests``)
        self._stopping = threading.Event()
        self.killed = False  # set by ``kill()``: requests in flight get no reply
        self._connections: set[socket.socket] = set()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self.base_url = ""

    # -- lifecycle
    def start(self) -> "FakeOpenAI":
        if self._server is not None:
            return self
        self._stopping.clear()
        self.killed = False
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        host, port = server.server_address[:2]
        if isinstance(host, bytes):
            host = host.decode()
        self.base_url = f"http://{host}:{port}/v1"
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes handlers sleeping for latency / timeout faults
        self._server.shutdown()
        self._server.server_close()
        self._reset_connections()  # unblock handlers waiting on idle keep-alive connections
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def kill(self) -> None:
        """Die like a crashed server: requests in flight get their connection reset, no reply, and
        new connections are refused (the port is closed)."""
        with self._lock:
            self.killed = True
        self._reset_connections()
        self.stop()

    def _reset_connections(self) -> None:
        with self._lock:
            open_conns = list(self._connections)
        for conn in open_conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- control
    def hold_from(self, index: Optional[int]) -> None:
        """Hold the replies to chat requests numbered ``index`` and later (0-based, counting every
        request) until ``hold_from(None)`` or ``stop()``: a test can then kill a client while it
        has calls in flight, at an exact point."""
        with self._lock:
            self._hold_from = index
            if index is None:
                self._released.set()
            else:
                self._released.clear()

    def _answer_batch_line(self, line: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(status, body) of one batch line, answered as the same live request would be, faults
        included; batch lines are not in ``requests`` (live traffic only)."""
        body = line.get("body") or {}
        cid = str(line.get("custom_id", ""))
        prompt_id = cid.split(":", 1)[1] if ":" in cid else None
        kind = kind_for_prompt_id(prompt_id)
        if kind == UNKNOWN_KIND:
            return 400, _error_body(unknown_kind_message(prompt_id), "invalid_request_error", "unknown_prompt_kind")
        with self._lock:
            canonical = json.dumps(body, sort_keys=True, ensure_ascii=False)
            seen = self._body_seen[canonical]
            self._body_seen[canonical] += 1
            fault = self._choose_fault(kind, canonical, seen)
        if fault in HTTP_FAULTS:
            message, type_, code = _HTTP_FAULT_BODIES[fault]
            return int(fault), _error_body(message.replace("{key}", "***"), type_, code)
        text = prompt_text(body.get("messages") or [])
        try:
            content = scripted_content(kind, text)
        except ContractError as exc:
            self._violated(-1, kind, str(exc))
            return 400, _error_body(str(exc), "invalid_request_error", CONTRACT_CODE)
        if fault == "malformed":
            content = MALFORMED_CONTENT
        elif fault == "truncated":
            content = content[: len(content) // 2]
        elif fault == "empty":
            content = ""
        if fault in BODY_FAULTS:  # a line cannot be cut off; its body can lack the completion
            return 200, {"id": f"chatcmpl-fake-batch-{seen}", "object": "chat.completion"}
        usage = {"prompt_tokens": approx_tokens(text), "completion_tokens": approx_tokens(content)}
        return 200, {"id": "chatcmpl-fake-batch", "object": "chat.completion", "created": int(time.time()),
                     "model": body.get("model") or FAKE_MODEL,
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                  "finish_reason": "stop", "logprobs": None}],
                     "usage": {**usage, "total_tokens": sum(usage.values())}}

    # -- internals (called from handler threads)
    def _wait_if_held(self, index: int) -> None:
        with self._lock:
            held = self._hold_from is not None and index >= self._hold_from
        while held and not self._released.wait(0.05) and not self._stopping.is_set():
            pass

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def _record(self, body: dict[str, Any], kind: str,
                headers: Optional[dict[str, str]] = None) -> tuple[int, Optional[str]]:
        """Append the request and decide its fault atomically, so arrival order fixes both."""
        with self._lock:
            index = self._log_request_locked(body, kind, headers)
            canonical = json.dumps(body, sort_keys=True, ensure_ascii=False)
            seen = self._body_seen[canonical]
            self._body_seen[canonical] += 1
            fault = self._choose_fault(kind, canonical, seen)
            if fault is not None:
                self._log_fault_locked(index, kind, fault)
            return index, fault

    def _choose_fault(self, kind: str, canonical: str, seen: int) -> Optional[str]:
        plan = self.faults
        if plan is None or kind not in FAULTABLE_KINDS | SCHEMA_CHAT_KINDS:
            return None
        if plan.kinds is not None and kind not in plan.kinds:
            return None
        if kind in plan.pinned:
            bodies = self._pinned_bodies.setdefault(kind, [])
            if canonical not in bodies:
                bodies.append(canonical)
            n = bodies.index(canonical)
            if n < len(plan.pinned[kind]):
                name = plan.pinned[kind][n]
                return None if name.lower() in NO_FAULT else name
        n = self._eligible_seen
        self._eligible_seen += 1
        if n < len(plan.script):
            name = plan.script[n]
            return None if name.lower() in NO_FAULT else name
        if plan.rate <= 0:
            return None
        if plan.keyed:
            digest = hashlib.sha256(f"{plan.seed}\x00{seen}\x00{canonical}".encode("utf-8")).digest()
            hit = int.from_bytes(digest[:8], "big") / 2**64 < plan.rate
            return plan.types[int.from_bytes(digest[8:16], "big") % len(plan.types)] if hit else None
        # Always draw both numbers so the sequence does not depend on earlier outcomes.
        hit = self._rng.random() < plan.rate
        choice = self._rng.choice(plan.types)
        return choice if hit else None
