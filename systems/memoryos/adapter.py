"""MemoryOS (BAI-LAB, PyPI ``memoryos-pro`` 0.1.0) behind the systems protocol, following the
LoCoMo evaluation in BAI-LAB/MemoryOS (``eval/main_loco_parse.py``): the conversation becomes
question/answer pages (a turn of the conversation's first speaker opens a page, the other speaker's
next turn fills its answer), each page carries its session's date as its timestamp, pages go in one
by one through a short-term memory of capacity 1 (so every page is summarised into mid-term memory
at once, with topic similarity threshold 0.6 and profile/knowledge updates above heat 5), and a
question retrieves with every threshold at 0.1 and a queue of ``limit`` pages (10 in that
evaluation). The buffer is what that evaluation's answer prompt is built from: the short-term
history, the retrieved pages with their chain overview, the user profile and knowledge, and the
assistant knowledge.

Departures, both forced: the package embeds with sentence-transformers' ``all-MiniLM-L6-v2``
(downloaded from the model hub, unreachable here) and pulls faiss-gpu; here its ``get_embedding``
is the gateway's embedding model and faiss is ``faiss-cpu`` (same index code). The package's LLM
client catches every failure and returns an error string; the adapter counts those as ingestion
errors. Memory lives in JSON files under ``HARNESS_SYSTEM_DIR``.
"""
from __future__ import annotations

import sys
import threading
import types
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)

# The package imports sentence-transformers at the top of its utils module only to build its
# default embedder, which the adapter replaces; a stand-in module keeps torch out of this venv.
if "sentence_transformers" not in sys.modules:
    _stub = types.ModuleType("sentence_transformers")

    class _NoLocalModel:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("memoryos adapter: the local embedding model is replaced by the gateway's")

    _stub.SentenceTransformer = _NoLocalModel  # type: ignore[attr-defined]
    sys.modules["sentence_transformers"] = _stub

ROOT = Path(proto.SYSTEM_DIR) / "memoryos"
# The constants of the published LoCoMo evaluation (eval/main_loco_parse.py).
SHORT_TERM_CAPACITY = 1
MID_TERM_CAPACITY = 2000
TOPIC_SIMILARITY = 0.6
HEAT_THRESHOLD = 5.0
RETRIEVAL_THRESHOLD = 0.1
LLM_ERROR = "Error: Could not get response from LLM."


class GatewayEmbedder:
    """``get_embedding`` with the package's signature, through the gateway (cached per text as the
    package's own function caches)."""

    def __init__(self) -> None:
        from openai import OpenAI

        self.client = OpenAI(base_url=proto.BASE_URL, api_key=proto.API_KEY)
        self.cache: dict[str, Any] = {}
        self.lock = threading.Lock()

    def __call__(self, text: str, model_name: str = "", use_cache: bool = True) -> Any:
        import numpy as np

        with self.lock:
            if use_cache and text in self.cache:
                return self.cache[text]
        response = self.client.embeddings.create(model=proto.EMBED_MODEL, input=[text or " "])
        vector = np.asarray(response.data[0].embedding, dtype=np.float32)
        with self.lock:
            self.cache[text] = vector
        return vector


def install_embedder(embed: GatewayEmbedder) -> None:
    from memoryos import long_term, mid_term, utils

    # Each module bound the name at import time, so each one is pointed at the gateway's.
    for module in (utils, mid_term, long_term):
        module.get_embedding = embed  # type: ignore[attr-defined]


def pages(sessions: list[dict[str, Any]]) -> tuple[str, str, list[dict[str, Any]]]:
    """The evaluation's pages: speaker A's turn opens a page, speaker B's next turn answers it."""
    speakers = [t["speaker"] for s in sessions for t in s["turns"]]
    speaker_a = speakers[0] if speakers else "user"
    speaker_b = next((s for s in speakers if s != speaker_a), "assistant")
    out: list[dict[str, Any]] = []
    for session in sessions:
        for turn in session["turns"]:
            if turn["speaker"] == speaker_a or not out:
                opened = turn["speaker"] == speaker_a
                out.append({"user_input": turn["text"] if opened else "",
                            "agent_response": "" if opened else turn["text"],
                            "timestamp": session.get("date") or "", "turn_ids": [turn["turn_id"]],
                            "opened": opened})
            else:
                # A later turn of speaker B replaces the page's answer, as in the evaluation.
                page = out[-1]
                page["agent_response"] = turn["text"]
                page["turn_ids"] = page["turn_ids"][:1] + [turn["turn_id"]] if page["opened"] else [turn["turn_id"]]
    for page in out:
        del page["opened"]
    return speaker_a, speaker_b, out


