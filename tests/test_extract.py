"""Stage 03 (common/method/extract.py): record normalization, prompt assembly, LLM extraction."""
from __future__ import annotations

import pytest

from common.core import prompts
from common.core.llm import LLMClient
from common.core.schema import Episode, Session, Turn
from common.method.extract import GRANULARITIES, extract_episode, extract_messages, normalize_records
from common.method.render import MemoryView
from tests import conftest
from tests.fake_openai import FakeOpenAI, FaultPlan

TEXTS = conftest.DIALOGUE
EP_IDS = ["D1:3", "D1:4", "D1:5"]
EP_ID = "conv-26::session_1::episode_002"


def make_session() -> Session:
    turns = [Turn(dia_id=f"D1:{i}", speaker=s, text=t) for i, (s, t) in enumerate(TEXTS, 1)]
    turns[3].blip_caption = "a painting of a sunrise"
    return Session(memory_id="conv-26", session_id="session_1", session_index=1,
                   date_time="1:56 pm on 8 May, 2023", turns=turns)


def make_episode() -> Episode:
    return Episode(episode_id=EP_ID, memory_id="conv-26", session_id="session_1", session_index=1,
                   date_time="1:56 pm on 8 May, 2023", dia_ids=list(EP_IDS), theme="painting",
                   theme_type="topic")


def rec(**kw) -> dict:
    base = {"entity": "Melanie", "entity_type": "person", "property": "activity", "value": "painting",
            "evidence_dia_ids": ["D1:4"], "confidence": 0.9}
    base.update(kw)
    return base


def make_client(server: FakeOpenAI, tmp_path) -> LLMClient:
    return conftest.make_client(server, tmp_path, "extract")


# --------------------------------------------------------------------------- normalize_records
def test_normalize_keeps_valid_record_and_numbers_ids():
    recs, dropped, repaired = normalize_records([rec(), rec(property="destination", value="lake")],
                                                make_episode(), "fine")
    assert (dropped, repaired) == (0, 0)
    assert [r.record_id for r in recs] == [f"{EP_ID}::index_001", f"{EP_ID}::index_002"]
    r = recs[0]
    assert (r.entity, r.entity_type, r.property, r.value) == ("Melanie", "person", "activity", "painting")
    assert r.episode_id == EP_ID and r.memory_id == "conv-26" and r.granularity == "fine"
    assert r.evidence_dia_ids == ["D1:4"] and r.confidence == 0.9


@pytest.mark.parametrize("bad", [
    rec(entity=""),
    rec(entity=None),
    rec(property="  "),
    rec(property="!!!"),  # normprop leaves nothing
    rec(evidence_dia_ids=[]),
    rec(evidence_dia_ids=["D1:1"]),  # only outside the episode
    rec(evidence_dia_ids=None),
    "not a record",
])
def test_normalize_drops_and_counts(bad):
    recs, dropped, repaired = normalize_records([bad, rec()], make_episode(), "broad")
    assert len(recs) == 1 and dropped == 1
    assert repaired == 0  # a dropped record is not a repaired one
    assert recs[0].record_id == f"{EP_ID}::index_001"


def test_normalize_strips_outside_evidence_and_counts_repair():
    raw = [rec(evidence_dia_ids=["D1:1", "D1:4", " D1:5 ", "D1:4"]),  # outside + duplicate
           rec(property="mood", evidence_dia_ids=["D1:3", "D1:3"]),  # duplicate only: not a repair
           rec(property="place", evidence_dia_ids="D1:5")]  # a bare string is one id
    recs, dropped, repaired = normalize_records(raw, make_episode(), "broad")
    assert dropped == 0 and repaired == 1
    assert [r.evidence_dia_ids for r in recs] == [["D1:4", "D1:5"], ["D1:3"], ["D1:5"]]


def test_normalize_non_list_evidence_is_dropped_not_crash():
    recs, dropped, _ = normalize_records([rec(evidence_dia_ids=4), rec(evidence_dia_ids={"a": 1})],
                                         make_episode(), "broad")
    assert recs == [] and dropped == 2


def test_normalize_field_normalization():
    raw = [rec(property="Means of Transport", entity_type="Vehicle", condition_property="through",
               condition_value="the  summer", confidence=7, modality="Planned", projection_kind="weird",
               property_kind="Aspect"),
           rec(property="hobby-Art", condition_property="whenever", condition_value="x", confidence=-3,
               modality="dreamy", entity_type=" PLACE "),
           rec(property="x", confidence="high")]
    a, b, c = normalize_records(raw, make_episode(), "broad")[0]
    assert a.property == "means_of_transport"
    assert a.entity_type == "other"
    assert (a.condition_property, a.condition_value) == ("during", "the summer")
    assert a.confidence == 1.0 and a.modality == "planned" and a.projection_kind == "direct"
    assert a.property_kind == "aspect"
    assert b.property == "hobby_art" and b.entity_type == "place"
    assert (b.condition_property, b.condition_value) == ("", "")  # unknown condition dropped with its value
    assert b.confidence == 0.0 and b.modality == "observed" and b.property_kind == "relation"
    assert c.confidence == 1.0


