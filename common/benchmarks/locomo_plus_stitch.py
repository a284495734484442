"""LoCoMo-Plus stitching: where a Cognitive item's cue and trigger go in its LoCoMo conversation.

The official code is ``data/build_conv.py`` and ``data/unified_input.py`` of xjtuleeyf/Locomo-Plus
at 059f4e3d (read there; nothing is copied). What it does, and what is reproduced here:

* **Pairing.** ``unified_input.py`` (the evaluation's input) pairs item ``i`` with conversation
  ``i mod 10`` of ``locomo10.json`` (round-robin). ``build_conv.py``'s own ``__main__`` draws the
  conversation with an unseeded ``random.choice``, so its stitched file differs on every run.
  ``pairing: round_robin`` (default) is the former; ``random`` is the latter, seeded here
  (``random.Random(seed).choice`` in item order) so that it can be repeated.
* **The time gap.** ``parse_time_gap`` reads the first ``<number> week(s)|month(s)|year(s)`` of
  the item's ``time_gap`` ("two weeks later" -> 14 days; a month is 30 days, a year 365; "a"/"an"
  count 1). Anything else ("several months later", "a couple of months later") matches nothing and
  becomes **0 days** (15 of the 401 items). ``time_gaps: extended`` also reads "a couple of" as 2,
  "a few" and "several" as 3, and a number of days (the harness's reading; none of it is official).
* **Placement.** The trigger is dated 7 days after the conversation's last session; the cue
  ``gap`` days before the trigger. Sessions, cue and trigger are sorted by date (a stable sort, so
  a cue dated exactly at a session comes after it). A gap of 7 days or less (or one that did not
  parse) therefore puts the cue after every session, right before its trigger (33 of 401 items:
  flagged, and reported as a subset); a gap longer than the conversation puts it first.
* **Speakers.** The cue and trigger are ``A:``/``B:`` lines; ``A`` becomes the conversation's
  ``speaker_a`` and every other line's speaker ``speaker_b`` (``map_speaker``).
* **Dates.** The stitched dialogue the official evaluation sends has no date line anywhere
  (``unified_input._stitch_dialogue_for_plus`` prints ``<speaker> said, "<text>"`` lines only,
  and no image captions), so the time gap that placed the cue is invisible to the system; its own
  prompt prefix still says "the date of each conversation is written at the beginning".
  ``context: official`` gives the stitched memory's sessions no date and no images; ``dated``
  keeps the LoCoMo sessions as they are and dates the cue and the question.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Optional, Sequence

PAIRINGS = ("round_robin", "random")
TIME_GAPS = ("official", "extended")
CONTEXTS = ("official", "dated")

# The official parser's number words and its one pattern (build_conv.parse_time_gap).
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
                "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_OFFICIAL_GAP = re.compile(r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a|an)\b\s*"
                           r"(week|weeks|month|months|year|years)\b")
# time_gaps: extended (the harness's reading of the vague phrases the official pattern misses).
VAGUE_WORDS = {"a couple of": 2, "couple of": 2, "a few": 3, "few": 3, "several": 3}
_EXTENDED_GAP = re.compile(r"\b(\d+|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|a|an|"
                           r"a couple of|couple of|a few|few|several)\s+"
                           r"(day|days|week|weeks|month|months|year|years)\b")
UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
QUERY_AFTER_DAYS = 7  # the trigger: one week after the conversation's last session (compute_insertion)
# LoCoMo's session dates ("1:56 pm on 8 May, 2023"), parsed as the official code parses them.
LOCOMO_DATE = "%I:%M %p on %d %B, %Y"


@dataclass(frozen=True)
class Gap:
    """A time gap as read: its days and whether a pattern matched at all."""

    days: int
    parsed: bool


def parse_time_gap(text: str, extended: bool = False) -> Gap:
    """The official ``parse_time_gap`` (``extended``: with the vague phrases read too).

    The official function returns 0 both for "no match" and for a gap it read as zero days; the
    ``parsed`` flag keeps them apart (the report's "time gap not parsed" subset).
    """
    s = text.lower().strip()
    m = _OFFICIAL_GAP.search(s)
    if m is None and extended:
        m = _EXTENDED_GAP.search(s)
    if m is None:
        return Gap(0, False)
    number, unit = m.groups()
    if number.isdigit():
        count = int(number)
    elif number in ("a", "an"):
        count = 1
    else:
        count = NUMBER_WORDS.get(number, VAGUE_WORDS.get(number, 0))
    return Gap(count * UNIT_DAYS[unit.rstrip("s")], True)


def session_time(text: str) -> datetime:
    """A LoCoMo session date as the official code reads it (``ValueError`` otherwise)."""
    return datetime.strptime(text, LOCOMO_DATE)


def locomo_date(when: datetime) -> str:
    """A date written the way LoCoMo writes its session dates ("9:05 am on 3 March, 2023")."""
    hour = when.hour % 12 or 12
    return f"{hour}:{when.minute:02d} {'am' if when.hour < 12 else 'pm'} on {when.day} {when:%B}, {when.year}"


def parse_ab(text: str) -> list[tuple[str, str]]:
    """``(A|B, text)`` for each line starting ``A:`` or ``B:`` (stripped), as ``parse_ab_dialogue``."""
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("A:") or line.startswith("B:"):
            out.append((line[0], line[2:].strip()))
    return out


def speaker_of(tag: str, speaker_a: str, speaker_b: str) -> str:
    """``map_speaker``: ``A`` is speaker_a, anything else speaker_b."""
    return speaker_a if tag == "A" else speaker_b


def pair(n_items: int, n_conversations: int, pairing: str = "round_robin", seed: int = 42) -> list[int]:
    """The conversation index of each item: ``i mod n`` (round-robin), or a seeded ``random.choice``."""
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing: expected one of {', '.join(PAIRINGS)}, got {pairing!r}")
    if pairing == "round_robin":
        return [i % n_conversations for i in range(n_items)]
    rng = random.Random(seed)
    indices = list(range(n_conversations))
    return [rng.choice(indices) for _ in range(n_items)]


@dataclass(frozen=True)
class Placement:
    """Where one item's cue lands among its conversation's sessions.

    ``order`` lists the stitched events in time order: a session's 0-based index, or ``CUE``; the
    trigger is always after them (it is the question). ``cue_idx`` is the official value: the last
    session dated at or before the cue (None when the cue comes first).
    """

    order: tuple[int, ...]
    gap: Gap
    cue_time: datetime
    query_time: datetime
    cue_idx: Optional[int]

    @property
    def cue_position(self) -> int:
        """The cue's 0-based place among the stitched sessions."""
        return self.order.index(CUE)

    @property
    def sessions_after_cue(self) -> int:
        return len(self.order) - 1 - self.cue_position

    @property
    def cue_before_trigger(self) -> bool:
        """No session between the cue and its trigger."""
        return self.sessions_after_cue == 0


CUE = -1


def place(session_times: Sequence[datetime], time_gap: str, extended: bool = False) -> Placement:
    """``compute_insertion`` and ``build_context``'s stable sort by date."""
    gap = parse_time_gap(time_gap, extended)
    query_time = session_times[-1] + timedelta(days=QUERY_AFTER_DAYS)
    cue_time = query_time - timedelta(days=gap.days)
    cue_idx = None
    for i, t in enumerate(session_times):
        if t <= cue_time:
            cue_idx = i
        else:
            break
    events = [(t, i) for i, t in enumerate(session_times)] + [(cue_time, CUE), (query_time, len(session_times))]
    events.sort(key=lambda e: e[0])  # stable: a cue dated at a session's time comes after it
    order = tuple(i for _, i in events if i != len(session_times))
    if [i for _, i in events][-1] != len(session_times):
        raise ValueError("a session is dated after the trigger (sessions out of date order)")
    return Placement(order, gap, cue_time, query_time, cue_idx)
