"""LoCoMo-Plus's official judge (common.evaluation.locomo_plus): prompts byte for byte, the reply
parser and its "correct"-before-"wrong" defect, failed answers as error text, the means.

Worked values are the official code's behaviour (xjtuleeyf/Locomo-Plus @059f4e3d,
``evaluation_framework/task_eval/``); the tests that call the official functions read them from the
fetched repository at test time (tests/locomo_plus_official.py) and skip without it.
"""
from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from common.core import prompts
from common.core.llm import Completion, LLMCallError
from common.core.schema import AnswerRow, Gold
from common.evaluation import locomo_plus as lp
from common.evaluation.registry import evaluator
from tests import locomo_plus_official as official

# sha256 of the official PROMPT_TEMPLATES strings and of CONV_START_PROMPT (prompt.py at 059f4e3d).
OFFICIAL_SHA256 = {
    "multi-hop": "6eba7bc55145d57a06c90fb96a9daf7965b68dbb480b975d2b1583b59124741a",
    "single-hop": "e0cc6dfb7fb33aeafeed27e6db214eff15278738298384817479f09f5f5997d4",
    "temporal": "f951d90c7a759c12eff5ceeb963129c2be79b529209b9fb2ddcfbafb2a40aa3d",
    "common-sense": "3147a06f69f3229233ecb367249c42afe6485d45c18957c6d2286a2eb28ea904",
    "adversarial": "2a73bc69e8051121a6332c3fb14605574bacc3cb58173fdd72b5803f4bd40a69",
    "Cognitive": "83875348ab831a4f2932457bc951d37654db9f77ecaf50e7a8aacf5ff566a08b",
    "default": "117bbafb8c4d388e5fe814a098851c361087497b515331b457e144bf1cffe9f9",
}
CONV_START_SHA256 = "bfb101603e38a36cfecfb7e989ae51d537907ad7ac0b89020e2b7c01046d3cb7"
API_KEY_ERROR = ("[API Error: Error code: 401 - {'error': {'message': 'Incorrect API key provided: sk-proj-****. "
                 "You can find your API key at https://platform.openai.com/account/api-keys.', 'type': "
                 "'invalid_request_error', 'param': None, 'code': 'invalid_api_key'}}]")
# Replies and their official reading (label, score): the official parser's cases, defect included.
REPLIES = [
    ('{"label": "correct", "reason": "matches"}', "correct", 1.0),
    ('{"label": "partial", "reason": "half"}', "partial", 0.5),
    ('{"label": "Wrong", "reason": "no"}', "Wrong", 0.0),  # the label kept as written; scored lower-cased
    ('{"reason": "order swapped", "label": "partial"}', "partial", 0.5),  # the regex misses it, json.loads reads it
    ('```json\n{"label": "wrong", "reason": "fenced"}\n```', "wrong", 0.0),
    ('```json\n{"reason": "fenced, reason first", "label": "wrong"}\n```', "wrong", 0.0),  # fallback: the word
    ("The prediction is incorrect.", "correct", 1.0),  # the defect: "correct" is found inside "incorrect"
    (API_KEY_ERROR, "correct", 1.0),  # how the committed outputs scored 2,240 of 2,240
    ("This is wrong, it only partially matches.", "wrong", 0.0),
    ("Wrong: the correct answer is Paris.", "correct", 1.0),  # "correct" is looked for first
    ("Partially right.", "partial", 0.5),
    ("I cannot judge this.", "", 0.0),
    ('{"label": 1, "reason": "not a string"}', "", 0.0),  # .strip() on an int: the fallback finds nothing
    ('["correct"]', "correct", 1.0),  # JSON, but not a mapping: the fallback
    ('{"label": "incorrect", "reason": "x"}', "incorrect", 0.0),  # JSON's own unknown label: 0
    ("", "", 0.0),
]


