"""The harness's own comparison methods: they build the evidence buffer in place of 02-06.

Every baseline writes ordinary ``06_retrieve.jsonl`` rows, so the same answer stage (with a
plan-free prompt), the same judge and the same aggregation score them: the only thing that
differs from EnSIMem is which turns reach the answer model.

* ``full_context``: every session of the memory, oldest first. When the rendering exceeds
  ``method.context_tokens`` (o200k tokens), whole sessions are dropped from the OLDEST end until
  it fits; the row records how many were dropped. Recent sessions are kept because benchmark
  questions are asked at the end of the history. ``method.context_builder`` official or
  chronological renders REALTALK's official context instead (``common.method.official_context``).
* ``rag_turns``: dense retrieval over single turns: the ``method.rag_k`` turns most similar to
  the question (cosine, the configured embedding model), shown in conversation order.
* ``no_memory``: an empty buffer (closed book): what the answer model knows without memory.
* ``oracle``: only the gold evidence turns. An UPPER BOUND, labelled as such everywhere; it is
  the only method that opens the gold file before judging. LoCoMo uses the cleaned ``evidence``
  dia ids; LongMemEval the ``has_answer`` turns, else the whole answer sessions.
"""
from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Optional

import numpy as np

from common.core.schema import Gold, Question, RetrievalRow, Session, Turn
from common.core.tokens import count_tokens
from common.method import official_context
from common.method.render import MemoryView, render_turn

METHODS = ("full_context", "rag_turns", "no_memory", "oracle")
READS_GOLD = frozenset({"oracle"})


def session_header(session: Session) -> str:
    return f"### Session {session.session_id} | session date: {session.date_time or 'unknown'}"


def render_sessions(view: MemoryView, chosen: dict[str, list[Turn]], include_images: bool) -> str:
    """Blocks of turns grouped by session, in conversation order (``chosen`` lists are sorted)."""
    blocks = []
    for s in view.sessions:
        turns = chosen.get(s.session_id)
        if turns:
            body = "\n".join(render_turn(t, include_images) for t in turns)
            blocks.append(f"{session_header(s)}\n{body}")
    return "\n\n".join(blocks)


def _row(q: Question, method: str, view: MemoryView, chosen: dict[str, list[Turn]], include_images: bool,
         started: float, info: dict[str, Any]) -> RetrievalRow:
    chosen = {sid: sorted(ts, key=lambda t: view.position[t.dia_id]) for sid, ts in chosen.items()}
    text = render_sessions(view, chosen, include_images)
    dia = [t.dia_id for s in view.sessions for t in chosen.get(s.session_id, [])]
    return RetrievalRow(qid=q.qid, memory_id=q.memory_id, question=q.question, mode=method, scope="",
                        reasoning_type="", selected=[], episode_ids=[], dia_ids=dia, coverage={},
                        buffer_text=text, buffer_tokens=count_tokens(text) if text else 0,
                        seconds=round(time.perf_counter() - started, 4), method_info=info)


def full_context(q: Question, view: MemoryView, context_tokens: int, include_images: bool,
                 builder: str = "harness", hash_seed: Optional[int] = None) -> RetrievalRow:
    started = time.perf_counter()
    if builder != "harness":  # REALTALK's official text (every turn of the sessions kept, as they are)
        text, sessions, info = official_context.build(view, builder, hash_seed, context_tokens)
        return RetrievalRow(qid=q.qid, memory_id=q.memory_id, question=q.question, mode="full_context", scope="",
                            reasoning_type="", selected=[], episode_ids=[],
                            dia_ids=[t.dia_id for s in sessions for t in s.turns], coverage={}, buffer_text=text,
                            buffer_tokens=count_tokens(text), seconds=round(time.perf_counter() - started, 4),
                            method_info=info)
    sizes = [count_tokens(f"{session_header(s)}\n" + "\n".join(render_turn(t, include_images) for t in s.turns))
             for s in view.sessions]
    kept, total = [], 0
    for s, n in reversed(list(zip(view.sessions, sizes))):
        if total + n > context_tokens:
            break
        kept.append(s)
        total += n
    chosen = {s.session_id: list(s.turns) for s in kept}
    info = {"sessions_total": len(view.sessions), "sessions_dropped_oldest": len(view.sessions) - len(kept),
            "context_tokens_limit": context_tokens}
    return _row(q, "full_context", view, chosen, include_images, started, info)


class TurnRetriever:
    """Dense top-k over one memory's single turns (embeddings computed once per memory)."""

    def __init__(self, view: MemoryView, embedder: Any, include_images: bool):
        self.view = view
        self.turns = [t for s in view.sessions for t in s.turns]
        self.session_of = {t.dia_id: s.session_id for s in view.sessions for t in s.turns}
        # The speaker name is part of the text: questions name people ("What did Caroline ...").
        texts = [render_turn(t, include_images).split("] ", 1)[1] for t in self.turns]
        self.matrix = embedder.encode(texts) if texts else np.zeros((0, 1), dtype=np.float32)
        self.embedder = embedder

    def retrieve(self, q: Question, k: int, include_images: bool) -> RetrievalRow:
        started = time.perf_counter()
        chosen: dict[str, list[Turn]] = defaultdict(list)
        scores: list[float] = []
        ranked: list[str] = []
        if self.turns and k > 0:
            qv = self.embedder.encode([q.question])[0]
            sims = self.matrix @ qv
            # Stable tie-break by conversation position keeps reruns identical.
            top = sorted(range(len(self.turns)), key=lambda i: (-float(sims[i]), i))[:k]
            for i in top:
                chosen[self.session_of[self.turns[i].dia_id]].append(self.turns[i])
                scores.append(round(float(sims[i]), 4))
                ranked.append(self.turns[i].dia_id)
        return _row(q, "rag_turns", self.view, chosen, include_images, started,
                    {"k": k, "ranked_dia_ids": ranked, "scores": scores})


def no_memory(q: Question, view: MemoryView) -> RetrievalRow:
    return _row(q, "no_memory", view, {}, False, time.perf_counter(), {})


def oracle(q: Question, view: MemoryView, gold: Optional[Gold], include_images: bool,
           official: Optional[dict[tuple[str, str], str]] = None) -> RetrievalRow:
    """Gold evidence turns only (upper bound). No gold evidence -> an empty buffer, recorded.

    ``official``: (memory id, session id) -> the official session id (the gold side's
    ``01_session_sources.jsonl``), which the gold's answer sessions are named by."""
    started = time.perf_counter()
    chosen: dict[str, list[Turn]] = defaultdict(list)
    source = "none"
    if gold is not None:
        dia = [d for d in (gold.evidence or gold.has_answer) if d in view.turns]
        if dia:
            source = "evidence_turns"
            for d in dia:
                chosen[view.session_of[d].session_id].append(view.turns[d])
        elif gold.answer_session_ids:
            wanted = set(gold.answer_session_ids)
            for s in view.sessions:
                if ((official or {}).get((s.memory_id, s.session_id)) or s.source_id or s.session_id) in wanted:
                    chosen[s.session_id] = list(s.turns)
                    source = "answer_sessions"
    # De-duplicate turns listed twice in the evidence.
    chosen = {sid: list({t.dia_id: t for t in ts}.values()) for sid, ts in chosen.items()}
    return _row(q, "oracle", view, chosen, include_images, started, {"evidence_source": source})
