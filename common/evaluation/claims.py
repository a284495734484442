"""The registry of published claims (``configs/claims.yaml``): what each system's authors printed.

One entry per claim: the number as printed, where it was printed, the per-question file it comes
with (repository, path, commit, or why there is none), and what the source states about its
answer model, judge model, judge prompt and denominator. ``common.pipeline.importer`` records an
entry in the run it imports; ``common.report.claims`` (``make claims``) recomputes the number.
Entries are validated like configs (``common.core.config.build``): unknown keys and wrong types
are one-line errors naming the key.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from common.core.config import ConfigError, build, read_yaml_mapping, resolve_path

DEFAULT_CLAIMS = "configs/claims.yaml"
FORMATS = ("zep", "mem0", "hindsight", "locomo-audit", "longmemeval")


@dataclass(frozen=True)
class PerQuestion:
    """The per-question result file a claim comes with."""

    available: bool = False
    format: Optional[Literal["zep", "mem0", "hindsight", "locomo-audit", "longmemeval"]] = None
    repository: Optional[str] = None
    path: Optional[str] = None
    commit: Optional[str] = None
    sha256: Optional[str] = None
    why: Optional[str] = None  # when not available (or not reachable), why


@dataclass(frozen=True)
class Claim:
    id: str = ""
    system: str = ""
    benchmark: Literal["locomo", "longmemeval"] = "locomo"
    value: str = ""  # as printed, percent
    printed: str = ""
    published_in: str = ""
    per_question: PerQuestion = field(default_factory=PerQuestion)
    answer_model: str = "not stated"
    judge_model: str = "not stated"
    judge_prompt: str = "not stated"
    denominator: str = "not stated"
    denominator_note: str = ""
    note: str = ""
    runs: list = field(default_factory=list)  # harness run names that reproduce the claimed setting

    @property
    def percent(self) -> Optional[float]:
        try:
            return float(self.value)
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def load_claims(path: Optional[str | Path] = None) -> dict[str, Claim]:
    """Every claim of the registry by id; a malformed entry is a ``ConfigError`` naming it."""
    p = resolve_path(str(path or DEFAULT_CLAIMS))
    data = read_yaml_mapping(p, "claims registry")
    entries = data.get("claims")
    if not isinstance(entries, dict):
        raise ConfigError(f"{p}: claims: expected a mapping of claim id -> entry")
    out: dict[str, Claim] = {}
    for cid, entry in entries.items():
        if not isinstance(entry, dict):
            raise ConfigError(f"{p}: claims.{cid}: expected a mapping")
        try:
            claim = build(Claim, {**entry, "id": str(cid)}, f"claims.{cid}")
        except ConfigError as exc:
            raise ConfigError(f"{p}: {exc}") from None
        for key in ("system", "value", "published_in"):
            if not getattr(claim, key):
                raise ConfigError(f"{p}: claims.{cid}.{key}: missing")
        if claim.percent is None:
            raise ConfigError(f"{p}: claims.{cid}.value: expected a number as printed, got {claim.value!r}")
        if not all(isinstance(r, str) for r in claim.runs):
            raise ConfigError(f"{p}: claims.{cid}.runs: expected a list of run names")
        out[str(cid)] = claim
    return out


def get_claim(claim_id: str, path: Optional[str | Path] = None) -> Claim:
    claims = load_claims(path)
    if claim_id not in claims:
        raise ConfigError(f"unknown claim {claim_id!r}; known: {', '.join(sorted(claims))}")
    return claims[claim_id]
