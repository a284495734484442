"""Graphiti (``method.name: graphiti``): Zep's open temporal knowledge-graph engine, ``graphiti-core``,
run locally under the harness.

Ingestion: each session of a memory becomes one Graphiti episode (``add_episode``, source
``message``), in time order, its ``reference_time`` the session date and its body the session's
turns as ``speaker: text`` lines (image captions appended when images are on). Graphiti extracts
entities and facts (edges with validity dates) from each episode with its own prompts, resolves
them against the graph built so far and keeps entity summaries.

Search follows Zep's published LoCoMo evaluation (getzep/zep-papers,
``kg_architecture_agent_memory/locomo_eval/zep_locomo_search.py``): two searches per question,
nodes (entities) with RRF reranking and edges (facts) with the cross-encoder reranker, 20 of
each, rendered with that script's context template (``ZEP_CONTEXT_TEMPLATE``, byte-exact: facts
with their ``event_time``, entities with their summaries). The harness's answer prompt and judge
then read that context like any other system's evidence buffer.

Local and offline: the graph store is Kuzu, embedded (one database file per memory under the
memory's state directory; a rerun opens it again). Graphiti's LLM, embedder and reranker are its
OpenAI-compatible clients configured with the harness gateway's base URL and a session key only
(``ctx.gateway.session``: one per memory ingested and one per search, so every call, the
reranker's at search too, is recorded with the memory role and reaches the ledger); telemetry
is off (``GRAPHITI_TELEMETRY_ENABLED=false`` before the import).
Departures from the published run are listed in docs/memory-systems.md.
"""
from __future__ import annotations

import asyncio
import logging
import os
import re
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from common.core.config import Config
from common.core.schema import Question, Session
from common.core.tokens import count_tokens
from common.method.render import MemoryView
from common.systems import outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, render, turn_text

GRAPHITI_VERSION = "0.31.2"
DEFAULTS: dict[str, Any] = {"edge_limit": 20, "node_limit": 20, "edge_reranker": "cross_encoder",
                            "node_reranker": "rrf", "group_id": "locomo"}
RERANKERS = ("rrf", "cross_encoder", "mmr")
# The context template of Zep's LoCoMo search script (getzep/zep-papers,
# kg_architecture_agent_memory/locomo_eval/zep_locomo_search.py, TEMPLATE), byte-exact: it is
# their context format, reproduced as published.
ZEP_CONTEXT_TEMPLATE = "\n".join([
    "",
    "FACTS and ENTITIES represent relevant context to the current conversation.",
    "",
    "# These are the most relevant facts for the conversation along with the datetime of the event that the fact refers to.",  # noqa: E501
    "If a fact mentions something happening a week ago, then the datetime will be the date time of last week and not the datetime",  # noqa: E501
    "of when the fact was stated.",
    "Timestamps in memories represent the actual time the event occurred, not the time the event was mentioned in a message.",  # noqa: E501
    "    ",
    "<FACTS>",
    "{facts}",
    "</FACTS>",
    "",
    "# These are the most relevant entities",
    "# ENTITY_NAME: entity summary",
    "<ENTITIES>",
    "{entities}",
    "</ENTITIES>",
    "",
])
# Graphiti's prompts per episode, for the dry run (o200k tokens, graphiti-core 0.31.2, without the
# episode): entity extraction, node resolution, fact extraction, fact resolution (one per fact),
# entity summaries. Measured from the prompts the fake server received.
RERANK_PROMPT_TOKENS = 70  # graphiti's reranker prompt without the passage and the query
CALL_TOKENS = {"entities": 1400, "nodes": 900, "edges": 1900, "edge_dedupe": 700, "summaries": 800}
FACTS_PER_TURN = 1.0  # assumed facts extracted per turn (each one resolved with one call)
_FTS_INDEXES = ("CALL CREATE_FTS_INDEX('Episodic', 'episode_content', ['content', 'source', 'source_description']);",
                "CALL CREATE_FTS_INDEX('Entity', 'node_name_and_summary', ['name', 'summary']);",
                "CALL CREATE_FTS_INDEX('Community', 'community_name', ['name']);",
                "CALL CREATE_FTS_INDEX('RelatesToNode_', 'edge_name_and_fact', ['name', 'fact']);")
