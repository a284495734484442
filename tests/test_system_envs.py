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
# MemoryOS's search finds nothing with the fake server's replies: its retrieval keeps a mid-term
# segment only when the question's embedding is within 0.1 of the segment summary's, and the
# fake's hash vectors of unrelated texts are not (docs/memory-systems.md says what it needs).
RUNNING = {"cognee": True, "hipporag": True, "letta": True, "memos": True, "memoryos": False}


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


TOY_ADAPTER = """
import logging, sys
sys.path.insert(0, {systems!r})
import _protocol as proto

class Toy(proto.Adapter):
    system = "toy"
    def version(self):
        return "1"
    def ingest(self, memory_id, sessions):
        print("a library printing to stdout")  # must not corrupt the reply
        logging.getLogger("toy").error("one turn lost")  # a logged, swallowed error is reported
        return sum(len(s["turns"]) for s in sessions), []
    def search(self, memory_id, question, question_date, limit):
        raise ValueError("no index for " + memory_id)

proto.serve(Toy())
"""


def test_protocol_replies_reports_logged_errors_and_keeps_stdout_clean(tmp_path):
    """The child's side of the protocol: one reply line per request, library output kept off the
    reply stream, ERROR log records of an ingestion returned, a failure a reply, close exits."""
    import subprocess
    import sys

    script = tmp_path / "adapter.py"
    script.write_text(TOY_ADAPTER.format(systems=str(driver.SYSTEMS)), encoding="utf-8")
    requests = [{"op": "hello"},
                {"op": "ingest", "memory_id": "m", "sessions": [{"session_id": "s", "date": None, "turns": [
                    {"turn_id": "D1:1", "speaker": "A", "text": "hi"}]}]},
                {"op": "search", "memory_id": "m", "question": "q", "question_date": None, "limit": 3},
                {"op": "nonsense"}, {"op": "close"}, {"op": "hello"}]
    done = subprocess.run([sys.executable, str(script)], input="".join(json.dumps(r) + "\n" for r in requests),
                          capture_output=True, text=True, timeout=30)
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert replies == [
        {"ok": True, "system": "toy", "version": "1"},
        {"ok": True, "items": 1, "errors": ["toy: one turn lost"]},
        {"ok": False, "error": "ValueError: no index for m"},
        {"ok": False, "error": "unknown op 'nonsense'"},
        {"ok": True},
    ]  # nothing after close
    assert done.returncode == 0 and "a library printing to stdout" in done.stderr


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
@pytest.mark.parametrize("name", sorted(RUNNING))
def test_system_ingests_and_searches_through_the_endpoint_only(name):
    run = driver.drive(name)
    finds = RUNNING[name]
    hello, ingest, search, close = (run.replies[k] for k in ("hello", "ingest", "search", "close"))
    assert hello["ok"] and hello["system"] == name and hello["version"], hello
    assert ingest["ok"] and ingest["items"] > 0, (ingest, run.stderr[-3000:])
    assert search["ok"] and bool(search["evidence"]) is finds, (search, run.stderr[-3000:])
    assert all(isinstance(e["text"], str) and e["text"] for e in search["evidence"])
    assert isinstance(search["context"], str) and search["context"].strip()
    assert close == {"ok": True} and run.returncode == 0
    # Every request the child made went through the relay to the fake server, none elsewhere.
    assert run.forwarded > 0 and run.forwarded == run.fake_requests
    assert run.attempts == [], json.dumps(run.attempts)[:2000]
