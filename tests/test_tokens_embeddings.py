"""Offline token counting (common.core.tokens) and cached embeddings (common.core.embeddings)."""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry

from common.core import embeddings as emb
from common.core import tokens

# No model hub here: fail fast instead of retrying for a minute. None of the imports above reads these
# (the hub libraries are imported lazily, inside the functions that load a model), so setting them here is in time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent

SAMPLE = "Caroline went to the LGBTQ support group on 7 May 2023 and felt 'really empowered'."


# --------------------------------------------------------------------------------------------
# tokens
# --------------------------------------------------------------------------------------------


@pytest.fixture
def offline_tiktoken(tmp_path, monkeypatch):
    """Fresh tiktoken cache dir, no download possible, no encoding cached in memory."""
    cache = tmp_path / "tiktoken"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))

    def no_network(blobpath):
        raise AssertionError(f"tiktoken tried to download {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    saved = dict(tiktoken.registry.ENCODINGS)
    tiktoken.registry.ENCODINGS.clear()
    tokens.get_encoding.cache_clear()
    yield cache
    tokens.get_encoding.cache_clear()
    tiktoken.registry.ENCODINGS.clear()
    tiktoken.registry.ENCODINGS.update(saved)


def test_count_tokens_offline_matches_tiktoken(offline_tiktoken):
    n = tokens.count_tokens(SAMPLE)
    assert n > 0
    assert n == tokens.count_tokens(SAMPLE)  # stable
    ids = tiktoken.get_encoding("o200k_base").encode(SAMPLE)
    assert n == len(ids)
    assert tokens.get_encoding("o200k_base").decode(ids) == SAMPLE
    assert len(list(offline_tiktoken.iterdir())) == 1  # the seeded o200k_base file
    assert tokens.count_tokens("") == 0


def test_count_tokens_cl100k_and_special_markers(offline_tiktoken):
    assert tokens.count_tokens(SAMPLE, "cl100k_base") == len(
        tiktoken.get_encoding("cl100k_base").encode(SAMPLE))
    # A special-token marker inside user text is counted as text instead of raising.
    assert tokens.count_tokens("a <|endoftext|> b") > 3


def test_encoding_object_is_cached(offline_tiktoken):
    assert tokens.get_encoding("o200k_base") is tokens.get_encoding("o200k_base")


def test_source_table_matches_installed_tiktoken(monkeypatch):
    import tiktoken_ext.openai_public as public

    class Captured(Exception):
        pass

    def capture(url, expected_hash=None):
        raise Captured(url, expected_hash)

    monkeypatch.setattr(public, "load_tiktoken_bpe", capture)
    for name, (url, sha) in tokens._BPE_SOURCES.items():
        with pytest.raises(Captured) as info:
            getattr(public, name)()
        assert info.value.args == (url, sha)


def test_corrupt_cache_file_is_replaced(offline_tiktoken):
    path = tokens.seed_tiktoken_cache("o200k_base")
    path.write_bytes(b"garbage")
    assert tokens.seed_tiktoken_cache("o200k_base") == path
    assert tokens.count_tokens(SAMPLE) > 0


def test_hash_mismatch_has_clear_message(offline_tiktoken, monkeypatch):
    url, _ = tokens._BPE_SOURCES["o200k_base"]
    monkeypatch.setitem(tokens._BPE_SOURCES, "o200k_base", (url, "0" * 64))
    with pytest.raises(RuntimeError, match="bpe-openai.*sha256"):
        tokens.seed_tiktoken_cache("o200k_base")


def test_default_cache_dir_is_under_repo(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "placeholder")  # so monkeypatch restores it
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR")
    assert tokens.tiktoken_cache_dir() == ROOT / ".cache" / "tiktoken"
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(ROOT / ".cache" / "tiktoken")


def test_empty_cache_dir_leaves_tiktoken_alone(monkeypatch):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert tokens.seed_tiktoken_cache("o200k_base") is None


# --------------------------------------------------------------------------------------------
# embeddings: fake backends
# --------------------------------------------------------------------------------------------


class CountingBackend:
    """Deterministic fake: a vector from the text's hash; counts texts it was asked for."""

    model_id = "fake:counting"
    dim = 8

    def __init__(self):
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()

    def encode(self, texts):
        with self.lock:
            self.calls.append(list(texts))
        rows = []
        for t in texts:
            rng = np.random.default_rng(int(emb.text_hash(t)[:8], 16))
            rows.append(rng.normal(size=self.dim) * 5)  # not normalized on purpose
        return np.asarray(rows, dtype=np.float32)

    @property
    def n_texts(self):
        return sum(len(c) for c in self.calls)


def test_cache_hit_skips_the_model(tmp_path):
    db = tmp_path / "emb.sqlite"
    backend = CountingBackend()
    e = emb.Embedder(backend, cache_path=str(db))
    texts = ["alpha", "beta", "gamma", "beta"]
    first = e.encode(texts)
    assert first.dtype == np.float32 and first.shape == (4, 8)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(first[1], first[3])
    assert backend.n_texts == 3  # duplicate encoded once

    second = e.encode(texts)
    assert backend.n_texts == 3  # nothing recomputed
    np.testing.assert_array_equal(first, second)

    mixed = e.encode(["delta", "alpha", "gamma"])
    assert backend.calls[-1] == ["delta"]
    np.testing.assert_array_equal(mixed[1], first[0])
    np.testing.assert_array_equal(mixed[2], first[2])
    e.close()

    # A new process (new Embedder, same file) still hits the cache.
    backend2 = CountingBackend()
    e2 = emb.Embedder(backend2, cache_path=str(db))
    np.testing.assert_array_equal(e2.encode(texts), first)
    assert backend2.n_texts == 0
    e2.close()


def test_cache_namespaces_are_separate(tmp_path):
    db = str(tmp_path / "emb.sqlite")
    a, b = CountingBackend(), CountingBackend()
    b.model_id = "fake:other"
    emb.Embedder(a, cache_path=db).encode(["x"])
    emb.Embedder(b, cache_path=db).encode(["x"])
    assert a.n_texts == 1 and b.n_texts == 1


def test_no_cache_recomputes(tmp_path):
    backend = CountingBackend()
    e = emb.Embedder(backend, cache_path="")
    e.encode(["x", "y"])
    e.encode(["x", "y"])
    assert backend.n_texts == 4


def test_cache_exact_text_and_order(tmp_path):
    backend = CountingBackend()
    e = emb.Embedder(backend, cache_path=str(tmp_path / "c.sqlite"))
    texts = [f"text {i}" for i in range(1200)] + ["text 5 ", "Text 5"]  # exact-text keys
    out = e.encode(texts)
    assert backend.n_texts == len(texts)
    rev = e.encode(texts[::-1])
    assert backend.n_texts == len(texts)
    np.testing.assert_array_equal(rev, out[::-1])


def test_cache_thread_safe(tmp_path):
    backend = CountingBackend()
    e = emb.Embedder(backend, cache_path=str(tmp_path / "t.sqlite"))
    errors: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def work(k):
        try:
            results[k] = e.encode([f"shared {i}" for i in range(50)] + [f"own {k}"])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for k in range(1, 6):
        np.testing.assert_array_equal(results[k][:50], results[0][:50])
    assert e.cache.count(backend.model_id) == 56
    e.close()


def test_openai_backend_with_patched_embed_texts(tmp_path, monkeypatch):
    seen: list[dict] = []

    def fake_embed_texts(texts, *, model, base_url, timeout=120.0):
        seen.append({"texts": list(texts), "model": model, "base_url": base_url})
        return [[float(len(t)), 1.0, 2.0] for t in texts]

    try:
        import common.core.llm as llm_module
        monkeypatch.setattr(llm_module, "embed_texts", fake_embed_texts)
    except ImportError:  # common.core.llm not written yet: stand a module in for it
        import common
        fake = SimpleNamespace(embed_texts=fake_embed_texts)
        monkeypatch.setitem(sys.modules, "common.core.llm", fake)
        monkeypatch.setattr(common, "llm", fake, raising=False)

    cfg = SimpleNamespace(backend="openai", model="text-embedding-3-small", device="cpu",
                          batch_size=2, max_length=8192, cache_path=str(tmp_path / "o.sqlite"),
                          base_url="http://127.0.0.1:9/v1")
    e = emb.Embedder.from_config(cfg)
    assert "openai" in e.model_id and "text-embedding-3-small" in e.model_id
    out = e.encode(["a", "bbb", "cc"])
    assert out.shape == (3, 3) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-6)
    expected = np.array([1.0, 1.0, 2.0]) / np.sqrt(6.0)
    np.testing.assert_allclose(out[0], expected, rtol=1e-6)
    assert [len(s["texts"]) for s in seen] == [2, 1]  # batched by batch_size
    assert all(s["model"] == "text-embedding-3-small" for s in seen)
    assert all(s["base_url"] == "http://127.0.0.1:9/v1" for s in seen)
    assert e.dim == 3
    n_calls = len(seen)
    np.testing.assert_array_equal(e.encode(["cc", "a"]), out[[2, 0]])
    assert len(seen) == n_calls
    e.close()


