"""The reply contract: a model sees only its request, so the harness may read from a reply only the
fields the request asks for, and the fake server may put nothing else in its replies.

A request asks for fields by the JSON schema it sends or by the JSON its prompt shows
(``tests/fake_openai/contract.py``). One drive (``tests/contract_drive.py``) sends every prompt that
expects JSON through the code that really sends it, and lets the code that really reads the reply
read it, instrumented. For each prompt:

(a) every field the code read from a reply is one the request asks for (or a declared alias of one
    it asks for, read only after that one: the readers' module-level ``*ALIASES`` tables);
(b) the fake server's reply carries no field the request does not ask for.

Every template in ``common/prompts/`` that expects JSON must be among the prompts driven, and every
outside system's request kind the fake answers too, so a new prompt or reader is covered or fails.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest

import common.evaluation
import common.method
from tests.contract_drive import Call, Drive, Reads, drive, seen
from tests.fake_openai import FakeOpenAI
from tests.fake_openai.contract import (
    ContractError,
    check_reply,
    covered,
    join,
    requested_fields,
    shown_fields,
    tool_fields,
    unrequested,
)
from tests.fake_openai.scripted import (
    GATEWAY_PREFIX,
    OUTSIDE_PROMPTS,
    PROMPT_KINDS,
    SCHEMA_KINDS,
    TEXT_KINDS_BY_PROMPT,
    scripted_content,
)

PROMPTS = Path(__file__).resolve().parent.parent / "common" / "prompts"
JSON_WORD = re.compile(r"\bjson\b", re.I)


def template_ids() -> dict[str, str]:
    """Every prompt template by id (``code_rules.x`` for a set's file) -> its text."""
    out = {}
    for path in sorted(PROMPTS.rglob("*.txt")):
        rel = path.relative_to(PROMPTS).with_suffix("")
        out[".".join(rel.parts)] = path.read_text(encoding="utf-8")
    return out


def json_prompts() -> list[str]:
    """The ids of the templates the harness sends as a call's id (user and judge templates, as
    tests/test_fake_openai.py counts them; a user template's request has its system template too)
    whose request expects JSON: it shows fields or asks for JSON."""
    texts = template_ids()
    sent = {}
    for tid, text in texts.items():
        name = tid.rsplit(".", 1)[-1]
        if name.endswith("_user") or name.startswith("judge_"):
            sent[tid] = texts.get(tid[: -len("_user")] + "_system", "") + "\n\n" + text if name.endswith("_user") \
                else text
    return sorted(tid for tid, text in sent.items() if shown_fields(text) or JSON_WORD.search(text))


def outside_ids() -> list[str]:
    """The outside systems' request kinds the fake answers: their own prompt ids, and the gateway ids
    of the systems whose requests it answers by schema name, tool or prompt text."""
    return sorted(OUTSIDE_PROMPTS) + [GATEWAY_PREFIX + n for n in ("generic", "graphiti", "simplemem")] + sorted(
        TEXT_KINDS_BY_PROMPT)


def alias_groups() -> list[frozenset[str]]:
    """The names a reader accepts for one field, from the module-level ``*ALIASES`` tables
    (canonical name -> the names read in turn) of the modules that read replies."""
    groups = []
    for package in (common.method, common.evaluation):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, table in vars(module).items():
                if name.endswith("ALIASES") and isinstance(table, dict):
                    groups += [frozenset({k, *v}) for k, v in table.items()
                               if isinstance(k, str) and isinstance(v, tuple) and len(v) > 1]
    return groups


def unrequested_reads(call: Call, groups: list[frozenset[str]]) -> list[str]:
    """The fields the code read from ``call``'s reply that its request does not ask for. A declared
    alias passes when the field it stands for is asked for and was read too (it is a fallback)."""
    wanted = requested_fields(call.body)
    bad = []
    for path in sorted(call.reads):
        if covered(path, wanted):
            continue
        parent, _, key = path.rpartition(".")
        if any(key in g and any(join(parent, c) in wanted and join(parent, c) in call.reads for c in g - {key})
               for g in groups):
            continue
        bad.append(path)
    return bad


def unrequested_reply(call: Call) -> list[str]:
    """The fields of ``call``'s reply (message content and tool-call arguments) its request does not
    ask for."""
    bad: list[str] = []
    try:
        reply: Any = json.loads(call.text)
    except ValueError:
        reply = None
    if isinstance(reply, (dict, list)):
        bad += unrequested(reply, requested_fields(call.body))
    for name, arguments in call.tool_calls:
        bad += [f"{name}({p})" for p in unrequested(json.loads(arguments), tool_fields(call.body, name))]
    return bad


@pytest.fixture(scope="module")
def drove(tmp_path_factory) -> Drive:
    return drive(tmp_path_factory.mktemp("contract"))


def calls_of(drove: Drive, prompt_id: str) -> list[Call]:
    return [c for c in drove.harness + drove.outside if c.prompt_id == prompt_id]


# The one finding of (a) this branch cannot fix: the count merge (common/method/routes.py, owned by the
# count-merge fix) reads dedup_confidence, which its prompt never asks for. Strict: once the merge reads
# only what the prompt asks for (or the prompt asks for it), this test passes and the mark must go.
# Prompts whose reads are known not to be asked for yet (strict xfail: a fix makes the test say so).
PENDING_READS: dict[str, str] = {}


def _reads_params() -> list[Any]:
    return [pytest.param(p, marks=pytest.mark.xfail(strict=True, reason=PENDING_READS[p])) if p in PENDING_READS
            else p for p in json_prompts()]


# --------------------------------------------------------------------------- coverage
def test_every_json_prompt_and_every_outside_request_kind_is_driven(drove):
    driven = {c.prompt_id for c in drove.harness + drove.outside}
    assert set(json_prompts()) <= driven, f"not driven: {sorted(set(json_prompts()) - driven)}"
    assert set(json_prompts()) <= set(PROMPT_KINDS), "the fake answers every JSON prompt by its id"
    missing = set(outside_ids()) - driven - set(TEXT_KINDS_BY_PROMPT)  # MemOS: see the test below
    assert not missing, f"outside request kinds not driven: {sorted(missing)}"
    assert {c.body["response_format"]["json_schema"]["name"] for c in calls_of(drove, GATEWAY_PREFIX + "graphiti")} \
        == set(SCHEMA_KINDS)
    # The drive reached every reader: each JSON prompt's reply was read (the first reply of a repaired
    # call is broken on purpose; its second call is read), and the doctor's probe only checks it parses.
    unread = [p for p in json_prompts() if p != "doctor_user" and not any(c.reads for c in calls_of(drove, p))]
    assert not unread, f"replies never read: {unread}"
    assert drove.server.contract_violations == []


def test_the_json_prompts_are_the_ones_expected():
    ids = json_prompts()
    assert {"partition_user", "partition_repair_user", "extract_repair_user", "plan_repair_user", "judge_locomo_mem0",
            "judge_beam_rubric", "doctor_user", "code_rules.plan_audit_user", "code_rules.answer_count_merge_user",
            "code_rules.answer_draft_user"} <= set(ids)
    assert not {"answer_user", "code_rules.answer_user", "judge_lme_default", "judge_beam_align_user",
                "granularity_fine", "code_rules.answer_count_merge_system"} & set(ids)


# --------------------------------------------------------------------------- (b) the fake's replies
@pytest.mark.parametrize("prompt_id", json_prompts() + outside_ids())
def test_the_fake_reply_carries_only_fields_its_request_asks_for(drove, prompt_id):
    calls = calls_of(drove, prompt_id)
    if not calls and prompt_id in TEXT_KINDS_BY_PROMPT:
        pytest.skip(f"{prompt_id}: the system's prompt is in its own environment only (make system-env); its "
                    "replies are checked by the fake server in make test-systems-all")
    assert calls, f"{prompt_id} was not driven"
    headers = drove.server.request_headers
    refused = [m for i, _, m in drove.server.contract_violations if headers[i].get("x-prompt-id") == prompt_id]
    assert not refused, refused  # the fake refused to send such a reply (a 400 naming the fields)
    bad = {p for c in calls for p in unrequested_reply(c)}
    assert not bad, f"{prompt_id}: the fake's reply carries fields no request asks for: {sorted(bad)}"


# --------------------------------------------------------------------------- (a) the code's reads
@pytest.mark.parametrize("prompt_id", _reads_params())
def test_the_code_reads_only_fields_the_request_asks_for(drove, prompt_id):
    groups, calls = alias_groups(), calls_of(drove, prompt_id)
    assert calls, f"{prompt_id} was not driven"
    bad = {p for c in calls for p in unrequested_reads(c, groups)}
    assert not bad, f"{prompt_id}: the code reads fields its prompt never asks for: {sorted(bad)}"


# --------------------------------------------------------------------------- the parts, on their own
def test_shown_fields_read_a_prompt_example_as_a_model_would():
    text = ('Reply with one object:\n{"target_age": {"value": 0, "unit": "week"} or null, "rows": [{"quote": "...", '
            '"event_date": "YYYY-MM-DD or empty"}], "ok": True or False, // a comment "x": 1\n"n": [["a"]]}\n\n'
            'Return JSON with the key as "label".\n[Current Window] [image] {question}\n\n'
            '[\n  {\n    "entry": "..."\n  }\n]')
    assert shown_fields(text) == {"target_age", "target_age.value", "target_age.unit", "rows", "rows[].quote",
                                  "rows[].event_date", "ok", "n", "label", "[].entry"}
    # A stray bracket in the data after a blank line cannot move the example's fields.
    assert shown_fields('{"a": {"b": 1}}\n\nI said { and [ here\n\n{"c": 2}') == {"a", "a.b", "c"}


def test_a_reply_field_is_checked_against_the_schema_and_the_prompt():
    schema = {"type": "object", "properties": {"edges": {"type": "array", "items": {"$ref": "#/$defs/E"}},
                                               "meta": {"type": "object", "additionalProperties": {"type": "string"}}},
              "$defs": {"E": {"type": "object", "properties": {"fact": {"anyOf": [{"type": "string"},
                                                                                   {"type": "null"}]}}}}}
    body = {"messages": [{"role": "user", "content": 'Also {"note": "..."}'}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "X", "schema": schema}}}
    wanted = requested_fields(body)
    assert unrequested({"edges": [{"fact": "f"}], "meta": {"any": "v"}, "note": "n"}, wanted) == []
    assert unrequested({"edges": [{"fact": "f", "why": "w"}], "extra": 1}, wanted) == ["edges[].why", "extra"]
    # A name only "required" (not described) is asked for too; patternProperties allow any key.
    loose = {"type": "object", "required": ["id"], "patternProperties": {"^x": {"type": "string"}}}
    assert unrequested({"id": 1, "x1": "a"}, requested_fields({"messages": [], "response_format": {
        "type": "json_schema", "json_schema": {"name": "L", "schema": loose}}})) == []
    with pytest.raises(ContractError, match="extra"):
        check_reply('{"extra": 1}', lambda: wanted, "a test request")
    check_reply("plain text asks for nothing", lambda: set(), "a test request")