def test_prompt_files_are_the_official_strings():
    for category, sha in OFFICIAL_SHA256.items():
        assert hashlib.sha256(prompts.load(lp.prompt_id(category)).encode("utf-8")).hexdigest() == sha, category
    assert hashlib.sha256(prompts.load(lp.CONV_START).encode("utf-8")).hexdigest() == CONV_START_SHA256
    assert lp.prompt_id("open-domain") == lp.PROMPT_IDS["default"]  # any other category: the default prompt


def test_judge_prompt_worked_example():
    text = lp.judge_prompt("adversarial", "ignored", "It was never mentioned.", "ignored")
    assert text.startswith("Below is a conversation between two people: A and B. The conversation takes place over "
                           "multiple days, and the date of each conversation is written at the beginning of the "
                           "conversation.\n\nYou are a Skeptical Judge evaluating robustness.\n")
    assert "ignored" not in text and "Model Prediction:\nIt was never mentioned.\n" in text
    assert text.endswith('{"label": "correct"|"wrong", "reason": "<short explanation>"}')
    cognitive = lp.judge_prompt("Cognitive", "Ann：I hate loud rooms.", "Maybe skip the concert?", "")
    assert "Memory/Evidence:\nAnn：I hate loud rooms.\n\nModel Prediction:\nMaybe skip the concert?\n" in cognitive
    braces = lp.judge_prompt("single-hop", "e", "{pred} and {gold}", "Paris")  # a filled value is not rescanned
    assert "Model Prediction:\n{pred} and {gold}\n" in braces and "Reference Answer:\nParis\n" in braces


@pytest.mark.parametrize("reply, label, score", REPLIES)
def test_the_official_parser_worked_values(reply, label, score):
    got = lp.parse_official(reply)
    assert got[0] == label and lp.score_of(got[0]) == score


@pytest.mark.parametrize("reply, label", [(r, lbl) for r, lbl, _ in REPLIES])
def test_strict_reading_takes_only_the_json_label(reply, label):
    try:
        strict, _ = lp.parse_strict(reply)
    except ValueError:
        strict = None
    expected = label.lower() if label.lower() in lp.LABEL_TO_SCORE and reply.lstrip().startswith(("{", "```")) \
        else None
    if reply.startswith("```json\n{\"reason\""):
        expected = "wrong"  # the fence is unwrapped: its JSON says wrong
    assert strict == expected, reply


def test_official_code_agrees_on_prompts_parsing_and_summary(tmp_path, monkeypatch):
    off = official.code(tmp_path, monkeypatch)
    assert {c: off.prompt.PROMPT_TEMPLATES[c] for c in OFFICIAL_SHA256} == {
        c: prompts.load(lp.prompt_id(c)) for c in OFFICIAL_SHA256}
    assert off.utils.CONV_START_PROMPT == prompts.load(lp.CONV_START)
    for reply, _, _ in REPLIES:
        assert lp.parse_official(reply) == off.judge._parse_judge_response(reply), reply
        assert lp.score_of(lp.parse_official(reply)[0]) == off.judge.label_to_score(lp.parse_official(reply)[0])
    for category in (*OFFICIAL_SHA256, "open-domain"):
        theirs = off.utils._prepend_conv_prefix(off.judge.get_judge_prompt(category, "Ev：x", "pred {x}", "gold"))
        assert lp.judge_prompt(category, "Ev：x", "pred {x}", "gold") == theirs, category
    records = [{"category": c, "judge_score": s} for c, s in
               [("Cognitive", 1.0), ("Cognitive", 0.0), ("temporal", 1.0), ("multi-hop", 0.5), ("multi-hop", 0.0)]]
    summary = off.judge._compute_summary(records)
    assert summary["overall_avg"] == 0.5 and summary["by_category"]["multi-hop"]["avg"] == 0.25


