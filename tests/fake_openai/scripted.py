"""The fake server's scripted replies: one deterministic, schema-valid reply per prompt kind.

A chat request's kind comes from its ``X-Prompt-Id`` header (the id of the template in
``common/prompts/`` that produced the messages) through ``PROMPT_KINDS``; the reply is derived only
from the prompt text, so runs are reproducible. Embeddings are deterministic unit vectors.

Every reply carries only the fields its request asks for (``tests/fake_openai/contract.py``): the
JSON schema it sends, or the JSON its prompt shows. A model sees nothing else, so a reply that filled
in a field the prompt never names would let code that reads that field pass here and fail on a real
model. ``scripted_content`` and ``generic_reply`` check each reply they build and raise
``ContractError`` on such a field.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import struct
from functools import partial
from typing import Any, Callable, Optional

from tests.fake_openai.contract import (
    check_reply,
    prompt_fields,
    requested_fields,
    shown_fields,
    shown_schemas,
    tool_fields,
)

FAKE_MODEL = "fake-model"
EMBEDDING_DIM = 32
PROMPT_ID_HEADER = "X-Prompt-Id"

# --------------------------------------------------------------------------- prompt kinds
# Prompt id (the file stem in common/prompts/ the caller passed to LLMClient.complete) -> the kind
# of scripted reply. Only the ids the harness sends are listed: the user template of each call
# (system templates and granularity_* snippets are parts of those calls, never sent as their id).
PROMPT_KINDS: dict[str, str] = {
    "partition_user": "partition",
    "partition_repair_user": "partition_repair",
    "extract_user": "extract",
    "extract_repair_user": "extract_repair",
    "plan_user": "plan",
    "plan_repair_user": "plan_repair",
    "bridge_user": "bridge",
    "bridge_repair_user": "bridge_repair",
    "answer_user": "answer",
    "answer_baseline_user": "answer",  # baselines: same rules, no plan
    "answer_closed_book_user": "answer",  # closed-book baseline (no_memory)
    "answer_mem0_user": "answer",  # answer.prompt: mem0 (one system message)
    "answer_beam_user": "answer",  # answer.prompt: beam (the official BEAM runner's RAG template)
    "answer_realtalk_user": "answer",  # answer.prompt: realtalk (evaluate_memory.py's QA prompt)
    "answer_zep_user": "answer",  # Graphiti's native answer: Zep's own LoCoMo answer prompt
    "answer_mem0_graph_user": "answer",  # mem0_graph's native answer: ANSWER_PROMPT_GRAPH (one system message)
    "answer_memos_user": "answer",  # MemOS's native answer: ANSWER_PROMPT_MEMOS (one system message)
    # Hindsight's native answer: LoComoAnswerGenerator's messages, its wrapper's {answer, reasoning} schema
    "answer_hindsight_user": "answer_hindsight",
    # mem0's own fact-extraction prompt (mem0ai 2.2.1 makes one additive ADD-only call per add;
    # its memory-update decisions are part of that reply), sent by common.systems.mem0.
    "mem0_extraction": "mem0_extraction",
    # prompts.set: code_rules (common/prompts/code_rules/): the same reply kinds as the paper's set.
    "code_rules.plan_user": "plan",
    "code_rules.extract_user": "extract",
    "code_rules.answer_user": "answer",
    # plan.audit, answer.rerank, answer.verify: their own kinds.
    "code_rules.plan_audit_user": "plan_audit",
    "code_rules.plan_code_repair_user": "plan_repair",  # plan.repair: code
    "code_rules.bridge_code_user": "bridge",  # retrieve.bridge_question: false (no question line)
    "code_rules.answer_rerank_user": "answer_rerank",
    "code_rules.answer_verify_user": "answer_verify",
    "code_rules.answer_draft_user": "answer_draft",
    # answer.routes: the counting ledger (scan and consolidation) and the temporal ledger.
    "code_rules.answer_count_user": "answer_count",
    "code_rules.answer_count_merge_user": "answer_count_merge",
    "code_rules.answer_temporal_user": "answer_temporal",
    "code_rules.answer_order_user": "answer_order",
    # The authors' versions of the ledgers' extra calls (answer.routes.count_reference_event,
    # temporal_answer_call, age_chain) and their LongMemEval draft prompt (answer.draft_prompt).
    "code_rules.answer_count_reference_user": "answer_count_reference",
    "code_rules.answer_temporal_answer_user": "answer_temporal_answer",
    "code_rules.answer_temporal_repair_user": "answer_temporal_repair",
    "code_rules.answer_age_chain_user": "answer_age_chain",
    # A-MEM's two calls per note (a-mem 0.2.6, sent by common.systems.amem): the note's analysis
    # (keywords, context, tags) and the evolution decision over its nearest neighbours.
    "amem_analyze": "amem_analyze",
    "amem_evolve": "amem_evolve",
    # A-MEM's keyword step before each search (its LoCoMo evaluation's generate_query_llm).
    "amem_keywords": "amem_keywords",
    "judge_locomo_mem0": "judge_locomo",
    "judge_locomo_paper": "judge_locomo",
    # The official LongMemEval checker templates all end by asking for yes or no.
    "judge_lme_default": "judge_lme",
    "judge_lme_temporal": "judge_lme",
    "judge_lme_knowledge_update": "judge_lme",
    "judge_lme_preference": "judge_lme",
    "judge_lme_abstention": "judge_lme",
    # judge.prompt: authors (the authors' LongMemEval judge; also asks for yes or no).
    "judge_lme_authors_default": "judge_lme",
    "judge_lme_authors_temporal": "judge_lme",
    "judge_lme_authors_knowledge_update": "judge_lme",
    "judge_lme_authors_preference": "judge_lme",
    "judge_lme_authors_abstention": "judge_lme",
    # make doctor's probe of an endpoint (common.pipeline.doctor).
    "doctor_user": "doctor",
    # BEAM's official rubric judge (one call per rubric item) and its event-ordering YES/NO
    # alignment call (sent with the user template's id; the system template is listed as its part).
    "judge_beam_rubric": "judge_beam",
    "judge_beam_align_user": "judge_beam_align",
    "judge_beam_align_system": "judge_beam_align",
    # REALTALK's official GPT score (one call per answer; its prompt's JSON example names "score" only).
    "judge_realtalk_gpt_score": "judge_realtalk_gpt_score",
    # LoCoMo-Plus's official judge: one prompt per category, each ending with its JSON example.
    **{f"judge_locomo_plus_{c}": "judge_locomo_plus" for c in ("multi_hop", "single_hop", "temporal", "common_sense",
                                                                "adversarial", "cognitive", "default")},
    # The conversation prefix every one of them starts with: listed as their part (never sent as its own id).
    "judge_locomo_plus_conv_start": "judge_locomo_plus",
}
# A request whose prompt id names no kind (an outside system's, sent through the gateway as
# ``gateway.<system>``) but whose body says what it wants (a json_schema response format, tools):
# the reply is chosen from the body (``generic_reply``).
GENERIC_KIND = "generic"
CHAT_KINDS = frozenset(PROMPT_KINDS.values())
FAULTABLE_KINDS = CHAT_KINDS | {GENERIC_KIND}  # what a FaultPlan may fault
# Ids of prompts an outside memory system owns (inside its package, not in common/prompts/).
OUTSIDE_PROMPTS = frozenset({"mem0_extraction", "amem_analyze", "amem_evolve", "amem_keywords"})
UNKNOWN_KIND = "unknown"
EMBEDDINGS_KIND = "embeddings"


def kind_for_prompt_id(prompt_id: Optional[str]) -> str:
    """The prompt kind of a chat request's ``X-Prompt-Id`` value; ``UNKNOWN_KIND`` when the header
    is missing or names no known prompt."""
    pid = (prompt_id or "").strip()
    if pid not in PROMPT_KINDS and re.fullmatch(r"answer_[a-z0-9_]+_user", pid):
        return "answer"  # a system's own answer prompt (systems.protocol: native): a plain answer
    return PROMPT_KINDS.get(pid, UNKNOWN_KIND)


# --------------------------------------------------------------------------- generic fallback
# ``response_format.json_schema.name`` -> the reply (a JSON-able instance) built from the prompt
# text and the schema: systems whose structured calls need replies a synthesized minimal instance
# cannot give (e.g. ids that must point at something in the prompt) register them here.
SCHEMA_KINDS: dict[str, Callable[[str, dict[str, Any]], Any]] = {}
GATEWAY_PREFIX = "gateway."
# A plain-text request (no schema, no tools) whose prompt asks for a JSON shape the generic reply
# cannot guess: (a marker of that prompt, the reply built from the prompt text). SimpleMem below.
TEXT_KINDS: list[tuple[str, Callable[[str], Any]]] = []


def kind_for_request(prompt_id: Optional[str], body: dict[str, Any]) -> str:
    """The kind of a chat request: its prompt id's (``PROMPT_KINDS``), else ``GENERIC_KIND`` when the
    id is a gateway's or the body carries a json_schema or tools, else ``UNKNOWN_KIND`` (a 400)."""
    kind = kind_for_prompt_id(prompt_id)
    if kind != UNKNOWN_KIND:
        return kind
    if (prompt_id or "").startswith(GATEWAY_PREFIX) or _json_schema(body) is not None or body.get("tools"):
        return GENERIC_KIND
    return UNKNOWN_KIND