def test_unknown_backend_rejected():
    with pytest.raises(ValueError, match="unknown embedding backend"):
        emb.Embedder.from_config(SimpleNamespace(backend="nope", model="m", device="cpu",
                                                 batch_size=1, max_length=8, cache_path="",
                                                 base_url=None))


def test_model_id_names_model_backend_and_length():
    def cfg(model, max_length=256):
        return SimpleNamespace(backend="sentence-transformers", model=model, device="cpu",
                               batch_size=32, max_length=max_length, cache_path="", base_url=None)

    a = emb.Embedder.from_config(cfg("all-MiniLM-L6-v2")).model_id
    b = emb.Embedder.from_config(cfg("sentence-transformers/all-MiniLM-L6-v2")).model_id
    c = emb.Embedder.from_config(cfg("all-MiniLM-L6-v2", 128)).model_id
    d = emb.Embedder.from_config(cfg("Qwen/Qwen3-Embedding-8B")).model_id
    assert a == b
    assert len({a, c, d}) == 3
    assert "sentence-transformers" in a and "256" in a and "Qwen/Qwen3-Embedding-8B" in d
    # Other names and local paths are passed through untouched.
    assert emb.resolve_model_path("Qwen/Qwen3-Embedding-8B") == "Qwen/Qwen3-Embedding-8B"
    assert emb.resolve_model_path("/some/local/dir") == "/some/local/dir"
    assert Path(emb.resolve_model_path("all-MiniLM-L6-v2"), "modules.json").is_file()


