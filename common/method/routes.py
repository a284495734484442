"""The generic answer routes of the authors' LongMemEval answer step (``answer.routes.*``).

Each route is chosen by the question's own wording or by the plan, never by a benchmark label
(question type, ``_abs`` suffix, category); each is a switch, off in the paper configurations:

* ``date_window`` (no call): buffer episodes dated after the question date are dropped; inside the
  ledgers, evidence outside a window the question names ("in the past two weeks", "last weekend")
  does not count either.
* ``user_overlap`` (no call): for a counting or temporal question, the episodes of the memory whose
  user turns share most content words with the question are added to the buffer.
* ``relative_age`` ("how many <unit> ago", role ``answer_temporal``): the user-turn temporal ledger
  resolves the event's date; the answer is the question date minus that date, in the asked unit.
* ``temporal`` (interval questions: "how many days between/since ...", role ``answer_temporal``):
  the same ledger; two dated, completed, user-spoken events give the elapsed time.
* ``count`` ("how many", "how much", "in total", or a plan whose target is a count; role
  ``answer_count``): batch scans of the candidate episodes, a retry for the episodes a scan did
  not account for, one consolidation call, then deterministic grounding, dedup and sum.
* ``order`` (first / latest / previous / sequence wording, role ``answer_order``): one audit call
  lists each dated state or instance of the asked thing with a quote; Python keeps the grounded
  ones, dates them, and picks the earliest, the latest, the one before the latest, or the order.

A route that cannot compute an answer falls back to the ordinary answer call (with the checked
ledger lines put before the episodes); everything it did is recorded in the row's ``steps``.

The authors' versions of these parts are switches too (all on in configs/longmemeval_code.yaml):
``date_window_dates`` (add the episodes of the days the question names), ``user_overlap_temporal_max``
/ ``user_overlap_below`` (their two limits and candidate condition), ``count_dedup: duplicate_of``,
``count_complete_gate``, ``count_cumulative``, ``count_reference_event`` (one call, role
``answer_count``), ``temporal_answer_call`` (ledger-answer call, evidence gate, one citation repair,
role ``answer_temporal``), ``temporal_completed_upgrade``, ``age_chain`` (anchor age +/- offset, role
``answer_temporal``), ``tenure_duration``, ``order_move_rows``, ``order_bare_last`` and
``order_previous_earliest``. A sub-switch acts only with its route on (``count``,
``temporal``/``relative_age``, ``order``, ``date_window``).
"""
from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Callable, Optional

from common.core import prompts
from common.core.llm import Completion, LLMCallError, LLMClient, parse_json_object
from common.core.schema import Plan, Question

COUNT_IDS = ("code_rules.answer_count_system", "code_rules.answer_count_user")
MERGE_IDS = ("code_rules.answer_count_merge_system", "code_rules.answer_count_merge_user")
REFERENCE_IDS = ("code_rules.answer_count_reference_system", "code_rules.answer_count_reference_user")
LEDGER_ANSWER_IDS = ("code_rules.answer_temporal_answer_system", "code_rules.answer_temporal_answer_user")
REPAIR_IDS = ("code_rules.answer_temporal_repair_system", "code_rules.answer_temporal_repair_user")
CHAIN_IDS = ("code_rules.answer_age_chain_system", "code_rules.answer_age_chain_user")
TEMPORAL_IDS = ("code_rules.answer_temporal_system", "code_rules.answer_temporal_user")
ORDER_IDS = ("code_rules.answer_order_system", "code_rules.answer_order_user")
INSUFFICIENT = "The conversations do not say enough to answer this."
MAX_BATCH_CHARS = {"count": 45000, "temporal": 30000}


@dataclass(frozen=True)
class Routes:
    """``answer.routes.*`` of one run."""

    date_window: bool = False
    user_overlap: bool = False
    user_overlap_max: int = 48
    relative_age: bool = False
    temporal: bool = False
    temporal_batch: int = 24
    count: bool = False
    count_batch: int = 10
    order: bool = False
    date_window_dates: bool = False
    date_window_max: int = 48
    user_overlap_temporal_max: int = 48
    user_overlap_below: int = 0
    count_dedup: str = "name_quantity"
    count_complete_gate: bool = False
    count_cumulative: bool = False
    count_reference_event: bool = False
    temporal_answer_call: bool = False
    temporal_completed_upgrade: bool = False
    age_chain: bool = False
    order_move_rows: bool = False
    order_bare_last: bool = False
    order_previous_earliest: bool = False
    tenure_duration: bool = False

    def any_call(self) -> bool:
        return self.relative_age or self.temporal or self.count or self.order


