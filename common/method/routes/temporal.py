"""The temporal ledger (``answer.routes.temporal`` / ``relative_age``): dated user statements,
the elapsed time or age they give, the ledger-answer call with its evidence gate, the relative-age
chain and a tenure."""
from __future__ import annotations

import re
from datetime import date
from typing import Any, Optional

from common.core.llm import LLMClient
from common.core.schema import Plan, Question
from common.method.routes.dates import elapsed, parse_date, question_window, resolve_date
from common.method.routes.evidence import (
    MAX_BATCH_CHARS,
    Add,
    Block,
    ask_json,
    batches,
    date_line,
    fmt_number,
    grounded,
    quantity_of,
    rows_of,
    singular,
    stems,
)
from common.method.routes.switches import Routes, budget
from common.method.routes.wording import AGO_RE, ELAPSED_RE

LEDGER_ANSWER_IDS = ("code_rules.answer_temporal_answer_system", "code_rules.answer_temporal_answer_user")
REPAIR_IDS = ("code_rules.answer_temporal_repair_system", "code_rules.answer_temporal_repair_user")
CHAIN_IDS = ("code_rules.answer_age_chain_system", "code_rules.answer_age_chain_user")
TEMPORAL_IDS = ("code_rules.answer_temporal_system", "code_rules.answer_temporal_user")
INSUFFICIENT = "The conversations do not say enough to answer this."


# --------------------------------------------------------------------------- temporal ledger
PLAN_RE = re.compile(r"\b(plan(ning)? to|going to|gonna|will|want to|thinking (about|of)|hope to|intend to|"
                     r"would like to|next (week|month|year))\b", re.I)


# A user's explicit report of a done action: "I just finished", "I finally got", "I've completed", "we went".
COMPLETED_RE = re.compile(r"\b(?:i|we)(?:'ve| have)? (?:just |finally |already |recently |actually )?"
                          r"(?:finished|completed|did|got|bought|went|attended|visited|started|adopted|made|took|"
                          r"received|picked up|signed up|joined|moved|ran|saw|met|fixed|repaired|serviced|replaced|"
                          r"booked|tried|learned|read|watched)\b", re.I)


def user_turns_text(block: Block) -> str:
    lines = [f"EPISODE {block.episode_id} | observed {block.date_text}"]
    lines += [f"USER TURN {t.dia_id}: {t.text}" for t in block.turns if t.user]
    return "\n".join(lines)


