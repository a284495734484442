"""The guards on the buffer: the user-turn overlap guard, the days the question names, and the
episodes dated after the question. ``answer.routes.guard_stage: retrieval`` runs the first two as the
authors' retrieval does, per hop before its bridge (``hop_guard_ids``, called by stage 06)."""
from __future__ import annotations

from datetime import date
from typing import Any, Optional

from common.core.schema import Plan, Question
from common.method.routes.dates import first_named_dates, parse_date
from common.method.routes.evidence import Block, stems
from common.method.routes.switches import Routes
from common.method.routes.wording import guard_wanted, temporal_wording


def overlap_limit(question: str, plan: Optional[Plan], routes: Routes, candidates: int) -> int:
    """How many episodes the user-turn overlap guard adds: ``user_overlap_temporal_max`` for temporal
    wording (the authors' 96), else ``user_overlap_max`` (48), and for counting wording nothing once
    the buffer holds ``user_overlap_below`` episodes or more (the authors' 32; 0: no condition)."""
    if temporal_wording(question, plan):
        return routes.user_overlap_temporal_max
    if routes.user_overlap_below and candidates >= routes.user_overlap_below:
        return 0
    return routes.user_overlap_max


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


def top_overlap(question: str, pool: list[Block], limit: int) -> list[Block]:
    """The ``limit`` episodes of the whole memory whose user turns share most content stems with the
    question (score as ``overlap_score``; ties: more shared stems, earlier date, id), as the authors'
    guard ranks them: some may already be selected, so fewer than ``limit`` may be new."""
    words = stems(question)
    scored = []
    for b in pool:
        shared = words & stems(" ".join(t.text for t in b.turns if t.user))
        if shared:
            scored.append((-sum(2 if len(w) >= 6 else 1 for w in shared), -len(shared), b.date_text, b.episode_id, b))
    return [s[-1] for s in sorted(scored, key=lambda s: s[:4])[:limit]]


def hop_guard_ids(question: Question, plan: Plan, pool: list[Block], selected: list[str],
                  routes: Routes) -> tuple[list[str], dict[str, Any]]:
    """``guard_stage: retrieval``: the episodes the authors' retrieval guards add to ONE hop before its
    bridge, and what they did. The date-window guard adds every memory episode observed on the days of
    the first relative expression the question names ((date, id) order, at most ``date_window_max``);
    the overlap guard adds the top ``user_overlap_temporal_max`` episodes overall for temporal wording,
    and for counting wording the top ``user_overlap_max`` only while the hop holds fewer than
    ``user_overlap_below`` episodes. The hop's episodes are then ranked with the rest."""
    have = list(selected)
    log: dict[str, Any] = {}
    if routes.date_window and routes.date_window_dates:
        days = set(first_named_dates(question.question, parse_date(question.question_date)))
        on_days = sorted((b for b in pool if b.day in days), key=lambda b: (b.date_text, b.episode_id))
        new = [b.episode_id for b in on_days[:routes.date_window_max] if b.episode_id not in have]
        if days:
            log["date_window_dates"] = {"dates": sorted(d.isoformat() for d in days), "added": new}
        have += new
    if routes.user_overlap and guard_wanted(question.question, plan):
        limit = overlap_limit(question.question, plan, routes, len(have))
        new = [b.episode_id for b in top_overlap(question.question, pool, limit) if b.episode_id not in have]
        log["user_overlap"] = {"limit": limit, "added": new}
        have += new
    return have[len(selected):], log
