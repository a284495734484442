"""LangMem and Graphiti under the native protocol, checked from what reaches the endpoint (the fake
server behind the gateway): LangMem's agent per speaker calling manage_memory on every message and
answering the question for mem0's prompt; Graphiti's episode per turn and its edges' search with
breadth-first search, whose level-by-level Kuzu query finds what graphiti-core's own query finds;
and every scripted reply carrying only the fields its request asks for."""
from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import warnings
from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest

from common.core.config import load_config
from common.systems.base import Context, turn_text
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages, through_the_gateway
from tests.fake_openai import FakeOpenAI
from tests.fake_openai.contract import tool_fields, unrequested
from tests.fake_openai.scripted import generic_reply, kind_for_request, prompt_text

AGENT_SYSTEM_START = "You are a helpful assistant.\n\n## Memories\n<memories>\n"


def _sets(tmp, system, **extra):
    return run_overrides(tmp, TINY_LOCOMO, **{"method.name": system, "embedding.backend": "openai",
                                              "systems.protocol": "native", **extra})


def _run(tmp, system, stages, **extra):
    """A native run against the fake server through the gateway; what reached the endpoint."""
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        through_the_gateway(mp, fake.base_url)
        run = run_stages("configs/locomo.yaml", _sets(tmp, system, **extra), stages)
    chats = [(b, h.get("x-prompt-id")) for b, h in zip(fake.requests, fake.request_headers) if "messages" in b]
    return SimpleNamespace(run=run, fake=fake, chats=chats)


def _replies_ask_only_for_what_was_sent(chats, fake):
    """Every scripted reply (rebuilt from its request, as the fake builds it) carries only requested fields."""
    assert fake.contract_violations == []
    called = Counter()
    for body, pid in chats:
        if kind_for_request(pid, body) != "generic":
            continue
        content, calls = generic_reply(body, prompt_text(body["messages"]), pid)
        for call in calls:
            name = call["function"]["name"]
            assert unrequested(json.loads(call["function"]["arguments"]), tool_fields(body, name)) == []
            called[name] += 1
    return called


def _messages(body, role):
    return [m for m in body["messages"] if m.get("role") == role]


# ---------------------------------------------------------------------------- LangMem
@pytest.fixture(scope="module")
def langmem_native(tmp_path_factory):
    if importlib.util.find_spec("langmem") is None:
        pytest.skip("langmem not installed (requirements-systems.txt)")
    return _run(tmp_path_factory.mktemp("langmem_native"), "langmem", ["preprocess", "retrieve", "answer"])


def _langmem_expected(run):
    """Per memory and speaker, the messages the reference hands that speaker's agent, in order."""
    expected = defaultdict(list)
    for s in rows(run.path("sessions")):
        for t in s["turns"]:
            text = turn_text(SimpleNamespace(text=t["text"], blip_caption=t.get("blip_caption")),
                             run.cfg.episodes.include_images)
            expected[(s["memory_id"], t["speaker"])].append(f"{s['date_time']} | {t['speaker']}: {text}")
    return expected


def test_langmem_native_sends_a_manage_memory_request_per_message_per_speaker(langmem_native):
    expected = _langmem_expected(langmem_native.run)
    agent = [b for b, pid in langmem_native.chats if pid == "gateway.langmem"]
    assert agent and all({t["function"]["name"] for t in b["tools"]} == {"manage_memory", "search_memory"}
                         and b.get("tool_choice") in (None, "auto") for b in agent)
    assert all(b["messages"][0]["role"] == "system" and b["messages"][0]["content"].startswith(AGENT_SYSTEM_START)
               for b in agent)
    owner = {m: key for key, ms in expected.items() for m in ms}
    handed = [b for b in agent if b["messages"][-1]["role"] == "user" and b["messages"][-1]["content"] in owner]
    # Every message reaches its speaker's agent exactly once, the agent left to choose its tool ...
    assert Counter(b["messages"][-1]["content"] for b in handed) == Counter(list(owner))
    for b in handed:
        key = owner[b["messages"][-1]["content"]]
        users = [m["content"] for m in _messages(b, "user")]
        # ... on that speaker's thread: every earlier message of that speaker, no other speaker's.
        assert users == expected[key][: expected[key].index(users[-1]) + 1]
        # Each earlier message was stored with manage_memory, whose result the thread keeps.
        done = [m["content"] for m in _messages(b, "tool")]
        assert len(done) == len(users) - 1 and all(re.fullmatch(r"created memory [0-9a-f-]{36}", d) for d in done)
    called = _replies_ask_only_for_what_was_sent(langmem_native.chats, langmem_native.fake)
    assert called["manage_memory"] == len(owner)
    run = langmem_native.run
    for mid in {key[0] for key in expected}:
        outcome = json.loads((run.dir / "06_retrieve" / "memory" / mid / "ingested.json").read_text())["outcome"]
        turns = sum(len(ms) for key, ms in expected.items() if key[0] == mid)
        assert outcome["built"] == {"agents": 2, "manage_memory_calls": turns} and outcome["items"] == turns
        saved = json.loads((run.dir / "06_retrieve" / "memory" / mid / "agents.json").read_text())
        assert sorted(saved) == sorted(sp for m, sp in expected if m == mid)


