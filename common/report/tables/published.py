"""The paper's transcribed rows (``configs/published.yaml``) and when one is comparable with a run.

A published row carries the values as printed plus what decides comparability: the answer
model, the judge model and the evaluation protocol. The notes every table prints under its
paper rows (their sources, their own notes, what a protocol id means) are built here too.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from common.core.config import ConfigError, read_yaml_mapping, resolve_path

NOT_STATED, NOT_REPORTED, NOT_RUN, NOT_APPLICABLE = "not stated", "not reported", "not run", "not applicable"
DASH = "—"
DEFAULT_PUBLISHED = "configs/published.yaml"

COMPARABLE_NOTE = ("Comparable with: a paper row (P) and a measured row (M) are comparable only if answer model, "
                   "judge model and evaluation protocol all match (model names compared without snapshot date) and "
                   "the measured run covers the whole benchmark the paper's number is over (a PARTIAL run never is); "
                   "other settings (e.g. the embedding model) may still differ, see each run's config.resolved.yaml.")
# The paper's ablations ran on an unpublished 88-question subset: a subset run is not refused against them.
ABLATION_SUBSET = "the paper's unpublished ablation subset"


@dataclass(frozen=True)
class Identity:
    """What decides comparability: answer model, judge model, evaluation protocol (display forms),
    and what the number covers: ``partial`` is a measured run's PARTIAL mark (``""``: the whole
    benchmark), or a published number's own subset (the paper's ablation subset; ``""``: a claim
    over the whole benchmark)."""

    answer_model: str
    judge_model: str
    protocol: str
    partial: str = ""


@dataclass(frozen=True)
class PublishedRow:
    method: str
    values: dict[str, str]  # column key -> value as printed, or "not reported"
    source: str
    identity: Identity
    note: str = ""
    benchmark: str = ""


@dataclass
class Published:
    path: Path
    protocols: dict[str, dict[str, Any]]
    tables: dict[str, dict[str, Any]]
    ablations: dict[str, Any]

    def rows(self, table: str) -> list[PublishedRow]:
        return [self._row(f"tables.{table}.rows[{i}]", r) for i, r in enumerate(self.tables[table]["rows"])]

    def panel(self, name: str) -> tuple[dict[str, str], str, Identity, str]:
        """(values by variant, source, identity, figure) of one ablation panel."""
        p = self.ablations.get("panels", {}).get(name)
        if p is None:
            raise ConfigError(f"{self.path}: ablations.panels.{name}: missing")
        row = self._row(f"ablations.panels.{name}", {"method": name, **p})
        ident = dataclasses.replace(row.identity, partial=ABLATION_SUBSET)
        return row.values, row.source, ident, str(p.get("figure", ""))

    def _row(self, where: str, raw: Any) -> PublishedRow:
        if not isinstance(raw, dict):
            raise ConfigError(f"{self.path}: {where}: expected a mapping")
        for key in ("method", "values", "source", "answer_model", "judge_model", "protocol"):
            if key not in raw:
                raise ConfigError(f"{self.path}: {where}.{key}: missing "
                                  f"(write '{NOT_STATED}' if the paper does not say)")
        values = raw["values"]
        if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
            raise ConfigError(f"{self.path}: {where}.values: expected strings as printed in the paper")
        for col, v in values.items():
            if v != NOT_REPORTED and number(v) is None:
                raise ConfigError(f"{self.path}: {where}.values.{col}: {v!r} is neither a number nor '{NOT_REPORTED}'")
        proto = str(raw["protocol"])
        if proto not in self.protocols and proto != NOT_STATED:
            raise ConfigError(f"{self.path}: {where}.protocol: unknown protocol {proto!r} (see protocols:)")
        return PublishedRow(str(raw["method"]), dict(values), str(raw["source"]),
                            Identity(str(raw["answer_model"]), str(raw["judge_model"]), proto),
                            str(raw.get("note", "")).strip(), str(raw.get("benchmark", "")))

    def protocol_of(self, prompt_ids: set[str]) -> str:
        """The protocol id whose ``judge_prompts`` patterns cover every prompt id of a judge file."""
        for pid, spec in self.protocols.items():
            pats = spec.get("judge_prompts") or []
            if prompt_ids and pats and all(any(fnmatch.fnmatchcase(p, pat) for pat in pats) for p in prompt_ids):
                return pid
        return f"unknown (judge prompts {', '.join(sorted(prompt_ids)) or 'none'})"


def load_published(path: str = DEFAULT_PUBLISHED) -> Published:
    source = resolve_path(path)
    data = read_yaml_mapping(source, "published rows")
    pub = Published(source, dict(data.get("protocols") or {}), dict(data.get("tables") or {}),
                    dict(data.get("ablations") or {}))
    for name in ("table1", "table2", "table3", "table10"):
        if name not in pub.tables:
            raise ConfigError(f"{source}: tables.{name}: missing")
        pub.rows(name)  # validate every row now: a typo fails before any table is written
    return pub


def number(text: str) -> Optional[float]:
    """A printed value ("90.6", "8,499", "+0.750") as a float, or None."""
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def canonical_model(name: str) -> Optional[str]:
    """Model names as compared: lowercase, no ``org/`` prefix, no ``-YYYY-MM-DD`` snapshot date.

    "GPT-4.1-mini" (paper) and "gpt-4.1-mini-2025-04-14" (config) are the same model; a pair
    "A vs B" is compared part by part. None for "not stated".
    """
    text = name.strip()
    if not text or text.lower() == NOT_STATED:
        return None
    parts = [re.sub(r"-\d{4}-\d{2}-\d{2}$", "", p.strip().rsplit("/", 1)[-1].lower())
             for p in re.split(r"\s+vs\.?\s+", text)]
    return " vs ".join(parts)


def comparable(published: Identity, measured: Identity) -> tuple[bool, str]:
    """Same answer model, judge model and protocol; else the reasons why not."""
    reasons = []
    for attr, label in (("answer_model", "answer model"), ("judge_model", "judge"), ("protocol", "protocol")):
        a, b = getattr(published, attr), getattr(measured, attr)
        if a.strip().lower() == NOT_STATED:
            reasons.append(f"{label} not stated")
        elif (canonical_model(a) != canonical_model(b)) if attr != "protocol" else a != b:
            reasons.append(f"{label} {a} vs {b}")
    if measured.partial and not published.partial:  # a partial run is never the number of a full claim
        reasons.append(f"coverage {measured.partial} vs the whole benchmark")
    return not reasons, "; ".join(reasons)


def source_notes(pubs: list[tuple[str, PublishedRow]], published: Published) -> list[str]:
    """Where each paper row comes from, its own note, and what its protocol id means."""
    grouped: dict[str, list[str]] = {}
    for ref, row in pubs:
        grouped.setdefault(row.source, []).append(ref)
    notes = [f"{', '.join(refs)}: {src}." for src, refs in grouped.items()]
    notes += [f"{ref} ({row.method}): {row.note}" for ref, row in pubs if row.note]
    used = dict.fromkeys(row.identity.protocol for _, row in pubs if row.identity.protocol in published.protocols)
    return notes + [f"Protocol {pid}: {' '.join(str(published.protocols[pid].get('description', '')).split())}"
                    for pid in used]
