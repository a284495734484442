"""The child side of the systems protocol, shared by every ``systems/<name>/adapter.py``.

Standard library only: each adapter runs in its own system's virtual environment, where nothing
of the harness is installed. An adapter puts this directory on ``sys.path`` and calls
``serve(Adapter())``.

JSON lines on stdin/stdout, one request then one reply:

* ``{"op": "hello", "options": {...}, "protocol": "common"|"native"}`` -> ``{"ok": true, "system": ...,
  "version": ..., "answers": <bool>, "settings": {...}}`` (``settings``: what the adapter resolved
  under this protocol, e.g. ``{"top_k": 20, "mode": "fast"}``, checked against the system's card)
* ``{"op": "ingest", "memory_id", "sessions": [{"session_id", "date", "turns": [{"turn_id",
  "speaker", "text"}]}], "speakers": {"speaker_a", "speaker_b"}}`` -> ``{"ok": true, "items": <int>,
  "errors": [<str>, ...]}``
* ``{"op": "search", "memory_id", "question", "question_date", "limit", "speakers"}`` -> ``{"ok": true,
  "evidence": [{"text", "score", "source_turn_ids"}], "context": <str>}``
* ``{"op": "answer", ...}`` (as search; only under the native protocol, to an adapter whose hello
  said ``"answers": true``) -> the search reply plus ``"answer": <str>``.
* ``{"op": "close"}`` -> ``{"ok": true}``, then the process exits.

``speakers`` (the conversation's ``speaker_a`` and ``speaker_b``, as its source names them) is set
as ``adapter.speakers`` before each ingestion and search ({} when the harness sends none).

Optional reply fields: ``built`` (ingest: what the memory holds, by name), ``errors`` and
``fallbacks`` (search: ERROR records logged and fallbacks noted while searching), ``answer_slots``
(search: the values of the reference answer prompt's own slots, as the reference renders them from
this search's results, which the harness's 07 fills into that prompt: names to strings).

Any failure is ``{"ok": false, "error": "<type>: <message>"}``. Libraries print to stdout, so the
protocol keeps a private copy of file descriptor 1 and points fd 1 (and ``sys.stdout``) at stderr:
nothing a system prints can corrupt a reply. Log records of level ERROR or above that a system
emits (or swallows after logging) during an ingestion or a search are returned in ``errors``.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from datetime import datetime, timezone
from typing import Any, Optional

# The harness's environment (see docs/memory-systems.md, "Systems in their own environment").
BASE_URL = os.environ.get("OPENAI_BASE_URL", "")
API_KEY = os.environ.get("OPENAI_API_KEY", "")
LLM_MODEL = os.environ.get("HARNESS_LLM_MODEL", "gpt-4o-mini")
EMBED_MODEL = os.environ.get("HARNESS_EMBED_MODEL", "text-embedding-3-small")
EMBED_DIM = int(os.environ.get("HARNESS_EMBED_DIM") or 1536)
SYSTEM_DIR = os.environ.get("HARNESS_SYSTEM_DIR") or os.path.join(os.getcwd(), ".systems", "store")

# Telemetry switches of the libraries the systems use; set before any of them is imported.
QUIET = {"TELEMETRY_DISABLED": "1", "ANONYMIZED_TELEMETRY": "False", "POSTHOG_DISABLED": "1",
         "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
         "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
         "SCARF_NO_ANALYTICS": "true", "OTEL_SDK_DISABLED": "true", "MEM0_TELEMETRY": "False"}
for _key, _value in QUIET.items():
    os.environ.setdefault(_key, _value)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def locomo_date(text: Optional[str]) -> Optional[datetime]:
    """A LoCoMo session date (``1:56 pm on 8 May, 2023``), a REALTALK one (``29.12.2023, 22:42:04``) or
    an ISO date, as UTC; None if none of them."""
    if not text:
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%d.%m.%Y, %H:%M:%S"):
        try:
            return datetime.strptime(text.strip(), fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            pass
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


class ErrorLog(logging.Handler):
    """Collects the ERROR records of every logger while an ingestion runs."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a record whose arguments do not format is still an error
            text = str(record.msg)
        self.records.append(f"{record.name}: {text}"[:500])


