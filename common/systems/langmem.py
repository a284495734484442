"""LangMem (``method.name: langmem``): the ``langmem`` package on an in-memory LangGraph store, every
LLM and embedding call through the harness's gateway (``common.systems.gateway``).

What LangMem does with a memory, as its documentation uses it for conversation memory
(``create_memory_store_manager``): each conversation is handed to the store manager, which first
searches the store for memories related to the conversation (the store's vector index), then asks
the LLM, with tool calling (trustcall), to insert new memories and update the existing ones it
was shown; the results are written back to the store. Search is the store manager's ``search``
(the store's semantic search over the memory's namespace), ``top_k`` (10) memories.

How it is wired here: one ``InMemoryStore`` per memory, its index embedding with
``OpenAIEmbeddings`` and the manager's model ``ChatOpenAI``, both pointed at the gateway (base URL
and a per-memory session token, nothing else; SDK retries off: the harness's client retries).
Each session is one ``invoke``: its turns as user messages ``"<speaker>: <text>"`` after a first
message giving the session date; the namespace is ``("memories", <memory id>)``. After ingestion
the store's items are written to ``store.json`` under the memory's state directory with the date
and turn ids of the session that last wrote each (kept beside the store, never in a prompt), and a
search rebuilds the store from that file (its embeddings through the gateway again, cached).

Under ``systems.protocol: native`` the system runs as the cited LangMem number was produced (mem0's
LoCoMo evaluation): one ReAct agent per speaker calling ``manage_memory`` on every message, the
agents' replies to the question as the evidence, mem0's answer prompt (``common.systems.langmem_agent``).

Determinism: LangMem and trustcall name new memories and messages with ``uuid4``; memory ids
appear in later prompts (the existing memories shown to the manager), so random ids would change
every cache key. Inside an ingestion they are drawn from a sequence seeded by the memory id
(``langmem_agent.IdSequence``).
LangSmith tracing is off.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Optional

from pydantic import SecretStr

from common.core.config import Config
from common.core.schema import Question, Session
from common.core.tokens import count_tokens
from common.method.render import MemoryView
from common.systems import langmem_agent, outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, turn_text
from common.systems.langmem_agent import PATCH_LOCK, DeterministicUuid, IdSequence, ids

DEFAULTS = {"top_k": 10}
LANGMEM_VERSION = "0.0.30"
# The store manager's memory instructions and tool schemas (o200k tokens, without the
# conversation and the existing memories): the dry run's estimate of one extraction call.
EXTRACTION_PROMPT_TOKENS = 700
def _import_langmem() -> Any:
    os.environ["LANGSMITH_TRACING"] = "false"
    os.environ["LANGCHAIN_TRACING_V2"] = "false"
    import langmem.knowledge.extraction as extraction
    import trustcall._base as trustcall_base

    with PATCH_LOCK:
        modules: tuple[Any, ...] = (extraction, trustcall_base)
        for module in modules:
            if not isinstance(module.uuid, DeterministicUuid):
                module.uuid = DeterministicUuid()
    return extraction


def session_messages(session: Session, include_images: bool) -> list[dict[str, str]]:
    """A session as LangMem's conversation: its date, then every turn as a user message."""
    out = [{"role": "user", "content": f"(Conversation of {session.date_time or 'an unknown date'})"}]
    for t in session.turns:
        out.append({"role": "user", "content": f"{t.speaker}: {turn_text(t, include_images)}"})
    return out


