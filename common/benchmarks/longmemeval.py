"""LongMemEval adapter: the official JSON files -> ``Session`` / ``Question`` / ``Gold`` rows.

Layout (xiaowu0162/LongMemEval; ``longmemeval_s_cleaned.json``, ``longmemeval_m_cleaned.json``
and ``longmemeval_oracle.json`` share it): a JSON list of items, one question each, with
``question_id``, ``question_type``, ``question``, ``question_date``, ``answer``,
``answer_session_ids`` and three parallel lists ``haystack_session_ids``, ``haystack_dates``,
``haystack_sessions``. A session is a list of turns ``{role, content}``; evidence turns also
carry ``has_answer: true`` (other turns carry ``false`` or no key at all).

Every question has its own haystack, so each question is its own memory. Its ``memory_id`` is
an opaque hash of the question id (``memory_id_of``): memory ids appear in partition and
extraction prompts, and the raw id carries the ``_abs`` abstention label, which the method must
not see. ``Question.qid`` keeps the official id verbatim. Decisions and quirks
(shared/spec/benchmarks.md sections 1.2, 3.2):

* Sessions keep the file's order and ``session_index`` is the 1-based position in the
  haystack. The oracle file's haystacks are not sorted by date; they are *not* re-sorted here,
  so positions always point back into the file.
* Official session ids mark evidence: answer sessions are named ``answer_<hash>``. So the
  ``session_id`` every stage and prompt sees is an opaque label (``opaque_session_id``: a hash
  of the official id) and the official id is kept in ``Session.source_id`` for the metrics.
* ``dia_id = f"{session_id}:{j}"``: turn position ``j`` counted over all turns of the session,
  assistant turns included (the official turn index counts them too). Ids depend on the
  session, not on its position, so a session shared by several haystacks renders identically
  everywhere and its partition and records are computed once (``common.method.dedup``).
* ``has_answer`` is gold: it never reaches a ``Turn``; the flagged turns (any role) go to
  ``Gold.has_answer`` (and ``Gold.evidence``) as dia ids. ``question_type`` and ``answer`` only
  reach ``Gold`` as well.
* ``answer`` is an int in some items; it is cast to ``str``.
* Issue #54: some haystacks repeat a filler session id (with different dates). ``Session.key``
  is ``memory::session_id`` and must be unique, so the n-th occurrence (n >= 2) of an id
  inside one haystack becomes ``f"{id}#{n}"``. ``official_session_id`` strips the suffix again;
  retrieval metrics must compare official ids.
* Abstention is ``"_abs" in question_id`` (what the official judge tests), whatever the type.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.benchmarks import checksums, sampling
from common.benchmarks.base import BenchmarkData, FileAdapter
from common.benchmarks.fields import Loc, is_instance, iter_items, required, show
from common.core.schema import Gold, Question, Session, Turn

# The six official question types, in the column order of the paper's Table 2.
QUESTION_TYPES: tuple[str, ...] = (
    "single-session-preference",
    "single-session-assistant",
    "temporal-reasoning",
    "multi-session",
    "knowledge-update",
    "single-session-user",
)
# Short column headers for tables (same order as QUESTION_TYPES).
SHORT_NAMES: dict[str, str] = {
    "single-session-preference": "SS-pref",
    "single-session-assistant": "SS-assist",
    "temporal-reasoning": "Temporal",
    "multi-session": "Multi-session",
    "knowledge-update": "Knowledge-update",
    "single-session-user": "SS-user",
}
ROLES: tuple[str, ...] = ("user", "assistant")
SPEAKERS: list[str] = ["user", "assistant"]
ABSTENTION_MARK = "_abs"

# Suffix added to the n-th repeat (n >= 2) of a session id inside one haystack.
_REPEAT_SUFFIX = re.compile(r"#\d+$")
_HAYSTACK = ("haystack_session_ids", "haystack_dates", "haystack_sessions")


LongMemEvalData = BenchmarkData  # the shared container; the name reads better in signatures


def is_abstention(question_id: str) -> bool:
    """The official abstention test: ``"_abs"`` anywhere in the question id."""
    return ABSTENTION_MARK in question_id


def official_session_id(session_id: str) -> str:
    """The id as written in the file: drops the ``#n`` added to repeated ids (issue #54)."""
    return _REPEAT_SUFFIX.sub("", session_id)


