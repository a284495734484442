"""What the routes read: the buffer parsed into episodes and turns, words and verbatim quotes, one
JSON call, and the numbers a reply states."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Callable, Optional

from common.core import prompts
from common.core.llm import Completion, LLMCallError, LLMClient, parse_json_object
from common.core.schema import Question
from common.method.routes.dates import parse_date

MAX_BATCH_CHARS = {"count": 45000, "temporal": 30000}


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
    """One episode of the buffer: its id, session date, rendered text, turns and source session."""

    episode_id: str
    date_text: str
    text: str
    turns: list[Turn] = field(default_factory=list)
    session_id: str = ""  # the original session the episode was cut from (the header's second field)

    @property
    def day(self) -> Optional[date]:
        return parse_date(self.date_text)


def parse_block(text: str) -> Optional[Block]:
    lines = text.split("\n")
    m = HEADER_RE.match(lines[0]) if lines else None
    if not m:
        return None
    block = Block(m.group(1), m.group(3).strip(), text, session_id=m.group(2).strip())
    for line in lines[1:]:
        t = TURN_RE.match(line)
        if t:
            block.turns.append(Turn(t.group(1), t.group(2), t.group(3)))
        elif block.turns and not line.startswith(IMAGE_LINE):
            block.turns[-1].text += "\n" + line  # a turn whose text runs over several lines
    return block


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


def ask_json(client: LLMClient, role: str, ids: tuple[str, str], add: Add, system: Optional[dict[str, Any]] = None,
             max_tokens: Optional[int] = None, **slots: Any) -> dict[str, Any]:
    """One JSON call; raises ValueError('<cause>: ...') when it failed or its reply is not an object.
    ``system``: slots of the system template; ``max_tokens``: this call's budget (None: the role's)."""
    messages = [{"role": "system", "content": prompts.fill(ids[0], **system) if system else prompts.load(ids[0])},
                {"role": "user", "content": prompts.fill(ids[1], **slots)}]
    try:
        # Only a set budget is passed: a call without one is the request it always was.
        c = (client.complete(role, messages, json_mode=True, prompt_id=ids[1], max_tokens=max_tokens) if max_tokens
             else client.complete(role, messages, json_mode=True, prompt_id=ids[1]))
    except LLMCallError as exc:
        raise ValueError(f"{exc.cause}: {exc}") from exc
    add(c, ids[1], role)
    try:
        return parse_json_object(c.text)
    except ValueError as exc:
        raise ValueError(f"invalid_reply: {exc}") from exc


def date_line(question: Question) -> str:
    return f"Question date: {question.question_date}\n" if question.question_date else ""


def rows_of(reply: dict[str, Any], key: str) -> list[dict[str, Any]]:
    v = reply.get(key)
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def quantity_of(v: Any) -> Optional[float]:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    m = re.search(r"-?\d+(?:,\d{3})*(?:\.\d+)?", str(v or ""))
    return float(m.group(0).replace(",", "")) if m else None


def singular(word: str) -> str:
    w = word.lower().strip(" .")
    return w[:-1] if w.endswith("s") and not w.endswith("ss") else w


def fmt_number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}".rstrip("0").rstrip(".")
