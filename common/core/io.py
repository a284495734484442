"""JSONL artifacts: reading, resumable writing, atomic replacement, stage manifests.

LLM stages append one row per finished unit (and flush), so an interrupted stage resumes
from the ids already on disk; on a clean finish the file is rewritten in input order. A
``<stage>.manifest.json`` written last records what the stage read, produced and spent.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from common.core.config import REPO_ROOT


class ArtifactError(RuntimeError):
    """A missing or unreadable artifact (one line: the file, and what to run)."""


def read_json(path: Path, error: type[Exception] = ArtifactError) -> Any:
    """A JSON file's content; invalid JSON raises ``error`` (the caller's error type) with one line
    naming the file and where it broke."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise error(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None


def numbered_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(1-based line number, row) of every non-blank line of a JSONL file."""
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as exc:
                raise ArtifactError(f"{path}:{lineno}: invalid JSON ({exc.msg})") from None


def read_jsonl(path: Path, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """Read every row; a missing file names the stage that makes it (or is empty: ``missing_ok``)."""
    if not path.exists():
        if missing_ok:
            return []
        raise ArtifactError(f"missing {path}: run the stage that writes it first")
    return [row for _, row in numbered_rows(path)]


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Write a whole file atomically (tmp + rename), so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def content_digest(obj: Any) -> str:
    """Short content hash of an upstream row: a row whose input changed since it was made is stale."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()[:16]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class StageWriter:
    """Resumable per-row writer keyed by a stable id.

    Rows already present (complete lines) are kept and their keys reported as done; a line cut
    by a crash is discarded. Rows for which ``redo(row)`` is true (failed rows) are dropped too,
    so a rerun does them again: their calls that succeeded come back from the LLM cache and only
    the failed ones are paid for. ``close`` rewrites the file ordered as ``order`` (input order)
    so a resumed run produces the same bytes as an uninterrupted one.
    """

    def __init__(self, path: Path, key: str, *, force: bool = False,
                 redo: Optional[Callable[[dict[str, Any]], bool]] = None):
        self.path, self.key = path, key
        self.rows: dict[str, dict[str, Any]] = {}
        self.redone = 0  # failed rows dropped on load, to be done again
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not force:
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue  # a partial last line from an interrupted run
                    self.rows[row[key]] = row
            if redo is not None:
                failed = [k for k, row in self.rows.items() if redo(row)]
                for k in failed:
                    del self.rows[k]
                self.redone = len(failed)
        # Re-write what survived so that appends start on a clean line boundary.
        write_jsonl(path, self.rows.values())
        self._fh = path.open("a", encoding="utf-8")
        self.resumed = len(self.rows)

    def done(self, key: str) -> bool:
        return key in self.rows

    def pending(self, items: list[Any], key_fn: Callable[[Any], str]) -> list[Any]:
        return [it for it in items if key_fn(it) not in self.rows]

    def write(self, row: dict[str, Any]) -> None:
        self.rows[row[self.key]] = row
        self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._fh.flush()

    def close(self, order: Optional[list[str]] = None) -> list[dict[str, Any]]:
        self._fh.close()
        keys = order if order is not None else sorted(self.rows)
        rows = [self.rows[k] for k in keys if k in self.rows]
        write_jsonl(self.path, rows)
        return rows


def git_revision() -> dict[str, Any]:
    """Code version recorded in manifests (commit and whether the tree was dirty)."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=REPO_ROOT, capture_output=True, text=True, timeout=5,
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    return {"commit": sha or None, "dirty": dirty}


def write_manifest(
    run_dir: Path,
    stage: str,
    *,
    inputs: list[Path],
    outputs: list[Path],
    rows: int,
    started: float,
    extra: Optional[dict[str, Any]] = None,
) -> Path:
    """Record what a stage read, wrote and spent; written last, it marks the stage complete."""
    manifest = {
        "stage": stage,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "wall_seconds": round(time.time() - started, 3),
        "code": git_revision(),
        "inputs": {str(p.relative_to(run_dir) if p.is_relative_to(run_dir) else p): sha256_file(p)
                   for p in inputs if p.exists() and p.is_file()},
        "outputs": [str(p.relative_to(run_dir) if p.is_relative_to(run_dir) else p) for p in outputs],
        "rows": rows,
        **(extra or {}),
    }
    path = run_dir / f"{stage}.manifest.json"
    write_json(path, manifest)
    return path


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    yield from read_jsonl(path)