# LoCoMo, LongMemEval, BEAM-like ISO dates, REALTALK ("29.12.2023, 22:42:04").
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%Y/%m/%d (%a) %H:%M", "%Y-%m-%d %H:%M", "%Y-%m-%d", "%d.%m.%Y, %H:%M:%S")


def _import_graphiti() -> Any:
    """``graphiti_core`` with telemetry off (read when the package is imported) and quiet logs:
    its errors only, which the harness counts per memory (``common.systems.outcomes``)."""
    os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"
    for name in ("graphiti_core", "neo4j"):
        logging.getLogger(name).setLevel(logging.ERROR)
    import graphiti_core

    return graphiti_core


def session_date(session: Session) -> datetime:
    """The session's date as an aware UTC datetime (LoCoMo's "1:56 pm on 8 May, 2023", LongMemEval's
    "2023/05/20 (Sat) 02:21"); a date that parses in none of the known forms is refused."""
    text = re.sub(r"\s+", " ", (session.date_time or "").strip())
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise ValueError(f"graphiti: session {session.session_id} of {session.memory_id}: date_time {session.date_time!r} "
                     f"is in no known form")


def episode_body(session: Session, include_images: bool) -> str:
    return "\n".join(f"{t.speaker}: {turn_text(t, include_images)}" for t in session.turns)


def compose_context(edges: list[Any], nodes: list[Any]) -> str:
    """Zep's context: the facts with their event time, the entities with their summaries."""
    facts = [f"  - {e.fact} (event_time: {e.valid_at})" for e in edges]
    entities = [f"  - {n.name}: {n.summary}" for n in nodes]
    return ZEP_CONTEXT_TEMPLATE.format(facts="\n".join(facts), entities="\n".join(entities))


def _stored_items(db: Any) -> int:
    """The entities and facts a memory's graph holds (what its search can return)."""
    import kuzu

    conn = kuzu.Connection(db)
    try:
        total = 0
        for table in ("Entity", "RelatesToNode_"):
            result: Any = conn.execute(f"MATCH (n:{table}) RETURN count(n)")
            total += int(result.get_next()[0])
        return total
    finally:
        conn.close()


def _ranked(items: list[Any], scores: list[float], key: Callable[[Any], tuple[str, str]]) -> list[Any]:
    """Best first, ties broken by the item's text: Graphiti orders equal scores by its random ids."""
    if len(scores) != len(items):
        return sorted(items, key=key)
    return [item for _, item in sorted(zip(scores, items), key=lambda p: (-p[0], key(p[1])))]


