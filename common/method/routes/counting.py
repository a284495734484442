"""The counting ledger (``answer.routes.count``): batch scans, a retry, one consolidation call,
then grounding, scope, dedup and the total in Python."""
from __future__ import annotations

import re
from datetime import date, timedelta
from typing import Any, Optional

from common.core.llm import LLMClient
from common.core.schema import Plan, Question
from common.method.plan import compact_plan
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
from common.method.routes.switches import Routes, budget
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
        if row.get("in_scope") is False and not it.get("scoped"):  # a dated item: the window decided
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
SIDE_RE = re.compile(r"\b(before|after)\b", re.I)


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


def reference_wanted(question: Question, since: bool = True) -> bool:
    """A count bounded by a named event (before/after, and since unless ``since`` is false, as the
    authors' reference call), not by a calendar window."""
    pattern = REFERENCE_RE if since else SIDE_RE
    return bool(pattern.search(question.question)) and \
        question_window(question.question, parse_date(question.question_date)) is None


def reference_event(client: LLMClient, question: Question, blocks: list[Block], add: Add,
                    trace: dict[str, Any], routes: Optional[Routes] = None) -> Optional[tuple[str, date]]:
    """Before/after counting: one call names the reference event in the first 20 episodes; Python keeps
    it only when its quote is the user's, verbatim, and dates it. (before|after, the date) or None."""
    routes = routes or Routes()
    m = REFERENCE_RE.search(question.question)
    if not m or not reference_wanted(question):
        return None
    shown = blocks[:20]
    trace["calls"] += 1
    try:
        reply = ask_json(client, "answer_count", REFERENCE_IDS, add, max_tokens=budget(routes, "count_reference"),
                         question_date_line=date_line(question), question=question.question,
                         episodes="\n\n".join(b.text for b in shown))
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


def reference_shown(client: LLMClient, question: Question, blocks: list[Block], add: Add,
                    trace: dict[str, Any], routes: Routes) -> str:
    """``count_reference: shown`` (the authors'): for a before/after count (not "since"), one call names
    the reference event in the first 20 episodes, and its reply is SHOWN to the scan and consolidation
    calls, which decide the side of each item; no Python filter. The lines to show ('' for none)."""
    if not reference_wanted(question, since=False):
        return ""
    trace["calls"] += 1
    try:
        reply = ask_json(client, "answer_count", REFERENCE_IDS, add, max_tokens=budget(routes, "count_reference"),
                         question_date_line=date_line(question), question=question.question,
                         episodes="\n\n".join(b.text for b in blocks[:20]))
    except ValueError as exc:
        trace["errors"].append(f"reference: {exc}")
        return ""
    fields = {k: str(reply.get(k) or "").strip() for k in ("event", "episode_id", "quote", "event_date")}
    trace["reference"] = {**fields, "outcome": "shown to the scan and consolidation"}
    if not fields["event"]:
        return ""
    return (f"\nReference event the question counts before or after: {fields['event']} (date: "
            f"{fields['event_date'] or 'not resolved'}; episode {fields['episode_id'] or 'none'}; "
            f"quote: {fields['quote'] or 'none'})")


def scan_context(question: Question, plan: Plan, window: Optional[tuple[date, date]], reference: str,
                 routes: Routes) -> str:
    """What the scan and consolidation calls are shown besides the question (the authors' "authoritative
    query window / named-event reference" and retrieval plan): '' with both switches off."""
    out = ""
    if routes.count_scan_context:
        span = (f"{window[0].isoformat()} to {window[1].isoformat()}, computed from the question date; only "
                f"instances inside it count" if window else "none named by the question")
        out += f"\nQuestion window: {span}\nRetrieval plan:\n{compact_plan(plan, [])}"
    return out + reference


ITEM_DATE_RULE = (" For each instance give its event_date: resolve a relative date (\"last Thursday\", \"two weeks "
                  "ago\") against the date of the episode that states it, and leave it empty when it cannot be "
                  "resolved safely.")
ITEM_STATE_RULE = (" For each instance give its state: inactive when an episode says it was sold, given away, "
                   "returned, cancelled, removed or replaced; uncertain when nothing says whether it still holds.")
