"""BEAM's scorer on every judge reply and every answer (common.evaluation.beam): any reply becomes a
score or a counted failure, replies are read as the official code reads them (int for rubric
abilities, float for event ordering's rubric judge, true as 1), the official handling of empty and
failed answers and of the judge's seed are switches, and BEAM runs score the raw answer content.
Where the official code is compared, it is read from the fetched repository as in
tests/test_beam_scoring.py (its ``official`` fixture).
"""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from common.core import fingerprint
from common.core.config import load_config
from common.core.llm import Completion, LLMClient
from common.core.schema import AnswerRow, Gold, Question, RetrievalRow
from common.evaluation import beam
from common.method import answer as answer_mod
from tests.test_beam_scoring import official  # noqa: F401 - the fixture that loads the official code

EO = beam.EVENT_ORDERING
IE = "information_extraction"
RUBRIC = ["alpha", "beta", "gamma"]


class Judge:
    """A judge client: rubric calls get ``reply`` (or the item's own in ``per_item``); alignment
    calls say YES only for identical snippets."""

    def __init__(self, reply: str = '{"score": 1}', per_item: dict[str, str] | None = None):
        self.reply, self.per_item, self.requests = reply, per_item or {}, []

    def settings(self, role: str) -> Any:
        return SimpleNamespace(model="judge-model")

    def complete(self, role: str, messages: list[dict[str, str]], prompt_id: str = "", **kw: Any) -> Completion:
        self.requests.append((prompt_id, messages))
        if prompt_id == beam.ALIGN_USER:
            user = messages[1]["content"]
            first = user.split("First snippet: ", 1)[1].split(" \n", 1)[0]
            second = user.split("Second snippet: ", 1)[1].rsplit("\n", 1)[0]
            text = "YES" if first == second else "NO"
        else:
            content = messages[0]["content"]
            text = next((r for k, r in self.per_item.items() if f"RUBRIC CRITERION (what to check): {k}\n" in content),
                        self.reply)
        return Completion(text=text, cache_key=f"k{len(self.requests)}", cached=False, model="judge-model",
                          usage={}, latency=0.0)


DEFAULT = beam.Options()


def _judge(reply: str, ability: str, answer: str | None = "beta\nalpha\ngamma", opts: beam.Options = DEFAULT,
           error: str = "") -> Any:
    ans = AnswerRow(qid="c::q1", memory_id="c", question="In what order?", answer=answer, model="m",
                    prompt_id="answer_beam_user", error=error)
    gold = Gold(qid="c::q1", memory_id="c", answer="", category=0, question_type=ability, rubric=list(RUBRIC))
    client = Judge(reply)
    return beam.judge_beam(client, "j", ans, gold, opts), client  # type: ignore[arg-type]


# Replies a judge might send: each must give a score or a counted parse failure, never an exception.
NASTY = ['{"score": Infinity}', '{"score": -Infinity}', '{"score": 1e999}', '{"score": NaN}',
         '{"score": 1' + "0" * 400 + "}", '{"score": "Infinity"}', '{"score": "1e999"}', '{"score": "nan"}',
         '{"score": "0.5"}', '{"score": true}', '{"score": false}', '{"score": null}', '{"score": [1]}',
         '{"score": {"v": 1}}', '{"score": 2}', '{"score": -1}', '{"score": 1.5}', '{"score": 1e-999}',
         '{"score": "1"}', '{"score": " 1 "}', '{"reason": "none"}', "[1, 2]", '"score"', "", "   ", "null",
         "no json here", "{", "[" * 3000, '{"score": 1', "```json\n{\"score\": 0.5}\n```", '{"score": 0x1}',
         '{"score": "½"}', '{"score": "١"}', '{"score": 1, "score": "x"}', "\ud800", '{"score": 1}' * 3]


@pytest.mark.parametrize("ability", [IE, EO])
@pytest.mark.parametrize("reply", NASTY, ids=[f"reply{i}" for i in range(len(NASTY))])
def test_every_reply_is_a_score_or_a_counted_failure(ability, reply):
    row, _ = _judge(reply, ability)
    if row.error:
        assert row.label is None and row.error.startswith("judge_parse_error: "), row.error
        assert "\n" not in row.error
    else:
        assert row.label in (0, 1) and row.parse_ok
        head = row.scores[row.scores["headline"]]
        assert isinstance(head, float | int) and 0.0 <= head <= 1.0
        json.dumps(row.scores, allow_nan=False)  # every stored number is finite


