"""MemOS (``MemoryOS`` on PyPI) behind the systems protocol, following MemTensor/MemOS's
``evaluation/scripts/locomo/``: each speaker of a conversation is a user with its own memory; every
session is added to both, as messages from that speaker's side (``role`` user for the speaker's own
turns, assistant for the other's; content ``<speaker>: <text>``; the session's time as
``chat_time``), two messages at a time (``locomo_ingestion.py``: ``batch_size=2``); a question
searches both users' memories (``top_k`` each) and the buffer is ``TEMPLATE_MEMOS`` with one block
of ``memory`` lines per speaker (``locomo_search.py``, ``prompts.py``).

The published runs go through the MemOS API server (tree memory on Neo4j). Here the memory is
MemOS's embedded ``general_text`` memory (``GeneralTextMemory``: the same memory-reader prompt,
``SIMPLE_STRUCT_MEM_READER_PROMPT``, extracts memories; a local Qdrant store under
``HARNESS_SYSTEM_DIR`` holds them); its LLM (``openai`` backend) and embedder (``universal_api``,
provider openai) are given ``OPENAI_BASE_URL``.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)

BATCH = 2  # messages per add call, as locomo_ingestion.py sends them
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


def messages_for(session: dict[str, Any], speaker: str) -> list[dict[str, str]]:
    """A session from ``speaker``'s side: its own turns as the user's, the other's as the assistant's."""
    when = proto.locomo_date(session.get("date"))
    stamp = when.isoformat() if when else (session.get("date") or "")
    return [{"role": "user" if t["speaker"] == speaker else "assistant", "content": f"{t['speaker']}: {t['text']}",
             "chat_time": stamp} for t in session["turns"]]


class MemOSAdapter(proto.Adapter):
    system = "memos"

    def __init__(self) -> None:
        # MemOS keeps its logs (and default stores) under $MEMOS_BASE_PATH/.memos, else the working
        # directory's: keep them in the memory's directory.
        os.environ.setdefault("MEMOS_BASE_PATH", str(Path(proto.SYSTEM_DIR) / "memos"))
        self.memories: dict[tuple[str, str], Any] = {}

    def version(self) -> str:
        from importlib.metadata import version
        return version("MemoryOS")

    def _root(self, memory_id: str) -> Path:
        return Path(proto.SYSTEM_DIR) / "memos" / "".join(c if c.isalnum() else "_" for c in memory_id)

    def _memory(self, memory_id: str, speaker: str) -> Any:
        key = (memory_id, speaker)
        if key not in self.memories:
            from memos.configs.memory import GeneralTextMemoryConfig
            from memos.memories.textual.general import GeneralTextMemory

            user = "".join(c if c.isalnum() else "_" for c in speaker)
            config = GeneralTextMemoryConfig.model_validate({
                "extractor_llm": {"backend": "openai", "config": {
                    "model_name_or_path": proto.LLM_MODEL, "api_key": proto.API_KEY, "api_base": proto.BASE_URL,
                    "temperature": 0.0}},
                "vector_db": {"backend": "qdrant", "config": {
                    "collection_name": f"locomo_{user}", "vector_dimension": proto.EMBED_DIM,
                    "distance_metric": "cosine", "path": str(self._root(memory_id) / user)}},
                "embedder": {"backend": "universal_api", "config": {
                    "provider": "openai", "api_key": proto.API_KEY, "base_url": proto.BASE_URL,
                    "model_name_or_path": proto.EMBED_MODEL}},
            })
            self.memories[key] = GeneralTextMemory(config)
        return self.memories[key]

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        speakers = speakers_of(sessions)
        root = self._root(memory_id)
        root.mkdir(parents=True, exist_ok=True)
        (root / "speakers.json").write_text(json.dumps(speakers), encoding="utf-8")
        errors: list[str] = []
        for speaker in speakers:
            memory = self._memory(memory_id, speaker)
            for session in sessions:
                messages = messages_for(session, speaker)
                for start in range(0, len(messages), BATCH):
                    batch = messages[start:start + BATCH]
                    try:
                        memory.add(memory.extract(batch))
                    except Exception as exc:  # one batch lost is counted; the rest still goes in
                        where = f"{speaker} {session.get('session_id')} messages {start}-{start + len(batch) - 1}"
                        errors.append(f"{where}: {type(exc).__name__}: {exc}"[:500])
        items = sum(len(self._memory(memory_id, s).get_all()) for s in speakers)
        return items, errors

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        saved = self._root(memory_id) / "speakers.json"
        speakers = json.loads(saved.read_text(encoding="utf-8")) if saved.exists() else []
        if len(speakers) < 2:
            speakers = (speakers + ["speaker_a", "speaker_b"])[:2]
        found = {s: self._memory(memory_id, s).search(question, top_k=limit) for s in speakers}
        evidence = [{"text": item.memory, "score": None, "source_turn_ids": []}
                    for s in speakers for item in found[s]]
        blocks = {s: "\n".join(item.memory for item in found[s]) + "\n" for s in speakers}
        context = TEMPLATE.format(speaker_1=speakers[0], speaker_1_memories=blocks[speakers[0]],
                                  speaker_2=speakers[1], speaker_2_memories=blocks[speakers[1]])
        return evidence, context


if __name__ == "__main__":
    proto.serve(MemOSAdapter())
