"""LoCoMo adapter: counts on the real release, quirks, and one-line errors on bad input."""

from __future__ import annotations

import copy
import json
import os
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from common.benchmarks.base import DataError
from common.benchmarks.locomo import (
    CATEGORY_NAMES,
    SCORED_CATEGORIES,
    LocomoData,
    load_locomo,
    select,
)

# The real file lives beside the checkout (shared/README.md); LOCOMO10_PATH overrides it.
_REAL = Path(
    os.environ.get(
        "LOCOMO10_PATH",
        Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json",
    )
)


@pytest.fixture(scope="module")
def real() -> LocomoData:
    if not _REAL.is_file():
        pytest.skip(f"real LoCoMo file not found at {_REAL}")
    return load_locomo(_REAL)


# --------------------------------------------------------------------------- real release
def test_real_counts(real: LocomoData) -> None:
    assert len(real.memory_ids) == 10
    assert len(real.sessions) == 272
    assert sum(len(s.turns) for s in real.sessions) == 5882
    assert len(real.questions) == len(real.gold) == 1986
    categories = Counter(g.category for g in real.gold)
    assert [categories[c] for c in range(1, 6)] == [282, 321, 96, 841, 446]
    assert sum(categories[c] for c in SCORED_CATEGORIES) == 1540


def test_real_sessions(real: LocomoData) -> None:
    conv26 = [s for s in real.sessions if s.memory_id == "conv-26"]
    # conv-26 has 35 date keys but 19 sessions: sessions come from session_N keys only.
    assert [s.session_index for s in conv26] == list(range(1, 20))
    assert conv26[0].session_id == "session_1"
    assert conv26[0].date_time == "1:56 pm on 8 May, 2023"
    assert conv26[0].speakers == ["Caroline", "Melanie"]
    turns = [t for s in real.sessions for t in s.turns]
    assert all(isinstance(t.img_url, list) for t in turns)
    assert sum(1 for t in turns if t.img_url) == 910
    assert sum(1 for t in turns if t.blip_caption) == 1226


def test_real_answers(real: LocomoData) -> None:
    assert all(isinstance(g.answer, str) for g in real.gold)
    by_qid = {g.qid: g for g in real.gold}
    assert by_qid["conv-26:q0002"].answer == "2022"  # an int in the source
    cat5 = [g for g in real.gold if g.category == 5]
    assert sum(1 for g in cat5 if g.answer == "") == 444
    assert all(g.adversarial_answer for g in cat5)
    # Scored questions always have a gold answer.
    assert all(g.answer for g in real.gold if g.category in SCORED_CATEGORIES)


def test_real_qids_stable_and_unique(real: LocomoData) -> None:
    qids = [q.qid for q in real.questions]
    assert len(set(qids)) == len(qids)
    assert qids[0] == "conv-26:q0001"
    assert [g.qid for g in real.gold] == qids


def test_real_evidence_cleaned(real: LocomoData) -> None:
    turn_ids: dict[str, set[str]] = {}
    for session in real.sessions:
        turn_ids.setdefault(session.memory_id, set()).update(t.dia_id for t in session.turns)
    for gold in real.gold:
        assert all(e in turn_ids[gold.memory_id] for e in gold.evidence), gold.qid
    by_qid = {g.qid: g for g in real.gold}
    assert by_qid["conv-26:q0038"].evidence == ["D8:6", "D9:17"]  # "D8:6; D9:17"
    assert by_qid["conv-26:q0038"].raw_evidence == ["D8:6; D9:17"]
    assert by_qid["conv-49:q0032"].evidence == ["D9:1", "D4:4", "D4:6"]  # space-joined
    assert "D10:19" not in by_qid["conv-42:q0059"].evidence  # dangling id
    assert by_qid["conv-50:q0070"].evidence == []  # only "D30:05", which names no turn


def test_category_names() -> None:
    assert CATEGORY_NAMES[1] == "multi-hop" and CATEGORY_NAMES[4] == "single-hop"
    assert set(SCORED_CATEGORIES) == set(CATEGORY_NAMES) - {5}


# --------------------------------------------------------------------------- tiny synthetic file
def _turn(dia_id: str, speaker: str, **extra: Any) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": dia_id, "text": f"text {dia_id}", **extra}


def _sample(sample_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:00 pm on 1 May, 2023",
            "session_1": [_turn("D1:1", "Ann"), _turn("D1:2", "Bob", img_url="http://x/1.jpg")],
            "session_10_date_time": "2:00 pm on 9 May, 2023",
            "session_10": [_turn("D10:1", "Ann", blip_caption="a dog", query="dog")],
            "session_2_date_time": "3:00 pm on 2 May, 2023",
            "session_2": [_turn("D2:1", "Bob")],
            "session_3_date_time": "a date without a session",
        },
        "qa": [
            {"question": "When?", "answer": 2022, "evidence": ["(D1:1)"], "category": 2},
            {"question": "Who?", "evidence": ["D2:1"], "category": 5, "adversarial_answer": "Bob"},
            {"question": "What?", "answer": "a; b", "evidence": ["D9:9", "D"], "category": 3},
        ],
    }


