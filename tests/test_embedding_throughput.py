"""Issue 15 section 2: the index build sends each distinct text to the model once, in one call per
memory, never re-encodes or even loads the model for cached vectors, and reports its texts/s;
the optional ONNX Runtime gives the torch vectors to float precision."""
from __future__ import annotations

import dataclasses
import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

from common.core import embeddings as emb
from common.core import fingerprint
from common.core.config import load_config
from common.core.schema import ExtractRow
from common.method.dedup import rebase_episode, rebase_records
from common.method.index import EMBEDDED_FIELDS, build_index, chunk_text, index_texts
from common.method.render import MemoryView
from tests.test_retrieve import EPISODES, RECORDS, SESSIONS, VIEW
from tests.test_tokens_embeddings import CountingBackend


class NoModelBackend(CountingBackend):
    """A backend whose model must not be loaded: asking its dimension fails the test."""

    @property
    def dim(self):  # type: ignore[override]
        raise AssertionError("the model was loaded although every vector is cached")


def test_index_build_is_one_encode_call_with_each_distinct_text_once(tmp_path):
    backend = CountingBackend()
    e = emb.Embedder(backend, cache_path=str(tmp_path / "e.sqlite"))
    idx = build_index(VIEW, EPISODES, RECORDS, e)
    _, chunks, _, fields = index_texts(VIEW, EPISODES, RECORDS)
    wanted = {t for t in [*chunks, *(t for f in fields.values() for t in f)] if t}
    assert len(backend.calls) == 1  # chunks and the four fields together, not five calls
    assert sorted(backend.calls[0]) == sorted(wanted)  # every distinct text exactly once
    # e.g. "entity: caroline" occurs in 5 records but is embedded once
    assert sum(t == "entity: caroline" for r in [fields["entity"]] for t in r) > 1
    assert e.stats.encoded == len(wanted) and e.stats.encode_calls == 1
    assert e.stats.requested == len([t for t in [*chunks, *(t for f in fields.values() for t in f)] if t])
    # rows line up with their texts: identical texts share a vector, empty fields are zero rows
    ent = fields["entity"]
    i, j = [k for k, t in enumerate(ent) if t == "entity: caroline"][:2]
    np.testing.assert_array_equal(idx.field_vecs["entity"][i], idx.field_vecs["entity"][j])
    empty = [k for k, t in enumerate(fields["condition_value"]) if not t]
    assert empty and not idx.field_vecs["condition_value"][empty].any()
    assert idx.chunk_vecs.shape == (len(chunks), CountingBackend.dim)


def test_rebuild_from_the_cache_neither_encodes_nor_loads_the_model(tmp_path):
    db = str(tmp_path / "e.sqlite")
    first = build_index(VIEW, EPISODES, RECORDS, emb.Embedder(CountingBackend(), cache_path=db))
    backend = NoModelBackend()
    e = emb.Embedder(backend, cache_path=db)
    again = build_index(VIEW, EPISODES, RECORDS, e)
    assert backend.calls == [] and e.stats.encoded == 0 and e.stats.cache_hits > 0
    np.testing.assert_array_equal(first.chunk_vecs, again.chunk_vecs)
    for f in EMBEDDED_FIELDS:
        np.testing.assert_array_equal(first.field_vecs[f], again.field_vecs[f])


def test_a_session_shared_by_two_memories_is_embedded_once(tmp_path):
    """LongMemEval haystacks share sessions; dedup rebases their episodes onto each memory. The
    chunk texts must not carry the memory (the old header held the episode id, hence the memory
    id, so every haystack re-embedded every shared session): the second memory's index is built
    from the cache alone, and its vectors are the first's."""
    other = "m2"
    view2 = MemoryView(other, [dataclasses.replace(s, memory_id=other) for s in SESSIONS])
    eps2 = [rebase_episode(e, other) for e in EPISODES]
    recs2 = [r for old, new in zip(EPISODES, eps2) for r in rebase_records(
        ExtractRow(old.episode_id, old.memory_id, "episode", [x for x in RECORDS if x.episode_id == old.episode_id]),
        new).records]
    assert len(recs2) == len(RECORDS)
    assert {e.episode_id for e in eps2}.isdisjoint(e.episode_id for e in EPISODES)  # really other ids
    db = str(tmp_path / "e.sqlite")
    first = build_index(VIEW, EPISODES, RECORDS, emb.Embedder(CountingBackend(), cache_path=db))
    backend = NoModelBackend()
    e = emb.Embedder(backend, cache_path=db)
    second = build_index(view2, eps2, recs2, e)
    assert backend.calls == [] and e.stats.encoded == 0 and e.stats.cache_hits == e.stats.distinct > 0
    np.testing.assert_array_equal(first.chunk_vecs, second.chunk_vecs)
    assert second.memory_id == other and {x.memory_id for x in second.episodes} == {other}


def test_chunk_text_is_the_authors_header_without_ids():
    ep = EPISODES[0]
    text = chunk_text(ep, VIEW.episode_turns(ep)[:1])
    head, theme, first = text.split("\n")[:3]
    assert head == f"Episode timestamp: {ep.date_time}"
    assert theme == f"Theme: {ep.theme} ({ep.theme_type})"
    assert first.startswith(f"[{ep.dia_ids[0]}] ")
    assert ep.memory_id not in text and ep.episode_id not in text


