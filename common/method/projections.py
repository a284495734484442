"""Deterministic projections added to an episode's extracted records (reference_notes 3.3).

The authors' extraction step adds records the model may have left implicit, before
de-duplication; the generic two are switches here (``extract.*_projection``):

* speaker -> event (``speaker_event_projection``): a record about an event, organization, place,
  person or activity whose evidence turn contains the record's entity and says, in one sentence,
  "I/we ... attended / went to / visited / joined / participated" (-> ``attend``) or "I/we ...
  saw / see / seen / watched / heard / listened to" (-> ``see``), with at most 180 characters
  between the pronoun and the verb, gives ``<speaker> (person) attend|see <entity>`` on that turn;
  at most one per record and turn, attend checked first.
* object -> creator (``object_creator_projection``): an object record whose entity is a painting,
  drawing or art, whose ``creator`` value is a speaker (else whose source is a speaker), gives
  ``<speaker> (person) paint "made <entity>"`` with the same evidence.

Their third rule (a shoe coreference) is written for one conversation and is not reproduced.
"""
from __future__ import annotations

import re
from dataclasses import replace

from common.core.schema import Episode, Record
from common.core.text import norm
from common.method.render import MemoryView

EVENT_TYPES = frozenset({"event", "organization", "place", "person", "activity"})
ART_OBJECTS = frozenset({"painting", "paintings", "drawing", "drawings", "art"})
_GAP = r"[^.!?\n]{0,180}?"
VERBS = (("attend", re.compile(rf"\b(?:i|we){_GAP}\b(?:attended|went to|visited|joined|participated)\b", re.I)),
         ("see", re.compile(rf"\b(?:i|we){_GAP}\b(?:saw|see|seen|watched|heard|listened to)\b", re.I)))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|\n", text) if s.strip()]


def speaker_event(records: list[Record], view: MemoryView) -> list[Record]:
    out = []
    for r in records:
        if r.entity_type not in EVENT_TYPES or not norm(r.entity):
            continue
        for dia in r.evidence_dia_ids:
            turn = view.turns.get(dia)
            if turn is None or norm(turn.speaker) == norm(r.entity):
                continue
            target = r.entity.lower()
            for prop, pattern in VERBS:
                if any(target in s.lower() and pattern.search(s) for s in _sentences(turn.text)):
                    out.append(replace(r, record_id="", entity=turn.speaker, entity_type="person", property=prop,
                                       value=r.entity, condition_property="", condition_value="",
                                       property_kind="relation", source=turn.speaker, evidence_dia_ids=[dia],
                                       projection_kind="speaker_event_projection"))
                    break
    return out


def object_creator(records: list[Record], view: MemoryView, episode: Episode) -> list[Record]:
    speakers = {norm(view.turns[d].speaker): view.turns[d].speaker for d in episode.dia_ids if d in view.turns}
    out = []
    for r in records:
        if r.entity_type != "object" or norm(r.entity) not in ART_OBJECTS:
            continue
        who = speakers.get(norm(r.value)) if r.property == "creator" else None
        who = who or speakers.get(norm(r.source))
        if who:
            out.append(replace(r, record_id="", entity=who, entity_type="person", property="paint",
                               value=f"made {r.entity}", condition_property="", condition_value="",
                               property_kind="relation", source=who, projection_kind="speaker_object_projection"))
    return out


def add_projections(records: list[Record], view: MemoryView, episode: Episode, speaker_event_on: bool,
                    object_creator_on: bool) -> list[Record]:
    """``records`` plus the switched-on projections, de-duplicated as the extraction step does (first
    occurrence wins), projections numbered after the model's records."""
    extra = (object_creator(records, view, episode) if object_creator_on else []) + \
        (speaker_event(records, view) if speaker_event_on else [])
    if not extra:
        return records
    seen = {_key(r) for r in records}
    out = list(records)
    for r in extra:
        if _key(r) not in seen:
            seen.add(_key(r))
            out.append(replace(r, record_id=f"{episode.episode_id}::index_{len(out) + 1:03d}"))
    return out


def _key(r: Record) -> tuple:
    return (norm(r.entity), r.entity_type, r.property, norm(r.value), r.condition_property,
            norm(r.condition_value), tuple(r.evidence_dia_ids))
