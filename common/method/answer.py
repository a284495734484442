"""Stage 07: answer from the evidence buffer (paper eq. 6, Appendix E.2)."""
from __future__ import annotations

import json

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient
from common.core.schema import AnswerRow, Plan, Question, RetrievalRow
from common.method.plan import compact_plan

PROMPT_IDS = ("answer_system", "answer_user")


def _prompt_id(family: str) -> str:
    # mem0's answer prompt is one template sent as the system message (as mem0's search.py does).
    return f"{family}_user"


def prompt_family(plan: Plan | None, retrieval: RetrievalRow, style: str = "harness") -> str:
    """EnSIMem's answer prompt (with the plan); systems without a plan get the same rules
    without it (``answer_baseline``), or the closed-book prompt when they carry no memory;
    ``style="mem0"`` (config ``answer.prompt``) gives them mem0's own LoCoMo answer prompt."""
    if plan is not None:
        return "answer"
    if style == "mem0":
        return "answer_mem0"
    return "answer_closed_book" if retrieval.mode == "no_memory" else "answer_baseline"


def mem0_messages(question: Question, retrieval: RetrievalRow) -> list[dict[str, str]]:
    """mem0's evaluation: one system message, each speaker's memories as a JSON list of
    ``"<timestamp>: <memory>"`` strings (indent 4). The groups are the evidence items' sources
    (two for mem0); evidence without sources (the baselines) is one group of buffer lines."""
    groups: dict[str, list[str]] = {}
    for e in retrieval.method_info.get("evidence", []):
        groups.setdefault(e.get("source", ""), []).append(
            f"{e['timestamp']}: {e['text']}" if e.get("timestamp") else e["text"])
    if not groups and retrieval.buffer_text:
        groups[""] = [line for line in retrieval.buffer_text.splitlines() if line.strip()]
    names = (list(groups) + ["", ""])[:2]
    extra = [m for src in list(groups)[2:] for m in groups[src]]  # more than two sources: all shown
    slots = {"speaker_1_user_id": names[0], "speaker_2_user_id": names[1],
             "speaker_1_memories": json.dumps(groups.get(names[0], []) + extra, indent=4),
             "speaker_2_memories": json.dumps(groups.get(names[1], []) if names[1] != names[0] else [], indent=4),
             "question": question.question}
    return [{"role": "system", "content": prompts.fill("answer_mem0_user", **slots)}]


def answer_messages(question: Question, plan: Plan | None, retrieval: RetrievalRow,
                    style: str = "harness") -> list[dict[str, str]]:
    date = question.question_date or "unknown"
    pid = prompt_family(plan, retrieval, style)
    if pid == "answer_mem0":
        return mem0_messages(question, retrieval)
    if plan is None:
        user = prompts.fill(f"{pid}_user", question_date=date, question=question.question,
                              **({} if retrieval.mode == "no_memory" else
                                 {"context": retrieval.buffer_text or "(no conversation context)"}))
        return [{"role": "system", "content": prompts.load(f"{pid}_system")}, {"role": "user", "content": user}]
    # The date line appears only for a question asked on a date (LongMemEval), as in the authors'
    # LongMemEval answer step; their LoCoMo answer prompt has none (common/prompts/SOURCES.md).
    date_line = f"Question date: {question.question_date}\n" if question.question_date else ""
    user = prompts.fill(
        "answer_user", question_date_line=date_line, question=question.question,
        plan=compact_plan(plan, retrieval.bridges), episodes=retrieval.buffer_text or "(no episodes retrieved)",
    )
    return [{"role": "system", "content": prompts.load("answer_system")}, {"role": "user", "content": user}]


def answer_question(client: LLMClient, question: Question, plan: Plan | None, retrieval: RetrievalRow,
                    style: str = "harness") -> AnswerRow:
    """One plain chat call; a failed call is a recorded row with ``answer=None``."""
    settings = client.settings("answer")
    row = AnswerRow(qid=question.qid, memory_id=question.memory_id, question=question.question,
                    answer=None, model=settings.model,
                    prompt_id=_prompt_id(prompt_family(plan, retrieval, style)))
    try:
        c = client.complete("answer", answer_messages(question, plan, retrieval, style), json_mode=False,
                            prompt_id=row.prompt_id)
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
        return row
    row.cache_key, row.usage, row.latency, row.cached = c.cache_key, c.usage, round(c.latency, 4), c.cached
    row.answer = c.text.strip()
    if not row.answer:
        row.error = "empty_answer"
    return row
