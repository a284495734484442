"""The fifth fidelity pass of the LongMemEval answer routes against the authors' code
(RamonMeng/EnSIMem @8b819a5f, ``LongMemEval/longmemeval_generation.py`` and
``longmemeval_retrieval.py``; shared/spec/fidelity_audit.md rows 16-23).

Every scripted reply here carries only the fields its prompt asks for (the JSON example the prompt
itself shows): a reply that fills in what the code wants would hide the defect a real model shows.
Each test builds a small hand-made memory whose answer differs with the switch off.
"""
from __future__ import annotations

import json
from typing import Any, Optional

from common.core import prompts
from common.method import routes as r
from tests.fake_openai.scripted import CANDIDATE_RE
from tests.test_answer_routes import Stub, answer, block, retrieval

ASKED = "2023/08/20 (Sun) 10:00"


def prompted_fields(prompt_id: str, key: str) -> list[str]:
    """The field names of one ``key`` row in the JSON example the prompt template shows."""
    for line in prompts.load(prompt_id).splitlines():
        if line.startswith("{") and f'"{key}"' in line:
            rows = json.loads(line)[key]
            return list(rows[0])
    raise AssertionError(f"{prompt_id}: no JSON example with {key!r}")


def only_prompted(prompt_id: str, key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A reply of ``rows`` cut down to the fields the prompt names (what a real model returns)."""
    fields = prompted_fields(prompt_id, key)
    return {key: [{k: v for k, v in row.items() if k in fields} for row in rows]}


# --------------------------------------------------------------------------- section 1: the merge
def test_the_count_merge_merges_on_a_reply_with_only_the_prompted_fields():
    """The consolidation prompt asks for what the dedup reads (the authors' consolidation asks for
    ``duplicate_of`` and ``dedup_confidence=high``, and only that pair merges): a row that names the
    earlier candidate with the prompted confidence merges, so one class told twice counts once."""
    ret = retrieval(
        block("m::s1::episode_001", "2023/08/01", ("user", "I took a pottery class, it cost $40 on Monday.")),
        block("m::s1::episode_002", "2023/08/01", ("user", "That pottery class on Monday was $40 well spent.")),
        block("m::s2::episode_001", "2023/08/10", ("user", "I signed up for a second pottery class for $40.")))

    def reply(kind: str, text: str) -> Optional[dict[str, Any]]:
        if kind != "answer_count_merge":
            return None
        ids = [cid for cid, *_ in CANDIDATE_RE.findall(text)]
        rows = [{"id": cid, "in_scope": True, "scope_reason": "a pottery class",
                 "duplicate_of": ids[0] if n == 1 else "", "dedup_confidence": "high" if n == 1 else ""}
                for n, cid in enumerate(ids)]
        return only_prompted("code_rules.answer_count_merge_user", "items", rows)

    routes = r.Routes(count=True, count_dedup="duplicate_of")
    row = answer(Stub(reply), "How many pottery classes did I take?", ret, routes=routes, asked=ASKED)
    trace = row.steps["count"]
    assert trace["valid"] == 3 and len(trace["kept"]) == 2, trace
    assert row.answer == "2"
