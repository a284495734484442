"""Stage 07: answer from the evidence buffer (paper eq. 6, Appendix E.2).

Two optional steps from the authors' LongMemEval answer step, generic parts only (no routing on a
question's type or label): ``answer.rerank`` first lets one call (role ``answer_rerank``) pick the
buffer episodes that fill the question's evidence slots, and the answer reads only those;
``answer.verify`` treats the answer as a draft that one independent call (role ``answer_verify``)
keeps or rewrites. Any failure of either step keeps what was there before it, recorded in ``steps``.
A plan that needs every candidate (``needs_every_candidate``: all_matching scope, or a count, list or
time answer target) is never reranked (``answer.rerank_keep_all``), so no count loses an instance.
``answer.draft: json`` makes the answer call the authors' LongMemEval JSON draft (role
``answer_draft``, its own token budget); ``answer.verify_personal`` keeps the verify step from
cutting a suggestion fitted to the user (decided from the question's wording) to the shortest form.
``answer.draft_prompt: longmemeval`` gives the JSON draft the authors' LongMemEval draft system prompt
instead of the set's answer rules; ``answer.keep_whole_point`` skips the rerank for the point plans the
authors keep whole (temporal point plans, latest/previous wording, direct lookups about the user).
``answer.routes.*`` (common.method.routes) run before both: guards on the buffer, and the counting
and temporal ledgers, whose answer (when they compute one) replaces the answer call.
"""
from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from common.core import prompts
from common.core.llm import Completion, LLMCallError, LLMClient, parse_json_object
from common.core.schema import AnswerRow, Plan, Question, RetrievalRow
from common.core.tokens import count_tokens
from common.method.plan import compact_plan
from common.method.routes import FIRST_PERSON_RE, Routes, operator_of, run_routes
from common.method.routes.wording import ELAPSED_RE, TENURE_RE

PROMPT_IDS = ("answer_system", "answer_user")
RERANK_PROMPT_IDS = ("code_rules.answer_rerank_system", "code_rules.answer_rerank_user")
VERIFY_PROMPT_IDS = ("code_rules.answer_verify_system", "code_rules.answer_verify_user")
DRAFT_PROMPT_ID = "code_rules.answer_draft_user"
LME_DRAFT_SYSTEM_ID = "code_rules.answer_draft_system"
# answer.draft_rules: the rules of the authors' FINAL_ANSWER_SYSTEM (own words), with draft_prompt: longmemeval.
LME_RULES_SYSTEM_ID = "code_rules.answer_draft_rules_system"
# Answer targets whose every instance counts: the authors select ALL candidates for their aggregate,
# elapsed-time and event-time operators; here read from the plan, never from a benchmark label.
KEEP_ALL_TARGETS = frozenset({"count", "list", "time"})
# A question asking for something chosen for the user, in its own words (no label).
PERSONAL_REQUEST = re.compile(
    r"\b(recommend\w*|suggest\w*|tips?|advice|advise|ideas?|what should i|which should i|"
    r"can you help me (?:choose|pick|find|plan|decide))\b", re.I)
# The verify step's rule on the answer's length, for an ordinary and for a personalised question.
SHORT_FORM = "if it is longer than the shortest sufficient answer"
PERSONAL_FORM = ("if it drops what the episodes say about this user's own preferences, constraints or past "
                 "experience (this question asks for a suggestion fitted to the user: keep those details "
                 "and the reasons, never cut the answer down to a bare phrase)")
# Fewest episodes a rerank keeps for a point plan (the authors pad to 2 outside their aggregate
# operators); an all_matching plan is padded up to the limit, as they do not minimize aggregates.
RERANK_MIN_POINT = 2
# answer.verify_checklist: the checks of the authors' ANSWER_VERIFY_SYSTEM, as rewrite conditions.
VERIFY_CHECKS = ("if its date arithmetic is wrong", "if it puts events in the wrong order",
                 "if it gives an earlier state where the current one is asked for, or the reverse",
                 "if it counts instances the question's exact wording does not cover, or misses some",
                 "if it puts forward something the user said they avoid")
