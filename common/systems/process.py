"""A memory system in its own environment and process: ``method.name=<name>`` with ``systems/<name>/``.

The harness starts ``.systems/<name>/venv/bin/python systems/<name>/adapter.py`` (the environment
is built on first use, ``common.systems.envs``) and talks to it in JSON lines on stdin/stdout, one
request then one reply (the protocol is in docs/memory-systems.md):

    {"op": "hello", "options": {...}, "protocol": "common"|"native"}
                                                      -> {"ok": true, "system": "...", "version": "...",
                                                          "answers": <bool, optional>,
                                                          "settings": {<name>: <value>} (optional)}
    {"op": "ingest", "memory_id", "sessions": [...], "speakers": {"speaker_a", "speaker_b"}}
                                                      -> {"ok": true, "items": <int>, "errors": [<str>],
                                                          "built": {<name>: <number>} (optional)}
    {"op": "search", "memory_id", "question", "question_date", "limit", "speakers"}
                                                      -> {"ok": true, "evidence": [...], "context": "...",
                                                          "errors": [<str>], "fallbacks": {<kind>: <int>},
                                                          "answer_slots": {<slot>: <str>} (all optional)}
    {"op": "answer", "memory_id", "question", "question_date", "limit"}
                                                      -> the search reply plus "answer": <str>
    {"op": "close"}                                   -> {"ok": true}, then the child exits

Any reply may be ``{"ok": false, "error": "..."}``. ``answer`` is sent instead of ``search`` only
under ``systems.protocol: native`` to a child whose hello said ``"answers": true`` (a system whose
reference evaluation lets its own agent answer): its evidence is what the agent retrieved, its
``answer`` the answer 07 takes. ``speakers`` names the conversation's two speakers as its source
does (LoCoMo's ``speaker_a`` and ``speaker_b``; a benchmark without them: its session's speakers,
else the first two seen), for a system whose reference fixes a role by speaker (MemoryOS's user is
``speaker_a``) or writes their names. ``built`` says what the memory holds beyond its item count
(triples, graph nodes, passages per session, ...); ``errors`` and ``fallbacks`` of a search are
counted per question. The child's environment holds the gateway's
URL and a token made for this run (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``HARNESS_GATEWAY_*``),
its store directory, the models' names and the embedding size, and nothing of the user's
environment but ``PATH`` (no API key: its LLM and embedding calls can only reach the gateway,
which serves them with the harness's client and embedding model, cached and in the ledger).

Children: one per memory ingested (started, asked to ingest, closed), then one per memory
searched, kept for that memory's next questions; at most ``systems.ingest_concurrency`` search
children are alive (the least recently used one is closed), all are closed when 06 ends. Every child is its own
process group, killed with its group when it is done, when it fails, and when the harness exits.

Failures, each counted with its cause and never a hung run: ``child_crash`` (the child exited or
closed its output), ``child_timeout`` (no reply within ``systems.child_timeout`` seconds, or
``systems.child_ingest_timeout`` for an ingestion), ``child_bad_output`` (a reply that is not one
JSON object of the right shape), ``system_error`` (the child's own ``ok: false``: the system raised
in its process). A failed ingestion fails that memory (redone by the next run); a failed search
fails that question's row (``common.systems.failures``). The child's stderr goes to a log beside the
memory's state (``child_ingest.log``, ``child_search.log``); lines that log an error (``ERROR``,
``CRITICAL``, a traceback) are counted (``logged_error``) in the memory's account while it ingests
and in the question's while it is searched, with the errors the reply lists (``system_error``); a
line that only repeats an error the reply lists is not counted twice.
"""
from __future__ import annotations

import atexit
import hashlib
import json
import os
import queue
import re
import signal
import subprocess
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import ExitStack
from pathlib import Path
from typing import IO, Any, Callable, ClassVar, Optional

from common.core.schema import Question, RetrievalRow
from common.core.tokens import count_tokens, seed_tiktoken_cache, tiktoken_cache_dir
from common.method.render import MemoryView
from common.systems import envs, failures, outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, render, turn_text
from common.systems.failures import ChildFailure

