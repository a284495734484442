"""``make data-beam SIZE=100K|500K|1M|10M``: download a BEAM tier at the pinned commit, every file checked.

Each file named in ``configs/beam_sha256/<SIZE>.txt`` (per chat the file the official runner
reads, and its probing questions) is fetched with curl from raw.githubusercontent.com into
``data/beam/<SIZE>/``; a file already there with the right digest is kept. A file's digest is
its sha256 (64 hex digits) where the file could be hashed when the list was made, else its git
blob id from the pinned tree (40 hex digits: sha1 of ``"blob <length>\0"`` + the content), which
identifies the content just as well. Every failure is one line: an unknown tier, no network, a
digest mismatch.

    python -m common.benchmarks.beam_data --size 100K [--out data/beam] [--base-url URL]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

from common.core.config import resolve_path

COMMIT = "b2a3ee8ba12d68f83143dda191097dc3e028ddd3"
BASE_URL = f"https://raw.githubusercontent.com/mohammadtavakoli78/BEAM/{COMMIT}/chats"
SUMS_DIR = "configs/beam_sha256"
TIERS = ("100K", "500K", "1M", "10M")
_CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """One line saying what failed."""


def checksums(size: str) -> list[tuple[str, str]]:
    """``(digest, path under chats/)`` of every file of the tier, from the committed checksum file;
    a digest is a sha256 or a git blob id (``digest_kind``)."""
    path = resolve_path(f"{SUMS_DIR}/{size}.txt")
    if size not in TIERS or not path.exists():
        raise DownloadError(f"SIZE={size}: unknown BEAM tier; expected {', '.join(TIERS[:-1])} or {TIERS[-1]}")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) not in (40, 64) or any(c not in "0123456789abcdef" for c in parts[0]):
            raise DownloadError(f"{path}: line {n}: expected '<sha256 or git blob id>  <path>'")
        rows.append((parts[0], parts[1]))
    return rows


def digest_kind(digest: str) -> str:
    """``sha256`` (64 hex digits) or ``git blob id`` (40)."""
    return "sha256" if len(digest) == 64 else "git blob id"


def file_digest(path: Path, kind: str) -> str:
    """The file's sha256, or its git blob id (sha1 over ``blob <length>\0`` and the content),
    read in chunks: a 10M chat file is far larger than the rest."""
    if kind == "sha256":
        h = hashlib.sha256()
    else:
        h = hashlib.sha1(usedforsecurity=False)
        h.update(b"blob %d\0" % path.stat().st_size)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _matches(path: Path, digest: str) -> bool:
    return file_digest(path, digest_kind(digest)) == digest


def download(size: str, out: Path, base_url: str = BASE_URL) -> int:
    """Fetch the missing or changed files of ``size`` into ``out/<size>/``; returns how many were fetched."""
    fetched = 0
    for digest, rel in checksums(size):
        target = out / rel
        if target.is_file() and _matches(target, digest):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + ".part")
        url = f"{base_url.rstrip('/')}/{rel}"
        done = subprocess.run(["curl", "-fsSL", "--connect-timeout", "20", "-o", str(part), url],
                              capture_output=True, text=True)
        if done.returncode != 0:
            part.unlink(missing_ok=True)
            reason = (done.stderr.strip().splitlines() or [f"curl exit {done.returncode}"])[-1]
            raise DownloadError(f"cannot download {url} (offline?): {reason}")
        kind = digest_kind(digest)
        got = file_digest(part, kind)
        if got != digest:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: {kind} {got} differs from {digest} ({SUMS_DIR}/{size}.txt)")
        part.replace(target)
        fetched += 1
    return fetched


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.benchmarks.beam_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="100K", help=" | ".join(TIERS))
    p.add_argument("--out", default="data/beam", help="the tier folder is written below it")
    p.add_argument("--base-url", default=os.environ.get("BEAM_URL") or BASE_URL)
    a = p.parse_args(argv)
    try:
        n = download(a.size, resolve_path(a.out), a.base_url)
    except DownloadError as exc:
        print(f"data-beam: {exc}", file=sys.stderr)
        return 1
    print(f"data-beam: {a.out}/{a.size}: {n} file(s) downloaded, every file checked (sha256 or git blob id)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