SESSION_RULE = (" Each candidate names the original session it was said in. Within one session, repeated descriptions "
                "of the same completed action are one occurrence (mark the later ones duplicates, high) unless the "
                "text says it happened again (twice, again, another time, a second batch). Across sessions the "
                "default is the opposite: keep occurrences apart unless a later session clearly retells the very "
                "same event; the same activity, object or date alone does not make them one.")
# "How many ... do I (still) have / own / currently": a current inventory, where an item the user no
# longer holds does not count (the authors' exclusion of inactive items for current-inventory wording).
INVENTORY_RE = re.compile(r"\b(currently|current|still|own|have|inventory|active)\b", re.I)
OCCURRENCE_RE = re.compile(r"\bhow many times\b|\b(before|after|between)\b|\b(typical|usual|normally|per) week\b|"
                           r"\ba week\b", re.I)


def inventory_question(question: str) -> bool:
    """A count of distinct things currently held (not occurrences, not a bounded or weekly count)."""
    return bool(INVENTORY_RE.search(question)) and not OCCURRENCE_RE.search(question)


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
    shown = routes.count_reference_event and routes.count_reference == "shown"
    reference = reference_event(client, question, blocks, add, trace, routes) \
        if routes.count_reference_event and not shown else None
    if reference is not None:  # the reference event bounds the window on its side
        side, ref = reference
        window = (date.min, ref - timedelta(days=1)) if side == "before" else (ref + timedelta(days=1), date.max)
    context = scan_context(question, plan, window, reference_shown(client, question, blocks, add, trace, routes)
                           if shown else "", routes)
    item_fields = ((', "event_date": "YYYY-MM-DD or empty"' if routes.count_item_dates else "")
                   + (', "state": "active, inactive or uncertain"' if routes.count_inactive else ""))
    item_rules = ((ITEM_DATE_RULE if routes.count_item_dates else "")
                  + (ITEM_STATE_RULE if routes.count_inactive else ""))

    def scan(group: list[Block], tag: str) -> None:
        trace["calls"] += 1
        try:
            retry = budget(routes, "count_retry") if tag.startswith("r") else None  # theirs: 2200 for a retry
            reply = ask_json(client, "answer_count", COUNT_IDS, add, max_tokens=retry,
                             question_date_line=date_line(question),
                             question=question.question, scan_context=context, item_rules=item_rules,
                             item_fields=item_fields, episodes="\n\n".join(b.text for b in group))
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
            # count_item_dates (the authors' _normalize_audit): an item is scoped by its OWN event date
            # when it has one (undated: the consolidation's in_scope decides); else by its episode's date.
            event = parse_date(str(raw.get("event_date") or "")) if routes.count_item_dates else None
            day = event if routes.count_item_dates else by_id[eid].day
            in_window = window is None or day is None or window[0] <= day <= window[1]
            candidates.append({"id": f"{tag}_c{k:03d}", "episode_id": eid, "item": str(raw.get("item") or "").strip(),
                               "quantity": quantity_of(raw.get("quantity")), "unit": str(raw.get("unit") or "").strip(),
                               "quote": str(raw.get("quote") or ""), "grounded": ok, "user_spoken": user,
                               "in_window": in_window, "session": by_id[eid].session_id,
                               **({"event_date": event.isoformat() if event else "",
                                   "scoped": bool(event and window)} if routes.count_item_dates else {}),
                               **({"state": str(raw.get("state") or "").strip().lower()}
                                  if routes.count_inactive else {})})

    groups = batches(blocks, routes.count_batch, MAX_BATCH_CHARS["count"], lambda b: b.text)
    for n, group in enumerate(groups, 1):
        scan(group, f"b{n:03d}")
    missing = [b for b in blocks if b.episode_id not in accounted]
    for n, group in enumerate(batches(missing, routes.count_batch, MAX_BATCH_CHARS["count"], lambda b: b.text), 1):
        scan(group, f"r{n:03d}")  # one retry for the episodes no scan accounted for
    trace["unaccounted"] = [b.episode_id for b in blocks if b.episode_id not in accounted]
    valid = [c for c in candidates if c["grounded"] and c["in_window"] and c["item"]]
    merge = consolidate(client, question, valid, context, routes, add, trace) if valid else {}
    if routes.count_inactive:  # the consolidation may correct an item's state, as theirs
        for c in valid:
            c["state"] = str(merge.get(c["id"], {}).get("state") or c["state"]).strip().lower()
    kept = dedup(valid, merge, routes.count_dedup)
    if routes.count_inactive and inventory_question(question.question):
        trace["inactive"] = [c["id"] for c in kept if c["state"] == "inactive"]
        kept = [c for c in kept if c["state"] != "inactive"]
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
        if routes.count_cumulative_from == "items":
            total = items_total(candidates, question.question)
        else:
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


