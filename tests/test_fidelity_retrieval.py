"""Retrieval keeps what the authors' code kept, and the metrics are the official code's figures.

One test group per rule (reference_notes §3.5, §4.3, §5.4; benchmarks.md §3.1-3.2): buffer caps
that never drop a structured match before a lexical or dense one, placeholder anchor values,
first-person anchors, the per-hop dense-only ablation, the structured gates of the code, LoCoMo's
official evidence recall (evaluation_stats.analyze_aggr_acc) and the official turn->session rule
for the LongMemEval baselines. Expected values are worked out by hand from the definitions.
"""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from common.core import artifacts
from common.core.config import RetrieveConfig, load_config
from common.core.schema import Anchor, Episode, Gold, Hop, Plan, Question, Record, Session, Turn, to_dict
from common.evaluation import longmemeval as longmemeval_eval
from common.evaluation import metrics
from common.method.index import build_index
from common.method.render import MemoryView
from common.method.retrieve import Retriever, value_compatible
from common.pipeline import experiments, ledger
from tests.test_retrieve import (
    ACTIVITY,
    E1,
    E2,
    E3,
    E5,
    E6,
    EMBEDDER,
    EPISODES,
    MEM,
    VIEW,
    FakeEmbedder,
    Q,
    build_memory,
    hop,
    plan,
)


@pytest.fixture(scope="module")
def memory():
    return build_memory()


def retriever(index, view=VIEW, embedder=EMBEDDER, **cfg):
    return Retriever(index, view, embedder, RetrieveConfig(**cfg))


def ids(index, hits):
    return [index.episodes[h.pos].episode_id for h in hits]


# =========================================================================== 1. buffer caps
@pytest.mark.parametrize("config", ["configs/locomo.yaml", "configs/longmemeval.yaml"])
def test_paper_configs_cap_nothing(config: str) -> None:
    # The authors' code drops nothing from the hop-ordered union (reference_notes §3.5).
    cfg = load_config([config]).retrieve
    assert cfg.max_episodes is None and cfg.max_buffer_tokens is None
    assert RetrieveConfig().max_episodes is None and RetrieveConfig().max_buffer_tokens is None
    assert cfg.cap_drop == "route"


# "Where did Caroline move for her new job?" over Melanie's activities, all_matching: the four
# structured matches (E1, E2, E3, E6) plus the dense episodes E4 and E5; question terms rank E5
# (move, job, new) first, so a cut in answer-rank order drops a structured match.
MOVE = "Where did Caroline move for her new job?"
ALL = plan(hop("h1", **ACTIVITY), scope="all_matching")
STRUCTURED = {E1, E2, E3, E6}


def test_episode_cap_drops_dense_and_lexical_before_structured(memory) -> None:
    full = retriever(memory).retrieve(Q(MOVE), ALL)
    routes = {s.episode_id: s.route for s in full.selected}
    assert {e for e, r in routes.items() if r == "structured"} == STRUCTURED
    assert set(routes) - STRUCTURED  # some lexical or dense episodes too
    assert full.episode_ids[0] not in STRUCTURED  # ranked first by question terms
    assert full.contributions["dropped_by_caps"] == 0 and "caps" not in full.contributions

    by_route = retriever(memory, max_episodes=4).retrieve(Q(MOVE), ALL)
    assert set(by_route.episode_ids) == STRUCTURED
    # The kept episodes stay in the answer ranking's order.
    assert by_route.episode_ids == [e for e in full.episode_ids if e in STRUCTURED]
    assert by_route.contributions["dropped_by_caps"] == len(full.selected) - 4
    caps = by_route.contributions["caps"]
    assert caps["max_episodes"] == len(full.selected) - 4 and caps["max_buffer_tokens"] == 0
    assert sum(caps["routes"].values()) == len(full.selected) - 4 and "structured" not in caps["routes"]

    # The earlier rule, under its name: cut in answer-rank order (drops a structured match here).
    by_rank = retriever(memory, max_episodes=4, cap_drop="rank").retrieve(Q(MOVE), ALL)
    assert by_rank.episode_ids == full.episode_ids[:4]
    assert not STRUCTURED <= set(by_rank.episode_ids)