def test_langmem_native_asks_each_speakers_agent_and_answers_with_mem0s_prompt(langmem_native):
    run, expected = langmem_native.run, _langmem_expected(langmem_native.run)
    agent = [b for b, pid in langmem_native.chats if pid == "gateway.langmem"]
    answers = {a["qid"]: a for a in rows(run.path("answers"))}
    mem0 = {b["messages"][0]["content"].rsplit("Question: ", 1)[-1].split("\n", 1)[0]: b["messages"][0]["content"]
            for b, pid in langmem_native.chats if pid == "answer_mem0_user"}
    assert len(mem0) == len(answers)
    for r in rows(run.path("retrievals")):
        asked = [b for b in agent if _messages(b, "user")[-1]["content"] == r["question"]]
        speakers = [sp for (mid, sp) in expected if mid == r["memory_id"]]
        # One agent per speaker got the question on top of its whole thread (it searched, then replied).
        first = [b for b in asked if b["messages"][-1]["role"] == "user"]
        assert sorted(tuple(m["content"] for m in _messages(b, "user")[:-1]) for b in first) == \
            sorted(tuple(expected[(r["memory_id"], sp)]) for sp in speakers)
        assert [e["source"] for e in r["method_info"]["evidence"]] == speakers
        assert all(e["text"] for e in r["method_info"]["evidence"])
        assert answers[r["qid"]]["prompt_id"] == "answer_mem0_user"
        # mem0's prompt shows each speaker's agent reply under "Memories for user <speaker>".
        prompt = mem0[r["question"]]
        for e in r["method_info"]["evidence"]:
            shown = prompt.split(f"Memories for user {e['source']}:", 1)[1].lstrip()
            assert shown.startswith(json.dumps([e["text"]], indent=4))


def test_langmem_common_protocol_keeps_the_store_manager(tmp_path):
    from common.systems.langmem import LangMem

    cfg = load_config(["configs/locomo.yaml"], ["method.name=langmem"])
    assert LangMem(Context(cfg, tmp_path, tmp_path / "s", lambda: None)).settings() == {"top_k": 10,
                                                                                      "langmem": "0.0.30"}
    native = load_config(["configs/locomo.yaml"], ["method.name=langmem", "systems.protocol=native"])
    assert LangMem(Context(native, tmp_path, tmp_path / "s", lambda: None)).settings()["protocol"] == "native"


# ---------------------------------------------------------------------------- Graphiti
@pytest.fixture(scope="module")
def graphiti_native(tmp_path_factory):
    if importlib.util.find_spec("graphiti_core") is None:
        pytest.skip("graphiti-core not installed (requirements-systems.txt)")
    from common.systems import graphiti_bfs

    bfs: list[tuple[int, int]] = []
    real = graphiti_bfs.kuzu_edge_bfs

    async def spy(driver, origins, *args, **kwargs):
        out = await real(driver, origins, *args, **kwargs)
        bfs.append((len(origins or []), len(out)))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(graphiti_bfs, "kuzu_edge_bfs", spy)
        out = _run(tmp_path_factory.mktemp("graphiti_native"), "graphiti", ["preprocess", "retrieve"],
                   **{"data.question_limit": 1})
    out.bfs = bfs
    return out


