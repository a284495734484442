"""MemoryOS (BAI-LAB; ``memoryos-pro`` on PyPI, the repository's ``memoryos-pypi`` package) behind
the systems protocol, following the repository's LoCoMo evaluation (``eval/main_loco_parse.py``):
a conversation's turns become question-answer pages (a turn of ``speaker_a``, the user as the
authors fix it, is the page's ``user_input``, the next turn of ``speaker_b`` its ``agent_response``,
the session's date its timestamp) added one by one (``Memoryos.add_memory``: short-term memory, evicted into mid-term
segments, heat-triggered profile and knowledge updates); a question is answered from
``retriever.retrieve_context`` (pages of the hottest segments, user and assistant knowledge), and
the buffer is rendered as ``Memoryos.get_response`` lays out its prompt's memory parts (recent
history, historical memory pages with their time and chain overview, the user profile and
knowledge, the assistant's knowledge), with the speakers' names where it says User and Assistant,
as the evaluation's answer prompt writes them.

Its embeddings are SentenceTransformer models loaded from the Hugging Face hub; here its
``get_embedding`` is replaced by the endpoint's (``OPENAI_BASE_URL``, ``HARNESS_EMBED_MODEL``), as
every other system's embedder is. Its LLM client is given ``OPENAI_BASE_URL``.
"""
from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import _protocol as proto  # noqa: E402  (the directory above is the protocol's home)

# eval/main_loco_parse.py: short-term capacity 1 (every page goes on to mid-term), mid-term 2000,
# retrieval queue 10.
SETTINGS = {"short_term_capacity": 1, "mid_term_capacity": 2000, "retrieval_queue_capacity": 10}
# Its retrieval call: segment, page and knowledge thresholds of 0.1 (the package's own default for
# knowledge is 0.01).
THRESHOLDS = {"segment_similarity_threshold": 0.1, "page_similarity_threshold": 0.1, "knowledge_threshold": 0.1}
SPEAKERS_FILE = "harness_speakers.json"  # who is the user and who the assistant, for a later search process
RETRIEVERS = ("_retrieve_mid_term_context", "_retrieve_user_knowledge", "_retrieve_assistant_knowledge")


def pages_of(sessions: list[dict[str, Any]], user: Optional[str] = None) -> list[dict[str, str]]:
    """Question-answer pages as eval/main_loco_parse.py builds them from LoCoMo turns: a turn of
    ``user`` (the authors fix ``speaker_a``; without it, the first speaker seen) opens a page."""
    first = user or (sessions[0]["turns"][0]["speaker"] if sessions and sessions[0]["turns"] else "")
    pages: list[dict[str, str]] = []
    for session in sessions:
        for turn in session["turns"]:
            if turn["speaker"] == first:
                pages.append({"user_input": turn["text"], "agent_response": "", "timestamp": session.get("date") or ""})
            elif pages:
                pages[-1]["agent_response"] = turn["text"]
            else:
                pages.append({"user_input": "", "agent_response": turn["text"], "timestamp": session.get("date") or ""})
    return pages


def gateway_embeddings() -> None:
    """Point MemoryOS's ``get_embedding`` (every module that imported it) at the endpoint."""
    import memoryos.long_term
    import memoryos.mid_term
    import memoryos.utils
    import numpy as np
    from openai import OpenAI

    client = OpenAI(base_url=proto.BASE_URL, api_key=proto.API_KEY)
    cache: dict[str, Any] = {}

    def get_embedding(text: str, model_name: str = "", use_cache: bool = True) -> Any:
        if text not in cache:
            data = client.embeddings.create(model=proto.EMBED_MODEL, input=[text]).data[0].embedding
            cache[text] = np.asarray(data, dtype=np.float32)
        return cache[text]

    for module in (memoryos.utils, memoryos.mid_term, memoryos.long_term):
        module.get_embedding = get_embedding


def names_in(text: str, user: str, assistant: str) -> str:
    """The profile and knowledge with the speakers' names for "user" and "assistant", as the
    evaluation's answer prompt substitutes them (case-insensitive whole words)."""
    text = re.sub(r"(?i)\buser\b", lambda _: user, text)
    return re.sub(r"(?i)\bassistant\b", lambda _: assistant, text)


def page_text(page: dict[str, Any], user: str, assistant: str) -> str:
    return f"{user}: {page.get('user_input', '')}\n{assistant}: {page.get('agent_response', '')}"


def count_swallowed_errors(retriever: Any) -> None:
    """``retrieve_context`` runs its three searches in threads and prints, then drops, an exception
    of any of them: each is logged at ERROR here first, so the search's reply counts it."""
    for name in RETRIEVERS:
        fn = getattr(retriever, name)

        def logged(*args: Any, _fn: Any = fn, _name: str = name, **kwargs: Any) -> Any:
            try:
                return _fn(*args, **kwargs)
            except Exception as exc:
                logging.getLogger("memoryos.retriever").error("%s failed: %s: %s", _name, type(exc).__name__, exc)
                raise
        setattr(retriever, name, logged)