# --------------------------------------------------------------------------- one judgment
class Client:
    """An LLMClient stand-in: records each request, answers with ``reply`` (or raises ``fail``)."""

    def __init__(self, reply: str = "", fail: bool = False):
        self.reply, self.fail, self.sent = reply, fail, []

    def settings(self, role: str) -> Any:
        return SimpleNamespace(model="judge-model")

    def complete(self, role: str, messages: list, prompt_id: str, **kw: Any) -> Completion:
        self.sent.append((role, messages, prompt_id, kw))
        if self.fail:
            raise LLMCallError("Incorrect API key provided", "http_401")
        return Completion(text=self.reply, usage={"prompt_tokens": 10, "completion_tokens": 5}, latency=0.1,
                          cached=False, cache_key="k", model="judge-model")


def gold(category: str = "Cognitive") -> Gold:
    return Gold(qid="m:q0001", memory_id="m", answer="" if category in ("Cognitive", "adversarial") else "Paris",
                category=6, question_type=category, details={"judge_evidence": "Ann：I never eat meat.",
                                                             "conversation": "conv-26"})


def answer(text: Any = "How about the veggie burger?", error: str = "") -> AnswerRow:
    return AnswerRow(qid="m:q0001", memory_id="m", question="q", answer=text, model="a", prompt_id="answer_user",
                     error=error)


def test_the_parser_switch_on_a_reply_that_is_not_json():
    """Official: "incorrect" scores 1 and the question counts correct; strict: a counted failure.
    Both readings are kept from the one reply whichever is the headline."""
    client = Client("The prediction is incorrect: it ignores the evidence.")
    official_row = lp.judge_locomo_plus(client, "j", answer(), gold(), lp.Options(parser="official"))
    strict_row = lp.judge_locomo_plus(client, "j", answer(), gold(), lp.Options(parser="strict"))
    assert official_row.label == 1 and official_row.scores["official"] == 1.0 and official_row.scores["strict"] is None
    assert strict_row.label is None and strict_row.error.startswith("judge_parse_error: ")
    assert strict_row.scores["official"] == 1.0 and strict_row.scores["headline"] == "strict"


def test_the_judge_request_is_the_official_one():
    client = Client('{"label": "correct", "reason": "it avoids meat"}')
    row = lp.judge_locomo_plus(client, "j", answer(), gold(), lp.Options())
    role, messages, pid, kw = client.sent[0]
    assert role == "judge" and pid == "judge_locomo_plus_cognitive" and kw == {}
    assert messages == [{"role": "user", "content": lp.judge_prompt("Cognitive", "Ann：I never eat meat.",
                                                                    "How about the veggie burger?")}]
    assert row.label == 1 and row.scores == {"label_official": "correct", "official": 1.0, "reason": "it avoids meat",
                                             "label_strict": "correct", "strict": 1.0, "headline": "official"}
    lp.judge_locomo_plus(client, "j", answer(), gold(), lp.Options(), repeat=2)
    assert client.sent[1][3] == {"repeat": 2}


def test_the_error_answer_switch():
    """Zero (default): a failed answer is a counted failure without a call. Official: its error text is
    judged as the answer (utils.call_llm's "[API Error: ...]"), an empty reply as "(empty)"."""
    failed = answer(None, "http_401: Incorrect API key provided")
    client = Client('{"label": "correct", "reason": "the text says correct"}')
    row = lp.judge_locomo_plus(client, "j", failed, gold(), lp.Options())
    assert client.sent == [] and row.label is None and row.error.startswith("no_answer: http_401")
    row = lp.judge_locomo_plus(client, "j", failed, gold(), lp.Options(error_answers="official"))
    sent = client.sent[0][1][0]["content"]
    assert "Model Prediction:\n[API Error: http_401: Incorrect API key provided]\n" in sent
    assert row.label == 1 and row.scores["answer_stand_in"] == "error_text"
    lp.judge_locomo_plus(client, "j", answer(""), gold(), lp.Options(error_answers="official"))
    assert "Model Prediction:\n(empty)\n" in client.sent[1][1][0]["content"]


def test_a_failed_judge_call_is_a_counted_failure_not_a_parsed_error():
    row = lp.judge_locomo_plus(Client(fail=True), "j", answer(), gold(), lp.Options())
    assert row.label is None and row.error.startswith("http_401") and not row.scores


