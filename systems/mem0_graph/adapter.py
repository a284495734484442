"""mem0 with graph memory (Mem0^g; ``mem0ai`` 1.0.11, the last release with graph stores, and its
embedded Kuzu graph) behind the systems protocol, following mem0's own LoCoMo evaluation of its
graph variant (mem0ai/mem0 ``evaluation/``, ``make run-mem0-plus-add`` / ``run-mem0-plus-search``:
``--is_graph``, the platform's ``enable_graph=True``).

Ingestion as ``evaluation/src/memzero/add.py``: each session is added to EACH speaker's memory
(user id = the speaker's name), that speaker's turns as role ``user`` and the other's as
``assistant``, content ``"<speaker>: <text>"``, two messages per ``add`` call, the session date as
metadata ``timestamp``. Each ``add`` runs mem0's fact extraction and memory update (the vector
store, embedded Qdrant) and, beside it, the graph pipeline: entity extraction, relation extraction
and the deletion check by tool calls, entities and relations merged into Kuzu by embedding
similarity.

Search as ``evaluation/src/memzero/search.py`` with ``is_graph``: the question against both
speakers' memories, ``top_k`` memories each (30 under the native protocol, the Makefile's
``--top_k 30``; the harness's ``limit`` under the common one), each with its relations (mem0's
graph search: the question's entities, their neighbourhood above the similarity threshold,
BM25-ranked, as many as ``top_k``). The buffer is the memory part of the reference's
``ANSWER_PROMPT_GRAPH``: per speaker the memories as ``"<timestamp>: <memory>"`` and the relations
as ``{"source", "relationship", "target"}``, both as JSON lists indented by 4. Under the native
protocol the search also returns that prompt's slots (``answer_slots``, speaker_a first, as
search.py fills them), and the harness answers with ANSWER_PROMPT_GRAPH itself
(common/prompts/answer_mem0_graph_user.txt).

Every LLM and embedding call goes to ``OPENAI_BASE_URL`` (the harness's gateway). The card
(``card.yaml``) lists where this departs from the reference.
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

BATCH_SIZE = 2  # add.py's batch_size
NATIVE_TOP_K = 30  # evaluation/Makefile: run-mem0-plus-search ... --top_k 30
# The extraction prompt states the day it was imported ("Today's date is 2026-..."): every request,
# and so every cache key, would change daily. It states the session's date instead.
TODAY_RE = re.compile(r"Today's date is \d{4}-\d{2}-\d{2}\.")


def speakers(sessions: list[dict[str, Any]]) -> list[str]:
    """The conversation's speakers in order of first appearance (LoCoMo: speaker_a, speaker_b),
    each a user id of its own; none when no turn has been said (an empty memory)."""
    return list(dict.fromkeys(t["speaker"] for s in sessions for t in s["turns"]))[:2]


def batches(session: dict[str, Any], me: str) -> list[list[dict[str, Any]]]:
    """add.py's messages of one session for ``me``'s memory, cut into batches of two; each message
    keeps its turn id aside (``turn_id``), which never reaches a prompt."""
    msgs = [{"role": "user" if t["speaker"] == me else "assistant", "content": f"{t['speaker']}: {t['text']}",
             "turn_id": t["turn_id"]} for t in session["turns"]]
    return [msgs[i:i + BATCH_SIZE] for i in range(0, len(msgs), BATCH_SIZE)]


def day_of(date: Optional[str]) -> Optional[str]:
    parsed = proto.locomo_date(date)
    return parsed.strftime("%Y-%m-%d") if parsed else None


def graph_answer_slots(found: dict[str, tuple[list[str], list[dict[str, str]]]], order: list[str]) -> dict[str, str]:
    """ANSWER_PROMPT_GRAPH's slots as mem0's evaluation fills them (mem0ai/mem0 @ b3ede5b7,
    evaluation/src/memzero/search.py, answer_question): speaker 1 is LoCoMo's speaker_a; each
    speaker's memories ("<timestamp>: <memory>") and relations ({source, relationship, target}) as
    JSON lists indented by 4. ``found``: speaker -> (memory lines, relations); ``order``: the speakers,
    speaker_a first (a missing one: no name, empty lists)."""
    slots: dict[str, str] = {}
    for i, who in enumerate((order + ["", ""])[:2], 1):
        lines, relations = found.get(who, ([], []))
        slots[f"speaker_{i}_user_id"] = who
        slots[f"speaker_{i}_memories"] = json.dumps(lines, indent=4)
        slots[f"speaker_{i}_graph_memories"] = json.dumps(relations, indent=4)
    return slots


def safe(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


class Mem0GraphAdapter(proto.Adapter):
    system = "mem0_graph"

    def __init__(self) -> None:
        self.memories: dict[str, Any] = {}
        self.prompt_template: Optional[str] = None

    def version(self) -> str:
        from importlib.metadata import version
        return version("mem0ai")

    def top_k(self, limit: Optional[int] = None) -> int:
        """Memories (and relations) per speaker: the reference's 30 under native, else the limit sent."""
        if self.protocol == "native":
            return NATIVE_TOP_K
        return int(limit if limit is not None else self.options.get("limit", 10))

    def settings(self) -> dict[str, Any]:
        return {"top_k": self.top_k(), "graph_store": "kuzu", "batch_size": BATCH_SIZE}

    # ---- mem0
    def _root(self, memory_id: str) -> Path:
        return Path(proto.SYSTEM_DIR) / "mem0_graph" / safe(memory_id)

    def _open(self, memory_id: str) -> Any:
        if memory_id in self.memories:
            return self.memories[memory_id]
        os.environ.setdefault("MEM0_DIR", str(Path(proto.SYSTEM_DIR) / ".mem0"))
        from mem0 import Memory
        from mem0.configs.base import MemoryConfig

        root = self._root(memory_id)
        root.mkdir(parents=True, exist_ok=True)
        endpoint = {"api_key": proto.API_KEY, "openai_base_url": proto.BASE_URL}
        config = MemoryConfig(
            vector_store={"provider": "qdrant", "config": {"path": str(root / "qdrant"), "collection_name": "mem0",
                                                            "embedding_model_dims": proto.EMBED_DIM, "on_disk": True}},
            llm={"provider": "openai", "config": {"model": proto.LLM_MODEL, **endpoint}},
            embedder={"provider": "openai", "config": {"model": proto.EMBED_MODEL, "embedding_dims": proto.EMBED_DIM,
                                                        **endpoint}},
            graph_store={"provider": "kuzu", "config": {"db": str(root / "graph.kuzu")}},
            history_db_path=str(root / "history.db"),
        )
        memory = Memory(config)
        self.memories[memory_id] = memory
        return memory

    def _dated(self, date: Optional[str]) -> None:
        """The user-memory extraction prompt, its "Today's date" the session's (see TODAY_RE)."""
        import mem0.memory.utils as utils

        if self.prompt_template is None:
            self.prompt_template = utils.USER_MEMORY_EXTRACTION_PROMPT
        day = day_of(date) or "unknown"
        utils.USER_MEMORY_EXTRACTION_PROMPT = TODAY_RE.sub(f"Today's date is {day}.", self.prompt_template)

    def _graph_counts(self, memory: Any) -> tuple[int, int]:
        nodes = memory.graph.kuzu_execute("MATCH (n:Entity) RETURN count(n) AS c")
        relations = memory.graph.kuzu_execute("MATCH (:Entity)-[r:CONNECTED_TO]->(:Entity) RETURN count(r) AS c")
        return int(nodes[0]["c"]) if nodes else 0, int(relations[0]["c"]) if relations else 0

    # ---- the protocol
    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        memory = self._open(memory_id)
        who = speakers(sessions)
        (self._root(memory_id) / "speakers.json").write_text(json.dumps(who), encoding="utf-8")
        for session in sessions:
            self._dated(session.get("date"))
            for me in who:  # add.py runs the two speakers in two threads; here one after the other
                for batch in batches(session, me):
                    meta = {"timestamp": session.get("date"), "turn_ids": [m.pop("turn_id") for m in batch]}
                    memory.add(batch, user_id=me, metadata=meta)
        stored = {me: len(memory.get_all(user_id=me, limit=100000)["results"]) for me in who}
        nodes, relations = self._graph_counts(memory)
        self.note_built(memories=sum(stored.values()), graph_nodes=nodes, graph_relations=relations,
                        **{f"memories_{safe(me)}": n for me, n in stored.items()})
        return sum(stored.values()) + relations, []

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        memory = self._open(memory_id)
        k = self.top_k(limit)
        evidence: list[dict[str, Any]] = []
        parts: list[str] = []
        found_by: dict[str, tuple[list[str], list[dict[str, str]]]] = {}
        for me in self._speakers(memory_id):
            found = memory.search(question, user_id=me, limit=k)
            hits = found.get("results") or []
            relations = [{"source": r["source"], "relationship": r["relationship"], "target": r["destination"]}
                         for r in found.get("relations") or []]
            lines = []
            for h in hits:
                meta = h.get("metadata") or {}
                stamp = meta.get("timestamp") or ""
                lines.append(f"{stamp}: {h['memory']}")
                evidence.append({"text": h["memory"], "score": round(float(h["score"]), 4), "timestamp": stamp,
                                 "source": me, "source_turn_ids": [str(t) for t in meta.get("turn_ids") or []]})
            evidence += [{"text": f"{r['source']} -- {r['relationship']} -- {r['target']}", "score": None,
                          "source": f"{me} (graph)", "source_turn_ids": []} for r in relations]
            # ANSWER_PROMPT_GRAPH's memory part: the user id's name, its memories, its relations.
            parts.append(f"Memories for user {me}:\n\n{json.dumps(lines, indent=4)}\n\n"
                         f"Relations for user {me}:\n\n{json.dumps(relations, indent=4)}")
            found_by[me] = (lines, relations)
        if self.protocol == "native":  # 07 answers with ANSWER_PROMPT_GRAPH filled with these (card.yaml)
            named = [self.speakers.get("speaker_a", ""), self.speakers.get("speaker_b", "")]
            order = named if set(found_by) <= set(named) and all(named) else list(found_by)
            self.note_answer_slots(**graph_answer_slots(found_by, order))
        return evidence, "\n\n".join(parts)

    def _speakers(self, memory_id: str) -> list[str]:
        """The memory's user ids as ingestion wrote them (speaker_a first); none before an ingestion."""
        path = self._root(memory_id) / "speakers.json"
        return list(json.loads(path.read_text(encoding="utf-8"))) if path.is_file() else []

    def close(self) -> None:
        # Qdrant's local mode and Kuzu hold their directories until closed; the search child opens them next.
        for memory in self.memories.values():
            for owner, name in ((memory.vector_store.client, "close"), (memory.graph.graph, "close"),
                                (memory.graph.db, "close")):
                try:
                    getattr(owner, name)()
                except Exception:  # already closed: nothing to release
                    pass
        self.memories.clear()

if __name__ == "__main__":
    proto.serve(Mem0GraphAdapter())