def official_turn_id(session_id: str, turn_position: int) -> str:
    """The official turn-corpus id ``<session_id>_<j>`` (j 1-based over all turns)."""
    return f"{official_session_id(session_id)}_{turn_position}"


def load_longmemeval(path: str | Path) -> LongMemEvalData:
    """Load and validate a LongMemEval file (S, M or oracle; cleaned or original).

    Args:
        path: Path to the JSON file.

    Returns:
        Sessions, questions and gold rows, in file order.

    Raises:
        DataError: The file cannot be read or parsed, a required field is missing or has the
            wrong type, the three haystack lists differ in length, a role or question type is
            unknown, or a ``question_id`` repeats.
    """
    sessions: list[Session] = []
    questions: list[Question] = []
    golds: list[Gold] = []
    for item, qid, loc in iter_items(Path(path), "item", "question_id"):
        item_sessions, gold = _parse_item(item, qid, loc)
        memory = memory_id_of(qid)
        sessions.extend(item_sessions)
        questions.append(
            Question(
                qid=qid,
                memory_id=memory,
                question=required(item, "question", str, loc),
                question_date=required(item, "question_date", str, loc),
            )
        )
        golds.append(gold)
    return LongMemEvalData(sessions=sessions, questions=questions, gold=golds)


def opaque_session_id(source_id: str) -> str:
    """Stable label of a haystack session that says nothing about the gold (see module doc)."""
    import hashlib

    return "s-" + hashlib.sha256(source_id.encode("utf-8")).hexdigest()[:10]


def memory_id_of(question_id: str) -> str:
    """Opaque, stable memory id of a question's haystack (no benchmark label in it)."""
    import hashlib

    return "lme-" + hashlib.sha256(question_id.encode("utf-8")).hexdigest()[:12]


def _str_list(item: dict[str, Any], key: str, loc: Loc) -> list[str]:
    values = required(item, key, list, loc)
    for k, value in enumerate(values):
        if not isinstance(value, str):
            raise loc.at(key).at(f"[{k}]").error(f"expected str, got {show(value)}")
    return values


def _parse_item(item: dict[str, Any], qid: str, loc: Loc) -> tuple[list[Session], Gold]:
    qtype = required(item, "question_type", str, loc)
    if qtype not in QUESTION_TYPES:
        raise loc.at("question_type").error(
            f"unknown type {show(qtype)}; expected one of {', '.join(QUESTION_TYPES)}"
        )
    answer = required(item, "answer", (str, int), loc)
    answer_session_ids = _str_list(item, "answer_session_ids", loc)
    ids = _str_list(item, "haystack_session_ids", loc)
    dates = _str_list(item, "haystack_dates", loc)
    raw_sessions = required(item, "haystack_sessions", list, loc)
    lengths = dict(zip(_HAYSTACK, (len(ids), len(dates), len(raw_sessions))))
    if len(set(lengths.values())) != 1:
        shown = ", ".join(f"{k}={n}" for k, n in lengths.items())
        raise loc.at("haystack_sessions").error(f"length mismatch: {shown}")

    sessions: list[Session] = []
    flagged: list[str] = []
    seen: dict[str, int] = {}
    for i, (sid, date, raw_turns) in enumerate(zip(ids, dates, raw_sessions), start=1):
        where = loc.at("haystack_sessions").at(f"[{i - 1}]")
        if not isinstance(raw_turns, list):
            raise where.error(f"expected list, got {show(raw_turns)}")
        seen[sid] = seen.get(sid, 0) + 1
        # Issue #54: a repeated id gets "#n" so Session.key stays unique; see official_session_id.
        source_id = sid if seen[sid] == 1 else f"{sid}#{seen[sid]}"
        session_id = opaque_session_id(source_id)
        turns: list[Turn] = []
        for j, raw_turn in enumerate(raw_turns, start=1):
            turn, has_answer = _parse_turn(raw_turn, f"{session_id}:{j}", where.at(f"[{j - 1}]"))
            turns.append(turn)
            if has_answer:
                flagged.append(turn.dia_id)
        sessions.append(
            Session(
                memory_id=memory_id_of(qid),
                session_id=session_id,
                source_id=source_id,
                session_index=i,
                date_time=date,
                turns=turns,
                speakers=list(SPEAKERS),
            )
        )

    gold = Gold(
        qid=qid,
        memory_id=memory_id_of(qid),
        answer=str(answer),
        category=0,  # LoCoMo-only field; LongMemEval groups by question_type
        evidence=list(flagged),
        question_type=qtype,
        abstention=is_abstention(qid),
        answer_session_ids=list(answer_session_ids),
        has_answer=flagged,
    )
    return sessions, gold