def test_graphiti_native_ingests_one_episode_per_turn(graphiti_native):
    run = graphiti_native.run
    sessions = rows(run.path("sessions"))
    extraction = [b for b, _ in graphiti_native.chats
                  if (b.get("response_format") or {}).get("json_schema", {}).get("name") == "ExtractedEntities"]
    turns = [(s["memory_id"], f"{t['speaker']}: {t['text']}") for s in sessions for t in s["turns"]]
    assert len(extraction) == len(turns)
    for body in extraction:
        text = json.dumps(body)
        current = [line for _, line in turns if json.dumps(f"<CURRENT MESSAGE>\n{line}")[1:-1] in text]
        assert len(current) == 1, "each extraction is of one turn"
        assert "[shares" not in text and "description of attached image" not in text  # Zep's run had none
    for mid in {s["memory_id"] for s in sessions}:
        outcome = json.loads((run.dir / "06_retrieve" / "memory" / mid / "ingested.json").read_text())["outcome"]
        built = outcome["built"]
        assert built["episodes"] == sum(len(s["turns"]) for s in sessions if s["memory_id"] == mid)
        assert built["nodes"] > 0 and built["edges"] > 0 and outcome["items"] == built["nodes"] + built["edges"]
    called = _replies_ask_only_for_what_was_sent(graphiti_native.chats, graphiti_native.fake)
    assert sum(called.values()) == 0  # Graphiti asks with schemas, never with tools


def test_graphiti_searches_its_edges_with_breadth_first_search(graphiti_native, tmp_path):
    from common.systems.graphiti import Graphiti

    cfg = load_config(["configs/locomo.yaml"], _sets(tmp_path, "graphiti"))
    edge, node = Graphiti(Context(cfg, tmp_path, tmp_path / "s", lambda: None))._configs()
    assert [m.value for m in edge.edge_config.search_methods] == ["bm25", "cosine_similarity", "breadth_first_search"]
    assert edge.limit == node.limit == 20 and edge.edge_config.reranker.value == "cross_encoder"
    # In the run: every question's edge search went breadth first from the nodes BM25 and cosine found.
    questions = len(rows(graphiti_native.run.path("questions")))
    assert len([o for o, _ in graphiti_native.bfs if o > 0]) == questions
    assert all(found > 0 for o, found in graphiti_native.bfs if o > 0)
    for r in rows(graphiti_native.run.path("retrievals")):
        assert "<FACTS>" in r["buffer_text"] and r["method_info"]["facts"] > 0


def test_the_level_by_level_bfs_finds_what_graphitis_kuzu_query_finds(graphiti_native):
    """On the run's small graph graphiti-core's own path query is cheap: both return the same facts."""
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.search import search_utils
    from graphiti_core.search.search_filters import SearchFilters

    from common.systems.graphiti_bfs import kuzu_edge_bfs

    memory = graphiti_native.run.dir / "06_retrieve" / "memory"

    async def compare(path):
        driver = KuzuDriver(db=str(path))
        driver._database = "locomo"
        try:
            records, _, _ = await driver.execute_query("MATCH (n:Entity) RETURN n.uuid AS uuid")
            origins = sorted(r["uuid"] for r in records)
            episodes, _, _ = await driver.execute_query("MATCH (o:Episodic) RETURN o.uuid AS uuid")
            for start in ([origins[0]], origins, [episodes[0]["uuid"]]):
                for depth in (1, 2, 3):
                    ours = await kuzu_edge_bfs(driver, start, depth, SearchFilters(), ["locomo"], 1000)
                    theirs = await search_utils.edge_bfs_search(driver, start, depth, SearchFilters(), ["locomo"], 1000)
                    assert {e.uuid for e in ours} == {e.uuid for e in theirs}, (start, depth)
            assert [e.uuid for e in await kuzu_edge_bfs(driver, origins, 3, SearchFilters(), ["locomo"], 2)] == \
                [e.uuid for e in await kuzu_edge_bfs(driver, origins, 3, SearchFilters(), ["locomo"], 1000)][:2]
        finally:
            driver.db.close()

    graphs = sorted(memory.glob("*/graph.kuzu"))
    assert graphs
    for path in graphs:
        asyncio.run(compare(path))