def test_token_cap_drops_dense_and_lexical_before_structured(memory) -> None:
    r = retriever(memory)
    full = r.retrieve(Q(MOVE), ALL)
    pos = memory.episode_pos()
    budget = sum(r._tokens_of(pos[e]) for e in STRUCTURED)
    capped = retriever(memory, max_buffer_tokens=budget).retrieve(Q(MOVE), ALL)
    assert set(capped.episode_ids) == STRUCTURED
    assert capped.contributions["caps"]["max_buffer_tokens"] == len(full.selected) - 4
    by_rank = retriever(memory, max_buffer_tokens=budget, cap_drop="rank").retrieve(Q(MOVE), ALL)
    assert not STRUCTURED <= set(by_rank.episode_ids)


def test_buffer_report_counts_how_often_a_cap_fired_per_scope() -> None:
    rows = [
        {"scope": "all_matching", "buffer_tokens": 900, "episode_ids": ["a", "b"],
         "contributions": {"scope": "all_matching", "routes": {}, "episodes": 2, "tokens": 900, "dropped_by_caps": 3,
                           "caps": {"max_episodes": 2, "max_buffer_tokens": 1, "routes": {"dense": 2, "lexical": 1}}}},
        {"scope": "all_matching", "buffer_tokens": 800, "episode_ids": ["a"],
         "contributions": {"scope": "all_matching", "routes": {}, "episodes": 1, "tokens": 800, "dropped_by_caps": 1,
                           "caps": {"max_episodes": 0, "max_buffer_tokens": 1, "routes": {"dense": 1}}}},
        {"scope": "all_matching", "buffer_tokens": 100, "episode_ids": ["a"],
         "contributions": {"scope": "all_matching", "routes": {}, "episodes": 1, "tokens": 100, "dropped_by_caps": 0}},
        {"scope": "point", "buffer_tokens": 100, "episode_ids": ["a"],
         "contributions": {"scope": "point", "routes": {}, "episodes": 1, "tokens": 100, "dropped_by_caps": 0}},
    ]
    out = metrics.buffer_contribution_stats(rows)["by_scope"]
    am = out["all_matching"]["caps_fired"]
    assert am == {"questions": 2, "of": 3, "max_episodes": 1, "max_buffer_tokens": 2,
                  "dropped_by_route": {"dense": 3, "lexical": 1}}
    assert out["point"]["caps_fired"] == {"questions": 0, "of": 1, "max_episodes": 0, "max_buffer_tokens": 0,
                                          "dropped_by_route": {}}
    assert out["all"]["caps_fired"]["questions"] == 2
    text = ledger.buffer_markdown(metrics.buffer_contribution_stats(rows))
    assert "| all_matching | 3 |" in text and "2 of 3" in text


# =========================================================================== 2. placeholder values
@pytest.mark.parametrize(("query", "value"), [
    ("book", "The Quiet Orchard"),
    ("art", "watercolor of a harbor at dawn"),
    ("kids", "Tomas and Lena"),
    ("Family", "two cousins from Porto"),
    ("favorite", "lemon tart"),
])
def test_placeholder_anchor_value_passes_any_non_empty_record(query: str, value: str) -> None:
    assert value_compatible(query, value, 0.0, 0.86) is True
    assert value_compatible(query, value, 0.0, 0.86, placeholders=False) is False
    assert value_compatible(query, "", 1.0, 0.86) is False  # an empty record value never passes
    # A specific value is not a placeholder.
    assert value_compatible("novel", "The Quiet Orchard", 0.0, 0.86) is False
    assert value_compatible("children's book", "The Quiet Orchard", 0.0, 0.86) is False


def test_placeholder_value_reaches_every_record_of_the_property(memory) -> None:
    # Melanie's four "activity" records hold no word of "art"; the placeholder passes them all.
    anchor = Anchor(entity="Melanie", entity_type="person", property="activity", value="art")
    assert set(ids(memory, retriever(memory).structured(anchor))) == {E1, E2, E3, E6}
    assert retriever(memory, placeholder_values=False).structured(anchor) == []


