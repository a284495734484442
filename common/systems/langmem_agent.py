"""LangMem under ``systems.protocol: native``: the protocol behind the LangMem number that mem0's LoCoMo
evaluation reports (mem0ai/mem0@2352a44, ``evaluation/src/langmem.py``), run through the gateway.

What that script does, and what is done here the same way:

* One LangGraph ReAct agent (``create_react_agent``) per speaker of a conversation, each with its own
  ``InMemoryStore`` (vector index), its own ``MemorySaver`` checkpointer, LangMem's two tools
  (``manage_memory`` and ``search_memory`` on the namespace ``("memories",)``) and a prompt that puts
  the store's search for the latest message into the system message (``AGENT_SYSTEM``: the list of
  found items as Python prints it).
* Every message of the conversation, in order, is one ``invoke`` of its speaker's agent with one user
  message ``"<session date> | <speaker>: <text>"``, on one thread per conversation: the thread keeps
  every earlier message of that speaker, the agent's tool calls and their results, so each request
  carries the speaker's whole history. The agent decides itself whether to call ``manage_memory``.
* A question is one ``invoke`` of each speaker's agent with the question as the user message on the
  same thread; the agent's last reply is that speaker's "memories", and mem0's answer prompt
  (``answer.prompt=mem0``) reads the two replies.

What differs (the protocol card, ``common/systems/cards/langmem.yaml``, lists each): the model, its
temperature and the embedding model are the harness's (every call through the gateway); each
question starts from the thread and the store as ingestion left them (in the reference, each
question and reply stay on the thread, and anything the agent stored while answering, for the next
questions); the store's clock is frozen (``FROZEN_AT``), because the items' ``created_at`` and
``updated_at`` are printed into every prompt and a wall clock would make each request new.
"""
from __future__ import annotations

import contextvars
import hashlib
import json
import threading
import uuid
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from common.core.schema import Session

NAMESPACE = ("memories",)
# The reference's system message (evaluation/src/langmem.py, ``prompt``), byte for byte.
AGENT_SYSTEM = "You are a helpful assistant.\n\n## Memories\n<memories>\n{memories}\n</memories>\n"
# The store's clock while an agent runs: the day the reference script was added to mem0's repository
# (393a4fd, 2025-04-29). Any fixed instant keeps the prompts repeatable; this one says no more about
# the conversation than the reference's wall clock did.
FROZEN_AT = datetime(2025, 4, 29, tzinfo=timezone.utc)
STATE_FILE = "agents.json"
_frozen: contextvars.ContextVar[Optional[datetime]] = contextvars.ContextVar("langmem_clock", default=None)


# ---------------------------------------------------------------------------- deterministic ids
# LangMem, trustcall and LangMem's tools name new memories with ``uuid4``; the ids appear in later
# prompts, so random ids would change every cache key. Both protocols draw them from a sequence
# seeded by the memory (and, for a search, the question) while they run.
ids: contextvars.ContextVar[Optional["IdSequence"]] = contextvars.ContextVar("langmem_ids", default=None)
PATCH_LOCK = threading.Lock()


class IdSequence:
    """uuid4 replacements for one memory's ingestion: the n-th id is a hash of (memory id, n)."""

    def __init__(self, seed: str) -> None:
        self.seed, self.n, self.lock = seed, 0, threading.Lock()

    def next(self) -> uuid.UUID:
        with self.lock:
            self.n += 1
            n = self.n
        return uuid.UUID(bytes=hashlib.sha256(f"{self.seed}\x00{n}".encode("utf-8")).digest()[:16], version=4)


class DeterministicUuid:
    """The ``uuid`` module as LangMem and trustcall see it: ``uuid4`` from the current sequence."""

    def __getattr__(self, name: str) -> Any:
        return getattr(uuid, name)

    @staticmethod
    def uuid4() -> uuid.UUID:
        seq = ids.get()
        return seq.next() if seq is not None else uuid.uuid4()


class _Clock(datetime):
    """``datetime`` as LangGraph's in-memory store sees it: ``now()`` is ``FROZEN_AT`` while an agent of
    the native protocol runs (the context variable is set), the real clock otherwise."""

    @classmethod
    def now(cls, tz: Any = None) -> Any:
        frozen = _frozen.get()
        return frozen if frozen is not None else datetime.now(tz)


def _patch_modules() -> None:
    """Deterministic memory ids in LangMem's tools (as for the store manager) and the frozen store clock."""
    import langgraph.store.memory as store_memory
    import langmem.knowledge.tools as tools

    with PATCH_LOCK:
        if not isinstance(tools.uuid, DeterministicUuid):
            tools.uuid = DeterministicUuid()
        if store_memory.datetime is not _Clock:
            store_memory.datetime = _Clock  # type: ignore[misc]


