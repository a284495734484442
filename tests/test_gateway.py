"""The gateway (common/systems/gateway.py) and the fake server's generic replies: an outside
system's OpenAI client served by the harness's client (cache, ledger records, errors) and embedder."""
from __future__ import annotations

import json

import jsonschema
import numpy as np
import openai
import pytest

from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings
from common.systems.base import Spent
from common.systems.gateway import Gateway
from tests.fake_openai import FakeOpenAI, FaultPlan
from tests.fake_openai.scripted import GENERIC_KIND, SCHEMA_KINDS, generic_reply, synthesize

FAST = RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.01)
MEMORY_TOOL = {"type": "function", "function": {"name": "Memory", "description": "a memory", "parameters": {
    "type": "object", "properties": {"content": {"type": "string"}, "id": {"type": "string"}},
    "required": ["content"]}}}
SCHEMA = {"type": "object", "required": ["facts", "when", "kind", "n", "ok"], "properties": {
    "facts": {"type": "array", "minItems": 2, "items": {"$ref": "#/$defs/Fact"}},
    "when": {"anyOf": [{"type": "null"}, {"type": "string", "minLength": 3}]},
    "kind": {"enum": ["a", "b"]}, "n": {"type": "integer", "minimum": 2}, "ok": {"type": "boolean"}},
    "$defs": {"Fact": {"type": "object", "required": ["text", "score"], "additionalProperties": False,
                       "properties": {"text": {"type": "string", "maxLength": 10}, "score": {"type": "number"}}}}}


class Embedder:
    dim = 4

    def __init__(self):
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen += texts
        return np.array([[len(t), 1.0, 0.0, 0.0] for t in texts], dtype=np.float32)


@pytest.fixture
def fake():
    with FakeOpenAI() as srv:
        yield srv


def harness_client(fake, tmp_path):
    role = RoleSettings(role="memory", model="m", base_url=fake.base_url, timeout=5)
    return LLMClient({"memory": role}, cache=ResponseCache(str(tmp_path / "c.sqlite")), retry=FAST)


def test_a_system_client_is_served_by_the_harness_client_cached_and_recorded(fake, tmp_path):
    llm, embedder = harness_client(fake, tmp_path), Embedder()
    with Gateway(llm, lambda: embedder, system="demo") as gw:
        assert gw.base_url.startswith("http://127.0.0.1:") and gw.base_url.endswith("/v1")
        spent = Spent()
        with gw.session(spent) as s:
            sdk = openai.OpenAI(base_url=s.base_url, api_key=s.api_key, max_retries=0)
            msgs = [{"role": "user", "content": "Alice: I adopted a cat named Luna."}]
            for _ in range(2):  # the second is the harness cache's
                r = sdk.chat.completions.create(model="whatever", messages=msgs, tools=[MEMORY_TOOL],
                                                tool_choice="required", temperature=0.9)
            call = r.choices[0].message.tool_calls[0]
            assert call.function.name == "Memory"
            jsonschema.validate(json.loads(call.function.arguments), MEMORY_TOOL["function"]["parameters"])
            fmt = {"type": "json_schema", "json_schema": {"name": "Facts", "schema": SCHEMA}}
            parsed = json.loads(sdk.chat.completions.create(model="x", messages=msgs, response_format=fmt,
                                                            max_tokens=50).choices[0].message.content)
            jsonschema.validate(parsed, SCHEMA)
            vectors = sdk.embeddings.create(model="any", input=["a", "abc"]).data  # the SDK asks for base64
            assert [v.embedding[0] for v in vectors] == [1.0, 3.0] and embedder.seen == ["a", "abc"]
            assert [m.id for m in sdk.models.list()] == ["m"]
    # Two distinct requests reached the endpoint, with the harness's model, temperature, seed and the
    # gateway's prompt id; the system's model name and temperature did not.
    assert fake.request_count == 2 and fake.counts_by_kind() == {GENERIC_KIND: 2}
    first, second = fake.requests
    assert first["model"] == "m" and first["temperature"] == 0.0 and first["seed"] == 42
    assert first["tools"] == [MEMORY_TOOL] and first["tool_choice"] == "required"
    assert second["response_format"] == fmt and second["max_tokens"] == 50
    assert {h["x-prompt-id"] for h in fake.request_headers} == {"gateway.demo"}
    assert spent.calls == 3 and [c["cached"] for c in spent.llm_calls] == [False, True, False]
    assert all(c["prompt_id"] == "gateway.demo" for c in spent.llm_calls)
    assert llm.stats["memory"].calls == 3 and llm.stats["memory"].cached == 1
    assert gw.summary()["chat"] == 3 and gw.summary()["embeddings"] == 1
    assert gw.api_key not in json.dumps(fake.requests) + json.dumps(fake.request_headers)


