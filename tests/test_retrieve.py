"""Tests for common/method/retrieve.py over a tiny hand-built memory and a deterministic fake embedder."""
from __future__ import annotations

import dataclasses
import hashlib
import re

import numpy as np
import pytest

from common.core.config import RetrieveConfig, ScopeBudget
from common.core.schema import Anchor, Episode, Hop, Plan, Question, Record, Session, Turn, to_dict
from common.core.tokens import count_tokens
from common.method.index import MemoryIndex, build_index
from common.method.render import MemoryView
from common.method.retrieve import Retriever, jaccard, value_compatible

MEM = "m1"
DATES = {1: "1:00 pm on 1 May, 2023", 2: "2:00 pm on 8 May, 2023", 3: "10:00 am on 20 May, 2023"}


class FakeEmbedder:
    """Bag-of-words feature hashing, L2-normalized: identical texts have cosine 1, texts
    without shared words ~0. ``pinned`` replaces a text by another before hashing, so a test
    can force a given text to be unrelated to everything."""

    def __init__(self, dim: int = 256, pinned: dict[str, str] | None = None):
        self.dim = dim
        self.model_id = f"fake-bow-{dim}"
        self.pinned = pinned or {}

    def _vec(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim, np.float32)
        for tok in re.findall(r"[a-z0-9]+", text.lower()):
            v[int.from_bytes(hashlib.sha256(tok.encode()).digest()[:4], "little") % self.dim] += 1.0
        n = np.linalg.norm(v)
        return v / n if n else v

    def encode(self, texts):
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._vec(self.pinned.get(t, t)) for t in texts]).astype(np.float32)

    def cos(self, a: str, b: str) -> float:
        va, vb = self.encode([a, b])
        return float(va @ vb)


EMBEDDER = FakeEmbedder(pinned={"value: sushi platter": "zebra quartz"})


def _session(idx, turns):
    return Session(MEM, f"session_{idx}", idx, DATES[idx], turns, ["Caroline", "Melanie"])


SESSIONS = [
    _session(1, [
        Turn("D1:1", "Caroline", "I started a pottery class last week."),
        Turn("D1:2", "Melanie", "Nice! I went hiking in the mountains."),
        Turn("D1:3", "Caroline", "My favorite food is sushi."),
        Turn("D1:4", "Melanie", "Look at my new painting!", img_url=["https://example.invalid/painting.jpg"],
             blip_caption="a photo of a sunset painting over a lake"),
    ]),
    _session(2, [
        Turn("D2:1", "Melanie", "My kids loved the dinosaur museum trip."),
        Turn("D2:2", "Caroline", "I adopted a dog named Rex."),
        Turn("D2:3", "Melanie", "Rex is a lovely name."),
    ]),
    _session(3, [
        Turn("D3:1", "Caroline", "I moved to Boston for a new job."),
        Turn("D3:2", "Melanie", "I practice the violin every evening."),
        Turn("D3:3", "Caroline", "Sushi rolls are still what I love to eat."),
    ]),
]
VIEW = MemoryView(MEM, SESSIONS)


def eid(s, n):
    return f"{MEM}::session_{s}::episode_{n:03d}"


E1, E2, E3, E4, E5, E6 = eid(1, 1), eid(1, 2), eid(2, 1), eid(2, 2), eid(3, 1), eid(3, 2)
_EP_SPEC = [
    (E1, 1, ["D1:1", "D1:2"], "hobbies"), (E2, 1, ["D1:3", "D1:4"], "food and art"),
    (E3, 2, ["D2:1"], "museum"), (E4, 2, ["D2:2", "D2:3"], "new dog"),
    (E5, 3, ["D3:1"], "moving"), (E6, 3, ["D3:2", "D3:3"], "music and food"),
]
EPISODES = [Episode(e, MEM, f"session_{s}", s, DATES[s], d, th, "topic") for e, s, d, th in _EP_SPEC]