def _write(tmp_path: Path, samples: Any, name: str = "locomo_tiny.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(samples), encoding="utf-8")
    return path


def test_tiny_file_parsed(tmp_path: Path) -> None:
    data = load_locomo(_write(tmp_path, [_sample("conv-1"), _sample("conv-2")]))
    first = [s for s in data.sessions if s.memory_id == "conv-1"]
    assert [s.session_id for s in first] == ["session_1", "session_2", "session_10"]  # numeric
    assert first[0].turns[1].img_url == ["http://x/1.jpg"]  # a string becomes a list
    assert first[2].turns[0].blip_caption == "a dog" and first[2].turns[0].query == "dog"
    assert all(t.role == "user" for s in data.sessions for t in s.turns)
    gold = data.gold[:3]
    assert [g.answer for g in gold] == ["2022", "", "a; b"]
    assert gold[1].adversarial_answer == "Bob"
    assert gold[0].evidence == ["D1:1"]  # parentheses stripped
    assert gold[2].evidence == [] and gold[2].raw_evidence == ["D9:9", "D"]
    assert data.questions[0].qid == "conv-1:q0001"


def test_select(tmp_path: Path) -> None:
    data = load_locomo(_write(tmp_path, [_sample("conv-1"), _sample("conv-2")]))
    picked = select(data, ["conv-2"], question_limit=2)
    assert {s.memory_id for s in picked.sessions} == {"conv-2"}
    assert len(picked.sessions) == 3  # sessions are never truncated
    assert [q.qid for q in picked.questions] == ["conv-2:q0001", "conv-2:q0002"]
    assert [g.qid for g in picked.gold] == ["conv-2:q0001", "conv-2:q0002"]
    assert len(select(data, None, 1).questions) == 2
    assert select(data).questions == data.questions
    with pytest.raises(ValueError, match="conv-9"):
        select(data, ["conv-9"])
    with pytest.raises(ValueError, match="question_limit"):
        select(data, None, -1)


# --------------------------------------------------------------------------- bad input
def _del(path: tuple[Any, ...]) -> Callable[[list[Any]], None]:
    def mutate(samples: list[Any]) -> None:
        target = samples
        for part in path[:-1]:
            target = target[part]
        del target[path[-1]]

    return mutate


def _set(path: tuple[Any, ...], value: Any) -> Callable[[list[Any]], None]:
    def mutate(samples: list[Any]) -> None:
        target = samples
        for part in path[:-1]:
            target = target[part]
        target[path[-1]] = value

    return mutate


def _duplicate_sample(samples: list[Any]) -> None:
    samples.append(copy.deepcopy(samples[0]))


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        (_del((1, "qa", 0, "question")), "sample[1] (conv-2): qa[0].question: missing"),
        (_del((0, "qa", 0, "answer")), "qa[0].answer: missing"),  # only category 5 may omit it
        (_del((0, "conversation", "speaker_b")), "conversation.speaker_b: missing"),
        (_del((0, "conversation", "session_2_date_time")), "conversation.session_2_date_time"),
        (_del((0, "sample_id")), "sample[0]: sample_id: missing"),
        (_set((0, "conversation", "session_1", 0, "text"), 5), "session_1[0].text: expected str"),
        (_set((0, "qa", 2, "evidence"), "D1:1"), "qa[2].evidence: expected list"),
        (_set((0, "conversation"), []), "conversation: expected dict"),
        (_set((0, "qa", 1, "category"), "x"), "qa[1].category: expected int 1-5, got 'x'"),
        (_set((0, "qa", 1, "category"), 6), "qa[1].category: expected int 1-5, got 6"),
        (_set((0, "qa", 1, "category"), True), "qa[1].category: expected int 1-5"),
        (_set((0, "conversation", "session_2", 0, "dia_id"), "D1:1"), "session_2[0].dia_id"),
        (_duplicate_sample, "sample[2] (conv-1): sample_id: duplicate 'conv-1'"),
    ],
)
def test_bad_input_one_line_error(
    tmp_path: Path, mutate: Callable[[list[Any]], None], where: str
) -> None:
    samples = [_sample("conv-1"), _sample("conv-2")]
    mutate(samples)
    path = _write(tmp_path, samples)
    with pytest.raises(DataError) as excinfo:
        load_locomo(path)
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert where in message


def test_truncated_json(tmp_path: Path) -> None:
    path = tmp_path / "locomo10.json"
    path.write_text(json.dumps([_sample("conv-1")])[:-40], encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{path}: invalid JSON")) as excinfo:
        load_locomo(path)
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8", None])
def test_unreadable_file(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "locomo10.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(DataError, match="cannot read") as excinfo:
        load_locomo(path)
    assert str(path) in str(excinfo.value) and "\n" not in str(excinfo.value)


def test_top_level_must_be_list(tmp_path: Path) -> None:
    path = _write(tmp_path, _sample("conv-1"))
    with pytest.raises(DataError, match="expected a JSON list"):
        load_locomo(path)