@pytest.mark.parametrize("cond, expected", [("in", "during"), ("to", "for"), ("Because Of", "because_of"),
                                            ("after", "after"), ("nonsense", ""), ("", "")])
def test_normalize_condition_alias(cond, expected):
    (r,), _, _ = normalize_records([rec(condition_property=cond, condition_value="v")], make_episode(), "broad")
    assert r.condition_property == expected


def test_normalize_dedups_after_normalization():
    raw = [rec(), rec(property="Activity", value=" painting ", entity="melanie"),
           rec(value="hiking"), rec()]
    recs, dropped, _ = normalize_records(raw, make_episode(), "broad")
    assert [r.value for r in recs] == ["painting", "hiking"]
    assert dropped == 2
    assert [r.record_id for r in recs] == [f"{EP_ID}::index_001", f"{EP_ID}::index_002"]


def test_normalize_rejects_non_list():
    with pytest.raises(ValueError, match="list"):
        normalize_records({"entity": "x"}, make_episode(), "broad")
    with pytest.raises(ValueError):
        normalize_records(None, make_episode(), "broad")


# --------------------------------------------------------------------------- extract_messages
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_extract_messages_policy_and_turns(granularity):
    view = MemoryView("conv-26", [make_session()])
    system, user = extract_messages(view, make_episode(), granularity)
    assert system["role"] == "system" and user["role"] == "user"
    assert "information-extraction stage" in system["content"]
    policy = prompts.load(f"granularity_{granularity}")
    assert policy and policy in user["content"]
    for other in GRANULARITIES:
        if other != granularity:
            assert prompts.load(f"granularity_{other}") not in user["content"]
    content = user["content"]
    assert "[D1:3] Caroline: People shared transgender stories" in content
    assert "[D1:4] Melanie: I painted a sunrise" in content
    assert "[D1:5] Caroline: Beautiful!" in content
    assert "[D1:1]" not in content and "[D1:6]" not in content  # only this episode
    assert EP_ID in content and "1:56 pm on 8 May, 2023" in content
    assert "[image caption] a painting of a sunrise" in content
    assert "{" + "episode_text}" not in content and "{granularity_policy}" not in content


def test_extract_messages_images_off_and_bad_granularity():
    view = MemoryView("conv-26", [make_session()])
    _, user = extract_messages(view, make_episode(), "broad", include_images=False)
    assert "[image caption]" not in user["content"]
    with pytest.raises(ValueError, match="granularity"):
        extract_messages(view, make_episode(), "medium")


def test_granularity_texts_differ():
    texts = {prompts.load(f"granularity_{g}") for g in GRANULARITIES}
    assert len(texts) == 4


# --------------------------------------------------------------------------- extract_episode
def test_extract_episode_ok(tmp_path):
    view, ep = MemoryView("conv-26", [make_session()]), make_episode()
    with FakeOpenAI() as server:
        row = extract_episode(make_client(server, tmp_path), view, ep, "broad")
        assert server.counts_by_kind() == {"extract": 1}
    assert not row.fallback_used and not row.repaired and row.error == ""
    assert row.records, "the fake returns one record per turn"
    assert all(set(r.evidence_dia_ids) <= set(EP_IDS) for r in row.records)
    assert {d for r in row.records for d in r.evidence_dia_ids} == set(EP_IDS)
    assert row.n_raw >= len(row.records) and row.n_raw - row.n_dropped == len(row.records)
    assert all(r.granularity == "broad" and r.record_id.startswith(EP_ID + "::index_") for r in row.records)
    assert row.llm_calls[0]["prompt_id"] == "extract_user/broad"


def test_extract_episode_repair_once(tmp_path):
    plan = FaultPlan(script=["malformed"], kinds={"extract"})
    with FakeOpenAI(faults=plan) as server:
        row = extract_episode(make_client(server, tmp_path), MemoryView("conv-26", [make_session()]),
                              make_episode(), "fine")
        assert server.counts_by_kind() == {"extract": 1, "extract_repair": 1}
    assert row.repaired and not row.fallback_used and row.error == ""
    assert [c["prompt_id"] for c in row.llm_calls] == ["extract_user/fine", "extract_repair_user"]


def test_extract_episode_double_malformed_fallback(tmp_path):
    plan = FaultPlan(script=["malformed", "malformed"], kinds={"extract", "extract_repair"})
    with FakeOpenAI(faults=plan) as server:
        row = extract_episode(make_client(server, tmp_path), MemoryView("conv-26", [make_session()]),
                              make_episode(), "broad")
        assert server.request_count == 2
    assert row.fallback_used and row.repaired
    assert row.records == [] and row.error.startswith("invalid_reply: ValueError:")


def test_extract_episode_http_error_fallback(tmp_path):
    plan = FaultPlan(script=["400"], kinds={"extract"})
    with FakeOpenAI(faults=plan) as server:
        row = extract_episode(make_client(server, tmp_path), MemoryView("conv-26", [make_session()]),
                              make_episode(), "broad")
    assert row.fallback_used and row.records == [] and "http_400" in row.error