class MemoryOSAdapter(proto.Adapter):
    system = "memoryos"

    def __init__(self) -> None:
        install_embedder(GatewayEmbedder())
        self.memories: dict[str, Any] = {}
        self.speakers: dict[str, tuple[str, str]] = {}
        self.turns: dict[str, dict[tuple[str, str], list[str]]] = {}
        self.llm_errors: list[str] = []
        self._count_llm_errors()

    def version(self) -> str:
        from importlib.metadata import version
        return version("memoryos-pro")

    def _count_llm_errors(self) -> None:
        """The package's client returns an error string instead of raising: count each one."""
        from memoryos import utils

        original = utils.OpenAIClient.chat_completion
        errors = self.llm_errors

        def chat_completion(client: Any, model: str, messages: Any, temperature: float = 0.7,
                            max_tokens: int = 2000) -> str:
            result: str = original(client, model, messages, temperature, max_tokens)
            if result == LLM_ERROR:
                errors.append(f"memoryos: LLM call failed ({model})")
            return result

        utils.OpenAIClient.chat_completion = chat_completion  # type: ignore[method-assign]

    def _memory(self, memory_id: str) -> Any:
        if memory_id not in self.memories:
            from memoryos import memoryos

            self.memories[memory_id] = memoryos.Memoryos(
                user_id=memory_id, openai_api_key=proto.API_KEY, openai_base_url=proto.BASE_URL,
                data_storage_path=str(ROOT), short_term_capacity=SHORT_TERM_CAPACITY,
                mid_term_capacity=MID_TERM_CAPACITY, retrieval_queue_capacity=10,
                mid_term_heat_threshold=HEAT_THRESHOLD, mid_term_similarity_threshold=TOPIC_SIMILARITY,
                llm_model=proto.LLM_MODEL)
        return self.memories[memory_id]

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        memory = self._memory(memory_id)
        speaker_a, speaker_b, qa_pages = pages(sessions)
        self.speakers[memory_id] = (speaker_a, speaker_b)
        index = self.turns.setdefault(memory_id, {})
        before = len(self.llm_errors)
        for page in qa_pages:
            index[(page["user_input"], page["agent_response"])] = page["turn_ids"]
            memory.add_memory(page["user_input"], page["agent_response"], timestamp=page["timestamp"])
        return self._items(memory), self.llm_errors[before:]

    @staticmethod
    def _items(memory: Any) -> int:
        mid = sum(len(s.get("details", [])) for s in memory.mid_term_memory.sessions.values())
        return (mid + len(memory.short_term_memory.get_all()) + len(memory.user_long_term_memory.get_user_knowledge())
                + len(memory.assistant_long_term_memory.get_assistant_knowledge()))

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        memory = self._memory(memory_id)
        speaker_a, speaker_b = self.speakers.get(memory_id, ("User", "Assistant"))
        index = self.turns.get(memory_id, {})
        memory.retriever.retrieval_queue_capacity = limit
        found = memory.retriever.retrieve_context(
            user_query=question, user_id=memory_id, segment_similarity_threshold=RETRIEVAL_THRESHOLD,
            page_similarity_threshold=RETRIEVAL_THRESHOLD, knowledge_threshold=RETRIEVAL_THRESHOLD)
        evidence: list[dict[str, Any]] = []
        for page in found["retrieved_pages"]:
            text = f"{speaker_a}: {page.get('user_input', '')}\n{speaker_b}: {page.get('agent_response', '')}"
            evidence.append({"text": f"{text}\nTime: {page.get('timestamp', '')}", "score": None,
                             "source_turn_ids": list(index.get((page.get("user_input", ""),
                                                                page.get("agent_response", "")), []))})
        for entry in found["retrieved_user_knowledge"] + found["retrieved_assistant_knowledge"]:
            evidence.append({"text": str(entry.get("knowledge", "")), "score": None, "source_turn_ids": []})
        return evidence, self._render(memory, memory_id, found, speaker_a, speaker_b)

    @staticmethod
    def _render(memory: Any, memory_id: str, found: dict[str, Any], speaker_a: str, speaker_b: str) -> str:
        """The parts of the evaluation's answer prompt that come from memory, in its order."""
        history = "\n".join(f"{speaker_a}: {qa.get('user_input', '')}\n{speaker_b}: {qa.get('agent_response', '')}\n"
                            f"Time: ({qa.get('timestamp', '')})" for qa in memory.short_term_memory.get_all())
        retrieved = "\n".join(f"【Historical Memory】 {speaker_a}: {p.get('user_input', '')}\n{speaker_b}: "
                              f"{p.get('agent_response', '')}\nTime:({p.get('timestamp', '')})\n"
                              f"Conversation chain overview:({p.get('meta_info', '')})\n"
                              for p in found["retrieved_pages"])
        profile = memory.user_long_term_memory.get_raw_user_profile(memory_id) or "None"
        knowledge = "\n".join(str(k.get("knowledge", "")) for k in found["retrieved_user_knowledge"])
        assistant = "\n".join(f"- {k.get('knowledge', '')} ({k.get('timestamp', '')})"
                              for k in found["retrieved_assistant_knowledge"])
        return (f"【Assistant Knowledge】\n{assistant}\n\n"
                f"Recent conversation between {speaker_a} and {speaker_b}:\n{history}\n\n"
                f"Relevant past conversations:\n{retrieved}\n\n"
                f"Characteristics of {speaker_a}:\n【User Profile】\n{profile}\n\n{knowledge}\n")


if __name__ == "__main__":
    proto.serve(MemoryOSAdapter())
