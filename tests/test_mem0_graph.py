"""mem0's graph memory (``systems/mem0_graph``: mem0ai 1.0.11 with embedded Kuzu) in its own
environment, against the fake server, whose replies carry only what each request asks for (the
facts and memory-update JSON its prompts show, the arguments of the graph's entity and relation
tools): the relations the graph extracted reach the Kuzu graph, the ``built`` reply and the buffer;
the session dates reach the extraction prompts and every memory line; ``top_k`` is the harness's
limit under ``common`` and the reference's 30 under ``native``; an empty memory says so; through the
harness, every call goes through the gateway, the card agrees with what the child resolved, and
what the memory built reaches 09's metrics.

The environment builds in about a minute: the tests that drive the system are marked ``systems``
(``make test-slow``); the fake's replies to its requests are checked in ``make test``."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import pytest

from tests import systems_driver as driver
from tests.fake_openai.mem0_graph_replies import relations as fake_relations

NAME = "mem0_graph"
GRAPH_TOOLS = {"extract_entities", "establish_relationships", "delete_graph_memory"}


# --------------------------------------------------------------------------- the fake's replies
def _tool(name, items):
    """A tool as mem0's graph offers it: one array parameter ``entities`` of objects with ``items``."""
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "required": ["entities"], "properties": {"entities": {"type": "array", "items": {
            "type": "object", "required": items, "properties": {k: {"type": "string"} for k in items}}}}}}}


def test_the_fake_answers_mem0s_graph_tools_from_the_text_with_only_their_fields():
    from tests.fake_openai.scripted import generic_reply

    pid = "gateway.mem0_graph"
    text = "Caroline: I went to the LGBTQ support group in Boston.\nMelanie: Wow, Caroline!"
    ask = {"messages": [{"role": "system", "content": "Extract all the entities."}, {"role": "user", "content": text}],
           "tools": [_tool("extract_entities", ["entity", "entity_type"])]}
    content, calls = generic_reply(ask, text, pid)
    args = json.loads(calls[0]["function"]["arguments"])
    assert [e["entity"] for e in args["entities"]] == ["Caroline", "Melanie", "LGBTQ", "Boston", "Wow"]
    assert {k for e in args["entities"] for k in e} == {"entity", "entity_type"}
    listed = "List of entities: ['caroline', 'melanie', 'lgbtq', 'boston']. \n\nText: " + text
    ask = {"messages": [{"role": "system", "content": "Relations."}, {"role": "user", "content": listed}],
           "tools": [_tool("establish_relationships", ["source", "relationship", "destination"])]}
    args = json.loads(generic_reply(ask, listed, pid)[1][0]["function"]["arguments"])
    assert args == {"entities": [{"source": "Caroline", "relationship": "mentions", "destination": "lgbtq"},
                                 {"source": "Caroline", "relationship": "mentions", "destination": "boston"},
                                 {"source": "Melanie", "relationship": "mentions", "destination": "caroline"}]}
    ask = {"messages": [{"role": "user", "content": "existing memories"}],
           "tools": [_tool("delete_graph_memory", ["source", "relationship", "destination"])]}
    assert generic_reply(ask, "existing memories", pid)[1] == []  # nothing to delete: no call


def test_the_fake_answers_mem0s_fact_and_update_prompts_as_their_json_shows():
    from tests.fake_openai.mem0_graph_replies import UPDATE_MARKER
    from tests.fake_openai.scripted import generic_reply

    pid = "gateway.mem0_graph"
    facts = ('Output: {"facts" : ["Name is John"]}\nReturn json.\n'
             "Input:\nuser: Caroline: I paint.\nassistant: Melanie: Nice!\n")
    content, _ = generic_reply({"messages": [{"role": "user", "content": facts}],
                                "response_format": {"type": "json_object"}}, facts, pid)
    assert json.loads(content) == {"facts": ["Caroline said: I paint."]}  # the user's lines only
    update = ('Old memory:\n```\n[{"id": "0", "text": "Caroline said: I paint."}]\n```\n'
              f"{UPDATE_MARKER}.\n\n```\n['Caroline said: I paint.', 'Caroline said: I run.']\n```\n"
              'Return: {"memory" : [{"id" : "<id>", "text" : "<text>", "event" : "<event>", "old_memory" : "<old>"}]}')
    content, _ = generic_reply({"messages": [{"role": "user", "content": update}],
                                "response_format": {"type": "json_object"}}, update, pid)
    assert json.loads(content) == {"memory": [{"id": "0", "text": "Caroline said: I paint.", "event": "NONE"},
                                              {"id": "2", "text": "Caroline said: I run.", "event": "ADD"}]}


# --------------------------------------------------------------------------- the system, driven
def _tools(body):
    return {t["function"]["name"] for t in body.get("tools") or []}


