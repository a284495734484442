"""HippoRAG 2 (``hipporag`` on PyPI) behind the systems protocol, run as MemoryAgentBench runs it:
the memory's text is indexed as passages (``HippoRAG.index``: OpenIE triples by the LLM, a graph of
phrases and passages, embeddings of passages, entities and facts), a question is answered by
``HippoRAG.retrieve(queries=[q], num_to_retrieve=k)`` (fact retrieval, recognition memory, then
Personalized PageRank over the graph) and the passages are rendered ``Passage i:\\n<text>`` joined
by blank lines (MemoryAgentBench ``agent.py``, ``_handle_hippo_rag``). Under the native protocol
HippoRAG answers too, with its own ``rag_qa`` over those passages, as that benchmark does. Every LLM
and embedding call goes to ``OPENAI_BASE_URL`` (its OpenAI-compatible clients are given that base URL).

HippoRAG can stop being itself without a word: when OpenIE gave no triple, or no fact survives its
recognition filter, ``retrieve`` falls back to plain dense passage retrieval (logged at INFO). Each
search that does so says it (``fallbacks``: ``dpr_no_facts``, ``dpr_filtered``, ``dpr_rerank_error``),
and each ingestion says what the memory holds (``built``: passages, triples, facts, entities).
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


def fallback_kind(facts: list[Any], log: dict[str, Any]) -> Optional[str]:
    """Why ``retrieve`` will fall back to dense passage retrieval after ``rerank_facts`` (None: it
    will not): the memory has no fact to score, the recognition filter kept none, or it raised."""
    if facts:
        return None
    if log.get("error"):
        return "dpr_rerank_error"
    return "dpr_filtered" if log.get("facts_before_rerank") else "dpr_no_facts"


def watch_fallbacks(rag: Any, note: Any) -> None:
    """Wrap ``rag.rerank_facts`` (what ``retrieve`` decides its fallback on) to note each fallback."""
    original = rag.rerank_facts

    def rerank_facts(query: str, query_fact_scores: Any) -> Any:
        indices, facts, log = original(query, query_fact_scores)
        kind = fallback_kind(list(facts), dict(log or {}))
        if kind:
            note(kind)
        return indices, facts, log
    rag.rerank_facts = rerank_facts


def built_counts(rag: Any) -> dict[str, int]:
    """What a memory's index holds: passages, triples OpenIE extracted (and passages with none),
    unique facts, entities."""
    out = {"passages": len(rag.chunk_embedding_store.get_all_ids()),
           "facts": len(rag.fact_embedding_store.get_all_ids()),
           "entities": len(rag.entity_embedding_store.get_all_ids())}
    path = Path(rag.openie_results_path)
    if path.is_file():
        docs = json.loads(path.read_text(encoding="utf-8")).get("docs") or []
        out["triples"] = sum(len(d.get("extracted_triples") or []) for d in docs)
        out["passages_without_triples"] = sum(1 for d in docs if not d.get("extracted_triples"))
    return out


class HippoRAGAdapter(proto.Adapter):
    system = "hipporag"

    def __init__(self) -> None:
        self.memories: dict[str, Any] = {}
        self.turns: dict[str, dict[str, list[str]]] = {}  # memory -> passage text -> turn ids

    @property
    def answers(self) -> bool:  # type: ignore[override]
        return self.protocol == "native"  # MemoryAgentBench answers with HippoRAG's rag_qa

    def settings(self) -> dict[str, Any]:
        return {"passage_unit": "session", "retrieve": "fact retrieval, recognition filter, PPR",
                "answer": "rag_qa" if self.protocol == "native" else "harness"}

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
        rag = HippoRAG(save_dir=str(save_dir), llm_model_name=proto.LLM_MODEL, llm_base_url=proto.BASE_URL,
                       embedding_model_name=name, embedding_base_url=proto.BASE_URL)
        watch_fallbacks(rag, self.note_fallback)
        return rag

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        rag = self._open(memory_id)
        docs = [passage(s) for s in sessions]
        turns = {d: [t["turn_id"] for t in s["turns"]] for d, s in zip(docs, sessions)}
        rag.index(docs=docs)
        # Which turns each passage holds, beside HippoRAG's own files, for a later process's searches.
        (Path(rag.global_config.save_dir) / "harness_turns.json").write_text(json.dumps(turns), encoding="utf-8")
        self.turns[memory_id] = turns
        self.memories[memory_id] = rag
        built = built_counts(rag)
        self.note_built(**built)
        return built["passages"], []

    def answer(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str, str]:
        """MemoryAgentBench's answer: ``rag_qa`` on the retrieval's solution (its QA prompt over the
        best ``qa_top_k`` passages), the answer after its "Answer:"."""
        solution, evidence, context = self._retrieve(memory_id, question, limit)
        solutions, _, _ = self.memories[memory_id].rag_qa([solution])
        return evidence, context, str(solutions[0].answer or "")

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        _, evidence, context = self._retrieve(memory_id, question, limit)
        return evidence, context

    def _retrieve(self, memory_id: str, question: str, limit: int) -> tuple[Any, list[dict[str, Any]], str]:
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
        return solution, evidence, context


if __name__ == "__main__":
    os.environ.setdefault("OPENAI_API_KEY", proto.API_KEY)
    proto.serve(HippoRAGAdapter())
