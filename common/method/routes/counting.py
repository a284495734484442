"""The counting ledger (``answer.routes.count``): batch scans, a retry, one consolidation call,
then grounding, scope, dedup and the total in Python."""
from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Any, Optional

from common.core.llm import LLMClient
from common.core.schema import Plan, Question
from common.method.routes.dates import number_word, parse_date, question_window, resolve_date
from common.method.routes.evidence import (
    MAX_BATCH_CHARS,
    Add,
    Block,
    ask_json,
    batches,
    date_line,
    fmt_number,
    grounded,
    normalize,
    quantity_of,
    rows_of,
    singular,
    stems,
)
from common.method.routes.switches import Routes
from common.method.routes.wording import FIRST_PERSON_RE

COUNT_IDS = ("code_rules.answer_count_system", "code_rules.answer_count_user")
MERGE_IDS = ("code_rules.answer_count_merge_system", "code_rules.answer_count_merge_user")
REFERENCE_IDS = ("code_rules.answer_count_reference_system", "code_rules.answer_count_reference_user")


MONEY = {"$", "usd", "dollar", "dollars"}


def count_total(question: str, items: list[dict[str, Any]]) -> tuple[str, str]:
    """(mode, rendered answer) from the kept items: a sum of quantities when the question asks how
    much or names the items' unit ("how many hours"), else the number of distinct items."""
    q = question.lower()
    m = re.search(r"\bhow many ([a-z]+)", q)
    asked_unit = singular(m.group(1)) if m else ""
    with_unit = [i for i in items if i["quantity"] is not None and singular(i["unit"]) == asked_unit]
    if asked_unit and with_unit:
        total = sum(i["quantity"] for i in with_unit)
        return "sum", f"{fmt_number(total)} {m.group(1) if m else ''}".strip()
    if re.search(r"\bhow much\b|\btotal (amount|cost|time)\b", q):
        numeric = [i for i in items if i["quantity"] is not None]
        if numeric:
            total = sum(i["quantity"] for i in numeric)
            units = {i["unit"].lower() for i in numeric}
            if units <= MONEY and units:
                return "sum", f"${fmt_number(total)}"
            unit = numeric[0]["unit"] if len(units) == 1 else ""
            return "sum", f"{fmt_number(total)} {unit}".strip()
    return "count", str(len(items))


def dedup(items: list[dict[str, Any]], merge: dict[str, dict[str, Any]],
          mode: str = "name_quantity") -> list[dict[str, Any]]:
    """Items in scope and not duplicates: a consolidation row may drop an item (in_scope false) or point
    it at an EARLIER candidate (duplicate_of). ``name_quantity`` (the harness's rule): items with the
    same name and quantity are one item too. ``duplicate_of`` (the authors'): only a pointer whose
    ``dedup_confidence`` is high merges, so three instances of a weekly class stay three."""
    kept: list[dict[str, Any]] = []
    seen: set[tuple[str, Optional[float]]] = set()
    order = {it["id"]: n for n, it in enumerate(items)}
    for n, it in enumerate(items):
        row = merge.get(it["id"], {})
        if row.get("in_scope") is False:
            continue
        dup = str(row.get("duplicate_of") or "")
        sure = mode != "duplicate_of" or str(row.get("dedup_confidence") or "").strip().lower() == "high"
        if dup in order and order[dup] < n and sure:
            continue
        if mode == "duplicate_of":
            kept.append(it)
            continue
        key = (" ".join(sorted(stems(it["item"]))) or normalize(it["item"]), it["quantity"])
        if key in seen:
            continue
        seen.add(key)
        kept.append(it)
    return kept


# A user's own running total: "I've tried 5 different ones", "I have added 3 since ...", "7 in total so far".
# A total is a number (digits or two..twelve): "a different one" states no total.
_TOTAL = r"(\d+|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
CUMULATIVE_RE = re.compile(
    rf"\b{_TOTAL} different\b|\b(?:i've|i have) (?:\w+ ){{1,2}}{_TOTAL} (?:\w+ ){{0,3}}(?:since|so far|in total|"
    rf"altogether)\b|\b{_TOTAL} (?:\w+ ){{0,3}}(?:in total|altogether) so far\b", re.I)