# Environment variables a child may also have: extra ones a test or a user sets here (e.g. the
# tests' PYTHONPATH with a socket guard), never the user's environment as a whole.
CHILD_ENV: dict[str, str] = {}
LOGGED_ERROR = re.compile(r"\b(ERROR|CRITICAL|FATAL)\b|^Traceback \(most recent call last\)")
CLOSE_SECONDS = 10.0  # a child asked to close gets this long to exit before its group is killed
_children: "weakref.WeakSet[Child]" = weakref.WeakSet()


def tiktoken_env() -> dict[str, str]:
    """``TIKTOKEN_CACHE_DIR`` for a child: tiktoken downloads its BPE files on first use, and a
    child may reach nothing but the gateway, so it reads the harness's verified copies."""
    folder = tiktoken_cache_dir()
    if folder is None:
        return {}
    for encoding in ("cl100k_base", "o200k_base"):  # what the systems count tokens with
        try:
            seed_tiktoken_cache(encoding)
        except RuntimeError:  # a corrupt packaged file: the child falls back as tiktoken does
            pass
    return {"TIKTOKEN_CACHE_DIR": str(folder)}


def _tail(path: Path, n: int = 400) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return " ".join(text[-n:].split())


class Child:
    """One adapter process: requests in, replies out, stderr to ``log``, reaped in every case."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, log: Path, label: str) -> None:
        self.label, self.log = label, log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._err: IO[bytes] = log.open("ab")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     env=env, cwd=str(cwd), start_new_session=True)
        self._lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self.log_offset = 0  # how far the log has been read (``new_log_lines``)
        self._reader = threading.Thread(target=self._read, name=f"child-{label}", daemon=True)
        self._reader.start()
        _children.add(self)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def request(self, message: dict[str, Any], timeout: float,
                check: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
        """The reply to ``message``; ``check`` names what is wrong with a reply's shape ('' if nothing)."""
        op = message.get("op")
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            raise ChildFailure("child_crash", f"{self.label}: the child exited before {op} "
                                              f"(exit {self.proc.returncode}); stderr: {_tail(self.log)}") from None
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise ChildFailure("child_timeout", f"{self.label}: no reply to {op} within {timeout:g} s") from None
        if line is None:
            self.kill()
            raise ChildFailure("child_crash", f"{self.label}: the child exited during {op} "
                                              f"(exit {self.proc.returncode}); stderr: {_tail(self.log)}")
        try:
            reply = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            self.kill()
            raise ChildFailure("child_bad_output", f"{self.label}: reply to {op} is not JSON: "
                                                   f"{line[:200]!r}") from None
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            self.kill()
            raise ChildFailure("child_bad_output", f"{self.label}: reply to {op} is not an object with "
                                                   f"a boolean 'ok': {line[:200]!r}")
        if not reply["ok"]:  # the system raised in its own process (the protocol caught it)
            raise ChildFailure(failures.SYSTEM_ERROR,
                               f"{self.label}: {op}: {' '.join(str(reply.get('error')).split())[:300]}")
        problem = check(reply)
        if problem:
            self.kill()
            raise ChildFailure("child_bad_output", f"{self.label}: reply to {op}: {problem}")
        return reply

    def new_log_lines(self) -> list[str]:
        """The whole lines the child wrote to its log since the last call (or since hello)."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.log_offset)
                chunk = f.read()
        except OSError:
            return []
        done = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self.log_offset += done
        return chunk[:done].decode("utf-8", errors="replace").splitlines()

    def close(self, timeout: float = CLOSE_SECONDS) -> None:
        """Ask the child to close, then reap its whole process group whatever it did."""
        try:
            if self.proc.poll() is None:
                self.request({"op": "close"}, timeout, lambda r: "")
                self.proc.wait(timeout=timeout)
        except (ChildFailure, subprocess.TimeoutExpired):
            pass
        finally:
            self.kill()

    def kill(self) -> None:
        """Kill the child's process group (its own children too) and wait for it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
            pass
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        if not self._err.closed:
            self._err.close()


