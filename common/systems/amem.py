"""A-MEM (``method.name: amem``): the ``a-mem`` package (agentic memory), run locally under the harness.

What A-MEM does with a memory: every turn becomes a note (``add_note``); one LLM call analyses
the note (keywords, a one-sentence context, tags); once the store holds notes, a second call
sees the note's five nearest neighbours and decides whether to link it to them and rewrite
their context and tags (the note "evolves" the memory). Notes live in a Chroma collection whose
documents are the note text plus its context, keywords and tags. A question is answered from
the ``top_k`` nearest notes and the notes they link to (``find_related_memories_raw``'s rule).

Search, as A-MEM's own LoCoMo evaluation (WujiangXu/A-mem ``test_advanced.py``,
``generate_query_llm``): the LLM first turns the question into keywords (its prompt, byte for byte,
id ``amem_keywords``), and the notes are searched with those (option ``query: keywords``, both
protocols; ``question`` searches with the question itself). A reply without a ``keywords`` string
is searched as its raw text, as the reference does, and counted as a fallback
(``keywords_unparsed``). Under ``systems.protocol: native`` the buffer is A-MEM's own rendering of
the hits (``find_related_memories_raw``: time, content, context, keywords, tags). After ingestion
the memory's note count is reported (``outcomes``), so an empty memory is counted.

How it is wired here: each memory gets its own Chroma store (``chromadb.PersistentClient``, an
embedded SQLite + HNSW database under the memory's state directory; opened by the adapter and
closed after ingestion), anonymised telemetry off. Chroma's default embedding function would
download an ONNX model and A-MEM's own would load ``all-MiniLM-L6-v2`` from the model hub: both
are replaced by the harness's embedding model (``_HarnessEmbeddings``). A-MEM's LLM controller
is replaced by the harness's cached client (role ``memory``): its two prompts go out unchanged,
with ids ``amem_analyze`` and ``amem_evolve``, as JSON mode (the client has no strict-schema
mode; both prompts spell the schema out). A-MEM catches any error of those calls and carries on
with empty values; the adapter records the error and fails the memory instead, so a failure is
counted, never silently turned into an empty note. litellm (imported by A-MEM) reads its bundled
model-price map instead of fetching it (``LITELLM_LOCAL_MODEL_COST_MAP``).

Determinism: a note's id is its turn id (``D1:3``) instead of a random uuid, because neighbour
ids appear in the evolution prompt and random ids would change every prompt's cache key.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Optional

from common.core.config import Config
from common.core.llm import LLMCallError
from common.core.schema import Question, Session
from common.core.tokens import count_tokens
from common.method.render import MemoryView
from common.systems import outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, render, turn_text

DEFAULTS = {"top_k": 10, "query": "keywords"}
QUERIES = ("keywords", "question")
# A-MEM's keyword step before search: generate_query_llm's prompt in its LoCoMo evaluation
# (WujiangXu/A-mem@17ce6b6 test_advanced.py), byte for byte, the f-string's slot as {question}.
KEYWORDS_PROMPT = ("Given the following question, generate several keywords, using 'cosmos' as the separator.\n\n"
                   "                Question: {question}\n\n"
                   "                Format your response as a JSON object with a \"keywords\" field containing the "
                   "selected text. \n\n"
                   "                Example response format:\n"
                   "                {{\"keywords\": \"keyword1, keyword2, keyword3\"}}")
# A-MEM's controller sends this system message with every call (the research code's too).
JSON_SYSTEM = "You must respond with a JSON object."
AMEM_VERSION = "0.2.6"
# A-MEM's analysis prompt and evolution prompt (o200k tokens, without the note and neighbours):
# the dry run's estimate.
ANALYZE_PROMPT_TOKENS, EVOLVE_PROMPT_TOKENS = 260, 560
_opened: dict[str, Any] = {}  # persist directory -> the harness embeddings its retriever uses
_lock = threading.Lock()


def _import_amem() -> Any:
    """``agentic_memory.memory_system`` with its retriever constructor pointed at the harness's
    embeddings (A-MEM builds ``ChromaRetriever`` inside its ``__init__``)."""
    # Read at import time by litellm and Chroma: no price-map download, no telemetry.
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ["ANONYMIZED_TELEMETRY"] = "False"
    for name in ("chromadb", "LiteLLM", "litellm", "agentic_memory"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import agentic_memory.memory_system as ms

    with _lock:
        if not getattr(ms, "_harness_retriever", False):
            ms.ChromaRetriever = _retriever_class()
            ms._harness_retriever = True
    return ms


def _retriever_class() -> type:
    import chromadb
    from agentic_memory.retrievers import ChromaRetriever
    from chromadb.config import Settings

    class HarnessRetriever(ChromaRetriever):
        """A-MEM's retriever on a Chroma store with telemetry off and the harness's embeddings."""

        def __init__(self, collection_name: str = "memories", model_name: str = "",
                     persist_directory: str = "") -> None:
            self.persist_directory = persist_directory
            self.client = chromadb.PersistentClient(path=persist_directory,
                                                    settings=Settings(anonymized_telemetry=False))
            self.embedding_function = _opened[persist_directory]
            self.collection = self.client.get_or_create_collection(name=collection_name,
                                                                   embedding_function=self.embedding_function)

    return HarnessRetriever


def _embeddings(embedder: Any) -> Any:
    from chromadb.api.types import EmbeddingFunction

    class HarnessEmbeddings(EmbeddingFunction):
        """Chroma's embedding-function interface over the harness's model (cached, unit vectors)."""

        def __init__(self, model: Any) -> None:
            self.model = model

        def __call__(self, input: Any) -> Any:
            return [v for v in self.model.encode([str(t) for t in input])]

        @staticmethod
        def name() -> str:
            return "harness"

        def is_legacy(self) -> bool:  # nothing to persist: the adapter always passes it in
            return True

    return HarnessEmbeddings(embedder)


class _HarnessLLM:
    """A-MEM's controller interface (``get_completion``) over the harness's client."""

    def __init__(self, client: Any, spent: Spent):
        self.client, self.spent = client, spent
        self.errors: list[str] = []

    def get_completion(self, prompt: str, response_format: Any = None, temperature: float = 1.0,
                       prompt_id: Optional[str] = None, **kwargs: Any) -> str:
        schema = ((response_format or {}).get("json_schema") or {}).get("schema") or {}
        prompt_id = prompt_id or ("amem_evolve" if "should_evolve" in schema.get("properties", {}) else "amem_analyze")
        messages = [{"role": "system", "content": JSON_SYSTEM}, {"role": "user", "content": prompt}]
        started = time.perf_counter()
        try:
            c = self.client.complete("memory", messages, json_mode=True, prompt_id=prompt_id)
        except LLMCallError as exc:
            self.errors.append(f"{prompt_id}: {exc}")  # A-MEM swallows it; the adapter raises it
            raise
        finally:
            self.spent.calls += 1
            self.spent.seconds = round(self.spent.seconds + time.perf_counter() - started, 4)
        self.spent.llm_calls.append(c.record(prompt_id))
        self.spent.prompt_tokens += c.usage.get("prompt_tokens", 0)
        self.spent.completion_tokens += c.usage.get("completion_tokens", 0)
        return c.text


def note_text(speaker: str, text: str) -> str:
    """A turn as an A-MEM note (the speaker is part of the content A-MEM analyses)."""
    return f"Speaker {speaker} says : {text}"


def session_notes(session: Session, include_images: bool) -> list[tuple[str, str]]:
    """``(turn id, note content)`` of each turn of a session, in order."""
    out = []
    for t in session.turns:
        text = turn_text(t, include_images)
        out.append((t.dia_id, note_text(t.speaker, text)))
    return out


class AMem(MemorySystem):
    name = "amem"
    stages = PROTOCOL_STAGES
    role = "memory"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.opts = self.options(DEFAULTS)
        if self.opts["query"] not in QUERIES:
            raise ValueError(f"method.options.query: {self.opts['query']!r}; known: {list(QUERIES)}")
        self.open: dict[str, Any] = {}

    def settings(self) -> dict[str, Any]:
        own = {**self.opts, "a-mem": AMEM_VERSION}
        return {**own, "protocol": "native"} if self.protocol == "native" else own

    def _memory(self, state: Path, llm: _HarnessLLM) -> Any:
        ms = _import_amem()
        store = str(state / "chroma")
        with _lock:
            _opened[store] = _embeddings(self.ctx.embedder())
        # The "openai" backend only builds an SDK client here (no request); it is replaced below.
        memory = ms.AgenticMemorySystem(llm_backend="openai", api_key="unused", storage_path=store)
        memory.llm_controller.llm = llm
        return memory

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        spent, started = Spent(), time.perf_counter()
        llm = _HarnessLLM(self.ctx.llm, spent)
        memory = self._memory(state_dir, llm)
        try:
            for session in view.sessions:
                for dia_id, content in session_notes(session, self.ctx.include_images):
                    memory.add_note(content, time=session.date_time or "", id=dia_id)
                    if llm.errors:
                        raise RuntimeError(f"A-MEM ingestion of {view.memory_id} {session.session_id} "
                                           f"{dia_id} failed: {llm.errors[0]}")
                self.ctx.advance(1)
            notes = int(memory.retriever.count())
            outcomes.note_items(notes)  # 0: an empty memory, counted
            outcomes.note_built(notes=notes)
        finally:
            _close(memory)
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def search_query(self, question: str, spent: Spent) -> str:
        """What the notes are searched with: the keywords the LLM gives for the question (A-MEM's
        ``generate_query_llm``), or the question itself (option ``query: question``)."""
        if self.opts["query"] == "question":
            return question
        reply = _HarnessLLM(self.ctx.llm, spent).get_completion(KEYWORDS_PROMPT.format(question=question),
                                                                prompt_id="amem_keywords")
        try:
            keywords = json.loads(reply)["keywords"]
        except (ValueError, TypeError, KeyError):
            keywords = None
        if isinstance(keywords, str) and keywords.strip():
            return keywords
        # The reference searches with the reply's raw text when it does not parse; so does this, counted.
        outcomes.note_fallback("keywords_unparsed", reply[:200])
        return reply.strip() or question

    def search(self, question: Question, view: MemoryView) -> Found:
        started, spent = time.perf_counter(), Spent()
        mid = question.memory_id
        if mid not in self.open:
            self.open[mid] = self._memory(self.ctx.state_dir / mid, _HarnessLLM(None, Spent()))
        memory, k = self.open[mid], int(self.opts["top_k"])
        evidence: list[Evidence] = []
        seen: set[str] = set()
        query, raw = question.question, ""
        if memory.retriever.count():
            query = self.search_query(question.question, spent)
            hits = memory.retriever.search(query, k)
            ids, metas = hits["ids"][0][:k], hits["metadatas"][0][:k]
            # The k nearest notes, then the notes each links to (up to k per hit), each note once.
            for doc_id, meta, distance in zip(ids, metas, hits["distances"][0]):
                seen.add(doc_id)
                evidence.append(_evidence(doc_id, meta.get("content", ""), meta.get("timestamp", ""),
                                          meta.get("context", ""), round(float(distance), 4)))
            for meta in metas:
                for link in list(meta.get("links") or [])[:k]:
                    note = memory.read(link) if link not in seen else None
                    if note is not None:
                        seen.add(link)
                        evidence.append(_evidence(link, note.content, note.timestamp or "", note.context, None))
            if self.protocol == "native":  # A-MEM's own rendering of the same search
                raw = memory.find_related_memories_raw(query, k)
        spent.seconds = round(time.perf_counter() - started, 4)
        info = {"top_k": k, "query": query, **({"rendered": raw} if self.protocol == "native" else {})}
        return Found(evidence, spent, info)

    def row(self, question: Question, view: MemoryView) -> Any:
        """The default row; under the native protocol A-MEM's own rendering is the buffer."""
        started = time.perf_counter()
        found = self.search(question, view)
        own = str(found.info.pop("rendered", ""))  # the buffer itself, not a note beside it
        row = render(question, self.name, found, round(time.perf_counter() - started, 4))
        if self.protocol == "native" and found.evidence:
            row.buffer_text = own.rstrip("\n")
            row.buffer_tokens = count_tokens(row.buffer_text) if row.buffer_text else 0
        return row

    @classmethod
    def estimate_ingest(cls, view: MemoryView, cfg: Config) -> Optional[Spent]:
        turns = [count_tokens(t.text) + 8 for s in view.sessions for t in s.turns]
        n = len(turns)
        # Every note is analysed; every note after the first also gets the evolution call,
        # which shows its five neighbours (assumed 80 tokens each with their metadata).
        prompt = sum(ANALYZE_PROMPT_TOKENS + t for t in turns)
        prompt += sum(EVOLVE_PROMPT_TOKENS + t + 5 * 80 for t in turns[1:])
        return Spent(calls=max(0, 2 * n - 1), prompt_tokens=prompt, completion_tokens=n * 60 + max(0, n - 1) * 80)

    @classmethod
    def estimate_search(cls, question: Question, cfg: Config) -> Spent:
        """The keyword call of one question (none with ``query: question``): its prompt and A-MEM's
        system message, a short reply."""
        if {**DEFAULTS, **cfg.method.options}["query"] == "question":
            return Spent()
        prompt = count_tokens(JSON_SYSTEM) + count_tokens(KEYWORDS_PROMPT.format(question=question.question)) + 8
        return Spent(calls=1, prompt_tokens=prompt, completion_tokens=20)


def _evidence(doc_id: str, content: str, timestamp: str, context: str, score: Optional[float]) -> Evidence:
    text = f"{content} (context: {context})" if context and context != "General" else content
    # Note ids are turn ids (see module docstring): they give evidence recall its turns.
    return Evidence(text, [doc_id], timestamp, score, "")


def _close(memory: Any) -> None:
    """Release the Chroma store's files (the client holds the SQLite database open)."""
    client = getattr(memory.retriever, "client", None)
    close = getattr(client, "close", None)
    if callable(close):
        close()
