"""EnSIMem and the harness's own baselines as memory systems (``common.systems.base``).

They write the same 06 rows as before the registry existed (``tests/test_systems.py``
compares a fixture run with digests recorded on the old code path): each overrides ``row``
with its own rendering (EnSIMem's episodes, the baselines' session blocks).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from common.core import artifacts, sources
from common.core.io import content_digest, read_jsonl
from common.core.schema import Gold, PlanRow, Question, RetrievalRow, from_dict, to_dict
from common.method import baselines
from common.method import bridge as bridge_mod
from common.method.index import MemoryIndex
from common.method.render import MemoryView
from common.method.retrieve import Retriever
from common.method.routes import Routes
from common.systems.base import PROTOCOL_STAGES, Context, MemorySystem


class _Own(MemorySystem):
    """The harness's own methods: an exception in them is a bug of the harness, and stops the run."""

    outside = False


class EnSIMem(_Own):
    """The paper's method: 02-05 build episodes, records, the index and plans; 06 retrieves."""

    name = "ensimem"
    stages = PROTOCOL_STAGES | {"episodes", "extract", "index", "plan"}

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        run_dir = ctx.run_dir
        self.plans = {r["qid"]: from_dict(PlanRow, r) for r in read_jsonl(artifacts.path(run_dir, "plans"))}
        index_rows = read_jsonl(artifacts.path(run_dir, "index"))
        self.paths = {r["memory_id"]: run_dir / r["path"] for r in index_rows}
        self.index_fp = {r["memory_id"]: r["fingerprint"] for r in index_rows}
        self.retrievers: dict[str, Retriever] = {}
        rcfg = ctx.cfg.retrieve
        self.bridges = rcfg.bridges and rcfg.mode != "dense_only" and any(
            h.bridge_request for p in self.plans.values() for h in p.plan.hops)
        self.role = "bridge" if self.bridges else None
        # answer.routes.guard_stage: retrieval: the date and overlap guards run per hop here, before the bridge.
        routes = ctx.cfg.answer.routes
        self.guards = Routes(**dataclasses.asdict(routes)) if routes.guard_stage == "retrieval" else None

    def inputs(self) -> list[Any]:
        return [artifacts.path(self.ctx.run_dir, "plans"), artifacts.path(self.ctx.run_dir, "index")]

    def digest(self, question: Question) -> str:
        return content_digest([question.question, question.question_date, to_dict(self.plans[question.qid].plan),
                              self.index_fp.get(question.memory_id)])

    def extra(self) -> dict[str, Any]:
        return {"mode": self.ctx.cfg.retrieve.mode, "bridges": self.bridges}

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        mid = question.memory_id
        if mid not in self.retrievers:
            self.retrievers[mid] = Retriever(MemoryIndex.load(self.paths[mid]), view, self.ctx.embedder(),
                                             self.ctx.cfg.retrieve, self.ctx.include_images, self.guards)
        return self.retrievers[mid].retrieve(question, self.plans[question.qid].plan,
                                             bridge_mod.make_resolver(self.ctx.llm, question.question,
                                                                      self.ctx.cfg.retrieve.bridge_question))


class FullContext(_Own):
    """Every session, oldest dropped first beyond ``method.context_tokens`` (``method.context_builder``:
    the harness's rendering, or REALTALK's official one)."""

    name = "full_context"

    def digest(self, question: Question) -> str:
        m = self.ctx.cfg.method  # only a non-default builder: the harness's rows keep their digests
        return "" if m.context_builder == "harness" else f"{m.context_builder}|{m.context_hash_seed}"

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        m = self.ctx.cfg.method
        return baselines.full_context(question, view, m.context_tokens, self.ctx.include_images, m.context_builder,
                                      m.context_hash_seed)


class RagTurns(_Own):
    """Dense top ``method.rag_k`` single turns."""

    name = "rag_turns"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.retrievers: dict[str, baselines.TurnRetriever] = {}

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        if question.memory_id not in self.retrievers:
            self.retrievers[question.memory_id] = baselines.TurnRetriever(view, self.ctx.embedder(),
                                                                          self.ctx.include_images)
        return self.retrievers[question.memory_id].retrieve(question, self.ctx.cfg.method.rag_k,
                                                            self.ctx.include_images)


class NoMemory(_Own):
    """An empty buffer: closed book."""

    name = "no_memory"

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        return baselines.no_memory(question, view)


class Oracle(_Own):
    """Only the gold evidence turns: the labelled upper bound, the one system that reads gold."""

    name = "oracle"
    reads_gold = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        assert ctx.read_gold is not None, "the harness hands read_gold to reads_gold systems"
        self.gold: dict[str, Gold] = ctx.read_gold()  # read up front, as before the registry
        self.official = sources.session_sources(ctx.run_dir)  # gold side: official session ids

    def inputs(self) -> list[Any]:
        return super().inputs() + [artifacts.path(self.ctx.run_dir, "gold"),
                                   artifacts.path(self.ctx.run_dir, "session_sources")]

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        return baselines.oracle(question, view, self.gold.get(question.qid), self.ctx.include_images, self.official)
