"""A memory system's exception is a counted failure of that memory or question, never a traceback that stops the run.

An outside system (every system but the harness's own, ``MemorySystem.outside``) runs code the
harness did not write: a KeyError in its retriever on a reply it did not expect, a child process that
crashed. Whatever it raises while ingesting a memory or searching for a question is caught here and
becomes a failure with a cause and a one-line message:

* ``system_error``: the system raised (in the harness's process, or in its own: a child's
  ``ok: false`` reply carries the exception it caught);
* a child's own causes: ``child_crash``, ``child_timeout``, ``child_bad_output``
  (``common.systems.process``);
* an LLM call that failed after its retries, wherever the system wrapped it: its cause (``http_429``,
  ``timeout``, ...), so the stage's one-line error can say what to do about the endpoint.

A failed ingestion leaves ``failed.json`` beside the memory's state and fails its questions' 06 rows;
a failed search fails its row. Both rows carry ``method_info.failed`` (the cause) and where it
happened, 07 answers neither (``retrieval_failed``, a counted failure of the question), the stage
goes on and stops only above ``run.max_error_rate``, and the next run redoes exactly them. The
harness's own errors (a config, an endpoint, a system's environment that cannot be built) and an
interrupt still stop the run, with their one line.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Optional

from common.core.batch import BatchDeferred
from common.core.config import ConfigError
from common.core.llm import EndpointNotConfigured, LLMCallError
from common.core.schema import Question, RetrievalRow
from common.systems.base import Found, Spent, render
from common.systems.envs import SystemEnvError

SYSTEM_ERROR = "system_error"
TRACE_LINES = 30  # the last lines of a traceback kept in the failed row (the whole one goes nowhere else)
# Errors of the harness, not of the system: they stop the run with one line, as before any system ran.
HARNESS_ERRORS: tuple[type[BaseException], ...] = (ConfigError, EndpointNotConfigured, SystemEnvError, BatchDeferred)


class ChildFailure(RuntimeError):
    """A child that crashed, hung, or answered out of protocol; ``cause`` is the counted cause."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(f"{cause}: {message}")
        self.cause = cause


def contained(exc: BaseException) -> bool:
    """Whether ``exc``, raised by an outside system, is that system's failure (counted, the run goes
    on) rather than the harness's or the user's (an interrupt): those propagate."""
    return isinstance(exc, Exception) and not isinstance(exc, HARNESS_ERRORS)


def cause_of(exc: BaseException) -> str:
    """The counted cause of a system's exception (see the module's docstring)."""
    if isinstance(exc, ChildFailure):
        return exc.cause
    seen: set[int] = set()
    link: Optional[BaseException] = exc
    while link is not None and id(link) not in seen:  # a system's own wrapper around our LLM error
        if isinstance(link, LLMCallError):
            return link.cause
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return SYSTEM_ERROR


def message(exc: BaseException, limit: int = 500) -> str:
    """One line: the exception's type and text (a ChildFailure's text already names its cause)."""
    text = str(exc) if isinstance(exc, ChildFailure) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())[:limit]


def trace(exc: BaseException) -> str:
    """The last lines of the exception's traceback, for the failed row (what a bug report needs)."""
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip().splitlines()
    return "\n".join(lines[-TRACE_LINES:])


def error_text(cause: str, text: str) -> str:
    """A failed row's ``error``: ``<cause>: <message>`` (the cause once, whatever the message says)."""
    return text if text.startswith(f"{cause}:") else f"{cause}: {text}"


def failed_row(question: Question, name: str, cause: str, text: str, where: str, seconds: float = 0.0,
               info: Optional[dict[str, Any]] = None) -> RetrievalRow:
    """The 06 row of a question whose search (``where="search"``) or memory's ingestion
    (``"ingest"``) failed: no evidence, the error with its cause, redone by the next run."""
    found = Found([], Spent(seconds=round(seconds, 4)), {"failed": cause, "failed_in": where, **(info or {})})
    row = render(question, name, found, found.spent.seconds)
    row.fallback_used, row.error = True, error_text(cause, text)
    return row


def search_row(system: Any, question: Question, view: Any) -> RetrievalRow:
    """``system.row(question, view)``; an outside system's exception is that question's failed row."""
    started = time.perf_counter()
    try:
        row: RetrievalRow = system.row(question, view)
        return row
    except BaseException as exc:
        if not (getattr(system, "outside", False) and contained(exc)):
            raise
        return failed_row(question, system.name, cause_of(exc), message(exc), "search",
                          time.perf_counter() - started, {"traceback": trace(exc)})


def ingest_failed_row(question: Question, name: str, failure: dict[str, Any]) -> RetrievalRow:
    """The 06 row of a question whose memory's ingestion failed in this run (``failed.json``'s content)."""
    return failed_row(question, name, str(failure.get("cause") or SYSTEM_ERROR),
                      f"ingestion of {question.memory_id} failed: {failure.get('error', '')}", "ingest")


def retrieval_failed(row: RetrievalRow) -> bool:
    """Whether a 06 row is a system's failure (07 does not answer it)."""
    return bool(row.error) and bool(row.method_info.get("failed"))
