"""Stage 05: the requirement-aware planner (paper eq. 4, Appendix E.2).

The planner sees the question, its date, and the memory's observed property vocabulary: every
property, alphabetical, as the authors' code injects it; the least frequent are left out only
above a token budget (``plan.vocabulary_tokens``), and the plan row counts them.
Replies are normalized and validated; a bad reply gets one repair call, then a recorded
deterministic fallback plan built from the question's own words. ``plan.validation: code`` adds
the authors' normalization and validation rules; ``plan.audit`` sends a valid plan to one audit
call (role ``plan_audit``) whose reply replaces it only if it is valid too.

Two switches give the authors' versions of the last two steps beside the harness's own:
``plan.repair: code`` sends their repair request (the error, the invalid plan, a reminder list
mirroring the planner rules, the vocabulary and, where the planner has one, the granularity
block; ``code_rules.plan_code_repair_*``) instead of the harness's short one, and
``plan.fallback: code`` builds their last-resort plan (``code_fallback_plan``: the first
capitalized word that is not a question word, else ``user``; a property from keyword rules,
overridden by a short required property of the failed reply; one point hop).
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any, Optional

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient, parse_json_object
from common.core.repair import complete_with_repair, fallback_error
from common.core.schema import Anchor, Bridge, Hop, Plan, PlanRow, Question, to_dict
from common.core.text import ENTITY_TYPES, content_tokens, normalize_condition, normprop
from common.core.tokens import count_tokens
from common.method.bridge import PLACEHOLDER
from common.method.extract import fill_granular

PROMPT_IDS = ("plan_system", "plan_user", "plan_repair_system", "plan_repair_user")
CODE_REPAIR_IDS = ("code_rules.plan_code_repair_system", "code_rules.plan_code_repair_user")
REPAIRS = ("harness", "code")
FALLBACKS = ("harness", "code")
AUDIT_PROMPT_IDS = ("code_rules.plan_audit_system", "code_rules.plan_audit_user")
VALIDATIONS = ("schema", "code")
TARGET_TYPES = ("time", "value", "entity", "location", "count", "list", "boolean", "likelihood", "explanation")
REASONING_TYPES = ("direct", "aggregation", "comparison", "temporal", "causal", "counterfactual",
                   "commonsense_inference", "multi_hop", "unanswerable")
SCOPES = ("point", "all_matching")
ROLES = ("entity", "relation", "answer_property", "time", "constraint")
_HOP_ID = re.compile(r"^h\d+$")


class PlanError(ValueError):
    pass


def vocabulary_text(vocabulary: dict[str, int], limit: Optional[int] = None,
                    max_tokens: Optional[int] = None) -> tuple[str, int]:
    """Every observed property, alphabetical and comma-separated, as the authors inject it.

    Only when the list would exceed ``limit`` properties or ``max_tokens`` o200k tokens are the
    least frequent properties left out (ties: alphabetically last first); returns the text and
    the number of properties shown.
    """
    # Every question of a memory shares its vocabulary: the text (and its token counts, which were
    # about a tenth of stage 05's time when made per question) is made once per distinct vocabulary.
    return _vocabulary_text(tuple(sorted(vocabulary.items())), limit, max_tokens)


@lru_cache(maxsize=256)
def _vocabulary_text(items: tuple[tuple[str, int], ...], limit: Optional[int],
                     max_tokens: Optional[int]) -> tuple[str, int]:
    by_freq = [k for k, _ in sorted(items, key=lambda kv: (-kv[1], kv[0]))]
    if limit is not None:
        by_freq = by_freq[:limit]

    def text(n: int) -> str:
        return ", ".join(sorted(by_freq[:n]))

    n = len(by_freq)
    if max_tokens is not None and n and count_tokens(text(n)) > max_tokens:
        lo, hi = 0, n  # the longest prefix (by frequency) whose text fits: tokens grow with n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count_tokens(text(mid)) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        n = lo
    if n == 0:
        return "(no properties indexed yet)", 0
    return text(n), n


def plan_messages(question: Question, vocab_text: str, granularity: str,
                  prompt_set: str = prompts.PAPER) -> list[dict[str, str]]:
    user_id = prompts.pick("plan_user", prompt_set)
    # The paper set's date line reads "unknown" for an undated (LoCoMo) question (SOURCES.md);
    # the code_rules planner has no date line, as the authors' planner has none.
    date = {"question_date": question.question_date or "unknown"} if "{question_date}" in prompts.load(user_id) else {}
    user = fill_granular(
        user_id, granularity,
        index_property_vocabulary=vocab_text, question=question.question, **date,
    )
    return [{"role": "system", "content": prompts.load(prompts.pick("plan_system", prompt_set))},
            {"role": "user", "content": user}]


def audit_messages(question: Question, vocab_text: str, granularity: str, plan: Plan) -> list[dict[str, str]]:
    user = fill_granular(
        AUDIT_PROMPT_IDS[1], granularity,
        index_property_vocabulary=vocab_text, question=question.question,
        plan=json.dumps(to_dict(plan), ensure_ascii=False, indent=1),
    )
    return [{"role": "system", "content": prompts.load(AUDIT_PROMPT_IDS[0])}, {"role": "user", "content": user}]


def _str(v: Any) -> str:
    return " ".join(str(v).split()) if v is not None else ""


# Field names the authors' normalization accepts for an anchor's entity, property and value.
ALIASES = {"entity": ("entity", "subject", "target_entity", "entity_name"),
           "property": ("property", "broad_property", "property_text", "predicate"),
           "value": ("value", "property_value", "answer_value")}
SCHEMA_ALIASES = {"entity": ("entity", "subject"), "property": ("property", "broad_property"), "value": ("value",)}


def _first(raw: dict[str, Any], names: tuple[str, ...]) -> Any:
    return next((raw[n] for n in names if raw.get(n)), None)


def _anchor(raw: Any, where: str, validation: str = "schema") -> Anchor:
    if not isinstance(raw, dict):
        raise PlanError(f"{where}.anchor must be an object")
    names = ALIASES if validation == "code" else SCHEMA_ALIASES
    etype = _str(raw.get("entity_type")).lower()
    cond = normalize_condition(raw.get("condition_property"))
    a = Anchor(
        entity=_str(_first(raw, names["entity"])),
        entity_type=etype if etype in ENTITY_TYPES else ("other" if etype else ""),
        property=normprop(_first(raw, names["property"])),
        value=_str(_first(raw, names["value"])), condition_property=cond,
        # schema: a value without a known condition is dropped; code: kept, so that validation
        # rejects the half-filled condition as the authors' does.
        condition_value=_str(raw.get("condition_value")) if cond or validation == "code" else "",
    )
    if validation == "code" and _str(raw.get("condition_property")) and not cond:
        raise PlanError(f"{where}.anchor: condition_property {_str(raw.get('condition_property'))!r} is not "
                        "an allowed condition")
    if not a.entity or not a.property:
        raise PlanError(f"{where}.anchor needs a non-empty entity and property")
    return a


def normalize_plan(raw: dict[str, Any], validation: str = "schema") -> Plan:
    """Validate and normalize a planner reply, or raise ``PlanError`` naming the problem.

    ``validation="code"``: also the authors' field aliases, required_properties rules and
    ``validate_plan``.
    """
    hops_raw = raw.get("hops")
    if not isinstance(hops_raw, list) or not hops_raw:
        raise PlanError("'hops' must be a non-empty list")
    hops: list[Hop] = []
    for pos, h in enumerate(hops_raw, 1):
        if not isinstance(h, dict):
            raise PlanError(f"hops[{pos}] is not an object")
        hid = _str(h.get("hop_id")).lower()
        if not _HOP_ID.match(hid) or any(x.hop_id == hid for x in hops):
            hid = f"h{pos}"
            while any(x.hop_id == hid for x in hops):  # an earlier hop may already use h{pos}
                hid = f"h{int(hid[1:]) + 1}"
        anchor = _anchor(h.get("anchor"), f"hops[{pos}]", validation)
        raw_deps = h.get("depends_on") or []
        raw_deps = [raw_deps] if isinstance(raw_deps, (str, int)) else raw_deps
        deps = [_str(d).lower() for d in raw_deps if _str(d)] if isinstance(raw_deps, list) else []
        deps += [m for f in (anchor.entity, anchor.value, anchor.condition_value) for m in PLACEHOLDER.findall(f)]
        earlier = {x.hop_id for x in hops}
        bad = [d for d in deps if d not in earlier]
        if bad:
            raise PlanError(f"hop {hid} depends on {bad[0]}, which is not an earlier hop")
        hops.append(Hop(hop_id=hid, purpose=_str(h.get("purpose")), anchor=anchor,
                        depends_on=list(dict.fromkeys(deps)), bridge_request=_str(h.get("bridge_request"))))
    answer_target = raw.get("answer_target")
    target: dict[str, Any] = answer_target if isinstance(answer_target, dict) else {}
    ttype = _str(target.get("type")).lower()
    reasoning = _str(raw.get("reasoning_type")).lower()
    reasoning = reasoning if reasoning in REASONING_TYPES else "direct"
    scope = _str(raw.get("retrieval_scope")).lower()
    if scope not in SCOPES:
        scope = "all_matching" if reasoning in ("aggregation", "comparison") or ttype in ("count", "list") else "point"
    required: list[dict[str, str]] = []
    for rp in raw.get("required_properties") or []:
        if isinstance(rp, dict) and (rp.get("broad_property") or rp.get("property")):
            role = _str(rp.get("role")).lower()
            etype = _str(rp.get("entity_type")).lower()
            item = {
                "entity": _str(rp.get("entity")),
                "entity_type": etype if validation != "code" or etype in ENTITY_TYPES else "",
                "broad_property": normprop(rp.get("broad_property") or rp.get("property")),
                "property_text": _str(rp.get("property_text")), "value": _str(rp.get("value")),
                "role": role if role in ROLES else "answer_property",
            }
            if validation != "code" or item not in required:  # the authors de-duplicate
                required.append(item)
    if validation == "code" and not required:  # ... and make one per hop when there are none
        required = [{"entity": h.anchor.entity, "entity_type": h.anchor.entity_type,
                     "broad_property": h.anchor.property, "property_text": h.anchor.property,
                     "value": h.anchor.value, "role": "answer_property"} for h in hops]
    plan = Plan(answer_target={"type": ttype if ttype in TARGET_TYPES else "value",
                               "description": _str(target.get("description"))},
                reasoning_type=reasoning, retrieval_scope=scope, required_properties=required, hops=hops)
    if validation == "code":
        validate_plan(plan)
    return plan


WORLD_KNOWLEDGE_PROPERTIES = {"include", "contains", "is_a", "type", "category"}
COUNTERFACTUAL_LINKS = {"motivation", "influence", "career_motivation"}


def validate_plan(plan: Plan) -> None:
    """The authors' plan validation (reference_notes 3.4); a ``PlanError`` sends the plan to repair."""
    for h in plan.hops:
        a = h.anchor
        if len(a.property.split("_")) > 2:
            raise PlanError(f"hop {h.hop_id}: property {a.property!r} has more than two parts; use a "
                            "minimum-sufficient predicate and put the detail in value")
        if bool(a.condition_property) != bool(a.condition_value):
            raise PlanError(f"hop {h.hop_id}: condition_property and condition_value must be filled together")
        if a.entity_type == "concept" and h.depends_on and a.property in WORLD_KNOWLEDGE_PROPERTIES:
            raise PlanError(f"hop {h.hop_id}: a concept hop on {a.property!r} asks for world knowledge, "
                            "not for the conversation")
    if plan.reasoning_type == "counterfactual":
        if len(plan.hops) < 3:
            raise PlanError("a counterfactual plan needs three hops: target, removed condition, causal link")
        if not any(h.anchor.condition_property == "because_of" or h.anchor.property in COUNTERFACTUAL_LINKS
                   for h in plan.hops):
            raise PlanError("a counterfactual plan needs a causal-link hop (condition because_of, or a "
                            "motivation/influence property)")