# =========================================================================== 3. first-person anchors
LME_MEM = "lme-q1"
LME_SESSIONS = [
    Session(LME_MEM, "s1", 1, "2023/04/02 (Sun) 10:00", [
        Turn("s1:1", "user", "I finally adopted a grey cat, her name is Miso.", role="user"),
        Turn("s1:2", "assistant", "Congratulations on adopting Miso!", role="assistant"),
    ], ["user", "assistant"]),
    Session(LME_MEM, "s2", 2, "2023/04/09 (Sun) 09:00", [
        Turn("s2:1", "user", "Can you suggest a bread recipe?", role="user"),
        Turn("s2:2", "assistant", "Try a simple sourdough loaf.", role="assistant"),
    ], ["user", "assistant"]),
]
LME_VIEW = MemoryView(LME_MEM, LME_SESSIONS)
LME_E1, LME_E2 = f"{LME_MEM}::s1::episode_001", f"{LME_MEM}::s2::episode_001"
LME_EPISODES = [Episode(LME_E1, LME_MEM, "s1", 1, "2023/04/02", ["s1:1", "s1:2"], "new cat", "topic"),
                Episode(LME_E2, LME_MEM, "s2", 2, "2023/04/09", ["s2:1", "s2:2"], "bread", "topic")]
LME_RECORDS = [Record(f"{LME_E1}::index_001", LME_E1, LME_MEM, "user", "person", "pet", "grey cat named Miso",
                      evidence_dia_ids=["s1:1"]),
               Record(f"{LME_E2}::index_001", LME_E2, LME_MEM, "user", "person", "request", "bread recipe",
                      evidence_dia_ids=["s2:1"])]


@pytest.fixture(scope="module")
def lme_memory():
    return build_index(LME_VIEW, LME_EPISODES, LME_RECORDS, EMBEDDER)


@pytest.mark.parametrize("entity", ["I", "me", "my", "My", "myself", "the user", "The User", "user's", "the user's"])
def test_first_person_anchor_reaches_the_user_entity(lme_memory, entity: str) -> None:
    anchor = Anchor(entity=entity, entity_type="person", property="pet")
    hits = retriever(lme_memory, LME_VIEW).structured(anchor)
    assert ids(lme_memory, hits) == [LME_E1] and hits[0].score == 1.0
    assert retriever(lme_memory, LME_VIEW, first_person=False).structured(anchor) == []


def test_first_person_possessive_becomes_the_users_possession(lme_memory) -> None:
    # "my cat" -> "user's cat": the possessor "user" is matched as for any "X's Y" entity.
    r = retriever(lme_memory, LME_VIEW)
    assert r.normalize_entity("my cat") == "user's cat"
    assert r.normalize_entity("the user's cat") == "user's cat"
    assert ids(lme_memory, r.structured(Anchor(entity="my cat", property="pet"))) == [LME_E1]


def test_the_resolved_anchor_records_the_normalized_entity(lme_memory) -> None:
    row = retriever(lme_memory, LME_VIEW).retrieve(
        Question("q", LME_MEM, "What is the name of my cat?"), plan(hop("h1", entity="I", property="pet")))
    assert row.resolved_anchors["h1"].entity == "user"
    assert row.selected[0].episode_id == LME_E1 and row.selected[0].route == "structured"


def test_no_user_entity_in_a_two_person_conversation(memory) -> None:
    # LoCoMo: two people, no user/assistant roles: first-person words are left as they are.
    r = retriever(memory)
    assert r.user_entity == "" and r.normalize_entity("I") == "I"


# =========================================================================== 4. dense_only per hop
class Recording(FakeEmbedder):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen += list(texts)
        return super().encode(texts)


def _dense_plan(scope: str) -> Plan:
    return Plan({"type": "value", "description": ""}, "direct", scope, [], [
        Hop("h1", purpose="Find the pet Caroline adopted", anchor=Anchor(entity="Caroline", property="pet")),
        Hop("h2", purpose="Find where Caroline moved", anchor=Anchor(entity="Caroline", property="moved_to"))])