def test_the_count_merge_reply_carries_a_confidence_only_when_the_prompt_asks_for_one():
    listing = ("Candidates (id | episode | instance | quantity | quote):\n"
               "b001_c001 | episode e1 | board game | quantity: 30 $ | quote: x\n"
               "b001_c002 | episode e2 | board game | quantity: 30 $ | quote: x\n\n")
    asked = '{"items": [{"id": "...", "in_scope": true, "scope_reason": "one phrase", "duplicate_of": "..."}]}'
    rows = json.loads(scripted_content("answer_count_merge", listing + asked))["items"]
    assert rows[1]["duplicate_of"] == "b001_c001" and all("dedup_confidence" not in r for r in rows)
    with_confidence = asked.replace('"..."}', '"...", "dedup_confidence": "high|low"}')
    rows = json.loads(scripted_content("answer_count_merge", listing + with_confidence))["items"]
    assert [r["dedup_confidence"] for r in rows] == ["", "high"]


def test_the_fake_answers_a_reply_that_breaks_the_contract_with_an_error_naming_the_fields():
    openai = pytest.importorskip("openai")
    with FakeOpenAI() as server:
        sdk = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            with pytest.raises(openai.BadRequestError, match="carries fields its request does not ask for: label"):
                sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "CORRECT or WRONG?"}],
                                            extra_headers={"X-Prompt-Id": "judge_locomo_mem0"})
            ok = sdk.chat.completions.create(model="m", messages=[
                {"role": "user", "content": 'Grade it. Reply in JSON with the key "label".'}],
                extra_headers={"X-Prompt-Id": "judge_locomo_mem0"})
        finally:
            sdk.close()
        assert set(json.loads(ok.choices[0].message.content)) == {"label"}
        assert [(i, k) for i, k, _ in server.contract_violations] == [(0, "judge_locomo")]