class frozen_clock:
    """``with frozen_clock():`` the stores' clock is ``FROZEN_AT`` in this context (and its copies)."""

    def __enter__(self) -> "frozen_clock":
        self.token = _frozen.set(FROZEN_AT)
        return self

    def __exit__(self, *exc: Any) -> None:
        _frozen.reset(self.token)


def message_text(session: Session, speaker: str, text: str) -> str:
    """A message as the reference hands it to its speaker's agent: ``"<timestamp> | <speaker>: <text>"``."""
    return f"{session.date_time or ''} | {speaker}: {text}"


def speakers_of(sessions: list[Session]) -> list[str]:
    """The conversation's speakers in the order they first speak (one agent each)."""
    return list(dict.fromkeys(t.speaker for s in sessions for t in s.turns))


def thread_config(memory_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": f"thread-{memory_id}"}}


def build_agent(chat: Any, store: Any) -> Any:
    """The reference's agent: ``create_react_agent`` with its prompt, LangMem's two tools, ``store``
    and a fresh ``MemorySaver``."""
    _patch_modules()
    from langgraph.checkpoint.memory import MemorySaver
    from langgraph.config import get_store
    from langmem import create_manage_memory_tool, create_search_memory_tool

    with warnings.catch_warnings():  # langgraph 1.x marks create_react_agent deprecated; the reference used it
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        def prompt(state: Any) -> list[Any]:
            memories = get_store().search(NAMESPACE, query=state["messages"][-1].content)
            return [{"role": "system", "content": AGENT_SYSTEM.format(memories=memories)}, *state["messages"]]

        return create_react_agent(chat, prompt=prompt,
                                  tools=[create_manage_memory_tool(namespace=NAMESPACE),
                                         create_search_memory_tool(namespace=NAMESPACE)],
                                  store=store, checkpointer=MemorySaver())


def reply_text(message: Any) -> str:
    """The agent's last message as text (a content-parts list joined)."""
    content = getattr(message, "content", message)
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def tool_calls(messages: list[Any], name: str) -> int:
    """How many calls of the tool ``name`` the agent's messages hold."""
    return sum(1 for m in messages for c in (getattr(m, "tool_calls", None) or []) if c.get("name") == name)


# ---------------------------------------------------------------------------- saved state
def save(path: Path, agents: dict[str, tuple[list[Any], list[Any]]]) -> None:
    """Each speaker's store items (key, value) and thread (LangChain's message dicts) in ``path``."""
    from langchain_core.messages import messages_to_dict

    out = {speaker: {"items": [{"key": it.key, "value": it.value} for it in sorted(items, key=lambda it: it.key)],
                     "thread": messages_to_dict(thread)}
           for speaker, (items, thread) in agents.items()}
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")


def load(path: Path) -> dict[str, dict[str, Any]]:
    """``save``'s file: speaker -> {"items": [...], "thread": [messages]}."""
    from langchain_core.messages import messages_from_dict

    raw = json.loads(path.read_text(encoding="utf-8"))
    return {speaker: {"items": block["items"], "thread": messages_from_dict(block["thread"])}
            for speaker, block in raw.items()}


def fill(store: Any, items: list[dict[str, Any]]) -> None:
    """Put saved items back into a fresh store (their embeddings through the gateway again, cached)."""
    from langgraph.store.base import PutOp

    if items:
        store.batch([PutOp(NAMESPACE, it["key"], it["value"]) for it in items])


# ---------------------------------------------------------------------------- the dry run
MESSAGE_OVERHEAD = 12  # "<date> | <speaker>: " and the message's framing (o200k tokens)
TOOLS_TOKENS = 330  # the two tools' schemas and descriptions
STEP_TOKENS = 70  # one manage_memory call, its result ("created memory <uuid>") and the closing reply
SHOWN_MEMORIES = 10 * 60  # the store's search in the system message: up to 10 items as Python prints them


def estimate(turn_tokens: list[tuple[str, int]]) -> tuple[int, int, int]:
    """(calls, prompt tokens, completion tokens) of ingesting one conversation, given each message's
    (speaker, tokens) in order: two calls per message (the tool call, then the agent's reply), each
    with the speaker's whole thread so far, the system message and the tools."""
    calls = prompt = completion = 0
    history: dict[str, int] = {}
    for speaker, tokens in turn_tokens:
        before = history.get(speaker, 0)
        own = tokens + MESSAGE_OVERHEAD
        calls += 2
        prompt += 2 * (TOOLS_TOKENS + SHOWN_MEMORIES + before + own) + STEP_TOKENS
        completion += STEP_TOKENS
        history[speaker] = before + own + STEP_TOKENS
    return calls, prompt, completion