@atexit.register
def _reap_all() -> None:
    for child in list(_children):
        child.kill()


# ---------------------------------------------------------------------------- reply shapes
def _check_hello(r: dict[str, Any]) -> str:
    if not (isinstance(r.get("system"), str) and isinstance(r.get("version"), str)):
        return "hello needs 'system' and 'version' strings"
    return "" if isinstance(r.get("settings", {}), dict) else "hello's 'settings' must be a mapping"


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_errors(r: dict[str, Any]) -> str:
    errors = r.get("errors", [])
    if not isinstance(errors, list) or not all(isinstance(e, str) for e in errors):
        return "'errors' must be a list of strings"
    return ""


def _check_ingest(r: dict[str, Any]) -> str:
    items, built = r.get("items"), r.get("built", {})
    if not isinstance(items, int) or isinstance(items, bool) or items < 0:
        return f"'items' must be a non-negative integer, not {items!r}"
    if not isinstance(built, dict) or not all(isinstance(k, str) and _is_number(v) for k, v in built.items()):
        return "'built' must map names to numbers"
    return _check_errors(r)


def _check_search(r: dict[str, Any]) -> str:
    evidence, context = r.get("evidence"), r.get("context", "")
    if not isinstance(evidence, list):
        return "'evidence' must be a list"
    for i, e in enumerate(evidence):
        if not isinstance(e, dict) or not isinstance(e.get("text"), str):
            return f"evidence[{i}] needs a 'text' string"
        score = e.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            return f"evidence[{i}].score must be a number or null"
        ids = e.get("source_turn_ids", [])
        if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
            return f"evidence[{i}].source_turn_ids must be a list of strings"
    if not isinstance(context, str):
        return "'context' must be a string"
    fallbacks = r.get("fallbacks", {})
    if not isinstance(fallbacks, dict) or not all(isinstance(k, str) and isinstance(v, int)
                                                  and not isinstance(v, bool) and v >= 0
                                                  for k, v in fallbacks.items()):
        return "'fallbacks' must map kinds to non-negative integers"
    if "answer" in r and not isinstance(r["answer"], str):
        return "'answer' must be a string"
    slots = r.get("answer_slots", {})
    if not isinstance(slots, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in slots.items()):
        return "'answer_slots' must map slot names to strings"
    return _check_errors(r)


def _check_answer(r: dict[str, Any]) -> str:
    return _check_search(r) or ("" if isinstance(r.get("answer"), str) else "an answer reply needs an 'answer' string")


def logged_errors(lines: list[str], reported: list[str]) -> list[str]:
    """The log lines that report an error (``LOGGED_ERROR``) and are not one the reply already lists
    (a logger's record both printed and returned by the protocol is one error, not two)."""
    known = [r.split(": ", 1)[-1].strip() for r in reported]
    return [line for line in lines if LOGGED_ERROR.search(line) and not any(k and k in line for k in known)]


def sessions_payload(view: MemoryView, include_images: bool) -> list[dict[str, Any]]:
    """A memory's sessions as the protocol sends them (what a system may see, no gold)."""
    return [{"session_id": s.session_id, "date": s.date_time,
             "turns": [{"turn_id": t.dia_id, "speaker": t.speaker, "text": turn_text(t, include_images)}
                       for t in s.turns]} for s in view.sessions]


def speakers_payload(view: MemoryView) -> dict[str, str]:
    """The conversation's two speakers: the source's ``speaker_a``/``speaker_b`` (every session of a
    LoCoMo memory carries them in that order), else the first two speakers seen ('' when missing)."""
    named = next((s.speakers for s in view.sessions if len(s.speakers) >= 2), None)
    names = list(named[:2]) if named else list(dict.fromkeys(t.speaker for s in view.sessions for t in s.turns))[:2]
    names += [""] * (2 - len(names))
    return {"speaker_a": names[0], "speaker_b": names[1]}


