"""Stage 08: the LoCoMo judge (Memora/mem0-compatible, paper Appendix C and E.3).

Temperature 0, seed 42, JSON mode, one user message. Parsing is strict: the reply must be a
JSON object whose ``label`` is exactly CORRECT or WRONG; anything else is a recorded judge
failure (label None), which strict accuracy counts as wrong and never drops.
"""
from __future__ import annotations

import json
from typing import Any, Callable

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient
from common.core.schema import AnswerRow, Gold, JudgeRow

LABELS = {"CORRECT": 1, "WRONG": 0}


def parse_label(text: str) -> int:
    """1 for CORRECT, 0 for WRONG; ``ValueError`` for anything that is not such a JSON object."""
    s = text.strip()
    if s.startswith("```"):
        # A fenced object is still an exact JSON object; nothing else is unwrapped.
        s = s.strip("`").removeprefix("json").strip()
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as exc:
        raise ValueError(f"judge reply is not a JSON object: {exc.msg}") from None
    if not isinstance(obj, dict) or "label" not in obj:
        raise ValueError("judge reply has no 'label' key")
    label = obj["label"]
    if label not in LABELS:
        raise ValueError(f"judge label {label!r} is not CORRECT or WRONG")
    return LABELS[label]


def fill_prompt(prompt_id: str, question: str, gold: str, answer: str) -> str:
    """The judge prompt with its three slots filled in ONE pass, as mem0's ``str.format`` does.

    ``prompts.fill`` replaces slots one after another, so an answer or question holding the text
    ``{gold_answer}`` would be substituted again; here a filled value is never rescanned.
    """
    return prompts.fill_once(prompt_id, question=str(question), gold_answer=str(gold), generated_answer=str(answer))


def judge_messages(prompt_id: str, question: str, gold: str, answer: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": fill_prompt(prompt_id, question, gold, answer)}]


def run_judge(client: LLMClient, name: str, prompt_id: str, answer: AnswerRow,
              messages: Callable[[], list[dict[str, str]]], parse: Callable[[str], int],
              repeat: int = 0, **complete_kw: Any) -> JudgeRow:
    """One judge call with the failure discipline every benchmark shares.

    A missing or empty answer makes no request; a failed call or an unparsable reply gives label None
    with its cause in ``error`` (counted wrong in strict accuracy, never dropped). ``repeat`` = i
    is judge run i of ``judge.runs`` (seed 42+i, its own cache entry; 0 = the ordinary call).
    """
    settings = client.settings("judge")
    row = JudgeRow(qid=answer.qid, judge=name, judge_model=settings.model, prompt_id=prompt_id, label=None)
    if not answer.answer:  # None (the call failed) or empty: nothing to judge, a counted failure
        row.error = f"no_answer: {answer.error or ('empty_answer' if answer.answer == '' else 'answer stage failed')}"
        return row
    try:
        if repeat:  # only repeated runs pass it: run 0 is the same request as before
            complete_kw["repeat"] = repeat
        c = client.complete("judge", messages(), prompt_id=prompt_id, **complete_kw)
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
        return row
    row.raw, row.cache_key = c.text, c.cache_key
    row.usage, row.latency, row.cached = c.usage, round(c.latency, 4), c.cached
    try:
        row.label, row.parse_ok = parse(c.text), True
    except ValueError as exc:
        row.error = f"judge_parse_error: {exc}"
    return row


def judge_answer(client: LLMClient, name: str, prompt_id: str, answer: AnswerRow, gold: Gold,
                 repeat: int = 0) -> JudgeRow:
    """The LoCoMo (Memora/mem0) judge: JSON mode, strict CORRECT/WRONG label."""
    return run_judge(client, name, prompt_id, answer,
                     lambda: judge_messages(prompt_id, answer.question, gold.answer, answer.answer or ""),
                     parse_label, repeat=repeat, json_mode=True)
