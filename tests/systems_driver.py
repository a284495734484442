"""A small driver for the memory systems that run in their own environment (``systems/<name>/``):
one adapter by hand, outside the harness's stages (a run drives them with ``method.name=<name>``).

It builds (or reuses) the system's virtual environment ``.systems/<name>/venv`` from
``systems/<name>/requirements.txt`` through ``common.systems.envs`` (as a run does), starts
``systems/<name>/adapter.py`` in it as a child process with the protocol's environment, and speaks
the JSON-lines protocol to it (hello, ingest, search, close; see docs/memory-systems.md).

The child's OpenAI base URL is a relay on 127.0.0.1 that adds the ``X-Prompt-Id: gateway.<name>``
header (as the harness's gateway does, so that the fake server answers an outside system's plain
chat requests with its generic reply) and forwards every request to the fake server unchanged. A
``sitecustomize`` put first on the child's ``PYTHONPATH`` refuses every socket connection and DNS
lookup but the relay's and records each attempt, so a test can assert that the child reached
nothing else.

Run by hand: ``.venv/bin/python -m tests.systems_driver cognee`` (prints the replies and counts).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ROOT / "systems"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"

# The child's socket guard: connections to anything but the relay (and local UNIX sockets) are
# refused and recorded, DNS lookups of any other name too.
GUARD = r'''
import json, os, socket
_LOG = os.environ["SYSTEMS_DRIVER_ATTEMPTS"]
_PORT = int(os.environ["SYSTEMS_DRIVER_PORT"])
_ALLOWED = {("127.0.0.1", _PORT), ("localhost", _PORT)}
_LOCAL = {"127.0.0.1", "localhost", "::1", None, ""}

def _record(what):
    with open(_LOG, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(what) + "\n")

def _check(sock, address):
    if sock.family == getattr(socket, "AF_UNIX", None):
        return
    host, port = address[0], address[1]
    if (host, port) not in _ALLOWED:
        _record({"connect": [str(host), port]})
        raise ConnectionRefusedError(f"systems driver: connection to {host}:{port} refused")

_connect, _connect_ex = socket.socket.connect, socket.socket.connect_ex
def connect(self, address):
    _check(self, address)
    return _connect(self, address)
def connect_ex(self, address):
    _check(self, address)
    return _connect_ex(self, address)
socket.socket.connect, socket.socket.connect_ex = connect, connect_ex

_getaddrinfo = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    if name not in _LOCAL:
        _record({"resolve": str(name)})
        raise socket.gaierror(socket.EAI_NONAME, f"systems driver: lookup of {name} refused")
    return _getaddrinfo(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo
'''


# --------------------------------------------------------------------------- environments
def build_env(name: str) -> Path:
    """``.systems/<name>/venv``, built (or reused while its stamp matches) by the harness's one
    environment builder, ``common.systems.envs`` (pip-args.txt and all)."""
    from common.systems import envs

    return envs.build(name)


def tiktoken_cache() -> Optional[Path]:
    """The harness's tiktoken cache, seeded with the encodings the systems count tokens with."""
    from common.core.tokens import seed_tiktoken_cache, tiktoken_cache_dir

    for encoding in ("cl100k_base", "o200k_base"):
        seed_tiktoken_cache(encoding)
    return tiktoken_cache_dir()