_QUESTION_WORDS = {"what", "when", "where", "who", "whom", "whose", "why", "how", "which", "did", "does",
                   "do", "is", "are", "was", "were", "would", "could", "can", "should", "has", "have", "had"}
_AGGREGATE = re.compile(r"\b(how many|how often|how much|what are|list|which .* all|all the)\b", re.I)


def fallback_plan(question: str) -> Plan:
    """A single-hop plan from the question's own words, used only when the planner failed."""
    words = re.findall(r"[A-Za-z][\w'-]*", question)
    entity = next((w.split("'")[0] for w in words if w[0].isupper() and w.lower() not in _QUESTION_WORDS
                   and w.split("'")[0] != "I"), "user")  # "I" is the user, not a name
    content = [t for t in content_tokens(question) if t != entity.lower()]
    prop = max(content, key=len) if content else "fact"
    aggregate = bool(_AGGREGATE.search(question))
    hop = Hop(hop_id="h1", purpose="fallback: question terms",
              anchor=Anchor(entity=entity, entity_type="person" if entity == "user" else "", property=normprop(prop)))
    return Plan(answer_target={"type": "list" if aggregate else "value", "description": ""},
                reasoning_type="aggregation" if aggregate else "direct",
                retrieval_scope="all_matching" if aggregate else "point",
                required_properties=[], hops=[hop])


