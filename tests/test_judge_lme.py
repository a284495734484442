"""common/evaluation/judge_lme.py: the official LongMemEval judge templates, template choice and labels."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import pytest

from common.core import prompts
from common.core.llm import LLMCallError
from common.core.schema import AnswerRow, Gold
from common.evaluation.judge_lme import (
    PROMPT_IDS,
    QUESTION_TYPES,
    fill_template,
    judge_answer_lme,
    judge_messages,
    official_label,
    strict_label,
    template_id,
)

# sha256 of each template file's text as loaded (trailing newline stripped): the official
# get_anscheck_prompt strings of xiaowu0162/LongMemEval src/evaluation/evaluate_qa.py with the three
# positional {} slots written {question}, {answer}, {response}. Judge text changes scores: any edit
# to a template must fail here.
OFFICIAL_SHA256 = {
    "judge_lme_default": "3e4884e50ba56289961ceb01a1926a8503fcd3649a1de8ea9e0c23a8affd1bb6",
    "judge_lme_temporal": "41b9228e72383f57deb2ef0aa73946ec5a30c75c5c5a3215e051420ab3fbb3d9",
    "judge_lme_knowledge_update": "5e8f6aa484d44484c16ed3ce2396ee26c0ccbe122a3447a9cd4febe78c161c4b",
    "judge_lme_preference": "748a5b8e09a2ea553fb1c62ba19a98a04a90fc8853194266a6e901ccc5c6cfec",
    "judge_lme_abstention": "5c05eb2ce11f92bd0ae18b9b412575953898531d845028eb9e63e974eb2cba67",
}
# The same texts with the slots back in the official positional form "{}".
OFFICIAL_POSITIONAL_SHA256 = {
    "judge_lme_default": "fba020ba3d57982efdc9a937c1c01f897b789a608c7f88e60244121f6505e5bc",
    "judge_lme_temporal": "8d33a5fdd83afeeb4592454a965eab43d1fcb2dedc042d1d3892f4254be6c273",
    "judge_lme_knowledge_update": "183a9b3a6197ec620940f610cdc1207201ec98c1113dd633ea685cfc322fafac",
    "judge_lme_preference": "741ee3bcbea7ff5e8ed359acef61d2f8ded3de021bbcff6ee13de455f2e2aa9b",
    "judge_lme_abstention": "5c0b365a1e1d06db36377c735432b56e122ca3c428f89faf61d43a0d5a7e050b",
}


# --------------------------------------------------------------------------- template files
@pytest.mark.parametrize("pid", PROMPT_IDS)
def test_template_files_are_the_official_strings(pid):
    assert set(OFFICIAL_SHA256) == set(PROMPT_IDS)
    raw = (prompts.PROMPT_DIR / f"{pid}.txt").read_bytes()
    assert raw.endswith(b"\n") and not raw.endswith(b"\n\n")  # one editor newline, stripped by the loader
    text = prompts.load(pid)
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == OFFICIAL_SHA256[pid]
    positional = text.replace("{question}", "{}").replace("{answer}", "{}").replace("{response}", "{}")
    assert hashlib.sha256(positional.encode("utf-8")).hexdigest() == OFFICIAL_POSITIONAL_SHA256[pid]
    # Slots in the official order, each once, and no other braces.
    assert text.index("{question}") < text.index("{answer}") < text.index("{response}")
    assert text.count("{") == text.count("}") == 3
    assert text.endswith("Answer yes or no only.")


def test_template_details_kept():
    # Trailing spaces before the blank line are part of the official default and temporal strings.
    assert "answer, answer no. \n\nQuestion: {question}" in prompts.load("judge_lme_default")
    assert "still correct. \n\nQuestion: {question}" in prompts.load("judge_lme_temporal")
    assert "\n\nRubric: {answer}\n\n" in prompts.load("judge_lme_preference")
    assert "\n\nExplanation: {answer}\n\n" in prompts.load("judge_lme_abstention")
    assert "\n\nCorrect Answer: {answer}\n\n" in prompts.load("judge_lme_knowledge_update")


# --------------------------------------------------------------------------- template choice
@pytest.mark.parametrize("qtype, pid", [
    ("single-session-user", "judge_lme_default"),
    ("single-session-assistant", "judge_lme_default"),
    ("multi-session", "judge_lme_default"),
    ("temporal-reasoning", "judge_lme_temporal"),
    ("knowledge-update", "judge_lme_knowledge_update"),
    ("single-session-preference", "judge_lme_preference"),
])
def test_template_per_type(qtype, pid):
    assert template_id(qtype, "e47becba") == pid


@pytest.mark.parametrize("qtype", QUESTION_TYPES)
def test_abs_overrides_every_type(qtype):
    assert template_id(qtype, "gpt4_2655b836_abs") == "judge_lme_abstention"


def test_temporal_abs_gets_abstention():
    assert template_id("temporal-reasoning", "gpt4_468eb064_abs") == "judge_lme_abstention"
    assert template_id("temporal-reasoning", "gpt4_468eb064") == "judge_lme_temporal"


@pytest.mark.parametrize("qtype", ["", "temporal", "Multi-Session", "adversarial"])
def test_unknown_type_raises(qtype):
    with pytest.raises(ValueError, match="question_type"):
        template_id(qtype, "q1")
    # Issue 11 item 7: as the official code, an `_abs` id takes the abstention branch before the
    # type is looked at (tests/test_fidelity.py).
    assert template_id(qtype, "q1_abs") == "judge_lme_abstention"


# --------------------------------------------------------------------------- rendering
@pytest.mark.parametrize("pid", PROMPT_IDS)
def test_rendered_prompt_has_values_and_no_slots(pid):
    msgs = judge_messages(pid, "How many days?", "18 days", "It took 19 days.")
    assert len(msgs) == 1 and msgs[0]["role"] == "user"
    content = msgs[0]["content"]
    assert "How many days?" in content and "18 days" in content and "It took 19 days." in content
    for slot in ("{question}", "{answer}", "{response}"):
        assert slot not in content
    assert "{" not in content and "}" not in content


@pytest.mark.parametrize("pid", PROMPT_IDS)
def test_render_matches_official_positional_format(pid):
    positional = prompts.load(pid).replace("{question}", "{}").replace("{answer}", "{}").replace("{response}", "{}")
    q, a, r = "Q {x} {answer}?", "A {question}", "R {response} {}"
    assert fill_template(pid, q, a, r) == positional.format(q, a, r)


def test_render_is_single_pass():
    content = fill_template("judge_lme_default", "what is {answer}?", "gold", "I said {question}")
    assert "Question: what is {answer}?" in content
    assert "Correct Answer: gold" in content
    assert "Model Response: I said {question}" in content


# --------------------------------------------------------------------------- labels
@pytest.mark.parametrize("reply, official, strict", [
    ("Yes.", 1, 1),
    ("yes", 1, 1),
    ("  YES \n", 1, 1),
    ("no", 0, 0),
    ("No.", 0, 0),
    ("NO", 0, 0),
    ("The answer is yes", 1, None),
    ("Not sure", 0, None),
    ("Yesterday", 1, None),  # the official substring rule counts it
    ("", 0, None),
    ("yes or no", 1, None),
])
def test_official_vs_strict_label(reply, official, strict):
    assert official_label(reply) == official
    assert strict_label(reply) == strict


# --------------------------------------------------------------------------- judge_answer_lme
@dataclass
class _Settings:
    model: str


@dataclass
class _Completion:
    text: str
    cache_key: str
    usage: dict = field(default_factory=dict)
    latency: float = 0.0
    cached: bool = False


class StubClient:
    """Records calls; replies with a fixed text or raises a fixed error."""

    def __init__(self, reply: str = "Yes.", error: Exception | None = None):
        self.reply, self.error, self.calls = reply, error, []

    def settings(self, role):
        assert role == "judge"
        return _Settings(model="judge-m")

    def complete(self, role, messages, *, json_mode=False, max_tokens=None, prompt_id=None):
        self.calls.append({"role": role, "messages": messages, "json_mode": json_mode, "max_tokens": max_tokens,
                           "prompt_id": prompt_id})
        if self.error is not None:
            raise self.error
        return _Completion(text=self.reply, cache_key="ck-1")


def _rows(qid="gpt4_468eb064_abs", qtype="temporal-reasoning", answer="You did not mention it."):
    a = AnswerRow(qid=qid, memory_id=qid, question="How many days between A and B?", answer=answer,
                  model="m", prompt_id="answer_user", error="" if answer is not None else "http_400: boom")
    g = Gold(qid=qid, memory_id=qid, answer="The information provided is not enough.", category=0,
             question_type=qtype, abstention="_abs" in qid)
    return a, g


def test_judge_answer_lme_call_shape_and_label():
    client = StubClient("Yes.")
    a, g = _rows()
    row = judge_answer_lme(client, "gpt-4o", a, g)
    assert len(client.calls) == 1
    call = client.calls[0]
    assert call["role"] == "judge" and call["json_mode"] is False and call["max_tokens"] == 10
    assert call["prompt_id"] == "judge_lme_abstention"  # the template sent, as the X-Prompt-Id header
    msgs = call["messages"]
    assert len(msgs) == 1 and msgs[0]["role"] == "user"
    assert msgs[0]["content"] == fill_template("judge_lme_abstention", a.question, g.answer, a.answer)
    assert row.prompt_id == "judge_lme_abstention"
    assert row.label == 1 and row.parse_ok and row.raw == "Yes." and row.cache_key == "ck-1"
    assert row.judge == "gpt-4o" and row.judge_model == "judge-m" and row.qid == a.qid and row.error == ""
    assert strict_label(row.raw) == 1


def test_judge_answer_lme_type_template_and_substring_label():
    client = StubClient("The answer is yes, mostly")
    a, g = _rows(qid="e47becba", qtype="knowledge-update", answer="Twice, now three times")
    row = judge_answer_lme(client, "gpt-4o", a, g)
    assert row.prompt_id == client.calls[0]["prompt_id"] == "judge_lme_knowledge_update"
    assert "Is the model response correct?" in client.calls[0]["messages"][0]["content"]
    assert row.label == 1 and row.parse_ok and strict_label(row.raw) is None

    client = StubClient("no")
    row = judge_answer_lme(client, "gpt-4o", a, g)
    assert row.label == 0 and row.parse_ok


def test_judge_answer_lme_none_answer_makes_no_call():
    client = StubClient()
    a, g = _rows(answer=None)
    row = judge_answer_lme(client, "gpt-4o", a, g)
    assert client.calls == []
    assert row.label is None and not row.parse_ok and row.raw == ""
    assert row.error.startswith("no_answer") and "boom" in row.error
    assert row.prompt_id == "judge_lme_abstention" and row.judge_model == "judge-m"


def test_judge_answer_lme_call_error():
    client = StubClient(error=LLMCallError("server said no", cause="http_400"))
    a, g = _rows(qid="q9", qtype="multi-session", answer="3")
    row = judge_answer_lme(client, "gpt-4o", a, g)
    assert len(client.calls) == 1
    assert row.label is None and not row.parse_ok and row.raw == ""
    assert row.error == "http_400: server said no" and row.prompt_id == "judge_lme_default"


def test_judge_answer_lme_unknown_type_raises_before_call():
    client = StubClient()
    a, g = _rows(qid="q9", qtype="open-domain")
    with pytest.raises(ValueError):
        judge_answer_lme(client, "gpt-4o", a, g)
    assert client.calls == []
