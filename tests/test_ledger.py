"""Cost/latency ledger and Table 3 efficiency, recomputed by hand from the per-row call records."""
from __future__ import annotations

import json

import pytest

from common.pipeline import ledger
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages

PRICES = {"date": "d", "source": "s", "models": {"m-paid": {"input": 1.0, "output": 2.0}}}


def _w(path, rs):
    path.write_text("".join(json.dumps(r) + "\n" for r in rs))


def test_stage_entry_counts_paid_cached_failed_tokens_latency_and_cost():
    def call(p, c, lat, cached, model="m-paid"):
        return {"model": model, "usage": {"prompt_tokens": p, "completion_tokens": c}, "latency": lat, "cached": cached}

    rs = [{"qid": "a", "llm_calls": [call(100, 10, 1.0, False), call(50, 5, 0.0, True)]},
          {"qid": "b", "llm_calls": [call(200, 20, 3.0, False)], "fallback_used": True,
           "error": "invalid_reply: PlanError: hops[0].anchor is empty"},
          {"qid": "c", "llm_calls": [call(10, 1, 2.0, False, "unlisted")]}]
    e = ledger.stage_entry("05_plan", "plan", rs, PRICES)
    assert (e["calls"], e["paid"], e["cached"]) == (4, 3, 1)
    assert (e["prompt_tokens"], e["completion_tokens"]) == (360, 36)
    assert (e["paid_prompt_tokens"], e["paid_completion_tokens"]) == (310, 31)
    assert e["latency_mean"] == pytest.approx(2.0) and e["latency_p50"] == pytest.approx(2.0)
    assert e["cost_paid_usd"] == pytest.approx((300 * 1 + 30 * 2) / 1e6)
    assert e["cost_uncached_usd"] == pytest.approx((350 * 1 + 35 * 2) / 1e6)
    assert e["unpriced_models"] == ["unlisted"]
    assert e["failed_rows"] == {"invalid_reply": 1}


def test_single_call_rows_and_judge_failures():
    rs = [{"qid": "a", "judge_model": "m-paid", "cache_key": "k", "usage": {"prompt_tokens": 7, "completion_tokens": 1},
           "latency": 0.5, "cached": False, "label": 1},
          {"qid": "b", "judge_model": "m-paid", "cache_key": "", "label": None, "error": "timeout: read timed out"},
          {"qid": "c", "judge_model": "m-paid", "cache_key": "", "label": None, "error": "no_answer: empty_answer"},
          {"qid": "d", "judge_model": "m-paid", "cache_key": "", "label": None, "error": "no_answer: http_500: x"}]
    e = ledger.stage_entry("08_judge_x", "judge", rs, PRICES)
    # The same causes as metrics.json (common.evaluation.scoring), so the two files agree row for row.
    assert (e["calls"], e["paid"]) == (1, 1)
    assert e["failed_rows"] == {"judge_api_error": 1, "empty_answer": 1, "answer_api_error": 1}


def test_run_ledger_and_efficiency_match_the_artifacts(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run = run_stages("configs/locomo.yaml", run_overrides(tmp_path, TINY_LOCOMO))
    led = json.loads((run.dir / "ledger.json").read_text())
    by = {e["stage"]: e for e in led["stages"]}
    # Every request the server answered is one paid call in the ledger (a fresh cache).
    counts = fake_server.counts_by_kind()
    assert by["02_episodes"]["paid"] == counts["partition"]
    assert by["03_extract"]["paid"] == counts["extract"]
    assert by["05_plan"]["paid"] == counts["plan"]
    assert by["07_answer"]["paid"] == counts["answer"]
    assert by["08_judge_gpt-4o-mini"]["paid"] == counts["judge_locomo"]
    assert led["total"]["paid"] == sum(v for k, v in counts.items() if k != "embeddings")
    # Efficiency per question is the sum of the recorded latencies.
    plans = {r["qid"]: r for r in rows(run.dir / "05_plan.jsonl")}
    answers = {r["qid"]: r for r in rows(run.dir / "07_answer.jsonl")}
    rets = {r["qid"]: r for r in rows(run.dir / "06_retrieve.jsonl")}
    for q in led["efficiency"]["per_question"]:
        plan_s = sum(c["latency"] for c in plans[q["qid"]]["llm_calls"])
        assert q["plan_s"] == pytest.approx(plan_s, abs=1e-3)
        assert q["generation_s"] == pytest.approx(answers[q["qid"]]["latency"], abs=1e-3)
        assert q["context_tokens"] == rets[q["qid"]]["buffer_tokens"]
    metrics = json.loads((run.dir / "metrics.json").read_text())
    assert metrics["ledger"]["total"]["paid"] == led["total"]["paid"]
    assert "LLM ledger" in (run.dir / "ledger.md").read_text()
    # A second run of the same config on a new run name pays nothing: every call is cached.
    again = run_stages("configs/locomo.yaml", run_overrides(tmp_path, TINY_LOCOMO, **{"run.name": "t2"}))
    led2 = json.loads((again.dir / "ledger.json").read_text())
    assert led2["total"]["paid"] == 0 and led2["total"]["cached"] == led["total"]["calls"]
    assert led2["total"]["cost_paid_usd"] == 0


def test_cache_hits_report_the_original_latency(tmp_path, fake_server):
    from tests.conftest import make_client

    client = make_client(fake_server, tmp_path, "answer")
    msgs = [{"role": "user", "content": "Answer only from the supplied episodes.\n[D1:1] A: hi"}]
    first = client.complete("answer", msgs, json_mode=False, prompt_id="answer_user")
    again = make_client(fake_server, tmp_path, "answer").complete("answer", msgs, json_mode=False,
                                                                 prompt_id="answer_user")
    assert not first.cached and again.cached
    assert again.latency == pytest.approx(first.latency) and first.latency > 0


def test_ledger_rows_follow_the_llm_stages_of_the_graph(tmp_path, monkeypatch):
    """A stage added to the graph with an LLM role gets its ledger row from its own output file."""
    from common.pipeline import graph

    toy = graph.Stage(10, "critique", "x:y", reads=("answers",), writes=("10_critique.jsonl",),
                      summary="a second opinion", role="answer")
    monkeypatch.setattr(ledger, "llm_stages", lambda: graph.llm_stages() + [toy])
    call = {"model": "m", "usage": {"prompt_tokens": 7, "completion_tokens": 2}, "latency": 0.5, "cached": False}
    _w(tmp_path / "10_critique.jsonl", [{"qid": "q1", "llm_calls": [call]}, {"qid": "q2", "llm_calls": [call]}])
    led = ledger.ledger(tmp_path, prices={"models": {}})
    entry = next(e for e in led["stages"] if e["stage"] == "10_critique")
    assert (entry["role"], entry["rows"], entry["calls"], entry["prompt_tokens"]) == ("answer", 2, 2, 14)
    assert "07_answer.jsonl" in led["missing_files"]  # graph stages without their file are listed