_REC_SPEC = [  # (episode, entity, type, property, value, evidence)
    (E1, "Caroline", "person", "hobby", "pottery class", "D1:1"),
    (E1, "Melanie", "person", "activity", "hiking in the mountains", "D1:2"),
    (E2, "Caroline", "person", "favorite_food", "sushi", "D1:3"),
    (E2, "Melanie", "person", "activity", "sunset painting", "D1:4"),
    (E3, "Melanie", "person", "activity", "museum trip with kids", "D2:1"),
    (E4, "Caroline", "person", "pet", "dog named Rex", "D2:2"),
    (E5, "Caroline", "person", "moved_to", "Boston", "D3:1"),
    (E5, "Boston", "place", "new_resident", "Caroline", "D3:1"),
    (E6, "Melanie", "person", "activity", "violin practice", "D3:2"),
    (E6, "Caroline", "person", "favorite_food_item", "sushi rolls", "D3:3"),
]


def _records():
    out, count = [], {}
    for ep, ent, typ, prop, val, ev in _REC_SPEC:
        count[ep] = count.get(ep, 0) + 1
        out.append(Record(f"{ep}::index_{count[ep]:03d}", ep, MEM, ent, typ, prop, val, evidence_dia_ids=[ev]))
    return out


RECORDS = _records()
RID = {(r.entity, r.property, r.value): r.record_id for r in RECORDS}


def build_memory():
    # Episodes given out of order: the index keeps conversation order.
    return build_index(VIEW, list(reversed(EPISODES)), RECORDS, EMBEDDER)


@pytest.fixture(scope="module")
def index():
    return build_memory()


# The harness's earlier retrieval choices, options since issue 11 (BM25 route, coverage stop,
# buffer in conversation order) and since the second fidelity pass (question-only dense_only):
# these tests pin them; tests/test_fidelity.py and test_fidelity_retrieval.py pin the new defaults.
LEGACY = dict(stop_when_covered=True, lexical="bm25", buffer_order="conversation", dense_only_query="question")


def make(index, **cfg):
    return Retriever(index, VIEW, EMBEDDER, RetrieveConfig(**{**LEGACY, **cfg}))


def hop(hop_id, **anchor):
    return Hop(hop_id, anchor=Anchor(**anchor))


def plan(*hops, scope="point", reasoning="direct"):
    return Plan({"type": "value", "description": ""}, reasoning, scope, [], list(hops))


def Q(text="What pet did Caroline adopt?"):
    return Question("q1", MEM, text)


def pos(index, episode_id):
    return index.episode_pos()[episode_id]


def eps(index, hits):
    return [index.episodes[h.pos].episode_id for h in hits]


W = RetrieveConfig().weights
PET = dict(entity="Caroline", entity_type="person", property="pet")
ACTIVITY = dict(entity="Melanie", entity_type="person", property="activity")
PAINTING = dict(entity="Melanie", entity_type="person", property="activity", value="painting")


# --------------------------------------------------------------------------- value_compatible
@pytest.mark.parametrize("query,value,cosine,expected", [
    ("Sushi", "  sushi ", 0.0, True),  # equal after normalization
    ("art", "smart phone", 0.0, True),  # substring only (no shared token, no 4-letter prefix)
    ("red car", "car keys", 0.0, True),  # shared token only
    ("paint", "paintings", 0.0, True),  # substring (and 4+ letter prefix)
    ("hiking trips", "hikes", 0.0, False),  # shared "hik" is only 3 letters; no other rule
    ("violin", "cello", 0.90, True),  # cosine at/above threshold
    ("violin", "cello", 0.86, True),
    ("violin", "cello", 0.85, False),
    ("", "cello", 1.0, False),  # empty never matches
    ("violin", "", 1.0, False),
])
def test_value_compatible(query, value, cosine, expected):
    assert value_compatible(query, value, cosine, 0.86) is expected


