"""Stage 08 for LongMemEval: the official yes/no judge (spec/benchmarks.md §3.2).

The five templates are the official ``get_anscheck_prompt`` strings (xiaowu0162/LongMemEval,
``src/evaluation/evaluate_qa.py``, MIT), stored byte for byte in ``common/prompts/judge_lme_*.txt``
with the three positional ``{}`` slots named ``{question}``, ``{answer}``, ``{response}``.

Protocol: one user message, temperature 0 (the judge role's setting), max_tokens 10. The template
follows ``question_type``, except that any question whose id contains ``_abs`` gets the abstention
template whatever its type. The official label is the substring test ``'yes' in reply.lower()``;
a strict label (the reply is exactly "yes" or "no") is derived from ``JudgeRow.raw`` at
aggregation time and reported beside it.

``judge.prompt: authors`` is the authors' LongMemEval judge (``memora_evaluation.judge_prediction``,
RamonMeng/EnSIMem @8b819a5f) as a labelled option beside the official checker: their criteria per
type, in this harness's words (``judge_lme_authors_*``; their own wording paraphrases the official
templates), the abstention template for a question id ENDING in ``_abs``, max_tokens 64, and the
label from the LAST standalone yes/no of the reply (none: incorrect). Their seed 0 and disabled
thinking for a local vLLM judge are not reproduced. The default stays the official checker.
"""
from __future__ import annotations

import re
from typing import Optional

from common.core import prompts
from common.core.llm import LLMClient
from common.core.schema import AnswerRow, Gold, JudgeRow
from common.evaluation.judge import run_judge

ABSTENTION = "judge_lme_abstention"
TEMPLATE_BY_TYPE: dict[str, str] = {
    "single-session-user": "judge_lme_default",
    "single-session-assistant": "judge_lme_default",
    "multi-session": "judge_lme_default",
    "temporal-reasoning": "judge_lme_temporal",
    "knowledge-update": "judge_lme_knowledge_update",
    "single-session-preference": "judge_lme_preference",
}
QUESTION_TYPES = tuple(TEMPLATE_BY_TYPE)
PROMPT_IDS = ("judge_lme_default", "judge_lme_temporal", "judge_lme_knowledge_update",
              "judge_lme_preference", ABSTENTION)
MAX_TOKENS = 10
AUTHORS = "authors"  # judge.prompt of the authors' judge
AUTHORS_MAX_TOKENS = 64
AUTHORS_BY_TYPE = {"temporal-reasoning": "judge_lme_authors_temporal",
                   "knowledge-update": "judge_lme_authors_knowledge_update",
                   "single-session-preference": "judge_lme_authors_preference"}
AUTHORS_IDS = ("judge_lme_authors_default", "judge_lme_authors_temporal", "judge_lme_authors_knowledge_update",
               "judge_lme_authors_preference", "judge_lme_authors_abstention")
_YES_NO = re.compile(r"\b(yes|no)\b")

_SLOTS = ("question", "answer", "response")
_SLOT_RE = re.compile(r"\{(question|answer|response)\}")


def template_id(question_type: str, question_id: str) -> str:
    """The prompt id for one question; ``_abs`` in the id selects abstention whatever the type.

    As the official ``get_anscheck_prompt``: the abstention branch is taken before the type is
    looked at, so an ``_abs`` item of any type (an unknown one included) gets the abstention
    template; a non-abstention item of an unknown type raises ``ValueError`` (officially
    NotImplementedError).
    """
    if "_abs" in question_id:
        return ABSTENTION
    if question_type not in TEMPLATE_BY_TYPE:
        raise ValueError(f"unknown LongMemEval question_type {question_type!r}")
    return TEMPLATE_BY_TYPE[question_type]


def authors_template_id(question_type: str, question_id: str) -> str:
    """The authors' judge template: abstention for an id ending in ``_abs``, else by type (any other
    type, an unknown one included, gets their default template)."""
    if question_id.endswith("_abs"):
        return "judge_lme_authors_abstention"
    return AUTHORS_BY_TYPE.get(question_type, "judge_lme_authors_default")


def judge_template(prompt: str, question_type: str, question_id: str) -> str:
    """The template of one item under ``judge.prompt`` (``authors`` or the official checker)."""
    return authors_template_id(question_type, question_id) if prompt == AUTHORS else template_id(question_type,
                                                                                                 question_id)


def authors_label(reply: Optional[str]) -> int:
    """The authors' rule: the reply's last standalone yes or no decides; neither is incorrect."""
    decisions = _YES_NO.findall((reply or "").lower())
    return 1 if decisions and decisions[-1] == "yes" else 0


def fill_template(prompt_id: str, question: str, answer: str, response: str) -> str:
    """Fill the three slots in one pass, as the official ``str.format`` does.

    A single pass matters: a question or response that itself contains ``{answer}`` is left as
    is instead of being substituted again (``prompts.render`` replaces slots one after another).
    """
    text = prompts.load(prompt_id)
    for name in _SLOTS:
        if text.count("{" + name + "}") != 1:
            raise KeyError(f"prompt '{prompt_id}' must have exactly one {{{name}}} slot")
    values = {"question": str(question), "answer": str(answer), "response": str(response)}
    return _SLOT_RE.sub(lambda m: values[m.group(1)], text)


def judge_messages(prompt_id: str, question: str, answer: str, response: str) -> list[dict[str, str]]:
    """One user message, as the official code sends."""
    return [{"role": "user", "content": fill_template(prompt_id, question, answer, response)}]


def official_label(reply: Optional[str]) -> int:
    """The official rule: 1 iff 'yes' occurs anywhere in the lower-cased reply (so "yesterday" counts)."""
    return 1 if "yes" in (reply or "").lower() else 0


def strict_label(reply: Optional[str]) -> Optional[int]:
    """1 if the reply is exactly "yes", 0 if exactly "no" (case, surrounding space and one trailing
    '.' ignored); None for anything else."""
    s = (reply or "").strip().lower()
    s = s.removesuffix(".").strip()
    return {"yes": 1, "no": 0}.get(s)


def judge_answer_lme(client: LLMClient, name: str, answer: AnswerRow, gold: Gold, repeat: int = 0) -> JudgeRow:
    """Judge one answer with the official template for ``gold.question_type`` / ``gold.qid``.

    Mirrors ``common.evaluation.judge.judge_answer``: a missing answer makes no request (label None, error
    ``no_answer``); an ``LLMCallError`` gives label None with its cause; otherwise the label is
    ``official_label`` of the reply, which always parses (``parse_ok`` True).
    """
    prompt_id = template_id(gold.question_type, gold.qid)
    return run_judge(client, name, prompt_id, answer,
                     lambda: judge_messages(prompt_id, answer.question, gold.answer, answer.answer or ""),
                     official_label, repeat=repeat, json_mode=False, max_tokens=MAX_TOKENS)


def judge_answer_authors(client: LLMClient, name: str, answer: AnswerRow, gold: Gold, repeat: int = 0) -> JudgeRow:
    """``judge.prompt: authors``: one answer judged as the authors' judge does (see the module docstring)."""
    prompt_id = authors_template_id(gold.question_type, gold.qid)
    return run_judge(client, name, prompt_id, answer,
                     lambda: judge_messages(prompt_id, answer.question, gold.answer, answer.answer or ""),
                     authors_label, repeat=repeat, json_mode=False, max_tokens=AUTHORS_MAX_TOKENS)