def _parse_turn(raw: Any, dia_id: str, loc: Loc) -> tuple[Turn, bool]:
    if not isinstance(raw, dict):
        raise loc.error(f"expected an object, got {show(raw)}")
    role = required(raw, "role", str, loc)
    if role not in ROLES:
        raise loc.at("role").error(f"expected 'user' or 'assistant', got {show(role)}")
    content = required(raw, "content", str, loc)
    has_answer = raw.get("has_answer", False)
    if not is_instance(has_answer, bool):
        raise loc.at("has_answer").error(f"expected bool, got {show(has_answer)}")
    return Turn(dia_id=dia_id, speaker=role, text=content, role=role), has_answer


# ``data.question_limit`` on LongMemEval (``data.limit_rule: sample``): one question per memory, so
# N questions of the file, drawn across the six question types (the file lists them in blocks).
LIMIT_RULE = sampling.rule("question types", "question type", per_memory=False)


def select(
    data: LongMemEvalData,
    question_ids: list[str] | None = None,
    question_limit: int | None = None,
    limit_rule: str = "first",
) -> LongMemEvalData:
    """Restrict a loaded dataset for debug or partial runs.

    Args:
        data: A loaded dataset.
        question_ids: Question ids to keep, or None for all. The result keeps file order.
        question_limit: Keep N (kept) questions; None keeps all. Each question's haystack is kept in full.
        limit_rule: ``first`` (the default here): the first N in file order; ``sample`` (what the
            adapter passes by default, ``data.limit_rule``): N questions drawn across the question
            types, seeded (``common.benchmarks.sampling``, the file as one pool).

    Returns:
        A new ``LongMemEvalData`` holding the kept questions, their gold and their sessions.

    Raises:
        ValueError: An unknown question id or a negative limit.
    """
    known = [q.qid for q in data.questions]
    if question_ids is not None:
        known_set = set(known)
        unknown = [q for q in question_ids if q not in known_set]
        if unknown:
            raise ValueError(f"data.memories: unknown LongMemEval question id(s) {unknown[:10]}")
    if question_limit is not None and question_limit < 0:
        raise ValueError(f"data.question_limit: must be >= 0, got {question_limit}")
    wanted = set(known if question_ids is None else question_ids)
    questions = [q for q in data.questions if q.qid in wanted]
    if question_limit is not None and limit_rule == "first":
        questions = questions[:question_limit]
    elif question_limit is not None:
        pool = LongMemEvalData(sessions=[], questions=questions, gold=[g for g in data.gold if g.qid in wanted])
        questions = sampling.sample_across(pool, question_limit, lambda g: g.question_type, QUESTION_TYPES,
                                           per_memory=False).questions
    keep = {q.qid for q in questions}
    memories = {q.memory_id for q in questions}
    return LongMemEvalData(
        sessions=[s for s in data.sessions if s.memory_id in memories],
        questions=questions,
        gold=[g for g in data.gold if g.qid in keep],
    )


