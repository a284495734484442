"""MemoryOS, HippoRAG and Cognee as their authors run them, checked from what reaches the fake
server and what comes back (each adapter in its own environment, driven by tests/systems_driver.py):

* MemoryOS: the user is ``speaker_a`` (conv-30, whose first turn is speaker_b's), and the speakers'
  names stand for User and Assistant in its pages and its buffer;
* HippoRAG: with the fake's replies OpenIE gives no triple, so every search falls back to dense
  passage retrieval, and says so (``fallbacks``) with what the memory holds (``built``);
* Cognee: the native protocol runs cognee's own LoCoMo evaluation (dated 6-turn windows, the hybrid
  retriever and its completion with the evaluation's answer prompt), the common one searches
  CHUNKS; each ingestion says how many graph nodes and edges it built.

The environments take minutes to build (``systems``; HippoRAG and Cognee 10 minutes or more:
``systems_heavy``). The fast checks of the same seams, without any environment, are in
tests/test_own_env_cards.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import systems_driver as driver


def _conversation(sample: str) -> dict:
    data = json.loads(driver.LOCOMO.read_text(encoding="utf-8"))
    return next(c for c in data if c["sample_id"] == sample)["conversation"]


def _segment_summary(store: Path) -> dict:
    """A question equal to the text of MemoryOS's first mid-term segment summary: the fake server's
    vectors are hashes of the text, so that question's vector is the segment's (similarity 1) and
    retrieval gets past the segment threshold; which pages pass is then the system's own scoring."""
    mid = next(store.glob("memoryos/*/users/*/mid_term.json"))
    sessions = json.loads(mid.read_text(encoding="utf-8"))["sessions"]
    return {"question": next(iter(sessions.values()))["summary"]}


@pytest.mark.systems
def test_memoryos_user_is_speaker_a_and_its_pages_and_buffer_name_the_speakers():
    conv = _conversation("conv-30")
    a, b = conv["speaker_a"], conv["speaker_b"]
    first, second = conv["session_1"][0], conv["session_1"][1]
    assert first["speaker"] == b and second["speaker"] == a  # conv-30 opens with speaker_b
    # native: a search (the harness's buffer), then MemoryOS's own answer with its evaluation's prompt
    run = driver.drive("memoryos", sample="conv-30", ask=_segment_summary, protocol="native")
    hello, ingest, search = (run.replies[k] for k in ("hello", "ingest", "search"))
    assert hello["settings"]["user"] == "speaker_a" and ingest["ok"], (hello, run.stderr[-3000:])
    assert hello["answers"] is True
    # What reached the endpoint: MemoryOS embeds each page as "User: <user_input> Assistant: <agent_response>";
    # speaker_a's first turn is a page's user input, answered by speaker_b's next turn.
    embedded = {t for r in run.requests if "input" in r
                for t in (r["input"] if isinstance(r["input"], list) else [r["input"]])}
    third = conv["session_1"][2]
    assert f"User: {second['text']} Assistant: {third['text']}" in embedded
    assert not any(t.startswith(f"User: {first['text']}") for t in embedded)  # speaker_b never the user
    assert ingest["built"]["pages"] > 0 and ingest["built"]["segments"] >= 1
    # The buffer and the pages in it carry the speakers' names, never "User:"/"Assistant:".
    assert search["ok"] and search["evidence"], (search, run.stderr[-3000:])
    context = search["context"]
    assert f"Recent conversation between {a} and {b}" in context
    assert f"【Historical Memory】\n{a}: " in context and f"\n{b}: " in context
    assert "\nUser: " not in context and "\nAssistant: " not in context
    pages = [e["text"] for e in search["evidence"] if e["text"].startswith(f"{a}: ")]
    assert pages and all(f"\n{b}: " in p for p in pages)
    # The evaluation's answer: the model plays speaker_b, the user prompt (the native buffer) names both.
    answer = run.replies["answer"]
    assert answer["ok"] and answer["answer"], answer
    asked = [r["messages"] for r in run.requests if "messages" in r and r["messages"][0]["role"] == "system"
             and r["messages"][0]["content"].startswith(f"You are role-playing as {b} in a conversation")]
    assert len(asked) == 1 and asked[0][1]["content"] == answer["context"]
    assert answer["context"].startswith(f"<CONTEXT>\nRecent conversation between {a} and {b}:")
    assert f"【Historical Memory】 {a}: " in answer["context"] and f"Characteristics of {a}:" in answer["context"]
    assert asked[0][0]["content"].find(f"the user is playing is  {a}.") > 0
    assert run.attempts == [] and run.returncode == 0