def consolidate(client: LLMClient, question: Question, valid: list[dict[str, Any]], context: str, routes: Routes,
                add: Add, trace: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The one consolidation call over the valid candidates: {candidate id: its row}. ``count_sessions``
    shows each candidate's session with the authors' same-session rule; ``count_item_dates`` its date."""
    trace["calls"] += 1
    columns = ["id", "episode"] + (["session"] if routes.count_sessions else []) + ["instance", "quantity"] \
        + (["date"] if routes.count_item_dates else []) + ["quote"]

    def line(c: dict[str, Any]) -> str:
        parts = [c["id"], f"episode {c['episode_id']}"] + ([f"session {c['session']}"] if routes.count_sessions
                                                           else [])
        parts += [c["item"], f"quantity: {'' if c['quantity'] is None else fmt_number(c['quantity'])} {c['unit']}"]
        parts += [f"date: {c['event_date'] or 'unknown'}"] if routes.count_item_dates else []
        return " | ".join(parts + [f"quote: {c['quote']}"])

    try:
        reply = ask_json(client, "answer_count", MERGE_IDS, add,
                         system={"session_rule": SESSION_RULE if routes.count_sessions else ""},
                         max_tokens=routes.count_merge_tokens, question_date_line=date_line(question),
                         question=question.question, scan_context=context, columns=" | ".join(columns),
                         candidates="\n".join(line(c) for c in valid),
                         merge_fields=', "state": "active, inactive or uncertain"' if routes.count_inactive else "")
    except ValueError as exc:
        trace["errors"].append(f"consolidation: {exc}")
        return {}
    return {str(r.get("id")): r for r in rows_of(reply, "items")}


# The authors' explicit totals among the ledger's own items (their _explicit_total_from_items): "N
# different one(s)" beside a verb of trying, visiting, buying, ...; or, for a "since ..." question, "I've
# added/collected/... N" said with "since" and a word of the question's since-clause.
_N = r"(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
DIFFERENT_ONES_RE = re.compile(rf"\b{_N}\s+different\s+ones?\b", re.I)
DONE_RE = re.compile(r"\b(tried|visited|eaten|used|bought|purchased|attended|seen|read|made)\b", re.I)
ADDED_N_RE = re.compile(rf"\b(?:i|we)(?:'ve|\u2019ve)?\s+(?:have\s+|had\s+)?(?:added|collected|acquired|gained|"
                        rf"accumulated|tried|visited|bought|purchased|attended|made)\s+{_N}\b", re.I)


def items_total(candidates: list[dict[str, Any]], question: str) -> Optional[tuple[int, str, str]]:
    """``count_cumulative_from: items``: the latest grounded, user-spoken ledger item that states a total
    (by its event date, then its place in the ledger); "how many times" counts occurrences instead."""
    q = question.lower()
    if not re.search(r"\bhow many\b", q) or re.search(r"\bhow many times\b", q):
        return None
    since = re.search(r"\bsince\s+(.+?)(?:\?|$)", q)
    anchor = {w for w in re.findall(r"[a-z0-9]+", since.group(1)) if len(w) >= 4} if since else set()
    found: Optional[tuple[str, int, tuple[int, str, str]]] = None
    for n, c in enumerate(candidates):
        if not (c["grounded"] and c["user_spoken"]):
            continue
        text = f"{c['quote']} {c['item']}"
        m = DIFFERENT_ONES_RE.search(text)
        if m and not DONE_RE.search(text):
            m = None
        if m is None and anchor and re.search(r"\bsince\b", text, re.I):
            m = ADDED_N_RE.search(text)
            m = m if m and anchor & set(re.findall(r"[a-z0-9]+", text.lower())) else None
        if m is None:
            continue
        key = (c.get("event_date") or "", n, (number_word(m.group(1)), c["episode_id"], m.group(0)))
        if found is None or key[:2] >= found[:2]:
            found = key
    return found[2] if found else None