def test_upstream_failures_come_back_with_their_status_and_are_counted(fake, tmp_path):
    fake.faults = FaultPlan(pinned={GENERIC_KIND: ["500"]})
    with Gateway(harness_client(fake, tmp_path), Embedder, system="demo") as gw:
        sdk = openai.OpenAI(base_url=gw.base_url, api_key=gw.api_key, max_retries=0)
        with pytest.raises(openai.InternalServerError) as err:
            sdk.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], tools=[MEMORY_TOOL])
        assert err.value.status_code == 500 and err.value.body["code"] == "http_500"
        assert gw.summary()["failures"] == {"http_500": 1}
        with pytest.raises(openai.AuthenticationError):  # another token than the run's
            openai.OpenAI(base_url=gw.base_url, api_key="guess", max_retries=0).models.list()
    assert fake.request_count == 2  # the harness's retries, not the system's


def test_the_generic_fallback_registry_synthesizer_tools_and_text():
    text = "System prompt\nBob: we moved to Paris"
    instance = synthesize(SCHEMA, text)
    jsonschema.validate(instance, SCHEMA)
    assert instance == synthesize(SCHEMA, text) and instance["n"] == 2 and len(instance["facts"]) == 2
    SCHEMA_KINDS["Registered"] = lambda t, schema: {"said": t.splitlines()[-1]}
    try:
        content, calls = generic_reply({"response_format": {"type": "json_schema", "json_schema": {
            "name": "Registered", "schema": {"type": "object", "properties": {"said": {"type": "string"}}}}}}, text)
    finally:
        del SCHEMA_KINDS["Registered"]
    assert json.loads(content) == {"said": "Bob: we moved to Paris"} and calls == []
    other = {"type": "function", "function": {"name": "Other", "parameters": SCHEMA}}
    _, calls = generic_reply({"tools": [MEMORY_TOOL, other],
                              "tool_choice": {"type": "function", "function": {"name": "Other"}}}, text)
    assert calls[0]["function"]["name"] == "Other"
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]), SCHEMA)
    assert generic_reply({}, text) == ("Noted: Bob: we moved to Paris", [])


def test_logprobs_requests_are_forwarded_cached_with_their_logprobs_and_returned(fake, tmp_path):
    """A reranker's one-token verdict: logprobs, top_logprobs and logit_bias reach the endpoint,
    the reply's logprobs come back (from the cache the second time), and a request without them
    keeps the cache key it had before they were forwarded."""
    llm = harness_client(fake, tmp_path)
    msgs = [{"role": "user",
             "content": "<PASSAGE>\nAlice adopted a cat\n</PASSAGE>\n<QUERY>\nWho adopted a cat?\n</QUERY>"}]
    with Gateway(llm, Embedder, system="graphiti") as gw:
        sdk = openai.OpenAI(base_url=gw.base_url, api_key=gw.api_key, max_retries=0)
        got = [sdk.chat.completions.create(model="x", messages=msgs, max_tokens=1, logprobs=True, top_logprobs=2,
                                           logit_bias={"6432": 1, "7983": 1}) for _ in range(2)]
    assert fake.request_count == 1 and fake.counts_by_kind() == {"graphiti_rerank": 1}
    sent = fake.requests[0]
    assert sent["logprobs"] is True and sent["top_logprobs"] == 2 and sent["logit_bias"] == {"6432": 1, "7983": 1}
    for r in got:
        top = r.choices[0].logprobs.content[0].top_logprobs
        assert r.choices[0].message.content == "True" and [t.token for t in top] == ["True", "False"]
        assert top[0].logprob < 0
    assert [c["cached"] for c in gw.spent.llm_calls] == [False, True]
    assert all(c["role"] == "memory" for c in gw.spent.llm_calls)
    plain = llm.complete("memory", msgs, prompt_id="gateway.graphiti", max_tokens=1)
    assert plain.logprobs is None and plain.cache_key != gw.spent.llm_calls[0]["cache_key"]
    from common.core.llm import cache_key

    body = llm.request_body(_replace_max(llm.settings("memory")), msgs, False)
    assert plain.cache_key == cache_key({"base_url": fake.base_url, **body, "extra_body": {}})


def _replace_max(settings):
    import dataclasses

    return dataclasses.replace(settings, max_tokens=1)
