"""Which route a question asks for, read from its own wording or its plan (never a label)."""
from __future__ import annotations

import re
from typing import Optional

from common.core.schema import Plan
from common.method.routes.dates import UNIT
from common.method.routes.switches import Routes

AGO_RE = re.compile(rf"\bhow many {UNIT} ago\b", re.I)
ELAPSED_RE = re.compile(rf"\bhow (?:many {UNIT}|long)\b.*\b(between|since|passed|elapsed|before|after)\b", re.I)
COUNT_RE = re.compile(r"\bhow many\b|\bhow much\b|\bin total\b|\btotal (number|amount|cost|time)\b", re.I)
COMPARATIVE_RE = re.compile(r"\bhow much (older|younger|longer|shorter|taller|bigger|smaller|more|less|faster)\b",
                            re.I)
FIRST_PERSON_RE = re.compile(r"\b(i|my|me|mine|i've|i'm|i'd)\b", re.I)


SEQUENCE_RE = re.compile(r"\b(in what order|what(?: is|'s| was) the order|order (?:of|in which))\b", re.I)
PREVIOUS_RE = re.compile(r"\b(previous(?:ly)?|used to|formerly|before (?:i|the) (?:changed|switched|moved|updated|"
                         r"upgraded|replaced))\b", re.I)
NOT_PREVIOUS_RE = re.compile(r"\bprevious (chat|conversation|answer|response|message|session)s?\b", re.I)
FIRST_RE = re.compile(r"\b(first|earliest)\b", re.I)
LATEST_RE = re.compile(r"\b(most recent(?:ly)?|latest|currently|current|right now|these days|nowadays)\b", re.I)


# A bare "last" ("my last trip", "the last book I read"); not a calendar window ("last week", "the last
# three months", "last Friday", "last weekend") nor "at last" / "last night".
BARE_LAST_RE = re.compile(
    r"(?<!\bat )\blast\b(?! (?:\d+|a couple of|couple of|few|several|one|two|three|four|five|six|seven|eight|nine|"
    r"ten|eleven|twelve)\b)(?! (?:day|week|month|year|weekend|night|monday|tuesday|wednesday|thursday|friday|"
    r"saturday|sunday)s?\b)", re.I)


def operator_of(question: str, bare_last: bool = False) -> str:
    """The ordering the question's wording asks for: sequence | previous | first | latest | ''.
    ``bare_last`` (answer.routes.order_bare_last): a bare "last" asks for the latest, as in the
    authors' operator words."""
    if SEQUENCE_RE.search(question):
        return "sequence"
    if PREVIOUS_RE.search(question) and not NOT_PREVIOUS_RE.search(question):
        return "previous"
    if FIRST_RE.search(question):
        return "first"
    if LATEST_RE.search(question) or (bare_last and BARE_LAST_RE.search(question)):
        return "latest"
    return ""


# A question about what the assistant said is answered from the episodes as usual: the ledgers
# read the user's own statements.
ASSISTANT_RECALL_RE = re.compile(r"\byou (suggested|recommended|told|said|mentioned|gave|listed|provided|shared|"
                                 r"wrote|named)\b", re.I)
WHEN_RE = re.compile(r"\b(when|what date|which date|what day)\b", re.I)


# "How long have I been (working) in my current role/job/position": a duration up to the question date
# (answer.routes.tenure_duration), not the latest state.
TENURE_RE = re.compile(r"\bhow long have i been\b.*\b(current|present|new) (role|job|position|title|company)\b", re.I)


def route_of(question: str, plan: Optional[Plan], routes: Routes) -> str:
    """The route the question's wording (or its plan) asks for: relative_age | temporal | tenure | count |
    order | ''."""
    if plan is None or ASSISTANT_RECALL_RE.search(question):
        return ""
    q = question
    if routes.relative_age and AGO_RE.search(q):
        return "relative_age"
    if routes.temporal and routes.tenure_duration and TENURE_RE.search(q):
        return "tenure"
    if routes.temporal and ELAPSED_RE.search(q) and not AGO_RE.search(q):
        return "temporal"
    # "how much ... now / currently" asks for the latest state, not a total.
    current = re.search(r"\bhow much\b", q, re.I) and (LATEST_RE.search(q) or re.search(r"\bnow\b", q, re.I))
    if routes.count and not AGO_RE.search(q) and not ELAPSED_RE.search(q) and not COMPARATIVE_RE.search(q) \
            and not current and (COUNT_RE.search(q) or plan.answer_target.get("type") == "count"):
        return "count"
    if routes.order and operator_of(q, routes.order_bare_last):
        return "order"
    return ""


def guard_wanted(question: str, plan: Optional[Plan]) -> bool:
    """The user-turn overlap guard serves counting and temporal questions (wording or plan)."""
    if plan is None:
        return False
    return bool(COUNT_RE.search(question) or AGO_RE.search(question) or ELAPSED_RE.search(question)
                or plan.answer_target.get("type") in ("count", "time"))


def temporal_wording(question: str, plan: Optional[Plan]) -> bool:
    """A question about when or how long ago (wording or a time target): the authors' temporal guards."""
    return bool(AGO_RE.search(question) or ELAPSED_RE.search(question) or TENURE_RE.search(question)
                or (plan is not None and plan.answer_target.get("type") == "time"))
