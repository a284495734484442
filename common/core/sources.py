"""The official session ids of a benchmark's sessions, kept on the gold side.

LongMemEval's official session ids mark evidence sessions (``answer_<hash>``), so stage 01 writes
the sessions artifact that every method stage and outside system reads with an opaque
``session_id`` and no ``source_id``, and the official ids into ``01_session_sources.jsonl`` (a
gold artifact). Only the metrics and the labelled oracle read them back, through this module.
A run made before the split still has ``source_id`` in its sessions artifact; it is kept.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable

from common.core import artifacts
from common.core.io import read_jsonl
from common.core.schema import Session


def split(sessions: Iterable[Session]) -> tuple[list[Session], list[dict[str, Any]]]:
    """(the sessions without their source ids, the gold-side rows memory/session -> source id)."""
    opaque, rows = [], []
    for s in sessions:
        if s.source_id:
            rows.append({"memory_id": s.memory_id, "session_id": s.session_id, "source_id": s.source_id})
        opaque.append(dataclasses.replace(s, source_id=""))
    return opaque, rows


def session_sources(run_dir: Path) -> dict[tuple[str, str], str]:
    """(memory id, session id) -> official source id; {} for a run without the file."""
    return read_sources(artifacts.path(run_dir, "session_sources"))


def read_sources(path: Path) -> dict[tuple[str, str], str]:
    """``session_sources`` from the file itself."""
    return {(r["memory_id"], r["session_id"]): r["source_id"] for r in read_jsonl(path, missing_ok=True)}


def restore(sessions: Iterable[Session], sources_file: Path) -> list[Session]:
    """The sessions with their official source ids (for the metrics and the oracle only)."""
    sources = read_sources(sources_file)
    return [dataclasses.replace(s, source_id=sources.get((s.memory_id, s.session_id), s.source_id))
            for s in sessions]
