"""A local, scripted stand-in for an OpenAI-compatible API, used by the test-suite.

The server speaks just enough of the OpenAI HTTP protocol for the official ``openai`` SDK:

* ``GET  /v1/models``            -> one model, ``fake-model``
* ``POST /v1/chat/completions``  -> a deterministic, schema-valid reply chosen from the prompt kind
* ``POST /v1/embeddings``        -> deterministic unit vectors (dimension 32 unless ``dimensions``)

The prompt kind is recognised from marker strings in the messages (see ``detect_kind``); each kind
gets a scripted reply derived only from the prompt text, so runs are reproducible. A ``FaultPlan``
injects HTTP errors, slow answers, broken content and broken response bodies so retry/repair paths
can be tested. Every request body, its headers and what was sent back are recorded for inspection.

Usage::

    with FakeOpenAI() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ...

The server binds 127.0.0.1 on an ephemeral port and runs in a daemon thread.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import re
import socket
import struct
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

FAKE_MODEL = "fake-model"
EMBEDDING_DIM = 32

# --------------------------------------------------------------------------- prompt kinds
# Repair markers are looked up in system messages first; the rest in all message text, in order.
REPAIR_MARKERS: list[tuple[str, str]] = [
    ("You repair an invalid episode partition", "partition_repair"),
    ("You repair an invalid retrieval plan", "plan_repair"),
    ("You repair invalid extraction JSON", "extract_repair"),
    ("You repair an invalid bridge reply", "bridge_repair"),
]
KIND_MARKERS: list[tuple[str, str]] = [
    ("You partition a complete dialogue session", "partition"),
    ("information-extraction stage", "extract"),
    ("query-decomposition stage", "plan"),
    ("bridge-resolution step", "bridge"),
    ("Answer only from the supplied", "answer"),
    ("without any conversation history", "answer"),  # closed-book baseline (no_memory)
    ("CORRECT or WRONG", "judge_locomo"),
    # The official LongMemEval checker templates all end by asking for yes or no.
    ("Answer yes or no only", "judge_lme"),
]
CHAT_KINDS = frozenset(k for _, k in REPAIR_MARKERS + KIND_MARKERS)
UNKNOWN_KIND = "unknown"
EMBEDDINGS_KIND = "embeddings"

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
            if kind not in CHAT_KINDS:
                raise ValueError(f"FaultPlan.pinned: unknown prompt kind {kind!r}")
            for name in names:
                if name not in ALL_FAULTS and name.lower() not in NO_FAULT:
                    raise ValueError(f"FaultPlan.pinned[{kind!r}]: unknown fault {name!r}")
        if self.kinds is not None:
            self.kinds = set(self.kinds)


# --------------------------------------------------------------------------- prompt parsing
TURN_RE = re.compile(r"^\[([^\]\n]+)\] ([^:\n]+?): ?(.*)$")
QUESTION_RE = re.compile(r"^Question:[ \t]*(.*)$", re.MULTILINE)
WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")

QUESTION_WORDS = frozenset(
    "what when who whom whose where why how which did does do is are was were would will "
    "could can should shall has have had may might".split()
)
STOPWORDS = QUESTION_WORDS | frozenset(
    """a an the and or but if then than so of to in on at by for with from about into over under
    after before between through during without within as it its it's this that these those there
    here i i'm i've i'd me my mine we us our you your yours he him his she her hers they them their
    theirs be been being am not no yes just also very really too some any all each every more most
    much many few lot lots one ones get got go going gone went make made like well oh hey hi hello
    thanks thank yeah okay ok sure what's that's don't didn't can't won't isn't aren't wasn't
    weren't doesn't i'll you're we're they're let's up out off again still even only ever never""".split()
)


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """All message contents, concatenated with newlines."""
    return "\n".join(_message_text(m) for m in messages if isinstance(m, dict))


def detect_kind(messages: list[dict[str, Any]]) -> str:
    system = "\n".join(_message_text(m) for m in messages if isinstance(m, dict) and m.get("role") == "system")
    for marker, kind in REPAIR_MARKERS:
        if marker in system:
            return kind
    text = prompt_text(messages)
    for marker, kind in KIND_MARKERS:
        if marker in text:
            return kind
    return UNKNOWN_KIND