# answer.draft_audit: the answer routes' checked lines, shown beside the plan as the authors' audit.
AUDIT_HEADER = "\n\nEvidence audit (lines checked against the episodes; an aid, not facts of their own):\n"


@dataclass(frozen=True)
class AnswerSteps:
    """``answer.*`` switches of one run."""

    prompt_set: str = prompts.PAPER
    rerank: bool = False
    rerank_max: int = 20
    verify: bool = False
    style: str = "harness"
    rerank_keep_all: bool = True
    draft: str = "plain"
    verify_personal: bool = True
    routes: Routes = Routes()
    draft_prompt: str = "answer_system"
    keep_whole_point: bool = False
    strip: bool = True  # answer.strip: false keeps the reply's surrounding whitespace (BEAM)
    rerank_pad_operators: bool = False
    draft_rules: bool = False
    draft_audit: bool = False
    verify_checklist: bool = False
    verify_short: bool = True


@dataclass
class _Calls:
    """The calls of one answer row, in order, each recorded with its role."""

    records: list[dict[str, Any]] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)

    def add(self, c: Completion, prompt_id: str, role: str) -> None:
        self.records.append({**c.record(prompt_id), "role": role})
        self.completions.append(c)


def _prompt_id(family: str) -> str:
    # mem0's answer prompt is one template sent as the system message (as mem0's search.py does).
    return f"{family}_user"


def prompt_family(plan: Plan | None, retrieval: RetrievalRow, style: str = "harness") -> str:
    """EnSIMem's answer prompt (with the plan); systems without a plan get the same rules
    without it (``answer_baseline``), or the closed-book prompt when they carry no memory;
    ``style="mem0"`` (config ``answer.prompt``) gives them mem0's own LoCoMo answer prompt,
    ``style="beam"`` the official BEAM runner's answer prompt, ``style="realtalk"`` REALTALK's."""
    if plan is not None:
        return "answer"
    if style == "mem0":
        return "answer_mem0"
    if style == "beam":
        return "answer_beam"
    if style == "realtalk":
        return "answer_realtalk"
    if style != "harness":  # a system's own answer prompt (systems.protocol: native)
        return f"answer_{style}"
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


# Native answer prompts whose reference sends the filled template as ONE system message (as mem0's
# search.py sends ANSWER_PROMPT_GRAPH and MemOS's locomo_responses.py ANSWER_PROMPT_MEMOS).
ONE_SYSTEM_MESSAGE = frozenset({"answer_mem0_graph", "answer_memos"})
_SLOT = re.compile(r"\{([a-z_][a-z0-9_]*)\}")


# A native prompt whose reference asks its LLM wrapper for a JSON reply and keeps one field: family ->
# (the wrapper's schema text appended to the system message, its JSON hint put before a user message
# that does not say "json", the field kept). Hindsight's benchmark calls its wrapper with
# response_format=QuestionAnswer: hindsight-api-slim 1.1.0, openai_compatible_llm.py, the soft
# json_object path (schema in the system message, JSON_MODE_USER_HINT, response_format json_object).
JSON_REPLY = {"answer_hindsight": ("answer_hindsight_schema", "answer_hindsight_json_hint", "answer")}


class SlotsMissing(ValueError):
    """A system's own answer prompt names slots its retrieval row has no value for."""