def test_the_read_instrumentation_sees_a_read_of_a_field_no_request_asks_for():
    reads: set[str] = set()
    reply = seen(json.loads('{"items": [{"id": "c1"}]}'), reads)
    assert reply["items"][0].get("confidence") is None and "id" in reply["items"][0]
    call = Call("p", {"messages": [{"role": "user", "content": '{"items": [{"id": "..."}]}'}]}, reads=reads)
    assert unrequested_reads(call, []) == ["items[].confidence"]
    # An alias is a fallback only when the field it stands for was asked for and read first.
    alias = Call("p", {"messages": [{"role": "user", "content": '{"value": "..."}'}]}, reads={"value", "answer_value"})
    assert unrequested_reads(alias, [frozenset({"value", "answer_value"})]) == []
    assert unrequested_reads(Call("p", alias.body, reads={"answer_value"}), [frozenset({"value", "answer_value"})]) \
        == ["answer_value"]


def test_the_harness_readers_parse_through_the_instrumented_decoder(tmp_path):
    """The instrumentation wraps ``json.JSONDecoder``: both ways the readers parse (the client's
    ``parse_json_object`` and ``json.loads``) return ``Seen`` objects for the reply just received."""
    from common.core.llm import parse_json_object

    reads = Reads()
    with reads.watching():
        reads.replied(Call("p", {}, '```json\n{"a": {"b": 1}}\n```'))
        parse_json_object('{"a": {"b": 1}}')["a"].get("b")
        json.loads('{"a": {"b": 1}}')["a"]
        json.loads('{"other": 1}').get("other")  # not the reply: not recorded
    assert reads.calls[0].reads == {"a", "a.b"}
    assert type(json.loads('{"a": 1}')) is dict  # restored on leaving


def test_alias_tables_are_found_in_the_readers():
    groups = alias_groups()
    assert frozenset({"value", "property_value", "answer_value"}) in groups
    assert all(len(g) > 1 for g in groups)
