"""The official releases' sha256 (``configs/datasets.sha256``) and whether a run's data is one of them.

A benchmark file given by path (``LOCOMO_JSON``, ``LONGMEMEVAL_JSON``, ``data.path``) may be any
file of the right layout: a run on it still runs, but ``09_aggregate`` records ``dataset`` in
``metrics.json`` and every table and the export manifest say "modified dataset" with both
hashes. An adapter names its official files in ``official_sha256``: one hash (a single file), or
a dict of file name to hash (a benchmark released as several files; a directory is checked file
by file, a single file against the entry of its own name, else against any of them).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Union

from common.benchmarks.base import DataError
from common.core.config import REPO_ROOT
from common.core.io import sha256_file

FILE = REPO_ROOT / "configs" / "datasets.sha256"
Official = Union[str, Mapping[str, str]]


def official(name: str, path: Path = FILE) -> str:
    """The official sha256 of release file ``name`` (one-line error naming the file if absent)."""
    table: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise ValueError(f"{path}: line {n}: expected '<sha256>  <file name>', got {line!r}")
        table[parts[1]] = parts[0]
    if name not in table:
        raise ValueError(f"{path}: no sha256 for {name!r} (known: {', '.join(table)})")
    return table[name]


def check(expected: Official, path: Optional[Path], sha256: Optional[str] = None) -> dict[str, Any]:
    """``{status: official|modified|unknown, path, sha256, official_sha256[, warning]}``.

    ``sha256`` is the file's hash when the caller already has it (the run's fingerprint);
    otherwise it is read from ``path``. A directory is compared file by file.
    """
    out: dict[str, Any] = {"path": str(path) if path is not None else None}
    if not expected:
        return out | {"status": "unknown", "sha256": sha256, "official_sha256": None,
                      "note": "this benchmark names no official checksum"}
    if path is not None and path.is_dir():
        files = dict(expected) if isinstance(expected, Mapping) else {}
        got = {name: sha256_file(path / name) if (path / name).is_file() else None for name in files}
        differ = sorted(name for name in files if got[name] != files[name])
        out |= {"sha256": got, "official_sha256": files}
        if not differ:
            return out | {"status": "official"}
        return out | {"status": "modified", "warning": "MODIFIED DATASET: " + "; ".join(
            f"{name} sha256 {got[name] or 'missing'} differs from the official release's {files[name]}"
            for name in differ)}
    if sha256 is None:
        sha256 = sha256_file(path) if path is not None and path.is_file() else None
    if isinstance(expected, str):
        want = expected
    else:
        name = path.name if path is not None else ""
        if sha256 in expected.values() and name not in expected:
            want = str(sha256)
        else:
            want = expected.get(name) or next(iter(expected.values()))
    out |= {"sha256": sha256, "official_sha256": want}
    if sha256 == want:
        return out | {"status": "official"}
    return out | {"status": "modified", "warning": f"MODIFIED DATASET: sha256 {sha256} differs from the official "
                                                   f"release's {want}"}


def run_dataset(adapter: Any, cfg: Any, sha256: Optional[str]) -> dict[str, Any]:
    """``check`` for a run: the adapter's ``official_sha256`` against its configured data path."""
    try:
        path: Optional[Path] = adapter.data_path(cfg)
    except DataError:  # moved since 01 ran: the hash 01 recorded still tells
        path = None
    return check(getattr(adapter, "official_sha256", ""), path, None if path is not None and path.is_dir()
                 else sha256)