def test_dense_only_queries_each_hop_with_its_purpose(memory) -> None:
    emb = Recording()
    q = Q("Which dog did Caroline adopt before moving?")
    row = retriever(memory, embedder=emb, mode="dense_only", dense_only_point_k=2).retrieve(q, _dense_plan("point"))
    texts = [f"Question: {q.question}\nRetrieval sub-question: {h.purpose}" for h in _dense_plan("point").hops]
    assert [t for t in emb.seen if t.startswith("Question: ")] == texts
    r = retriever(memory, mode="dense_only")
    expected: dict[str, str] = {}
    for h, t in zip(("h1", "h2"), texts):  # union over hops, in hop order, k episodes per point hop
        for e in ids(memory, r.dense(t, 2)):
            expected.setdefault(e, h)
    assert {s.episode_id: s.hop_id for s in row.selected} == expected
    assert {s.route for s in row.selected} == {"dense"} and set(expected.values()) == {"h1", "h2"}


def test_dense_only_budget_is_5_per_point_hop_and_50_per_all_matching_hop(memory) -> None:
    cfg = RetrieveConfig()
    assert (cfg.dense_only_point_k, cfg.dense_only_all_matching_k) == (5, 50)
    one_hop = Plan({"type": "value", "description": ""}, "direct", "point", [], _dense_plan("point").hops[:1])
    point = retriever(memory, mode="dense_only").retrieve(Q(), one_hop)
    assert len(point.selected) == 5
    one_hop.retrieval_scope = "all_matching"
    every = retriever(memory, mode="dense_only").retrieve(Q(), one_hop)
    assert len(every.selected) == len(memory.episodes) == 6  # 50 > the memory's 6 episodes


def test_dense_only_question_is_the_earlier_ablation_by_name(memory) -> None:
    emb = Recording()
    row = retriever(memory, embedder=emb, mode="dense_only", dense_only_query="question", fixed_k=3).retrieve(
        Q(), _dense_plan("all_matching"))
    assert emb.seen == [Q().question] and len(row.selected) == 3
    assert {s.hop_id for s in row.selected} == {"question"}
    exp = experiments.load()
    assert exp.variant("dense_only").set == {"retrieve.mode": "dense_only"}
    assert exp.variant("dense_only_question").set == {"retrieve.mode": "dense_only",
                                                      "retrieve.dense_only_query": "question"}


# =========================================================================== 5. structured gates
def _gate_memory(extra: list[tuple[str, str, str, str, str]]):
    recs = []
    for i, (ep, ent, typ, prop, val) in enumerate(extra, start=1):
        recs.append(Record(f"{ep}::index_{i:03d}", ep, MEM, ent, typ, prop, val, evidence_dia_ids=[]))
    return build_index(VIEW, list(EPISODES), recs, EMBEDDER)


GATE_RECORDS = [
    (E1, "Melanie", "person", "activity", "hiking in the mountains"),
    (E2, "Melanie", "person", "event", "sunset painting"),
    (E3, "Melanie", "other", "trip", "museum trip with kids"),
    (E6, "Melanie", "person", "fact", "violin practice"),
    (E5, "Boston", "place", "new_resident", "Caroline"),
    (E6, "Caroline", "person", "favorite_food_item", "sushi rolls"),
    (E2, "Carolinee", "person", "favorite_food", "sushi"),  # a near-identical name (fuzzy ratio 94)
]


@pytest.fixture(scope="module")
def gates():
    return _gate_memory(GATE_RECORDS)


def test_paper_configs_use_the_codes_gates() -> None:
    assert load_config(["configs/locomo.yaml"]).retrieve.gates == "code"
    assert load_config(["configs/longmemeval.yaml"]).retrieve.gates == "code"
    assert RetrieveConfig().gates == "code"


def test_type_gate_other_is_a_type_like_any_other(gates) -> None:
    code, loose = retriever(gates), retriever(gates, gates="loose")
    # A record typed "other" does not pass a "person" anchor; an "other" anchor is not a wildcard.
    trip = Anchor(entity="Melanie", entity_type="person", property="trip")
    assert code.structured(trip) == [] and ids(gates, loose.structured(trip)) == [E3]
    boston = Anchor(entity="Boston", entity_type="other", property="new_resident")
    assert code.structured(boston) == [] and ids(gates, loose.structured(boston)) == [E5]
    assert ids(gates, code.structured(Anchor(entity="Melanie", entity_type="other", property="trip"))) == [E3]