@pytest.mark.systems
@pytest.mark.systems_heavy
def test_hipporag_reports_its_dense_fallback_and_what_it_built():
    run = driver.drive("hipporag", protocol="native")  # a search, then (native) HippoRAG's own answer
    hello, ingest, search = (run.replies[k] for k in ("hello", "ingest", "search"))
    assert hello["answers"] is True and hello["settings"]["answer"] == "rag_qa"
    assert ingest["ok"] and search["ok"], (ingest, search, run.stderr[-3000:])
    built = ingest["built"]
    # Two passages (one per session); the fake's OpenIE replies are not JSON: no triple, no fact.
    assert built["passages"] == 2 and built["triples"] == 0 and built["facts"] == 0
    assert built["passages_without_triples"] == 2
    # ... so its search is plain dense passage retrieval, and the reply says so.
    assert search["fallbacks"] == {"dpr_no_facts": 1}, search
    assert search["evidence"] and run.attempts == []
    # Native: rag_qa answers over the passages (its QA prompt, with the question, reached the endpoint).
    answer = run.replies["answer"]
    assert answer["ok"] and answer["fallbacks"] == {"dpr_no_facts": 1} and answer["answer"], answer
    assert any("Question: What did Caroline research?" in json.dumps(r.get("messages")) for r in run.requests)


@pytest.mark.systems
@pytest.mark.systems_heavy
@pytest.mark.parametrize("protocol", ["common", "native"])
def test_cognee_searches_chunks_in_common_and_its_locomo_evaluations_hybrid_retrieval_in_native(protocol):
    run = driver.drive("cognee", protocol=protocol)
    hello, ingest, search = (run.replies[k] for k in ("hello", "ingest", "search"))
    assert ingest["ok"] and search["ok"], (ingest, search, run.stderr[-3000:])
    built = ingest["built"]
    assert set(built) == {"graph_nodes", "graph_edges", "chunks"} and built["graph_nodes"] > 0 and built["chunks"] > 0
    assert ingest["items"] > 0  # the chunks a CHUNKS search as wide as the memory finds, under both protocols
    mode = "HYBRID_COMPLETION" if protocol == "native" else "CHUNKS"
    assert hello["settings"]["search_type"] == mode and hello["answers"] is (protocol == "native")
    chats = [json.dumps(r["messages"]) for r in run.requests if "messages" in r]
    question = "What did Caroline research?"
    header = "Session 1 of the conversation between Caroline and Melanie, which took place at 1:56 pm on 8 May, 2023"
    if protocol == "native":
        # cognee's LoCoMo evaluation: dated 6-turn windows reach its extraction prompts ...
        assert any(header in c for c in chats), "no dated window reached cognify"
        # ... and its completion asks the question under the evaluation's one answer prompt
        answer = run.replies["answer"]
        assert answer["ok"] and answer["answer"], (answer, run.stderr[-3000:])
        asked = [c for c in chats if question in c]
        assert asked and any("You answer a question about a conversation between two people" in c for c in asked)
        assert answer["context"].strip() and answer["evidence"]
    else:
        assert "answer" not in run.replies and not any(header in c for c in chats)
        assert not any(question in c for c in chats)  # a chunk search: no LLM call with the question
        assert search["evidence"] and all('"dia_id"' in e["text"] for e in search["evidence"])
    assert run.attempts == []