# --------------------------------------------------------------------------- the buffer, parsed
HEADER_RE = re.compile(r"^### Episode (\S+) \| ([^|\n]*) \| session date: (.*)$")
TURN_RE = re.compile(r"^\[([^\]\n]+)\] ([^:\n]+?): ?(.*)$")
IMAGE_LINE = "    [image "


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str

    @property
    def user(self) -> bool:
        s = self.speaker.lower()
        return not (s.endswith("(assistant)") or s == "assistant")


@dataclass
class Block:
    """One episode of the buffer: its id, session date, rendered text and turns."""

    episode_id: str
    date_text: str
    text: str
    turns: list[Turn] = field(default_factory=list)

    @property
    def day(self) -> Optional[date]:
        return parse_date(self.date_text)


def parse_block(text: str) -> Optional[Block]:
    lines = text.split("\n")
    m = HEADER_RE.match(lines[0]) if lines else None
    if not m:
        return None
    block = Block(m.group(1), m.group(3).strip(), text)
    for line in lines[1:]:
        t = TURN_RE.match(line)
        if t:
            block.turns.append(Turn(t.group(1), t.group(2), t.group(3)))
        elif block.turns and not line.startswith(IMAGE_LINE):
            block.turns[-1].text += "\n" + line  # a turn whose text runs over several lines
    return block


# --------------------------------------------------------------------------- dates
MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
WEEKDAYS = {d.lower(): i for i, d in enumerate(calendar.day_name)}
NUMBERS = {w: i for i, w in enumerate(("zero one two three four five six seven eight nine ten eleven "
                                         "twelve").split())}
NUMBERS.update({"a": 1, "an": 1, "couple of": 2, "a couple of": 2})
_NUM = r"(\d+|a couple of|couple of|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
_UNIT = r"(day|week|month|year)s?"


def parse_date(text: str) -> Optional[date]:
    """A session or question date: ``2023/05/20 (Sat) 12:00``, ``2023-05-20``, ``8 May, 2023``."""
    m = re.search(r"\b(\d{4})[/-](\d{1,2})[/-](\d{1,2})\b", text or "")
    try:
        if m:
            return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        m = re.search(r"\b(\d{1,2}) ([A-Za-z]+),? (\d{4})\b", text or "")
        if m and m.group(2).lower() in MONTHS:
            return date(int(m.group(3)), MONTHS[m.group(2).lower()], int(m.group(1)))
        m = re.search(r"\b([A-Za-z]+) (\d{1,2})(?:st|nd|rd|th)?,? (\d{4})\b", text or "")
        if m and m.group(1).lower() in MONTHS:
            return date(int(m.group(3)), MONTHS[m.group(1).lower()], int(m.group(2)))
    except ValueError:
        return None
    return None


def shift(day: date, n: int, unit: str) -> date:
    """``day`` moved by ``n`` units (months and years by the calendar, the day clamped)."""
    if unit == "day":
        return day + timedelta(days=n)
    if unit == "week":
        return day + timedelta(days=7 * n)
    months = n * (12 if unit == "year" else 1)
    y, m = divmod(day.year * 12 + day.month - 1 + months, 12)
    return date(y, m + 1, min(day.day, calendar.monthrange(y, m + 1)[1]))


def _number(word: str) -> int:
    return int(word) if word.isdigit() else NUMBERS.get(word.lower(), 1)


def _last_weekday(day: date, weekday: int) -> date:
    back = (day.weekday() - weekday) % 7
    return day - timedelta(days=back or 7)


def _last_weekend(day: date) -> date:
    """The Saturday of the latest weekend that ended before ``day``."""
    sunday = day - timedelta(days=(day.weekday() - 6) % 7 or 7)
    return sunday - timedelta(days=1)


