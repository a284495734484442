"""Stage 04: the per-memory entity-property index (paper eq. 3).

For each memory it holds the normalized records, the observed property vocabulary (with
counts, for the planner), tokenized episode texts for BM25, dense embeddings of overlapping
episode chunks (the dense fallback) and of record fields (soft property/value matching).
It is persisted under ``04_index/<memory_id>/`` and reloaded by stage 06.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rank_bm25 import BM25Okapi

from common.core.schema import Episode, Record, from_dict, to_dict
from common.core.text import norm, tokens
from common.method.render import MemoryView, render_turns

# Record fields embedded for soft matching; entity_type and condition_property are closed
# vocabularies and match exactly.
EMBEDDED_FIELDS = ("entity", "property", "value", "condition_value")


# Version of the chunk text below; part of every index fingerprint so a change rebuilds.
CHUNK_FORMAT = 2  # 2: the authors' header (timestamp + theme), no episode id


def chunk_text(episode: Episode, turns: list[Any], include_images: bool = True) -> str:
    """One dense-fallback chunk as the authors' code embeds it (reference_notes §3.5 step 4).

    The header names the session date and the theme, never the episode id: an id carries the
    memory id, and a session shared by many LongMemEval haystacks (episodes rebased per memory
    by ``dedup``) must give byte-identical chunk texts so the embedding cache encodes it once.
    """
    theme = f"{episode.theme} ({episode.theme_type})" if episode.theme_type else episode.theme
    return (f"Episode timestamp: {episode.date_time or 'unknown'}\nTheme: {theme}\n"
            + render_turns(turns, include_images))


def field_text(name: str, value: str) -> str:
    return f"{name}: {norm(value)}" if value else ""


def chunk_windows(n_turns: int, size: int, stride: int) -> list[tuple[int, int]]:
    """Windows [i, j) of ``size`` turns every ``stride`` turns, the last reaching the end."""
    if n_turns <= size:
        return [(0, n_turns)]
    out, i = [], 0
    while True:
        out.append((i, min(i + size, n_turns)))
        if i + size >= n_turns:
            return out
        i += stride


@dataclass
class MemoryIndex:
    memory_id: str
    episodes: list[Episode]
    records: list[Record]
    vocabulary: dict[str, int]  # property -> number of records, most frequent first
    doc_tokens: list[list[str]]  # per episode, for BM25
    chunk_episode: list[int]  # chunk -> episode position
    chunk_vecs: np.ndarray
    field_vecs: dict[str, np.ndarray]  # field -> (n_records, dim); zero rows for empty fields
    embedding_model: str
    _bm25: Any = field(default=None, repr=False)

    @property
    def bm25(self) -> BM25Okapi:
        if self._bm25 is None:
            # rank_bm25 divides by the mean length; guard an all-empty corpus.
            docs = [d or ["_"] for d in self.doc_tokens]
            self._bm25 = BM25Okapi(docs)
        return self._bm25

    def episode_pos(self) -> dict[str, int]:
        return {e.episode_id: i for i, e in enumerate(self.episodes)}

    # ---- persistence
    def save(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        meta = {
            "memory_id": self.memory_id,
            "embedding_model": self.embedding_model,
            "episodes": [to_dict(e) for e in self.episodes],
            "records": [to_dict(r) for r in self.records],
            "vocabulary": self.vocabulary,
            "doc_tokens": self.doc_tokens,
            "chunk_episode": self.chunk_episode,
        }
        (directory / "index.json").write_text(json.dumps(meta, ensure_ascii=False), encoding="utf-8")
        arrays = {"chunks": self.chunk_vecs, **{f"field_{k}": v for k, v in self.field_vecs.items()}}
        np.savez_compressed(directory / "embeddings.npz", **arrays)  # type: ignore[arg-type]  # numpy stub: kwargs are arrays

    @classmethod
    def load(cls, directory: Path) -> "MemoryIndex":
        meta = json.loads((directory / "index.json").read_text(encoding="utf-8"))
        with np.load(directory / "embeddings.npz") as z:
            chunks = z["chunks"]
            fields = {k[len("field_"):]: z[k] for k in z.files if k.startswith("field_")}
        return cls(
            memory_id=meta["memory_id"],
            episodes=[from_dict(Episode, e) for e in meta["episodes"]],
            records=[from_dict(Record, r) for r in meta["records"]],
            vocabulary=meta["vocabulary"], doc_tokens=meta["doc_tokens"],
            chunk_episode=meta["chunk_episode"], chunk_vecs=chunks, field_vecs=fields,
            embedding_model=meta["embedding_model"],
        )


# Texts per encode call of an index build. A memory with more texts (a BEAM 10M chat: tens of
# thousands of chunks and record fields) is encoded in slices of this many, each slice's vectors
# written straight into the preallocated float32 output, so the build holds the output plus one
# slice, never the whole memory's matrix twice (the embedder's own copies are per slice). Every
# LoCoMo, LongMemEval and BEAM 100K-1M memory fits in one slice: one call, as before.
ENCODE_CHUNK = 16384


def _encode_all(embedder: Any, groups: list[list[str]], chunk: int = ENCODE_CHUNK) -> list[np.ndarray]:
    """Vectors of every group of texts (empty texts: zero rows, never match), encoded in calls of
    at most ``chunk`` texts (one call for any memory up to that size).

    Chunks and the four record fields of a memory go to the model together: each distinct text
    is embedded once whatever field or chunk it occurs in (across slices through the embedding
    cache), the cache is read once per slice, and the model gets one long list to batch by length
    instead of five short ones. The model is only loaded when some text is missing from the
    cache: its dimension comes from the first slice's vectors.
    """
    where = [(g, i) for g, texts in enumerate(groups) for i, t in enumerate(texts) if t]
    if not where:
        return [np.zeros((len(g), embedder.dim), dtype=np.float32) for g in groups]
    out: list[np.ndarray] = []
    for start in range(0, len(where), chunk):
        part = where[start:start + chunk]
        vecs = embedder.encode([groups[g][i] for g, i in part])
        if not out:  # the output, allocated once at its final size
            out = [np.zeros((len(g), int(vecs.shape[1])), dtype=np.float32) for g in groups]
        for (g, i), row in zip(part, vecs):
            out[g][i] = row
        del vecs
    return out


def index_texts(view: MemoryView, episodes: list[Episode], records: list[Record], chunk_turns: int = 4,
                chunk_stride: int = 3, include_images: bool = True) -> tuple[list[Episode], list[str], list[int],
                                                                              dict[str, list[str]]]:
    """What the index embeds: episodes in conversation order, chunk texts and their episode
    positions, and per embedded field one text per record ("" for an empty field)."""
    episodes = sorted(episodes, key=lambda e: view.position[e.dia_ids[0]])
    chunk_texts, chunk_episode = [], []
    for pos, ep in enumerate(episodes):
        turns = view.episode_turns(ep)
        for i, j in chunk_windows(len(turns), chunk_turns, chunk_stride):
            chunk_texts.append(chunk_text(ep, turns[i:j], include_images))
            chunk_episode.append(pos)
    fields = {f: [field_text(f, getattr(r, f)) for r in records] for f in EMBEDDED_FIELDS}
    return episodes, chunk_texts, chunk_episode, fields


def build_index(view: MemoryView, episodes: list[Episode], records: list[Record], embedder: Any,
                chunk_turns: int = 4, chunk_stride: int = 3, include_images: bool = True,
                encode_chunk: int = ENCODE_CHUNK) -> MemoryIndex:
    episodes, chunk_texts, chunk_episode, fields = index_texts(view, episodes, records, chunk_turns,
                                                               chunk_stride, include_images)
    vocab = Counter(r.property for r in records)
    doc_tokens = [tokens(view.episode_text(e, include_images)) for e in episodes]
    chunk_vecs, *field_blocks = _encode_all(embedder, [chunk_texts, *fields.values()], encode_chunk)
    return MemoryIndex(
        memory_id=view.memory_id, episodes=episodes, records=records,
        vocabulary=dict(sorted(vocab.items(), key=lambda kv: (-kv[1], kv[0]))),
        doc_tokens=doc_tokens, chunk_episode=chunk_episode, chunk_vecs=np.asarray(chunk_vecs, np.float32),
        field_vecs=dict(zip(fields, field_blocks)), embedding_model=embedder.model_id,
    )


def index_fingerprint(episodes: list[Episode], records: list[Record], settings: dict[str, Any]) -> str:
    """Hash of everything an index is built from; a stage-04 rerun skips unchanged memories."""
    h = hashlib.sha256()
    h.update(json.dumps(settings, sort_keys=True).encode())
    for e in episodes:
        h.update(json.dumps(to_dict(e), sort_keys=True).encode())
    for r in records:
        h.update(json.dumps(to_dict(r), sort_keys=True).encode())
    return h.hexdigest()[:16]
