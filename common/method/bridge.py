"""Bridge resolution: the intermediate value a dependent hop searches with (part of stage 06).

The planner may declare a bridge on a hop (``bridge_request``, e.g. "the name of Omar's
brother") and let later hops use ``$h1.bridge`` in their anchors. After the declaring hop has
selected its episodes, one LLM call (role ``bridge``) reads those ORIGINAL episodes and states
the value, or "" when they do not establish it. The value replaces the placeholder downstream
and is shown to the answer model with the plan. The reply is JSON, validated and repaired once
like every other JSON reply (``common.core.repair``); a failure leaves the value empty, is recorded
in the row and counted, and the dependent hops fall back to their other anchor fields.
"""
from __future__ import annotations

import json
import re
from typing import Any, Callable, Optional

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient, parse_json_object
from common.core.repair import complete_with_repair, fallback_error
from common.core.schema import Anchor, Bridge, Hop, to_dict

PLACEHOLDER = re.compile(r"\$(h\d+)\.bridge")
ANCHOR_FIELDS = ("entity", "entity_type", "property", "value", "condition_property", "condition_value")

# (hop, its resolved anchor, rendered episodes, their ids) -> the hop's bridge and the call records
Resolver = Callable[[Hop, Anchor, str, list[str]], tuple[Bridge, list[dict[str, Any]]]]


def resolve_anchor(anchor: Anchor, bridges: dict[str, str]) -> Anchor:
    """Replace ``$hN.bridge`` by hop N's bridge value ("" when unresolved), in every field."""
    def fill(text: str) -> str:
        return " ".join(PLACEHOLDER.sub(lambda m: bridges.get(m.group(1), ""), text).split())

    return Anchor(**{f: fill(getattr(anchor, f)) for f in ANCHOR_FIELDS})


def parse_bridge(text: str, context_ids: list[str]) -> tuple[str, list[str]]:
    """The value and the supporting ids that were in the context; ValueError names what is wrong."""
    obj = parse_json_object(text)
    value = obj.get("bridge")
    if not isinstance(value, str):
        raise ValueError(f"'bridge' must be a string, got {type(value).__name__}")
    ids = obj.get("supporting_episode_ids", [])
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValueError("'supporting_episode_ids' must be a list of strings")
    shown = set(context_ids)
    # Ids outside the context would point at evidence the call never saw: dropped, not trusted.
    return " ".join(value.split()), [i for i in dict.fromkeys(ids) if i in shown]


# retrieve.bridge_question: false: the authors' bridge request shows the request, the hop's anchor and
# the episodes, not the question (code_rules.bridge_code_user is bridge_user without that line).
NO_QUESTION_ID = "code_rules.bridge_code_user"


def bridge_messages(question: str, hop: Hop, anchor: Anchor, episodes: str,
                    with_question: bool = True) -> list[dict[str, str]]:
    slots = {"request": hop.bridge_request, "anchor": json.dumps(to_dict(anchor), ensure_ascii=False),
             "episodes": episodes or "(no episodes selected)"}
    user = prompts.fill("bridge_user", question=question, **slots) if with_question else \
        prompts.fill(NO_QUESTION_ID, **slots)
    return [{"role": "system", "content": prompts.load("bridge_system")}, {"role": "user", "content": user}]


def resolve_bridge(client: LLMClient, question: str, hop: Hop, anchor: Anchor, episodes: str,
                   context_ids: list[str], with_question: bool = True) -> tuple[Bridge, list[dict[str, Any]]]:
    """One bridge call (plus at most one repair); never raises for a failed call or bad reply."""
    bridge = Bridge(hop_id=hop.hop_id, request=hop.bridge_request, context_episode_ids=list(context_ids))
    calls: list[dict[str, Any]] = []

    def repair(error: str, text: str) -> list[dict[str, str]]:
        user = prompts.fill("bridge_repair_user", error=error, request=hop.bridge_request, proposal=text)
        return [{"role": "system", "content": prompts.load("bridge_repair_system")},
                {"role": "user", "content": user}]

    try:
        (bridge.value, bridge.supporting_episode_ids), bridge.repaired = complete_with_repair(
            client, "bridge", bridge_messages(question, hop, anchor, episodes, with_question),
            lambda text: parse_bridge(text, context_ids), repair,
            ("bridge_user" if with_question else NO_QUESTION_ID, "bridge_repair_user"), calls)
    except (ValueError, LLMCallError) as exc:
        bridge.repaired = len(calls) > 1
        bridge.error = fallback_error(exc)
    return bridge, calls


def make_resolver(client: Optional[LLMClient], question: str, with_question: bool = True) -> Optional[Resolver]:
    """The per-question resolver the retriever calls, or None when bridges are off; ``with_question``:
    ``retrieve.bridge_question``."""
    if client is None:
        return None
    return lambda hop, anchor, episodes, ids: resolve_bridge(client, question, hop, anchor, episodes, ids,
                                                             with_question)