# The authors' last-resort plan (reference_notes 3.4, control flow step 4). Words that start a
# question with a capital letter but never name its subject; their list, as a fact.
_CODE_QUESTION_INITIALS = frozenset("when what where why who which how can could would did does do is are was "
                                    "were should please tell".split())
_CODE_NAME = re.compile(r"\b[A-Z][A-Za-z'-]+\b")  # two letters or more: "I" is never a name
# (substrings of the lower-cased question, first rule that fires wins) -> property
_CODE_PROPERTY_RULES = (
    (("birthday", "born"), "birthday"),
    (("how many", "how often", "total number", "all the"), "activity"),
    (("when", "date", "what year", "how long"), "time"),
    (("where", "which place", "location"), "location"),
    (("destress", "relax", "do to", "activities"), "activity"),
    (("recommend", "suggest", "prefer", "like"), "preference"),
    (("move", "moved", "relocat"), "move"),
)


def code_fallback_property(question: str, raw: Any = None) -> str:
    """The authors' fallback property: the first required property of the failed reply that has at
    most two alphanumeric words, else the keyword rules (substring tests, so "like" also fires on
    "likely", as theirs), else ``activity``."""
    reqs = raw.get("required_properties") if isinstance(raw, dict) else None
    for item in reqs if isinstance(reqs, list) else []:
        if isinstance(item, dict):
            cand = _str(item.get("broad_property") or item.get("property") or item.get("property_text"))
            if cand and len(re.findall(r"[A-Za-z0-9]+", cand.replace("_", " "))) <= 2:
                return cand
    q = question.lower()
    return next((prop for keys, prop in _CODE_PROPERTY_RULES if any(k in q for k in keys)), "activity")