def _sections(context):
    """speaker -> (memory lines, relations) from the buffer's "Memories for user" / "Relations for
    user" parts (ANSWER_PROMPT_GRAPH's layout: each part a JSON list after a blank line)."""
    out = {}
    for part in context.split("Memories for user ")[1:]:
        who, rest = part.split(":\n\n", 1)
        memories_json, relations_part = rest.split(f"\n\nRelations for user {who}:\n\n", 1)
        out[who] = (json.loads(memories_json), json.loads(relations_part.strip()))
    return out


def _norm(name):
    return name.lower().replace(" ", "_")


@pytest.fixture(scope="module")
def drives():
    """The adapter driven twice on conv-26's first two sessions (common, then native)."""
    python = driver.build_env(NAME)
    return {protocol: driver.drive(NAME, python=python, protocol=protocol) for protocol in ("common", "native")}


@pytest.mark.systems
@pytest.mark.xdist_group("system-mem0_graph")
def test_the_graph_is_built_from_the_relations_the_model_extracted(drives):
    run = drives["common"]
    hello, ingest, search = (run.replies[k] for k in ("hello", "ingest", "search"))
    assert hello["ok"] and hello["version"] == "1.0.11" and hello["settings"]["graph_store"] == "kuzu"
    assert ingest["ok"] and ingest["errors"] == [], (ingest, run.stderr[-3000:])
    built = ingest["built"]
    assert built["graph_relations"] > 0 and built["graph_nodes"] > 0 and built["memories"] > 0
    assert built["memories"] == built["memories_Caroline"] + built["memories_Melanie"]
    assert ingest["items"] == built["memories"] + built["graph_relations"]
    # Every add sent mem0's graph calls, each offering the tool the graph reads.
    chats = [b for b in run.requests if "messages" in b]
    assert {n for b in chats for n in _tools(b)} == GRAPH_TOOLS
    # What the fake's relation replies said (from the texts mem0 sent), as mem0 stores names.
    said = {(_norm(r["source"]), _norm(r["relationship"]), _norm(r["destination"]))
            for b in chats if _tools(b) == {"establish_relationships"}
            for r in fake_relations(b["messages"][-1]["content"])}
    assert said
    sections = _sections(search["context"])
    assert list(sections) == ["Caroline", "Melanie"]
    for who, (_, relations) in sections.items():
        assert relations and len(relations) <= 10, who
        assert all(set(r) == {"source", "relationship", "target"} for r in relations)
        assert {(r["source"], r["relationship"], r["target"]) for r in relations} <= said
        graph_evidence = [e["text"] for e in search["evidence"] if e["source"] == f"{who} (graph)"]
        assert graph_evidence == [f"{r['source']} -- {r['relationship']} -- {r['target']}" for r in relations]
    assert run.forwarded == run.fake_requests > 0 and run.attempts == []


@pytest.mark.systems
@pytest.mark.xdist_group("system-mem0_graph")
def test_session_dates_reach_the_extraction_prompt_and_every_memory(drives):
    run = drives["common"]
    extraction = [b["messages"][0]["content"] for b in run.requests
                  if "messages" in b and b["messages"][-1]["content"].startswith("Input:\n")]
    stated = {m for p in extraction for m in re.findall(r"Today's date is ([0-9-]+)\.", p)}
    assert extraction and stated == {"2023-05-08", "2023-05-25"}  # the two sessions' days, not today's
    dates = {"1:56 pm on 8 May, 2023", "1:14 pm on 25 May, 2023"}
    for memories, _ in _sections(run.replies["search"]["context"]).values():
        assert memories and all(line.split(": ", 1)[0] in dates for line in memories)
    items = [e for e in run.replies["search"]["evidence"] if e["score"] is not None]
    assert items and all(e["timestamp"] in dates and e["source_turn_ids"] for e in items)


@pytest.mark.systems
@pytest.mark.xdist_group("system-mem0_graph")
def test_the_native_search_returns_answer_prompt_graphs_slots_speaker_a_first(drives):
    """Under native the search also returns ANSWER_PROMPT_GRAPH's slots as search.py fills them (07
    renders the prompt with them); under common none."""
    assert "answer_slots" not in drives["common"].replies["search"]
    search = drives["native"].replies["search"]
    slots, sections = search["answer_slots"], _sections(search["context"])
    assert (slots["speaker_1_user_id"], slots["speaker_2_user_id"]) == tuple(driver.locomo_speakers().values())
    for i in (1, 2):
        memories, relations = sections[slots[f"speaker_{i}_user_id"]]
        assert slots[f"speaker_{i}_memories"] == json.dumps(memories, indent=4) and memories
        assert slots[f"speaker_{i}_graph_memories"] == json.dumps(relations, indent=4)