def _json_schema(body: dict[str, Any]) -> Optional[dict[str, Any]]:
    rf = body.get("response_format")
    if isinstance(rf, dict) and rf.get("type") == "json_schema" and isinstance(rf.get("json_schema"), dict):
        return rf["json_schema"]
    return None


def _snippet(text: str) -> str:
    """The text a synthesized string carries: the prompt's last non-empty line (what was said last)."""
    lines = [line.strip() for line in text.splitlines() if len(WORD_RE.findall(line)) >= 2
             and not line.strip().startswith("<")]
    return (lines[-1] if lines else "fake")[:200]


def synthesize(schema: Any, text: str, root: Optional[dict[str, Any]] = None) -> Any:
    """A minimal deterministic instance valid against the JSON schema ``schema`` (``$ref`` into
    ``$defs``/``definitions``, ``anyOf``/``oneOf``/``allOf``, ``enum``/``const``, the usual types):
    required properties only, arrays at their ``minItems``, strings from ``_snippet(text)``."""
    root = root if root is not None else (schema if isinstance(schema, dict) else {})
    if not isinstance(schema, dict):
        return None
    if "$ref" in schema:
        target: Any = root
        for part in str(schema["$ref"]).lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return synthesize(target, text, root)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            options = [o for o in schema[key] if not (isinstance(o, dict) and o.get("type") == "null")]
            return synthesize((options or schema[key])[0], text, root)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part if isinstance(part, dict) else {})
        return synthesize(merged, text, root)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: synthesize(props.get(name, {}), text, root) for name in schema.get("required") or []}
    if kind == "array":
        return [synthesize(schema.get("items") or {}, text, root) for _ in range(int(schema.get("minItems") or 0))]
    if kind == "string":
        line = _snippet(text).ljust(int(schema.get("minLength") or 0), ".")
        return line[: int(schema["maxLength"])] if "maxLength" in schema else line
    if kind in ("integer", "number"):
        low = float(schema.get("minimum", schema.get("exclusiveMinimum", 0)) or 0)
        number = low + (1 if "exclusiveMinimum" in schema and "minimum" not in schema else 0)
        return int(number) if kind == "integer" else number
    if kind == "boolean":
        return False
    return None


# ``gateway.<system>`` prompt id -> which offered function a reply calls when the request leaves the
# choice to the model (``tool_choice`` auto or required), given the offered names and the messages:
# an agent whose loop ends only when its model calls a terminal tool registers the course a model
# would take. None, or a name not offered, leaves the first offered function; ``NO_TOOL`` makes the
# reply plain text (an agent whose loop ends when its model stops calling tools). The arguments stay a
# minimal instance of the chosen function's parameters, unless ``TOOL_ARGS_BY_PROMPT`` builds them.
TOOL_CHOICE_BY_PROMPT: dict[str, Callable[[list[str], list[dict[str, Any]]], Optional[str]]] = {}
NO_TOOL = "\x00no tool"
# (``gateway.<system>`` prompt id, function name) -> its arguments, built from the messages: a function
# whose parameters are all optional (a minimal instance would be empty) gets the ones a model would
# fill in; the reply is still checked against the function's declared parameters.
TOOL_ARGS_BY_PROMPT: dict[tuple[str, str], Callable[[list[dict[str, Any]]], dict[str, Any]]] = {}


