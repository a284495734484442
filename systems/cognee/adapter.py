"""Cognee behind the systems protocol, as agent-memory-benchmark's cognee adapter runs it: one
document per session (the session's turns as a JSON list, the form that benchmark gives every
system), ``cognee.add`` into one dataset per memory, ``cognee.cognify([dataset], chunk_size=512)``,
and a question answered by ``cognee.search(query_type=SearchType.CHUNKS, datasets=[dataset])``;
the buffer is the search result serialised as JSON (that benchmark's LoCoMo answer prompt puts the
raw result there). Cognee's own embedded stores (SQLite, LanceDB, Kuzu) live in
``HARNESS_SYSTEM_DIR``; its LLM (through litellm) and its embeddings (its OpenAI-compatible engine)
go to ``OPENAI_BASE_URL``; its telemetry is off.
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

ROOT = Path(proto.SYSTEM_DIR) / "cognee"
# Cognee reads these settings from the environment when it is first imported.
SETTINGS = {
    "LLM_PROVIDER": "openai", "LLM_MODEL": proto.LLM_MODEL, "LLM_ENDPOINT": proto.BASE_URL,
    "LLM_API_KEY": proto.API_KEY,
    "EMBEDDING_PROVIDER": "openai_compatible", "EMBEDDING_MODEL": proto.EMBED_MODEL,
    "EMBEDDING_ENDPOINT": proto.BASE_URL, "EMBEDDING_API_KEY": proto.API_KEY,
    "EMBEDDING_DIMENSIONS": str(proto.EMBED_DIM),
    "DB_PROVIDER": "sqlite", "VECTOR_DB_PROVIDER": "lancedb", "GRAPH_DATABASE_PROVIDER": "kuzu",
    "DATA_ROOT_DIRECTORY": str(ROOT / "data"), "SYSTEM_ROOT_DIRECTORY": str(ROOT / "system"),
    "COGNEE_SKIP_CONNECTION_TEST": "true", "TELEMETRY_DISABLED": "1", "ENV": "local",
}


# A chunk is a piece of a session's JSON: the turns it quotes carry their ids.
DIA_ID = re.compile(r'"dia_id": "([^"]+)"')


UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
VOLATILE = {"created_at", "updated_at"}


def stable(value: Any) -> Any:
    """The search result without what changes from one ingestion to the next and says nothing
    about the conversation (record ids, made from a user created per store, and timestamps): the
    same memory then renders the same buffer, so the answer call is cached across re-ingestions."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items()
                if k not in VOLATILE and not (isinstance(v, str) and UUID.match(v))}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


def dataset_name(memory_id: str) -> str:
    return "bench_" + "".join(c if c.isalnum() else "_" for c in memory_id)


def document(session: dict[str, Any]) -> str:
    """A session as agent-memory-benchmark hands it to every system: its turns as JSON."""
    return json.dumps([{"speaker": t["speaker"], "dia_id": t["turn_id"], "text": t["text"]} for t in session["turns"]])


def chunks(result: Any) -> list[dict[str, Any]]:
    """The chunks of a CHUNKS search result (grouped per dataset, or flat)."""
    found: list[dict[str, Any]] = []
    for item in result or []:
        inner = item.get("search_result") if isinstance(item, dict) else None
        for chunk in inner if isinstance(inner, list) else [item]:
            if isinstance(chunk, dict) and chunk.get("text"):
                found.append(chunk)
            elif hasattr(chunk, "text"):
                found.append({"text": chunk.text, "id": str(getattr(chunk, "id", ""))})
    return found


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


class CogneeAdapter(proto.Adapter):
    system = "cognee"

    def __init__(self) -> None:
        for key, value in SETTINGS.items():
            os.environ[key] = value
        self.loop = asyncio.new_event_loop()
        self.cognee: Any = None

    def version(self) -> str:
        from importlib.metadata import version
        return version("cognee")

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def _module(self) -> Any:
        if self.cognee is None:
            import cognee

            cognee.config.data_root_directory(SETTINGS["DATA_ROOT_DIRECTORY"])
            cognee.config.system_root_directory(SETTINGS["SYSTEM_ROOT_DIRECTORY"])
            self.cognee = cognee
        return self.cognee

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        cognee = self._module()
        dataset = dataset_name(memory_id)

        async def run() -> int:
            for session in sessions:
                await cognee.add(document(session), dataset_name=dataset)
            await cognee.cognify([dataset], chunk_size=512)
            from cognee.api.v1.search import SearchType
            # What the memory holds: the chunks cognee indexed (a search wide enough for all).
            found = await cognee.search(query_text="conversation", query_type=SearchType.CHUNKS,
                                        datasets=[dataset], top_k=10_000)
            return len(chunks(found))

        return int(self._run(run())), []

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        cognee = self._module()
        from cognee.api.v1.search import SearchType

        result = self._run(cognee.search(query_text=question, query_type=SearchType.CHUNKS,
                                         datasets=[dataset_name(memory_id)], top_k=limit))
        evidence = [{"text": c["text"], "score": c.get("score") if isinstance(c.get("score"), (int, float)) else None,
                     "source_turn_ids": list(dict.fromkeys(DIA_ID.findall(c["text"])))} for c in chunks(result)[:limit]]
        return evidence, json.dumps(stable(jsonable(result)))

    def close(self) -> None:
        self.loop.close()


if __name__ == "__main__":
    proto.serve(CogneeAdapter())
