"""Graphiti (``method.name: graphiti``): Zep's open temporal knowledge-graph engine, ``graphiti-core``,
run locally under the harness.

Ingestion: under the common protocol each session of a memory becomes one Graphiti episode
(``add_episode``, source ``message``), in time order, its ``reference_time`` the session date and
its body the session's turns as ``speaker: text`` lines (image captions appended when images are
on). Under ``systems.protocol: native`` each turn is its own episode, as Zep's LoCoMo ingestion adds
them (getzep/zep-papers, ``zep_locomo_ingestion.py``: one ``graph.add`` of type ``message`` per
turn, ``speaker: text``, created at the session date). Graphiti extracts entities and facts (edges
with validity dates) from each episode with its own prompts, resolves them against the graph built
so far and keeps entity summaries. What a memory's graph holds (entities, facts, episodes) is
reported per memory (``outcomes.note_built``); a graph with no entity and no fact is an empty memory.

Search follows Zep's published LoCoMo evaluation (getzep/zep-papers,
``kg_architecture_agent_memory/locomo_eval/zep_locomo_search.py``): two searches per question,
nodes (entities) with RRF reranking and edges (facts) with the cross-encoder reranker, 20 of
each, Graphiti's recipes as they are (the edges' recipe searches BM25, cosine similarity and
breadth-first search from the nodes those found; on Kuzu the last runs level by level,
``common.systems.graphiti_bfs``), rendered with that script's context template
(``ZEP_CONTEXT_TEMPLATE``, byte-exact: facts with their ``event_time``, entities with their
summaries). The harness's answer prompt (common protocol) or Zep's own (native) and the harness's
judge then read that context like any other system's evidence buffer.

Local and offline: the graph store is Kuzu, embedded (one database file per memory under the
memory's state directory; a rerun opens it again). Graphiti's LLM, embedder and reranker are its
OpenAI-compatible clients configured with the harness gateway's base URL and a session key only
(``ctx.gateway.session``: one per memory ingested and one per search, so every call, the
reranker's at search too, is recorded with the memory role and reaches the ledger); telemetry
is off (``GRAPHITI_TELEMETRY_ENABLED=false`` before the import).
Departures from the published run are listed in its protocol card (common/systems/cards/graphiti.yaml).
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
from common.systems import graphiti_bfs, outcomes
from common.systems.base import PROTOCOL_STAGES, Context, Evidence, Found, MemorySystem, Spent, render, turn_text

GRAPHITI_VERSION = "0.31.2"
DEFAULTS: dict[str, Any] = {"edge_limit": 20, "node_limit": 20, "edge_reranker": "cross_encoder",
                            "node_reranker": "rrf", "group_id": "locomo"}
RERANKERS = ("rrf", "cross_encoder", "mmr")
# The search methods of Graphiti's recipes (graphiti-core 0.31.2, search_config_recipes.py), kept as
# they are: only the edges' cross-encoder recipe adds breadth-first search.
EDGE_SEARCH = {"cross_encoder": "bm25, cosine_similarity, breadth_first_search", "rrf": "bm25, cosine_similarity",
               "mmr": "bm25, cosine_similarity"}
NODE_SEARCH = "bm25, cosine_similarity"
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

    graphiti_bfs.install()
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


def turn_episodes(session: Session) -> list[tuple[str, str]]:
    """(name, body) of each turn's episode under the native protocol: ``speaker: text``, as Zep's
    ingestion sends it. No caption: Zep's script reads it from a key (``blip_captions``) that LoCoMo's
    turns do not have (they say ``blip_caption``), so none reached its graph."""
    return [(t.dia_id or f"{session.session_id}:{i}", f"{t.speaker}: {t.text}") for i, t in enumerate(session.turns)]


def compose_context(edges: list[Any], nodes: list[Any]) -> str:
    """Zep's context: the facts with their event time, the entities with their summaries."""
    facts = [f"  - {e.fact} (event_time: {e.valid_at})" for e in edges]
    entities = [f"  - {n.name}: {n.summary}" for n in nodes]
    return ZEP_CONTEXT_TEMPLATE.format(facts="\n".join(facts), entities="\n".join(entities))


def _stored(db: Any) -> dict[str, int]:
    """What a memory's graph holds: entities (nodes), facts (edges) and episodes."""
    import kuzu

    conn = kuzu.Connection(db)
    try:
        counts = {}
        for name, table in (("nodes", "Entity"), ("edges", "RelatesToNode_"), ("episodes", "Episodic")):
            result: Any = conn.execute(f"MATCH (n:{table}) RETURN count(n)")
            counts[name] = int(result.get_next()[0])
        return counts
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
    # Under the native protocol 07 answers with Zep's own LoCoMo answer prompt (zep_locomo_responses.py:
    # common/prompts/answer_zep_system.txt and answer_zep_user.txt, byte for byte) over Zep's context.
    native_answer_prompt = "zep"

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
        native = self.protocol == "native"
        return {**self.opts, "graphiti-core": GRAPHITI_VERSION, "template": ZEP_CONTEXT_TEMPLATE,
                "model": self.ctx.cfg.role("memory").model, "episode": "turn" if native else "session",
                "edge_search": EDGE_SEARCH[self.opts["edge_reranker"]], "node_search": NODE_SEARCH,
                **({"protocol": "native"} if native else {})}

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

        per_turn = self.protocol == "native"

        async def run(session: Any) -> None:
            engine, clients = self._graphiti(driver, session)
            try:
                for s in sessions:
                    episodes = turn_episodes(s) if per_turn else \
                        [(s.session_id, episode_body(s, self.ctx.include_images))]
                    for name, body in episodes:
                        try:
                            await engine.add_episode(name=name, source_description="conversation", episode_body=body,
                                                     reference_time=session_date(s), group_id=self.opts["group_id"])
                        except Exception as exc:
                            raise RuntimeError(f"graphiti ingestion of {view.memory_id} {name} failed: "
                                               f"{type(exc).__name__}: {str(exc)[:300]}") from exc
                    self.ctx.advance(1)
            finally:
                for client in clients:
                    await client.close()

        try:
            with self._endpoint().session(spent) as session:
                asyncio.run(run(session))
            built = _stored(driver.db)
            outcomes.note_built(**built)
            outcomes.note_items(built["nodes"] + built["edges"])  # entities and facts: 0 is an empty memory
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
        # The recipes' search methods as they are, breadth-first search included (on Kuzu, the
        # harness's level-by-level query: graphiti_bfs); only the limits are Zep's 20.
        return (edge.model_copy(update={"limit": int(self.opts["edge_limit"])}, deep=True),
                node.model_copy(update={"limit": int(self.opts["node_limit"])}, deep=True))

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
        if cfg.systems.protocol == "native":  # one episode per turn (of one turn each)
            units = [(count_tokens(body), 1) for s in view.sessions for _, body in turn_episodes(s)]
        else:
            units = [(count_tokens(episode_body(s, cfg.episodes.include_images)), len(s.turns))
                     for s in view.sessions]
        texts = [tokens for tokens, _ in units]
        for i, (body, turns) in enumerate(units):
            earlier = sum(texts[max(0, i - 3):i])
            facts = round(FACTS_PER_TURN * turns)
            calls += 4 + facts
            prompt += (CALL_TOKENS["entities"] + CALL_TOKENS["nodes"] + 2 * (body + earlier)
                       + CALL_TOKENS["edges"] + body + earlier + CALL_TOKENS["summaries"] + body
                       + facts * CALL_TOKENS["edge_dedupe"])
            completion += 60 * turns + 40 * facts + 150
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
