"""Stage 07: answer from the evidence buffer (paper eq. 6, Appendix E.2)."""
from __future__ import annotations

from common import prompts
from common.llm import LLMCallError, LLMClient
from common.plan import compact_plan
from common.schema import AnswerRow, Plan, Question, RetrievalRow

PROMPT_IDS = ("answer_system", "answer_user")


def answer_messages(question: Question, plan: Plan, retrieval: RetrievalRow) -> list[dict[str, str]]:
    user = prompts.render(
        "answer_user", question_date=question.question_date or "unknown", question=question.question,
        plan=compact_plan(plan), episodes=retrieval.buffer_text or "(no episodes retrieved)",
    )
    return [{"role": "system", "content": prompts.load("answer_system")}, {"role": "user", "content": user}]


def answer_question(client: LLMClient, question: Question, plan: Plan, retrieval: RetrievalRow) -> AnswerRow:
    """One plain chat call; a failed call is a recorded row with ``answer=None``."""
    settings = client.settings("answer")
    row = AnswerRow(qid=question.qid, memory_id=question.memory_id, question=question.question,
                    answer=None, model=settings.model, prompt_id="answer_user")
    try:
        c = client.complete("answer", answer_messages(question, plan, retrieval), json_mode=False)
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
        return row
    row.cache_key, row.usage, row.latency = c.cache_key, c.usage, round(c.latency, 4)
    row.answer = c.text.strip()
    if not row.answer:
        row.error = "empty_answer"
    return row