@pytest.mark.systems
@pytest.mark.xdist_group("system-mem0_graph")
def test_top_k_is_the_limit_under_common_and_thirty_under_native(drives):
    common, native = drives["common"], drives["native"]
    assert common.replies["hello"]["settings"]["top_k"] == 10
    assert native.replies["hello"]["settings"]["top_k"] == 30
    built = native.replies["ingest"]["built"]
    for run, cap in ((common, 10), (native, 30)):
        for who, (memories, relations) in _sections(run.replies["search"]["context"]).items():
            assert len(memories) == min(cap, built[f"memories_{who}"]), (who, cap)
            assert len(relations) <= cap
    assert max(built["memories_Caroline"], built["memories_Melanie"]) > 10  # so the two differ


@pytest.mark.systems
@pytest.mark.xdist_group("system-mem0_graph")
def test_an_empty_memory_reports_nothing_built_and_searches_without_a_call(tmp_path):
    """A memory whose sessions hold no turn: items 0 (the harness counts it as empty_memory), nothing
    built, and its search finds nothing without reaching any endpoint (port 9 refuses)."""
    python = driver.build_env(NAME)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
           "OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "t", "HARNESS_SYSTEM_DIR": str(tmp_path),
           "HARNESS_EMBED_DIM": "32"}
    requests = [{"op": "hello", "protocol": "common"},
                {"op": "ingest", "memory_id": "m", "sessions": [{"session_id": "s", "date": None, "turns": []}]},
                {"op": "search", "memory_id": "m", "question": "what?", "question_date": None, "limit": 10},
                {"op": "close"}]
    done = subprocess.run([str(python), str(driver.SYSTEMS / NAME / "adapter.py")], env=env, timeout=300,
                          input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies[1] == {"ok": True, "items": 0, "errors": [],
                          "built": {"memories": 0, "graph_nodes": 0, "graph_relations": 0}}, done.stderr[-2000:]
    assert replies[2]["ok"] and replies[2]["evidence"] == [], replies[2]
    assert replies[3] == {"ok": True} and done.returncode == 0


@pytest.mark.systems
@pytest.mark.xdist_group("system-mem0_graph")
def test_through_the_harness_the_graph_reaches_the_metrics(tmp_path):
    """01-09 on the tiny LoCoMo file with ``method.name=mem0_graph``: the child reaches only the
    gateway, each memory's marker carries what its graph holds, 09's metrics sum them, and every
    buffer is the reference's layout with both speakers' relations."""
    from common.systems import envs, process
    from tests.conftest import REPO, TINY_LOCOMO, rows, run_overrides, run_stages, through_the_gateway
    from tests.fake_openai import FakeOpenAI

    envs.build(NAME)
    guard = tmp_path / "guard"
    guard.mkdir()
    shutil.copy(REPO / "tests" / "fixtures" / "systems" / "socket_guard.py", guard / "sitecustomize.py")
    with FakeOpenAI() as fake, pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_BASE_URL", fake.base_url)
        mp.setattr(process, "CHILD_ENV", {"PYTHONPATH": str(guard), "SOCKET_GUARD_LOG": str(tmp_path / "guard.log")})
        attempts, ports = through_the_gateway(mp, fake.base_url)
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": NAME, "embedding.backend": "openai",
                                                        "embedding.model": "fake-embed",
                                                        "embedding.base_url": fake.base_url})
        run = run_stages("configs/locomo.yaml", sets, ["preprocess", "episodes", "extract", "index", "plan",
                                                       "retrieve", "answer", "judge", "aggregate"])
    assert not (tmp_path / "guard.log").exists() or not (tmp_path / "guard.log").read_text().strip()
    built = {}
    for mid in ("tiny-1", "tiny-2"):
        outcome = json.loads((run.dir / "06_retrieve" / "memory" / mid / "ingested.json").read_text())["outcome"]
        assert outcome["items"] > 0 and outcome["built"]["graph_relations"] > 0, outcome
        assert not outcome.get("errors"), outcome
        built[mid] = outcome["built"]
    ident = json.loads((run.dir / "06_retrieve.manifest.json").read_text())["system"]
    assert ident["version"] == "1.0.11" and ident["card"] == "systems/mem0_graph/card.yaml"
    assert ident["card_check"] == {"checked": {"top_k": 10, "graph_store": "kuzu"}, "mismatches": []}
    block = json.loads(run.path("metrics").read_text())["memory_system"]
    assert block["built"]["graph_relations"] == sum(b["graph_relations"] for b in built.values())
    assert not block["outcomes"].get("empty_memory")
    got = rows(run.path("retrievals"))
    assert got and all(not r["error"] for r in got)
    for r in got:
        sections = _sections(r["buffer_text"])
        assert len(sections) == 2 and all(memories for memories, _ in sections.values()), r["qid"]