# --------------------------------------------------------------------------- relay
class _Relay(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    prompt_id: str
    token: str
    forwarded: int
    refused: int
    lock: threading.Lock


class _RelayHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Relay

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def _relay(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if self.headers.get("Authorization") != f"Bearer {self.server.token}":
            with self.server.lock:
                self.server.refused += 1
            self._send(401, b'{"error": {"message": "bad token", "type": "invalid_request_error"}}')
            return
        path = self.path[3:] if self.path.startswith("/v1") else self.path
        req = urllib.request.Request(self.server.upstream + path, data=body, method=method)
        req.add_header("Content-Type", "application/json")
        req.add_header("Authorization", "Bearer fake")
        req.add_header("X-Prompt-Id", self.server.prompt_id)
        if method == "POST":  # what the fake server counts (it leaves GET /models out)
            with self.server.lock:
                self.server.forwarded += 1
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                self._send(resp.status, resp.read())
        except urllib.error.HTTPError as exc:
            self._send(exc.code, exc.read())

    def _send(self, status: int, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        self._relay("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._relay("POST")


def start_relay(upstream: str, system: str, token: str) -> _Relay:
    relay = _Relay(("127.0.0.1", 0), _RelayHandler)
    relay.upstream, relay.prompt_id, relay.token = upstream.rstrip("/"), f"gateway.{system}", token
    relay.forwarded, relay.refused, relay.lock = 0, 0, threading.Lock()
    threading.Thread(target=relay.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return relay


# --------------------------------------------------------------------------- the conversation
def locomo_sessions(sample: str = "conv-26", count: int = 2) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The first ``count`` sessions of a LoCoMo conversation in the protocol's form, and its first
    question (text and the date of the last session given)."""
    if not LOCOMO.exists():  # the shared data sits beside the checkout (CI has it); a bare clone skips
        import pytest

        pytest.skip(f"real LoCoMo file not available at {LOCOMO}")
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    conv = next(c for c in data if c["sample_id"] == sample)["conversation"]
    sessions = []
    for i in range(1, count + 1):
        turns = [{"turn_id": t["dia_id"], "speaker": t["speaker"], "text": t["text"]} for t in conv[f"session_{i}"]]
        sessions.append({"session_id": f"session_{i}", "date": conv[f"session_{i}_date_time"], "turns": turns})
    question = {"question": "What did Caroline research?", "question_date": sessions[-1]["date"]}
    return sessions, question


def locomo_speakers(sample: str = "conv-26") -> dict[str, str]:
    """The conversation's ``speaker_a`` and ``speaker_b``, as the harness sends them at ingest and search."""
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    conv = next(c for c in data if c["sample_id"] == sample)["conversation"]
    return {"speaker_a": conv["speaker_a"], "speaker_b": conv["speaker_b"]}


@dataclass
class Exchange:
    """What one drive of a child produced."""

    replies: dict[str, dict[str, Any]] = field(default_factory=dict)
    forwarded: int = 0  # requests the relay passed to the fake server
    fake_requests: int = 0  # requests the fake server recorded (chat and embeddings)
    requests: list[dict[str, Any]] = field(default_factory=list)  # their bodies, in arrival order
    attempts: list[dict[str, Any]] = field(default_factory=list)  # refused connections / lookups
    returncode: Optional[int] = None
    stderr: str = ""
    seconds: float = 0.0


class Child:
    """The adapter as a child process; ``ask(request)`` -> reply, with a timeout per request."""

    def __init__(self, python: Path, name: str, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([str(python), str(SYSTEMS / name / "adapter.py")], cwd=str(ROOT), env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if os.environ.get("SYSTEMS_DRIVER_VERBOSE"):
                sys.stderr.write(line)

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"{request['op']}: no reply in {timeout:.0f} s") from None
        if line is None:
            tail = "".join(self.err[-40:])
            raise RuntimeError(f"{request['op']}: the child exited ({self.proc.wait()}); stderr:\n{tail}")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def reap(self) -> Optional[int]:
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def drive(name: str, *, sessions: int = 2, limit: int = 10, timeout: float = 900.0,
          python: Optional[Path] = None, protocol: str = "common",
          options: Optional[dict[str, Any]] = None, sample: str = "conv-26",
          ask: Optional[Callable[[Path], dict[str, Any]]] = None,
          question: Optional[dict[str, Any]] = None) -> Exchange:
    """Build (or reuse) ``name``'s environment, then hello / ingest / search / close its adapter
    against a fake server; every socket but the relay's refused. Under ``protocol="native"`` an
    adapter whose hello says it answers is also asked to ``answer`` the question. ``sample``: the
    LoCoMo conversation; ``question`` (``{"question", "question_date"}``) replaces the driver's
    question about conv-26; ``ask(store)``: the question to search, read from the child's store
    after its ingestion."""
    from tests.fake_openai import FakeOpenAI

    python = python or build_env(name)
    convo, default_question = locomo_sessions(sample, count=sessions)
    question = question or default_question
    speakers = locomo_speakers(sample)
    out = Exchange()
    started = time.perf_counter()
    token = hashlib.sha256(os.urandom(16)).hexdigest()
    with FakeOpenAI() as fake, tempfile.TemporaryDirectory(prefix=f"sys-{name}-") as tmp:
        relay = start_relay(fake.base_url, name, token)
        guard = Path(tmp) / "guard"
        guard.mkdir()
        (guard / "sitecustomize.py").write_text(GUARD, encoding="utf-8")
        attempts = Path(tmp) / "attempts.jsonl"
        store = Path(tmp) / "store"
        store.mkdir()
        base = f"http://127.0.0.1:{relay.server_address[1]}"
        tiktoken_dir = tiktoken_cache()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(Path(tmp) / "home"),
               "LANG": "C.UTF-8", "PYTHONPATH": str(guard), "PYTHONUNBUFFERED": "1",
               "OPENAI_BASE_URL": f"{base}/v1", "OPENAI_API_KEY": token,
               "HARNESS_GATEWAY_URL": base, "HARNESS_GATEWAY_TOKEN": token,
               "HARNESS_SYSTEM_DIR": str(store), "HARNESS_LLM_MODEL": "gpt-4o-mini",
               "HARNESS_EMBED_MODEL": "text-embedding-3-small", "HARNESS_EMBED_DIM": "32",
               # tiktoken downloads its BPE files on first use: the child reads the harness's copies.
               **({"TIKTOKEN_CACHE_DIR": str(tiktoken_dir)} if tiktoken_dir else {}),
               "SYSTEMS_DRIVER_PORT": str(relay.server_address[1]), "SYSTEMS_DRIVER_ATTEMPTS": str(attempts)}
        child = Child(python, name, env)
        try:
            out.replies["hello"] = child.ask({"op": "hello", "protocol": protocol, "options": options or {}}, 300)
            out.replies["ingest"] = child.ask({"op": "ingest", "memory_id": "conv-26", "sessions": convo,
                                               "speakers": speakers}, timeout)
            if ask is not None:
                question = {**question, **ask(store)}
            out.replies["search"] = child.ask({"op": "search", "memory_id": "conv-26", "limit": limit,
                                               "speakers": speakers, **question}, timeout)
            if protocol == "native" and out.replies["hello"].get("answers"):
                out.replies["answer"] = child.ask({"op": "answer", "memory_id": "conv-26", "limit": limit,
                                                   "speakers": speakers, **question}, timeout)
            out.replies["close"] = child.ask({"op": "close"}, 120)
        finally:
            if child.proc.stdin is not None:
                child.proc.stdin.close()
            out.returncode = child.reap()
            out.stderr = "".join(child.err)
            relay.shutdown()
            relay.server_close()
            out.forwarded = relay.forwarded
            out.fake_requests = fake.request_count
            out.requests = list(fake.requests)
            if attempts.exists():
                out.attempts = [json.loads(line) for line in attempts.read_text().splitlines() if line.strip()]
    out.seconds = time.perf_counter() - started
    return out


if __name__ == "__main__":
    result = drive(sys.argv[1], protocol=sys.argv[2] if len(sys.argv) > 2 else "common")
    shown = {k: v for k, v in result.__dict__.items() if k not in ("stderr", "requests")}
    print(json.dumps(shown, indent=1, default=str)[:20000])
    print(result.stderr[-4000:], file=sys.stderr)


@contextlib.contextmanager
def adapter_imported(name: str, monkeypatch: Any, neighbours: tuple[str, ...] = ("_protocol",)) -> Iterator[Any]:
    """``systems/<name>/adapter.py`` imported in the test's process (an adapter imports only the
    standard library and its neighbours at import time), with the process's environment and sys.path
    restored afterwards and the neighbour modules it imported dropped."""
    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location(f"{name}_adapter", SYSTEMS / name / "adapter.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        for neighbour in neighbours:
            sys.modules.pop(neighbour, None)
