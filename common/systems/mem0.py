"""mem0 (``method.name: mem0``): the open-source ``mem0ai`` package, run locally under the harness.

Ingestion follows mem0's published LoCoMo evaluation (``evaluation/src/memzero/add.py``): each
session's turns are added for EACH speaker's memory, that speaker's turns as role ``user`` and
the other's as ``assistant``, content ``"<speaker>: <text>"``, ``batch_size`` (2) messages per
``add`` call, the session date as metadata ``timestamp``, with the evaluation's custom
instructions. Search (``search.py``): the question against both speakers' memories, ``top_k``
each: 10 under ``systems.protocol: common``, 30 under ``native`` (mem0's evaluation Makefile runs
``search.py`` with ``--top_k 30``), where 07 also answers with mem0's ``ANSWER_PROMPT``
(``answer.prompt: mem0``) and the speakers come in the benchmark's order (speaker_a first, as
mem0's ``add.py`` and its answer prompt's ``speaker_1`` have them). After ingestion the memory's
size is reported (``outcomes``: items, memories per speaker), so a memory mem0 left empty is
counted. Departures, all in its protocol card (``common/systems/cards/mem0.yaml``): sessions are
added one speaker after the other (mem0's script runs the two speakers in two threads, an order
that varies between runs); the extraction prompt's "current date" is the session date, not the
day the run happens (else every call's cache key would change daily); each batch's turn ids ride
along in the metadata (never in a prompt) so evidence recall can be measured.

Local and offline: the LLM is the harness's cached client (role ``memory``), embeddings the
harness's sentence-transformers model, the vector store Qdrant's embedded mode (a directory per
memory; no server, and qdrant-client already comes with mem0ai, unlike FAISS or Chroma), the
history an SQLite file beside it, telemetry off (``MEM0_TELEMETRY=False`` before the import).
spaCy and fastembed are not installed, so mem0's entity boosts and BM25 keyword scores are off
and its search is semantic only (mem0 logs this itself).
"""
from __future__ import annotations

import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Any, Optional

from common.core import prompts
from common.core.config import Config, resolve_path
from common.core.llm import LLMCallError
from common.core.schema import Question, Session
from common.core.tokens import count_tokens
from common.method.render import MemoryView
from common.systems import outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, turn_text

DEFAULTS = {"top_k": 10, "batch_size": 2, "threshold": 0.1, "instructions": "mem0_locomo_instructions"}
# systems.protocol: native: mem0's evaluation Makefile (run-mem0-search) passes --top_k 30.
NATIVE = {"top_k": 30}
EXTRACTION_PROMPT_TOKENS = 7606  # mem0ai 2.2.1's ADDITIVE_EXTRACTION_PROMPT (o200k), for the dry run
_dates = threading.local()  # the session date the extraction prompt states as "current date"


def _import_mem0() -> Any:
    # Telemetry (PostHog) and the remote notice config are read at import time: off, always.
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(resolve_path(".cache/mem0")))
    logging.getLogger("mem0").setLevel(logging.ERROR)
    import mem0.memory.main as main
    import mem0.memory.telemetry as telemetry
    from mem0.configs import prompts as mem0_prompts

    # Also when something imported mem0 before this module could set the variable.
    telemetry.MEM0_TELEMETRY = main.MEM0_TELEMETRY = False

    if not getattr(main, "_harness_dated", False):
        original = mem0_prompts.generate_additive_extraction_prompt

        def dated(*args: Any, **kwargs: Any) -> str:
            kwargs.setdefault("current_date", getattr(_dates, "value", None) or "unknown")
            return original(*args, **kwargs)

        main.generate_additive_extraction_prompt = dated
        main._harness_dated = True
    return main


class _HarnessLLM:
    """mem0's LLM interface over the harness's client: cached, retried, counted."""

    def __init__(self, client: Any, spent: Spent):
        self.client, self.spent = client, spent

    def generate_response(self, messages: list[dict[str, str]], response_format: Any = None, tools: Any = None,
                          tool_choice: str = "auto", **kwargs: Any) -> str:
        json_mode = isinstance(response_format, dict) and response_format.get("type") == "json_object"
        started = time.perf_counter()
        try:
            c = self.client.complete("memory", messages, json_mode=json_mode, prompt_id="mem0_extraction")
        finally:
            self.spent.calls += 1
            self.spent.seconds = round(self.spent.seconds + time.perf_counter() - started, 4)
        self.spent.llm_calls.append(c.record("mem0_extraction"))
        self.spent.prompt_tokens += c.usage.get("prompt_tokens", 0)
        self.spent.completion_tokens += c.usage.get("completion_tokens", 0)
        return c.text


class _HarnessEmbedder:
    """mem0's embedder interface over the harness's embedding model (unit vectors, cached)."""

    def __init__(self, embedder: Any):
        self.embedder = embedder

    def embed(self, text: Any, memory_action: Optional[str] = None) -> list[float]:
        return [float(x) for x in self.embedder.encode([str(text)])[0]]

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return [[float(x) for x in v] for v in self.embedder.encode([str(t) for t in texts])]


def speakers(view: MemoryView, declared: bool = False) -> list[str]:
    """The memory's two speakers in order of first appearance; ``declared``: in the order the
    benchmark declares them (LoCoMo's speaker_a, speaker_b), when both speak, as mem0's ``add.py``
    and its answer prompt order them."""
    seen = list(dict.fromkeys(t.speaker for s in view.sessions for t in s.turns))
    named = list(dict.fromkeys(n for s in view.sessions for n in s.speakers))
    if declared and len(named) >= 2 and set(seen) <= set(named[:2]):
        return named[:2]
    return (seen + ["user", "assistant"])[:2] if len(seen) < 2 else seen[:2]


