"""Stage 02: cut every session into theme-coherent episodes (paper 3.2, Appendix E.1).

The LLM proposes segments; ``validate_segments`` checks they cover every turn exactly once,
in order. A bad reply gets one repair call; if that fails too, the deterministic fallback (one
episode per session) is used and recorded. ``turn`` and ``session`` modes make the other two
granularities of the episode ablation without any LLM call.
"""
from __future__ import annotations

import json
from typing import Any

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient, parse_json_object
from common.core.repair import complete_with_repair, fallback_error
from common.core.schema import Episode, PartitionRow, Session
from common.core.text import THEME_TYPES, norm
from common.method.render import render_turns

PROMPT_IDS = ("partition_system", "partition_user", "partition_repair_system", "partition_repair_user")


class PartitionError(ValueError):
    """A proposed partition that does not cover the session exactly once, in order."""


def episode_id(session: Session, n: int) -> str:
    return f"{session.memory_id}::{session.session_id}::episode_{n:03d}"


def _episode(session: Session, n: int, dia_ids: list[str], theme: str, theme_type: str,
             description: str, reason: str, mode: str) -> Episode:
    return Episode(
        episode_id=episode_id(session, n), memory_id=session.memory_id,
        session_id=session.session_id, session_index=session.session_index,
        date_time=session.date_time, dia_ids=dia_ids, theme=theme, theme_type=theme_type,
        theme_description=description, boundary_reason=reason, mode=mode,
    )


def validate_segments(session: Session, reply: dict[str, Any]) -> list[Episode]:
    """Turn a model reply into episodes, or raise ``PartitionError`` saying what is wrong."""
    segments = reply.get("segments")
    if not isinstance(segments, list) or not segments:
        raise PartitionError("'segments' must be a non-empty list")
    ids = [t.dia_id for t in session.turns]
    index = {d: i for i, d in enumerate(ids)}
    expected_start, episodes = 0, []
    for n, seg in enumerate(segments, 1):
        if not isinstance(seg, dict):
            raise PartitionError(f"segment {n} is not an object")
        start, end = str(seg.get("start_dia_id", "")).strip(), str(seg.get("end_dia_id", "")).strip()
        if start not in index or end not in index:
            raise PartitionError(f"segment {n}: unknown DIA id {start if start not in index else end!r}")
        i, j = index[start], index[end]
        if i != expected_start:
            what = "gap" if i > expected_start else "overlap"
            after = ids[expected_start - 1] if expected_start else "session start"
            raise PartitionError(f"segment {n} starts at {start}: {what} after {after}")
        if j < i:
            raise PartitionError(f"segment {n}: end {end} before start {start}")
        theme = str(seg.get("theme", "")).strip()
        if not theme:
            raise PartitionError(f"segment {n}: empty theme")
        ttype = norm(seg.get("theme_type", ""))
        if ttype not in THEME_TYPES:
            raise PartitionError(f"segment {n}: theme_type {ttype!r} not in {THEME_TYPES}")
        episodes.append(_episode(session, n, ids[i : j + 1], theme, ttype,
                                 str(seg.get("theme_description", "")).strip(),
                                 str(seg.get("boundary_reason", "")).strip(), "theme"))
        expected_start = j + 1
    if expected_start != len(ids):
        raise PartitionError(f"segments end at {ids[expected_start - 1]}, session ends at {ids[-1]}")
    return episodes


def fixed_episodes(session: Session, mode: str) -> list[Episode]:
    """Deterministic units: one per session (also the fallback) or one per turn."""
    if mode == "session":
        return [_episode(session, 1, [t.dia_id for t in session.turns],
                         f"Complete session {session.session_id}", "topic", "",
                         "session_start", "session")]
    if mode == "turn":
        return [_episode(session, n, [t.dia_id], f"Single turn {t.dia_id}", "topic", "",
                         "per-turn unit", "turn") for n, t in enumerate(session.turns, 1)]
    raise ValueError(f"unknown fixed episode mode {mode!r}")


def partition_messages(session: Session, include_images: bool) -> list[dict[str, str]]:
    user = prompts.fill(
        "partition_user", conversation_id=session.memory_id, session_id=session.session_id,
        observed_at=session.date_time or "unknown",
        session_text=render_turns(session.turns, include_images),
    )
    return [{"role": "system", "content": prompts.load("partition_system")},
            {"role": "user", "content": user}]


def _repair_messages(session: Session, error: str, proposal: str,
                     include_images: bool = True) -> list[dict[str, str]]:
    # The session itself goes in too: a malformed proposal alone gives nothing to choose themes from.
    user = prompts.fill(
        "partition_repair_user", error=error,
        required_ids=json.dumps([t.dia_id for t in session.turns]), proposal=proposal,
        session_text=render_turns(session.turns, include_images),
    )
    return [{"role": "system", "content": prompts.load("partition_repair_system")},
            {"role": "user", "content": user}]


def partition_session(client: LLMClient, session: Session, mode: str = "theme",
                      include_images: bool = True) -> PartitionRow:
    """Partition one session; never raises for a bad or failed model reply."""
    row = PartitionRow(session_key=session.key, memory_id=session.memory_id,
                       session_id=session.session_id, mode=mode, episodes=[])
    if mode != "theme":
        row.episodes = fixed_episodes(session, mode)
        return row
    try:
        row.episodes, row.repaired = complete_with_repair(
            client, "partition", partition_messages(session, include_images),
            lambda text: validate_segments(session, parse_json_object(text)),
            lambda error, text: _repair_messages(session, error, text, include_images),
            ("partition_user", "partition_repair_user"), row.llm_calls)
        return row
    except (ValueError, LLMCallError) as exc:
        row.repaired = len(row.llm_calls) > 1
        row.fallback_used, row.fallback_error = True, fallback_error(exc)
    row.episodes = fixed_episodes(session, "session")
    for ep in row.episodes:
        ep.mode = "theme"  # a fallback episode of a theme run, recorded by fallback_used
        ep.boundary_reason = "fallback: whole session"
    return row