def system_messages(family: str, question: Question, retrieval: RetrievalRow) -> list[dict[str, str]]:
    """A system's own answer prompt (``common/prompts/<family>_user.txt``, and ``<family>_system.txt``
    when the reference sends a system message before it; a family in ``ONE_SYSTEM_MESSAGE`` sends the
    filled template alone, as a system message). Its slots are filled in one pass, as the reference's
    ``str.format``, f-string or Jinja template fills them: ``question``, ``question_date``, ``context``
    (the system's rendered buffer) and those the system's search rendered itself
    (``method_info.answer_slots``, from a child's reply under the native protocol). A slot left
    without a value is an error, never sent as its name."""
    user_id = f"{family}_user"
    text = prompts.load(user_id)
    slots: dict[str, object] = {"question": question.question,
                                "question_date": question.question_date or "unknown",
                                "context": retrieval.buffer_text,
                                **(retrieval.method_info.get("answer_slots") or {})}
    missing = sorted(set(_SLOT.findall(text)) - set(slots))
    if missing:
        raise SlotsMissing(f"prompt '{user_id}': no value for slot(s) {missing} in the retrieval row of "
                         f"{question.qid} (its search rendered none)")
    filled = prompts.fill_once(user_id, **{k: v for k, v in slots.items() if "{" + k + "}" in text})
    if family in ONE_SYSTEM_MESSAGE:
        return [{"role": "system", "content": filled}]
    system_id = f"{family}_system"
    system = prompts.load(system_id) if prompts.exists(system_id) else None
    if family in JSON_REPLY and system is not None:  # as the reference's wrapper sends them
        schema_id, hint_id, _ = JSON_REPLY[family]
        system += prompts.load(schema_id)
        filled = filled if "json" in filled else f"{prompts.load(hint_id)}\n\n{filled}"
    return ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": filled}]


def json_reply_answer(family: str, text: str) -> str:
    """The field a JSON-reply native prompt keeps (``JSON_REPLY``); ValueError: no JSON object."""
    return str(parse_json_object(text).get(JSON_REPLY[family][2]) or "")


def native_answer(question: Question, retrieval: RetrievalRow, model: str, system: str) -> Optional[AnswerRow]:
    """The answer a system's own agent gave while searching (``systems.protocol: native``), as
    07's row: no answer call (the agent's calls are in 06's ledger, role ``memory``). None when the
    row carries no such answer."""
    text = retrieval.method_info.get("native_answer")
    if text is None:
        return None
    row = AnswerRow(qid=question.qid, memory_id=question.memory_id, question=question.question,
                    answer=str(text).strip(), model=model, prompt_id=f"native.{system}", cached=True)
    row.steps["native"] = True
    if not row.answer:
        row.error = "empty_answer"
    return row


def retrieval_failed(question: Question, retrieval: RetrievalRow, model: str) -> Optional[AnswerRow]:
    """The answer row of a question whose memory system failed in 06 (its ingestion or its search
    raised: ``method_info.failed``): no answer call, a counted failure (``retrieval_failed``) that
    the next run redoes once 06 has. None for every other row."""
    if not (retrieval.error and retrieval.method_info.get("failed")):
        return None
    return AnswerRow(qid=question.qid, memory_id=question.memory_id, question=question.question, answer=None,
                     model=model, prompt_id="retrieval_failed", error=f"retrieval_failed: {retrieval.error}")


def _date_line(question: Question) -> str:
    return f"Question date: {question.question_date}\n" if question.question_date else ""