def session_messages(session: Session, me: str, include_images: bool) -> list[dict[str, Any]]:
    out = []
    for t in session.turns:
        text = turn_text(t, include_images)
        out.append({"role": "user" if t.speaker == me else "assistant", "content": f"{t.speaker}: {text}",
                    "dia_id": t.dia_id})
    return out


def _note_size(memory: Any, who: list[str]) -> None:
    """What mem0 built for this memory (``outcomes``): its memories, and per speaker (first and
    second, in the order they were added); 0 items is an empty memory, counted."""
    from qdrant_client.models import FieldCondition, Filter, MatchValue

    store = memory.vector_store
    counts = [int(store.client.count(store.collection_name, exact=True, count_filter=Filter(
        must=[FieldCondition(key="user_id", match=MatchValue(value=name))])).count) for name in who]
    outcomes.note_items(sum(counts))
    outcomes.note_built(memories=sum(counts), memories_first_speaker=counts[0], memories_second_speaker=counts[1])


class Mem0(MemorySystem):
    name = "mem0"
    stages = PROTOCOL_STAGES
    role = "memory"
    # systems.protocol: native: 07 answers with mem0's ANSWER_PROMPT (evaluation/prompts.py).
    native_answer_prompt = "mem0"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        native = self.protocol == "native"
        # The native defaults under the user's own options: an explicit top_k still wins.
        self.opts = self.options({**DEFAULTS, **(NATIVE if native else {})})
        self.open: dict[str, Any] = {}

    def settings(self) -> dict[str, Any]:
        own = {**self.opts, "instructions_text": prompts.load(self.opts["instructions"]), "mem0ai": "2.2.1"}
        # The common protocol's settings stay as they were, so earlier runs keep their digests.
        return {**own, "protocol": "native"} if self.protocol == "native" else own

    def speakers(self, view: MemoryView) -> list[str]:
        return speakers(view, declared=self.protocol == "native")

    def _memory(self, state: Path, spent: Spent) -> Any:
        main = _import_mem0()
        from mem0.configs.base import MemoryConfig

        emb = _HarnessEmbedder(self.ctx.embedder())
        config = MemoryConfig(
            vector_store={"provider": "qdrant", "config": {"path": str(state / "qdrant"), "collection_name": "mem0",
                                                            "embedding_model_dims": self.ctx.embedder().dim,
                                                            "on_disk": True}},
            # Placeholders: both are replaced below by the harness's client and model, before any use.
            llm={"provider": "openai", "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9"}},
            embedder={"provider": "openai", "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9"}},
            history_db_path=str(state / "history.db"),
            custom_instructions=prompts.load(self.opts["instructions"]),
        )
        memory = main.Memory(config)
        memory.llm = _HarnessLLM(self.ctx.llm, spent)
        memory.embedding_model = emb
        return memory

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        spent, started = Spent(), time.perf_counter()
        memory = self._memory(state_dir, spent)
        size = int(self.opts["batch_size"])
        try:
            for session in view.sessions:
                _dates.value = session.date_time or "unknown"
                for me in self.speakers(view):
                    msgs = session_messages(session, me, self.ctx.include_images)
                    for i in range(0, len(msgs), size):
                        batch = msgs[i:i + size]
                        meta = {"timestamp": session.date_time, "dia_ids": [m.pop("dia_id") for m in batch]}
                        try:
                            memory.add(batch, user_id=me, metadata=meta)
                        except Exception as exc:  # mem0 wraps our LLMCallError in its own LLMError
                            cause = exc.__cause__ if isinstance(exc.__cause__, LLMCallError) else exc
                            raise RuntimeError(f"mem0 ingestion of {view.memory_id} {session.session_id} "
                                               f"failed: {cause}") from exc
                self.ctx.advance(1)
            _note_size(memory, self.speakers(view))
        finally:
            _dates.value = None
            memory.close()
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def search(self, question: Question, view: MemoryView) -> Found:
        started = time.perf_counter()
        mid = question.memory_id
        if mid not in self.open:
            self.open[mid] = self._memory(self.ctx.state_dir / mid, Spent())
        evidence = []
        for who in self.speakers(view):
            hits = self.open[mid].search(question.question, filters={"user_id": who}, top_k=int(self.opts["top_k"]),
                                         threshold=float(self.opts["threshold"]))["results"]
            for h in hits:
                meta = h.get("metadata") or {}
                evidence.append(Evidence(h["memory"], list(meta.get("dia_ids", [])), meta.get("timestamp") or "",
                                         round(float(h["score"]), 4), who))
        seconds = round(time.perf_counter() - started, 4)
        return Found(evidence, Spent(seconds=seconds), {"speakers": self.speakers(view)})

    @classmethod
    def estimate_ingest(cls, view: MemoryView, cfg: Config) -> Optional[Spent]:
        opts = {**DEFAULTS, **cfg.method.options}
        size = int(opts["batch_size"])
        instructions = count_tokens(prompts.load(opts["instructions"]))
        calls = prompt = 0
        for s in view.sessions:
            n = math.ceil(len(s.turns) / size)
            calls += 2 * n
            text = sum(count_tokens(t.text) + 8 for t in s.turns)
            # Each call: the extraction prompt, the instructions, its batch, up to 10 earlier
            # messages and 10 existing memories (assumed 40 tokens each).
            prompt += 2 * (n * (EXTRACTION_PROMPT_TOKENS + instructions + 800) + text)
        return Spent(calls=calls, prompt_tokens=prompt, completion_tokens=calls * 120)
