"""Bridges: a hop's declared intermediate value, resolved in 06 and searched with by later hops.

Unit level over the hand-built memory of test_retrieve (a resolver stands in for the LLM), the
call discipline against the fake server, and the whole stage: one call per declared bridge,
failures recorded and redone, reruns free, the value shown to the answer model.
"""
from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from common.core.schema import Anchor, Bridge, Hop
from common.method.bridge import parse_bridge, resolve_anchor, resolve_bridge
from common.pipeline.ledger import ledger as run_ledger
from tests.conftest import STAGE_ORDER, TINY_LOCOMO, make_client, rows, run_overrides, run_stages
from tests.fake_openai import FakeOpenAI, FaultPlan
from tests.test_retrieve import E5, Q, build_memory, make, plan

CONFIG = "configs/locomo.yaml"
MOVED = Hop("h1", anchor=Anchor(entity="Caroline", property="moved_to"), bridge_request="the city Caroline moved to")
RESIDENT = Hop("h2", anchor=Anchor(entity="$h1.bridge", property="new_resident"), depends_on=["h1"])


@pytest.fixture(scope="module")
def memory_index():
    """The hand-built memory of test_retrieve (what its ``index`` fixture gives)."""
    return build_memory()


class Resolver:
    """Stands in for the LLM: records what it was shown, answers ``value`` after ``sleep`` s."""

    def __init__(self, value: str = "Boston", error: str = "", sleep: float = 0.0, latency: float = 0.01):
        self.value, self.error, self.sleep, self.latency = value, error, sleep, latency
        self.seen: list[tuple[str, Anchor, str, list[str]]] = []

    def __call__(self, hop, anchor, episodes, ids):
        self.seen.append((hop.hop_id, anchor, episodes, ids))
        time.sleep(self.sleep)
        bridge = Bridge(hop.hop_id, hop.bridge_request, "" if self.error else self.value, ids[:1], list(ids),
                        error=self.error)
        return bridge, [{"prompt_id": "bridge_user", "cached": False, "latency": self.latency, "usage": {}}]


# ----------------------------------------------------------------------------- pieces
def test_placeholders_take_the_bridge_value_or_vanish():
    a = Anchor(entity="$h1.bridge", property="gift", value="for $h2.bridge's sister", condition_value="$h1.bridge")
    assert resolve_anchor(a, {"h1": "Karim", "h2": "Lena"}) == Anchor(
        entity="Karim", property="gift", value="for Lena's sister", condition_value="Karim")
    assert resolve_anchor(a, {"h1": ""}) == Anchor(entity="", property="gift", value="for 's sister")


def test_parse_bridge_keeps_only_ids_it_showed_and_rejects_bad_shapes():
    assert parse_bridge('{"bridge": "  Rex ", "supporting_episode_ids": ["e2", "zz", "e2"]}', ["e1", "e2"]) == \
        ("Rex", ["e2"])
    assert parse_bridge('{"bridge": ""}', ["e1"]) == ("", [])
    for bad in ('{"bridge": 3}', '{"value": "Rex"}', '{"bridge": "Rex", "supporting_episode_ids": "e1"}', "Rex"):
        with pytest.raises(ValueError):
            parse_bridge(bad, ["e1"])


def test_a_dependent_hop_searches_with_the_resolved_value(memory_index):
    resolver = Resolver("Boston")
    row = make(memory_index).retrieve(Q(), plan(MOVED, RESIDENT), resolver)
    (hop_id, anchor, text, ids), = resolver.seen  # one call: only h1 declares a bridge
    assert (hop_id, anchor) == ("h1", MOVED.anchor)
    assert ids[0] == E5 and f"### Episode {E5}" in text  # h1's own episodes, best first
    assert row.resolved_anchors["h2"] == Anchor(entity="Boston", property="new_resident")
    assert row.coverage == {"h1": True, "h2": True}  # Boston's record is found through the bridge
    assert [b.value for b in row.bridges] == ["Boston"] and not row.fallback_used

    off = make(memory_index).retrieve(Q(), plan(MOVED, RESIDENT), None)  # retrieve.bridges=false
    assert off.resolved_anchors["h2"].entity == "" and off.coverage["h2"] is False
    assert off.bridges == [] and off.llm_calls == []


def test_retrieval_time_counts_the_call_latency_not_the_wait(memory_index):
    row = make(memory_index).retrieve(Q(), plan(MOVED, RESIDENT), Resolver(sleep=0.3, latency=0.05))
    assert row.bridge_seconds == 0.05 and 0.05 <= row.seconds < 0.3


def test_a_failed_bridge_is_recorded_and_the_dependent_hop_falls_back(memory_index):
    row = make(memory_index).retrieve(Q(), plan(MOVED, RESIDENT), Resolver(error="http_500: bridge call failed"))
    assert row.fallback_used and row.error == "http_500: bridge call failed"
    assert row.resolved_anchors["h2"].entity == "" and row.episode_ids  # still retrieves