def test_value_compatible_prefix_needs_four_letters():
    # Multi-word queries, so that neither whole string contains the other.
    assert value_compatible("cart red", "cartwheel", 0.0, 0.86)  # "cart" (4) prefixes "cartwheel"
    assert not value_compatible("car red", "carpet", 0.0, 0.86)  # "car" is only 3 letters
    assert not value_compatible("sun hat", "sonnet", 0.0, 0.86)


# --------------------------------------------------------------------------- structured score
def test_structured_score_hand_computed_jaccard_value(index):
    r = make(index)
    anchor = Anchor(entity="Caroline", entity_type="person", property="favorite_food", value="sushi platter")
    # Preconditions: the value matches lexically (substring) and only jaccard scores it.
    assert EMBEDDER.cos("value: sushi platter", "value: sushi") < 0.05
    assert jaccard("sushi platter", "sushi") == 0.5
    hits = r.structured(anchor)
    assert eps(index, hits) == [E2]
    expected = (0.25 * 1.0 + 0.08 * 1.0 + 0.22 * 1.0 + 0.18 * 0.5) / (0.25 + 0.08 + 0.22 + 0.18)
    assert hits[0].score == pytest.approx(expected, abs=1e-6)  # 0.876712...
    assert hits[0].score == pytest.approx(0.8767123, abs=1e-6)
    assert hits[0].record_id == RID[("Caroline", "favorite_food", "sushi")]
    assert hits[0].route == "structured"
    assert (W["entity"], W["entity_type"], W["property"], W["value"]) == (0.25, 0.08, 0.22, 0.18)


def test_structured_score_cosine_value_and_no_type(index):
    r = make(index)
    # value "painting" vs record "sunset painting": substring-compatible, cosine 2/sqrt(6) beats jaccard 1/2.
    hits = r.structured(Anchor(entity="Melanie", property="activity", value="painting"))
    assert eps(index, hits) == [E2]
    cos = 2 / np.sqrt(6)
    assert hits[0].score == pytest.approx((0.25 + 0.22 + 0.18 * cos) / (0.25 + 0.22 + 0.18), abs=1e-5)


def test_entity_gate_exact_and_fuzzy(index):
    r = make(index)
    # Melanie has no favorite_food record: Caroline's exact-property record never matches.
    assert r.structured(Anchor(entity="Melanie", entity_type="person", property="favorite_food")) == []
    assert r.structured(Anchor(entity="Carol", entity_type="person", property="pet")) == []  # ratio 77 < 90
    exact = r.structured(Anchor(**PET))
    fuzzy = r.structured(Anchor(**{**PET, "entity": "Carolin"}))
    assert eps(index, exact) == eps(index, fuzzy) == [E4]
    assert exact[0].score == 1.0
    ratio = 2 * 7 / 15  # rapidfuzz ratio("carolin", "caroline")
    assert fuzzy[0].score == pytest.approx((0.25 * ratio + 0.08 + 0.22) / 0.55, abs=1e-5)


def test_type_gate(index):
    r = make(index)
    assert r.structured(Anchor(entity="Boston", entity_type="person", property="new_resident")) == []
    placed = r.structured(Anchor(entity="Boston", entity_type="place", property="new_resident"))
    untyped = r.structured(Anchor(entity="Boston", property="new_resident"))
    assert eps(index, placed) == eps(index, untyped) == [E5]
    assert placed[0].record_id == untyped[0].record_id == RID[("Boston", "new_resident", "Caroline")]


def test_exact_property_first(index):
    r = make(index)
    close = EMBEDDER.cos("property: favorite_food", "property: favorite_food_item")
    assert close >= RetrieveConfig().property_threshold  # semantically close enough on its own
    hits = r.structured(Anchor(entity="Caroline", entity_type="person", property="favorite_food"))
    assert eps(index, hits) == [E2]  # E6's favorite_food_item is ignored: an exact property exists

    # With no exact property for the entity the close one is used, scored by its cosine.
    c2 = EMBEDDER.cos("property: favorite_food_item_kind", "property: favorite_food_item")
    c3 = EMBEDDER.cos("property: favorite_food_item_kind", "property: favorite_food")
    assert c2 >= 0.78 > c3
    hits = r.structured(Anchor(entity="Caroline", entity_type="person", property="favorite_food_item_kind"))
    assert eps(index, hits) == [E6]
    assert hits[0].score == pytest.approx((0.25 + 0.08 + 0.22 * c2) / 0.55, abs=1e-5)