class ProcessSystem(MemorySystem):
    """The harness's side of the protocol: a ``MemorySystem`` whose ingest and search are a child's."""

    stages = PROTOCOL_STAGES
    role = "memory"
    uses_gateway = True
    system: ClassVar[str] = ""  # the directory name under systems/

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.opts = dict(ctx.options)
        self.limit = int(self.opts.get("limit", 10))
        # memory id -> (child, its gateway session, what closes the session), least recent first
        self.searching: "OrderedDict[str, tuple[Child, Any, ExitStack]]" = OrderedDict()
        self.keep = max(1, int(ctx.cfg.systems.ingest_concurrency))
        self.hello: dict[str, Any] = {}
        self._python: Optional[Path] = None

    def settings(self) -> dict[str, Any]:
        folder = envs.system_dir(self.system)
        digests = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest()[:16]
                   for f in ("adapter.py", "requirements.txt", "pip-args.txt") if (folder / f).is_file()}
        return {**super().settings(), "system": self.system, **digests}

    def extra(self) -> dict[str, Any]:
        return {**super().extra(), "process": {"system": self.system,
                                               **{k: v for k, v in self.hello.items() if k != "ok"}}}

    def search_settings(self) -> Optional[dict[str, Any]]:
        """The child's own resolved settings (its hello's ``settings``), and the ``limit`` it is sent
        unless those name a depth of their own (``k``, ``top_k``: the adapter decides it); None
        before any child said hello in this invocation (a resumed run)."""
        if not self.hello:
            return None
        own = dict(self.hello.get("settings") or {})
        return own if any(k in own for k in ("k", "top_k", "limit")) else {"limit": self.limit, **own}

    def version(self) -> Optional[str]:
        return str(self.hello["version"]) if self.hello.get("version") else None

    # ---- children
    def _gateway(self) -> Any:
        if self.ctx.gateway is None:
            raise RuntimeError(f"{self.system}: no gateway: the harness starts one for a system in its own process")
        return self.ctx.gateway

    def _start(self, store: Path, base_url: str, token: str, log: Path, label: str) -> Child:
        if self._python is None:
            self._python = envs.build(self.system)
        store.mkdir(parents=True, exist_ok=True)
        home = envs.envs_root() / self.system / "home"  # the system's own caches, not the user's
        home.mkdir(parents=True, exist_ok=True)
        root = base_url.removesuffix("/v1")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
               "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
               "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": token,
               "HARNESS_GATEWAY_URL": root, "HARNESS_GATEWAY_TOKEN": token,
               "HARNESS_SYSTEM_DIR": str(store),
               "HARNESS_LLM_MODEL": self.ctx.cfg.role(self.role or "memory").model,
               "HARNESS_EMBED_MODEL": self.ctx.cfg.embedding.model,
               "HARNESS_EMBED_DIM": str(self.ctx.embedder().dim), **tiktoken_env(), **CHILD_ENV}
        folder = envs.system_dir(self.system)
        child = Child([str(self._python), "-u", str(folder / "adapter.py")], env, folder, log, label)
        try:
            self.hello = child.request({"op": "hello", "options": self.opts, "protocol": self.protocol},
                                       self._timeout(), _check_hello)
        except BaseException:
            child.kill()
            raise
        child.new_log_lines()  # what it logged while starting is not the first request's
        return child

    def _timeout(self, ingest: bool = False) -> float:
        sc = self.ctx.cfg.systems
        return float(sc.child_ingest_timeout if ingest else sc.child_timeout)

    def close(self) -> None:
        while self.searching:
            self._close_one(next(iter(self.searching)))

    def _close_one(self, mid: str) -> None:
        child, _, stack = self.searching.pop(mid)
        try:
            child.close()
        finally:
            stack.close()

    # ---- the protocol
    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        spent, started = Spent(), time.perf_counter()
        log = state_dir / "child_ingest.log"
        with self._gateway().session(spent) as session:
            child = self._start(state_dir / "store", session.base_url, session.api_key, log,
                                f"{self.system} ingest {view.memory_id}")
            try:
                reply = child.request({"op": "ingest", "memory_id": view.memory_id,
                                       "sessions": sessions_payload(view, self.ctx.include_images),
                                       "speakers": speakers_payload(view)},
                                      self._timeout(ingest=True), _check_ingest)
            finally:
                child.close()
        for error in reply.get("errors", []):
            outcomes.note_error("system_error", error)
        for line in logged_errors(log.read_text(encoding="utf-8", errors="replace").splitlines(),
                                  reply.get("errors", [])):
            outcomes.note_error("logged_error", line)
        outcomes.note_items(reply["items"])
        if reply.get("built"):
            outcomes.note_built(**reply["built"])
        self.ctx.advance(len(view.sessions))
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def _searcher(self, mid: str) -> tuple[Child, Any]:
        """The search child of memory ``mid``: kept for its next questions, at most
        ``systems.ingest_concurrency`` children alive (the least recently used is closed)."""
        if mid in self.searching:
            self.searching.move_to_end(mid)
            child, session, _ = self.searching[mid]
            if child.proc.poll() is None:
                return child, session
            self._close_one(mid)
        while len(self.searching) >= self.keep:
            self._close_one(next(iter(self.searching)))
        stack = ExitStack()
        try:
            session = stack.enter_context(self._gateway().session(Spent()))
            child = self._start(self.ctx.state_dir / mid / "store", session.base_url, session.api_key,
                                self.ctx.state_dir / mid / "child_search.log", f"{self.system} search {mid}")
        except BaseException:
            stack.close()
            raise
        self.searching[mid] = (child, session, stack)
        return child, session

    def search(self, question: Question, view: MemoryView) -> Found:
        started, spent = time.perf_counter(), Spent()
        child, session = self._searcher(question.memory_id)
        self._gateway().rebind(session.api_key, spent)  # this question's calls land in its own account
        answers = self.protocol == "native" and bool(self.hello.get("answers"))
        try:
            reply = child.request({"op": "answer" if answers else "search", "memory_id": question.memory_id,
                                   "question": question.question,
                                   "question_date": question.question_date or None, "limit": self.limit,
                                   "speakers": speakers_payload(view)},
                                  self._timeout(), _check_answer if answers else _check_search)
        except ChildFailure:
            for line in logged_errors(child.new_log_lines(), []):  # what it logged before it failed
                outcomes.note_error("logged_error", line)
            self._close_one(question.memory_id)  # the memory's next question starts a fresh child
            raise
        for error in reply.get("errors", []):
            outcomes.note_error("system_error", error)
        for line in logged_errors(child.new_log_lines(), reply.get("errors", [])):  # child_search.log
            outcomes.note_error("logged_error", line)
        for kind, n in (reply.get("fallbacks") or {}).items():
            for _ in range(n):
                outcomes.note_fallback(kind)
        evidence = [Evidence(e["text"], list(e.get("source_turn_ids") or []), str(e.get("timestamp") or ""),
                             None if e.get("score") is None else float(e["score"]), str(e.get("source") or ""))
                    for e in reply["evidence"]]
        spent.seconds = round(time.perf_counter() - started, 4)
        info = {"context": reply.get("context", ""), "limit": self.limit}
        if reply.get("answer_slots"):  # the reference answer prompt's own slots, as the system rendered them
            info["answer_slots"] = reply["answer_slots"]
        return Found(evidence, spent, info, answer=reply["answer"] if answers else None)

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        """The system's own rendering (``context``) is the buffer; a failed child fails the row."""
        started = time.perf_counter()
        try:
            found = self.search(question, view)
        except ChildFailure as exc:
            return failures.failed_row(question, self.name, exc.cause, str(exc), "search",
                                       time.perf_counter() - started)
        row = render(question, self.name, found, round(time.perf_counter() - started, 4))
        context = found.info.get("context") or ""
        if context.strip():
            row.buffer_text, row.buffer_tokens = context, count_tokens(context)
        return row


def process_class(name: str) -> type[ProcessSystem]:
    """The ``MemorySystem`` class of ``systems/<name>/``."""
    return type(f"Process_{re.sub(r'[^A-Za-z0-9_]', '_', name)}", (ProcessSystem,), {"name": name, "system": name})
