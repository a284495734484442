"""Cognee behind the systems protocol, under two protocols.

common: as agent-memory-benchmark's cognee adapter runs it: one document per session (the
session's turns as a JSON list, the form that benchmark gives every system), ``cognee.add`` into
one dataset per memory, ``cognee.cognify([dataset], chunk_size=512)``, and a question answered by
``cognee.search(query_type=SearchType.CHUNKS, datasets=[dataset])``; the buffer is the search result
serialised as JSON (that benchmark's LoCoMo answer prompt puts the raw result there).

native: as cognee's own LoCoMo evaluation runs it (``cognee/eval_framework/locomo/`` in the
installed package): an overview document (the speakers, the session timeline) and one document per
window of 6 consecutive turns with a dated session header, all through one
``cognee.remember(documents, chunk_size=4096)`` (add, cognify, improve); a question answered by the
hybrid retriever (chunks, entities and facts, 20 each, 10 edges per entity) and its completion with
the evaluation's one answer prompt (``qa_prompts/unified.txt``, read from the package).

Each ingestion reports what cognee built (graph nodes and edges, chunks). Cognee's own embedded
stores (SQLite, LanceDB, its graph database) live in ``HARNESS_SYSTEM_DIR``; its LLM (through
litellm) and its embeddings (its OpenAI-compatible engine) go to ``OPENAI_BASE_URL``; its
telemetry is off.
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
    # As cognee's LoCoMo evaluation runs: one graph and one vector store per memory's store (each
    # memory has its own directory), no per-answer feedback call.
    "ENABLE_BACKEND_ACCESS_CONTROL": "false", "AUTO_FEEDBACK": "false",
}
# cognee/eval_framework/locomo: configs/locomo_hybrid_20_20_20.json, ingest.py, preprocess.py.
HYBRID = {"chunks_top_k": 20, "entities_top_k": 20, "facts_top_k": 20, "max_edges_per_entity": 10}
WINDOW_TURNS, NATIVE_CHUNK_SIZE, COMMON_CHUNK_SIZE = 6, 4096, 512
WINDOWS_FILE = "harness_windows.json"  # window text -> its turn ids, for a later search process


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


def session_number(session: dict[str, Any], position: int) -> int:
    tail = str(session.get("session_id") or "").rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else position


def turn_line(turn: dict[str, Any]) -> str:
    return f"{turn['speaker']}: {turn['text']}".rstrip()


def windows(sessions: list[dict[str, Any]], a: str, b: str, size: int = WINDOW_TURNS) -> list[tuple[str, list[str]]]:
    """The evaluation's documents after its overview: each session cut into windows of ``size``
    turns (a last window shorter than max(2, size // 3) joins the one before), each headed by the
    session's number, the two speakers and the session's date; with the turn ids of each."""
    out = []
    for position, session in enumerate(sessions, 1):
        turns = session["turns"]
        groups = [turns[i:i + size] for i in range(0, len(turns), size)]
        if len(groups) > 1 and len(groups[-1]) < max(2, size // 3):
            groups[-2] = groups[-2] + groups.pop()
        for part, group in enumerate(groups, 1):
            head = (f"Session {session_number(session, position)} of the conversation between {a} and {b}, "
                    f"which took place at {session.get('date') or 'an unknown date'}")
            head += f" (part {part} of {len(groups)})." if len(groups) > 1 else "."
            out.append(("\n".join([head] + [turn_line(t) for t in group]), [t["turn_id"] for t in group]))
    return out


def overview(sessions: list[dict[str, Any]], a: str, b: str, memory_id: str) -> str:
    """The evaluation's first document: who talked, and when each session took place."""
    lines = [f"{a} and {b} are friends who talked in {len(sessions)} conversation sessions over time "
             f"(conversation id {memory_id}).", "Session timeline:"]
    lines += [f"- Session {session_number(s, i)} took place at {s.get('date') or 'an unknown date'} "
              f"({len(s['turns'])} turns)." for i, s in enumerate(sessions, 1)]
    return "\n".join(lines)


def answer_text(result: Any) -> str:
    """A completion as the evaluation reads it: the string, or the first of a list."""
    if isinstance(result, list):
        return "" if not result else str(result[0])
    return "" if result is None else str(result)


def item_text(item: Any) -> str:
    """A hybrid result's text: a chunk's text, an entity's name and description, a fact as given."""
    payload = getattr(item, "payload", item)
    if isinstance(payload, dict):
        if payload.get("text"):
            return str(payload["text"])
        named = " - ".join(str(payload[k]) for k in ("name", "description") if payload.get(k))
        if named:
            return named
    return str(payload)


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

    @property
    def answers(self) -> bool:  # type: ignore[override]
        return self.protocol == "native"  # its evaluation answers with the retriever's completion

    def settings(self) -> dict[str, Any]:
        if self.protocol == "native":
            return {"search_type": "HYBRID_COMPLETION", **HYBRID, "unit": f"{WINDOW_TURNS}-turn windows",
                    "chunk_size": NATIVE_CHUNK_SIZE, "answer_prompt": "qa_prompts/unified.txt"}
        return {"search_type": "CHUNKS", "unit": "session", "chunk_size": COMMON_CHUNK_SIZE}

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

    def _speaker_names(self, sessions: list[dict[str, Any]]) -> tuple[str, str]:
        seen = list(dict.fromkeys(t["speaker"] for s in sessions for t in s["turns"])) + ["", ""]
        return self.speakers.get("speaker_a") or seen[0], self.speakers.get("speaker_b") or seen[1]

    async def _graph_counts(self) -> dict[str, int]:
        """The graph cognee built for this memory (its own store): nodes, edges, chunk nodes."""
        from cognee.infrastructure.databases.graph import get_graph_engine

        graph = await get_graph_engine()
        nodes, edges = await graph.get_graph_data()
        return {"graph_nodes": len(nodes), "graph_edges": len(edges),
                "chunks": sum(1 for _, props in nodes if (props or {}).get("type") == "DocumentChunk")}

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        cognee = self._module()
        dataset = dataset_name(memory_id)

        async def common() -> None:
            for session in sessions:
                await cognee.add(document(session), dataset_name=dataset)
            await cognee.cognify([dataset], chunk_size=COMMON_CHUNK_SIZE)

        async def native() -> None:
            a, b = self._speaker_names(sessions)
            cut = windows(sessions, a, b)
            ROOT.mkdir(parents=True, exist_ok=True)
            (ROOT / WINDOWS_FILE).write_text(json.dumps(dict(cut)), encoding="utf-8")
            await cognee.remember([overview(sessions, a, b, memory_id)] + [text for text, _ in cut],
                                  dataset_name=dataset, chunk_size=NATIVE_CHUNK_SIZE)

        async def run() -> int:
            await (native() if self.protocol == "native" else common())
            self.note_built(**await self._graph_counts())
            from cognee.api.v1.search import SearchType
            # What the memory holds: the chunks cognee indexed (a search wide enough for all).
            found = await cognee.search(query_text="conversation", query_type=SearchType.CHUNKS,
                                        datasets=[dataset], top_k=10_000)
            return len(chunks(found))

        return int(self._run(run())), []

    def _hybrid(self) -> Any:
        from importlib.resources import files

        from cognee.modules.retrieval.hybrid_retriever import HybridRetriever

        prompt = files("cognee.eval_framework.locomo").joinpath("qa_prompts", "unified.txt").read_text(encoding="utf-8")
        return HybridRetriever(**HYBRID, system_prompt=prompt)

    def _native(self, question: str, complete: bool) -> tuple[list[dict[str, Any]], str, str]:
        """The evaluation's three steps: retrieve, the context from what was retrieved, and (when
        ``complete``) the completion with its answer prompt."""
        retriever = self._hybrid()
        saved = ROOT / WINDOWS_FILE
        turns: dict[str, list[str]] = json.loads(saved.read_text(encoding="utf-8")) if saved.is_file() else {}

        async def run() -> tuple[Any, str, Any]:
            found = await retriever.get_retrieved_objects(query=question)
            context = await retriever.get_context_from_objects(query=question, retrieved_objects=found)
            completion = (await retriever.get_completion_from_context(
                query=question, retrieved_objects=found, context=context) if complete else None)
            return found, str(context or ""), completion

        found, context, completion = self._run(run())
        evidence = []
        for lane in ("chunks", "entities", "facts"):
            for item in (found or {}).get(lane) or []:
                text = item_text(item)
                evidence.append({"text": text, "score": None, "source": lane,
                                 "source_turn_ids": turns.get(text, []) if lane == "chunks" else []})
        return evidence, context, answer_text(completion)

    def answer(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str, str]:
        self._module()
        return self._native(question, complete=True)

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        cognee = self._module()
        if self.protocol == "native":  # the hybrid retrieval and its context, without the completion
            evidence, context, _ = self._native(question, complete=False)
            return evidence, context
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