@pytest.mark.parametrize("reply", ['{"score": Infinity}', '{"score": 1e999}', '{"score": 1' + "0" * 400 + "}"],
                         ids=["infinity", "1e999", "long_int"])
def test_an_overflowing_score_is_a_parse_failure_not_an_overflow_error(reply):
    for ability in (IE, EO):
        with pytest.raises(ValueError):
            beam.item_scores(beam.parse_reply(reply), ability)
        row, _ = _judge(reply, ability)
        assert row.label is None and row.error.startswith("judge_parse_error")


def test_scores_are_read_as_the_official_code_reads_them():
    # Rubric abilities: int(), so true is 1 and "1" is 1; outside [0, 1] stays a parse failure.
    assert beam.item_scores({"score": True}) == (1, 1.0)
    assert beam.item_scores({"score": False}) == (0, 0.0)
    assert beam.item_scores({"score": "1"}) == (1, 1.0)
    row, _ = _judge('{"score": true}', IE)
    assert row.label == 1 and row.scores["official"] == 1.0
    # Event ordering's rubric judge: float(), any finite number.
    for raw, value in (("0.5", 0.5), (2, 2.0), (1.5, 1.5), (True, 1.0)):
        assert beam.item_scores({"score": raw}, EO) == (None, value)


@pytest.mark.parametrize("reply, mean", [('{"score": "0.5"}', 0.5), ('{"score": 2}', 2.0), ('{"score": 1.5}', 1.5),
                                         ('{"score": true}', 1.0)])
def test_event_ordering_rubric_replies_keep_tau_and_match_the_official_code(official, reply, mean):  # noqa: F811
    row, _ = _judge(reply, EO)
    assert not row.error and row.scores["rubric_judge"]["float"] == pytest.approx(mean)
    ref = official.cm.evaluate_event_ordering(rubric=RUBRIC, llm_response="beta\nalpha\ngamma",
                                              probing_question="Q", model=_OfficialStub(reply))
    assert row.scores["official"] == pytest.approx(ref["tau_norm"]) and ref["tau_norm"] > 0.3
    assert ref["llm_judge_score"] == pytest.approx(mean)


class _OfficialStub:
    """The official code's ``model``: the rubric reply, YES for identical snippets, a fact list else."""

    def __init__(self, reply: str):
        self.reply = reply

    def invoke(self, request: Any) -> Any:
        if isinstance(request, list):
            user = request[1]["content"]
            first = user.split("First snippet: ", 1)[1].split(" \n", 1)[0]
            second = user.split("Second snippet: ", 1)[1].rsplit("\n", 1)[0]
            return SimpleNamespace(content="YES" if first == second else "NO")
        return SimpleNamespace(content=self.reply if "RUBRIC CRITERION" in request else "1. a fact")


# --------------------------------------------------------------------------- empty and failed answers
def test_empty_and_failed_answers_score_zero_by_default_and_are_judged_under_the_official_rule(official):  # noqa: F811
    for answer in ("", "  \n", None):
        row, client = _judge('{"score": 1}', EO, answer=answer)
        assert row.label is None and row.error.startswith("no_answer") and client.requests == []
    off = beam.Options(empty_answers="official")
    row, client = _judge('{"score": 1}', EO, answer="", opts=off)
    # Officially an empty event-ordering answer is one empty line: tau_norm 0.146 at R = 3.
    assert row.scores["official"] == pytest.approx(0.1464466, abs=1e-6)
    assert row.scores["answer_stand_in"] == "empty_answer"
    ref = official.cm.evaluate_event_ordering(rubric=RUBRIC, llm_response="", probing_question="Q",
                                              model=_OfficialStub('{"score": 1}'))
    assert ref["tau_norm"] == pytest.approx(row.scores["official"])
    # A failed answer call: the official runner's error text is judged as the answer.
    row, client = _judge('{"score": 0}', IE, answer=None, opts=off, error="timeout: read timed out")
    assert row.scores["answer_stand_in"] == "error_text" and row.label == 0
    prompt = client.requests[0][1][0]["content"]
    assert "Error in information_extraction question type and In what order? and for 07_answer.jsonl" in prompt