# ---------------------------------------------------------------------------- no gold, either system
@pytest.mark.parametrize("name", ["langmem", "graphiti"])
def test_no_native_request_depends_on_gold_fields(tmp_path, fake_server, monkeypatch, name):
    """As tests/test_systems.py checks the common protocol: the same requests with the gold poisoned."""
    from tests.test_systems import _poison_locomo

    if importlib.util.find_spec("langmem" if name == "langmem" else "graphiti_core") is None:
        pytest.skip(f"{name} not installed (requirements-systems.txt)")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    poisoned = _poison_locomo(TINY_LOCOMO, tmp_path / "poisoned.json")
    sent = []
    for label, data in (("clean", TINY_LOCOMO), ("poisoned", poisoned)):
        start = len(fake_server.requests)
        sets = run_overrides(tmp_path / label, data, **{
            "method.name": name, "embedding.backend": "openai", "systems.protocol": "native",
            "data.question_limit": 1, "data.limit_rule": "first", "data.memories": "[tiny-1]"})
        run_stages("configs/locomo.yaml", sets, ["preprocess", "retrieve", "answer"])
        sent.append(sorted(json.dumps(b, sort_keys=True) for b in fake_server.requests[start:]
                           if b.get("input") != ["dimension probe"]))
    assert sent[0] and sent[0] == sent[1], f"a gold field changed what {name} sent under the native protocol"
    assert "POISON" not in json.dumps(sent[1])


def test_the_level_by_level_bfs_keeps_graphitis_depth_and_direction(tmp_path):
    """A chain with a branch and a cycle: facts within 1, 2, 3 hops along their direction, nearest
    first, exactly those graphiti-core's own Kuzu query finds (an incoming fact is never followed)."""
    if importlib.util.find_spec("graphiti_core") is None:
        pytest.skip("graphiti-core not installed (requirements-systems.txt)")
    from datetime import datetime, timezone

    from common.systems.graphiti import _import_graphiti
    from common.systems.graphiti_bfs import kuzu_edge_bfs

    _import_graphiti()
    from graphiti_core.driver.kuzu_driver import KuzuDriver
    from graphiti_core.edges import EntityEdge
    from graphiti_core.nodes import EntityNode
    from graphiti_core.search import search_utils
    from graphiti_core.search.search_filters import SearchFilters

    async def check():
        with warnings.catch_warnings():  # graphiti-core 0.31 marks its Kuzu backend deprecated
            warnings.simplefilter("ignore", DeprecationWarning)
            driver = KuzuDriver(db=str(tmp_path / "g.kuzu"))
        driver._database = "g"
        now = datetime(2024, 1, 1, tzinfo=timezone.utc)
        nodes = {n: EntityNode(name=n, group_id="g", labels=["Entity"], summary=n, created_at=now,
                               name_embedding=[0.1] * 4) for n in "ABCDEFG"}
        for node in nodes.values():
            await node.save(driver)
        for s, t in [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E"), ("B", "F"), ("G", "A"), ("E", "A")]:
            await EntityEdge(source_node_uuid=nodes[s].uuid, target_node_uuid=nodes[t].uuid, name="R",
                             fact=f"{s}->{t}", group_id="g", created_at=now, episodes=[],
                             fact_embedding=[0.1] * 4, valid_at=now).save(driver)
        expected = {1: ["A->B"], 2: ["A->B", "B->C", "B->F"], 3: ["A->B", "B->C", "B->F", "C->D"]}
        try:
            for depth, facts in expected.items():
                ours = await kuzu_edge_bfs(driver, [nodes["A"].uuid], depth, SearchFilters(), ["g"], 100)
                theirs = await search_utils.edge_bfs_search(driver, [nodes["A"].uuid], depth, SearchFilters(),
                                                            ["g"], 100)
                assert [e.fact for e in ours] == facts and sorted(e.fact for e in theirs) == facts
            assert [e.fact for e in await kuzu_edge_bfs(driver, [nodes["A"].uuid], 3, SearchFilters(), ["g"], 2)] == \
                ["A->B", "B->C"]
        finally:
            driver.db.close()

    asyncio.run(check())