def test_fact_is_not_a_generic_property(gates) -> None:
    anchor = Anchor(entity="Melanie", entity_type="person", property="hobby", value="violin")
    assert retriever(gates).structured(anchor) == []
    assert ids(gates, retriever(gates, gates="loose").structured(anchor)) == [E6]


def test_generic_value_match_needs_a_specific_anchor_property(gates) -> None:
    # "activity" is itself generic: an "event" record holding the value is not a generic match,
    # and Melanie has an exact "activity" record, so no semantic fallback either.
    anchor = Anchor(entity="Melanie", entity_type="person", property="activity", value="painting")
    assert retriever(gates).structured(anchor) == []
    assert ids(gates, retriever(gates, gates="loose").structured(anchor)) == [E2]


def test_generic_record_without_value_match_is_dropped_for_a_specific_property(gates) -> None:
    # cos("property: outdoor_activity", "property: activity") = 2/sqrt(6) >= 0.78, but a generic
    # record property passes a specific anchor property only through the value.
    assert EMBEDDER.cos("property: outdoor_activity", "property: activity") >= 0.78
    anchor = Anchor(entity="Melanie", entity_type="person", property="outdoor_activity")
    assert retriever(gates).structured(anchor) == []
    assert ids(gates, retriever(gates, gates="loose").structured(anchor)) == [E1]


def test_exact_property_check_is_per_entity(gates) -> None:
    # "Carolinee" passes the fuzzy entity gate and has the exact property; that must not hide
    # Caroline's own close property (the code's check runs over the anchor's entity only).
    anchor = Anchor(entity="Caroline", entity_type="person", property="favorite_food")
    assert set(ids(gates, retriever(gates).structured(anchor))) == {E2, E6}
    assert ids(gates, retriever(gates, gates="loose").structured(anchor)) == [E2]


def test_design_decisions_page_names_every_switch() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "design-decisions.md").read_text()
    assert "| Element | Paper text | Authors' code | This harness's default | Options |" in text
    for key in ("max_episodes", "cap_drop", "placeholder_values", "first_person", "dense_only_query",
                "gates: loose", "evidence_recall_official", "evidence_recall_mean", "session_all_turns"):
        assert key in text, key


# =========================================================================== 6. LoCoMo evidence recall
def test_evidence_recall_official_is_analyze_aggr_acc() -> None:
    rows = [
        {"cat": "multi-hop", "scored": True, "raw_n": 3, "official": 2 / 3, "cleaned": 2 / 3},
        {"cat": "multi-hop", "scored": True, "raw_n": 0, "official": 1.0, "cleaned": None},
        {"cat": "multi-hop", "scored": True, "raw_n": 1, "official": 1.0, "cleaned": 1.0},
        {"cat": "adversarial", "scored": False, "raw_n": 2, "official": 0.5, "cleaned": 0.5},
    ]
    out = metrics.evidence_recall_summary(rows)
    official, mean = out["evidence_recall_official"], out["evidence_recall_mean"]
    # Each recall rounded to 3 decimals (0.667), summed over questions WITH evidence, divided by
    # all questions of the category: (0.667 + 1.0) / 3; overall (0.667 + 1.0 + 0.5) / 4.
    assert official["by_category"]["multi-hop"] == pytest.approx(1.667 / 3, abs=1e-12)
    assert official["by_category"]["adversarial"] == pytest.approx(0.5)
    assert official["overall"] == pytest.approx(2.167 / 4, abs=1e-12)
    assert official["n"] == 4 and official["no_gold_evidence_counted_0"] == 1
    # The per-question mean (no evidence = 1.0, unrounded), the earlier figure, under its own name.
    assert mean["overall"] == pytest.approx((2 / 3 + 1 + 1 + 0.5) / 4)
    assert mean["by_category"]["multi-hop"] == pytest.approx((2 / 3 + 2) / 3)
    assert mean["no_gold_evidence_scored_1"] == 1