def code_fallback_plan(question: str, raw: Any = None, validation: str = "schema") -> Plan:
    """The authors' last-resort plan, normalized and validated like a planner reply.

    Entity: the first capitalized word of two letters or more that is not one of their question
    initials (so a leading "In" or "What's" is taken, as theirs takes it), else ``user``; type
    person either way. One hop with an empty value, reasoning ``direct``, scope ``point``, target
    ``value``. Their step stops with an error when this plan fails validation (a three-part
    property from the failed reply); here that property is dropped for the keyword rules' one.
    """
    entity = next((w for w in _CODE_NAME.findall(question) if w.lower() not in _CODE_QUESTION_INITIALS), "user")

    def build(prop: str) -> Plan:
        req = {"entity": entity, "entity_type": "person", "broad_property": prop, "property_text": prop,
               "value": "", "role": "answer_property"}
        return normalize_plan({
            "answer_target": {"type": "value", "description": "fallback: answer from the retrieved evidence"},
            "reasoning_type": "direct", "retrieval_scope": "point", "required_properties": [req],
            "hops": [{"hop_id": "h1", "purpose": "fallback: the question's entity and a broad property",
                      "anchor": {"entity": entity, "entity_type": "person", "property": prop, "value": ""},
                      "depends_on": [], "bridge_request": ""}]}, validation)

    try:
        return build(code_fallback_property(question, raw))
    except PlanError:
        return build(code_fallback_property(question))


