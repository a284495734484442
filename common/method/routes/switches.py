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
    age_chain_checks: bool = False
    call_budgets: bool = False

    def any_call(self) -> bool:
        return self.relative_age or self.temporal or self.count or self.order


# answer.routes.call_budgets: the authors' max_tokens of the route calls that share a role here (their
# count retry 2200 and reference call 900, ledger answer 1200, citation repair 1000, age chain 1600).
CALL_BUDGETS = {"count_retry": 2200, "count_reference": 900, "ledger_answer": 1200, "citation_repair": 1000,
                "age_chain": 1600}


def budget(routes: Routes, call: str) -> Optional[int]:
    """A route call's own max_tokens under ``call_budgets`` (None: its role's)."""
    return CALL_BUDGETS[call] if routes.call_budgets else None
