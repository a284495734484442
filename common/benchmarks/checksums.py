"""The official releases' sha256 (``configs/datasets.sha256``) and whether a run's data is one of them.

A benchmark file given by path (``LOCOMO_JSON``, ``LONGMEMEVAL_JSON``, ``data.path``) may be any
file of the right layout: a run on it still runs, but ``09_aggregate`` records ``dataset`` in
``metrics.json`` and every table and the export manifest say "modified dataset" with both
hashes. An adapter names its official files in ``official_sha256``: one hash (a single file), or
a dict of file name to hash (a benchmark released as several files; a directory is checked file
by file, a single file against the entry of its own name, else against any of them). A hash of 40
hex digits is a git blob id and the file is compared by its blob id.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from common.benchmarks.base import DataError
from common.benchmarks.beam_data import digest_kind, file_digest
from common.core.config import REPO_ROOT
from common.core.io import sha256_file

FILE = REPO_ROOT / "configs" / "datasets.sha256"
Official = Union[str, Mapping[str, str]]
SHOWN = 3  # a folder's differing files named in the warning (the rest counted; all are in ``sha256``)


def folder_sha256(root: Path, files: list[Path]) -> str:
    """One sha256 over a release folder's files as read: each path relative to ``root``, then the
    sha256 of its contents (BEAM's tier folders, REALTALK's chat files)."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.relative_to(root).as_posix().encode("utf-8") + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).hexdigest().encode("ascii") + b"\n")
    return h.hexdigest()


def official_files(pattern: str, path: Path = FILE) -> dict[str, str]:
    """File name -> official sha256 of every release file whose name matches the regular expression
    ``pattern`` (a release of several files listed one per line: REALTALK's ``Chat_<n>_<A>_<B>.json``)."""
    rx = re.compile(pattern)
    return {name: sha for name, sha in _table(path).items() if rx.fullmatch(name)}


def official(name: str, path: Path = FILE) -> str:
    """The official sha256 of release file ``name`` (one-line error naming the file if absent)."""
    table = _table(path)
    if name not in table:
        raise ValueError(f"{path}: no sha256 for {name!r} (known: {', '.join(table)})")
    return table[name]


def _table(path: Path) -> dict[str, str]:
    table: dict[str, str] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 64:
            raise ValueError(f"{path}: line {n}: expected '<sha256>  <file name>', got {line!r}")
        table[parts[1]] = parts[0]
    return table


def check(expected: Official, path: Optional[Path], sha256: Optional[str] = None, *, folder: bool = False,
          read: Optional[list[str]] = None) -> dict[str, Any]:
    """``{status: official|modified|unknown, path, sha256, official_sha256[, warning]}``.

    ``sha256`` is the file's hash when the caller already has it (the run's fingerprint);
    otherwise it is read from ``path``. A directory is compared file by file; ``read`` (the
    files the adapter reads, relative to it) makes a file the release does not have a
    difference too. ``folder``: the release is a folder (BEAM), so without the folder the
    one hash of the fingerprint cannot be compared (``unknown``).
    """
    out: dict[str, Any] = {"path": str(path) if path is not None else None}
    if not expected:
        return out | {"status": "unknown", "sha256": sha256, "official_sha256": None,
                      "note": "this benchmark names no official checksum"}
    if folder and (path is None or not path.is_dir()):
        return out | {"status": "unknown", "sha256": sha256, "official_sha256": None,
                      "note": "the data folder is not at its configured path: its files cannot be compared "
                              "with the official release's"}
    if path is not None and path.is_dir():
        files = dict(expected) if isinstance(expected, Mapping) else {}
        got = {name: _digest(path / name, files[name]) if (path / name).is_file() else None for name in files}
        changed = sorted(name for name in files if got[name] is not None and got[name] != files[name])
        missing = sorted(name for name in files if got[name] is None)
        extra = sorted(name for name in read or [] if name not in files)
        out |= {"sha256": got, "official_sha256": files}
        if not changed and not missing and not extra:
            return out | {"status": "official"}
        parts = [f"{name} {digest_kind(files[name])} {got[name]} differs from the official release's {files[name]}"
                 for name in changed[:SHOWN]]
        parts += [f"{len(changed) - SHOWN} more files differ"] if len(changed) > SHOWN else []
        parts += [f"{name} sha256 {sha256_file(path / name)} is not in the official release"
                  for name in extra[:SHOWN]]
        parts += [f"{len(extra) - SHOWN} more files are not in it"] if len(extra) > SHOWN else []
        if missing:  # a part of the release (fewer chats): counted, the first named
            parts.append(f"{len(missing)} of the official release's {len(files)} files missing (first: "
                         f"{missing[0]}, {digest_kind(files[missing[0]])} {files[missing[0]]})")
        return out | {"status": "modified", "warning": "MODIFIED DATASET: " + "; ".join(parts)}
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


def _digest(path: Path, want: str) -> str:
    """The file's digest of the same kind as the official one (a sha256, or where the release list
    could not hash a file its git blob id, 40 hex digits: BEAM's 1M and 10M chats), so a file listed
    by blob id is compared by blob id (its sha256 would never equal it: every such file "modified")."""
    return file_digest(path, digest_kind(want))


def run_dataset(adapter: Any, cfg: Any, sha256: Optional[str]) -> dict[str, Any]:
    """``check`` for a run: the adapter's official hashes (``official(cfg)``, else its
    ``official_sha256``) against its configured data path; a bundled sample (``data.sample``) is
    named as one (status ``sample``), not compared with a release it never claimed to be."""
    sample = getattr(cfg.data, "sample", None)
    if sample:
        return {"status": "sample", "path": str(cfg.data.path), "sha256": sha256, "official_sha256": None,
                "note": f"{sample}: a bundled sample, not the benchmark's release"}
    try:
        path: Optional[Path] = adapter.data_path(cfg)
    except DataError:  # moved since 01 ran: the hash 01 recorded still tells
        path = None
    expected = adapter.official(cfg) if hasattr(adapter, "official") else getattr(adapter, "official_sha256", "")
    folder = bool(getattr(adapter, "official_is_folder", False))
    read = None
    if folder and path is not None and path.is_dir() and hasattr(adapter, "data_files"):
        try:
            read = [f.relative_to(path).as_posix() for f in adapter.data_files(path)]
        except DataError:  # a folder the adapter cannot read: the file-by-file check still tells
            read = None
    return check(expected, path, None if path is not None and path.is_dir() else sha256, folder=folder, read=read)