def test_generic_record_property_carrying_the_value(index):
    r = make(index)
    # No "hobby" record for Melanie; her generic "activity" record holding the value matches.
    hits = r.structured(Anchor(entity="Melanie", entity_type="person", property="hobby", value="violin"))
    assert eps(index, hits) == [E6]
    assert hits[0].record_id == RID[("Melanie", "activity", "violin practice")]


def test_min_score_drops_weak_matches(index):
    fuzzy = Anchor(**{**PET, "entity": "Carolin"})  # scores 0.9697
    assert eps(index, make(index, min_score=0.96).structured(fuzzy)) == [E4]
    assert make(index, min_score=0.98).structured(fuzzy) == []
    assert eps(index, make(index, min_score=0.98).structured(Anchor(**PET))) == [E4]  # 1.0 stays


# --------------------------------------------------------------------------- budgets and modes
def test_point_covered_stops_at_structured(index):
    row = make(index).retrieve(Q(), plan(hop("h1", **PET)))
    assert row.episode_ids == [E4]
    assert row.coverage == {"h1": True}
    (sel,) = row.selected
    assert (sel.episode_id, sel.hop_id, sel.route, sel.record_id, sel.score) == (
        E4, "h1", "structured", RID[("Caroline", "pet", "dog named Rex")], 1.0)


def test_point_not_covered_adds_fallback(index):
    row = make(index, coverage_score=0.99).retrieve(Q(), plan(hop("h1", **{**PET, "entity": "Carolin"})))
    assert row.coverage == {"h1": False}
    assert len(row.selected) > 1 and E4 in row.episode_ids
    assert row.selected[0].route == "structured" and row.selected[0].episode_id == E4
    for s in row.selected[1:]:
        assert s.route in ("lexical", "dense") and s.record_id == "" and s.hop_id == "h1"

    # No structured match at all: fallback only.
    row = make(index).retrieve(Q("Where did Caroline move for her job?"),
                               plan(hop("h1", entity="Caroline", entity_type="person", property="salary")))
    assert row.coverage == {"h1": False} and row.selected
    assert {s.route for s in row.selected} <= {"lexical", "dense"}
    assert row.selected[0].episode_id == E5  # "move"/"job" words are only there (BM25 ranks it first)


def test_stop_when_covered_false_adds_fallback(index):
    covered_only = make(index).retrieve(Q(), plan(hop("h1", **PET)))
    row = make(index, stop_when_covered=False).retrieve(Q(), plan(hop("h1", **PET)))
    assert row.coverage == {"h1": True}
    assert len(row.selected) > len(covered_only.selected) == 1
    assert row.selected[0].route == "structured"
    assert {s.route for s in row.selected[1:]} <= {"lexical", "dense"}


def test_all_matching_keeps_every_structured_match(index):
    point = make(index, point=ScopeBudget(structured_k=2)).retrieve(
        Q("What does Melanie do?"), plan(hop("h1", **ACTIVITY)))
    assert [s.episode_id for s in point.selected] == [E1, E2]  # structured_k=2, covered -> stop

    row = make(index, point=ScopeBudget(structured_k=2)).retrieve(
        Q("What activities does Melanie do?"), plan(hop("h1", **ACTIVITY), scope="all_matching"))
    structured = [s for s in row.selected if s.route == "structured"]
    assert sorted(s.episode_id for s in structured) == sorted([E1, E2, E3, E6])
    assert {s.record_id for s in structured} == {
        RID[("Melanie", "activity", v)] for v in
        ("hiking in the mountains", "sunset painting", "museum trip with kids", "violin practice")}
    assert row.scope == "all_matching"
    # Covered, yet an all_matching hop still adds the fallback candidates (never stops early).
    assert row.coverage == {"h1": True}
    assert {s.episode_id for s in row.selected if s.route in ("lexical", "dense")} == {E4, E5}


