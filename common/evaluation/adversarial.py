"""LoCoMo category 5 (adversarial), scored by a stated rule and reported apart (``score.adversarial``).

446 LoCoMo questions ask about something the conversation never says; published results skip
them (so does the paper's overall here). With ``score.adversarial: true`` their answers, made by
stages 02-07 exactly like every other answer (the method never sees a category), are scored
without an LLM judge by ``RULE``, and 09_aggregate reports the result as its own column, never
inside the overall.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional, Sequence

from common.core.schema import Gold
from common.evaluation.metrics import locomo_f1
from common.evaluation.scoring import summarize

RULE = ("an answer abstains (counts correct) when it contains an official LoCoMo refusal phrase "
        "('no information available', 'not mentioned'; snap-research/locomo task_eval/evaluation.py) "
        "or is exactly 'Unknown' (the harness's answer prompts' abstention; case, surrounding "
        "whitespace and final punctuation ignored); anything else counts wrong; a failed answer is a failure")
_UNKNOWN = re.compile(r"\s*unknown\s*[.!]?\s*", re.IGNORECASE)


def abstains(answer: Optional[str]) -> Optional[int]:
    """1 if the answer abstains, 0 if it answers, None if there is no answer (a counted failure)."""
    if answer is None:
        return None
    official = locomo_f1(answer, "", 5) == 1.0  # the official category-5 phrase check
    return int(official or bool(_UNKNOWN.fullmatch(answer)))


def adversarial_block(gold: Sequence[Gold], answers: Mapping[str, Mapping[str, Any]], enabled: bool) -> dict[str, Any]:
    """The ``adversarial`` entry of metrics.json (LoCoMo category 5)."""
    items = [g for g in gold if g.category == 5]
    if not enabled:
        return {"status": "not scored (score.adversarial: false)", "questions": len(items)}
    labels = [abstains((answers.get(g.qid) or {}).get("answer")) for g in items]
    summary = summarize(labels, [g.memory_id for g in items])  # clustered by conversation, as the judged questions
    return {"status": "scored", "rule": RULE, "questions": len(items), **summary,
            "missing_answers": sum(1 for g in items if g.qid not in answers)}