def resolve_date(quote: str, observed: Optional[date]) -> tuple[Optional[date], str]:
    """The date a user statement puts its event on, relative expressions anchored to the day it was
    said (``observed``): (date or None, what it was read from)."""
    q = quote.lower()
    explicit = parse_date(quote)
    if explicit:
        return explicit, "explicit"
    if observed is None:
        return None, ""
    m = re.search(r"\b(\d{1,2})[/-](\d{1,2})\b", q)
    if m and 1 <= int(m.group(1)) <= 12 and 1 <= int(m.group(2)) <= 31:
        try:
            return date(observed.year, int(m.group(1)), int(m.group(2))), "month/day"
        except ValueError:
            pass
    m = (re.search(r"\b([a-z]+) (\d{1,2})(?:st|nd|rd|th)?\b", q)
         or re.search(r"\b(\d{1,2})(?:st|nd|rd|th)? of ([a-z]+)\b", q))
    if m:
        month, dd = (m.group(1), m.group(2)) if not m.group(1).isdigit() else (m.group(2), m.group(1))
        if month in MONTHS and len(month) > 2:
            try:
                d = date(observed.year, MONTHS[month], int(dd))
                return (d if d <= observed else date(observed.year - 1, d.month, d.day)), "month day"
            except ValueError:
                pass
    if "day before yesterday" in q:
        return observed - timedelta(days=2), "day before yesterday"
    if re.search(r"\byesterday\b", q):
        return observed - timedelta(days=1), "yesterday"
    m = re.search(rf"\b{_NUM} {_UNIT} ago\b", q)
    if m:
        return shift(observed, -_number(m.group(1)), m.group(2)), m.group(0)
    if re.search(r"\b(last|past) weekend\b", q):
        return _last_weekend(observed), "last weekend"
    m = re.search(r"\blast (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", q)
    if m:
        return _last_weekday(observed, WEEKDAYS[m.group(1)]), m.group(0)
    m = re.search(r"\blast (week|month|year)\b", q)
    if m:
        return shift(observed, -1, m.group(1)), m.group(0)
    if re.search(r"\b(today|this morning|this afternoon|tonight|just now)\b", q):
        return observed, "today"
    return None, ""


def question_window(question: str, asked: Optional[date]) -> Optional[tuple[date, date]]:
    """The inclusive date window a question names relative to its own date, if any."""
    if asked is None:
        return None
    q = question.lower()
    if re.search(r"\b(before|after)\b", q) and not re.search(r"\b(past|last|previous|within)\b", q):
        return None  # bounded by a named event, not by the calendar
    if re.search(r"\b(past|last|previous) weekend\b", q):
        sat = _last_weekend(asked)
        return sat, sat + timedelta(days=1)
    if re.search(r"\b(a|one) week ago\b", q):
        d = asked - timedelta(days=7)
        return d, d
    m = re.search(rf"\b(?:past|last|previous) (?:{_NUM} )?{_UNIT}\b", q)
    if m:
        n = _number(m.group(1)) if m.group(1) else 1
        return shift(asked, -n, m.group(2)), asked
    return None


def named_dates(question: str, asked: Optional[date]) -> list[date]:
    """The days a question names relative to its own date, as the authors' date-window guard reads
    them: today (not "before today"), yesterday, the day before yesterday, a/one week ago, the
    past/last weekend (both days), last <weekday> (a week back on the same weekday)."""
    if asked is None:
        return []
    q = question.lower()
    days: list[date] = []
    if re.search(r"\btoday\b", q) and not re.search(r"\bbefore today\b", q):
        days.append(asked)
    if "day before yesterday" in q:
        days.append(asked - timedelta(days=2))
    elif re.search(r"\byesterday\b", q):
        days.append(asked - timedelta(days=1))
    if re.search(r"\b(a|one) week ago\b", q):
        days.append(asked - timedelta(days=7))
    if re.search(r"\b(past|last) weekend\b", q):
        sat = _last_weekend(asked)
        days += [sat, sat + timedelta(days=1)]
    for m in re.finditer(r"\blast (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", q):
        days.append(_last_weekday(asked, WEEKDAYS[m.group(1)]))
    return sorted(set(days))


def elapsed(a: date, b: date, unit: str) -> int:
    """Whole units from ``a`` to ``b`` (weeks rounded from days; months and years by the calendar)."""
    if a > b:
        a, b = b, a
    days = (b - a).days
    if unit == "day":
        return days
    if unit == "week":
        return int(days / 7 + 0.5)
    months = (b.year - a.year) * 12 + b.month - a.month - (1 if b.day < a.day else 0)
    return months if unit == "month" else months // 12


# --------------------------------------------------------------------------- wording triggers
AGO_RE = re.compile(rf"\bhow many {_UNIT} ago\b", re.I)
ELAPSED_RE = re.compile(rf"\bhow (?:many {_UNIT}|long)\b.*\b(between|since|passed|elapsed|before|after)\b", re.I)
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