class LangMem(MemorySystem):
    name = "langmem"
    stages = PROTOCOL_STAGES
    role = "memory"
    uses_gateway = True
    # Under the native protocol the speakers' agents' replies reach mem0's answer prompt, as in the
    # evaluation behind the cited LangMem number.
    native_answer_prompt = "mem0"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.opts = self.options(DEFAULTS)
        self.open: dict[str, tuple[Any, dict[str, Any]]] = {}

    def settings(self) -> dict[str, Any]:
        if self.protocol == "native":  # the agents search themselves: top_k is not used
            return {"langmem": LANGMEM_VERSION, "protocol": "native", "agents": "one per speaker",
                    "memory_tool_on": "every message", "answer_prompt": "mem0"}
        return {**self.opts, "langmem": LANGMEM_VERSION}

    def _clients(self, base_url: str, api_key: str, temperature: Optional[float] = 0) -> tuple[Any, Any]:
        """(chat model, store): a fresh in-memory store whose index embeds through the gateway."""
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings
        from langgraph.store.memory import InMemoryStore

        model = self.ctx.llm.settings(self.role).model if self.ctx.llm is not None else "harness"
        chat = ChatOpenAI(model=model, base_url=base_url, api_key=SecretStr(api_key), temperature=temperature,
                          max_retries=0)
        embeddings = OpenAIEmbeddings(model="harness", base_url=base_url, api_key=SecretStr(api_key), max_retries=0,
                                      check_embedding_ctx_length=False)
        return chat, InMemoryStore(index={"dims": self.ctx.embedder().dim, "embed": embeddings})

    def _manager(self, base_url: str, api_key: str) -> tuple[Any, Any]:
        """(store manager, store) of the common protocol."""
        extraction = _import_langmem()
        chat, store = self._clients(base_url, api_key)
        manager = extraction.create_memory_store_manager(chat, namespace=("memories", "{langgraph_user_id}"),
                                                         store=store)
        return manager, store

    def _gateway(self) -> Any:
        if self.ctx.gateway is None:
            raise RuntimeError("langmem needs the harness's gateway (ctx.gateway): run it through the pipeline")
        return self.ctx.gateway

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        if self.protocol == "native":
            return self._ingest_agents(view, state_dir)
        spent, started = Spent(), time.perf_counter()
        gateway = self._gateway()
        config = {"configurable": {"langgraph_user_id": view.memory_id}}
        meta: dict[str, dict[str, Any]] = {}
        with gateway.session(spent) as session:
            manager, store = self._manager(session.base_url, session.api_key)
            token = ids.set(IdSequence(view.memory_id))
            try:
                for s in view.sessions:
                    try:
                        puts = manager.invoke({"messages": session_messages(s, self.ctx.include_images)},
                                              config=config)
                    except Exception as exc:  # the SDK's error for the gateway's error reply
                        raise RuntimeError(f"LangMem ingestion of {view.memory_id} {s.session_id} failed: "
                                           f"{' '.join(str(exc).split())[:300]}") from exc
                    for put in puts:
                        meta[put["key"]] = {"timestamp": s.date_time or "", "dia_ids": [t.dia_id for t in s.turns]}
            finally:
                ids.reset(token)
            items = store.search(("memories", view.memory_id), limit=1_000_000)
        dump = [{"key": it.key, "value": it.value, **meta.get(it.key, {"timestamp": "", "dia_ids": []})}
                for it in sorted(items, key=lambda it: it.key)]
        (state_dir / "store.json").write_text(json.dumps(dump, ensure_ascii=False, indent=1), encoding="utf-8")
        outcomes.note_items(len(dump))  # 0: an empty memory, counted
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def _ingest_agents(self, view: MemoryView, state_dir: Path) -> Spent:
        """The native protocol: every message, in order, to its speaker's agent (one thread each)."""
        spent, started = Spent(), time.perf_counter()
        _import_langmem()  # tracing off before LangChain is imported
        config = langmem_agent.thread_config(view.memory_id)
        agents: dict[str, Any] = {}
        with self._gateway().session(spent) as session, langmem_agent.frozen_clock():
            for speaker in langmem_agent.speakers_of(view.sessions):
                # The reference leaves the temperature to the model's default (the gateway sends the role's).
                chat, store = self._clients(session.base_url, session.api_key, temperature=None)
                agents[speaker] = (langmem_agent.build_agent(chat, store), store)
            token = ids.set(IdSequence(view.memory_id))
            try:
                for s in view.sessions:
                    for t in s.turns:
                        message = langmem_agent.message_text(s, t.speaker, turn_text(t, self.ctx.include_images))
                        try:
                            agents[t.speaker][0].invoke({"messages": [{"role": "user", "content": message}]},
                                                        config=config)
                        except Exception as exc:  # the SDK's error for the gateway's error reply, the graph's own
                            raise RuntimeError(f"LangMem agent of {t.speaker} on {view.memory_id} {t.dia_id} failed: "
                                               f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from exc
                    self.ctx.advance(1)
            finally:
                ids.reset(token)
            saved = {speaker: (store.search(langmem_agent.NAMESPACE, limit=1_000_000),
                               agent.get_state(config).values.get("messages", []))
                     for speaker, (agent, store) in agents.items()}
        langmem_agent.save(state_dir / langmem_agent.STATE_FILE, saved)
        outcomes.note_items(sum(len(items) for items, _ in saved.values()))  # 0: an empty memory, counted
        outcomes.note_built(agents=len(saved), manage_memory_calls=sum(
            langmem_agent.tool_calls(thread, "manage_memory") for _, thread in saved.values()))
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def _search_agents(self, question: Question) -> Found:
        """The native protocol: the question to each speaker's agent, on its thread as ingestion left it;
        each agent's last reply is that speaker's evidence (mem0's answer prompt reads them)."""
        spent, started = Spent(), time.perf_counter()
        _import_langmem()
        mid = question.memory_id
        saved = langmem_agent.load(self.ctx.state_dir / mid / langmem_agent.STATE_FILE)
        config = langmem_agent.thread_config(mid)
        evidence: list[Evidence] = []
        with self._gateway().session(spent) as session, langmem_agent.frozen_clock():
            token = ids.set(IdSequence(f"{mid}\x00{question.qid}"))
            try:
                for speaker, block in saved.items():
                    chat, store = self._clients(session.base_url, session.api_key, temperature=None)
                    langmem_agent.fill(store, block["items"])
                    agent = langmem_agent.build_agent(chat, store)
                    ask = {"role": "user", "content": question.question}
                    result = agent.invoke({"messages": [*block["thread"], ask]}, config=config)
                    evidence.append(Evidence(langmem_agent.reply_text(result["messages"][-1]), [], "", None, speaker))
            finally:
                ids.reset(token)
        spent.seconds = round(time.perf_counter() - started, 4)
        return Found(evidence, spent, {"agents": len(evidence)})

    def _opened(self, mid: str) -> tuple[Any, dict[str, Any]]:
        if mid not in self.open:
            from langgraph.store.base import PutOp

            gateway = self.ctx.gateway
            manager, store = self._manager(gateway.base_url, gateway.api_key)
            saved = json.loads((self.ctx.state_dir / mid / "store.json").read_text(encoding="utf-8"))
            if saved:
                store.batch([PutOp(("memories", mid), it["key"], it["value"]) for it in saved])
            self.open[mid] = (manager, {it["key"]: it for it in saved})
        return self.open[mid]

    def search(self, question: Question, view: MemoryView) -> Found:
        if self.protocol == "native":
            return self._search_agents(question)
        started = time.perf_counter()
        manager, saved = self._opened(question.memory_id)
        k = int(self.opts["top_k"])
        hits = manager.search(query=question.question, limit=k,
                              config={"configurable": {"langgraph_user_id": question.memory_id}}) if saved else []
        evidence = []
        for h in hits:
            about = saved.get(h.key, {})
            evidence.append(Evidence(_memory_text(h.value), list(about.get("dia_ids", [])),
                                     about.get("timestamp", ""),
                                     round(float(h.score), 4) if h.score is not None else None, ""))
        return Found(evidence, Spent(seconds=round(time.perf_counter() - started, 4)), {"top_k": k})

    @classmethod
    def estimate_ingest(cls, view: MemoryView, cfg: Config) -> Optional[Spent]:
        if cfg.systems.protocol == "native":  # two agent calls per message, each with the speaker's thread
            turns = [(t.speaker, count_tokens(t.text)) for s in view.sessions for t in s.turns]
            calls, prompt, completion = langmem_agent.estimate(turns)
            return Spent(calls=calls, prompt_tokens=prompt, completion_tokens=completion)
        # One extraction call per session (trustcall may add a repair call when a reply fails
        # validation: not counted), showing the session and up to query_limit (5) memories.
        calls = prompt = 0
        for s in view.sessions:
            calls += 1
            prompt += EXTRACTION_PROMPT_TOKENS + sum(count_tokens(t.text) + 8 for t in s.turns) + 5 * 60
        return Spent(calls=calls, prompt_tokens=prompt, completion_tokens=calls * 200)


def _memory_text(value: Any) -> str:
    """A memory's text: LangMem's default schema (``Memory``, a pydantic model once the manager has
    read it back) keeps it as ``content``."""
    content = value.get("content") if isinstance(value, dict) else getattr(value, "content", value)
    if isinstance(content, dict):
        content = content.get("content", json.dumps(content, ensure_ascii=False))
    return str(content)