def test_fixed_k_truncates_each_hop(index):
    r = make(index, mode="fixed_k", fixed_k=2)
    hits, covered = r.hop_hits("What does Melanie do?", Anchor(**ACTIVITY), "point")
    assert covered and eps(index, hits) == [E1, E2]  # 4 structured matches, cut to 2
    hits, covered = r.hop_hits("What pet?", Anchor(**PET), "point")
    assert len(hits) == 2 and eps(index, hits)[0] == E4 and hits[1].route in ("lexical", "dense")

    row = r.retrieve(Q(), plan(hop("h1", **ACTIVITY), hop("h2", **PET)))
    assert 3 <= len(row.selected) <= 4
    for h in ("h1", "h2"):
        assert sum(s.hop_id == h for s in row.selected) <= 2


def test_dense_only_ignores_the_plan(index):
    r = make(index, mode="dense_only", fixed_k=3)
    a = r.retrieve(Q("Which dog did Caroline adopt?"), plan(hop("h1", **PET)))
    b = r.retrieve(Q("Which dog did Caroline adopt?"),
                   plan(hop("x", **ACTIVITY), hop("y", entity="Nobody", property="z")))
    assert len(a.selected) == 3
    assert all(s.route == "dense" and s.hop_id == "question" and s.record_id == "" for s in a.selected)
    assert [to_dict(s) for s in a.selected] == [to_dict(s) for s in b.selected]
    assert a.coverage == {} and a.buffer_text == b.buffer_text
    assert a.selected[0].episode_id == E4
    scores = [s.score for s in a.selected]
    assert scores == sorted(scores, reverse=True)


def test_merged_hops_keep_one_entry_per_episode(index):
    food = dict(entity="Caroline", entity_type="person", property="favorite_food")
    for hops in ([hop("h_food", **food), hop("h_paint", **PAINTING)],
                 [hop("h_paint", **PAINTING), hop("h_food", **food)]):
        row = make(index).retrieve(Q(), plan(*hops))
        assert row.coverage == {"h_food": True, "h_paint": True}
        assert [s.episode_id for s in row.selected] == [E2]
        # The best-scoring structured hit wins, whatever the hop order.
        assert (row.selected[0].hop_id, row.selected[0].score) == ("h_food", 1.0)
        assert row.selected[0].record_id == RID[("Caroline", "favorite_food", "sushi")]


def test_max_buffer_tokens_cuts_the_buffer(index):
    p = plan(hop("h1", **ACTIVITY), scope="all_matching")
    full = make(index).retrieve(Q("What does Melanie do?"), p)
    r = make(index)
    sizes = [r._tokens_of(pos(index, s.episode_id)) for s in full.selected]
    assert len(full.selected) >= 4
    cap = sizes[0] + sizes[1]
    cut = make(index, max_buffer_tokens=cap).retrieve(Q("What does Melanie do?"), p)
    assert 2 <= len(cut.selected) < len(full.selected)
    assert [s.episode_id for s in cut.selected][:2] == [s.episode_id for s in full.selected][:2]
    assert sum(r._tokens_of(pos(index, s.episode_id)) for s in cut.selected) <= cap
    assert cut.buffer_tokens < full.buffer_tokens
    # The first-ranked episode is always kept, even when it alone exceeds the cap.
    one = make(index, max_buffer_tokens=1).retrieve(Q("What does Melanie do?"), p)
    assert [s.episode_id for s in one.selected] == [full.selected[0].episode_id]


def test_max_episodes_caps_selection(index):
    p = plan(hop("h1", **ACTIVITY), scope="all_matching")
    row = make(index, max_episodes=2).retrieve(Q("What does Melanie do?"), p)
    assert len(row.selected) == 2