def overlap_limit(question: str, plan: Optional[Plan], routes: Routes, candidates: int) -> int:
    """How many episodes the user-turn overlap guard adds: ``user_overlap_temporal_max`` for temporal
    wording (the authors' 96), else ``user_overlap_max`` (48), and for counting wording nothing once
    the buffer holds ``user_overlap_below`` episodes or more (the authors' 32; 0: no condition)."""
    if temporal_wording(question, plan):
        return routes.user_overlap_temporal_max
    if routes.user_overlap_below and candidates >= routes.user_overlap_below:
        return 0
    return routes.user_overlap_max


# --------------------------------------------------------------------------- words and quotes
STOP = frozenset("""a an the and or but of to in on at for with by from about as is are was were be been being do
does did done have has had i me my mine we our you your it its this that these those there what which who whom
whose when where why how many much long ago did my get got go went since between before after first last total
in all any some than then so if not no yes can could would should will just also very really day days week weeks
month months year year's years time times".""".split())


def normalize(text: str) -> str:
    text = text.lower().replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"').replace("\u201d", '"')
    return " ".join(re.sub(r"[^\w$'%.,/-]+", " ", text).split())


def stems(text: str) -> set[str]:
    out = set()
    for w in re.findall(r"[a-z0-9]+", text.lower()):
        if w in STOP or len(w) < 3:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if w.endswith(suffix) and len(w) - len(suffix) >= 3:
                w = w[: -len(suffix)]
                break
        out.add(w)
    return out


def grounded(quote: str, block: Block, user_only: bool) -> tuple[bool, bool]:
    """(the quote is verbatim, after normalization, in a turn of the episode; that turn is the user's)."""
    q = normalize(quote)
    if len(q) < 3:
        return False, False
    hits = [t for t in block.turns if q in normalize(t.text)]
    user = any(t.user for t in hits)
    return bool(hits) and (user or not user_only), user


def overlap_score(question: str, block: Block) -> int:
    """The user-turn overlap guard's score: 2 per shared content stem of 6+ letters, else 1."""
    words = stems(question)
    said = stems(" ".join(t.text for t in block.turns if t.user))
    return sum(2 if len(w) >= 6 else 1 for w in words & said)


def add_by_overlap(question: str, blocks: list[Block], pool: list[Block], limit: int) -> tuple[list[Block], list[str]]:
    """The buffer plus up to ``limit`` pool episodes (not in it) with the best user-turn overlap."""
    have = {b.episode_id for b in blocks}
    scored = [(overlap_score(question, b), i, b) for i, b in enumerate(pool) if b.episode_id not in have]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:limit]
    added = [b for _, _, b in sorted(best, key=lambda s: s[1])]
    return blocks + added, [b.episode_id for b in added]


def add_by_dates(blocks: list[Block], pool: list[Block], days: list[date], limit: int) -> tuple[list[Block], list[str]]:
    """The buffer plus the pool episodes (not in it) observed on ``days``, in (date, id) order, at most
    ``limit``: the authors' date-window guard appends every episode of the dates the question names."""
    have = {b.episode_id for b in blocks}
    wanted = set(days)
    on_days = sorted((b for b in pool if b.episode_id not in have and b.day in wanted),
                     key=lambda b: (b.day or date.min, b.episode_id))[:limit]
    return blocks + on_days, [b.episode_id for b in on_days]


def window_filter(blocks: list[Block], asked: Optional[date]) -> tuple[list[Block], list[str]]:
    """The date-window guard: episodes dated after the question date are dropped."""
    if asked is None:
        return blocks, []
    dropped = [b.episode_id for b in blocks if b.day is not None and b.day > asked]
    return [b for b in blocks if b.episode_id not in set(dropped)], dropped


# --------------------------------------------------------------------------- calls
Add = Callable[[Completion, str, str], None]


def batches(blocks: list[Block], size: int, max_chars: int, text: Callable[[Block], str]) -> list[list[Block]]:
    out: list[list[Block]] = []
    cur: list[Block] = []
    chars = 0
    for b in blocks:
        n = len(text(b))
        if cur and (len(cur) >= size or chars + n > max_chars):
            out.append(cur)
            cur, chars = [], 0
        cur.append(b)
        chars += n
    return out + ([cur] if cur else [])


def _call(client: LLMClient, role: str, ids: tuple[str, str], add: Add, **slots: Any) -> dict[str, Any]:
    """One JSON call; raises ValueError('<cause>: ...') when it failed or its reply is not an object."""
    messages = [{"role": "system", "content": prompts.load(ids[0])},
                {"role": "user", "content": prompts.fill(ids[1], **slots)}]
    try:
        c = client.complete(role, messages, json_mode=True, prompt_id=ids[1])
    except LLMCallError as exc:
        raise ValueError(f"{exc.cause}: {exc}") from exc
    add(c, ids[1], role)
    try:
        return parse_json_object(c.text)
    except ValueError as exc:
        raise ValueError(f"invalid_reply: {exc}") from exc


