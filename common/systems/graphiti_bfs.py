"""Breadth-first search over Graphiti's Kuzu graph, level by level.

Zep's LoCoMo search asks for edges with the cross-encoder reranker, which Graphiti's recipe
(``EDGE_HYBRID_SEARCH_CROSS_ENCODER``) runs as BM25, cosine similarity and breadth-first search from
the nodes those two found. graphiti-core 0.31.2's Kuzu query for that last step matches every path
``(origin)-[:RELATES_TO*1..5]->(:RelatesToNode_)`` and unwinds its nodes: the paths through a
well-connected entity (a speaker, in a conversation) multiply with each hop, and on one LoCoMo
conversation the query exhausted 20 GB of memory.

This module answers the same question without enumerating paths: the facts (edges) reachable from
the origins within ``bfs_max_depth`` entity hops along the edges' direction (an ``Episodic`` origin
starts from the entities it mentions, one hop spent), nearest first, each level in a fixed order
(fact, then id), the search's filters applied to the facts returned, at most ``limit``. Graphiti's
query returns the same set in no defined order before its ``LIMIT``; every candidate is reranked
afterwards either way. ``install()`` puts it in place of ``edge_bfs_search`` for Kuzu drivers only.
"""
from __future__ import annotations

from typing import Any, Awaitable, Callable

_EDGE = "MATCH (n:Entity)-[:RELATES_TO]->(e:RelatesToNode_)-[:RELATES_TO]->(m:Entity)"


async def _records(driver: Any, query: str, **params: Any) -> list[dict[str, Any]]:
    records, _, _ = await driver.execute_query(query, routing_="r", **params)
    return list(records)


async def kuzu_edge_bfs(driver: Any, origins: list[str] | None, max_depth: int, search_filter: Any,
                        group_ids: list[str] | None = None, limit: int = 10) -> list[Any]:
    """The edges within ``max_depth`` hops of ``origins`` (see the module), as Graphiti's ``EntityEdge``."""
    from graphiti_core.edges import get_entity_edge_from_record
    from graphiti_core.models.edges.edge_db_queries import get_entity_edge_return_query
    from graphiti_core.search.search_filters import edge_search_filter_query_constructor

    if not origins or max_depth < 1:
        return []
    frontier = list(dict.fromkeys(origins))
    # An episode origin: the entities it mentions are sources from the second level on (one hop spent).
    mentioned = await _records(driver, "MATCH (o:Episodic)-[:MENTIONS]->(x:Entity) WHERE o.uuid IN $origins "
                                       "RETURN DISTINCT o.uuid AS origin, x.uuid AS uuid", origins=frontier)
    episodic = {r["origin"] for r in mentioned}
    sources = [u for u in frontier if u not in episodic]
    seen = set(sources)
    via_episode = sorted({r["uuid"] for r in mentioned})
    levels: list[list[str]] = []  # edge ids, nearest first
    found: set[str] = set()
    for depth in range(max_depth):
        if depth == 1:
            sources = sorted(set(sources) | (set(via_episode) - seen))
            seen.update(via_episode)
        if not sources:
            if depth == 0 and via_episode and max_depth > 1:
                continue  # only episodes as origins: their entities start at the next level
            break
        hop = await _records(driver, f"{_EDGE} WHERE n.uuid IN $sources RETURN DISTINCT e.uuid AS edge, "
                                     "m.uuid AS target", sources=sources)
        level = sorted({r["edge"] for r in hop} - found)
        found.update(level)
        levels.append(level)
        sources = sorted({r["target"] for r in hop} - seen)
        seen.update(sources)
    wanted = [u for level in levels for u in level]
    if not wanted:
        return []
    filters, params = edge_search_filter_query_constructor(search_filter, driver.provider)
    filters.append("e.uuid IN $wanted")
    if group_ids is not None:
        filters.append("e.group_id IN $group_ids")
        params["group_ids"] = group_ids
    rows = await _records(driver, f"{_EDGE} WHERE {' AND '.join(filters)} RETURN DISTINCT "
                                  f"{get_entity_edge_return_query(driver.provider)}", wanted=wanted, **params)
    edges = {r["uuid"]: get_entity_edge_from_record(r, driver.provider) for r in rows}
    level_of = {u: lvl for lvl, level in enumerate(levels) for u in level}
    ordered = sorted(edges.values(), key=lambda e: (level_of[e.uuid], e.fact, e.uuid))
    return ordered[:limit]


def install() -> None:
    """Graphiti's search calls ``kuzu_edge_bfs`` for a Kuzu driver, its own ``edge_bfs_search`` for any other."""
    import graphiti_core.search.search as search
    from graphiti_core.driver.driver import GraphProvider

    original: Callable[..., Awaitable[list[Any]]] = search.edge_bfs_search
    if getattr(original, "harness_bfs", False):
        return

    async def edge_bfs_search(driver: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if driver.provider == GraphProvider.KUZU:
            return await kuzu_edge_bfs(driver, *args, **kwargs)
        return await original(driver, *args, **kwargs)

    edge_bfs_search.harness_bfs = True  # type: ignore[attr-defined]
    search.edge_bfs_search = edge_bfs_search
