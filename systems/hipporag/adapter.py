"""HippoRAG 2 (``hipporag`` on PyPI) behind the systems protocol, run as MemoryAgentBench runs it:
the memory's text is indexed as passages (``HippoRAG.index``: OpenIE triples by the LLM, a graph of
phrases and passages, embeddings of passages, entities and facts), a question is answered by
``HippoRAG.retrieve(queries=[q], num_to_retrieve=k)`` (fact retrieval, recognition memory, then
Personalized PageRank over the graph) and the passages are rendered ``Passage i:\\n<text>`` joined
by blank lines (MemoryAgentBench ``agent.py``, ``_handle_hippo_rag``). Every LLM and embedding call
goes to ``OPENAI_BASE_URL`` (its OpenAI-compatible clients are given that base URL).
"""
from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)


def without_vllm() -> None:
    """HippoRAG imports vLLM at its top level for its offline (local GPU) OpenIE path only; vLLM
    0.6.6 pins torch 2.5.1 and CUDA, so it is not installed. A placeholder module that refuses to
    be used lets the import succeed; the online path (OpenAI-compatible endpoints, as
    MemoryAgentBench runs it) never touches it."""
    if "vllm" in sys.modules:
        return
    try:
        import vllm  # noqa: F401  (a real vLLM, if someone installed one)
        return
    except ImportError:
        pass

    class Unavailable:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("vLLM is not installed in this environment (HippoRAG's offline OpenIE needs it)")

    placeholder = types.ModuleType("vllm")
    placeholder.SamplingParams = Unavailable  # type: ignore[attr-defined]
    placeholder.LLM = Unavailable  # type: ignore[attr-defined]
    sys.modules["vllm"] = placeholder


def passage(session: dict[str, Any]) -> str:
    """One passage per session: its date, then one ``speaker: text`` line per turn."""
    lines = [f"Session date: {session.get('date') or 'unknown'}"]
    lines += [f"{t['speaker']}: {t['text']}" for t in session["turns"]]
    return "\n".join(lines)


class HippoRAGAdapter(proto.Adapter):
    system = "hipporag"

    def __init__(self) -> None:
        self.memories: dict[str, Any] = {}
        self.turns: dict[str, dict[str, list[str]]] = {}  # memory -> passage text -> turn ids

    def version(self) -> str:
        from importlib.metadata import version
        return version("hipporag")

    def _open(self, memory_id: str) -> Any:
        without_vllm()
        from hipporag import HippoRAG

        # HippoRAG picks its embedding client by the model's name: "text-embedding..." is its
        # OpenAI-compatible client; the gateway serves the harness's embedder whatever the name.
        name = proto.EMBED_MODEL if "text-embedding" in proto.EMBED_MODEL else "text-embedding-3-small"
        save_dir = Path(proto.SYSTEM_DIR) / "hipporag" / memory_id
        return HippoRAG(save_dir=str(save_dir), llm_model_name=proto.LLM_MODEL, llm_base_url=proto.BASE_URL,
                        embedding_model_name=name, embedding_base_url=proto.BASE_URL)

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        rag = self._open(memory_id)
        docs = [passage(s) for s in sessions]
        turns = {d: [t["turn_id"] for t in s["turns"]] for d, s in zip(docs, sessions)}
        rag.index(docs=docs)
        # Which turns each passage holds, beside HippoRAG's own files, for a later process's searches.
        (Path(rag.global_config.save_dir) / "harness_turns.json").write_text(json.dumps(turns), encoding="utf-8")
        self.turns[memory_id] = turns
        self.memories[memory_id] = rag
        store = rag.chunk_embedding_store
        return len(store.get_all_ids()), []

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        rag = self.memories.get(memory_id)
        if rag is None:  # ingested by an earlier process: HippoRAG reloads its index from save_dir
            rag = self.memories[memory_id] = self._open(memory_id)
            saved = Path(rag.global_config.save_dir) / "harness_turns.json"
            self.turns[memory_id] = json.loads(saved.read_text(encoding="utf-8")) if saved.exists() else {}
        solution = rag.retrieve(queries=[question], num_to_retrieve=limit)[0]
        scores = [float(s) for s in (solution.doc_scores if solution.doc_scores is not None else [])]
        turns = self.turns.get(memory_id, {})
        evidence = [{"text": doc, "score": scores[i] if i < len(scores) else None,
                     "source_turn_ids": turns.get(doc, [])} for i, doc in enumerate(solution.docs)]
        context = "\n\n".join(f"Passage {i + 1}:\n{doc}" for i, doc in enumerate(solution.docs))
        return evidence, context


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_API_KEY", proto.API_KEY)
    proto.serve(HippoRAGAdapter())
