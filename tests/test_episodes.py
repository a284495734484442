"""Stage 02 (common/method/episodes.py): partition validation, fixed units, LLM partition with repair/fallback."""
from __future__ import annotations

import json

import pytest

from common.core.llm import LLMClient
from common.core.schema import Session, Turn
from common.method.episodes import (
    PartitionError,
    episode_id,
    fixed_episodes,
    partition_session,
    validate_segments,
)
from tests import conftest
from tests.fake_openai import FakeOpenAI, FaultPlan

TEXTS = conftest.DIALOGUE


def make_session(n: int = 6) -> Session:
    turns = [Turn(dia_id=f"D1:{i}", speaker=s, text=t) for i, (s, t) in enumerate(TEXTS[:n], 1)]
    return Session(memory_id="conv-26", session_id="session_1", session_index=1,
                   date_time="1:56 pm on 8 May, 2023", turns=turns)


def seg(start: str, end: str, theme: str = "support group", theme_type: str = "topic") -> dict:
    return {"start_dia_id": start, "end_dia_id": end, "theme": theme, "theme_type": theme_type,
            "theme_description": "desc", "boundary_reason": "semantic shift"}


def make_client(server: FakeOpenAI, tmp_path) -> LLMClient:
    return conftest.make_client(server, tmp_path, "partition")


# --------------------------------------------------------------------------- validate_segments
def test_validate_accepts_exact_cover():
    s = make_session()
    eps = validate_segments(s, {"segments": [seg("D1:1", "D1:3", theme_type="Event"),
                                             seg("D1:4", "D1:6", theme="painting")]})
    assert [e.dia_ids for e in eps] == [["D1:1", "D1:2", "D1:3"], ["D1:4", "D1:5", "D1:6"]]
    assert [e.episode_id for e in eps] == ["conv-26::session_1::episode_001", "conv-26::session_1::episode_002"]
    assert eps[0].theme_type == "event"  # normalized
    assert eps[1].theme == "painting"
    assert all(e.mode == "theme" and e.session_index == 1 and e.date_time == s.date_time for e in eps)


def test_validate_single_segment_cover():
    eps = validate_segments(make_session(), {"segments": [seg("D1:1", "D1:6")]})
    assert len(eps) == 1 and len(eps[0].dia_ids) == 6


@pytest.mark.parametrize("segments, pattern", [
    ([seg("D1:1", "D1:2"), seg("D1:4", "D1:6")], r"segment 2 starts at D1:4: gap after D1:2"),
    ([seg("D1:2", "D1:6")], r"gap after session start"),
    ([seg("D1:1", "D1:3"), seg("D1:3", "D1:6")], r"segment 2 starts at D1:3: overlap after D1:3"),
    ([seg("D1:1", "D1:3"), seg("D1:4", "D9:9")], r"segment 2: unknown DIA id 'D9:9'"),
    ([seg("X", "D1:6")], r"segment 1: unknown DIA id 'X'"),
    ([seg("D1:1", "D1:3"), seg("D1:4", "D1:2")], r"segment 2: end D1:2 before start D1:4"),
    ([seg("D1:1", "D1:3", theme="   "), seg("D1:4", "D1:6")], r"segment 1: empty theme"),
    ([seg("D1:1", "D1:3"), seg("D1:4", "D1:6", theme_type="mood")], r"segment 2: theme_type 'mood' not in"),
    ([seg("D1:1", "D1:3"), seg("D1:4", "D1:5")], r"segments end at D1:5, session ends at D1:6"),
    ([], r"'segments' must be a non-empty list"),
    (["D1:1-D1:6"], r"segment 1 is not an object"),
])
def test_validate_rejects_with_message(segments, pattern):
    with pytest.raises(PartitionError, match=pattern):
        validate_segments(make_session(), {"segments": segments})


def test_validate_rejects_missing_segments_key():
    with pytest.raises(PartitionError, match="segments"):
        validate_segments(make_session(), {"episodes": [seg("D1:1", "D1:6")]})


# --------------------------------------------------------------------------- fixed episodes
def test_fixed_turn_mode_one_episode_per_turn():
    s = make_session()
    eps = fixed_episodes(s, "turn")
    assert [e.dia_ids for e in eps] == [[f"D1:{i}"] for i in range(1, 7)]
    assert [e.episode_id for e in eps] == [f"conv-26::session_1::episode_{i:03d}" for i in range(1, 7)]
    assert {e.mode for e in eps} == {"turn"}


def test_fixed_session_mode_one_episode():
    s = make_session()
    (ep,) = fixed_episodes(s, "session")
    assert ep.dia_ids == [t.dia_id for t in s.turns]
    assert ep.episode_id == "conv-26::session_1::episode_001"
    assert ep.mode == "session"


