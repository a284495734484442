"""A row whose upstream row changed (e.g. a failed plan redone) is redone; the others are kept."""
from __future__ import annotations

import json

from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages


def test_a_changed_plan_redoes_its_retrieval_and_answer_only(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages("configs/locomo.yaml", sets)
    plans_path = run.path("plans")
    plans = rows(plans_path)
    target = plans[0]["qid"]
    # What a redone plan looks like to the stages downstream: the same question, another plan.
    plans[0]["plan"]["hops"][0]["purpose"] = "a different purpose after the plan was redone"
    old_type = plans[0]["plan"]["reasoning_type"]
    plans[0]["plan"]["reasoning_type"] = "aggregation" if old_type != "aggregation" else "point"
    plans_path.write_text("".join(json.dumps(p) + "\n" for p in plans))
    before_ret = {r["qid"]: r for r in rows(run.path("retrievals"))}
    before_ans = {r["qid"]: r for r in rows(run.path("answers"))}
    answer_requests = fake_server.counts_by_kind()["answer"]

    run_stages("configs/locomo.yaml", sets, ["retrieve", "answer"])
    after_ret = {r["qid"]: r for r in rows(run.path("retrievals"))}
    after_ans = {r["qid"]: r for r in rows(run.path("answers"))}
    assert after_ret[target]["input_digest"] != before_ret[target]["input_digest"]
    for qid in before_ret:
        if qid != target:
            assert after_ret[qid] == before_ret[qid]
            assert after_ans[qid] == before_ans[qid]
    # The answer prompt carries the plan, so exactly one new answer request was paid for.
    assert fake_server.counts_by_kind()["answer"] == answer_requests + 1
    assert after_ans[target]["input_digest"] != before_ans[target]["input_digest"]
    # Nothing changed now: a rerun keeps every row.
    paid = fake_server.request_count
    run_stages("configs/locomo.yaml", sets, ["retrieve", "answer", "judge"])
    assert fake_server.request_count <= paid + 1  # at most the re-judged answer, if its text changed
    settled = fake_server.request_count
    run_stages("configs/locomo.yaml", sets, ["retrieve", "answer", "judge"])
    assert fake_server.request_count == settled
