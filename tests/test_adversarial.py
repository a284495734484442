"""LoCoMo category 5 (``score.adversarial``): the abstention rule and its own column."""
from __future__ import annotations

import json

from common.core.schema import Gold
from common.evaluation.adversarial import abstains, adversarial_block
from tests.conftest import TINY_LOCOMO, rows, run_overrides, run_stages


def test_the_rule_official_phrases_and_unknown():
    assert abstains("No information available about that.") == 1
    assert abstains("It is not mentioned in the conversation") == 1
    assert abstains("Unknown") == 1 and abstains(" unknown. ") == 1
    assert abstains("Unknown brand of shoes") == 0  # an answer that merely starts with the word
    assert abstains("She went to Paris") == 0
    assert abstains("") == 0
    assert abstains(None) is None  # no answer: a counted failure, never dropped


def test_block_counts_failures_and_stays_apart():
    gold = [Gold(qid=f"c:q{i}", memory_id="c", answer="", category=5) for i in range(4)]
    gold.append(Gold(qid="c:q9", memory_id="c", answer="x", category=1))
    answers = {"c:q0": {"answer": "Unknown"}, "c:q1": {"answer": "Paris"}, "c:q2": {"answer": None}}
    block = adversarial_block(gold, answers, True)
    assert (block["k"], block["n"], block["n_failed"]) == (1, 4, 2)
    assert block["missing_answers"] == 1 and block["questions"] == 4
    off = adversarial_block(gold, answers, False)
    assert off == {"status": "not scored (score.adversarial: false)", "questions": 4}


def test_category_5_runs_through_the_pipeline_and_is_its_own_column(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO, **{"method.name": "no_memory", "score.adversarial": "true"})
    run = run_stages("configs/locomo.yaml", sets)
    gold = {g["qid"]: g for g in rows(run.path("gold"))}
    adversarial = {q for q, g in gold.items() if g["category"] == 5}
    answers = {a["qid"]: a for a in rows(run.path("answers"))}
    assert adversarial and adversarial <= set(answers)  # answered like every other question
    assert not adversarial & {r["qid"] for r in rows(run.judge_path())}  # never sent to the LLM judge
    metrics = json.loads(run.path("metrics").read_text())
    adv = metrics["adversarial"]
    expected = sum(abstains(answers[q]["answer"]) or 0 for q in adversarial)
    assert adv["status"] == "scored" and adv["n"] == len(adversarial) and adv["k"] == expected
    judge = metrics["judges"][run.cfg.judge.name]
    assert judge["overall"]["n"] == len(gold) - len(adversarial)  # the paper's overall is unchanged
    table = (run.dir / f"table_{run.cfg.judge.name}.md").read_text()
    assert "Adversarial (cat. 5, abstention rule)" in table and "is not in Overall" in table