def test_the_evaluator_carries_the_run_switches():
    cfg = SimpleNamespace(score=SimpleNamespace(locomo_plus_parser="strict", locomo_plus_error_answers="official"))
    scorer = evaluator("locomo_plus", cfg)
    assert scorer.opts == lp.Options("strict", "official")  # type: ignore[attr-defined]
    assert scorer.digest(gold()) == ["Cognitive", "Ann：I never eat meat.", repr(lp.Options("strict", "official"))]


# --------------------------------------------------------------------------- aggregation
def test_means_per_category_overall_and_subsets(tmp_path):
    """Five questions: the official summary's means (a failure counts 0), clustered by conversation."""
    golds = [Gold(qid=f"m{i}:q0001", memory_id=f"m{i}", answer="", category=6, question_type=c,
                  details={"conversation": conv, "cue_before_trigger": cue, "gap_parsed": True,
                           "relation_type": "goal"})
             for i, (c, conv, cue) in enumerate([("Cognitive", "a", True), ("Cognitive", "b", False),
                                                 ("temporal", "a", False), ("multi-hop", "b", False),
                                                 ("multi-hop", "a", False)])]
    scores = {"m0:q0001": 1.0, "m1:q0001": None, "m2:q0001": 1.0, "m3:q0001": 0.5, "m4:q0001": 0.0}
    block = lp.variant_block(golds, scores)
    assert block["by_category"]["Cognitive"]["score"] == 0.5 and block["by_category"]["multi-hop"]["score"] == 0.25
    assert block["overall"]["score"] == 0.5 and block["overall"]["sum"] == 2.5 and block["overall"]["n_failed"] == 1
    assert block["locomo_categories"]["score"] == 0.5
    assert block["subsets"]["cue_before_trigger"]["score"] == 1.0 and block["subsets"]["relation_goal"]["n"] == 2
    assert block["overall"]["ci_cluster"]["n_clusters"] == 2


def test_aggregate_and_tables_from_judge_rows(tmp_path):
    from common.core.io import write_jsonl
    from common.core.schema import JudgeRow, to_dict

    golds = [gold("Cognitive"), Gold(qid="m2:q0001", memory_id="m2", answer="Paris", category=4,
                                     question_type="single-hop", details={"conversation": "conv-30"})]
    rows = [JudgeRow(qid="m:q0001", judge="j", judge_model="jm", prompt_id="p", label=1, parse_ok=True,
                     scores={"official": 1.0, "strict": None, "headline": "official", "label_official": "correct"}),
            JudgeRow(qid="m2:q0001", judge="j", judge_model="jm", prompt_id="p", label=0, parse_ok=True,
                     scores={"official": 0.5, "strict": 0.5, "headline": "official", "label_official": "partial"})]
    write_jsonl(tmp_path / "01_gold.jsonl", (to_dict(g) for g in golds))
    write_jsonl(tmp_path / "08_judge_j.jsonl", (to_dict(r) for r in rows))
    cfg = SimpleNamespace(run=SimpleNamespace(name="r"), score=SimpleNamespace(locomo_plus_parser="official"),
                          method=SimpleNamespace(name="ensimem"))
    run = SimpleNamespace(cfg=cfg, dir=tmp_path, path=lambda n: tmp_path / "01_gold.jsonl",
                          judge_path=lambda j: tmp_path / f"08_judge_{j}.jsonl")
    metrics = lp.aggregate(run, ["j"])
    block = metrics["judges"]["j"]
    assert block["variants"]["official"]["overall"]["score"] == 0.75
    assert block["variants"]["strict"]["overall"]["score"] == 0.25  # the unreadable reply counts 0
    assert block["overall"]["k"] == 1 and block["overall"]["score"] == 0.75
    assert block["parser"] == {"disagree": 1, "not_json": 1, "partial_labels": 1, "answer_stand_ins": 0}
    table = lp.write_tables(run, metrics)[0].read_text(encoding="utf-8")
    assert "| Cognitive | 100.0" in table and "official parser (headline)" in table
    assert json.dumps(metrics)  # plain JSON
