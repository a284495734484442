"""Protocol cards: what each outside memory system's reference evaluation does, and where the harness departs.

Every outside system carries a machine-readable card beside its adapter: ``systems/<name>/card.yaml``
for a system in its own environment, ``common/systems/cards/<name>.yaml`` for one in the harness's
process. A card says where the system's reference LoCoMo evaluation is (repository, commit, path),
what it ingests and how (unit, speaker names, dates, captions), its search call and settings under
each protocol, its rendering, the answer prompt the reference uses, the embedding model the
reference used, and every departure of the harness with its reason and the protocols it affects.

``systems.protocol: common`` is the harness's protocol (its answer prompt and judge, only the buffer
is the system's); ``native`` runs each system as its reference does. A departure lists the
protocols it applies to, so a row can say how many departures its protocol run has.

A card cannot silently lie about what the adapter does (``check``): under each protocol, the
adapter's resolved settings (``MemorySystem.search_settings()``: an in-process system's
``settings()``; a child's hello ``settings``, and the ``limit`` it is sent unless those name a
depth of their own) are compared with the card's
``search.<protocol>.settings`` (adapter setting names, exact values: every one must be reported
and equal) and with its ``k`` (a number, when those settings name no depth and the adapter reports exactly one
of ``k``, ``top_k``, ``limit``).
Every run does it (a disagreement is printed, and shown beside the row in metrics.json and the
systems table); ``tests/test_system_cards.py`` does it for every in-process system and protocol.

The schema (YAML)::

    system: mem0                      # the name method.name takes
    title: mem0 (OSS, local)          # how tables name the row
    package: mem0ai==2.2.1            # what is installed (pip requirement), or the source
    version: 2.2.1
    reference:
      repository: mem0ai/mem0
      commit: 6ed7b2d                 # at least 7 hex digits
      path: evaluation/src/memzero/search.py   # one or more paths, comma-separated
      what: mem0's own LoCoMo evaluation (add.py, search.py, Makefile)
    embedding:
      reference: text-embedding-3-small
      harness: the run's embedding.model (all-MiniLM-L6-v2 by default)
    ingest: {unit: ..., speakers: ..., dates: ..., captions: ...}
    search:
      common: {call: ..., k: 10, mode: ...}
      native: {call: ..., k: 30, mode: ..., settings: {top_k: 30}}
    rendering: ...
    answer:
      reference: mem0's ANSWER_PROMPT
      common: harness
      native: mem0                     # answer.prompt style, or "agent" when the system answers (a system
                                       # in its own environment: "harness", "agent" or <id>, 07 then
                                       # answers with common/prompts/answer_<id>_user.txt)
    departures:
      - id: oss-not-platform
        what: the open-source library, not the hosted platform the reference used
        why: the platform is a cloud API
        protocols: [common, native]
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from common.core import prompts
from common.core.config import ConfigError
from common.core.yamlio import load_yaml
from common.systems import envs

PROTOCOLS = ("common", "native")
CARD_DIR = Path(__file__).resolve().parent / "cards"
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
INGEST_FIELDS = ("unit", "speakers", "dates", "captions")


@dataclass(frozen=True)
class Reference:
    repository: str
    commit: str
    path: str
    what: str = ""


@dataclass(frozen=True)
class Departure:
    id: str
    what: str
    why: str
    protocols: tuple[str, ...] = PROTOCOLS


@dataclass(frozen=True)
class Card:
    system: str
    title: str
    package: str
    version: str
    reference: Reference
    embedding: dict[str, str]
    ingest: dict[str, str]
    search: dict[str, dict[str, Any]]
    rendering: str
    answer: dict[str, str]
    departures: tuple[Departure, ...] = ()
    source: str = field(default="", compare=False)  # the card's file

    def departures_for(self, protocol: str) -> list[Departure]:
        """The departures a run under ``protocol`` has."""
        return [d for d in self.departures if protocol in d.protocols]

    def answers_itself(self, protocol: str) -> bool:
        """Whether the system's own agent answers under ``protocol`` (its card's answer says ``agent``)."""
        return self.answer.get(protocol) == "agent"

    def answer_prompt(self, protocol: str) -> Optional[str]:
        """The system's own answer prompt 07 renders under ``protocol`` (the card's answer names
        ``<id>`` for ``common/prompts/answer_<id>_user.txt``), or None: ``harness`` or ``agent``. A
        system in its own environment declares it here (its child does not run in 07)."""
        said = self.answer.get(protocol, "harness")
        if said in ("harness", "agent"):
            return None
        if not re.fullmatch(r"[a-z0-9_]+", said) or not prompts.exists(f"answer_{said}_user"):
            raise ConfigError(f"{self.source}: field 'answer.{protocol}' must be harness, agent or the id of "
                              f"an answer prompt (common/prompts/answer_<id>_user.txt), not {said!r}")
        return said


def card_path(name: str) -> Path:
    """Where ``name``'s card is: beside its adapter (``systems/<name>/card.yaml``), or under
    ``common/systems/cards/`` for a system run in the harness's process."""
    return envs.system_dir(name) / "card.yaml" if envs.is_system(name) else CARD_DIR / f"{name}.yaml"


def _text(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, (str, int, float)) or isinstance(value, bool) or not str(value).strip():
        raise ConfigError(f"{where}: field '{key}' must be a non-empty string")
    return str(value).strip()


