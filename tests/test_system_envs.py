"""Memory systems in their own environments (``systems/<name>/``): each adapter, in a virtual
environment built from its pinned requirements, ingests two LoCoMo sessions of conv-26 and answers
a search over the JSON-lines protocol, every LLM and embedding call reaching the fake server and no
other address reached. The environments take minutes to build (reused while their stamp matches),
so these tests are marked ``systems`` (``make test-slow``)."""
from __future__ import annotations

import json

import pytest

from tests import systems_driver as driver

# The systems whose adapters run here (docs/memory-systems.md); the others are in docs/limitations.md.
RUNNING = ["cognee", "hipporag", "memos"]


def test_protocol_helper_is_standard_library_only():
    """The protocol module every adapter imports must load in a bare interpreter (no harness)."""
    import ast

    tree = ast.parse((driver.SYSTEMS / "_protocol.py").read_text(encoding="utf-8"))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {str(node.module).split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.level == 0}
    import sys
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_fake_server_answers_a_registered_systems_prompt_only_json():
    """MemOS asks for its JSON in the prompt alone: the fake server answers requests carrying its
    gateway prompt id with the reader's JSON built from the prompt, any other id with plain text."""
    from tests.fake_openai.scripted import generic_reply

    prompt = "Extract memories.\nuser:Caroline: I went to a support group\nassistant:Melanie: Wow, cool"
    content, calls = generic_reply({"messages": []}, prompt, "gateway.memos")
    reply = json.loads(content)
    assert calls == [] and [m["value"] for m in reply["memory list"]] == [
        "Caroline: I went to a support group", "Melanie: Wow, cool"]
    assert generic_reply({"messages": []}, prompt, "gateway.other")[0].startswith("Noted: ")


@pytest.mark.systems
@pytest.mark.parametrize("name", RUNNING)
def test_system_ingests_and_searches_through_the_endpoint_only(name):
    run = driver.drive(name)
    hello, ingest, search, close = (run.replies[k] for k in ("hello", "ingest", "search", "close"))
    assert hello["ok"] and hello["system"] == name and hello["version"], hello
    assert ingest["ok"] and ingest["items"] > 0, (ingest, run.stderr[-3000:])
    assert search["ok"] and search["evidence"], (search, run.stderr[-3000:])
    assert all(isinstance(e["text"], str) and e["text"] for e in search["evidence"])
    assert isinstance(search["context"], str) and search["context"].strip()
    assert close == {"ok": True} and run.returncode == 0
    # Every request the child made went through the relay to the fake server, none elsewhere.
    assert run.forwarded > 0 and run.forwarded == run.fake_requests
    assert run.attempts == [], json.dumps(run.attempts)[:2000]
