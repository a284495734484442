"""Dates: session and question dates, the day a statement puts its event on, and the windows and
days a question names relative to its own date."""
from __future__ import annotations

import calendar
import re
from datetime import date, timedelta
from typing import Optional

MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
WEEKDAYS = {d.lower(): i for i, d in enumerate(calendar.day_name)}
NUMBERS = {w: i for i, w in enumerate(("zero one two three four five six seven eight nine ten eleven "
                                         "twelve").split())}
NUMBERS.update({"a": 1, "an": 1, "couple of": 2, "a couple of": 2})
NUM = r"(\d+|a couple of|couple of|an|a|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
UNIT = r"(day|week|month|year)s?"


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


def number_word(word: str) -> int:
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
    m = re.search(rf"\b{NUM} {UNIT} ago\b", q)
    if m:
        return shift(observed, -number_word(m.group(1)), m.group(2)), m.group(0)
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
    m = re.search(rf"\b(?:past|last|previous) (?:{NUM} )?{UNIT}\b", q)
    if m:
        n = number_word(m.group(1)) if m.group(1) else 1
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


def first_named_dates(question: str, asked: Optional[date]) -> list[date]:
    """The days of the FIRST relative expression a question names, in the order the authors'
    retrieval guard tries them (today, a/one week ago, the day before yesterday, yesterday, the
    past/last weekend, last <weekday>); ``named_dates`` unions them all."""
    if asked is None:
        return []
    q = question.lower()
    if re.search(r"\btoday\b", q) and not re.search(r"\bbefore today\b", q):
        return [asked]
    if re.search(r"\b(a|one) week ago\b", q):
        return [asked - timedelta(days=7)]
    if "day before yesterday" in q:
        return [asked - timedelta(days=2)]
    if re.search(r"\byesterday\b", q):
        return [asked - timedelta(days=1)]
    if re.search(r"\b(past|last) weekend\b", q):
        sat = _last_weekend(asked)
        return [sat, sat + timedelta(days=1)]
    m = re.search(r"\blast (monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b", q)
    return [_last_weekday(asked, WEEKDAYS[m.group(1)])] if m else []


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