def test_fixed_unknown_mode_raises():
    with pytest.raises(ValueError, match="bogus"):
        fixed_episodes(make_session(), "bogus")


def test_episode_id_zero_padded():
    assert episode_id(make_session(), 12) == "conv-26::session_1::episode_012"


def test_non_theme_mode_makes_no_llm_call(tmp_path):
    with FakeOpenAI() as server:
        row = partition_session(make_client(server, tmp_path), make_session(), mode="turn")
        assert server.request_count == 0
    assert len(row.episodes) == 6 and row.mode == "turn" and not row.fallback_used


# --------------------------------------------------------------------------- partition_session
def test_partition_good_reply_no_repair(tmp_path):
    with FakeOpenAI() as server:
        row = partition_session(make_client(server, tmp_path), make_session())
        assert server.counts_by_kind() == {"partition": 1}
        body = server.requests_of_kind("partition")[0]
    # The fake splits every 4 turns.
    assert [e.dia_ids for e in row.episodes] == [["D1:1", "D1:2", "D1:3", "D1:4"], ["D1:5", "D1:6"]]
    assert not row.repaired and not row.fallback_used and row.fallback_error == ""
    assert len(row.llm_calls) == 1 and row.llm_calls[0]["prompt_id"] == "partition_user"
    assert row.session_key == "conv-26::session_1"
    assert body["response_format"] == {"type": "json_object"}
    user = body["messages"][-1]["content"]
    assert all(f"[D1:{i}]" in user for i in range(1, 7))


def test_partition_malformed_then_repair(tmp_path):
    plan = FaultPlan(script=["malformed"], kinds={"partition"})
    with FakeOpenAI(faults=plan) as server:
        row = partition_session(make_client(server, tmp_path), make_session())
        assert server.counts_by_kind() == {"partition": 1, "partition_repair": 1}
        repair = server.requests_of_kind("partition_repair")[0]
    assert row.repaired and not row.fallback_used
    assert len(row.episodes) == 2
    assert [c["prompt_id"] for c in row.llm_calls] == ["partition_user", "partition_repair_user"]
    # The repair prompt carries the required ids and the broken proposal.
    repair_text = json.dumps(repair["messages"])
    assert "D1:6" in repair_text and "oops" in repair_text
    # ... and the session turns, so a garbage proposal can still be repaired into themes.
    assert "[D1:1] Caroline: I went to the LGBTQ support group" in repair["messages"][-1]["content"]


def test_partition_malformed_twice_falls_back(tmp_path):
    plan = FaultPlan(script=["malformed", "malformed"], kinds={"partition", "partition_repair"})
    s = make_session()
    with FakeOpenAI(faults=plan) as server:
        row = partition_session(make_client(server, tmp_path), s)
        assert server.request_count == 2
    assert row.fallback_used and row.repaired
    assert row.fallback_error.startswith("invalid_reply: ValueError:") and "JSON" in row.fallback_error
    (ep,) = row.episodes
    assert ep.dia_ids == [t.dia_id for t in s.turns]
    assert ep.episode_id == "conv-26::session_1::episode_001"
    assert ep.mode == "theme" and ep.boundary_reason.startswith("fallback")


def test_partition_invalid_cover_twice_falls_back(tmp_path):
    # Truncated JSON both times: not parseable -> fallback, with the error kept.
    plan = FaultPlan(script=["truncated", "truncated"], kinds={"partition", "partition_repair"})
    with FakeOpenAI(faults=plan) as server:
        row = partition_session(make_client(server, tmp_path), make_session())
    assert row.fallback_used and row.fallback_error and len(row.episodes) == 1


def test_partition_http_400_falls_back_without_raising(tmp_path):
    plan = FaultPlan(script=["400"], kinds={"partition"})
    with FakeOpenAI(faults=plan) as server:
        row = partition_session(make_client(server, tmp_path), make_session())
        assert server.request_count == 1  # 400 fails fast: no retry, no repair
    assert row.fallback_used and not row.repaired
    assert row.fallback_error.startswith("http_400: partition call failed (http_400)")
    assert len(row.episodes) == 1 and row.llm_calls == []


def test_partition_reply_is_cached(tmp_path):
    s = make_session()
    with FakeOpenAI() as server:
        client = make_client(server, tmp_path)
        first = partition_session(client, s)
        second = partition_session(client, s)
        assert server.request_count == 1
    assert second.llm_calls[0]["cached"] is True
    assert [e.dia_ids for e in first.episodes] == [e.dia_ids for e in second.episodes]
