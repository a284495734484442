"""More memory systems in their own environments (``systems/<name>/``), beside the ones of
``tests/test_system_envs.py``: each adapter, in a virtual environment built from its pinned
requirements (reused while its stamp matches), ingests two LoCoMo sessions of conv-26 and answers a
search over the JSON-lines protocol, every LLM and embedding call reaching the fake server and no
other address reached. Marked ``systems`` (``make test-slow``): the environments take minutes."""
from __future__ import annotations

import json

import pytest

from tests import systems_driver as driver

# Systems whose retrieval drops items below a similarity threshold: with the fake server's hash
# vectors (random directions) a question may legitimately retrieve nothing, so for them the test
# asserts the rendered buffer (profile and history sections) rather than a non-empty item list.
THRESHOLDED = {"memoryos"}


@pytest.mark.systems
@pytest.mark.parametrize("name", ["memoryos"])
def test_system_ingests_and_searches_through_the_endpoint_only(name):
    run = driver.drive(name)
    hello, ingest, search, close = (run.replies[k] for k in ("hello", "ingest", "search", "close"))
    assert hello["ok"] and hello["system"] == name and hello["version"], hello
    assert ingest["ok"] and ingest["items"] > 0 and ingest["errors"] == [], (ingest, run.stderr[-3000:])
    assert search["ok"], (search, run.stderr[-3000:])
    if name not in THRESHOLDED:
        assert search["evidence"], (search, run.stderr[-3000:])
    assert all(isinstance(e["text"], str) and e["text"] and isinstance(e["source_turn_ids"], list)
               for e in search["evidence"])
    assert isinstance(search["context"], str) and search["context"].strip()
    assert close == {"ok": True} and run.returncode == 0
    # Every request the child made went through the relay to the fake server, none elsewhere.
    assert run.forwarded > 0 and run.forwarded == run.fake_requests
    assert run.attempts == [], json.dumps(run.attempts)[:2000]