class Graphiti(MemorySystem):
    name = "graphiti"
    stages = PROTOCOL_STAGES
    role = "memory"
    uses_gateway = True

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.opts = self.options(DEFAULTS)
        for key in ("edge_reranker", "node_reranker"):
            if self.opts[key] not in RERANKERS:
                raise ValueError(f"method.options.{key}: {self.opts[key]!r} is not one of {', '.join(RERANKERS)}")
        for key in ("edge_limit", "node_limit"):
            if not isinstance(self.opts[key], int) or self.opts[key] < 1:
                raise ValueError(f"method.options.{key}: must be a positive integer, not {self.opts[key]!r}")
        self.drivers: dict[str, Any] = {}

    def settings(self) -> dict[str, Any]:
        return {**self.opts, "graphiti-core": GRAPHITI_VERSION, "template": ZEP_CONTEXT_TEMPLATE,
                "model": self.ctx.cfg.role("memory").model}

    # ---- wiring
    def _endpoint(self) -> Any:
        """The gateway the harness started for the run (``ctx.gateway``: base_url, api_key)."""
        gateway = getattr(self.ctx, "gateway", None)
        if gateway is None:
            raise RuntimeError("graphiti: no gateway: the harness must start its local endpoint for systems "
                               "that declare uses_gateway (ctx.gateway)")
        return gateway

    def _driver(self, state: Path) -> Any:
        _import_graphiti()
        from graphiti_core.driver.kuzu_driver import KuzuDriver

        fresh = not (state / "graph.kuzu").exists()
        with warnings.catch_warnings():  # graphiti-core 0.31 marks its Kuzu backend deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            driver = KuzuDriver(db=str(state / "graph.kuzu"))
        # graphiti-core 0.31.2's Kuzu driver never sets the database name the request scoping
        # compares group ids with, and never creates the full-text indexes its BM25 searches query.
        driver._database = self.opts["group_id"]
        if fresh:
            import kuzu

            conn = kuzu.Connection(driver.db)
            for query in _FTS_INDEXES:
                conn.execute(query)
            conn.close()
        return driver

    def _graphiti(self, driver: Any, session: Any) -> tuple[Any, list[Any]]:
        """Graphiti over ``driver`` with its own OpenAI-compatible clients, configured with a
        gateway session's base URL and key only; returns it and the clients to close."""
        from graphiti_core import Graphiti as Engine
        from graphiti_core.cross_encoder.openai_reranker_client import OpenAIRerankerClient
        from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig
        from graphiti_core.llm_client.config import LLMConfig
        from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient

        gw = session
        model = self.ctx.cfg.role("memory").model
        config = LLMConfig(api_key=gw.api_key, base_url=gw.base_url, model=model, small_model=model, temperature=0.0)
        llm, reranker = OpenAIGenericClient(config), OpenAIRerankerClient(config)
        # Vectors are kept whole (graphiti truncates them to ``embedding_dim``): the gateway's model decides.
        embedder = OpenAIEmbedder(OpenAIEmbedderConfig(api_key=gw.api_key, base_url=gw.base_url,
                                                       embedding_model=self.ctx.cfg.embedding.model,
                                                       embedding_dim=1 << 20))
        engine = Engine(graph_driver=driver, llm_client=llm, embedder=embedder, cross_encoder=reranker)
        return engine, [llm.client, reranker.client, embedder.client]

    # ---- the protocol
    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        spent, started = Spent(), time.perf_counter()
        sessions = sorted(view.sessions, key=session_date)  # time order (stable for equal dates)
        driver = self._driver(state_dir)

        async def run(session: Any) -> None:
            engine, clients = self._graphiti(driver, session)
            try:
                for s in sessions:
                    try:
                        await engine.add_episode(name=s.session_id, source_description="conversation",
                                                 episode_body=episode_body(s, self.ctx.include_images),
                                                 reference_time=session_date(s), group_id=self.opts["group_id"])
                    except Exception as exc:
                        raise RuntimeError(f"graphiti ingestion of {view.memory_id} {s.session_id} failed: "
                                           f"{type(exc).__name__}: {str(exc)[:300]}") from exc
            finally:
                for client in clients:
                    await client.close()

        try:
            with self._endpoint().session(spent) as session:
                asyncio.run(run(session))
            outcomes.note_items(_stored_items(driver.db))  # entities and facts: 0 is an empty memory
        finally:
            driver.db.close()
        spent.seconds = round(time.perf_counter() - started, 4)
        return spent

    def _configs(self) -> tuple[Any, Any]:
        from graphiti_core.search import search_config_recipes as recipes

        edge = {"rrf": recipes.EDGE_HYBRID_SEARCH_RRF, "mmr": recipes.EDGE_HYBRID_SEARCH_MMR,
                "cross_encoder": recipes.EDGE_HYBRID_SEARCH_CROSS_ENCODER}[self.opts["edge_reranker"]]
        node = {"rrf": recipes.NODE_HYBRID_SEARCH_RRF, "mmr": recipes.NODE_HYBRID_SEARCH_MMR,
                "cross_encoder": recipes.NODE_HYBRID_SEARCH_CROSS_ENCODER}[self.opts["node_reranker"]]
        edge, node = (edge.model_copy(update={"limit": int(self.opts["edge_limit"])}, deep=True),
                      node.model_copy(update={"limit": int(self.opts["node_limit"])}, deep=True))
        # Breadth-first search from the found nodes is left out: on Kuzu it exhausted 20 GB of
        # memory on one LoCoMo conversation (graphiti-core 0.31.2). BM25 and cosine similarity remain.
        edges, nodes = edge.edge_config, node.node_config
        assert edges is not None and nodes is not None  # both recipes configure their part
        edges.search_methods = [m for m in edges.search_methods if m.value != "breadth_first_search"]
        nodes.search_methods = [m for m in nodes.search_methods if m.value != "breadth_first_search"]
        return edge, node

    def search(self, question: Question, view: MemoryView) -> Found:
        started, spent = time.perf_counter(), Spent()
        mid = question.memory_id
        if mid not in self.drivers:
            self.drivers[mid] = self._driver(self.ctx.state_dir / mid)
        edge_config, node_config = self._configs()
        group = [self.opts["group_id"]]

        async def run(session: Any) -> tuple[list[Any], list[Any]]:
            engine, clients = self._graphiti(self.drivers[mid], session)
            try:
                found_edges = await engine.search_(question.question, config=edge_config, group_ids=group)
                found_nodes = await engine.search_(question.question, config=node_config, group_ids=group)
            finally:
                for client in clients:
                    await client.close()
            return (_ranked(found_edges.edges, found_edges.edge_reranker_scores, lambda e: (e.fact, str(e.valid_at))),
                    _ranked(found_nodes.nodes, found_nodes.node_reranker_scores, lambda n: (n.name, n.summary)))

        with self._endpoint().session(spent) as session:
            edges, nodes = asyncio.run(run(session))
        evidence = [Evidence(e.fact, [], str(e.valid_at or ""), None, "facts") for e in edges]
        evidence += [Evidence(f"{n.name}: {n.summary}", [], "", None, "entities") for n in nodes]
        spent.seconds = round(time.perf_counter() - started, 4)
        return Found(evidence, spent, {"context": compose_context(edges, nodes), "facts": len(edges),
                                       "entities": len(nodes)})

    def row(self, question: Question, view: MemoryView) -> Any:
        """The default row, with Zep's rendered context as the evidence buffer."""
        started = time.perf_counter()
        found = self.search(question, view)
        row = render(question, self.name, found, round(time.perf_counter() - started, 4))
        row.buffer_text = found.info["context"]
        row.buffer_tokens = count_tokens(row.buffer_text)
        return row

    @classmethod
    def estimate_ingest(cls, view: MemoryView, cfg: Config) -> Optional[Spent]:
        """Per session: entity extraction, node resolution, fact extraction, entity summaries, and
        one resolution call per fact (``FACTS_PER_TURN`` assumed); each with the episode and, for
        the first two, the previous episodes Graphiti shows as context (up to 3 sessions)."""
        calls = prompt = completion = 0
        texts = [count_tokens(episode_body(s, cfg.episodes.include_images)) for s in view.sessions]
        for i, (s, body) in enumerate(zip(view.sessions, texts)):
            earlier = sum(texts[max(0, i - 3):i])
            facts = round(FACTS_PER_TURN * len(s.turns))
            calls += 4 + facts
            prompt += (CALL_TOKENS["entities"] + CALL_TOKENS["nodes"] + 2 * (body + earlier)
                       + CALL_TOKENS["edges"] + body + earlier + CALL_TOKENS["summaries"] + body
                       + facts * CALL_TOKENS["edge_dedupe"])
            completion += 60 * len(s.turns) + 40 * facts + 150
        return Spent(calls=calls, prompt_tokens=prompt, completion_tokens=completion)

    @classmethod
    def estimate_search(cls, question: Question, cfg: Config) -> Spent:
        """The reranker's calls for one question: one per candidate (at most twice the limit, as
        Graphiti's search keeps), each the prompt, a fact (assumed 30 tokens) and the question."""
        opts = {**DEFAULTS, **cfg.method.options}
        calls = sum(2 * int(opts[f"{kind}_limit"]) for kind in ("edge", "node")
                    if opts[f"{kind}_reranker"] == "cross_encoder")
        return Spent(calls=calls, prompt_tokens=calls * (RERANK_PROMPT_TOKENS + 30 + count_tokens(question.question)),
                     completion_tokens=calls)