def answer_messages(question: Question, plan: Plan | None, retrieval: RetrievalRow,
                    style: str = "harness", prompt_set: str = prompts.PAPER,
                    episodes: Optional[str] = None) -> list[dict[str, str]]:
    date = question.question_date or "unknown"
    pid = prompt_family(plan, retrieval, style)
    if pid == "answer_mem0":
        return mem0_messages(question, retrieval)
    if pid == "answer_beam":
        # BEAM's official RAG answer prompt: one user message, the buffer as its context.
        return [{"role": "user", "content": prompts.fill("answer_beam_user", question=question.question,
                                                         context=retrieval.buffer_text)}]
    if pid == "answer_realtalk":
        # REALTALK's evaluate_memory.py: one user message, the context then its QA prompt. Filled in one
        # pass (as its f-strings are), so a "{question}" inside the context is never replaced.
        return [{"role": "user", "content": prompts.fill_once("answer_realtalk_user", context=retrieval.buffer_text,
                                                              question=question.question)}]
    if plan is None and style not in ("harness", "mem0", "beam", "realtalk"):
        return system_messages(pid, question, retrieval)
    if plan is None:
        user = prompts.fill(f"{pid}_user", question_date=date, question=question.question,
                              **({} if retrieval.mode == "no_memory" else
                                 {"context": retrieval.buffer_text or "(no conversation context)"}))
        return [{"role": "system", "content": prompts.load(f"{pid}_system")}, {"role": "user", "content": user}]
    # The date line appears only for a question asked on a date (LongMemEval), as in the authors'
    # LongMemEval answer step; their LoCoMo answer prompt has none (common/prompts/SOURCES.md).
    text = retrieval.buffer_text if episodes is None else episodes
    user = prompts.fill(
        prompts.pick("answer_user", prompt_set), question_date_line=_date_line(question), question=question.question,
        plan=compact_plan(plan, retrieval.bridges), episodes=text or "(no episodes retrieved)",
    )
    return [{"role": "system", "content": prompts.load(prompts.pick("answer_system", prompt_set))},
            {"role": "user", "content": user}]


def split_buffer(buffer_text: str, episode_ids: list[str]) -> Optional[list[tuple[str, str]]]:
    """The buffer's episode blocks ``(episode id, block)`` in buffer order, or None when the buffer
    is not a sequence of episode blocks for exactly these ids (then nothing is reranked)."""
    starts: list[int] = []
    pos = 0
    for eid in episode_ids:
        at = buffer_text.find(f"### Episode {eid} |", pos)
        if at < 0 or (not starts and at != 0):
            return None
        starts.append(at)
        pos = at + 1
    ends = starts[1:] + [len(buffer_text)]
    return [(eid, buffer_text[a:b].rstrip("\n")) for eid, a, b in zip(episode_ids, starts, ends)]


def rerank_messages(question: Question, plan: Plan, retrieval: RetrievalRow, blocks: list[tuple[str, str]],
                    limit: int) -> list[dict[str, str]]:
    user = prompts.fill(RERANK_PROMPT_IDS[1], question_date_line=_date_line(question), question=question.question,
                        plan=compact_plan(plan, retrieval.bridges), limit=limit,
                        candidates="\n\n".join(b for _, b in blocks))
    return [{"role": "system", "content": prompts.load(RERANK_PROMPT_IDS[0])}, {"role": "user", "content": user}]


def rerank_selection(reply: dict[str, Any], ranked: list[str], limit: int, scope: str,
                     pad_to_limit: bool = False) -> tuple[list[str], int]:
    """The authors' selection: ids of the evidence slots, then the listed ids, only candidates,
    at most ``limit``; padded from the ranked order (to ``limit`` for an all_matching plan or when
    ``pad_to_limit``, else to ``RERANK_MIN_POINT``). Returns the ids in buffer order and how many
    were padded."""
    wanted: list[str] = []
    slots = reply.get("evidence_slots")
    for slot in slots if isinstance(slots, list) else []:
        ids = slot.get("episode_ids") if isinstance(slot, dict) else None
        wanted += [str(i) for i in ids] if isinstance(ids, list) else []
    listed = reply.get("selected_episode_ids")
    wanted += [str(i) for i in listed] if isinstance(listed, list) else []
    known = set(ranked)
    chosen = list(dict.fromkeys(i for i in wanted if i in known))[:limit]
    floor = min(len(ranked), limit if scope == "all_matching" or pad_to_limit else RERANK_MIN_POINT)
    padded = 0
    for eid in ranked:
        if len(chosen) >= floor:
            break
        if eid not in chosen:
            chosen.append(eid)
            padded += 1
    keep = set(chosen)
    return [e for e in ranked if e in keep], padded