Items = list[dict[str, Any]]


def reference_prompts(question: str, a: str, b: str, history: Items, pages: Items, profile: str,
                      knowledge: Items, assistant: Items) -> tuple[str, str]:
    """The system and user prompts of eval/main_loco_parse.py's generate_system_response_with_meta,
    word for word (its spelling included): the evaluation's own answer prompt."""
    history_text = "\n".join(f"{a}: {qa.get('user_input', '')}\n{b}: {qa.get('agent_response', '')}\n"
                             f"Time: ({qa.get('timestamp', '')})" for qa in history)
    retrieval_text = "\n".join(f"【Historical Memory】 {a}: {p.get('user_input', '')}\n"
                               f"{b}: {p.get('agent_response', '')}\nTime:({p.get('timestamp', '')})\n"
                               f"Conversation chain overview:({p.get('meta_info', '')})\n" for p in pages)
    background = f"【User Profile】\n{profile}\n\n" + "".join(f"{k['knowledge']}\n" for k in knowledge)
    background = names_in(background, a, b)
    known = "【Assistant Knowledge】\n" + "".join(f"- {k['knowledge']} ({k['timestamp']})\n" for k in assistant)
    known = re.sub(r"\bI\b", lambda _: b, known)
    system = (
        f"You are role-playing as {b} in a conversation with the user is playing is  {a}. "
        f"Here are some of your character traits and knowledge:\n{known}\n"
        f"Any content referring to 'User' in the prompt refers to {a}'s content, and any content referring to "
        f"'AI'or 'assiant' refers to {b}'s content."
        f"Your task is to answer questions about {a} or {b} in an extremely concise manner.\n"
        "When the question is: \"What did the charity race raise awareness for?\", you should not answer in the form "
        "of: \"The charity race raised awareness for mental health.\" Instead, it should be: \"mental health\", "
        "as this is more concise.")
    user = (
        f"<CONTEXT>\nRecent conversation between {a} and {b}:\n{history_text}\n\n"
        f"<MEMORY>\nRelevant past conversations:\n{retrieval_text}\n\n"
        f"<CHARACTER TRAITS>\nCharacteristics of {a}:\n{background}\n\n"
        f"the question is: {question}\n"
        f"Your task is to answer questions about {a} or {b} in an extremely concise manner.\n"
        "Please only provide the content of the answer, without including 'answer:'\n"
        "For questions that require answering a date or time, strictly follow the format \"15 July 2023\" and "
        "provide a specific date whenever possible. For example, if you need to answer \"last year,\" give the "
        "specific year of last year rather than just saying \"last year.\" Only provide one year, date, or time, "
        "without any extra responses.\n"
        "If the question is about the duration, answer in the form of several years, months, or days.\n"
        "Generate answers primarily composed of concrete entities, such as Mentoring program, school speech, etc")
    return system, user