def _date_line(question: Question) -> str:
    return f"Question date: {question.question_date}\n" if question.question_date else ""


def _list(reply: dict[str, Any], key: str) -> list[dict[str, Any]]:
    v = reply.get(key)
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


# --------------------------------------------------------------------------- counting ledger
def _quantity(v: Any) -> Optional[float]:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    m = re.search(r"-?\d+(?:,\d{3})*(?:\.\d+)?", str(v or ""))
    return float(m.group(0).replace(",", "")) if m else None


def _singular(word: str) -> str:
    w = word.lower().strip(" .")
    return w[:-1] if w.endswith("s") and not w.endswith("ss") else w


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}".rstrip("0").rstrip(".")


MONEY = {"$", "usd", "dollar", "dollars"}


def count_total(question: str, items: list[dict[str, Any]]) -> tuple[str, str]:
    """(mode, rendered answer) from the kept items: a sum of quantities when the question asks how
    much or names the items' unit ("how many hours"), else the number of distinct items."""
    q = question.lower()
    m = re.search(r"\bhow many ([a-z]+)", q)
    asked_unit = _singular(m.group(1)) if m else ""
    with_unit = [i for i in items if i["quantity"] is not None and _singular(i["unit"]) == asked_unit]
    if asked_unit and with_unit:
        total = sum(i["quantity"] for i in with_unit)
        return "sum", f"{_fmt(total)} {m.group(1) if m else ''}".strip()
    if re.search(r"\bhow much\b|\btotal (amount|cost|time)\b", q):
        numeric = [i for i in items if i["quantity"] is not None]
        if numeric:
            total = sum(i["quantity"] for i in numeric)
            units = {i["unit"].lower() for i in numeric}
            if units <= MONEY and units:
                return "sum", f"${_fmt(total)}"
            unit = numeric[0]["unit"] if len(units) == 1 else ""
            return "sum", f"{_fmt(total)} {unit}".strip()
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
                key = (b.day or date.min, n, (_number(word), b.episode_id, m.group(0)))
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
        reply = _call(client, "answer_count", REFERENCE_IDS, add, question_date_line=_date_line(question),
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
            reply = _call(client, "answer_count", COUNT_IDS, add, question_date_line=_date_line(question),
                          question=question.question, episodes="\n\n".join(b.text for b in group))
        except ValueError as exc:
            trace["errors"].append(f"{tag}: {exc}")
            return
        ids = {b.episode_id for b in group}
        accounted.update(str(r.get("episode_id")) for r in _list(reply, "episodes") if str(r.get("episode_id")) in ids)
        for k, raw in enumerate(_list(reply, "items"), 1):
            eid = str(raw.get("episode_id") or "")
            if eid not in ids:
                continue
            accounted.add(eid)
            ok, user = grounded(str(raw.get("quote") or ""), by_id[eid], user_only)
            day = by_id[eid].day
            in_window = window is None or day is None or window[0] <= day <= window[1]
            candidates.append({"id": f"{tag}_c{k:03d}", "episode_id": eid, "item": str(raw.get("item") or "").strip(),
                               "quantity": _quantity(raw.get("quantity")), "unit": str(raw.get("unit") or "").strip(),
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
                            f"{'' if c['quantity'] is None else _fmt(c['quantity'])} {c['unit']} | quote: {c['quote']}"
                            for c in valid)
        try:
            reply = _call(client, "answer_count", MERGE_IDS, add, question_date_line=_date_line(question),
                          question=question.question, candidates=listing)
            merge = {str(r.get("id")): r for r in _list(reply, "items")}
        except ValueError as exc:
            trace["errors"].append(f"consolidation: {exc}")
    kept = dedup(valid, merge, routes.count_dedup)
    trace.update({"candidates": len(candidates), "valid": len(valid), "kept": [c["id"] for c in kept],
                  "complete": not trace["unaccounted"] and not trace["errors"]})
    lines = "\n".join(f"- {c['item']} ({'' if c['quantity'] is None else _fmt(c['quantity'])} {c['unit']}".rstrip()
                      + f"; episode {c['episode_id']})" for c in kept)
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
            reply = _call(client, "answer_temporal", TEMPORAL_IDS, add, question_date_line=_date_line(question),
                          question=question.question, episodes="\n\n".join(user_turns_text(b) for b in group))
        except ValueError as exc:
            trace["errors"].append(f"b{n:03d}: {exc}")
            continue
        ids = {b.episode_id for b in group}
        for raw in _list(reply, "facts"):
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
        chained = age_chain(client, question, blocks, unit, add, trace)
        if chained is not None:
            trace["outcome"] = "answered by the relative-age chain"
            return chained, trace, note
    if routes.temporal_answer_call:
        answer = ledger_answer(client, question, blocks, facts, note, add, trace)
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
                  note: str, add: Add, trace: dict[str, Any]) -> str:
    """The authors' ledger-answer call over the checked facts, its evidence gate, and one
    citation-repair call when the ledger has facts but the answer abstained or failed the gate."""
    by_id = {b.episode_id: b for b in blocks}
    need = 2 if TWO_QUOTES_RE.search(question.question) else 1
    episodes = "\n\n".join(user_turns_text(b) for b in blocks if any(t.user for t in b.turns))
    ledger = note or "(no dated user statement)"

    def ask(ids: tuple[str, str], tag: str, draft: str = "") -> Optional[str]:
        trace["calls"] += 1
        try:
            reply = _call(client, "answer_temporal", ids, add, question_date_line=_date_line(question),
                          question=question.question, ledger=ledger, episodes=episodes,
                          **({"draft": draft or "(no answer)"} if ids == REPAIR_IDS else {}))
        except ValueError as exc:
            trace["errors"].append(f"{tag}: {exc}")
            return None
        answer = " ".join(str(reply.get("answer") or "").split())
        passed = evidence_gate(question.question, _list(reply, "evidence"), by_id)
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
    value = _quantity(raw.get("value"))
    if value is None or _singular(str(raw.get("unit") or "")) != unit or eid not in by_id:
        return None
    return value if grounded(quote, by_id[eid], user_only=True)[0] else None


def age_chain(client: LLMClient, question: Question, blocks: list[Block], unit: str, add: Add,
              trace: dict[str, Any]) -> Optional[str]:
    """The authors' relative-age chain: one call cites the target's own age ("N <unit> ago") or an
    anchor's age and the target's offset from that anchor; Python accepts the direct age, or anchor
    age + offset (before) / - offset (after) when both are cited, in the asked unit."""
    by_id = {b.episode_id: b for b in blocks}
    trace["calls"] += 1
    try:
        reply = _call(client, "answer_temporal", CHAIN_IDS, add, question_date_line=_date_line(question),
                      question=question.question, unit=unit,
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
        if anchor is not None and offset is not None and side in ("before", "after"):
            value = anchor + offset if side == "before" else anchor - offset
    trace["chain"] = {"value": value, "direct": direct is not None}
    if value is None or value < 0:
        return None
    return f"{_fmt(value)} {unit}{'' if value == 1 else 's'} ago"


# --------------------------------------------------------------------------- operator audits
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
                add: Add, routes: Routes = Routes()) -> tuple[Optional[str], dict[str, Any], str]:
    """(the answer or None, the trace, checked lines for the fallback answer)."""
    operator = operator_of(question.question, routes.order_bare_last)
    by_id = {b.episode_id: b for b in blocks}
    position = {b.episode_id: n for n, b in enumerate(blocks)}
    asked = parse_date(question.question_date)
    user_only = bool(FIRST_PERSON_RE.search(question.question))
    trace: dict[str, Any] = {"route": "order", "operator": operator, "episodes": len(blocks), "calls": 1,
                             "errors": []}
    try:
        reply = _call(client, "answer_order", ORDER_IDS, add, question_date_line=_date_line(question),
                      question=question.question, operator=operator,
                      episodes="\n\n".join(b.text for b in blocks) or "(no episodes retrieved)")
    except ValueError as exc:
        trace["errors"].append(str(exc))
        trace["outcome"] = "fallback: the audit call failed"
        return None, trace, ""
    rows = []
    for raw in _list(reply, "rows"):
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


# --------------------------------------------------------------------------- the hook
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
    if routes.date_window and routes.date_window_dates and pool_blocks:
        days = named_dates(question.question, asked)
        if days:
            blocks, added = add_by_dates(blocks, pool_blocks, days, routes.date_window_max)
            out.steps["date_window_dates"] = {"dates": [d.isoformat() for d in days], "added": added}
            changed = changed or bool(added)
    if routes.user_overlap and pool_blocks and guard_wanted(question.question, plan):
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
