"""Texts longer than the embedding model's limit: counted, and embedded whole when asked.

A sentence-transformers model reads at most ``limit`` word pieces of a text (all-MiniLM-L6-v2 at the
harness's ``embedding.max_length`` of 256, the special tokens included) and silently drops the rest:
a LoCoMo session (median 465 words) is embedded from its first part only. ``embedding.long_texts``
says what happens to such a text:

* ``truncate`` (the default, what sentence-transformers does): its first ``limit`` word pieces;
* ``windows``: the text cut into consecutive windows of at most ``limit`` word pieces (specials
  included), each cut at a word boundary, each window embedded as a text of its own, and the
  text's vector the MEAN of its windows' unit vectors weighted by their word pieces (then made unit
  length again). The mean, not the max: it is what sentence-transformers' own mean pooling does
  within a window, so a text that fits in one window keeps exactly its vector, and a text of two
  halves lies between them, as a reader of the whole text would place it.

Either way the harness counts the texts over the limit: ``Tally`` is the count a stage, a memory's
ingestion or one search keeps (distinct texts, by their hash), made current with ``tallying`` (a
context variable, so the embedder in ``common.core.embeddings`` reports to whoever asked for the
vectors, whichever thread the gateway or a system uses).

The limit comes from the model's own tokenizer (``tokenizer.json``); an ``/v1/embeddings`` server
applies its own limit, which the harness cannot read: its texts are not counted.
"""
from __future__ import annotations

import contextvars
import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
from tokenizers import Tokenizer

MODES = ("truncate", "windows")


class TokenLimit:
    """A model's limit in word pieces and the tokenizer that counts them (truncation and padding off)."""

    def __init__(self, tokenizer: Tokenizer, limit: int) -> None:
        self.tokenizer = tokenizer
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.limit = int(limit)
        self.specials = len(self.tokenizer.encode("").ids)  # [CLS] and [SEP] for a BERT model
        self.window = max(1, self.limit - self.specials)
        self._lock = threading.Lock()  # a Rust tokenizer is shared by the threads of a stage

    @classmethod
    def copy_of(cls, tokenizer: Tokenizer, limit: int) -> "TokenLimit":
        """A limit over a copy of a loaded model's tokenizer (whose truncation stays the model's)."""
        return cls(Tokenizer.from_str(tokenizer.to_str()), limit)

    @classmethod
    def from_dir(cls, model_dir: Path, max_length: int) -> Optional["TokenLimit"]:
        """The limit of a local sentence-transformers folder: ``max_length`` capped at the model's
        ``max_position_embeddings`` (what sentence-transformers encodes with); None without a
        ``tokenizer.json``."""
        model_dir = Path(model_dir)
        if not (model_dir / "tokenizer.json").is_file():
            return None
        limit = int(max_length)
        config = model_dir / "config.json"
        if config.is_file():
            positions = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
            if isinstance(positions, int) and 0 < positions < limit:
                limit = positions
        return cls(Tokenizer.from_file(str(model_dir / "tokenizer.json")), limit)

    def pieces(self, text: str) -> int:
        """Word pieces of ``text`` as the model reads it, the special tokens included."""
        with self._lock:
            return len(self.tokenizer.encode(text).ids)

    def over(self, text: str) -> bool:
        """Whether the model would cut ``text``. A word piece covers at least one byte, so a text of
        fewer bytes than the limit leaves room is never tokenized."""
        if len(text.encode("utf-8")) + self.specials <= self.limit:
            return False
        return self.pieces(text) > self.limit

    def windows(self, text: str) -> list[tuple[str, int]]:
        """``text`` cut into consecutive windows of at most ``limit`` word pieces with the specials,
        each ending at a word boundary (a single word longer than a window is cut inside): the
        windows' texts (substrings of ``text``) and their word pieces."""
        with self._lock:
            enc = self.tokenizer.encode(text, add_special_tokens=False)
        offsets, words, n = enc.offsets, enc.word_ids, len(enc.ids)
        out: list[tuple[str, int]] = []
        start = 0
        while start < n:
            end = min(start + self.window, n)
            if end < n:
                cut = end
                while cut > start and words[cut] == words[cut - 1]:
                    cut -= 1  # never end a window inside a word ...
                if cut > start:  # ... unless one word fills the whole window
                    end = cut
            out.append((text[offsets[start][0]:offsets[end - 1][1]], end - start))
            start = end
        return out


@dataclass
class Tally:
    """Texts over the embedding model's limit, distinct by hash (what was done with them is the
    run's ``embedding.long_texts``)."""

    seen: set[str] = field(default_factory=set, repr=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def note(self, hashes: list[str]) -> None:
        with self.lock:
            self.seen.update(hashes)

    @property
    def count(self) -> int:
        return len(self.seen)


_current: contextvars.ContextVar[tuple[Tally, ...]] = contextvars.ContextVar("long_text_tallies", default=())


class tallying:
    """``with tallying(tally):`` texts over the limit embedded in the block are noted in ``tally``
    (and in every tally already current: a stage's and a memory's count the same text)."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.token: Optional[contextvars.Token[tuple[Tally, ...]]] = None

    def __enter__(self) -> Tally:
        self.token = _current.set(_current.get() + (self.tally,))
        return self.tally

    def __exit__(self, *exc: Any) -> None:
        assert self.token is not None
        _current.reset(self.token)


def current() -> tuple[Tally, ...]:
    return _current.get()


def note(hashes: list[str]) -> None:
    """The embedder met these texts (by hash) over the limit: every current tally counts them."""
    for tally in _current.get():
        tally.note(hashes)


def pooled(vectors: np.ndarray, weights: list[int]) -> np.ndarray:
    """The weighted mean of a text's window vectors (rows of unit length), made unit length again."""
    mean = (np.asarray(vectors, dtype=np.float32) * np.asarray(weights, dtype=np.float32)[:, None]).sum(0)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)
