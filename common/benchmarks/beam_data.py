"""``make data-beam SIZE=100K|500K``: download a BEAM tier at the pinned commit and check every sha256.

Each file named in ``configs/beam_sha256/<SIZE>.txt`` (per chat the file the official runner
reads, and its probing questions) is fetched with curl from raw.githubusercontent.com into
``data/beam/<SIZE>/``; a file already there with the right sha256 is kept. Every failure is one
line: an unknown or incomplete tier, no network, a checksum mismatch.

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
# Tiers the release does not hold completely: refused with the reason.
REFUSED = {
    "1M": "the 1M tier is incomplete in the BEAM repository (9 of its 35 chats); only 100K and 500K can be run",
    "10M": "the 10M tier has no chats in the BEAM repository; only 100K and 500K can be run",
}


class DownloadError(RuntimeError):
    """One line saying what failed."""


def checksums(size: str) -> list[tuple[str, str]]:
    """``(sha256, path under chats/)`` of every file of the tier, from the committed checksum file."""
    if size in REFUSED:
        raise DownloadError(f"SIZE={size}: {REFUSED[size]}")
    path = resolve_path(f"{SUMS_DIR}/{size}.txt")
    if not path.exists():
        raise DownloadError(f"SIZE={size}: unknown BEAM tier; expected 100K or 500K")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise DownloadError(f"{path}: line {n}: expected '<sha256>  <path>'")
        rows.append((parts[0], parts[1]))
    return rows


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def download(size: str, out: Path, base_url: str = BASE_URL) -> int:
    """Fetch the missing or changed files of ``size`` into ``out/<size>/``; returns how many were fetched."""
    fetched = 0
    for sha, rel in checksums(size):
        target = out / rel
        if target.is_file() and _sha256(target) == sha:
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
        got = _sha256(part)
        if got != sha:
            part.unlink(missing_ok=True)
            raise DownloadError(f"{url}: sha256 {got} differs from {sha} ({SUMS_DIR}/{size}.txt)")
        part.replace(target)
        fetched += 1
    return fetched


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.benchmarks.beam_data", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="100K", help="100K or 500K (1M and 10M are refused)")
    p.add_argument("--out", default="data/beam", help="the tier folder is written below it")
    p.add_argument("--base-url", default=os.environ.get("BEAM_URL") or BASE_URL)
    a = p.parse_args(argv)
    try:
        n = download(a.size, resolve_path(a.out), a.base_url)
    except DownloadError as exc:
        print(f"data-beam: {exc}", file=sys.stderr)
        return 1
    print(f"data-beam: {a.out}/{a.size}: {n} file(s) downloaded, all sha256 checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
