"""A local, scripted stand-in for an OpenAI-compatible API, used by the test-suite and ``bench``.

* ``server``          - the HTTP server (``FakeOpenAI``), routing, prompt-kind lookup, ``FaultPlan``,
                        ``Capabilities`` (features an endpoint may lack, for ``make doctor``)
* ``scripted``        - the scripted, schema-valid replies per prompt kind and the prompt-id table
* ``contract``        - the rule every reply follows: only the fields its request asks for
* ``instrumentation`` - request log, per-kind counts, in-flight peaks, served latencies
* ``batches``         - ``/v1/files`` and ``/v1/batches`` (``BatchPlan``: slow, held, expiring, rejected)

A chat request names its prompt template in the ``X-Prompt-Id`` header (``LLMClient.complete``
sends it from its ``prompt_id`` argument); the server maps that id to a prompt kind through
``PROMPT_KINDS`` and answers with that kind's scripted reply. Without the header (or with an id not
in the table) the request is rejected with a 400 ``unknown_prompt_kind`` naming the header.

Usage::

    with FakeOpenAI() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        client.chat.completions.create(model="m", messages=[...],
                                       extra_headers={"X-Prompt-Id": "answer_user"})
"""
from __future__ import annotations

from tests.fake_openai.batches import BatchPlan, FakeBatches
from tests.fake_openai.instrumentation import Instrumentation
from tests.fake_openai.scripted import (
    CHAT_KINDS,
    EMBEDDING_DIM,
    EMBEDDINGS_KIND,
    FAKE_MODEL,
    OUTSIDE_PROMPTS,
    PROMPT_ID_HEADER,
    PROMPT_KINDS,
    UNKNOWN_KIND,
    approx_tokens,
    content_words,
    embed_text,
    judge_label,
    kind_for_prompt_id,
    parse_question,
    parse_turns,
    plan_entity_property,
    prompt_text,
    reply_answer,
    reply_bridge,
    reply_extract,
    reply_partition,
    reply_plan,
    scripted_content,
)
from tests.fake_openai.server import (
    ALL_FAULTS,
    BODY_FAULTS,
    CONTENT_FAULTS,
    HTTP_FAULTS,
    MALFORMED_CONTENT,
    NO_FAULT,
    Capabilities,
    FakeOpenAI,
    FaultPlan,
    unknown_kind_message,
)

__all__ = [
    "ALL_FAULTS", "BatchPlan", "Capabilities", "FakeBatches", "BODY_FAULTS", "CHAT_KINDS", "CONTENT_FAULTS",
    "EMBEDDING_DIM",
    "EMBEDDINGS_KIND", "FAKE_MODEL", "HTTP_FAULTS", "MALFORMED_CONTENT", "NO_FAULT", "OUTSIDE_PROMPTS",
    "PROMPT_ID_HEADER", "PROMPT_KINDS",
    "UNKNOWN_KIND", "FakeOpenAI", "FaultPlan", "Instrumentation", "approx_tokens", "content_words",
    "embed_text", "judge_label", "kind_for_prompt_id", "parse_question", "parse_turns",
    "plan_entity_property", "prompt_text", "reply_answer", "reply_bridge", "reply_extract",
    "reply_partition", "reply_plan", "scripted_content", "unknown_kind_message",
]
