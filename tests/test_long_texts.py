"""Texts longer than the embedding model's limit (common/core/long_texts.py): counted by the embedder,
in every tally current where they were asked for (a stage, a memory, a search, the gateway's
requests), and under ``embedding.long_texts: windows`` embedded whole as the weighted mean of their
windows. The limit is the real packaged MiniLM's (its tokenizer.json, 256 word pieces); only one test
loads its weights."""
from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest

from common.core import embeddings as emb
from common.core import fingerprint, long_texts
from common.core.config import ConfigError, load_config
from common.systems import identity, outcomes
from tests.conftest import REAL_LOCOMO

SHORT = "Caroline went to the LGBTQ support group on 7 May 2023."
# A session-sized text: about 600 words, far over 256 word pieces; its second half is about painting.
HIKING = " ".join(f"Melanie: on day {i} we hiked the ridge trail above the lake and camped by the pines."
                  for i in range(20))
PAINTING = " ".join(f"Caroline: in week {i} I painted a watercolour sunrise with cadmium yellow and ultramarine."
                    for i in range(20))
LONG = HIKING + " " + PAINTING


@pytest.fixture(scope="module")
def limit():
    return long_texts.TokenLimit.from_dir(emb.resolve_model_path("all-MiniLM-L6-v2"), 256)


class HashBackend:
    """Vectors from the text's hash (no model loaded), the packaged MiniLM's real tokenizer limit."""

    model_id = "hash-backend"
    dim = 16

    def __init__(self, limit: long_texts.TokenLimit) -> None:
        self.limit, self.seen = limit, []
        self.lock = threading.Lock()

    def token_limit(self):
        return self.limit

    def encode(self, texts):
        with self.lock:
            self.seen.extend(texts)
        return np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=self.dim) for t in texts])


def test_the_limit_is_the_models_and_a_session_is_over_it(limit):
    assert limit.limit == 256 and limit.specials == 2 and limit.window == 254
    assert not limit.over(SHORT) and limit.over(LONG) and limit.pieces(LONG) > 600
    if REAL_LOCOMO.exists():  # the audit's count: every LoCoMo session is longer than 256 word pieces
        data = json.loads(REAL_LOCOMO.read_text(encoding="utf-8"))
        sessions = ["\n".join(f"{t['speaker']}: {t['text']}" for t in v) for c in data
                    for k, v in c["conversation"].items() if k.startswith("session_") and isinstance(v, list)]
        assert len(sessions) == 272 and sum(limit.over(s) for s in sessions) == 272


def test_windows_cover_the_text_at_word_boundaries_each_within_the_limit(limit):
    windows = limit.windows(LONG)
    assert len(windows) >= 3 and sum(n for _, n in windows) == limit.pieces(LONG) - limit.specials
    assert " ".join(w for w, _ in windows).split() == LONG.split()  # nothing lost, nothing repeated
    for text, n in windows:
        assert limit.pieces(text) == n + 2 <= 256  # each window is read whole by the model
        assert LONG.find(text) >= 0 and (LONG.find(text) == 0 or LONG[LONG.find(text) - 1] in " .:")


def test_windows_mode_embeds_a_long_text_as_the_weighted_mean_of_its_windows(limit):
    backend = HashBackend(limit)
    e = emb.Embedder(backend, "", "windows")
    short, whole = e.encode([SHORT, LONG])
    parts = limit.windows(LONG)
    assert backend.seen == [SHORT] + [w for w, _ in parts]  # the long text itself never reaches the model
    vecs = emb._l2_normalize(backend.encode([w for w, _ in parts]))
    expected = (vecs * np.array([n for _, n in parts], dtype=np.float32)[:, None]).sum(0)
    np.testing.assert_allclose(whole, expected / np.linalg.norm(expected), rtol=1e-5, atol=1e-6)
    plain = emb.Embedder(HashBackend(limit), "", "truncate").encode([SHORT, LONG])
    np.testing.assert_allclose(short, plain[0], rtol=1e-6)  # a text within the limit: the same vector
    assert e.model_id == "hash-backend:windows" and emb.Embedder(backend).model_id == "hash-backend"
    assert e.stats.as_dict()["over_limit"] == 1 and e.stats.windowed == 1 and e.stats.truncated == 0


class OneGroupBackend(HashBackend):
    """A backend that lets every text share one pass (``alone_groups``): what windows must override."""

    def alone_groups(self, texts):
        return [list(range(len(texts)))]


def test_embedded_alone_a_long_text_under_windows_is_a_call_of_its_own_windows(limit):
    backend = OneGroupBackend(limit)
    e = emb.Embedder(backend, "", "windows")
    calls = []
    backend.encode = lambda texts, inner=backend.encode: calls.append(list(texts)) or inner(texts)
    e.encode_alone([SHORT, LONG, "another short text"])
    # The short texts share their pass; the long one's windows go alone, so its mean never
    # depends on which short texts it was asked with.
    assert calls == [[SHORT, "another short text"], [w for w, _ in limit.windows(LONG)]]
    assert e.stats.encode_calls == 2