# --------------------------------------------------------------------------- buffer
EXPECTED_BUFFER = (
    "### Episode m1::session_1::episode_002 | session_1 | session date: 1:00 pm on 1 May, 2023\n"
    "[D1:3] Caroline: My favorite food is sushi.\n"
    "[D1:4] Melanie: Look at my new painting!\n"
    "    [image caption] a photo of a sunset painting over a lake\n"
    "    [image url] https://example.invalid/painting.jpg\n"
    "\n"
    "### Episode m1::session_2::episode_002 | session_2 | session date: 2:00 pm on 8 May, 2023\n"
    "[D2:2] Caroline: I adopted a dog named Rex.\n"
    "[D2:3] Melanie: Rex is a lovely name."
)


def test_buffer_renders_original_turns_in_conversation_order(index):
    row = make(index).retrieve(Q(), plan(hop("h1", **PET), hop("h2", **PAINTING)))
    # Rank order puts E4 (score 1.0) before E2 (0.95); the buffer is in conversation order.
    assert [s.episode_id for s in row.selected] == [E4, E2]
    assert row.episode_ids == [E2, E4]
    assert row.dia_ids == ["D1:3", "D1:4", "D2:2", "D2:3"]
    assert row.buffer_text == EXPECTED_BUFFER
    assert row.buffer_tokens == count_tokens(row.buffer_text) > 0
    assert (row.qid, row.memory_id, row.mode, row.scope, row.reasoning_type) == (
        "q1", MEM, "adaptive", "point", "direct")

    no_img = Retriever(index, VIEW, EMBEDDER, RetrieveConfig(**LEGACY), include_images=False).retrieve(
        Q(), plan(hop("h1", **PET), hop("h2", **PAINTING)))
    assert "[image caption]" not in no_img.buffer_text
    assert "[D1:4] Melanie: Look at my new painting!" in no_img.buffer_text
    assert no_img.buffer_tokens == count_tokens(no_img.buffer_text) < row.buffer_tokens


def test_empty_selection_gives_empty_buffer(index):
    row = make(index).retrieve(Q(), plan())
    assert row.selected == [] and row.buffer_text == "" and row.buffer_tokens == 0


def test_temporal_neighbors_are_added_within_the_session(index):
    row = make(index, temporal_neighbors=1).retrieve(Q(), plan(hop("h1", **PET), reasoning="temporal"))
    by_ep = {s.episode_id: s for s in row.selected}
    assert set(by_ep) == {E3, E4}  # E3 shares session_2; E5 (session_3) is not a neighbour
    assert by_ep[E3].route == "neighbor" and by_ep[E3].hop_id == "h1"


# --------------------------------------------------------------------------- persistence
def test_save_load_round_trip(index, tmp_path):
    index.save(tmp_path / "idx")
    loaded = MemoryIndex.load(tmp_path / "idx")
    assert [to_dict(e) for e in loaded.episodes] == [to_dict(e) for e in index.episodes]
    assert [to_dict(r) for r in loaded.records] == [to_dict(r) for r in index.records]
    assert np.array_equal(loaded.chunk_vecs, index.chunk_vecs)
    assert loaded.embedding_model == EMBEDDER.model_id
    cases = [
        ({}, plan(hop("h1", **PET))),
        ({"coverage_score": 0.99}, plan(hop("h1", **{**PET, "entity": "Carolin"}))),
        ({}, plan(hop("h1", **ACTIVITY), hop("h2", **PAINTING), scope="all_matching")),
        ({"mode": "fixed_k", "fixed_k": 2}, plan(hop("h1", **ACTIVITY))),
        ({"mode": "dense_only", "fixed_k": 3}, plan()),
    ]
    for cfg, p in cases:
        a = dataclasses.replace(make(index, **cfg).retrieve(Q(), p), seconds=0.0)
        b = dataclasses.replace(make(loaded, **cfg).retrieve(Q(), p), seconds=0.0)
        assert to_dict(a) == to_dict(b)
        assert a.selected
