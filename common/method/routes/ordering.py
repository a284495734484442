"""The operator audit (``answer.routes.order``): dated states of the asked thing, and the earliest,
latest, previous one or the sequence picked in Python; the user's own move rows."""
from __future__ import annotations

import calendar
import re
from datetime import date
from typing import Any, Optional

from common.core.llm import LLMClient
from common.core.schema import Plan, Question
from common.method.routes.dates import parse_date, resolve_date
from common.method.routes.evidence import Add, Block, ask_json, date_line, grounded, rows_of
from common.method.routes.switches import Routes
from common.method.routes.wording import FIRST_PERSON_RE, WHEN_RE, operator_of

ORDER_IDS = ("code_rules.answer_order_system", "code_rules.answer_order_user")


def pick_ordered(operator: str, rows: list[dict[str, Any]]) -> Optional[str]:
    """The answer an ordering asks for, from dated rows in (date, buffer) order; None when it is not
    determined (no row, or a tie of different values at the deciding date)."""
    if not rows:
        return None
    if operator == "sequence":
        values = list(dict.fromkeys(r["value"] for r in rows))
        return ", then ".join(values) if len(values) > 1 else None
    if operator == "first":
        at = rows[0]["date"]
        return rows[0]["value"] if len({r["value"] for r in rows if r["date"] == at}) == 1 else None
    at = rows[-1]["date"]
    if len({r["value"] for r in rows if r["date"] == at}) > 1:
        return None
    if operator == "latest":
        return rows[-1]["value"]
    earlier = [r for r in rows if r["value"] != rows[-1]["value"] and r["date"] < at]  # previous
    return earlier[-1]["value"] if earlier else None


# "Where/what/which ... move": a question about a move of the user's (answer.routes.order_move_rows).
MOVE_QUESTION_RE = re.compile(r"\b(where|what|which)\b.*\b(move|moved|moving|relocat\w*)\b", re.I)
MOVED_TO_RE = re.compile(r"\b(?i:i|we)(?i:'ve| have)? (?i:just |finally |recently )?(?i:moved|relocated)(?: back)? to "
                         r"([A-Z][\w'-]*(?: [A-Z][\w'-]*)*)")


def move_rows(blocks: list[Block]) -> list[dict[str, Any]]:
    """Deterministic rows from the user's own "I moved / relocated (back) to X" turns, dated from the
    turn (relative words anchored to its episode's date), as the authors' knowledge-update audit adds."""
    rows = []
    for b in blocks:
        for t in b.turns:
            if not t.user:
                continue
            for m in MOVED_TO_RE.finditer(t.text):
                day, basis = resolve_date(t.text, b.day)
                day = day or b.day
                if day is not None:
                    rows.append({"value": m.group(1).strip(), "episode_id": b.episode_id, "date": day.isoformat(),
                                 "basis": f"moved-to row ({basis or 'session date'})"})
    return rows


def order_audit(client: LLMClient, question: Question, plan: Plan, blocks: list[Block],
                add: Add, routes: Optional[Routes] = None) -> tuple[Optional[str], dict[str, Any], str]:
    """(the answer or None, the trace, checked lines for the fallback answer)."""
    routes = routes or Routes()
    operator = operator_of(question.question, routes.order_bare_last)
    by_id = {b.episode_id: b for b in blocks}
    position = {b.episode_id: n for n, b in enumerate(blocks)}
    asked = parse_date(question.question_date)
    user_only = bool(FIRST_PERSON_RE.search(question.question))
    trace: dict[str, Any] = {"route": "order", "operator": operator, "episodes": len(blocks), "calls": 1,
                             "errors": []}
    try:
        reply = ask_json(client, "answer_order", ORDER_IDS, add, question_date_line=date_line(question),
                      question=question.question, operator=operator,
                      episodes="\n\n".join(b.text for b in blocks) or "(no episodes retrieved)")
    except ValueError as exc:
        trace["errors"].append(str(exc))
        trace["outcome"] = "fallback: the audit call failed"
        return None, trace, ""
    rows = []
    for raw in rows_of(reply, "rows"):
        eid, quote = str(raw.get("episode_id") or ""), str(raw.get("quote") or "")
        value = str(raw.get("value") or "")
        if eid not in by_id or not value.strip() or not grounded(quote, by_id[eid], user_only)[0]:
            continue
        day, basis = resolve_date(quote, by_id[eid].day)
        if day is None:
            day, basis = parse_date(str(raw.get("event_date") or "")) or by_id[eid].day, "model or session date"
        if day is None or (asked is not None and day > asked):
            continue
        rows.append({"value": " ".join(value.split()), "episode_id": eid, "date": day.isoformat(), "basis": basis})
    if routes.order_move_rows and MOVE_QUESTION_RE.search(question.question):
        have = {(r["value"].lower(), r["episode_id"]) for r in rows}
        extra = [r for r in move_rows(blocks) if (r["value"].lower(), r["episode_id"]) not in have
                 and (asked is None or r["date"] <= asked.isoformat())]
        rows += extra
        trace["move_rows"] = len(extra)
    rows.sort(key=lambda r: (r["date"], position[r["episode_id"]]))
    trace["rows"] = rows
    note = "Dated states checked against the episodes:\n" + "\n".join(
        f"- {r['date']}: {r['value']} (episode {r['episode_id']})" for r in rows) if rows else ""
    # The authors' knowledge-update pick: the earliest state for before/previous wording.
    answer = pick_ordered("first" if operator == "previous" and routes.order_previous_earliest else operator, rows)
    if answer and operator != "sequence" and WHEN_RE.search(question.question):  # the date is the answer
        day = date.fromisoformat(next(r["date"] for r in reversed(rows) if r["value"] == answer)
                                 if operator != "first" else rows[0]["date"])
        answer = f"{answer}, on {calendar.month_name[day.month]} {day.day}, {day.year}"
    trace["outcome"] = "answered" if answer else "fallback: not determined by the dated rows"
    return answer, trace, note