def test_the_empty_answer_switch_and_the_seed_switch_are_config_and_fingerprint(tmp_path):
    cfg = load_config(["configs/beam.yaml"])
    assert cfg.score.beam_empty_answers == "zero" and cfg.role("judge").seed == 42
    assert beam.options(cfg).empty_answers == "zero"
    off = load_config(["configs/beam.yaml"], ["score.beam_empty_answers=official", "score.beam_judge_seed=false"])
    assert beam.options(off).empty_answers == "official"
    # The official judge client sends no seed: none in the request body either.
    settings = off.role("judge")
    assert settings.seed is None and "seed" not in LLMClient.request_body(settings, [], False)
    assert off.role("answer").seed == 42  # only the judge role of a BEAM run
    locomo = load_config(["configs/locomo.yaml"], ["score.beam_judge_seed=false"])
    assert locomo.role("judge").seed == 42
    base = fingerprint.judge_components(cfg, "r", "p")
    assert "empty_answers" not in base["beam_scoring"]
    assert fingerprint.judge_components(off, "r", "p") != base


# --------------------------------------------------------------------------- whitespace
def test_beam_runs_score_the_raw_answer_as_the_official_code(official):  # noqa: F811
    rubric = ["a", "b", "c"]
    raw = "b\nc\na\n"  # the trailing newline is one more (empty) line for the alignment

    class AnswerClient:
        def settings(self, role: str) -> Any:
            return SimpleNamespace(model="m")

        def complete(self, role: str, messages: Any, **kw: Any) -> Completion:
            return Completion(text=raw, cache_key="k", cached=False, model="m", usage={}, latency=0.0)

    ret = RetrievalRow(qid="c::q1", memory_id="c", question="Order?", mode="adaptive", scope="point",
                       reasoning_type="direct", selected=[], episode_ids=[], dia_ids=[], coverage={},
                       buffer_text="### Episode e\n[D1:1] user: hi", buffer_tokens=5)
    q = Question("c::q1", "c", "Order?")
    kept = answer_mod.answer_question(AnswerClient(), q, None, ret,  # type: ignore[arg-type]
                                      steps=answer_mod.AnswerSteps(strip=False))
    stripped = answer_mod.answer_question(AnswerClient(), q, None, ret)  # type: ignore[arg-type]
    assert kept.answer == raw and stripped.answer == raw.strip() and not kept.error
    assert load_config(["configs/beam.yaml"]).answer.strip is False
    assert load_config(["configs/locomo.yaml"]).answer.strip is True

    def tau(text: str) -> float:
        gold = Gold(qid="c::q1", memory_id="c", answer="", category=0, question_type=EO, rubric=rubric)
        row = beam.judge_beam(Judge(), "j", AnswerRow("c::q1", "c", "Order?", text, "m", "p"), gold,  # type: ignore[arg-type]
                              beam.Options())
        return row.scores["official"]

    ref = official.cm.evaluate_event_ordering(rubric=rubric, llm_response=raw, probing_question="Q",
                                              model=_OfficialStub('{"score": 1}'))
    assert tau(kept.answer) == pytest.approx(ref["tau_norm"]) == pytest.approx(2 / 3)
    assert tau(stripped.answer) == pytest.approx(1 / 3)


def test_judge_calls_docstring_bound_is_r_squared():
    gold = [Gold(qid="q", memory_id="c", answer="", category=0, question_type=EO, rubric=list(RUBRIC))]
    assert beam.judge_calls(gold, False) == {"rubric": 3, "align_max": 9}
    _, client = _judge('{"score": 1}', EO, answer="x\ny\nz")  # no line matches: every pair is asked
    assert sum(pid == beam.ALIGN_USER for pid, _ in client.requests) == 9
    assert "R*R when no line matches" in (beam.judge_calls.__doc__ or "")
