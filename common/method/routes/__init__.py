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

The package, one module per concern: ``switches`` (the ``Routes`` switches), ``wording`` (which route a
question asks for), ``dates``, ``evidence`` (the buffer parsed, quotes grounded, one JSON call),
``guards`` (date and overlap guards), ``counting``, ``temporal``, ``ordering`` (operator audits and
moves) and ``dispatch`` (the hook the answer step calls).
"""
from common.method.routes.counting import (
    COUNT_IDS,
    MERGE_IDS,
    REFERENCE_IDS,
    count_ledger,
    count_total,
    cumulative_total,
    dedup,
    reference_event,
    reference_wanted,
)
from common.method.routes.dates import elapsed, named_dates, parse_date, question_window, resolve_date, shift
from common.method.routes.dispatch import Prepared, run_routes
from common.method.routes.evidence import Block, Turn, grounded, normalize, parse_block, stems
from common.method.routes.guards import add_by_dates, add_by_overlap, overlap_limit, overlap_score, window_filter
from common.method.routes.ordering import ORDER_IDS, move_rows, order_audit, pick_ordered
from common.method.routes.switches import Routes
from common.method.routes.temporal import (
    CHAIN_IDS,
    INSUFFICIENT,
    LEDGER_ANSWER_IDS,
    REPAIR_IDS,
    TEMPORAL_IDS,
    TWO_QUOTES_RE,
    age_chain,
    duration_text,
    evidence_gate,
    ledger_answer,
    temporal_ledger,
)
from common.method.routes.wording import (
    FIRST_PERSON_RE,
    guard_wanted,
    operator_of,
    route_of,
    temporal_wording,
)

__all__ = [
    "CHAIN_IDS", "COUNT_IDS", "FIRST_PERSON_RE", "INSUFFICIENT", "LEDGER_ANSWER_IDS", "MERGE_IDS", "ORDER_IDS",
    "REFERENCE_IDS", "REPAIR_IDS", "TEMPORAL_IDS", "TWO_QUOTES_RE", "Block", "Prepared", "Routes", "Turn",
    "add_by_dates", "add_by_overlap", "age_chain", "count_ledger", "count_total", "cumulative_total", "dedup",
    "duration_text", "elapsed", "evidence_gate", "grounded", "guard_wanted", "ledger_answer", "move_rows",
    "named_dates", "normalize", "operator_of", "order_audit", "overlap_limit", "overlap_score", "parse_block",
    "parse_date", "pick_ordered", "question_window", "reference_event", "reference_wanted", "resolve_date",
    "route_of", "run_routes", "shift", "stems", "temporal_ledger", "temporal_wording", "window_filter",
]