def needs_every_candidate(plan: Plan) -> str:
    """Why the plan needs every retrieved episode ('' for a point question that may be reranked)."""
    if plan.retrieval_scope == "all_matching":
        return "retrieval scope all_matching"
    target = str((plan.answer_target or {}).get("type") or "").strip().lower()
    return f"answer target {target}" if target in KEEP_ALL_TARGETS else ""


def kept_whole(question: str, plan: Plan) -> str:
    """Why a point plan keeps every candidate as the authors' answer step does (``answer.keep_whole_point``),
    decided from the plan and the wording, never a label ('' otherwise): a temporal point plan, a
    latest/previous-state question (their knowledge-update operators), or a one-hop direct lookup
    about the user (their single-session-user point lookups)."""
    if plan.retrieval_scope != "point":
        return ""
    if plan.reasoning_type == "temporal":
        return "temporal point plan"
    if operator_of(question) in ("latest", "previous"):
        return f"{operator_of(question)}-state wording"
    if plan.reasoning_type == "direct" and len(plan.hops) <= 1 and FIRST_PERSON_RE.search(question) \
            and not personal_request(question):
        return "direct point lookup about the user"
    return ""


def ordering_wording(question: str) -> bool:
    """A question about an order, the first or latest, a previous state or the time between events
    (wording only): the authors pad such a rerank to its limit (``answer.rerank_pad_operators``)."""
    return bool(operator_of(question) or ELAPSED_RE.search(question) or TENURE_RE.search(question))


def personal_request(question: str) -> bool:
    """The question asks for a suggestion fitted to the user (recommend, suggest, tips, ideas, ...)."""
    return bool(PERSONAL_REQUEST.search(question))


def verify_messages(question: Question, episodes: str, draft: str, personal: bool = False, checklist: bool = False,
                    short: bool = True, audit: str = "") -> list[dict[str, str]]:
    """The verify call: the rewrite conditions end with the authors' checks (``checklist``) and the
    length rule (personal details kept, else the shortest sufficient answer unless ``short`` is off)."""
    user = prompts.fill(VERIFY_PROMPT_IDS[1], question_date_line=_date_line(question), question=question.question,
                        draft=draft, audit=audit, episodes=episodes or "(no episodes retrieved)")
    extra = [*(VERIFY_CHECKS if checklist else ()), *([PERSONAL_FORM] if personal else [SHORT_FORM] if short else [])]
    tail = "".join(f", {c}" for c in extra[:-1]) + (f", or {extra[-1]}" if extra else "")
    system = prompts.fill(VERIFY_PROMPT_IDS[0], form_rule=tail)
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def draft_messages(question: Question, plan: Plan, retrieval: RetrievalRow, prompt_set: str,
                   episodes: Optional[str] = None, system: str = "answer_system",
                   audit: str = "", rules: bool = False) -> list[dict[str, str]]:
    """The JSON draft (``answer.draft: json``): the answer prompt's system text (``system:
    longmemeval``: the LongMemEval draft prompt instead, with ``rules`` the one carrying the authors'
    answer rules), a user message asking for {answer, evidence_episode_ids, reasoning}; ``audit``: the
    routes' checked lines after the plan (``answer.draft_audit``)."""
    text = retrieval.buffer_text if episodes is None else episodes
    user = prompts.fill(DRAFT_PROMPT_ID, question_date_line=_date_line(question), question=question.question,
                        plan=compact_plan(plan, retrieval.bridges), audit=audit,
                        episodes=text or "(no episodes retrieved)")
    lme = LME_RULES_SYSTEM_ID if rules else LME_DRAFT_SYSTEM_ID
    sid = lme if system == "longmemeval" else prompts.pick("answer_system", prompt_set)
    return [{"role": "system", "content": prompts.load(sid)}, {"role": "user", "content": user}]


_EVIDENCE_TAIL = re.compile(r"\s*Evidence episode ids:.*$", re.I | re.S)


