"""Content-addressed reuse of offline work across memories.

LongMemEval haystacks share many sessions: the same session (same id, date and turns) appears
in the memories of many questions. Partitioning and extraction are query-independent, so each
distinct session is processed once, through its first occurrence (the representative); every
other occurrence is then served by the LLM cache with a byte-identical request and rebased onto
its own memory. LoCoMo sessions are all distinct, so nothing changes there.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json

from common.core.schema import Episode, ExtractRow, PartitionRow, Session, to_dict


def session_content_key(session: Session) -> str:
    turns = [to_dict(t) for t in session.turns]
    blob = json.dumps([session.session_id, session.date_time, turns], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def representatives(sessions: list[Session]) -> dict[str, Session]:
    """session key -> the first session with the same content (itself when unique)."""
    first: dict[str, Session] = {}
    return {s.key: first.setdefault(session_content_key(s), s) for s in sessions}


def _rebase_id(identifier: str, old_memory: str, new_memory: str) -> str:
    return new_memory + identifier[len(old_memory):] if identifier.startswith(old_memory + "::") else identifier


def rebase_episode(ep: Episode, memory_id: str) -> Episode:
    return dataclasses.replace(ep, episode_id=_rebase_id(ep.episode_id, ep.memory_id, memory_id),
                               memory_id=memory_id, dia_ids=list(ep.dia_ids))


def rebase_partition(row: PartitionRow, session: Session) -> PartitionRow:
    return dataclasses.replace(row, session_key=session.key, memory_id=session.memory_id,
                               episodes=[rebase_episode(e, session.memory_id) for e in row.episodes])


def rebase_records(row: ExtractRow, episode: Episode) -> ExtractRow:
    old = row.memory_id
    records = [dataclasses.replace(r, record_id=_rebase_id(r.record_id, old, episode.memory_id),
                                   episode_id=episode.episode_id, memory_id=episode.memory_id,
                                   evidence_dia_ids=list(r.evidence_dia_ids)) for r in row.records]
    return dataclasses.replace(row, episode_id=episode.episode_id, memory_id=episode.memory_id, records=records)