# (faults, cause, requests sent, calls recorded: a failed call has no reply to record)
@pytest.mark.parametrize("script,cause,calls,recorded", [(["500"], "http_500", 1, 0),
                                                         (["malformed", "malformed"], "invalid_reply", 2, 2)])
def test_resolve_bridge_failures_never_raise(tmp_path, script, cause, calls, recorded):
    with FakeOpenAI(faults=FaultPlan(script=script)) as server:
        client = make_client(server, tmp_path, "bridge", max_attempts=1)
        bridge, records = resolve_bridge(client, "Where did she move?", MOVED, MOVED.anchor,
                                         "### Episode e1 | s | session date: x\n[D1:1] Caroline: I moved to Boston.",
                                         ["e1"])
    assert bridge.value == "" and bridge.error.startswith(f"{cause}: ") and len(records) == recorded
    assert server.request_count == calls


# ----------------------------------------------------------------------------- the stage
def _bridge_row(run):
    (row,) = [r for r in rows(run.path("retrievals")) if r["bridges"]]
    return row


def test_stage_06_resolves_each_declared_bridge_once_and_reruns_free(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    sets = run_overrides(tmp_path, TINY_LOCOMO)
    run = run_stages(CONFIG, sets)
    plans = rows(run.path("plans"))
    declared = sum(bool(h["bridge_request"]) for p in plans for h in p["plan"]["hops"])
    assert declared == 1 and fake_server.counts_by_kind()["bridge"] == 1
    row = _bridge_row(run)
    (bridge,) = row["bridges"]
    assert bridge["value"] and row["resolved_anchors"]["h2"]["entity"] == bridge["value"]
    assert set(bridge["supporting_episode_ids"]) <= set(bridge["context_episode_ids"])
    # The answer model sees the value with the plan.
    (answer_req,) = [b for b, k in zip(fake_server.requests, fake_server.request_kinds)
                     if k == "answer" and row["question"] in b["messages"][-1]["content"]]
    assert f'"bridge_value": "{bridge["value"]}"' in answer_req["messages"][-1]["content"]
    # Accounted like any LLM stage: manifest, ledger, Table 3 retrieval time.
    led = run_ledger(run.dir)
    (entry,) = [e for e in led["stages"] if e["stage"] == "06_retrieve"]
    assert (entry["role"], entry["calls"], entry["paid"]) == ("bridge", 1, 1)
    before = fake_server.request_count
    run_stages(CONFIG, sets)
    assert fake_server.request_count == before  # a finished run re-run pays nothing


def test_bridges_off_makes_no_call(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    run = run_stages(CONFIG, run_overrides(tmp_path, TINY_LOCOMO, **{"retrieve.bridges": "false"}), STAGE_ORDER[:7])
    assert "bridge" not in fake_server.counts_by_kind()
    assert all(r["bridges"] == [] and r["llm_calls"] == [] for r in rows(run.path("retrievals")))


def test_a_failed_bridge_is_counted_then_redone_alone(tmp_path, monkeypatch):
    with FakeOpenAI(faults=FaultPlan(pinned={"bridge": ["500"]})) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        sets = run_overrides(tmp_path, TINY_LOCOMO, **{"llm.max_attempts": 2})
        run = run_stages(CONFIG, sets, STAGE_ORDER[:7])
        row = _bridge_row(run)
        assert row["fallback_used"] and row["error"].startswith("http_500: ")
        manifest = json.loads((run.dir / "06_retrieve.manifest.json").read_text())
        assert manifest["failed_rows"] == 1 and manifest["llm"]["failures"] == {"http_500": 1}
        (entry,) = [e for e in run_ledger(run.dir)["stages"] if e["stage"] == "06_retrieve"]
        assert entry["failed_rows"] == {"http_500": 1}
        server.faults = None  # the outage is over
        before = Counter(server.request_kinds)
        run_stages(CONFIG, sets, ["retrieve", "answer"])
        new = Counter(server.request_kinds) - before
        # Only the failed bridge is asked again, and the answer whose evidence it changed.
        assert new["bridge"] == 1 and new["answer"] <= 1 and set(new) <= {"bridge", "answer", "embeddings"}
        assert not _bridge_row(run)["fallback_used"]


def test_bridge_calls_of_different_questions_are_in_flight_together(tmp_path, monkeypatch):
    """06 computes one question at a time but releases that lock while a bridge call waits."""
    data = json.loads(TINY_LOCOMO.read_text(encoding="utf-8"))
    data[1]["qa"] += [{"question": q, "answer": "x", "evidence": ["D1:4"], "category": 1}
                      for q in ("What does Omar's brother study?", "When did Lena's sister travel?",
                                "Where does Omar's cousin live?")]
    path = tmp_path / "four_bridges.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with FakeOpenAI(kind_latency={"bridge": 0.5}) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        run = run_stages(CONFIG, run_overrides(tmp_path, path), STAGE_ORDER[:6])
        assert server.counts_by_kind()["bridge"] == 4 and len(rows(run.path("retrievals"))) == 14
        assert server.peak_in_flight["bridge"] >= 2