def test_texts_over_the_limit_are_counted_in_every_current_tally_cached_or_not(limit, tmp_path):
    e = emb.Embedder(HashBackend(limit), tmp_path / "c.sqlite")
    e.encode([LONG])  # now cached
    stage = long_texts.Tally()
    with long_texts.tallying(stage), outcomes.active(outcomes.Account()) as memory:
        e.encode([SHORT, LONG, LONG, LONG + " again"])
    assert stage.count == memory.long.count == 2  # distinct texts; the cached one counts too
    assert memory.outcome()["long_texts"] == 2 and memory.search_outcome() == {"long_texts": 2}
    assert e.stats.over_limit == e.stats.truncated == 2
    e.encode([LONG])  # outside every tally: the embedder's own count only
    assert stage.count == 2


def test_the_gateway_counts_a_systems_long_texts_in_the_memorys_account(limit, tmp_path):
    import openai

    from common.systems.gateway import Gateway

    embedder = emb.Embedder(HashBackend(limit), "")
    with Gateway(object(), lambda: embedder, system="demo") as gw, \
            outcomes.active(outcomes.Account()) as memory:
        from common.systems.base import Spent

        with gw.session(Spent()) as s:
            sdk = openai.OpenAI(base_url=s.base_url, api_key=s.api_key, max_retries=0)
            sdk.embeddings.create(model="whatever", input=[SHORT, LONG])
            sdk.embeddings.create(model="whatever", input=[LONG])
        assert gw.summary()["long_texts"] == 1
    assert memory.outcome()["long_texts"] == 1


def test_long_texts_is_in_the_fingerprint_only_when_windows_and_needs_the_models_tokenizer():
    base = load_config(["configs/locomo.yaml"])
    windows = load_config(["configs/locomo.yaml"], ["embedding.long_texts=windows"])
    assert "long_texts" not in fingerprint.run_components(base, "sha")["method"]["embedding"]
    assert fingerprint.run_components(windows, "sha")["method"]["embedding"]["long_texts"] == "windows"
    with pytest.raises(ConfigError, match="embedding.long_texts: windows needs the sentence-transformers"):
        load_config(["configs/locomo.yaml"], ["embedding.long_texts=windows", "embedding.backend=openai"])
    with pytest.raises(ConfigError, match="embedding.long_texts"):
        load_config(["configs/locomo.yaml"], ["embedding.long_texts=mean"])
    openai_backend = emb.Embedder.from_config(SimpleNamespace(backend="openai", model="m", cache_path=""))
    assert openai_backend.over_limit([LONG]) == []  # an endpoint's own limit: not known, not counted
    assert identity.embedding_used(windows)["label"] == "all-MiniLM-L6-v2 (256 word pieces, longer texts windowed)"


def test_metrics_embedding_block_adds_each_stages_counts(tmp_path):
    run = tmp_path / "run"
    (run / "06_retrieve" / "memory" / "m1").mkdir(parents=True)
    (run / "04_index.jsonl").write_text(json.dumps({"memory_id": "m1", "long_texts": 7}) + "\n", encoding="utf-8")
    (run / "06_retrieve" / "memory" / "m1" / "ingested.json").write_text(json.dumps(
        {"memory_id": "m1", "outcome": {"items": 3, "errors": {}, "long_texts": 5}}), encoding="utf-8")
    (run / "06_retrieve.jsonl").write_text(json.dumps(
        {"qid": "m1:q1", "memory_id": "m1", "method_info": {"evidence": [{}], "outcome": {"long_texts": 1}},
         "buffer_text": "x", "buffer_tokens": 1}) + "\n", encoding="utf-8")
    block = identity.embedding_block(run, load_config(["configs/locomo.yaml"]))
    assert block["over_limit"] == {"04_index": 7, "06_retrieve_ingest": 5, "06_retrieve": 1}
    assert block["over_limit_total"] == 13 and block["long_texts"] == "truncate" and block["max_length"] == 256


# On the worker that already loaded the model for tests/test_tokens_embeddings.py (one load per process).
@pytest.mark.xdist_group("tests.test_tokens_embeddings")
def test_the_real_minilm_windows_keep_what_truncation_drops():
    """The real model: a session whose second half is about painting. Truncated, it is embedded from
    its hiking half only; as windows, it is as close to painting as to hiking."""
    cfg = SimpleNamespace(backend="sentence-transformers", model="all-MiniLM-L6-v2", device="cpu", batch_size=64,
                          max_length=256, cache_path="")
    cut = emb.Embedder.from_config(cfg)
    whole = emb.Embedder.from_config(SimpleNamespace(**vars(cfg), long_texts="windows"))
    painting, hiking = cut.encode(["I painted a watercolour sunrise", "we hiked the ridge trail and camped"])
    truncated, windowed = cut.encode([LONG])[0], whole.encode([LONG])[0]
    assert float(truncated @ painting) < float(windowed @ painting) - 0.1
    assert float(windowed @ painting) > 0.5 * float(windowed @ hiking)
    assert cut.stats.truncated == 1 and whole.stats.windowed == 1


def test_the_onnx_runtime_reads_the_same_limit_without_exporting(tmp_path):
    backend = emb.OnnxBackend("all-MiniLM-L6-v2", tmp_path / "onnx")
    got = backend.token_limit()
    assert got is not None and got.limit == 256 and got.over(LONG) and not list(tmp_path.glob("onnx/*"))