def test_evidence_recall_official_on_the_real_file(real_locomo) -> None:
    from common.benchmarks.locomo import ADAPTER

    data = ADAPTER.load(real_locomo)
    missing = [(g.qid, g.category) for g in data.gold if not g.raw_evidence]
    assert missing == [("conv-26:q0031", 3), ("conv-26:q0047", 3), ("conv-50:q0040", 3), ("conv-50:q0043", 3)]
    every_turn = [t.dia_id for s in data.sessions for t in s.turns]
    per_memory: dict[str, list[str]] = {}
    for s in data.sessions:
        per_memory.setdefault(s.memory_id, []).extend(t.dia_id for t in s.turns)
    assert every_turn
    rows = [{"cat": ADAPTER.category(g), "scored": g.category != 5, "raw_n": len(g.raw_evidence),
             "official": metrics.evidence_recall_official(g.raw_evidence, per_memory[g.memory_id]),
             "cleaned": metrics.evidence_recall(g.evidence, per_memory[g.memory_id])} for g in data.gold]
    out = metrics.evidence_recall_summary(rows)
    # Every turn retrieved: the per-question mean and the official figure differ by exactly the
    # 4 open-domain questions without evidence (1.0 in the mean, 0 in the official sum) over 96.
    od_mean = out["evidence_recall_mean"]["by_category"]["open-domain"]
    od_official = out["evidence_recall_official"]["by_category"]["open-domain"]
    assert od_mean - od_official == pytest.approx(4 / 96, abs=1e-9)
    assert out["evidence_recall_official"]["n"] == 1986


# =========================================================================== 7. LongMemEval baselines' session metric
def _write_jsonl(path, rows) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_baseline_session_metric_is_the_official_turn_to_session_rule(tmp_path) -> None:
    # Answer session A: a flagged user turn A:1, an assistant turn A:2, an unflagged user turn A:3;
    # filler session F: one user turn. A baseline ranked the turns A:2, F:1, A:3, A:1.
    turns_a = [Turn("A:1", "user", "I bought a red bike", role="user"),
               Turn("A:2", "assistant", "Nice bike", role="assistant"),
               Turn("A:3", "user", "Thanks", role="user")]
    sessions = [Session("m", "sa", 1, "2023/01/01", turns_a, source_id="answer_a"),
                Session("m", "sf", 2, "2023/01/02", [Turn("F:1", "user", "hello", role="user")], source_id="s_f")]
    _write_jsonl(artifacts.path(tmp_path, "sessions"), [to_dict(s) for s in sessions])
    order = ["A:2", "F:1", "A:3", "A:1"]
    _write_jsonl(artifacts.path(tmp_path, "retrievals"), [
        {"qid": "q", "selected": [], "dia_ids": ["A:1", "A:2", "A:3", "F:1"],
         "method_info": {"ranked_dia_ids": order}}])
    _write_jsonl(artifacts.path(tmp_path, "gold"), [to_dict(Gold(
        "q", "m", "a red bike", 0, question_type="single-session-user", answer_session_ids=["answer_a"],
        has_answer=["A:1"]))])
    out = longmemeval_eval.retrieval_rows(SimpleNamespace(path=lambda name: artifacts.path(tmp_path, name)))["q"]
    # Official: user turns only -> [F:1, A:3 (noans), A:1]; only A:1 is relevant (rank 3).
    # @1: [F] -> 0. @3: DCG = 1/log2(3); IDCG over the mapped corpus (one relevant turn) = 1.
    assert out["session"] == out["turn_as_session"]
    assert out["session"]["recall_any@1"] == 0.0 and out["session"]["recall_any@3"] == 1.0
    assert out["session"]["ndcg_any@3"] == pytest.approx(1 / math.log2(3))
    # The earlier figure (every turn of the answer session relevant, assistant turns included) by name:
    # [A, F, A, A] @1 -> relevant.
    assert out["session_all_turns"]["recall_any@1"] == 1.0
