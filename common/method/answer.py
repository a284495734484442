"""Stage 07: answer from the evidence buffer (paper eq. 6, Appendix E.2)."""
from __future__ import annotations

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient
from common.core.schema import AnswerRow, Plan, Question, RetrievalRow
from common.method.plan import compact_plan

PROMPT_IDS = ("answer_system", "answer_user")


def prompt_family(plan: Plan | None, retrieval: RetrievalRow) -> str:
    """EnSIMem's answer prompt (with the plan); baselines have no plan and get the same rules
    without it (``answer_baseline``), or the closed-book prompt when they carry no memory."""
    if plan is not None:
        return "answer"
    return "answer_closed_book" if retrieval.mode == "no_memory" else "answer_baseline"


def answer_messages(question: Question, plan: Plan | None, retrieval: RetrievalRow) -> list[dict[str, str]]:
    date = question.question_date or "unknown"
    pid = prompt_family(plan, retrieval)
    if plan is None:
        user = prompts.fill(f"{pid}_user", question_date=date, question=question.question,
                              **({} if retrieval.mode == "no_memory" else
                                 {"context": retrieval.buffer_text or "(no conversation context)"}))
        return [{"role": "system", "content": prompts.load(f"{pid}_system")}, {"role": "user", "content": user}]
    user = prompts.fill(
        "answer_user", question_date=date, question=question.question,
        plan=compact_plan(plan, retrieval.bridges), episodes=retrieval.buffer_text or "(no episodes retrieved)",
    )
    return [{"role": "system", "content": prompts.load("answer_system")}, {"role": "user", "content": user}]


def answer_question(client: LLMClient, question: Question, plan: Plan | None, retrieval: RetrievalRow) -> AnswerRow:
    """One plain chat call; a failed call is a recorded row with ``answer=None``."""
    settings = client.settings("answer")
    row = AnswerRow(qid=question.qid, memory_id=question.memory_id, question=question.question,
                    answer=None, model=settings.model,
                    prompt_id=f"{prompt_family(plan, retrieval)}_user")
    try:
        c = client.complete("answer", answer_messages(question, plan, retrieval), json_mode=False,
                            prompt_id=row.prompt_id)
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
        return row
    row.cache_key, row.usage, row.latency, row.cached = c.cache_key, c.usage, round(c.latency, 4), c.cached
    row.answer = c.text.strip()
    if not row.answer:
        row.error = "empty_answer"
    return row
