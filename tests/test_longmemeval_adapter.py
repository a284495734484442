"""LongMemEval adapter: the real sample item, the tiny fixture, and one-line errors on bad input."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from common.benchmarks.base import DataError
from common.benchmarks.longmemeval import (
    ADAPTER,
    QUESTION_TYPES,
    SHORT_NAMES,
    LongMemEvalData,
    load_longmemeval,
    memory_id_of,
    official_session_id,
    official_turn_id,
    opaque_session_id,
    retrieval_gold,
    select,
)
from common.benchmarks.registry import adapter as registry
from common.core.schema import to_dict
from common.evaluation.metrics import retrieval_skip_reason

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "data" / "longmemeval" / "longmemeval_s_single_e47becba.json"
TINY = REPO / "tests" / "fixtures" / "lme_tiny.json"


@pytest.fixture(scope="module")
def real() -> LongMemEvalData:
    if not REAL.is_file():
        pytest.skip(f"real LongMemEval sample not found at {REAL}")
    return load_longmemeval(REAL)


@pytest.fixture(scope="module")
def tiny() -> LongMemEvalData:
    return load_longmemeval(TINY)


def _serialized(rows: list[Any]) -> str:
    return json.dumps([to_dict(r) for r in rows])


# --------------------------------------------------------------------------- real item
def dia(source_id: str, j: int) -> str:
    """The dia_id the loader gives turn j of the session with this official id."""
    return f"{opaque_session_id(source_id)}:{j}"


def test_real_item(real: LongMemEvalData) -> None:
    raw = json.loads(REAL.read_text(encoding="utf-8"))[0]
    assert real.memory_ids == [memory_id_of("e47becba")]
    assert len(real.sessions) == 53
    assert [s.session_index for s in real.sessions] == list(range(1, 54))
    assert [s.source_id for s in real.sessions] == raw["haystack_session_ids"]
    # Official ids name the evidence ("answer_..."): what the method sees is an opaque label.
    assert [s.session_id for s in real.sessions] == [opaque_session_id(x) for x in raw["haystack_session_ids"]]
    assert not any("answer" in s.session_id for s in real.sessions)
    assert [s.date_time for s in real.sessions] == raw["haystack_dates"]
    assert all(s.memory_id == memory_id_of("e47becba") and s.speakers == ["user", "assistant"] for s in real.sessions)
    (question,) = real.questions
    assert to_dict(question) == {
        "qid": "e47becba",
        "memory_id": memory_id_of("e47becba"),
        "question": "What degree did I graduate with?",
        "question_date": "2023/05/30 (Tue) 23:40",
    }
    (gold,) = real.gold
    assert gold.answer == "Business Administration"
    assert gold.question_type == "single-session-user" and not gold.abstention
    assert gold.category == 0
    assert gold.answer_session_ids == ["answer_280352e9"]
    # The two flagged turns (user turn 5 and assistant turn 6) of the 52nd session.
    assert real.sessions[51].source_id == "answer_280352e9"
    assert gold.has_answer == gold.evidence == [dia("answer_280352e9", 5), dia("answer_280352e9", 6)]
    flagged = [t for s in raw["haystack_sessions"] for t in s if t.get("has_answer")]
    assert len(flagged) == len(gold.has_answer) == 2


def test_real_turns_and_roles(real: LongMemEvalData) -> None:
    raw = json.loads(REAL.read_text(encoding="utf-8"))[0]
    for session, raw_turns in zip(real.sessions, raw["haystack_sessions"]):
        assert [t.dia_id for t in session.turns] == [dia(session.source_id, j) for j in range(1, len(raw_turns) + 1)]
        assert [t.role for t in session.turns] == [t["role"] for t in raw_turns]
        assert [t.speaker for t in session.turns] == [t["role"] for t in raw_turns]
        assert [t.text for t in session.turns] == [t["content"] for t in raw_turns]
    assert sum(len(s.turns) for s in real.sessions) == 550


def test_real_no_gold_leaks(real: LongMemEvalData) -> None:
    visible = _serialized(real.sessions) + _serialized(real.questions)
    assert "has_answer" not in visible
    assert "single-session-user" not in visible
    assert "question_type" not in visible
    assert "Business Administration" not in _serialized(real.questions)
    assert set(to_dict(real.questions[0])) == {"qid", "memory_id", "question", "question_date"}


def test_real_retrieval_gold(real: LongMemEvalData) -> None:
    rg = retrieval_gold(real.sessions, real.gold[0])
    assert len(rg.corpus_session_ids) == 53
    assert rg.relevant_sessions == ["answer_280352e9"]
    assert rg.relevant_turns == ["answer_280352e9_5"]  # only the user turn; j counts all turns
    assert len(rg.corpus_turn_ids) == 273  # user turns only
    assert rg.turn_id_of[dia("answer_280352e9", 5)] == "answer_280352e9_5"
    assert retrieval_skip_reason(real.gold[0].abstention, rg.user_has_answer_count) is None


# --------------------------------------------------------------------------- types
def test_question_types() -> None:
    assert QUESTION_TYPES == (
        "single-session-preference",
        "single-session-assistant",
        "temporal-reasoning",
        "multi-session",
        "knowledge-update",
        "single-session-user",
    )
    assert [SHORT_NAMES[t] for t in QUESTION_TYPES] == [
        "SS-pref", "SS-assist", "Temporal", "Multi-session", "Knowledge-update", "SS-user"
    ]


# --------------------------------------------------------------------------- tiny fixture
def test_tiny_fixture(tiny: LongMemEvalData) -> None:
    assert len(tiny.questions) == 7
    by_qid = {g.qid: g for g in tiny.gold}
    types = [g.question_type for g in tiny.gold if not g.abstention]
    assert sorted(types) == sorted(QUESTION_TYPES)
    assert [g.qid for g in tiny.gold if g.abstention] == ["ssu_0001_abs"]
    assert by_qid["ssu_0001_abs"].has_answer == []
    assert by_qid["temp_0001"].answer == "2"  # an int in the file
    assert all(isinstance(g.answer, str) for g in tiny.gold)
    assert by_qid["multi_0001"].answer_session_ids == ["answer_multi_1", "answer_multi_2"]
    assert by_qid["multi_0001"].has_answer == [dia("answer_multi_1", 1), dia("answer_multi_2", 3)]
    assert by_qid["ku_0001"].has_answer == [dia("answer_ku_1", 1), dia("answer_ku_2", 1)]
    # The single-session-assistant evidence is an assistant turn.
    assist = {s.session_index: s for s in tiny.sessions if s.memory_id == memory_id_of("assist_0001")}
    assert by_qid["assist_0001"].has_answer == [dia(assist[1].source_id, 2)]
    assert assist[1].turns[1].role == "assistant" and "Rise Up" in assist[1].turns[1].text
    questions = {q.qid: q for q in tiny.questions}
    assert questions["temp_0001"].question_date == "2023/04/16 (Sun) 20:00"
    # One session id (same content and date) is shared by two memories; keys stay unique.
    shared = [s for s in tiny.sessions if s.source_id == "sharegpt_shared_0"]
    assert [s.memory_id for s in shared] == [memory_id_of("ssu_0001"), memory_id_of("ssu_0001_abs")]
    assert "_abs" not in shared[1].memory_id
    assert to_dict(shared[0])["turns"] == to_dict(shared[1])["turns"]
    assert shared[0].date_time == shared[1].date_time
    keys = [s.key for s in tiny.sessions]
    assert len(keys) == len(set(keys))
    visible = _serialized(tiny.sessions) + _serialized(tiny.questions)
    assert "has_answer" not in visible and not any(t in visible for t in QUESTION_TYPES)


def test_tiny_retrieval_skips(tiny: LongMemEvalData) -> None:
    reasons = {
        g.qid: retrieval_skip_reason(g.abstention, retrieval_gold(tiny.sessions, g).user_has_answer_count)
        for g in tiny.gold
    }
    assert reasons["ssu_0001_abs"] == "abstention"
    assert reasons["assist_0001"] == "no_user_has_answer"  # evidence only in an assistant turn
    assert [q for q, r in reasons.items() if r is None] == [
        "pref_0001", "temp_0001", "multi_0001", "ku_0001", "ssu_0001"
    ]


def test_repeated_session_id_gets_suffix(tmp_path: Path) -> None:
    items = json.loads(TINY.read_text(encoding="utf-8"))
    ku = items[4]
    ku["haystack_session_ids"][2] = ku["haystack_session_ids"][1]  # issue #54: filler repeated
    data = load_longmemeval(_write(tmp_path, items))
    ids = [s.source_id for s in data.sessions if s.memory_id == memory_id_of("ku_0001")]
    assert ids == ["answer_ku_1", "filler_ku_0", "filler_ku_0#2"]
    assert [official_session_id(s) for s in ids] == ["answer_ku_1", "filler_ku_0", "filler_ku_0"]
    assert official_turn_id("filler_ku_0#2", 3) == "filler_ku_0_3"
    assert official_session_id("sharegpt_yywfIrx_0") == "sharegpt_yywfIrx_0"
    keys = [s.key for s in data.sessions]
    assert len(keys) == len(set(keys))


def test_select(tiny: LongMemEvalData) -> None:
    picked = select(tiny, ["ku_0001", "temp_0001"])
    assert [q.qid for q in picked.questions] == ["temp_0001", "ku_0001"]  # file order
    assert [g.qid for g in picked.gold] == ["temp_0001", "ku_0001"]
    assert {s.memory_id for s in picked.sessions} == {memory_id_of("temp_0001"), memory_id_of("ku_0001")}
    assert len(picked.sessions) == 5  # haystacks kept whole
    first = select(tiny, None, 2)
    assert [q.qid for q in first.questions] == ["pref_0001", "assist_0001"]
    assert first.memory_ids == [memory_id_of("pref_0001"), memory_id_of("assist_0001")]
    assert select(tiny, ["ku_0001", "temp_0001"], 1).memory_ids == [memory_id_of("temp_0001")]
    assert select(tiny).questions == tiny.questions
    assert select(tiny, None, 0).sessions == []
    with pytest.raises(ValueError, match="nope"):
        select(tiny, ["nope"])
    with pytest.raises(ValueError, match="question_limit"):
        select(tiny, None, -1)


def _cfg(**data: Any) -> Any:
    base = {"path": None, "env": "LONGMEMEVAL_JSON", "memories": [], "question_limit": None, "limit_rule": "first"}
    return SimpleNamespace(data=SimpleNamespace(**{**base, **data}))


def test_adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert registry("longmemeval") is ADAPTER
    monkeypatch.delenv("LONGMEMEVAL_JSON", raising=False)
    assert ADAPTER.data_path(_cfg(path=str(TINY))) == TINY
    monkeypatch.setenv("LONGMEMEVAL_JSON", str(TINY))
    assert ADAPTER.data_path(_cfg()) == TINY
    monkeypatch.setenv("LONGMEMEVAL_JSON", str(tmp_path / "missing.json"))
    with pytest.raises(DataError, match="make data-longmemeval") as excinfo:
        ADAPTER.data_path(_cfg())
    assert "LONGMEMEVAL_JSON" in str(excinfo.value) and "\n" not in str(excinfo.value)
    data = ADAPTER.select(ADAPTER.load(TINY), _cfg(memories=["ssu_0001", "ku_0001"], question_limit=1))
    assert [q.qid for q in data.questions] == ["ku_0001"]
    assert all(ADAPTER.is_scored(g) for g in ADAPTER.load(TINY).gold)
    for method in ("aggregate", "write_tables", "judge"):
        assert not hasattr(type(ADAPTER), method) or callable(getattr(ADAPTER, method))


# --------------------------------------------------------------------------- bad input
def _write(tmp_path: Path, items: Any, name: str = "lme_tiny.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def _del(path: tuple[Any, ...]) -> Callable[[list[Any]], None]:
    def mutate(items: list[Any]) -> None:
        target = items
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]

    return mutate


def _set(path: tuple[Any, ...], value: Any) -> Callable[[list[Any]], None]:
    def mutate(items: list[Any]) -> None:
        target = items
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


def _pop_date(items: list[Any]) -> None:
    items[3]["haystack_dates"].pop()


def _duplicate_item(items: list[Any]) -> None:
    items.append(copy.deepcopy(items[1]))


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (_del((2, "question")), "item[2] (temp_0001): question: missing"),
        (_del((0, "question_id")), "item[0]: question_id: missing"),
        (_del((4, "answer")), "item[4] (ku_0001): answer: missing"),
        (_del((4, "question_date")), "question_date: missing"),
        (_del((4, "answer_session_ids")), "answer_session_ids: missing"),
        (_del((1, "haystack_sessions")), "item[1] (assist_0001): haystack_sessions: missing"),
        (_del((1, "haystack_sessions", 0, 1, "content")), "haystack_sessions[0][1].content: missing"),
        (_del((1, "haystack_sessions", 0, 1, "role")), "haystack_sessions[0][1].role: missing"),
        (_set((0, "question_id"), 7), "item[0]: question_id: expected str, got 7"),
        (_set((4, "answer"), None), "answer: expected str or int, got None"),
        (_set((4, "answer"), True), "answer: expected str or int, got True"),
        (_set((4, "haystack_dates", 1), 20230101), "haystack_dates[1]: expected str"),
        (_set((4, "haystack_session_ids"), "x"), "haystack_session_ids: expected list"),
        (_set((4, "haystack_sessions", 1), {"role": "user"}), "haystack_sessions[1]: expected list"),
        (_set((4, "haystack_sessions", 1, 0), "hi"), "haystack_sessions[1][0]: expected an object"),
        (_set((4, "haystack_sessions", 1, 0, "role"), "system"), "haystack_sessions[1][0].role: expected 'user'"),
        (_set((4, "haystack_sessions", 0, 0, "has_answer"), "yes"),
         "haystack_sessions[0][0].has_answer: expected bool"),
        (_set((4, "question_type"), "multi_session"), "item[4] (ku_0001): question_type: unknown type 'multi_session'"),
        (_pop_date, "item[3] (multi_0001): haystack_sessions: length mismatch: "
                    "haystack_session_ids=3, haystack_dates=2, haystack_sessions=3"),
        (_duplicate_item, "item[7] (assist_0001): question_id: duplicate 'assist_0001' (first used by item[1])"),
        (_set((5,), [1, 2]), "item[5]: expected an object"),
    ],
)
def test_bad_input_one_line_error(tmp_path: Path, mutate: Callable[[list[Any]], None], where: str) -> None:
    items = json.loads(TINY.read_text(encoding="utf-8"))
    mutate(items)
    path = _write(tmp_path, items)
    with pytest.raises(DataError) as excinfo:
        load_longmemeval(path)
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert where in message


def test_truncated_json(tmp_path: Path) -> None:
    path = tmp_path / "longmemeval_s_cleaned.json"
    path.write_text(TINY.read_text(encoding="utf-8")[:-200], encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{path}: invalid JSON")) as excinfo:
        load_longmemeval(path)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", None])
def test_unreadable_file(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "longmemeval_s_cleaned.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match="cannot read") as excinfo:
        load_longmemeval(path)
    assert str(path) in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_top_level_must_be_list(tmp_path: Path) -> None:
    path = _write(tmp_path, json.loads(TINY.read_text(encoding="utf-8"))[0])
    with pytest.raises(DataError, match="expected a JSON list"):
        load_longmemeval(path)