class Adapter:
    """What a system implements; ``ingest`` returns (items, errors), ``search`` (evidence, context).

    ``protocol`` (``common`` or ``native``) and ``options`` are set from the hello request before
    any ingestion. A system whose reference evaluation lets its own agent answer sets ``answers``
    and implements ``answer`` (used only under the native protocol). While ingesting, an adapter
    says what the memory holds beyond its item count with ``note_built``; while searching, a
    fallback from its own retrieval with ``note_fallback``. ERROR log records during an ingestion
    or a search are returned as that request's ``errors``.
    """

    system = "?"
    answers = False
    protocol = "common"
    options: dict[str, Any] = {}
    speakers: dict[str, str] = {}  # the request's speaker_a and speaker_b (set before ingest and search)

    def version(self) -> str:
        return "?"

    def settings(self) -> dict[str, Any]:
        """The search settings this adapter resolved from ``protocol`` and ``options`` (its card's
        ``search.<protocol>.settings`` names some of them: the harness checks they agree)."""
        return {}

    def note_built(self, **counts: Any) -> None:
        self._built = {**getattr(self, "_built", {}), **counts}

    def note_fallback(self, kind: str) -> None:
        fallbacks = getattr(self, "_fallbacks", {})
        fallbacks[kind] = fallbacks.get(kind, 0) + 1
        self._fallbacks = fallbacks

    def note_answer_slots(self, **slots: str) -> None:
        """The reference answer prompt's slots this search rendered (the card's ``answer.native``
        prompt; the harness fills them in 07 under the native protocol)."""
        self._answer_slots = {**getattr(self, "_answer_slots", {}), **{k: str(v) for k, v in slots.items()}}

    def take_answer_slots(self) -> dict[str, str]:
        slots = getattr(self, "_answer_slots", {})
        self._answer_slots = {}
        return slots

    def take_notes(self) -> tuple[dict[str, Any], dict[str, int]]:
        """What the last request noted (built, fallbacks), cleared for the next one."""
        notes = (getattr(self, "_built", {}), getattr(self, "_fallbacks", {}))
        self._built, self._fallbacks = {}, {}
        return notes

    def answer(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str, str]:
        """The native protocol's agent: (evidence it retrieved, context, its answer)."""
        raise NotImplementedError

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        raise NotImplementedError

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _errors_logged:
    """``with _errors_logged() as catcher:`` the ERROR records logged in the block, in ``catcher.records``."""

    def __enter__(self) -> ErrorLog:
        self.catcher = ErrorLog()
        logging.getLogger().addHandler(self.catcher)
        return self.catcher

    def __exit__(self, *exc: Any) -> None:
        logging.getLogger().removeHandler(self.catcher)


def _protocol_stream() -> Any:
    """A private copy of stdout for replies; fd 1 and ``sys.stdout`` now go to stderr."""
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def serve(adapter: Adapter) -> None:
    out = _protocol_stream()

    def reply(payload: dict[str, Any]) -> None:
        out.write(json.dumps(payload, default=str) + "\n")
        out.flush()

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "hello":
                adapter.protocol = str(request.get("protocol") or "common")
                adapter.options = dict(request.get("options") or {})
                reply({"ok": True, "system": adapter.system, "version": adapter.version(),
                       "answers": bool(adapter.answers), "settings": dict(adapter.settings())})
            elif op == "ingest":
                adapter.speakers = dict(request.get("speakers") or {})
                adapter.take_notes()
                with _errors_logged() as catcher:
                    items, errors = adapter.ingest(str(request["memory_id"]), list(request["sessions"]))
                built, _ = adapter.take_notes()
                reply({"ok": True, "items": int(items), "errors": list(errors) + catcher.records,
                       **({"built": built} if built else {})})
            elif op in ("search", "answer"):
                adapter.speakers = dict(request.get("speakers") or {})
                adapter.take_notes()
                adapter.take_answer_slots()
                args = (str(request["memory_id"]), str(request["question"]), request.get("question_date"),
                        int(request.get("limit") or 10))
                with _errors_logged() as catcher:
                    if op == "answer":
                        evidence, context, answer = adapter.answer(*args)
                    else:
                        evidence, context = adapter.search(*args)
                _, fallbacks = adapter.take_notes()
                slots = adapter.take_answer_slots()
                reply({"ok": True, "evidence": evidence, "context": context,
                       **({"answer_slots": slots} if slots else {}),
                       **({"answer": answer} if op == "answer" else {}),
                       **({"errors": catcher.records} if catcher.records else {}),
                       **({"fallbacks": fallbacks} if fallbacks else {})})
            elif op == "close":
                adapter.close()
                reply({"ok": True})
                break
            else:
                reply({"ok": False, "error": f"unknown op {op!r}"})
        except Exception as exc:  # every failure is a reply; the harness counts it
            traceback.print_exc(file=sys.stderr)
            reply({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]})
    out.close()