def test_index_stage_reports_texts_per_second():
    s = emb.EmbeddingStats(requested=10, distinct=8, cache_hits=2, encoded=6, encode_calls=1, encode_seconds=2.0,
                           encode_cpu_seconds=3.0)
    assert s.as_dict()["texts_per_second"] == 3.0 and s.as_dict()["texts_per_cpu_second"] == 2.0
    assert emb.EmbeddingStats().as_dict()["texts_per_second"] is None


def test_runtime_torch_keeps_old_fingerprints_onnx_changes_them():
    cfg = load_config(["configs/locomo.yaml"])
    comps = fingerprint.run_components(cfg, "sha")
    assert "runtime" not in comps["method"]["embedding"]
    onnx = load_config(["configs/locomo.yaml"], ["embedding.runtime=onnx"])
    assert fingerprint.run_components(onnx, "sha")["method"]["embedding"]["runtime"] == "onnx"
    assert fingerprint.short(fingerprint.run_components(onnx, "sha")) != fingerprint.short(comps)
    with pytest.raises(Exception, match="runtime"):
        load_config(["configs/locomo.yaml"], ["embedding.runtime=tensorrt"])


def test_onnx_rejects_a_model_it_would_get_wrong(tmp_path):
    model = tmp_path / "m"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True,
                                                                 "pooling_mode_mean_tokens": False}))
    from common.core import onnx_embeddings

    with pytest.raises(ValueError, match="mean pooling only"):
        onnx_embeddings.check_pipeline(model)
    backend = emb.OnnxBackend(str(model), tmp_path / "onnx")
    with pytest.raises(ValueError, match="mean pooling only"):
        backend.encode(["x"])


TEXTS = ["I adopted a dog", "I got a new puppy", "The stock market fell sharply today",
         "### Episode m::s::episode_001 | s | session date: 1:56 pm on 8 May, 2023\nTheme: pets\n"
         + "[D1:1] Caroline: " + "we talked about hiking and painting for a long while " * 40]


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    return tmp_path_factory.mktemp("onnx")


def test_onnx_runtime_gives_the_torch_vectors(onnx_dir):
    torch_vecs = emb.SentenceTransformerBackend("all-MiniLM-L6-v2", batch_size=2).encode(TEXTS)
    backend = emb.OnnxBackend("all-MiniLM-L6-v2", onnx_dir, batch_size=3)
    vecs = backend.encode(TEXTS)  # exports on first use, offline, from the packaged weights
    assert backend.onnx_file.exists() and backend.dim == 384
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, rtol=1e-5)
    assert float(np.min(np.sum(vecs * torch_vecs, axis=1))) > 0.9999  # same model, same truncation
    # a second backend reuses the export; the namespace names the runtime
    again = emb.OnnxBackend("sentence-transformers/all-MiniLM-L6-v2", onnx_dir)
    np.testing.assert_allclose(again.encode(TEXTS[:2]), vecs[:2], atol=1e-5)
    assert again.model_id.endswith(":onnx") and again.model_id != emb.SentenceTransformerBackend(
        "all-MiniLM-L6-v2").model_id


def test_onnx_int8_is_close_and_has_its_own_namespace(onnx_dir):
    fp32 = emb.OnnxBackend("all-MiniLM-L6-v2", onnx_dir).encode(TEXTS)
    q = emb.OnnxBackend("all-MiniLM-L6-v2", onnx_dir, quantized=True)
    vecs = q.encode(TEXTS)
    assert q.onnx_file.name.endswith(".int8.onnx") and q.model_id.endswith(":onnx-int8")
    # dynamic int8 on every MatMul is lossy for MiniLM (measured 0.92-0.96 on these texts)
    assert float(np.min(np.sum(vecs * fp32, axis=1))) > 0.85
    dog, puppy, stocks = vecs[:3]
    assert float(dog @ puppy) > float(dog @ stocks) + 0.2


def test_embedder_from_config_picks_the_runtime(onnx_dir, tmp_path):
    cache = tmp_path / "c" / "e.sqlite"
    cfg = SimpleNamespace(backend="sentence-transformers", model="all-MiniLM-L6-v2", device="cpu", batch_size=8,
                          max_length=256, cache_path=str(cache), base_url=None, runtime="onnx")
    e = emb.Embedder.from_config(cfg)
    assert isinstance(e.backend, emb.OnnxBackend) and e.backend.onnx_file.parent == cache.parent / "onnx"
    shutil.copy(emb.OnnxBackend("all-MiniLM-L6-v2", onnx_dir).onnx_file, e.backend.onnx_file.parent.mkdir(
        parents=True) or e.backend.onnx_file)
    assert e.encode(TEXTS[:2]).shape == (2, 384) and e.stats.encoded == 2
    torch_cfg = dataclasses.replace(load_config(["configs/locomo.yaml"]).embedding, cache_path="")
    assert isinstance(emb.Embedder.from_config(torch_cfg).backend, emb.SentenceTransformerBackend)


def test_onnx_becomes_default_only_if_much_faster_and_retrieval_unchanged():
    from bench.embedding_speed import adopt, speedups

    torch_b = {"texts_per_second": 30.0, "texts_per_cpu_second": 20.0}
    fast = speedups(torch_b, {"texts_per_second": 60.0, "texts_per_cpu_second": 31.0})
    assert fast == {"texts_per_second": 2.0, "texts_per_cpu_second": 1.55}
    assert adopt(fast, 199, 199)
    assert not adopt(fast, 198, 199)  # one question's episodes changed
    slow = speedups(torch_b, {"texts_per_second": 60.0, "texts_per_cpu_second": 25.0})
    assert not adopt(slow, 199, 199)  # faster on the wall clock only: the neighbours were quiet
    assert not adopt(speedups(torch_b, {}), 199, 199)