REFERENCE_RE = re.compile(r"\b(before|after|since)\b", re.I)


def cumulative_total(blocks: list[Block], question: str) -> Optional[tuple[int, str, str]]:
    """The latest user turn stating a cumulative total of what the question counts (sharing a content
    stem with it): (total, episode id, the words); None when no user turn does."""
    found: Optional[tuple[date, int, tuple[int, str, str]]] = None
    asked = stems(question)
    for n, b in enumerate(blocks):
        for t in b.turns:
            if not t.user:
                continue
            for m in CUMULATIVE_RE.finditer(t.text):
                word = next(g for g in m.groups() if g)
                sentence = next((x for x in re.split(r"(?<=[.!?])\s+", t.text) if m.group(0) in x), t.text)
                if not asked & stems(sentence):
                    continue
                key = (b.day or date.min, n, (number_word(word), b.episode_id, m.group(0)))
                if found is None or key[:2] >= found[:2]:
                    found = key
    return found[2] if found else None


def reference_wanted(question: Question) -> bool:
    """A count bounded by a named event (before/after/since), not by a calendar window."""
    return bool(REFERENCE_RE.search(question.question)) and \
        question_window(question.question, parse_date(question.question_date)) is None


def reference_event(client: LLMClient, question: Question, blocks: list[Block], add: Add,
                    trace: dict[str, Any]) -> Optional[tuple[str, date]]:
    """Before/after counting: one call names the reference event in the first 20 episodes; Python keeps
    it only when its quote is the user's, verbatim, and dates it. (before|after, the date) or None."""
    m = REFERENCE_RE.search(question.question)
    if not m or not reference_wanted(question):
        return None
    shown = blocks[:20]
    trace["calls"] += 1
    try:
        reply = ask_json(client, "answer_count", REFERENCE_IDS, add, question_date_line=date_line(question),
                      question=question.question, episodes="\n\n".join(b.text for b in shown))
    except ValueError as exc:
        trace["errors"].append(f"reference: {exc}")
        return None
    by_id = {b.episode_id: b for b in shown}
    eid, quote = str(reply.get("episode_id") or ""), str(reply.get("quote") or "")
    if eid not in by_id or not grounded(quote, by_id[eid], user_only=True)[0]:
        trace["reference"] = {"outcome": "not grounded", "episode_id": eid}
        return None
    day, basis = resolve_date(quote, by_id[eid].day)
    day = day or parse_date(str(reply.get("event_date") or "")) or by_id[eid].day
    if day is None:
        return None
    side = "before" if m.group(1).lower() == "before" else "after"
    trace["reference"] = {"event": str(reply.get("event") or ""), "episode_id": eid, "date": day.isoformat(),
                          "side": side}
    return side, day


