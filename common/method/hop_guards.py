"""Stage 06: the worded guards of the authors' LongMemEval retrieval (``longmemeval_retrieval.retrieve_one``).

``retrieve.broad_state_lookup``: a before/after question about items, devices or moves widens each
hop's dense and point fallback budgets to 48 episodes. ``answer.routes.guard_stage: retrieval``: the
date-window and user-turn overlap guards run here, per hop and before its bridge, as theirs do
(``common.method.routes.guards.hop_guard_ids``), so the bridge sees their episodes and the answer
ranking orders them with the rest; the answer step then adds nothing.
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, Optional

from common.core.config import ScopeBudget
from common.core.schema import Episode, Plan, Question
from common.method.render import MemoryView, render_buffer
from common.method.routes import Routes
from common.method.routes.evidence import Block, parse_block
from common.method.routes.guards import hop_guard_ids

# The authors' broad_state_lookup wording: an ordering word and a word about an item, a device or a move.
BROAD_ORDER_RE = re.compile(r"\b(before|after|previous|earlier|later)\b", re.I)
BROAD_THING_RE = re.compile(r"\b(gadget|device|appliance|product|item|move|moved|relocat)\w*", re.I)
BROAD_STATE_K = 48


def broad_state_lookup(question: str) -> bool:
    """A before/after question about items, devices or moves (``retrieve.broad_state_lookup``)."""
    return bool(BROAD_ORDER_RE.search(question) and BROAD_THING_RE.search(question))


def widened(budget: ScopeBudget) -> ScopeBudget:
    """The hop budget raised to at least 48 dense and 48 fallback episodes (no cap stays no cap)."""
    fallback = None if budget.fallback_k is None else max(budget.fallback_k, BROAD_STATE_K)
    return replace(budget, dense_k=max(budget.dense_k, BROAD_STATE_K), fallback_k=fallback)


class HopGuards:
    """The date-window and overlap guards of one memory's retrieval (``guard_stage: retrieval``)."""

    def __init__(self, routes: Routes, view: MemoryView, episodes: list[Episode], include_images: bool) -> None:
        self.routes = routes
        self.view, self.episodes, self.include_images = view, episodes, include_images
        self._pool: Optional[list[Block]] = None

    def pool(self) -> list[Block]:
        """Every episode of the memory as the buffer renders it, parsed once."""
        if self._pool is None:
            blocks = (parse_block(render_buffer(self.view, [e], self.include_images)) for e in self.episodes)
            self._pool = [b for b in blocks if b is not None]
        return self._pool

    def added(self, question: Question, plan: Plan, positions: list[int]) -> tuple[list[int], dict[str, Any]]:
        """The positions the guards add to a hop holding ``positions``, and what they did."""
        at = {e.episode_id: i for i, e in enumerate(self.episodes)}
        ids, log = hop_guard_ids(question, plan, self.pool(), [self.episodes[p].episode_id for p in positions],
                                 self.routes)
        return [at[e] for e in ids], log
