"""Repeated judging (``judge.runs``): per-run labels, seeds 42+i, distinct cache keys, the summary."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from common.core.config import ConfigError, load_config
from common.core.llm import LLMClient, ResponseCache, RetryPolicy, RoleSettings
from common.core.schema import AnswerRow, Gold, JudgeRow
from common.evaluation import locomo
from common.evaluation.repeats import describe_runs, judge_repeated, majority, row_labels, runs_block
from common.evaluation.scoring import failure_cause
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages


def _client(server, tmp_path, seed=42):
    role = RoleSettings(role="judge", model="m", base_url=server.base_url, timeout=2.0, seed=seed)
    return LLMClient({"judge": role}, cache=ResponseCache(str(tmp_path / "c.sqlite")),
                     retry=RetryPolicy(max_attempts=2, initial_wait=0.01, max_wait=0.02))


ANSWER = AnswerRow(qid="conv-1:q0001", memory_id="conv-1", question="When did Ann move?", answer="In May 2023",
                   model="m", prompt_id="answer_user")
GOLD = Gold(qid="conv-1:q0001", memory_id="conv-1", answer="May 2023", category=2)


def test_majority_ties_and_failures():
    assert majority([1, 1, 0]) == 1
    assert majority([0, 1, 0]) == 0
    assert majority([1, 0]) == 0  # a tie counts wrong
    assert majority([1, None, 1]) is None  # a failed run makes the question a counted failure
    assert majority([1]) == 1


def test_each_run_is_its_own_request_with_seed_42_plus_i_and_a_rerun_pays_nothing(fake_server, tmp_path):
    client = _client(fake_server, tmp_path)
    row = judge_repeated(lambda i: locomo.judge(client, "j", "judge_locomo_mem0", ANSWER, GOLD, repeat=i), 3)
    sent = fake_server.requests_of_kind("judge_locomo")
    assert [r["seed"] for r in sent] == [42, 43, 44]
    assert len(row.labels) == 3 and row.label == majority(row.labels)
    again = judge_repeated(lambda i: locomo.judge(client, "j", "judge_locomo_mem0", ANSWER, GOLD, repeat=i), 3)
    assert fake_server.request_count == 3 and again.cached and again.labels == row.labels


def test_run_index_is_in_the_cache_key_when_the_endpoint_has_no_seed(fake_server, tmp_path):
    client = _client(fake_server, tmp_path, seed=None)
    said = [{"role": "user", "content": 'x: JSON with the key "label"'}]
    keys = {client.complete("judge", said, prompt_id="judge_locomo_mem0", repeat=i).cache_key for i in range(3)}
    assert len(keys) == 3 and fake_server.request_count == 3
    assert all("seed" not in r for r in fake_server.requests)


def test_run_zero_is_the_ordinary_request(fake_server, tmp_path):
    client = _client(fake_server, tmp_path)
    plain = locomo.judge(client, "j", "judge_locomo_mem0", ANSWER, GOLD)
    single = judge_repeated(lambda i: locomo.judge(client, "j", "judge_locomo_mem0", ANSWER, GOLD, repeat=i), 1)
    assert single.cache_key == plain.cache_key and single.labels == [] and fake_server.request_count == 1


def test_a_failed_run_is_a_counted_failure_with_its_cause():
    def once(i: int) -> JudgeRow:
        r = JudgeRow(qid="q", judge="j", judge_model="m", prompt_id="p", label=1, parse_ok=True)
        return replace(r, label=None, error="judge_parse_error: no label") if i == 1 else r

    row = judge_repeated(once, 3)
    assert row.labels == [1, None, 1] and row.label is None
    assert "judge run 2 of 3" in row.error
    assert failure_cause({"label": row.label, "error": row.error}) == "judge_parse_error"


def test_runs_block_by_hand():
    # q1 always right, q2 flips (1, 0, 0), q3 always wrong, q4 (1, 1, 0) -> majority right.
    joined = [{"g": "a", "labels": [1, 1, 1]}, {"g": "a", "labels": [1, 0, 0]},
              {"g": "b", "labels": [0, 0, 0]}, {"g": "b", "labels": [1, 1, 0]}]
    block = runs_block(joined, "g", 3)
    o = block["overall"]
    assert [r["k"] for r in o["per_run"]] == [3, 2, 1]
    assert o["mean"] == pytest.approx(0.5)
    assert o["std"] == pytest.approx((((0.75 - 0.5) ** 2 + 0 + (0.25 - 0.5) ** 2) / 3) ** 0.5)
    assert o["majority"] == {"k": 2, "n": 4, "accuracy": 0.5}
    assert o["flips"] == {"k": 2, "n": 4, "fraction": 0.5}
    assert block["by_group"]["a"]["majority"]["k"] == 1
    assert "majority vote 50.00 (2/4)" in describe_runs(block)
    assert row_labels(None, 3) == [None, None, None]
    assert row_labels({"label": 1}, 1) == [1]


def test_judge_runs_must_be_positive():
    with pytest.raises(ConfigError, match="judge.runs"):
        load_config(["configs/locomo.yaml"], ["judge.runs=0"])


def test_judge_stage_with_three_runs_reports_mean_majority_and_flips(fake_server, tmp_path):
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"models.default.base_url": fake_server.base_url,
                                                   "judge.runs": 3})
    run = run_stages("configs/locomo.yaml", sets)
    judged = rows(run.judge_path())
    assert judged and all(len(r["labels"]) == 3 for r in judged)
    n_answers = sum(1 for r in judged if not r["error"].startswith("no_answer"))
    assert len(fake_server.requests_of_kind("judge_locomo")) == 3 * n_answers
    metrics = json.loads(run.path("metrics").read_text())
    block = metrics["judges"][run.cfg.judge.name]["runs"]
    assert block["n_runs"] == 3 and len(block["overall"]["per_run"]) == 3
    assert block["overall"]["majority"]["k"] == metrics["judges"][run.cfg.judge.name]["overall"]["k"]
    fp = json.loads((run.dir / "fingerprint.json").read_text())
    assert fp[f"judge:{run.cfg.judge.name}"]["components"]["judge_runs"] == 3
    assert "3 judge runs: mean" in (run.dir / f"table_{run.cfg.judge.name}.md").read_text()


def test_the_dry_run_counts_every_judge_run():
    from common.pipeline.dryrun import estimate

    def judge_calls(runs: int) -> int:
        sets = [f"data.path={TINY_LOCOMO}", "run.results_dir=/nonexistent-results", f"judge.runs={runs}"]
        est = estimate(load_config(["configs/locomo.yaml"], sets))
        return next(s["calls"] for s in est["stages"] if s["role"] == "judge")

    assert judge_calls(3) == 3 * judge_calls(1) > 0


def test_single_run_judge_fingerprints_are_unchanged_and_runs_enter_otherwise():
    from common.core.fingerprint import judge_components

    one = judge_components(load_config(["configs/locomo.yaml"], []), "r", "p")
    three = judge_components(load_config(["configs/locomo.yaml"], ["judge.runs=3"]), "r", "p")
    assert "judge_runs" not in one  # fingerprints of runs made before judge.runs stay valid
    assert three["judge_runs"] == 3 and {k: v for k, v in three.items() if k != "judge_runs"} == one
