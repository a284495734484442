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

``extract.speaker_event_rule: code`` is their rule as their code applies it: the evidence turn must
contain the entity anywhere (not in the sentence with the verb), the verbs include attend(ing) and
participate(ing), and a record whose entity is the speaker is projected too.

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


# The authors' forms (their extract_episode): attend/attended/attending, participate/participated/
# participating beside went to / visited / joined; the pronoun and verb within one sentence of the turn.
_CODE_GAP = r"[^.!?]{0,180}?"
CODE_VERBS = (("attend", re.compile(rf"\b(?:i|we)\b{_CODE_GAP}\b(?:attend(?:ed|ing)?|went to|visited|joined|"
                                    rf"participat(?:e|ed|ing))\b", re.I)),
              ("see", re.compile(rf"\b(?:i|we)\b{_CODE_GAP}\b(?:saw|see|seen|watched|heard|listened to)\b", re.I)))


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|\n", text) if s.strip()]


def _matches(rule: str, target: str, text: str, pattern: re.Pattern[str]) -> bool:
    """harness: the entity and the verb in one sentence; code: the entity anywhere in the turn."""
    if rule == "code":
        return target in norm(text) and bool(pattern.search(text))
    return any(target in s.lower() and pattern.search(s) for s in _sentences(text))


def speaker_event(records: list[Record], view: MemoryView, rule: str = "harness") -> list[Record]:
    out = []
    verbs = CODE_VERBS if rule == "code" else VERBS
    for r in records:
        if r.entity_type not in EVENT_TYPES or not norm(r.entity):
            continue
        for dia in r.evidence_dia_ids:
            turn = view.turns.get(dia)
            if turn is None or not turn.speaker.strip() or (rule != "code" and norm(turn.speaker) == norm(r.entity)):
                continue
            target = norm(r.entity) if rule == "code" else r.entity.lower()
            for prop, pattern in verbs:
                if _matches(rule, target, turn.text, pattern):
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
                    object_creator_on: bool, speaker_event_rule: str = "harness") -> list[Record]:
    """``records`` plus the switched-on projections, de-duplicated as the extraction step does (first
    occurrence wins), projections numbered after the model's records."""
    extra = (object_creator(records, view, episode) if object_creator_on else []) + \
        (speaker_event(records, view, speaker_event_rule) if speaker_event_on else [])
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