def count_ledger(client: LLMClient, question: Question, plan: Plan, blocks: list[Block], routes: Routes,
                 add: Add) -> tuple[Optional[str], dict[str, Any], str]:
    """(the answer or None, the trace, checked lines for the fallback answer)."""
    by_id = {b.episode_id: b for b in blocks}
    trace: dict[str, Any] = {"route": "count", "episodes": len(blocks), "calls": 0, "errors": []}
    candidates: list[dict[str, Any]] = []
    accounted: set[str] = set()
    user_only = bool(FIRST_PERSON_RE.search(question.question))
    asked = parse_date(question.question_date)
    window = question_window(question.question, asked)
    reference = reference_event(client, question, blocks, add, trace) if routes.count_reference_event else None
    if reference is not None:  # the reference event bounds the window on its side
        side, ref = reference
        window = (date.min, ref - timedelta(days=1)) if side == "before" else (ref + timedelta(days=1), date.max)

    def scan(group: list[Block], tag: str) -> None:
        trace["calls"] += 1
        try:
            reply = ask_json(client, "answer_count", COUNT_IDS, add, question_date_line=date_line(question),
                          question=question.question, episodes="\n\n".join(b.text for b in group))
        except ValueError as exc:
            trace["errors"].append(f"{tag}: {exc}")
            return
        ids = {b.episode_id for b in group}
        accounted.update(str(r.get("episode_id")) for r in rows_of(reply, "episodes")
                         if str(r.get("episode_id")) in ids)
        for k, raw in enumerate(rows_of(reply, "items"), 1):
            eid = str(raw.get("episode_id") or "")
            if eid not in ids:
                continue
            accounted.add(eid)
            ok, user = grounded(str(raw.get("quote") or ""), by_id[eid], user_only)
            day = by_id[eid].day
            in_window = window is None or day is None or window[0] <= day <= window[1]
            candidates.append({"id": f"{tag}_c{k:03d}", "episode_id": eid, "item": str(raw.get("item") or "").strip(),
                               "quantity": quantity_of(raw.get("quantity")), "unit": str(raw.get("unit") or "").strip(),
                               "quote": str(raw.get("quote") or ""), "grounded": ok, "user_spoken": user,
                               "in_window": in_window})

    groups = batches(blocks, routes.count_batch, MAX_BATCH_CHARS["count"], lambda b: b.text)
    for n, group in enumerate(groups, 1):
        scan(group, f"b{n:03d}")
    missing = [b for b in blocks if b.episode_id not in accounted]
    for n, group in enumerate(batches(missing, routes.count_batch, MAX_BATCH_CHARS["count"], lambda b: b.text), 1):
        scan(group, f"r{n:03d}")  # one retry for the episodes no scan accounted for
    trace["unaccounted"] = [b.episode_id for b in blocks if b.episode_id not in accounted]
    valid = [c for c in candidates if c["grounded"] and c["in_window"] and c["item"]]
    merge: dict[str, dict[str, Any]] = {}
    if valid:
        trace["calls"] += 1
        listing = "\n".join(f"{c['id']} | episode {c['episode_id']} | {c['item']} | quantity: "
                            f"{'' if c['quantity'] is None else fmt_number(c['quantity'])} {c['unit']} | "
                            f"quote: {c['quote']}" for c in valid)
        try:
            reply = ask_json(client, "answer_count", MERGE_IDS, add, question_date_line=date_line(question),
                          question=question.question, candidates=listing)
            merge = {str(r.get("id")): r for r in rows_of(reply, "items")}
        except ValueError as exc:
            trace["errors"].append(f"consolidation: {exc}")
    kept = dedup(valid, merge, routes.count_dedup)
    trace.update({"candidates": len(candidates), "valid": len(valid), "kept": [c["id"] for c in kept],
                  "complete": not trace["unaccounted"] and not trace["errors"]})
    lines = "\n".join(f"- {c['item']} ({'' if c['quantity'] is None else fmt_number(c['quantity'])} "
                      f"{c['unit']}".rstrip() + f"; episode {c['episode_id']})" for c in kept)
    if not kept:
        trace["outcome"] = "fallback: no grounded item"
        return None, trace, ""
    note = f"Items found by a checked scan of the episodes:\n{lines}"
    mode, answer = count_total(question.question, kept)
    if routes.count_cumulative and mode == "count":
        in_window = [b for b in blocks if window is None or b.day is None or window[0] <= b.day <= window[1]]
        total = cumulative_total(in_window, question.question)
        if total is not None:  # the user's own running total overrides the items found
            answer, mode = str(total[0]), "cumulative"
            trace["cumulative"] = {"total": total[0], "episode_id": total[1], "words": total[2]}
    trace["mode"] = mode
    if routes.count_complete_gate and not trace["complete"]:
        trace["outcome"] = "fallback: evidence incomplete (completeness gate)"
        return None, trace, note
    trace["outcome"] = "answered"
    return answer, trace, note
