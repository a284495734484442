"""Stage 03: entity-property records per episode (paper eq. 2-3, Appendix E.1).

Records are navigation handles pointing back to their source turns. Normalization is
deterministic: a record without entity, property, or an evidence id inside its episode is
dropped (and counted); evidence ids outside the episode are removed (and counted).
"""
from __future__ import annotations

import json
from typing import Any

from common.core import prompts
from common.core.llm import LLMCallError, LLMClient, parse_json_object
from common.core.repair import complete_with_repair, fallback_error
from common.core.schema import Episode, ExtractRow, Record
from common.core.text import ENTITY_TYPES, MODALITIES, PROJECTION_KINDS, norm, normalize_condition, normprop
from common.method.projections import add_projections
from common.method.render import MemoryView

GRANULARITIES = ("fine", "broad", "broad_plus", "very_broad")  # the granularity_<name> blocks
# The heading lines of the granularity block (paper and code_rules extraction and planning prompts):
# granularity "none" leaves out the heading with its block (the authors' LongMemEval prompts have none).
GRANULARITY_HEADINGS = ("Property granularity policy:\n", "Property granularity of the index:\n")
PROMPT_IDS = ("extract_system", "extract_user", "extract_repair_system", "extract_repair_user")


def granularity_policy(granularity: str) -> str:
    if granularity not in GRANULARITIES + ("none",):
        raise ValueError(f"extract.granularity must be one of {GRANULARITIES + ('none',)}, got {granularity!r}")
    return "" if granularity == "none" else prompts.load(f"granularity_{granularity}")


def fill_granular(prompt_id: str, granularity: str, **slots: object) -> str:
    """``prompts.fill`` with the granularity block; for ``none`` its heading and slot are left out."""
    if granularity != "none":
        return prompts.fill(prompt_id, granularity_policy=granularity_policy(granularity), **slots)
    text = prompts.fill(prompt_id, granularity_policy="\0", **slots)
    for heading in GRANULARITY_HEADINGS:
        text = text.replace(f"{heading}\0\n\n", "")
    if "\0" in text:
        raise KeyError(f"prompt '{prompt_id}': the granularity slot has no heading to leave out")
    return text


def extract_messages(view: MemoryView, episode: Episode, granularity: str,
                     include_images: bool = True, prompt_set: str = prompts.PAPER) -> list[dict[str, str]]:
    user = fill_granular(
        prompts.pick("extract_user", prompt_set), granularity,
        episode_id=episode.episode_id, conversation_id=episode.memory_id,
        session_id=episode.session_id, observed_at=episode.date_time or "unknown",
        episode_theme=episode.theme, episode_theme_type=episode.theme_type,
        episode_text=view.episode_text(episode, include_images),
    )
    return [{"role": "system", "content": prompts.load(prompts.pick("extract_system", prompt_set))},
            {"role": "user", "content": user}]


def _s(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return " ".join(str(value).split())


def normalize_records(raw: Any, episode: Episode, granularity: str) -> tuple[list[Record], int, int]:
    """Return (records, n_dropped, n_evidence_repaired) for a model's ``records`` list."""
    if not isinstance(raw, list):
        raise ValueError("'records' must be a list")
    allowed = set(episode.dia_ids)
    out: list[Record] = []
    seen: set[tuple] = set()
    dropped = repaired = 0
    for item in raw:
        if not isinstance(item, dict):
            dropped += 1
            continue
        entity, prop = _s(item.get("entity")), normprop(item.get("property"))
        ev_raw = item.get("evidence_dia_ids") or []
        ev_raw = ev_raw if isinstance(ev_raw, list) else [ev_raw]
        ev = list(dict.fromkeys(str(e).strip() for e in ev_raw if str(e).strip() in allowed))
        if not entity or not prop or not ev:
            dropped += 1
            continue
        if any(str(e).strip() not in allowed for e in ev_raw):
            repaired += 1  # a kept record that cited turns outside its episode
        etype = norm(item.get("entity_type"))
        modality = norm(item.get("modality")) or "observed"
        projection = norm(item.get("projection_kind")) or "direct"
        try:
            confidence = min(1.0, max(0.0, float(item.get("confidence", 1.0))))
        except (TypeError, ValueError):
            confidence = 1.0
        cond_prop = normalize_condition(item.get("condition_property"))
        rec = Record(
            record_id="", episode_id=episode.episode_id, memory_id=episode.memory_id,
            entity=entity, entity_type=etype if etype in ENTITY_TYPES else "other",
            property=prop, value=_s(item.get("value")),
            condition_property=cond_prop,
            condition_value=_s(item.get("condition_value")) if cond_prop else "",
            property_kind="aspect" if norm(item.get("property_kind")) == "aspect" else "relation",
            modality=modality if modality in MODALITIES else "observed",
            valid_time=_s(item.get("valid_time")), source=_s(item.get("source")),
            evidence_dia_ids=ev,
            projection_kind=projection if projection in PROJECTION_KINDS else "direct",
            confidence=confidence, granularity=granularity,
        )
        key = (norm(rec.entity), rec.entity_type, rec.property, norm(rec.value),
               rec.condition_property, norm(rec.condition_value), tuple(rec.evidence_dia_ids))
        if key in seen:
            dropped += 1
            continue
        seen.add(key)
        rec.record_id = f"{episode.episode_id}::index_{len(out) + 1:03d}"
        out.append(rec)
    return out, dropped, repaired


def _parse(text: str, episode: Episode, granularity: str) -> tuple[list[Record], int, int, int]:
    obj = parse_json_object(text)
    raw = obj.get("records")
    records, dropped, repaired = normalize_records(raw, episode, granularity)  # raises unless a list
    return records, len(raw or []), dropped, repaired


def extract_episode(client: LLMClient, view: MemoryView, episode: Episode, granularity: str,
                    include_images: bool = True, prompt_set: str = prompts.PAPER,
                    projections: tuple[Any, ...] = (False, False)) -> ExtractRow:
    """Extract records of one episode; a failed reply is repaired once, then recorded empty."""
    row = ExtractRow(episode_id=episode.episode_id, memory_id=episode.memory_id,
                     granularity=granularity, records=[])

    def repair(error: str, text: str) -> list[dict[str, str]]:
        user = prompts.fill("extract_repair_user", error=error, proposal=text,
                              episode_text=view.episode_text(episode, include_images))
        return [{"role": "system", "content": prompts.load("extract_repair_system")},
                {"role": "user", "content": user}]

    try:
        parsed, row.repaired = complete_with_repair(
            client, "extract", extract_messages(view, episode, granularity, include_images, prompt_set),
            lambda text: _parse(text, episode, granularity), repair,
            (f"{prompts.pick('extract_user', prompt_set)}/{granularity}", "extract_repair_user"), row.llm_calls)
        row.records, row.n_raw, row.n_dropped, row.n_repaired_evidence = parsed
        # extract.speaker_event_projection, extract.object_creator_projection (common.method.projections)
        row.records = add_projections(row.records, view, episode, *projections)
    except (ValueError, LLMCallError) as exc:
        # The episode stays retrievable through the lexical and dense routes.
        row.repaired = len(row.llm_calls) > 1
        row.fallback_used, row.error = True, fallback_error(exc)
    return row