def _chosen_tool(tools: list[Any], choice: Any, prompt_id: Optional[str] = None,
                 messages: Optional[list[dict[str, Any]]] = None) -> Optional[dict[str, Any]]:
    """The function a reply calls: the one ``tool_choice`` names, else the one the prompt id's
    ``TOOL_CHOICE_BY_PROMPT`` entry picks, else the first (``none``: none)."""
    functions: list[dict[str, Any]] = [t["function"] for t in tools
                                       if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    if choice == "none" or not functions:
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((f for f in functions if f.get("name") == name), functions[0])
    pick = TOOL_CHOICE_BY_PROMPT.get((prompt_id or "").strip())
    name = pick([str(f.get("name")) for f in functions], messages or []) if pick else None
    if name == NO_TOOL and choice in (None, "auto"):
        return None
    return next((f for f in functions if f.get("name") == name), functions[0])


# ``gateway.<system>`` prompt id -> the arguments of the call to the chosen tool, built from the
# request's messages (a function of the tool's name and the messages; None: the model calls no
# tool), for a system whose tool calls must carry what its messages say (mem0's graph memory: the
# entities and relations of the text it sends); the arguments name only the tool's parameters.
TOOL_CALLS_BY_PROMPT: dict[str, Callable[[str, list[dict[str, Any]]], Optional[dict[str, Any]]]] = {}

# ``gateway.<system>`` prompt id -> the plain-text reply (built from the prompt text) to that
# system's requests that carry neither a json_schema nor tools: an outside system in its own
# environment that asks for JSON in its prompt alone registers here by its gateway name.
TEXT_KINDS_BY_PROMPT: dict[str, Callable[[str], str]] = {}


def generic_reply(body: dict[str, Any], text: str,
                  prompt_id: Optional[str] = None) -> tuple[str, list[dict[str, Any]]]:
    """(message content, tool calls) of a ``GENERIC_KIND`` request, from its body: a registered
    ``SCHEMA_KINDS`` reply, else a synthesized instance of its json_schema, else a tool call whose
    arguments are valid against the chosen tool's parameters, else the ``TEXT_KINDS_BY_PROMPT`` reply of
    its prompt id, else the ``TEXT_KINDS`` reply of a marker in its prompt, else plain text."""
    content, calls = _generic_reply(body, text, prompt_id)
    what = f"the request of {prompt_id or 'no prompt id'}"
    # ``text`` is the request's prompt (the server passes its messages' text): the fields its JSON
    # example shows are what the request asks for, as are its json_schema's and its messages'.
    check_reply(content, lambda: requested_fields(body) | prompt_fields(text), what)
    for call in calls:
        name = str(call["function"]["name"])
        check_reply(call["function"]["arguments"], partial(tool_fields, body, name), f"{what} (tool {name})")
    return content, calls


def _generic_reply(body: dict[str, Any], text: str, prompt_id: Optional[str]) -> tuple[str, list[dict[str, Any]]]:
    spec = _json_schema(body)
    if spec is not None:
        builder = SCHEMA_KINDS.get(str(spec.get("name") or ""))
        schema = spec.get("schema") or {}
        return json.dumps(builder(text, schema) if builder else synthesize(schema, text)), []
    tool = _chosen_tool(body.get("tools") or [], body.get("tool_choice"), prompt_id, body.get("messages"))
    build_args = TOOL_CALLS_BY_PROMPT.get((prompt_id or "").strip())
    if tool is not None and build_args is not None:
        built = build_args(str(tool.get("name")), body.get("messages") or [])
        if built is None:  # the model calls no tool: a plain reply
            return f"Noted: {_snippet(text)}", []
        call_id = "call_" + hashlib.sha256(f"{tool.get('name')}\x00{text}".encode("utf-8")).hexdigest()[:20]
        return "", [{"id": call_id, "type": "function",
                     "function": {"name": tool.get("name"), "arguments": json.dumps(built)}}]
    if tool is not None:
        make_args = TOOL_ARGS_BY_PROMPT.get(((prompt_id or "").strip(), str(tool.get("name"))))
        args = make_args(body.get("messages") or []) if make_args else \
            synthesize(tool.get("parameters") or {"type": "object"}, text)
        call_id = "call_" + hashlib.sha256(f"{tool.get('name')}\x00{text}".encode("utf-8")).hexdigest()[:20]
        return "", [{"id": call_id, "type": "function",
                     "function": {"name": tool.get("name"), "arguments": json.dumps(args)}}]
    text_reply = TEXT_KINDS_BY_PROMPT.get((prompt_id or "").strip())
    if text_reply is not None:
        return text_reply(text), []
    for marker, build in TEXT_KINDS:  # a plain-text request whose prompt names the JSON it wants
        if marker in text:
            return json.dumps(build(text)), []
    return f"Noted: {_snippet(text)}", []


# --------------------------------------------------------------------------- prompt parsing
TURN_RE = re.compile(r"^\[([^\]\n]+)\] ([^:\n]+?): ?(.*)$")
QUESTION_RE = re.compile(r"^Question:[ \t]*(.*)$", re.MULTILINE)
WORD_RE = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")

QUESTION_WORDS = frozenset(
    "what when who whom whose where why how which did does do is are was were would will "
    "could can should shall has have had may might".split()
)
STOPWORDS = QUESTION_WORDS | frozenset(
    """a an the and or but if then than so of to in on at by for with from about into over under
    after before between through during without within as it its it's this that these those there
    here i i'm i've i'd me my mine we us our you your yours he him his she her hers they them their
    theirs be been being am not no yes just also very really too some any all each every more most
    much many few lot lots one ones get got go going gone went make made like well oh hey hi hello
    thanks thank yeah okay ok sure what's that's don't didn't can't won't isn't aren't wasn't
    weren't doesn't i'll you're we're they're let's up out off again still even only ever never""".split()
)


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def prompt_text(messages: list[dict[str, Any]]) -> str:
    """All message contents, concatenated with newlines."""
    return "\n".join(_message_text(m) for m in messages if isinstance(m, dict))


def parse_turns(text: str) -> list[tuple[str, str, str]]:
    """``(dia_id, speaker, text)`` for every ``[id] speaker: text`` line, first occurrence of each id."""
    seen: set[str] = set()
    turns = []
    for line in text.splitlines():
        m = TURN_RE.match(line)
        if not m:
            continue
        dia_id, speaker, body = m.group(1), m.group(2).strip(), m.group(3).strip()
        if dia_id in seen:
            continue
        seen.add(dia_id)
        turns.append((dia_id, speaker, body))
    return turns


def parse_question(text: str) -> str:
    m = QUESTION_RE.search(text)
    return m.group(1).strip() if m else ""


def _words(text: str) -> list[str]:
    return [w.strip("'-") for w in WORD_RE.findall(text) if w.strip("'-")]


def content_words(text: str) -> list[str]:
    return [w for w in _words(text) if w.lower() not in STOPWORDS]


def _strip_possessive(word: str) -> str:
    return word[:-2] if word.lower().endswith("'s") else word


def approx_tokens(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------- scripted replies
def reply_partition(text: str) -> dict[str, Any]:
    turns = parse_turns(text)
    segments = []
    for n, start in enumerate(range(0, len(turns), 4), start=1):
        chunk = turns[start:start + 4]
        segments.append({
            "start_dia_id": chunk[0][0],
            "end_dia_id": chunk[-1][0],
            "theme": f"theme {n}",
            "theme_type": "topic",
            "theme_description": f"Turns {chunk[0][0]} to {chunk[-1][0]} ({len(chunk)} turns).",
            "boundary_reason": "session_start" if n == 1 else "semantic shift",
        })
    return {"segments": segments}


def _property_and_value(body: str) -> tuple[str, str]:
    words = content_words(body)
    long_idx = [i for i, w in enumerate(words) if len(w) > 4]
    if not long_idx:
        return "say", " ".join(w.lower() for w in words[:3]) or body[:40]
    # Longest qualifying word; the earliest one wins ties.
    best = max(long_idx, key=lambda i: (len(words[i]), -i))
    value_words = words[best + 1:best + 4] or words[max(0, best - 3):best] or [words[best]]
    return words[best].lower(), " ".join(value_words)


def reply_extract(text: str) -> dict[str, Any]:
    records = []
    for dia_id, speaker, body in parse_turns(text):
        prop, value = _property_and_value(body)
        records.append({
            "entity": speaker,
            "entity_type": "person",
            "property": prop,
            "value": value,
            "condition_property": "",
            "condition_value": "",
            "property_kind": "relation",
            "modality": "observed",
            "valid_time": "",
            "source": speaker,
            "evidence_dia_ids": [dia_id],
            "projection_kind": "direct",
            "confidence": 0.9,
        })
    return {"records": records}


def plan_entity_property(question: str) -> tuple[str, str]:
    """Entity = first capitalised non-question word; property = longest other content word."""
    entity = "user"
    for w in _words(question):
        base = _strip_possessive(w)
        if base[:1].isupper() and base.lower() not in QUESTION_WORDS and base != "I":
            entity = base
            break
    candidates = [
        _strip_possessive(w).lower() for w in content_words(question)
        if _strip_possessive(w) != entity
    ]
    if not candidates:
        return entity, "value"
    prop = max(enumerate(candidates), key=lambda iw: (len(iw[1]), -iw[0]))[1]
    return entity, prop


POSSESSIVE_RE = re.compile(r"\b([A-Z][a-z]+)'s ([a-z]+)\b")
EPISODE_ID_RE = re.compile(r"^### Episode (\S+) \|", re.MULTILINE)


def reply_plan(text: str) -> dict[str, Any]:
    question = parse_question(text)
    entity, prop = plan_entity_property(question)
    low = question.lower()
    aggregation = "how many" in low or "what are" in low
    bridged = POSSESSIVE_RE.search(question)
    if bridged and not aggregation:
        return _bridged_plan(question, bridged.group(1), bridged.group(2))
    return {
        "answer_target": {"type": "value", "description": f"The {prop} asked about for {entity}."},
        "reasoning_type": "aggregation" if aggregation else "direct",
        "retrieval_scope": "all_matching" if aggregation else "point",
        "required_properties": [{
            "entity": entity,
            "entity_type": "person",
            "broad_property": prop,
            "property_text": prop,
            "value": "",
            "role": "answer_property",
        }],
        "hops": [{
            "hop_id": "h1",
            "purpose": f"Find the {prop} of {entity}.",
            "anchor": {
                "entity": entity,
                "entity_type": "person",
                "property": prop,
                "value": "",
                "condition_property": "",
                "condition_value": "",
            },
            "depends_on": [],
            "bridge_request": "",
        }],
    }


def _bridged_plan(question: str, owner: str, relation: str) -> dict[str, Any]:
    """"Where is Omar's brother visiting from?": h1 finds who Omar's brother is (a declared
    bridge), h2 searches that person for the asked property."""
    words = [_strip_possessive(w).lower() for w in content_words(question)]
    rest = [w for w in words if w not in (owner.lower(), relation)] or ["value"]
    prop = max(enumerate(rest), key=lambda iw: (len(iw[1]), -iw[0]))[1]
    anchor = {"entity_type": "person", "value": "", "condition_property": "", "condition_value": ""}
    return {
        "answer_target": {"type": "value", "description": f"The {prop} of {owner}'s {relation}."},
        "reasoning_type": "multi_hop",
        "retrieval_scope": "point",
        "required_properties": [{"entity": owner, "entity_type": "person", "broad_property": relation,
                                 "property_text": relation, "value": "", "role": "relation"}],
        "hops": [
            {"hop_id": "h1", "purpose": f"Identify {owner}'s {relation}.",
             "anchor": {**anchor, "entity": owner, "property": relation},
             "depends_on": [], "bridge_request": f"the name of {owner}'s {relation}"},
            {"hop_id": "h2", "purpose": f"Find the {prop} of that person.",
             "anchor": {**anchor, "entity": "$h1.bridge", "property": prop},
             "depends_on": ["h1"], "bridge_request": ""},
        ],
    }


def reply_bridge(text: str) -> dict[str, Any]:
    """The first capitalised word of the context's first turn, from its first episode."""
    ids = EPISODE_ID_RE.findall(text)
    turns = parse_turns(text)
    names = [w for w in _words(turns[0][2]) if w[:1].isupper() and w.lower() not in STOPWORDS] if turns else []
    return {"bridge": names[0] if names else "", "supporting_episode_ids": ids[:1] if names else []}


CANDIDATE_PLAN_RE = re.compile(r"^Candidate plan:\n", re.MULTILINE)
LIMIT_RE = re.compile(r"^Select up to (\d+) episodes", re.MULTILINE)
DRAFT_RE = re.compile(r"^Draft answer: (.*)$", re.MULTILINE)


def reply_plan_audit(text: str) -> dict[str, Any]:
    """The candidate plan back, corrected in one visible way: a "how often" question planned as a
    point lookup becomes an all_matching aggregation (the audit checklist's frequency rule)."""
    m = CANDIDATE_PLAN_RE.search(text)
    plan = json.loads(text[m.end():]) if m else reply_plan(text)
    if "how often" in parse_question(text).lower() and plan.get("retrieval_scope") == "point":
        plan = {**plan, "retrieval_scope": "all_matching", "reasoning_type": "aggregation"}
    return plan


def reply_rerank(text: str) -> dict[str, Any]:
    """Every other candidate episode (the 1st, 3rd, ...), at most the limit the prompt states."""
    ids = EPISODE_ID_RE.findall(text)
    m = LIMIT_RE.search(text)
    chosen = ids[::2][: int(m.group(1)) if m else len(ids)]
    return {"evidence_slots": [{"slot_id": "s1", "fact": "the asked fact", "episode_ids": chosen[:1]}],
            "selected_episode_ids": chosen, "reason": "scripted"}


def reply_verify(text: str) -> dict[str, Any]:
    """The draft kept when it is Unknown, else rewritten visibly (so a test sees which one won)."""
    m = DRAFT_RE.search(text)
    draft = m.group(1).strip() if m else ""
    if not draft or draft == "Unknown":
        return {"verdict": "supported", "answer": draft or "Unknown", "evidence_episode_ids": []}
    return {"verdict": "rewritten", "answer": f"{draft} (checked)", "evidence_episode_ids": []}


LEDGER_EPISODE_RE = re.compile(r"^(?:### Episode|EPISODE) (\S+) \|", re.MULTILINE)
USER_TURN_RE = re.compile(r"^USER TURN (\S+): (.*)$")
AMOUNT_RE = re.compile(r"(\$?)(\d+(?:\.\d+)?)")
MONEY_RE = re.compile(r"(\$)(\d+(?:\.\d+)?)")
CANDIDATE_RE = re.compile(r"^(\w+) \| episode (\S+) \| (.*?) \| quantity: (.*?) \| quote:", re.MULTILINE)


def _ledger_episodes(text: str) -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The episodes of a ledger prompt: (id, [(dia id, speaker, text)]) from either rendering."""
    out: list[tuple[str, list[tuple[str, str, str]]]] = []
    for line in text.splitlines():
        m = LEDGER_EPISODE_RE.match(line)
        if m:
            out.append((m.group(1), []))
            continue
        u = USER_TURN_RE.match(line)
        t = TURN_RE.match(line)
        if out and u:
            out[-1][1].append((u.group(1), "user", u.group(2)))
        elif out and t:
            out[-1][1].append((t.group(1), t.group(2), t.group(3)))
    return out


def reply_count(text: str) -> dict[str, Any]:
    """A scan: every episode accounted for; one item per user turn stating a number (the number as
    the quantity, "$" as the unit when it is an amount of money, the turn's first sentence quoted)."""
    episodes, items = [], []
    for eid, turns in _ledger_episodes(text):
        found = False
        for _, speaker, said in turns:
            m = MONEY_RE.search(said) or AMOUNT_RE.search(said)
            if "assistant" in speaker.lower() or not m:
                continue
            words = [w for w in content_words(said) if not w[0].isdigit()]
            items.append({"episode_id": eid, "item": " ".join(words[-3:]) or "item", "quantity": m.group(2),
                          "unit": "$" if m.group(1) else "", "quote": said.split(". ")[0]})
            found = True
        episodes.append({"episode_id": eid, "has_instances": found})
    return {"episodes": episodes, "items": items}


def reply_count_merge(text: str) -> dict[str, Any]:
    """Every candidate in scope; one whose name and quantity repeat an earlier one's is its duplicate.
    A confidence goes with the pointer only when the prompt asks for ``dedup_confidence``."""
    confidence = "items[].dedup_confidence" in shown_fields(text)
    rows: list[dict[str, Any]] = []
    first: dict[tuple[str, str], str] = {}
    for cid, _eid, item, quantity in CANDIDATE_RE.findall(text):
        dup = first.setdefault((item.lower(), quantity.strip()), cid)
        rows.append({"id": cid, "in_scope": True, "scope_reason": "scripted", "duplicate_of": dup if dup != cid else "",
                     **({"dedup_confidence": "high" if dup != cid else ""} if confidence else {})})
    return {"items": rows}


def reply_temporal(text: str) -> dict[str, Any]:
    """One completed fact per user turn sharing a content word with the question (quoted whole,
    undated: the harness resolves the date)."""
    asked = {w.lower() for w in content_words(parse_question(text))}
    facts = []
    for eid, turns in _ledger_episodes(text):
        for _, _speaker, said in turns:
            shared = [w for w in content_words(said) if w.lower() in asked]
            if shared:
                facts.append({"event": said, "status": "completed", "event_date": "", "date_basis": "scripted",
                              "episode_id": eid, "quote": said})
    return {"facts": facts}


def reply_count_reference(text: str) -> dict[str, Any]:
    """The first user turn sharing a content word with the question, quoted whole, undated."""
    asked = {w.lower() for w in content_words(parse_question(text))}
    for eid, turns in _ledger_episodes(text):
        for _, speaker, said in turns:
            if "assistant" not in speaker.lower() and any(w.lower() in asked for w in content_words(said)):
                return {"event": said, "episode_id": eid, "quote": said, "event_date": ""}
    return {"event": "", "episode_id": "", "quote": "", "event_date": ""}


def reply_temporal_answer(text: str) -> dict[str, Any]:
    """The ledger's first dated line as the answer, citing the first user turn sharing a content
    word with the question; Unknown when there is none."""
    facts = reply_temporal(text)["facts"]
    line = next((x[2:] for x in text.splitlines() if x.startswith("- ") and ": " in x), "")
    if not facts or not line:
        return {"answer": "Unknown", "evidence": [], "reason": "scripted"}
    first = facts[0]
    return {"answer": line.split(" (")[0], "evidence": [{"episode_id": first["episode_id"], "quote": first["quote"]}],
            "reason": "scripted"}


def reply_age_chain(text: str) -> dict[str, Any]:
    """No cited age (the harness then falls back)."""
    return {"target_age": None, "anchor_age": None, "offset": None}


def reply_order(text: str) -> dict[str, Any]:
    """One undated row per turn sharing a content word with the question: its first five words as the
    value, the turn quoted whole (the harness dates it from the episode)."""
    asked = {w.lower() for w in content_words(parse_question(text))}
    rows = [{"value": " ".join(said.split()[:5]), "episode_id": eid, "quote": said, "event_date": ""}
            for eid, turns in _ledger_episodes(text) for _, _speaker, said in turns
            if any(w.lower() in asked for w in content_words(said))]
    return {"rows": rows}


def reply_answer(text: str) -> str:
    turns = parse_turns(text)
    if not turns:
        return "Unknown"
    words = turns[0][2].split()[:6]
    return " ".join(words) if words else "Unknown"


def reply_mem0_extraction(text: str) -> dict:
    """mem0's extraction reply: one memory per message of the speaker whose memory it is (role
    ``user`` in the "## New Messages" section), attributed to the user, as its prompt asks."""
    section = text.rsplit("## New Messages", 1)[-1].split("\n## ", 1)[0]  # the last: the system prompt names it too
    memories: list[dict] = []
    for line in section.splitlines():
        if line.startswith("user: ") and ": " in line[6:]:
            speaker, said = line[6:].split(": ", 1)
            memories.append({"id": str(len(memories)), "text": f"{speaker} said: {said.strip()}",
                             "attributed_to": "user", "linked_memory_ids": []})
    return {"memory": memories}


AMEM_NEIGHBOR_RE = re.compile(r"^memory_id:(\S+)\t", re.MULTILINE)


def reply_amem_analyze(text: str) -> dict:
    """A-MEM's note analysis: the note's longest content words as keywords, its first words as
    the context, fixed tags; the note is the text after the prompt's last "Content for analysis:"."""
    note = text.rsplit("Content for analysis:", 1)[-1].strip()
    words = [w.lower() for w in content_words(note.split(" : ", 1)[-1])]
    keywords = sorted(dict.fromkeys(words), key=lambda w: (-len(w), w))[:3]
    return {"keywords": keywords, "context": " ".join(note.split()[:8]), "tags": ["conversation", "personal"]}


def reply_amem_evolve(text: str) -> dict:
    """A-MEM's evolution decision (all six keys its strict schema requires): link the new note
    to its nearest neighbour (the first ``memory_id:`` line) and keep the neighbours unchanged."""
    ids = AMEM_NEIGHBOR_RE.findall(text)
    return {"should_evolve": bool(ids), "actions": ["strengthen"] if ids else [],
            "suggested_connections": ids[:1], "tags_to_update": ["conversation", "linked"],
            "new_context_neighborhood": [], "new_tags_neighborhood": []}


def reply_amem_keywords(text: str) -> dict:
    """A-MEM's search keywords: the question's content words, comma-separated, as the prompt's
    example shows (one string field); the question is the prompt's "Question:" line."""
    question = text.rsplit("Question:", 1)[-1].split("\n", 1)[0]
    return {"keywords": ", ".join(dict.fromkeys(w.lower() for w in content_words(question)))}


def judge_label(text: str) -> str:
    return "CORRECT" if hashlib.sha256(text.encode("utf-8")).digest()[0] % 2 == 0 else "WRONG"


BEAM_SNIPPETS_RE = re.compile(r"First snippet: (.*?) \n\n\s*Second snippet: (.*?)\n\s*$", re.DOTALL)
BEAM_SCORES = (1.0, 0.5, 0.0)


def reply_judge_beam(text: str) -> dict:
    """A rubric verdict: 1.0, 0.5 or 0.0 chosen by a hash of the prompt (so some items get 0.5)."""
    score = BEAM_SCORES[hashlib.sha256(text.encode("utf-8")).digest()[0] % 3]
    return {"score": score, "reason": f"scripted verdict {score}"}


REALTALK_SCORES = (1, 0.5, 0, 0.8)


def reply_judge_realtalk_gpt_score(text: str) -> dict:
    """A GPT score: 1, 0.5, 0 or 0.8 chosen by a hash of the prompt (the only field its example names)."""
    return {"score": REALTALK_SCORES[hashlib.sha256(text.encode("utf-8")).digest()[0] % 4]}


def reply_judge_beam_align(text: str) -> str:
    """YES when the two snippets share a content word (case-insensitive), else NO."""
    m = BEAM_SNIPPETS_RE.search(text)
    if not m:
        return "NO"
    first, second = ({w.lower() for w in content_words(part)} for part in m.groups())
    return "YES" if first & second else "NO"


LOCOMO_PLUS_LABELS_RE = re.compile(r'\{"label": ("[a-z]+"(?:\|"[a-z]+")*), "reason": "[^"]*"\}\s*$')


def reply_judge_locomo_plus(text: str) -> dict:
    """One of the labels the prompt's own JSON example offers ("correct"|"partial"|"wrong", or
    "correct"|"wrong"), chosen by a hash of the prompt, and a reason: the two fields it asks for."""
    m = LOCOMO_PLUS_LABELS_RE.search(text)
    labels = [s.strip('"') for s in m.group(1).split("|")] if m else ["wrong"]
    label = labels[hashlib.sha256(text.encode("utf-8")).digest()[0] % len(labels)]
    return {"label": label, "reason": f"scripted {label}"}


def scripted_content(kind: str, text: str) -> str:
    """The normal (unfaulted) message content for a recognised prompt kind; ``ContractError`` when it
    would carry a field the prompt text does not ask for (the JSON it shows, or the schema it writes
    out, as Hindsight's LLM wrapper writes its answer schema into the system message)."""
    content = _scripted_content(kind, text)
    check_reply(content, lambda: prompt_fields(text), f"prompt kind {kind!r}")
    return content


def _scripted_content(kind: str, text: str) -> str:
    if kind in ("partition", "partition_repair"):
        return json.dumps(reply_partition(text))
    if kind in ("extract", "extract_repair"):
        return json.dumps(reply_extract(text))
    if kind in ("plan", "plan_repair"):
        return json.dumps(reply_plan(text))
    if kind in ("bridge", "bridge_repair"):
        return json.dumps(reply_bridge(text))
    if kind == "answer":
        return reply_answer(text)
    if kind == "plan_audit":
        return json.dumps(reply_plan_audit(text))
    if kind == "answer_rerank":
        return json.dumps(reply_rerank(text))
    if kind == "answer_verify":
        return json.dumps(reply_verify(text))
    if kind == "answer_hindsight":  # the answer call's reply as the schema's answer, with its reasoning
        return json.dumps({"answer": reply_answer(text), "reasoning": "scripted"})
    if kind == "answer_draft":  # the answer call's reply as the JSON draft's answer field
        return json.dumps({"answer": reply_answer(text), "evidence_episode_ids": [], "reasoning": "scripted"})
    if kind == "answer_count":
        return json.dumps(reply_count(text))
    if kind == "answer_count_merge":
        return json.dumps(reply_count_merge(text))
    if kind == "answer_temporal":
        return json.dumps(reply_temporal(text))
    if kind == "answer_order":
        return json.dumps(reply_order(text))
    if kind == "answer_count_reference":
        return json.dumps(reply_count_reference(text))
    if kind in ("answer_temporal_answer", "answer_temporal_repair"):
        return json.dumps(reply_temporal_answer(text))
    if kind == "answer_age_chain":
        return json.dumps(reply_age_chain(text))
    if kind == "mem0_extraction":
        return json.dumps(reply_mem0_extraction(text))
    if kind == "amem_analyze":
        return json.dumps(reply_amem_analyze(text))
    if kind == "amem_evolve":
        return json.dumps(reply_amem_evolve(text))
    if kind == "amem_keywords":
        return json.dumps(reply_amem_keywords(text))
    if kind == "judge_locomo":
        return json.dumps({"label": judge_label(text)})
    if kind == "judge_lme":
        return "Yes." if judge_label(text) == "CORRECT" else "No."
    if kind == "judge_beam":
        return json.dumps(reply_judge_beam(text))
    if kind == "judge_beam_align":
        return reply_judge_beam_align(text)
    if kind == "judge_realtalk_gpt_score":
        return json.dumps(reply_judge_realtalk_gpt_score(text))
    if kind == "judge_locomo_plus":
        return json.dumps(reply_judge_locomo_plus(text))
    if kind == "doctor":
        return json.dumps({"word": "florp", "sentence": "The florp hummed."})
    raise ValueError(f"no scripted reply for kind {kind!r}")


def embed_text(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """Deterministic unit vector from a hash of ``text``."""
    raw = b""
    counter = 0
    while len(raw) < 4 * dim:
        raw += hashlib.sha256(f"{counter}\x00{text}".encode("utf-8")).digest()
        counter += 1
    vals = [(v / 0xFFFFFFFF) * 2.0 - 1.0 for v in struct.unpack(f"<{dim}I", raw[:4 * dim])]
    norm = math.sqrt(sum(v * v for v in vals)) or 1.0
    return [v / norm for v in vals]


# --------------------------------------------------------------------------- graphiti (schema-named replies)
# Graphiti (graphiti-core 0.31.2, common.systems.graphiti) sends its own prompts through an
# OpenAI-compatible endpoint, without an X-Prompt-Id header: its structured calls are told apart
# by ``response_format.json_schema.name`` (the pydantic model's name), its reranker's calls by
# asking for logprobs. Each reply reads only the prompt text. Its schemas are registered in
# ``SCHEMA_KINDS`` too, so the same replies serve Graphiti through the gateway (``GENERIC_KIND``).
GRAPHITI_LINE_RE = re.compile(r"^([A-Z][\w.'-]*(?: [A-Z][\w.'-]*){0,3}): (.+)$", re.MULTILINE)
GRAPHITI_RERANK_KIND = "graphiti_rerank"


def _graphiti_section(text: str, tag: str) -> str:
    """The text between the last ``<tag>`` and the ``</tag>`` after it."""
    body = text.rsplit(f"<{tag}>", 1)[-1]
    return body.split(f"</{tag}>", 1)[0]


def _graphiti_lines(text: str, tag: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2).strip()) for m in GRAPHITI_LINE_RE.finditer(_graphiti_section(text, tag))]


def reply_graphiti_entities(text: str) -> dict:
    """Entity extraction: the speakers of the current message's ``Speaker: text`` lines."""
    names = list(dict.fromkeys(name for name, _ in _graphiti_lines(text, "CURRENT MESSAGE")))
    return {"extracted_entities": [{"name": n, "entity_type_id": 0, "episode_indices": [0]} for n in names]}


def reply_graphiti_edges(text: str) -> dict:
    """Fact extraction: one fact per line of the current message, from its speaker to the next
    speaker of the episode (or to itself when it speaks alone), the line's words as the fact."""
    lines = _graphiti_lines(text, "CURRENT_MESSAGE")
    names = list(dict.fromkeys(n for n, _ in lines))
    when = _graphiti_section(text, "REFERENCE_TIME").split("#", 1)[0].strip() or None  # dated at the episode's time
    edges = []
    for name, said in lines:
        other = next((n for n in names if n != name), name)
        edges.append({"source_entity_name": name, "target_entity_name": other, "relation_type": "SAID_TO",
                      "fact": f"{name} said: {said}", "valid_at": when, "invalid_at": None, "episode_indices": [0]})
    return {"edges": edges}


def reply_graphiti_summaries(text: str) -> dict:
    """Entity summaries: each entity of the prompt that speaks in it, summarised by its first line."""
    messages = _graphiti_section(text, "MESSAGES").replace("\\n", "\n").replace('"', "\n")
    said = dict(reversed(GRAPHITI_LINE_RE.findall(messages)))
    names = re.findall(r'"name": "([^"]+)"', _graphiti_section(text, "ENTITIES"))
    return {"summaries": [{"name": n, "summary": f"{n} talked about: {said[n][:120]}"} for n in names if n in said]}


GRAPHITI_SCHEMAS: dict[str, Any] = {
    "ExtractedEntities": reply_graphiti_entities,
    "NodeResolutions": lambda text: {"entity_resolutions": []},  # no duplicates beyond exact names
    "ExtractedEdges": reply_graphiti_edges,
    "EdgeDuplicate": lambda text: {"duplicate_facts": [], "contradicted_facts": []},
    "EdgeTimestamps": lambda text: {"valid_at": None, "invalid_at": None},
    "SummarizedEntities": reply_graphiti_summaries,
}


def _text_only(reply: Any) -> Callable[[str, dict[str, Any]], Any]:
    """A Graphiti reply (prompt text -> instance) in the gateway registry's form (text, schema)."""
    return lambda text, schema: reply(text)


SCHEMA_KINDS.update({name: _text_only(reply) for name, reply in GRAPHITI_SCHEMAS.items()})


def schema_kind(body: dict[str, Any]) -> Optional[str]:
    """The kind of a chat request without an X-Prompt-Id header: its JSON schema's name when
    ``GRAPHITI_SCHEMAS`` has it, ``GRAPHITI_RERANK_KIND`` for a logprobs request, else None."""
    fmt = body.get("response_format") or {}
    name = (fmt.get("json_schema") or {}).get("name") if isinstance(fmt, dict) else None
    if name in GRAPHITI_SCHEMAS:
        return f"schema:{name}"
    if body.get("logprobs"):
        return GRAPHITI_RERANK_KIND
    return None


def rerank_logprobs(text: str) -> tuple[str, float]:
    """The reranker's one-token verdict and its logprob: "True" for a passage sharing a content
    word with the query, else "False"; the logprob says how many words they share."""
    passage = {w.lower() for w in content_words(_graphiti_section(text, "PASSAGE"))}
    query = {w.lower() for w in content_words(_graphiti_section(text, "QUERY"))}
    shared = len(passage & query)
    return ("True", math.log(1 - 0.5 / (1 + shared))) if shared else ("False", math.log(0.9))


def schema_content(kind: str, body: dict[str, Any], text: str) -> str:
    """The reply of a ``schema_kind`` kind; ``ContractError`` when it carries a field the request's
    schema does not declare."""
    if kind == GRAPHITI_RERANK_KIND:
        return rerank_logprobs(text)[0]
    content = json.dumps(GRAPHITI_SCHEMAS[kind.split(":", 1)[1]](text))
    check_reply(content, lambda: requested_fields(body), f"schema {kind.split(':', 1)[1]}")
    return content


SCHEMA_CHAT_KINDS = frozenset({f"schema:{n}" for n in GRAPHITI_SCHEMAS} | {GRAPHITI_RERANK_KIND})


# --------------------------------------------------------------------------- SimpleMem (plain-text JSON)
# SimpleMem (simplemem 0.1.0, common.systems.simplemem) asks in plain text for a JSON array of
# memory entries per window of dialogues ("[timestamp] Speaker: text" lines under "[Current Window
# Dialogues]"): one entry per line, its words as the restatement. Its planning and reflection
# prompts get the generic text (SimpleMem then falls back to searching the question itself).
SIMPLEMEM_WINDOW = "[Current Window Dialogues]"


def reply_simplemem_entries(text: str) -> list[dict[str, Any]]:
    window = text.split(SIMPLEMEM_WINDOW, 1)[-1].split("[Requirements]", 1)[0]
    out = []
    for line in window.splitlines():
        m = TURN_RE.match(line.strip())
        if m:
            when, speaker, said = m.group(1), m.group(2).strip(), m.group(3).strip()
            out.append({"lossless_restatement": f"{speaker} said on {when}: {said}",
                        "keywords": WORD_RE.findall(said)[:5], "timestamp": None, "location": None,
                        "persons": [speaker], "entities": [], "topic": "conversation"})
    return out


TEXT_KINDS.append((SIMPLEMEM_WINDOW, reply_simplemem_entries))
# Its answer generator (systems.protocol: native) shows the JSON it wants: reasoning and answer.
SIMPLEMEM_ANSWER = "Now answer the question. Return ONLY the JSON, no other text."


def reply_simplemem_answer(text: str) -> dict[str, str]:
    """The first context's first words as the answer (the context's "Content:" lines)."""
    context = text.split("Relevant Context:", 1)[-1]
    first = next((line.split(":", 1)[1] for line in context.splitlines() if line.startswith("Content:")), "")
    words = first.split()[:6]
    return {"reasoning": "scripted from the first context", "answer": " ".join(words) if words else "Unknown"}


TEXT_KINDS.append((SIMPLEMEM_ANSWER, reply_simplemem_answer))


# --------------------------------------------------------------------------- MemOS (a prompt-only JSON reply)
# MemOS's memory reader (systems/memos, SIMPLE_STRUCT_MEM_READER_PROMPT) asks in its prompt alone for
# its JSON; the prompt's own example names the fields (``memory list`` with ``key``, ``memory_type``,
# ``value``, ``tags``; ``summary``), and the reply is built from those names only: a field the example
# does not show is never sent. The conversation comes as ``<role>: [<chat_time>]: <speaker>: <text>``
# lines (the struct reader, and the flat store with its session dates), or ``<role>:<speaker>: <text>``
# (no date). One memory per line: its words, stated on the line's date as a model reading the
# prompt's instruction to resolve times would state it.
MEMOS_LINE_RE = re.compile(r"^(?:user|assistant):[ \t]*(?:\[([^\]\n]+)\]:[ \t]*)?([^:\n]+?: .+)$", re.MULTILINE)
MEMOS_LIST = "memory list"


def memos_reader_reply(text: str) -> str:
    shown = shown_fields(text)
    lines = [(m.group(1), m.group(2).strip()) for m in MEMOS_LINE_RE.finditer(text)]
    item_fields = {f[len(MEMOS_LIST) + 3:] for f in shown if f.startswith(MEMOS_LIST + "[].")}
    values = {"key": lambda when, line: line.split(":", 1)[0],
              "memory_type": lambda when, line: "LongTermMemory",
              "value": lambda when, line: f"On {when}, {line}" if when else line,
              "tags": lambda when, line: ["conversation"]}
    reply: dict[str, Any] = {}
    if MEMOS_LIST in shown:
        reply[MEMOS_LIST] = [{k: build(when, line) for k, build in values.items() if k in item_fields}
                             for when, line in lines]
    if "summary" in shown:
        reply["summary"] = " ".join(line for _, line in lines)[:200]
    return json.dumps(reply)


TEXT_KINDS_BY_PROMPT[GATEWAY_PREFIX + "memos"] = memos_reader_reply


# --------------------------------------------------------------------------- Hindsight (a schema in the prompt)
# Hindsight (systems/hindsight) asks for JSON with response_format json_object and its JSON schema
# written into the prompt ("You must respond with valid JSON matching this schema: {...}"). Its fact
# extraction's schema has a ``facts`` array; the chunk is a JSON list of turns (``speaker``,
# ``text``). One fact per turn: a minimal instance of the fact's schema (its required fields), with
# the turn's text as ``what`` and its speaker as ``who`` when the schema declares them. Any other
# prompt of Hindsight's gets a minimal instance of its schema; one without a schema, plain text.
def _turn_list(text: str) -> list[dict[str, Any]]:
    decoder = json.JSONDecoder()
    at = text.rfind('[{"speaker"')
    try:
        turns, _ = decoder.raw_decode(text, at) if at >= 0 else ([], 0)
    except ValueError:
        return []
    return [t for t in turns if isinstance(t, dict) and isinstance(t.get("text"), str)]


def hindsight_reply(text: str) -> str:
    schemas = shown_schemas(text)
    if not schemas:
        return f"Noted: {_snippet(text)}"
    schema = schemas[-1]
    facts = (schema.get("properties") or {}).get("facts")
    if not isinstance(facts, dict):
        return json.dumps(synthesize(schema, text))
    item: Any = facts.get("items") or {}
    if "$ref" in item:  # "#/$defs/ExtractedFact"
        target: Any = schema
        for part in str(item["$ref"]).lstrip("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        item = target
    declared = item.get("properties") or {}
    out = []
    for turn in _turn_list(text):
        fact = synthesize(item, turn["text"], schema)  # its strings: the turn's words
        if isinstance(fact, dict):
            fact.update({k: v for k, v in (("what", turn["text"]), ("who", str(turn.get("speaker", ""))))
                         if k in declared})
            out.append(fact)
    return json.dumps({"facts": out})


TEXT_KINDS_BY_PROMPT[GATEWAY_PREFIX + "hindsight"] = hindsight_reply


def letta_agent_tool(names: list[str], messages: list[dict[str, Any]]) -> Optional[str]:
    """letta-leaderboard's LoCoMo agent (systems/letta): its rules force a file search first; when
    the choice is the model's, this one answers (``answer_question``, the loop's terminal tool)."""
    return "answer_question" if "answer_question" in names else None


TOOL_CHOICE_BY_PROMPT[GATEWAY_PREFIX + "letta"] = letta_agent_tool


# --------------------------------------------------------------------------- LangMem's agents (native)
# LangMem under the native protocol (common.systems.langmem_agent): one ReAct agent per speaker, offered
# manage_memory and search_memory with the choice left to the model. A model that is handed a
# message ("<date> | <speaker>: <text>") stores it; handed a question, it searches; once a tool has
# answered, it replies in text, which ends the agent's loop.
LANGMEM_MESSAGE_RE = re.compile(r"^.* \| [^:\n]+: ", re.DOTALL)


def _last(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return messages[-1] if messages and isinstance(messages[-1], dict) else {}


def langmem_agent_tool(names: list[str], messages: list[dict[str, Any]]) -> Optional[str]:
    if "manage_memory" not in names:
        return None  # the common protocol's store manager (trustcall): its own tool
    last = _last(messages)
    if last.get("role") == "tool":
        return NO_TOOL
    return "manage_memory" if LANGMEM_MESSAGE_RE.match(_message_text(last)) else "search_memory"


def langmem_memory_args(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """manage_memory's arguments: the message handed to the agent, as a new memory."""
    return {"content": _message_text(_last(messages))}


TOOL_CHOICE_BY_PROMPT[GATEWAY_PREFIX + "langmem"] = langmem_agent_tool
TOOL_ARGS_BY_PROMPT[(GATEWAY_PREFIX + "langmem", "manage_memory")] = langmem_memory_args


# The outside systems whose replies live in modules of their own register themselves here.
from tests.fake_openai import mem0_graph_replies  # noqa: E402,F401  (registers gateway.mem0_graph)