def _rerank(client: LLMClient, question: Question, plan: Plan, retrieval: RetrievalRow, steps: AnswerSteps,
            calls: _Calls) -> tuple[Optional[str], dict[str, Any]]:
    """(the reranked buffer or None to keep the whole buffer, what happened)."""
    if steps.rerank_keep_all and (why := needs_every_candidate(plan)):
        return None, {"skipped": f"{why}: every candidate kept", "candidates": len(retrieval.episode_ids)}
    if steps.keep_whole_point and (why := kept_whole(question.question, plan)):
        return None, {"skipped": f"{why}: every candidate kept", "candidates": len(retrieval.episode_ids)}
    blocks = split_buffer(retrieval.buffer_text, retrieval.episode_ids)
    if not blocks:
        return None, {"skipped": "no episode blocks in the buffer"}
    limit = min(steps.rerank_max, len(blocks))
    try:
        c = client.complete("answer_rerank", rerank_messages(question, plan, retrieval, blocks, limit),
                            json_mode=True, prompt_id=RERANK_PROMPT_IDS[1])
    except LLMCallError as exc:
        return None, {"candidates": len(blocks), "error": f"{exc.cause}: {exc}"}
    calls.add(c, RERANK_PROMPT_IDS[1], "answer_rerank")
    try:
        reply = parse_json_object(c.text)
    except ValueError as exc:
        return None, {"candidates": len(blocks), "error": f"invalid_reply: {exc}"}
    pad = steps.rerank_pad_operators and ordering_wording(question.question)
    ids, padded = rerank_selection(reply, [e for e, _ in blocks], limit, plan.retrieval_scope, pad)
    text = "\n\n".join(b for e, b in blocks if e in set(ids))
    # tokens: what the answer model reads instead of the whole buffer (Table 3's context tokens).
    return text, {"candidates": len(blocks), "limit": limit, "selected": ids, "padded": padded,
                  "tokens": count_tokens(text) if text else 0}


def _verify(client: LLMClient, question: Question, episodes: str, draft: str, calls: _Calls, personal: bool = False,
            steps: Optional[AnswerSteps] = None, audit: str = "") -> tuple[Optional[str], dict[str, Any]]:
    """(the verified answer or None to keep the draft, what happened)."""
    steps = steps or AnswerSteps()
    messages = verify_messages(question, episodes, draft, personal, steps.verify_checklist, steps.verify_short, audit)
    try:
        c = client.complete("answer_verify", messages, json_mode=True, prompt_id=VERIFY_PROMPT_IDS[1])
    except LLMCallError as exc:
        return None, {"error": f"{exc.cause}: {exc}"}
    calls.add(c, VERIFY_PROMPT_IDS[1], "answer_verify")
    try:
        reply = parse_json_object(c.text)
    except ValueError as exc:
        return None, {"error": f"invalid_reply: {exc}"}
    answer = _EVIDENCE_TAIL.sub("", " ".join(str(reply.get("answer") or "").split())).strip()
    if not answer:
        return None, {"error": "invalid_reply: no answer"}
    return answer, {"verdict": str(reply.get("verdict") or ""), "changed": answer != draft,
                    **({"personal": True} if personal else {})}


def _draft_answer(text: str) -> str:
    """The answer field of a JSON draft, without an evidence-id tail (ValueError: no JSON object)."""
    return _EVIDENCE_TAIL.sub("", " ".join(str(parse_json_object(text).get("answer") or "").split())).strip()


