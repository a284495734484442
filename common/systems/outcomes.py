"""What a memory system did that is not an LLM call: every call it made through ``ctx.llm``, the
errors it logged or swallowed while ingesting, how many items its memory holds, and the run's
summary of those outcomes (empty memories, empty buffers, evidence items and buffer tokens).

The harness fills these in around each ingestion and each search, so a system gets them without
writing anything:

* ``Account``: one per memory ingested and one per question searched, made current (a context
  variable) while the system runs. ``Recorder`` (what ``ctx.llm`` is) appends the record of every
  completion made under it, with its role; ``ErrorCapture`` (a logging handler on ERROR, installed
  while 06 runs) appends every error a system logs there. A system may add its own (``note_items``,
  ``note_error``: the process boundary reports the child's count and errors this way).
* ``summary(run_dir)``: read back from 06's rows and the memories' markers: ``empty_memory`` (a
  memory that holds no item after ingestion), ``empty_buffer`` (a question whose search returned
  no evidence), errors by cause, evidence items and buffer tokens per question (mean, p95).
"""
from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np

from common.core import artifacts, long_texts
from common.core.io import read_jsonl

SAMPLES = 5  # error messages kept per memory (the counts are complete)


@dataclass
class Account:
    """What one ingestion or one search did besides returning its result."""

    calls: list[dict[str, Any]] = field(default_factory=list)  # ``Completion.record`` + role
    errors: Counter = field(default_factory=Counter)  # cause -> count
    samples: list[str] = field(default_factory=list)
    items: Optional[int] = None  # items the memory holds (None: the system does not say)
    # What the system built for this memory beyond its item count, by name (HippoRAG's triples and
    # facts, a graph's nodes and edges, passages per session, memories carrying a date).
    built: dict[str, Any] = field(default_factory=dict)
    # A search's fallbacks by kind (HippoRAG's dense passage retrieval when no fact survives): the
    # question was answered, but not by the system's own retrieval.
    fallbacks: Counter = field(default_factory=Counter)
    # Texts over the embedding model's limit embedded for this memory or search (the harness's
    # embedder counts them, whichever door: ctx.embedder() or the gateway's /v1/embeddings).
    long: long_texts.Tally = field(default_factory=long_texts.Tally, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def error(self, cause: str, message: str) -> None:
        with self.lock:
            self.errors[cause] += 1
            if len(self.samples) < SAMPLES:
                self.samples.append(f"{cause}: {' '.join(message.split())[:300]}")

    def outcome(self) -> dict[str, Any]:
        """The marker's ``outcome``: items, errors by cause, a few messages, what was built."""
        out = {"items": self.items, "errors": dict(sorted(self.errors.items())), "error_samples": list(self.samples)}
        if self.built:
            out["built"] = dict(sorted(self.built.items()))
        if self.long.count:
            out["long_texts"] = self.long.count
        return out

    def search_outcome(self) -> dict[str, Any]:
        """A search's ``method_info.outcome``: its errors by cause and fallbacks by kind (empty: {})."""
        out: dict[str, Any] = {}
        if self.errors:
            out.update(errors=dict(sorted(self.errors.items())), error_samples=list(self.samples))
        if self.fallbacks:
            out["fallbacks"] = dict(sorted(self.fallbacks.items()))
        if self.long.count:
            out["long_texts"] = self.long.count
        return out


_current: contextvars.ContextVar[Optional[Account]] = contextvars.ContextVar("system_account", default=None)


class active:
    """``with active(account):`` makes ``account`` current for the calls and logs of the block."""

    def __init__(self, account: Account) -> None:
        self.account = account
        self.token: Optional[contextvars.Token[Optional[Account]]] = None
        self.tallying = long_texts.tallying(account.long)

    def __enter__(self) -> Account:
        self.token = _current.set(self.account)
        self.tallying.__enter__()
        return self.account

    def __exit__(self, *exc: Any) -> None:
        assert self.token is not None
        self.tallying.__exit__(*exc)
        _current.reset(self.token)


def current() -> Optional[Account]:
    return _current.get()


def note_items(n: int) -> None:
    """The memory being ingested holds ``n`` items (0: an empty memory, counted)."""
    acct = _current.get()
    if acct is not None:
        acct.items = int(n)


def note_built(**counts: Any) -> None:
    """What the memory being ingested holds, by name (``note_built(triples=120, facts=95)``)."""
    acct = _current.get()
    if acct is not None:
        with acct.lock:
            acct.built.update(counts)


def note_fallback(kind: str, message: str = "") -> None:
    """The question being searched fell back from the system's own retrieval (counted by kind)."""
    acct = _current.get()
    if acct is not None:
        with acct.lock:
            acct.fallbacks[kind] += 1
            if message and len(acct.samples) < SAMPLES:
                acct.samples.append(f"fallback {kind}: {' '.join(message.split())[:300]}")


def note_error(cause: str, message: str) -> None:
    """An error the system met and went on after (counted per memory with its cause)."""
    acct = _current.get()
    if acct is not None:
        acct.error(cause, message)


class Recorder:
    """``ctx.llm`` as a system sees it: the harness's client, every completion recorded in the
    current account with its role, whatever the system does with the reply."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def complete(self, role: str, messages: Any, *args: Any, **kwargs: Any) -> Any:
        c = self._client.complete(role, messages, *args, **kwargs)
        acct = _current.get()
        if acct is not None:
            with acct.lock:
                acct.calls.append({**c.record(kwargs.get("prompt_id") or f"system.{role}"), "role": role})
        return c


def merge_calls(own: list[dict[str, Any]], recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The system's own call records plus those the harness recorded that it left out (a system
    that already lists its calls, as mem0's adapter does, is not counted twice)."""
    key = lambda c: (c.get("cache_key"), bool(c.get("cached")), c.get("latency"))  # noqa: E731
    listed = Counter(key(c) for c in own)
    out = list(own)
    for c in recorded:
        if listed[key(c)] > 0:
            listed[key(c)] -= 1
        else:
            out.append(c)
    return out


class ErrorCapture(logging.Handler):
    """Every ERROR a system logs while an account is current (the thread's, or a task's that
    copied its context) is counted in it, cause ``logged_error`` plus the logger's name."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)

    def emit(self, record: logging.LogRecord) -> None:
        acct = _current.get()
        if acct is None:
            return
        try:
            message = record.getMessage()
        except Exception:  # a bad format string in a system's log call is still an error logged
            message = str(record.msg)
        acct.error("logged_error", f"{record.name}: {message}")


class capture_logged_errors:
    """``with capture_logged_errors():`` ERROR records of every logger reach the current account,
    those of loggers a system silenced (level above ERROR, or not propagating) too."""

    def __enter__(self) -> "capture_logged_errors":
        self.handler = ErrorCapture()
        self.root = logging.getLogger()
        self.root.addHandler(self.handler)
        self.silenced: list[tuple[logging.Logger, int]] = []
        for logger in list(logging.Logger.manager.loggerDict.values()):
            if isinstance(logger, logging.Logger) and (logger.level > logging.ERROR or not logger.propagate):
                if not logger.propagate:
                    logger.addHandler(self.handler)
                if logger.level > logging.ERROR:
                    self.silenced.append((logger, logger.level))
                    logger.setLevel(logging.ERROR)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.root.removeHandler(self.handler)
        for logger in list(logging.Logger.manager.loggerDict.values()):
            if isinstance(logger, logging.Logger) and self.handler in logger.handlers:
                logger.removeHandler(self.handler)
        for logger, level in self.silenced:
            logger.setLevel(level)


# ---------------------------------------------------------------------------- the run's summary
def evidence_items(row: dict[str, Any]) -> int:
    """Items in a question's buffer: an outside system's evidence, else EnSIMem's episodes."""
    info = row.get("method_info") or {}
    if isinstance(info.get("evidence"), list):
        return len(info["evidence"])
    return len(row.get("episode_ids") or [])


def empty_buffer(row: dict[str, Any]) -> bool:
    """A search that gave the answer model nothing: no evidence item, or a blank buffer."""
    if row.get("error"):  # a failed search is a failure with its own cause, not an empty buffer
        return False
    info = row.get("method_info") or {}
    if isinstance(info.get("evidence"), list):
        return not info["evidence"] or not str(row.get("buffer_text") or "").strip()
    return not str(row.get("buffer_text") or "").strip()


def _stats(values: list[float]) -> dict[str, Optional[float]]:
    if not values:
        return {"mean": None, "p95": None}
    return {"mean": round(float(np.mean(values)), 2), "p95": round(float(np.percentile(values, 95)), 2)}


def markers(run_dir: Path) -> Iterator[dict[str, Any]]:
    for path in sorted((run_dir / "06_retrieve" / "memory").glob("*/ingested.json")):
        yield json.loads(path.read_text(encoding="utf-8"))


def failed_memories(run_dir: Path) -> dict[str, int]:
    """Memories whose last ingestion failed (``failed.json`` beside their state), by cause."""
    causes: Counter = Counter()
    for path in sorted((run_dir / "06_retrieve" / "memory").glob("*/failed.json")):
        causes[str(json.loads(path.read_text(encoding="utf-8")).get("cause") or "unknown")] += 1
    return dict(causes)


def _search_outcome(row: dict[str, Any]) -> dict[str, Any]:
    return (row.get("method_info") or {}).get("outcome") or {}


def _empty_memories(marks: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(memories whose emptiness is known, empty ones, of those the inferred ones).

    A memory whose system reported its item count is empty at 0 items. One whose system reports no
    count (a user's own system) is judged by what its searches returned: empty when every search of it that
    did not fail returned no evidence (inferred, and counted as such), not empty when one returned
    something; with no successful search it is not counted either way."""
    searched: dict[str, list[bool]] = {}
    for r in rows:
        if not r.get("error"):
            searched.setdefault(str(r.get("memory_id")), []).append(evidence_items(r) > 0)
    known = empty = inferred = 0
    for m in marks:
        items = (m.get("outcome") or {}).get("items")
        if items is not None:
            known += 1
            empty += items == 0
            continue
        found = searched.get(str(m.get("memory_id")))
        if found:
            known += 1
            if not any(found):
                empty += 1
                inferred += 1
    return known, empty, inferred


def _sum_counts(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts by name summed over memories (what each built)."""
    total: Counter = Counter()
    for block in blocks:
        total.update({k: v for k, v in block.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return dict(sorted(total.items()))


def summary(run_dir: Path) -> dict[str, Any]:
    """The memory system's outcomes in a run: counted, never folded into a clean success.

    ``outcomes``: empty memories (reported or inferred, ``empty_memory_inferred``) and empty
    buffers; errors met while ingesting (``ingest_errors``) and while searching (``search_errors``)
    by cause; memories whose ingestion failed (``ingest_failed``) and questions whose search failed
    (``search_failed``) by cause, and the questions of failed memories (``failed_memory_questions``);
    the fallbacks taken (``search_fallbacks``: questions per kind); what the memories hold by name,
    summed (``built``, over ``built_memories``); texts over the embedding model's limit
    (``long_texts``: ingest, search); evidence items and buffer tokens per question."""
    rows = read_jsonl(artifacts.path(run_dir, "retrievals"), missing_ok=True)
    marks = list(markers(run_dir))
    errors: Counter = Counter()
    for m in marks:
        errors.update((m.get("outcome") or {}).get("errors") or {})
    search_errors: Counter = Counter()
    fallbacks: Counter = Counter()
    search_failed: Counter = Counter()
    failed_memory_questions = 0
    for r in rows:
        searched = _search_outcome(r)
        search_errors.update(searched.get("errors") or {})
        fallbacks.update({kind: 1 for kind, n in (searched.get("fallbacks") or {}).items() if n})
        info = r.get("method_info") or {}
        if r.get("error") and info.get("failed"):
            if info.get("failed_in") == "ingest":
                failed_memory_questions += 1
            else:
                search_failed[str(info["failed"])] += 1
    known, empty, inferred = _empty_memories(marks, rows)
    outcomes = {"empty_memory": empty, "empty_buffer": sum(1 for r in rows if empty_buffer(r))}
    built: list[dict[str, Any]] = [m["outcome"]["built"] for m in marks if (m.get("outcome") or {}).get("built")]
    long = {"ingest": sum(int((m.get("outcome") or {}).get("long_texts") or 0) for m in marks),
            "search": sum(int(_search_outcome(r).get("long_texts") or 0) for r in rows)}
    return {"questions": len(rows), "memories": len(marks), "memories_counted": known,
            "outcomes": {k: v for k, v in outcomes.items() if v},
            **({"empty_memory_inferred": inferred} if inferred else {}),
            "ingest_errors": dict(sorted(errors.items())),
            "ingest_failed": failed_memories(run_dir),
            "search_errors": dict(sorted(search_errors.items())),
            "search_failed": dict(sorted(search_failed.items())),
            **({"failed_memory_questions": failed_memory_questions} if failed_memory_questions else {}),
            "search_fallbacks": dict(sorted(fallbacks.items())),
            "built": _sum_counts(built), "built_memories": len(built),
            "long_texts": {k: v for k, v in long.items() if v},
            "evidence_items": _stats([float(evidence_items(r)) for r in rows]),
            "buffer_tokens": _stats([float(r.get("buffer_tokens") or 0) for r in rows])}