# ----------------------------------------------------------------------------- retrieval gold
@dataclass(frozen=True)
class RetrievalGold:
    """The official retrieval corpus and gold of one question, in official ids.

    Session docs are all haystack sessions (the official doc text is their user turns); turn
    docs are the user turns only, ``<session_id>_<j>`` with j counted over all turns.
    A session is relevant iff it is an answer session with at least one user turn flagged
    ``has_answer`` (upstream relabels the others answer->noans); a turn is relevant iff it is a
    flagged user turn of an answer session.
    """

    corpus_session_ids: list[str]
    relevant_sessions: list[str]
    corpus_turn_ids: list[str]
    relevant_turns: list[str]
    turn_id_of: dict[str, str]  # dia_id -> official turn id (user turns only)
    user_has_answer_count: int


def retrieval_gold(sessions: Iterable[Session], gold: Gold) -> RetrievalGold:
    """Build the official corpus ids and relevant ids of ``gold``'s question.

    Args:
        sessions: Sessions of any memories; only those of ``gold.memory_id`` are used.
        gold: The question's gold row.
    """
    flagged = set(gold.has_answer)
    answer_sessions = set(gold.answer_session_ids)
    corpus_sessions: list[str] = []
    relevant_sessions: list[str] = []
    corpus_turns: list[str] = []
    relevant_turns: list[str] = []
    turn_id_of: dict[str, str] = {}
    for session in sessions:
        if session.memory_id != gold.memory_id:
            continue
        sid = official_session_id(session.source_id or session.session_id)
        corpus_sessions.append(sid)
        hit = False
        for j, turn in enumerate(session.turns, start=1):
            if turn.role != "user":
                continue
            tid = official_turn_id(session.source_id or session.session_id, j)
            turn_id_of[turn.dia_id] = tid
            corpus_turns.append(tid)
            if turn.dia_id in flagged and sid in answer_sessions:
                relevant_turns.append(tid)
                hit = True
        if hit and sid not in relevant_sessions:
            relevant_sessions.append(sid)
    return RetrievalGold(
        corpus_session_ids=corpus_sessions,
        relevant_sessions=relevant_sessions,
        corpus_turn_ids=corpus_turns,
        relevant_turns=relevant_turns,
        turn_id_of=turn_id_of,
        user_has_answer_count=len(relevant_turns),
    )


# ----------------------------------------------------------------------------- protocol
class _LongMemEvalAdapter(FileAdapter):
    """The LongMemEval data: where the file is, how to load and select it, its question types.

    Judging and aggregation live in ``common.evaluation.longmemeval``.
    """

    name, label = "longmemeval", "LongMemEval"
    default_path, default_env = "data/longmemeval_s_cleaned.json", "LONGMEMEVAL_JSON"
    make_target = "data-longmemeval"
    official_sha256 = {name: checksums.official(name) for name in (
        "longmemeval_s_cleaned.json", "longmemeval_oracle.json", "longmemeval_m_cleaned.json")}
    categories: tuple[str, ...] = QUESTION_TYPES  # the column order of the paper's Table 2

    def category(self, gold: Gold) -> str:
        return gold.question_type

    def load(self, path: Path) -> LongMemEvalData:
        return load_longmemeval(path)

    limit_rule = LIMIT_RULE

    def select(self, data: LongMemEvalData, cfg: Any) -> LongMemEvalData:
        return select(data, cfg.data.memories or None, cfg.data.question_limit, cfg.data.limit_rule)

    def is_scored(self, gold: Gold) -> bool:
        # Every item is judged, abstention included (it has its own judge template).
        return True


ADAPTER = _LongMemEvalAdapter()