def parse_turns(text: str) -> list[tuple[str, str, str]]:
    """``(dia_id, speaker, text)`` for every ``[id] speaker: text`` line, first occurrence of each id."""
    seen: set[str] = set()
    turns = []
    for line in text.splitlines():
        m = TURN_RE.match(line)
        if not m:
            continue
        dia_id, speaker, body = m.group(1), m.group(2).strip(), m.group(3).strip()
        if dia_id in seen:
            continue
        seen.add(dia_id)
        turns.append((dia_id, speaker, body))
    return turns


def parse_question(text: str) -> str:
    m = QUESTION_RE.search(text)
    return m.group(1).strip() if m else ""


def _words(text: str) -> list[str]:
    return [w.strip("'-") for w in WORD_RE.findall(text) if w.strip("'-")]


def content_words(text: str) -> list[str]:
    return [w for w in _words(text) if w.lower() not in STOPWORDS]


def _strip_possessive(word: str) -> str:
    return word[:-2] if word.lower().endswith("'s") else word


def approx_tokens(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------- scripted replies
def reply_partition(text: str) -> dict[str, Any]:
    turns = parse_turns(text)
    segments = []
    for n, start in enumerate(range(0, len(turns), 4), start=1):
        chunk = turns[start:start + 4]
        segments.append({
            "start_dia_id": chunk[0][0],
            "end_dia_id": chunk[-1][0],
            "theme": f"theme {n}",
            "theme_type": "topic",
            "theme_description": f"Turns {chunk[0][0]} to {chunk[-1][0]} ({len(chunk)} turns).",
            "boundary_reason": "session_start" if n == 1 else "semantic shift",
        })
    return {"segments": segments}


def _property_and_value(body: str) -> tuple[str, str]:
    words = content_words(body)
    long_idx = [i for i, w in enumerate(words) if len(w) > 4]
    if not long_idx:
        return "say", " ".join(w.lower() for w in words[:3]) or body[:40]
    # Longest qualifying word; the earliest one wins ties.
    best = max(long_idx, key=lambda i: (len(words[i]), -i))
    value_words = words[best + 1:best + 4] or words[max(0, best - 3):best] or [words[best]]
    return words[best].lower(), " ".join(value_words)


def reply_extract(text: str) -> dict[str, Any]:
    records = []
    for dia_id, speaker, body in parse_turns(text):
        prop, value = _property_and_value(body)
        records.append({
            "entity": speaker,
            "entity_type": "person",
            "property": prop,
            "value": value,
            "condition_property": "",
            "condition_value": "",
            "property_kind": "relation",
            "modality": "observed",
            "valid_time": "",
            "source": speaker,
            "evidence_dia_ids": [dia_id],
            "projection_kind": "direct",
            "confidence": 0.9,
        })
    return {"records": records}


def plan_entity_property(question: str) -> tuple[str, str]:
    """Entity = first capitalised non-question word; property = longest other content word."""
    entity = "user"
    for w in _words(question):
        base = _strip_possessive(w)
        if base[:1].isupper() and base.lower() not in QUESTION_WORDS and base != "I":
            entity = base
            break
    candidates = [
        _strip_possessive(w).lower() for w in content_words(question)
        if _strip_possessive(w) != entity
    ]
    if not candidates:
        return entity, "value"
    prop = max(enumerate(candidates), key=lambda iw: (len(iw[1]), -iw[0]))[1]
    return entity, prop


POSSESSIVE_RE = re.compile(r"\b([A-Z][a-z]+)'s ([a-z]+)\b")
EPISODE_ID_RE = re.compile(r"^### Episode (\S+) \|", re.MULTILINE)


def reply_plan(text: str) -> dict[str, Any]:
    question = parse_question(text)
    entity, prop = plan_entity_property(question)
    low = question.lower()
    aggregation = "how many" in low or "what are" in low
    bridged = POSSESSIVE_RE.search(question)
    if bridged and not aggregation:
        return _bridged_plan(question, bridged.group(1), bridged.group(2))
    return {
        "answer_target": {"type": "value", "description": f"The {prop} asked about for {entity}."},
        "reasoning_type": "aggregation" if aggregation else "direct",
        "retrieval_scope": "all_matching" if aggregation else "point",
        "required_properties": [{
            "entity": entity,
            "entity_type": "person",
            "broad_property": prop,
            "property_text": prop,
            "value": "",
            "role": "answer_property",
        }],
        "hops": [{
            "hop_id": "h1",
            "purpose": f"Find the {prop} of {entity}.",
            "anchor": {
                "entity": entity,
                "entity_type": "person",
                "property": prop,
                "value": "",
                "condition_property": "",
                "condition_value": "",
            },
            "depends_on": [],
            "bridge_request": "",
        }],
    }


def _bridged_plan(question: str, owner: str, relation: str) -> dict[str, Any]:
    """"Where is Omar's brother visiting from?": h1 finds who Omar's brother is (a declared
    bridge), h2 searches that person for the asked property."""
    words = [_strip_possessive(w).lower() for w in content_words(question)]
    rest = [w for w in words if w not in (owner.lower(), relation)] or ["value"]
    prop = max(enumerate(rest), key=lambda iw: (len(iw[1]), -iw[0]))[1]
    anchor = {"entity_type": "person", "value": "", "condition_property": "", "condition_value": ""}
    return {
        "answer_target": {"type": "value", "description": f"The {prop} of {owner}'s {relation}."},
        "reasoning_type": "multi_hop",
        "retrieval_scope": "point",
        "required_properties": [{"entity": owner, "entity_type": "person", "broad_property": relation,
                                 "property_text": relation, "value": "", "role": "relation"}],
        "hops": [
            {"hop_id": "h1", "purpose": f"Identify {owner}'s {relation}.",
             "anchor": {**anchor, "entity": owner, "property": relation},
             "depends_on": [], "bridge_request": f"the name of {owner}'s {relation}"},
            {"hop_id": "h2", "purpose": f"Find the {prop} of that person.",
             "anchor": {**anchor, "entity": "$h1.bridge", "property": prop},
             "depends_on": ["h1"], "bridge_request": ""},
        ],
    }


def reply_bridge(text: str) -> dict[str, Any]:
    """The first capitalised word of the context's first turn, from its first episode."""
    ids = EPISODE_ID_RE.findall(text)
    turns = parse_turns(text)
    names = [w for w in _words(turns[0][2]) if w[:1].isupper() and w.lower() not in STOPWORDS] if turns else []
    return {"bridge": names[0] if names else "", "supporting_episode_ids": ids[:1] if names else []}


def reply_answer(text: str) -> str:
    turns = parse_turns(text)
    if not turns:
        return "Unknown"
    words = turns[0][2].split()[:6]
    return " ".join(words) if words else "Unknown"


def judge_label(text: str) -> str:
    return "CORRECT" if hashlib.sha256(text.encode("utf-8")).digest()[0] % 2 == 0 else "WRONG"


def scripted_content(kind: str, text: str) -> str:
    """The normal (unfaulted) message content for a recognised prompt kind."""
    if kind in ("partition", "partition_repair"):
        return json.dumps(reply_partition(text))
    if kind in ("extract", "extract_repair"):
        return json.dumps(reply_extract(text))
    if kind in ("plan", "plan_repair"):
        return json.dumps(reply_plan(text))
    if kind in ("bridge", "bridge_repair"):
        return json.dumps(reply_bridge(text))
    if kind == "answer":
        return reply_answer(text)
    if kind == "judge_locomo":
        return json.dumps({"label": judge_label(text)})
    if kind == "judge_lme":
        return "Yes." if judge_label(text) == "CORRECT" else "No."
    raise ValueError(f"no scripted reply for kind {kind!r}")


def embed_text(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """Deterministic unit vector from a hash of ``text``."""
    raw = b""
    counter = 0
    while len(raw) < 4 * dim:
        raw += hashlib.sha256(f"{counter}\x00{text}".encode("utf-8")).digest()
        counter += 1
    vals = [(v / 0xFFFFFFFF) * 2.0 - 1.0 for v in struct.unpack(f"<{dim}I", raw[:4 * dim])]
    norm = math.sqrt(sum(v * v for v in vals)) or 1.0
    return [v / norm for v in vals]


def _error_body(message: str, type_: str, code: Optional[str] = None, param: Optional[str] = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


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
        if self._path() in ("/v1/models", "/models"):
            self._send_json(200, {"object": "list", "data": [
                {"id": FAKE_MODEL, "object": "model", "created": 1700000000, "owned_by": "fake-openai"},
            ]})
        elif self._path() in (f"/v1/models/{FAKE_MODEL}", f"/models/{FAKE_MODEL}"):
            self._send_json(200, {"id": FAKE_MODEL, "object": "model", "created": 1700000000, "owned_by": "fake-openai"})
        else:
            self._send_json(404, _error_body(f"Unknown path {self.path}", "invalid_request_error", "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        path = self._path()
        if path in ("/v1/chat/completions", "/chat/completions"):
            route = "chat"
        elif path in ("/v1/embeddings", "/embeddings"):
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
            self._send_json(400, _error_body("'input' must be a non-empty string or list.", "invalid_request_error", param="input"))
            return
        dim = body.get("dimensions") or EMBEDDING_DIM
        if not isinstance(dim, int) or dim <= 0:
            self._send_json(400, _error_body("'dimensions' must be a positive integer.", "invalid_request_error", param="dimensions"))
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
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            fake._record(body, "invalid", headers)
            self._send_json(400, _error_body("'messages' must be a non-empty list.", "invalid_request_error", param="messages"))
            return
        kind = detect_kind(messages)
        index, fault = fake._record(body, kind, headers)
        fake._wait_if_held(index)
        with fake._lock:
            fake._in_flight[kind] += 1
            fake.peak_in_flight[kind] = max(fake.peak_in_flight[kind], fake._in_flight[kind])
        try:
            fake._sleep(fake.kind_latency.get(kind, fake.latency))
        finally:
            with fake._lock:
                fake._in_flight[kind] -= 1
        if kind == UNKNOWN_KIND:
            self._send_json(400, _error_body(
                "fake-openai: unrecognised prompt kind (no marker string found in the messages).",
                "invalid_request_error", "unknown_prompt_kind", "messages"))
            return
        if fault in HTTP_FAULTS:
            message, type_, code = _HTTP_FAULT_BODIES[fault]
            message = message.replace("{key}", headers.get("authorization", "").removeprefix("Bearer "))
            extra = {"retry-after": "0"} if fault == "429" else None
            fake._reply(index, int(fault), json.dumps(_error_body(message, type_, code)))
            self._send_json(int(fault), _error_body(message, type_, code), extra)
            return
        if fault == "timeout":
            fake._sleep(fake.faults.timeout_seconds if fake.faults else 2.0)
        text = prompt_text(messages)
        content = scripted_content(kind, text)
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
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
                "logprobs": None,
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
            return
        fake._reply(index, 200, content)
        self._send_json(200, payload)


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


class FakeOpenAI:
    """Scripted OpenAI-compatible server on 127.0.0.1 (see module docstring)."""

    def __init__(self, *, faults: Optional[FaultPlan] = None, latency: float = 0.0,
                 kind_latency: Optional[dict[str, float]] = None) -> None:
        self.faults = faults
        self.latency = float(latency)
        self.kind_latency = dict(kind_latency or {})  # prompt kind -> latency, overriding ``latency``
        # prompt kind -> the most requests of that kind answered at the same time (concurrency seen)
        self.peak_in_flight: Counter[str] = Counter()
        self._in_flight: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []
        self.request_kinds: list[str] = []  # parallel to ``requests``
        self.request_headers: list[dict[str, str]] = []  # parallel to ``requests``; names lower-cased
        self.faults_injected: list[tuple[int, str, str]] = []  # (request index, kind, fault)
        # request index -> (HTTP status, text) of chat replies: the message content of a 200, the
        # error body of an HTTP error, None for a broken body. Recorded even if the client gave up.
        self.replies: dict[int, tuple[int, Optional[str]]] = {}
        self._lock = threading.Lock()
        self._rng = random.Random(faults.seed if faults else 0)
        self._eligible_seen = 0
        self._body_seen: Counter[str] = Counter()  # canonical body -> arrivals so far
        self._hold_from: Optional[int] = None  # chat requests from this index on wait for release
        self._released = threading.Event()
        self._released.set()
        self._pinned_bodies: dict[str, list[str]] = {}  # kind -> distinct bodies, first-arrival order
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None
        self.base_url = ""

    # -- lifecycle
    def start(self) -> "FakeOpenAI":
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        host, port = server.server_address[:2]
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
        with self._lock:  # unblock handlers waiting on idle keep-alive connections
            open_conns = list(self._connections)
        for conn in open_conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

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
            index = len(self.requests)
            self.requests.append(body)
            self.request_kinds.append(kind)
            self.request_headers.append(dict(headers or {}))
            canonical = json.dumps(body, sort_keys=True, ensure_ascii=False)
            seen = self._body_seen[canonical]
            self._body_seen[canonical] += 1
            fault = self._choose_fault(kind, canonical, seen)
            if fault is not None:
                self.faults_injected.append((index, kind, fault))
            return index, fault

    def _reply(self, index: int, status: int, content: Optional[str]) -> None:
        with self._lock:
            self.replies[index] = (status, content)

    def _choose_fault(self, kind: str, canonical: str, seen: int) -> Optional[str]:
        plan = self.faults
        if plan is None or kind not in CHAT_KINDS:
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