def repair_messages(question: Question, error: str, proposal: str, vocab_text: str, granularity: str,
                    repair: str = "harness") -> list[dict[str, str]]:
    """The repair call after an invalid plan: the harness's short request, or (``code``) the authors'
    (question, error, invalid plan, reminder list, vocabulary, granularity block)."""
    if repair == "code":
        user = fill_granular(CODE_REPAIR_IDS[1], granularity, question=question.question, error=error,
                             proposal=proposal, index_property_vocabulary=vocab_text)
        return [{"role": "system", "content": prompts.load(CODE_REPAIR_IDS[0])}, {"role": "user", "content": user}]
    user = prompts.fill("plan_repair_user", error=error, question=question.question, proposal=proposal)
    return [{"role": "system", "content": prompts.load("plan_repair_system")}, {"role": "user", "content": user}]


def plan_question(client: LLMClient, question: Question, vocabulary: dict[str, int], *,
                  granularity: str, vocabulary_max: Optional[int] = None,
                  vocabulary_tokens: Optional[int] = None, prompt_set: str = prompts.PAPER,
                  validation: str = "schema", audit: bool = False, repair: str = "harness",
                  fallback: str = "harness") -> PlanRow:
    if validation not in VALIDATIONS:
        raise ValueError(f"plan.validation must be one of {VALIDATIONS}, got {validation!r}")
    if repair not in REPAIRS or fallback not in FALLBACKS:
        raise ValueError(f"plan.repair and plan.fallback must be one of {REPAIRS}, got {repair!r}, {fallback!r}")
    vocab_text, shown = vocabulary_text(vocabulary, vocabulary_max, vocabulary_tokens)
    row = PlanRow(qid=question.qid, memory_id=question.memory_id, question=question.question,
                  plan=fallback_plan(question.question), vocabulary_size=shown,
                  vocabulary_total=len(vocabulary), vocabulary_left_out=len(vocabulary) - shown)
    last: dict[str, Any] = {}  # the last reply that parsed as JSON: the authors' fallback reads it

    def parse(text: str) -> Plan:
        obj = parse_json_object(text)
        last["raw"] = obj
        return normalize_plan(obj, validation)

    repair_id = CODE_REPAIR_IDS[1] if repair == "code" else "plan_repair_user"
    try:
        row.plan, row.repaired = complete_with_repair(
            client, "plan", plan_messages(question, vocab_text, granularity, prompt_set), parse,
            lambda error, text: repair_messages(question, error, text, vocab_text, granularity, repair),
            (prompts.pick("plan_user", prompt_set), repair_id), row.llm_calls)
    except (ValueError, LLMCallError) as exc:
        row.repaired = len(row.llm_calls) > 1
        row.fallback_used, row.error = True, fallback_error(exc)
        row.plan = (code_fallback_plan(question.question, last.get("raw"), validation) if fallback == "code"
                    else fallback_plan(question.question))
        return row  # the authors audit only a plan the model made
    if audit:
        row.plan, row.audit = audit_plan(client, question, vocab_text, granularity, row.plan, validation,
                                         row.llm_calls)
    return row


def audit_plan(client: LLMClient, question: Question, vocab_text: str, granularity: str, plan: Plan,
               validation: str, calls: list[dict[str, Any]]) -> tuple[Plan, dict[str, Any]]:
    """One audit call (role ``plan_audit``): its plan if it is valid, else the pre-audit plan kept."""
    try:
        c = client.complete("plan_audit", audit_messages(question, vocab_text, granularity, plan), json_mode=True,
                            prompt_id=AUDIT_PROMPT_IDS[1])
    except LLMCallError as exc:
        return plan, {"outcome": "kept_pre_audit", "error": fallback_error(exc)}
    calls.append({**c.record(AUDIT_PROMPT_IDS[1]), "role": "plan_audit"})
    try:
        audited = normalize_plan(parse_json_object(c.text), validation)
    except ValueError as exc:
        return plan, {"outcome": "kept_pre_audit", "error": fallback_error(exc)}
    return audited, {"outcome": "unchanged" if audited == plan else "corrected"}


def compact_plan(plan: Plan, bridges: Optional[list[Bridge]] = None) -> str:
    """The plan as shown to the answer model (navigation aid, not evidence).

    A hop whose bridge was resolved in 06 also shows ``bridge_value`` (as the authors' answer
    step does); plans without bridges render exactly as before.
    """
    data = to_dict(plan)
    values = {b.hop_id: b.value for b in bridges or []}
    for hop in data["hops"]:
        if hop["hop_id"] in values:
            hop["bridge_value"] = values[hop["hop_id"]]
    return json.dumps(data, ensure_ascii=False, indent=1)