class MemoryOSAdapter(proto.Adapter):
    system = "memoryos"

    def __init__(self) -> None:
        self.memories: dict[str, Any] = {}
        self.patched = False

    @property
    def answers(self) -> bool:  # type: ignore[override]
        return self.protocol == "native"  # the evaluation answers with its own prompt

    def settings(self) -> dict[str, Any]:
        # The evaluation's capacities and thresholds, its user = speaker_a, under both protocols.
        return {**SETTINGS, **THRESHOLDS, "user": "speaker_a", "speaker_names": True,
                "answer": "generate_system_response_with_meta" if self.protocol == "native" else "harness"}

    def answer(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str, str]:
        """The evaluation's answer: its prompts over what the retrieval found, gpt-4o-mini's
        settings there (temperature 0.7, 2000 tokens) with the harness's model; an API error
        raises (the package's own chat_completion would return an error text as the answer)."""
        evidence, _, found = self._search(memory_id, question, limit)
        memory = self.memories[memory_id]
        a, b = self._speakers(memory_id)
        profile = memory.user_long_term_memory.get_raw_user_profile(memory.user_id)
        system, user = reference_prompts(question, a, b, memory.short_term_memory.get_all(),
                                         found["retrieved_pages"][:limit], str(profile),
                                         found["retrieved_user_knowledge"],
                                         memory.assistant_long_term_memory.get_assistant_knowledge())
        reply = memory.client.client.chat.completions.create(
            model=proto.LLM_MODEL, messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
            temperature=0.7, max_tokens=2000)
        return evidence, user, str(reply.choices[0].message.content or "").strip()

    def _speakers(self, memory_id: str) -> tuple[str, str]:
        """(user, assistant): the request's speaker_a and speaker_b, else those the ingestion saved."""
        a, b = self.speakers.get("speaker_a") or "", self.speakers.get("speaker_b") or ""
        saved = self._root(memory_id) / SPEAKERS_FILE
        if not (a and b) and saved.is_file():
            kept = json.loads(saved.read_text(encoding="utf-8"))
            a, b = a or kept.get("speaker_a", ""), b or kept.get("speaker_b", "")
        return a or "User", b or "Assistant"

    def version(self) -> str:
        from importlib.metadata import version
        return version("memoryos-pro")

    def _root(self, memory_id: str) -> Path:
        return Path(proto.SYSTEM_DIR) / "memoryos" / "".join(c if c.isalnum() else "_" for c in memory_id)

    def _open(self, memory_id: str) -> Any:
        if memory_id not in self.memories:
            if not self.patched:
                gateway_embeddings()
                self.patched = True
            from memoryos import Memoryos

            self.memories[memory_id] = Memoryos(
                user_id="user", assistant_id="assistant", openai_api_key=proto.API_KEY,
                openai_base_url=proto.BASE_URL, data_storage_path=str(self._root(memory_id)),
                llm_model=proto.LLM_MODEL, **SETTINGS)
        return self.memories[memory_id]

    def ingest(self, memory_id: str, sessions: list[dict[str, Any]]) -> tuple[int, list[str]]:
        memory = self._open(memory_id)
        user, assistant = self._speakers(memory_id)
        pages = pages_of(sessions, self.speakers.get("speaker_a") or None)
        (self._root(memory_id) / SPEAKERS_FILE).write_text(
            json.dumps({"speaker_a": user, "speaker_b": assistant}), encoding="utf-8")
        for page in pages:
            memory.add_memory(page["user_input"], page["agent_response"], timestamp=page["timestamp"])
        mid = memory.mid_term_memory
        stored = sum(len(s.get("details", [])) for s in mid.sessions.values()) + len(memory.short_term_memory.get_all())
        long = memory.user_long_term_memory
        self.note_built(pages=len(pages), segments=len(mid.sessions),
                        user_knowledge=len(getattr(long, "knowledge_base", []) or []),
                        assistant_knowledge=len(getattr(memory.assistant_long_term_memory, "assistant_knowledge", [])
                                                or []))
        return stored, []

    def search(self, memory_id: str, question: str, question_date: Optional[str],
               limit: int) -> tuple[list[dict[str, Any]], str]:
        evidence, context, _ = self._search(memory_id, question, limit)
        return evidence, context

    def _search(self, memory_id: str, question: str, limit: int) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
        memory = self._open(memory_id)
        user, agent = self._speakers(memory_id)
        if not getattr(memory.retriever, "_harness_counted", False):
            count_swallowed_errors(memory.retriever)
            memory.retriever._harness_counted = True
        found = memory.retriever.retrieve_context(user_query=question, user_id=memory.user_id, **THRESHOLDS)
        pages = found["retrieved_pages"][:limit]
        evidence: list[dict[str, Any]] = [
            {"text": page_text(p, user, agent), "score": None, "source_turn_ids": []} for p in pages]
        evidence += [{"text": names_in(k["knowledge"], user, agent), "score": None, "source_turn_ids": []}
                     for k in found["retrieved_user_knowledge"] + found["retrieved_assistant_knowledge"]]
        history = "\n".join(f"{page_text(qa, user, agent)} (Time: {qa.get('timestamp', '')})"
                            for qa in memory.short_term_memory.get_all())
        retrieval = "\n".join(f"【Historical Memory】\n{page_text(p, user, agent)}\nTime: {p.get('timestamp', '')}\n"
                              f"Conversation chain overview: {p.get('meta_info', 'N/A')}" for p in pages)
        profile = memory.user_long_term_memory.get_raw_user_profile(memory.user_id)
        if not profile or str(profile).lower() == "none":
            profile = "No detailed profile available yet."
        profile = names_in(str(profile), user, agent)

        def entries(items: list[dict[str, Any]]) -> str:
            return "".join(f"- {names_in(k['knowledge'], user, agent)} (Recorded: {k['timestamp']})\n" for k in items)

        knowledge = entries(found["retrieved_user_knowledge"])
        assistant = (entries(found["retrieved_assistant_knowledge"])
                     or "- No relevant assistant knowledge found for this query.\n")
        context = (f"Recent conversation between {user} and {agent}:\n{history}\n\n"
                   f"Relevant past conversations:\n{retrieval}\n\n"
                   f"【User Profile】 ({user})\n{profile}\n"
                   + (f"\n【Relevant User Knowledge Entries】\n{knowledge}" if knowledge else "")
                   + f"\n【Assistant Knowledge Base】\n{assistant}")
        return evidence, context, found


if __name__ == "__main__":
    proto.serve(MemoryOSAdapter())