def answer_question(client: LLMClient, question: Question, plan: Plan | None, retrieval: RetrievalRow,
                    style: str = "harness", steps: Optional[AnswerSteps] = None,
                    pool: Optional[list[str]] = None) -> AnswerRow:
    """One plain chat call (plus the optional rerank before and verify after it, for a plan's
    episode buffer); a failed answer call is a recorded row with ``answer=None``. ``pool``: every
    episode block of the memory (answer.routes.user_overlap)."""
    steps = steps or AnswerSteps(style=style)
    settings = client.settings("answer")
    family = prompt_family(plan, retrieval, steps.style)
    prompt_set = steps.prompt_set if family == "answer" else prompts.PAPER
    json_draft = plan is not None and steps.draft == "json"
    role = "answer_draft" if json_draft else "answer"
    settings = client.settings(role) if json_draft else settings
    row = AnswerRow(qid=question.qid, memory_id=question.memory_id, question=question.question,
                    answer=None, model=settings.model,
                    prompt_id=DRAFT_PROMPT_ID if json_draft else prompts.pick(_prompt_id(family), prompt_set))
    routed = plan is not None and steps.routes != Routes()
    multi = plan is not None and (steps.rerank or steps.verify or json_draft or routed)
    calls = _Calls()
    episodes: Optional[str] = None
    note = ""
    if routed:
        prep = run_routes(client, question, plan, split_buffer(retrieval.buffer_text, retrieval.episode_ids)
                          if retrieval.buffer_text else [], steps.routes, calls.add, pool)
        row.steps.update(prep.steps)
        if prep.buffer is not None and prep.episode_ids is not None:
            retrieval = dataclasses.replace(retrieval, buffer_text=prep.buffer, episode_ids=prep.episode_ids)
        if prep.answer is not None:  # a ledger computed the answer: no answer call
            row.answer = prep.answer
            _record(row, calls, multi)
            return row
        note = prep.note
    if plan is not None and steps.rerank:
        episodes, row.steps["rerank"] = _rerank(client, question, plan, retrieval, steps, calls)
    # A ledger's checked lines: an evidence audit beside the plan (answer.draft_audit, the authors'
    # place for it), else read before the episodes.
    audit = AUDIT_HEADER + note if note and steps.draft_audit and json_draft else ""
    if note and not audit:
        episodes = note + "\n\n" + (retrieval.buffer_text if episodes is None else episodes)
    try:
        messages = (draft_messages(question, plan, retrieval, prompt_set, episodes, steps.draft_prompt, audit,
                                   steps.draft_rules)
                    if json_draft and plan is not None
                    else answer_messages(question, plan, retrieval, steps.style, prompt_set, episodes))
    except SlotsMissing as exc:  # a system's own prompt its search did not fill: a counted failure, no call
        row.error = f"prompt_slots_missing: {exc}"
        _record(row, calls, multi)
        return row
    json_reply = plan is None and family in JSON_REPLY
    try:
        c = client.complete(role, messages, json_mode=json_draft or json_reply, prompt_id=row.prompt_id)
    except LLMCallError as exc:
        row.error = f"{exc.cause}: {exc}"
        _record(row, calls, multi)
        return row
    calls.add(c, row.prompt_id, role)
    row.cache_key, row.usage, row.latency, row.cached = c.cache_key, c.usage, round(c.latency, 4), c.cached
    try:
        row.answer = (_draft_answer(c.text) if json_draft else json_reply_answer(family, c.text).strip() if json_reply
                      else c.text.strip() if steps.strip else c.text)
    except ValueError as exc:
        row.error = f"invalid_reply: {exc}"
        _record(row, calls, multi)
        return row
    if not row.answer.strip():
        row.error = "empty_answer"
    elif plan is not None and steps.verify:
        row.draft = row.answer
        personal = steps.verify_personal and personal_request(question.question)
        verified, row.steps["verify"] = _verify(
            client, question, retrieval.buffer_text if episodes is None else episodes, row.answer, calls, personal,
            steps, audit)
        row.answer = verified or row.answer
    _record(row, calls, multi)
    return row


def _record(row: AnswerRow, calls: _Calls, multi: bool) -> None:
    """A row of several calls lists them all; its latency is theirs together (Table 3 generation)."""
    if not multi:
        return
    row.llm_calls = calls.records
    row.latency = round(sum(c.latency for c in calls.completions), 4)
    row.cached = bool(calls.completions) and all(c.cached for c in calls.completions)