# --------------------------------------------------------------------------------------------
# embeddings: the real packaged MiniLM (loaded once per module)
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm():
    cfg = SimpleNamespace(backend="sentence-transformers", model="all-MiniLM-L6-v2",
                          device="cpu", batch_size=64, max_length=256, cache_path="",
                          base_url=None)
    t0 = time.perf_counter()
    e = emb.Embedder.from_config(cfg)
    dim = e.dim  # forces the load
    load_s = time.perf_counter() - t0
    print(f"\n[minilm] load (incl. import) {load_s:.2f}s, dim {dim}")
    return e


def test_minilm_dim_and_unit_norm(minilm):
    assert minilm.dim == 384
    out = minilm.encode(["hello world", "", "a much longer sentence " * 100])
    assert out.shape == (3, 384) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)


def test_minilm_semantics(minilm):
    dog, puppy, stocks = minilm.encode(
        ["I adopted a dog", "I got a new puppy", "The stock market fell"])
    assert float(dog @ puppy) > float(dog @ stocks) + 0.2


def test_minilm_shared_model_and_cache(minilm, tmp_path):
    cfg = SimpleNamespace(backend="sentence-transformers",
                          model="sentence-transformers/all-MiniLM-L6-v2", device="cpu",
                          batch_size=16, max_length=256, cache_path=str(tmp_path / "m.sqlite"),
                          base_url=None)
    e = emb.Embedder.from_config(cfg)
    assert e.model_id == minilm.model_id
    # Same (model, device) key -> the already loaded object.
    assert emb.load_sentence_transformer("all-MiniLM-L6-v2", "cpu") is \
        emb.load_sentence_transformer("sentence-transformers/all-MiniLM-L6-v2", "cpu")

    texts = [f"turn {i}: we talked about hiking and painting" for i in range(40)]
    calls = []
    real_encode = e.backend.encode
    e.backend.encode = lambda ts: (calls.append(len(ts)), real_encode(ts))[1]
    first = e.encode(texts)
    second = e.encode(texts)
    assert calls == [40]
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, minilm.encode(texts), atol=1e-5)
    e.close()
