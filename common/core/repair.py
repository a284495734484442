"""One call, one repair: the JSON-reply discipline shared by partition, extraction and planning.

The first reply is parsed and validated; if that raises ``ValueError`` a single repair call is
made with the error and the failed reply. If the repair fails too (or a call fails), the
exception reaches the caller, which records its deterministic fallback with ``fallback_error``:
nothing is dropped.

``prompt_ids`` are the audit ids recorded with each call, ``<prompt id>[/<variant>]`` (extraction
records ``extract_user/<granularity>``); the call itself sends the bare prompt id, the template's
file stem, as ``prompt_id`` (the ``X-Prompt-Id`` header).
"""
from __future__ import annotations

from typing import Any, Callable, TypeVar

from common.core.llm import LLMCallError, LLMClient

T = TypeVar("T")
Messages = list[dict[str, str]]


def complete_with_repair(client: LLMClient, role: str, messages: Messages, parse: Callable[[str], T],
                         repair_messages: Callable[[str, str], Messages], prompt_ids: tuple[str, str],
                         calls: list[dict[str, Any]]) -> tuple[T, bool]:
    """Return (parsed value, whether a repair call was needed); audit entries go to ``calls``."""
    first = client.complete(role, messages, json_mode=True, prompt_id=template_id(prompt_ids[0]))
    calls.append(first.record(prompt_ids[0]))
    try:
        return parse(first.text), False
    except ValueError as exc:
        error = str(exc)
    second = client.complete(role, repair_messages(error, first.text), json_mode=True,
                             prompt_id=template_id(prompt_ids[1]))
    calls.append(second.record(prompt_ids[1]))
    return parse(second.text), True


def template_id(audit_id: str) -> str:
    """The prompt id (file stem in ``common/prompts/``) of an audit id ``<prompt id>[/<variant>]``."""
    return audit_id.split("/", 1)[0]


def fallback_error(exc: BaseException) -> str:
    """The row error of a fallback, ``<cause>: <detail>`` like every other stage's row errors.

    ``<cause>`` is the client's (``http_<status>``, ``timeout``, ``connection``, ``bad_response``,
    ``cache_miss``) for a failed call and ``invalid_reply`` for a reply still invalid after repair.
    """
    if isinstance(exc, LLMCallError):
        return f"{exc.cause}: {exc}"
    return f"invalid_reply: {type(exc).__name__}: {exc}"
