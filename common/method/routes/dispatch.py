"""The hook of the answer step: the guards on the buffer, then the route the question asks for."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from common.core.llm import LLMClient
from common.core.schema import Plan, Question
from common.method.routes.counting import count_ledger
from common.method.routes.dates import named_dates, parse_date
from common.method.routes.evidence import Add, parse_block
from common.method.routes.guards import add_by_dates, add_by_overlap, overlap_limit, window_filter
from common.method.routes.ordering import order_audit
from common.method.routes.switches import Routes
from common.method.routes.temporal import temporal_ledger
from common.method.routes.wording import guard_wanted, route_of


@dataclass
class Prepared:
    """What the routes made of a row: the buffer to answer from (None: unchanged), a route's answer
    (None: answer as usual), lines to put before the episodes, and the trace."""

    buffer: Optional[str] = None
    episode_ids: Optional[list[str]] = None
    answer: Optional[str] = None
    note: str = ""
    steps: dict[str, Any] = field(default_factory=dict)


def run_routes(client: LLMClient, question: Question, plan: Optional[Plan],
               split: Optional[list[tuple[str, str]]], routes: Routes, add: Add,
               pool: Optional[list[str]] = None) -> Prepared:
    """The guards, then the route the question asks for (see the module docstring). ``split``: the
    buffer's episode blocks (``answer.split_buffer``; None when the buffer is not made of them);
    ``pool``: every episode block of the memory, for the user-turn overlap guard."""
    out = Prepared()
    if plan is None:
        return out
    if split is None:
        out.steps["routes"] = {"skipped": "no episode blocks in the buffer"}
        return out
    blocks = [b for b in (parse_block(t) for _, t in split) if b is not None]
    changed = False
    pool_blocks = [b for b in (parse_block(t) for t in pool or []) if b is not None]
    asked = parse_date(question.question_date)
    at_answer = routes.guard_stage == "answer"  # guard_stage: retrieval added them per hop in 06 already
    if at_answer and routes.date_window and routes.date_window_dates and pool_blocks:
        days = named_dates(question.question, asked)
        if days:
            blocks, added = add_by_dates(blocks, pool_blocks, days, routes.date_window_max)
            out.steps["date_window_dates"] = {"dates": [d.isoformat() for d in days], "added": added}
            changed = changed or bool(added)
    if at_answer and routes.user_overlap and pool_blocks and guard_wanted(question.question, plan):
        limit = overlap_limit(question.question, plan, routes, len(blocks))
        blocks, added = add_by_overlap(question.question, blocks, pool_blocks, limit)
        out.steps["user_overlap"] = {"added": added, **({"limit": limit} if limit != routes.user_overlap_max else {})}
        changed = changed or bool(added)
    if routes.date_window:
        blocks, dropped = window_filter(blocks, parse_date(question.question_date))
        out.steps["date_window"] = {"dropped": dropped}
        changed = changed or bool(dropped)
    if changed:
        out.buffer = "\n\n".join(b.text for b in blocks)
        out.episode_ids = [b.episode_id for b in blocks]
    route = route_of(question.question, plan, routes)
    if not route:
        return out
    if route == "count":
        answer, trace, note = count_ledger(client, question, plan, blocks, routes, add)
    elif route == "order":
        answer, trace, note = order_audit(client, question, plan, blocks, add, routes)
    else:
        answer, trace, note = temporal_ledger(client, question, plan, blocks, routes, route, add)
    if trace["errors"]:
        trace["error"] = trace["errors"][0].split(": ", 1)[-1]  # the first failed call (the ledger's cause)
    out.answer, out.note = answer, note
    out.steps[route if route in ("count", "order") else "temporal"] = trace
    return out