def temporal_ledger(client: LLMClient, question: Question, plan: Plan, blocks: list[Block], routes: Routes,
                    route: str, add: Add) -> tuple[Optional[str], dict[str, Any], str]:
    """(the answer or None, the trace, checked lines for the fallback answer)."""
    by_id = {b.episode_id: b for b in blocks}
    asked = parse_date(question.question_date)
    window = question_window(question.question, asked)
    trace: dict[str, Any] = {"route": route, "episodes": len(blocks), "calls": 0, "errors": []}
    facts: list[dict[str, Any]] = []
    with_users = [b for b in blocks if any(t.user for t in b.turns)]
    for n, group in enumerate(batches(with_users, routes.temporal_batch, MAX_BATCH_CHARS["temporal"],
                                      user_turns_text), 1):
        trace["calls"] += 1
        try:
            reply = ask_json(client, "answer_temporal", TEMPORAL_IDS, add, question_date_line=date_line(question),
                          question=question.question, episodes="\n\n".join(user_turns_text(b) for b in group))
        except ValueError as exc:
            trace["errors"].append(f"b{n:03d}: {exc}")
            continue
        ids = {b.episode_id for b in group}
        for raw in rows_of(reply, "facts"):
            eid, quote = str(raw.get("episode_id") or ""), str(raw.get("quote") or "")
            event = str(raw.get("event") or "")
            if eid not in ids:
                continue
            ok, _user = grounded(quote, by_id[eid], user_only=True)
            shared = stems(event) & stems(quote)
            if not ok or len(shared) < min(2, len(stems(event))):
                continue
            status = str(raw.get("status") or "mentioned").lower()
            if routes.temporal_completed_upgrade and status != "completed" and COMPLETED_RE.search(quote):
                status = "completed"  # explicit completed-action wording (the authors' upgrade)
            status = "planned" if PLAN_RE.search(quote) else status
            day, basis = resolve_date(quote, by_id[eid].day)
            if day is None:
                day, basis = parse_date(str(raw.get("event_date") or "")), "model"
            if day is None and status == "completed":
                day, basis = by_id[eid].day, "session date"
            in_window = day is not None and (asked is None or day <= asked) and (
                window is None or window[0] <= day <= window[1])
            facts.append({"event": event, "status": status, "episode_id": eid, "quote": quote,
                          "date": day.isoformat() if day else "", "basis": basis, "in_window": in_window,
                          "match": len(stems(question.question) & (stems(event) | stems(quote)))})
    trace["facts"] = facts
    usable = [f for f in facts if f["status"] == "completed" and f["date"] and f["in_window"] and f["match"] > 0]
    lines = "\n".join(f"- {f['date']}: {f['event']} ({f['status']}; episode {f['episode_id']})"
                      for f in facts if f["date"])
    note = f"User statements with checked dates:\n{lines}" if lines else ""
    m = AGO_RE.search(question.question) or ELAPSED_RE.search(question.question)
    unit = m.group(1).lower() if m and m.group(1) else "day"
    if not facts and not trace["errors"]:
        trace["outcome"] = "no grounded user statement (evidence gate)"
        return INSUFFICIENT, trace, note
    if route == "relative_age" and usable and asked is not None:
        best = max(f["match"] for f in usable)
        top = {f["date"] for f in usable if f["match"] == best}
        if len(top) == 1:
            value = elapsed(date.fromisoformat(top.pop()), asked, unit)
            trace["outcome"] = "answered"
            return f"{value} {unit}{'' if value == 1 else 's'} ago", trace, note
    if route == "temporal":
        dates = sorted({f["date"] for f in usable})
        if len(dates) == 2:
            value = elapsed(date.fromisoformat(dates[0]), date.fromisoformat(dates[1]), unit)
            trace["outcome"] = "answered"
            return f"{value} {unit}{'' if value == 1 else 's'}", trace, note
    if route == "tenure" and usable and asked is not None:
        best = max(f["match"] for f in usable)
        start = max(date.fromisoformat(f["date"]) for f in usable if f["match"] == best)  # the latest start
        trace["outcome"] = "answered"
        return duration_text(start, asked), trace, note
    if route == "relative_age" and routes.age_chain and asked is not None:
        chained = age_chain(client, question, blocks, unit, add, trace, routes)
        if chained is not None:
            trace["outcome"] = "answered by the relative-age chain"
            return chained, trace, note
    if routes.temporal_answer_call:
        answer = ledger_answer(client, question, blocks, facts, note, add, trace, routes)
        trace["outcome"] = "ledger answer" if answer != INSUFFICIENT else "ledger answer: evidence gate"
        return answer, trace, note
    trace["outcome"] = "fallback: no unique dated event"
    return None, trace, note


def duration_text(start: date, end: date) -> str:
    """A tenure as years and months ("2 years and 5 months"), by the calendar."""
    months = elapsed(start, end, "month")
    years, rest = divmod(months, 12)
    parts = [f"{years} year{'' if years == 1 else 's'}"] if years else []
    parts += [f"{rest} month{'' if rest == 1 else 's'}"] if rest or not years else []
    return " and ".join(parts)


TWO_QUOTES_RE = re.compile(r"\bsince\b.*\bwhen\b|\b(complete|finish)\w*\b.*\bfirst\b.*\bor\b", re.I)


def evidence_gate(question: str, quotes: list[dict[str, Any]], by_id: dict[str, Block]) -> int:
    """How many cited quotes are grounded, user-spoken and not plans; the answer passes with >= 1
    (>= 2 for "since ... when" and "complete/finish ... first ... or" questions)."""
    good = 0
    for q in quotes:
        eid, quote = str(q.get("episode_id") or ""), str(q.get("quote") or "")
        if eid in by_id and grounded(quote, by_id[eid], user_only=True)[0] and not PLAN_RE.search(quote):
            good += 1
    return good


