"""``answer.routes.*``: the switches of the answer routes of one run."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


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
    # The counting ledger as the authors' consolidation and _normalize_audit (fifth fidelity pass).
    count_sessions: bool = False
    count_item_dates: bool = False
    count_scan_context: bool = False
    count_reference: str = "filter"
    count_merge_tokens: Optional[int] = None
    count_cumulative_from: str = "turns"
    count_inactive: bool = False
    guard_stage: str = "answer"

    def any_call(self) -> bool:
        return self.relative_age or self.temporal or self.count or self.order