def _mapping(raw: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = raw.get(key)
    if not isinstance(value, dict) or not value:
        raise ConfigError(f"{where}: field '{key}' must be a non-empty mapping")
    return value


def parse(raw: Any, where: str) -> Card:
    """A card from its YAML mapping; a ConfigError naming the file and the field when it is wrong."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: a card is a YAML mapping")
    ref = _mapping(raw, "reference", where)
    commit = _text(ref, "commit", f"{where}: reference")
    if not _COMMIT.match(commit):
        raise ConfigError(f"{where}: field 'reference.commit' must be 7-40 hex digits, not {commit!r}")
    reference = Reference(_text(ref, "repository", f"{where}: reference"), commit,
                          _text(ref, "path", f"{where}: reference"), str(ref.get("what") or ""))
    embedding = {k: str(v) for k, v in _mapping(raw, "embedding", where).items()}
    for key in ("reference", "harness"):
        _text(embedding, key, f"{where}: embedding")
    ingest = {k: str(v) for k, v in _mapping(raw, "ingest", where).items()}
    for key in INGEST_FIELDS:
        _text(ingest, key, f"{where}: ingest")
    search = _mapping(raw, "search", where)
    for protocol in PROTOCOLS:
        if not isinstance(search.get(protocol), dict) or not search[protocol]:
            raise ConfigError(f"{where}: field 'search.{protocol}' must be a non-empty mapping")
    answer = {k: str(v) for k, v in _mapping(raw, "answer", where).items()}
    for key in ("reference", *PROTOCOLS):
        _text(answer, key, f"{where}: answer")
    departures: list[Departure] = []
    for i, d in enumerate(raw.get("departures") or []):
        at = f"{where}: departures[{i}]"
        if not isinstance(d, dict):
            raise ConfigError(f"{at}: a departure is a mapping with id, what, why, protocols")
        protocols = tuple(d.get("protocols") or PROTOCOLS)
        bad = [p for p in protocols if p not in PROTOCOLS]
        if bad:
            raise ConfigError(f"{at}: field 'protocols' has {bad}; known: {list(PROTOCOLS)}")
        departures.append(Departure(_text(d, "id", at), _text(d, "what", at), _text(d, "why", at), protocols))
    ids = [d.id for d in departures]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{where}: departure ids repeat: {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    return Card(system=_text(raw, "system", where), title=_text(raw, "title", where),
                package=_text(raw, "package", where), version=_text(raw, "version", where),
                reference=reference, embedding=embedding, ingest=ingest, search=search,
                rendering=_text(raw, "rendering", where), answer=answer, departures=tuple(departures),
                source=where)


def load(name: str) -> Optional[Card]:
    """``name``'s card, or None when it has none (the built-in methods, a user's own system)."""
    path = card_path(name)
    if not path.is_file():
        return None
    try:
        raw = load_yaml(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    card = parse(raw, str(path))
    if card.system != name:
        raise ConfigError(f"{path}: field 'system' is {card.system!r}, the card of {name!r} must say {name!r}")
    return card


def all_names() -> list[str]:
    """The systems that carry a card: ``common/systems/cards/<name>.yaml`` and ``systems/<name>/card.yaml``."""
    own = [p.stem for p in sorted(CARD_DIR.glob("*.yaml"))]
    return own + [n for n in envs.names() if (envs.system_dir(n) / "card.yaml").is_file() and n not in own]


def relative(path: str | Path) -> str:
    """A card's path from the project's root (as written in tables and docs), else as given."""
    p = Path(path).resolve()
    return str(p.relative_to(envs.REPO)) if p.is_relative_to(envs.REPO) else str(path)


# The adapter settings a card's ``k`` is read from (the name each adapter gives its search depth).
K_NAMES = ("k", "top_k", "limit")


@dataclass(frozen=True)
class Check:
    """A card against an adapter's resolved settings under one protocol."""

    checked: dict[str, Any]  # what agreed: card key -> value
    mismatches: tuple[str, ...]  # "top_k: card 30, adapter 10"

    def as_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "mismatches": list(self.mismatches)}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return str(a).strip().lower() == str(b).strip().lower()


def check(card: Card, protocol: str, resolved: dict[str, Any]) -> Check:
    """``card``'s declared search settings for ``protocol`` against what the adapter resolved."""
    declared = card.search.get(protocol) or {}
    checked: dict[str, Any] = {}
    wrong: list[str] = []
    settings = declared.get("settings") or {}
    if not isinstance(settings, dict):
        wrong.append(f"search.{protocol}.settings: not a mapping")
        settings = {}
    for key, value in settings.items():
        if key not in resolved:
            wrong.append(f"{key}: card {value!r}, not reported by the adapter")
        elif not _same(value, resolved[key]):
            wrong.append(f"{key}: card {value!r}, adapter {resolved[key]!r}")
        else:
            checked[key] = value
    # The card's k, when its settings name no depth of their own, against the adapter's only one.
    k_names = [n for n in K_NAMES if n in resolved] if not any(n in settings for n in K_NAMES) else []
    k = declared.get("k")
    if isinstance(k, (int, float)) and not isinstance(k, bool) and len(k_names) == 1:
        if _same(k, resolved[k_names[0]]):
            checked["k"] = k
        else:
            wrong.append(f"k: card {k!r}, adapter {k_names[0]} {resolved[k_names[0]]!r}")
    return Check(checked, tuple(wrong))