def ledger_answer(client: LLMClient, question: Question, blocks: list[Block], facts: list[dict[str, Any]],
                  note: str, add: Add, trace: dict[str, Any], routes: Optional[Routes] = None) -> str:
    """The authors' ledger-answer call over the checked facts, its evidence gate, and one
    citation-repair call when the ledger has facts but the answer abstained or failed the gate."""
    by_id = {b.episode_id: b for b in blocks}
    need = 2 if TWO_QUOTES_RE.search(question.question) else 1
    episodes = "\n\n".join(user_turns_text(b) for b in blocks if any(t.user for t in b.turns))
    ledger = note or "(no dated user statement)"

    def ask(ids: tuple[str, str], tag: str, draft: str = "") -> Optional[str]:
        trace["calls"] += 1
        try:
            extra: dict[str, Any] = {"draft": draft or "(no answer)"} if ids == REPAIR_IDS else {}
            reply = ask_json(client, "answer_temporal", ids, add, max_tokens=budget(routes or Routes(), tag),
                             question_date_line=date_line(question), question=question.question, ledger=ledger,
                             episodes=episodes, **extra)
        except ValueError as exc:
            trace["errors"].append(f"{tag}: {exc}")
            return None
        answer = " ".join(str(reply.get("answer") or "").split())
        passed = evidence_gate(question.question, rows_of(reply, "evidence"), by_id)
        trace[tag] = {"answer": answer, "grounded_quotes": passed, "needed": need}
        return answer if answer and passed >= need and not ABSTAIN_RE.search(answer) else None

    answer = ask(LEDGER_ANSWER_IDS, "ledger_answer")
    if answer is None and facts:
        draft = str(trace.get("ledger_answer", {}).get("answer") or "")
        answer = ask(REPAIR_IDS, "citation_repair", draft)
    return answer or INSUFFICIENT


ABSTAIN_RE = re.compile(r"^(unknown|not (?:enough|sure)|i (?:don't|do not) know|insufficient)|do not say enough|"
                        r"not mentioned|cannot (?:be )?(?:determined|answer)", re.I)


def _age(raw: Any, unit: str, by_id: dict[str, Block]) -> Optional[float]:
    """A cited age in ``unit`` ({value, unit, episode_id, quote}), or None unless user-grounded."""
    if not isinstance(raw, dict):
        return None
    eid, quote = str(raw.get("episode_id") or ""), str(raw.get("quote") or "")
    value = quantity_of(raw.get("value"))
    if value is None or singular(str(raw.get("unit") or "")) != unit or eid not in by_id:
        return None
    return value if grounded(quote, by_id[eid], user_only=True)[0] else None


CHAIN_RULE = (" Say whether the anchor age and the offset are about the very same anchor event (same_anchor_event), "
              "and whether the chain is complete (evidence_complete); set either to false rather than guess.")
CHAIN_FIELDS = ', "same_anchor_event": true, "evidence_complete": true'


def age_chain(client: LLMClient, question: Question, blocks: list[Block], unit: str, add: Add,
              trace: dict[str, Any], routes: Optional[Routes] = None) -> Optional[str]:
    """The authors' relative-age chain: one call cites the target's own age ("N <unit> ago") or an
    anchor's age and the target's offset from that anchor; Python accepts the direct age, or anchor
    age + offset (before) / - offset (after) when both are cited, in the asked unit. ``age_chain_checks``
    (theirs): the anchor path also needs the reply's same_anchor_event and evidence_complete."""
    routes = routes or Routes()
    by_id = {b.episode_id: b for b in blocks}
    trace["calls"] += 1
    checks = routes.age_chain_checks
    try:
        reply = ask_json(client, "answer_temporal", CHAIN_IDS, add, system={"chain_rule": CHAIN_RULE if checks else ""},
                         max_tokens=budget(routes, "age_chain"), question_date_line=date_line(question),
                         question=question.question, unit=unit, chain_fields=CHAIN_FIELDS if checks else "",
                         episodes="\n\n".join(user_turns_text(b) for b in blocks if any(t.user for t in b.turns)))
    except ValueError as exc:
        trace["errors"].append(f"chain: {exc}")
        return None
    direct = _age(reply.get("target_age"), unit, by_id)
    value: Optional[float] = direct
    if value is None:
        anchor, offset = _age(reply.get("anchor_age"), unit, by_id), _age(reply.get("offset"), unit, by_id)
        side = str((reply.get("offset") or {}).get("direction") or "").lower() if isinstance(
            reply.get("offset"), dict) else ""
        sure = not checks or (reply.get("same_anchor_event") is True and reply.get("evidence_complete") is True)
        if anchor is not None and offset is not None and side in ("before", "after") and sure:
            value = anchor + offset if side == "before" else anchor - offset
    trace["chain"] = {"value": value, "direct": direct is not None}
    if value is None or value < 0:
        return None
    return f"{fmt_number(value)} {unit}{'' if value == 1 else 's'} ago"
