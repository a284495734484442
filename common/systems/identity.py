"""What ran as a run's memory system: its name, protocol, version, card and departures, and embedding model.

06 records it in its manifest (``system``) once the system has started (a child's hello gives its
version and resolved settings); 09 copies it into ``metrics.json`` (``system``, and ``embedding``:
the model, its limit, and the texts over the limit each stage met), and the systems table, the
report and the line under every score table print it. So a row says which protocol it ran
(``systems.protocol``), how many departures from the system's reference evaluation that protocol
has (its card, ``common.systems.cards``), which version of the system ran, and which embedding
model stood in for the reference's.

The version is the system's own word when it gives one (a child's hello), else the installed
distribution of the package its card names (in-process: the harness's environment; a child: the
exact pin of ``systems/<name>/requirements.txt``); a card whose declared version differs is said so.
"""
from __future__ import annotations

import importlib.metadata
import json
import re
from pathlib import Path
from typing import Any, Optional

from common.core import artifacts
from common.core.config import Config
from common.core.fingerprint import PROTOCOL_VERSION
from common.core.io import read_jsonl, write_json
from common.core.yamlio import load_yaml
from common.systems import cards, envs, outcomes
from common.systems.process import ProcessSystem

MANIFEST_KEY = "system"


def embedding_used(cfg: Config) -> dict[str, Any]:
    """The embedding model the run gave its memory system (``ctx.embedder()`` and the gateway's
    ``/v1/embeddings``, whatever model name a system asks for), with its limit and the long-text rule."""
    e = cfg.embedding
    local = e.backend != "openai"
    rule = "truncated" if e.long_texts == "truncate" else "windowed"
    runtime = f", {e.runtime}" if e.runtime != "torch" else ""
    label = (f"{e.model} ({e.max_length} word pieces, longer texts {rule}{runtime})" if local
             else f"{e.model} (an /v1/embeddings server's own limit)")
    return {"model": e.model, "backend": e.backend, "runtime": e.runtime if local else None,
            "max_length": e.max_length if local else None, "long_texts": e.long_texts, "label": label}


def _distribution(card: cards.Card) -> str:
    """The pip distribution a card's ``package`` names (``mem0ai==2.2.1`` -> ``mem0ai``)."""
    return re.split(r"[\[=<>~!; ]", card.package.strip(), maxsplit=1)[0]


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(card: cards.Card, in_process: bool) -> str:
    """The version of the card's package as installed for the system ('' when not found)."""
    dist = _distribution(card)
    if not dist:
        return ""
    if in_process:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return ""
    try:
        pins = envs.requirements(card.system)
    except envs.SystemEnvError:
        return ""
    for pin in pins:
        name, _, version = pin.partition("==")
        if _norm(re.sub(r"\[.*\]", "", name)) == _norm(dist):
            return version
    return ""


def describe(system: Any, cfg: Config, previous: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The identity of ``system`` as this run drives it; what cannot be read now (a resumed run starts
    no child: no version from its hello, no resolved settings) is kept from ``previous`` (the last
    06 manifest's)."""
    protocol = cfg.systems.protocol
    before: dict[str, Any] = previous or {}
    if (before.get("name"), before.get("protocol")) != (system.name, protocol):
        before = {}
    if not system.outside:  # the harness's own method: the harness's protocol version, no card
        return {"name": system.name, "outside": False, "protocol": protocol, "version": f"harness {PROTOCOL_VERSION}",
                "card": "", "departures": None, "embedding": embedding_used(cfg)}
    card = cards.load(system.name)
    out: dict[str, Any] = {"name": system.name, "outside": True, "protocol": protocol,
                           "version": system.version() or "", "card": "", "departures": None,
                           "embedding": embedding_used(cfg)}
    if card is not None:
        if not out["version"]:
            out["version"] = installed_version(card, in_process=not isinstance(system, ProcessSystem))
        out.update(title=card.title, card=cards.relative(card.source), card_version=card.version,
                   departures=len(card.departures_for(protocol)),
                   departure_ids=[d.id for d in card.departures_for(protocol)],
                   reference={"repository": card.reference.repository, "commit": card.reference.commit,
                              "path": card.reference.path},
                   reference_embedding=card.embedding.get("reference", ""))
        resolved = system.search_settings()
        if resolved is not None:
            out["card_check"] = cards.check(card, protocol, resolved).as_dict()
        elif before.get("card_check"):
            out["card_check"] = before["card_check"]
    if not out["version"] and before.get("version"):
        out["version"] = before["version"]
    return out


def problems(ident: dict[str, Any]) -> list[str]:
    """Where the card and what ran disagree: its settings, its version."""
    out = list((ident.get("card_check") or {}).get("mismatches") or [])
    if ident.get("card_version") and ident.get("version") and ident["card_version"] != ident["version"]:
        out.append(f"version: card {ident['card_version']}, ran {ident['version']}")
    return out


def _resolved_config(run_dir: Path) -> dict[str, Any]:
    path = run_dir / "config.resolved.yaml"
    return load_yaml(path.read_text(encoding="utf-8")) if path.exists() else {}


def of_run(run_dir: Path) -> dict[str, Any]:
    """A run's system identity: 06's manifest's, else (a run made before it was recorded, an imported
    run) what its resolved config says (name and protocol; version and departures unknown)."""
    path = artifacts.manifest_path(run_dir, "06_retrieve")
    if path.exists():
        recorded = json.loads(path.read_text(encoding="utf-8")).get(MANIFEST_KEY)
        if isinstance(recorded, dict):
            return recorded
    cfg = _resolved_config(run_dir)
    return {"name": str((cfg.get("method") or {}).get("name") or ""),
            "protocol": str((cfg.get("systems") or {}).get("protocol") or "common"), "version": "",
            "card": "", "departures": None, "recorded": False}


def embedding_block(run_dir: Path, cfg: Config) -> dict[str, Any]:
    """metrics.json's ``embedding``: the model and its limit, what long texts became, and the texts
    over the limit each stage met (04: EnSIMem's index rows; 06: the memories' ingestion and the
    searches, the gateway's requests included), distinct per memory or search."""
    index = read_jsonl(artifacts.path(run_dir, "index"), missing_ok=True)
    system = outcomes.summary(run_dir).get("long_texts") or {}
    over = {"04_index": sum(int(r.get("long_texts") or 0) for r in index),
            "06_retrieve_ingest": int(system.get("ingest") or 0), "06_retrieve": int(system.get("search") or 0)}
    counted = cfg.embedding.backend != "openai"
    return {**embedding_used(cfg), "over_limit": over if counted else None,
            "over_limit_total": sum(over.values()) if counted else None}


def label(ident: dict[str, Any]) -> str:
    """One line: ``mem0 2.2.1, protocol native, 1 departure (common/systems/cards/mem0.yaml)``."""
    name = ident.get("name") or "?"
    version = f" {ident['version']}" if ident.get("version") else " (version not recorded)"
    if not ident.get("outside", True):
        return f"{name} ({ident.get('version') or 'the harness'}), protocol {ident.get('protocol', 'common')}"
    deps = ident.get("departures")
    card = (f"{deps} departure{'s' if deps != 1 else ''} from its reference ({ident['card']})" if deps is not None
            else "no protocol card")
    issues = problems(ident)
    return (f"{name}{version}, protocol {ident.get('protocol', 'common')}, {card}"
            + (f"; card disagrees: {'; '.join(issues)}" if issues else ""))


def recorded(run_dir: Path) -> dict[str, Any]:
    """The identity 06's manifest holds now ({} when none)."""
    path = artifacts.manifest_path(run_dir, "06_retrieve")
    if not path.exists():
        return {}
    got = json.loads(path.read_text(encoding="utf-8")).get(MANIFEST_KEY)
    return got if isinstance(got, dict) else {}


def record(run_dir: Path, system: Any, cfg: Config, previous: dict[str, Any]) -> dict[str, Any]:
    """Write ``system``'s identity into 06's manifest (after its rows: a child's hello has been
    heard by then) and print what its card and the run disagree on."""
    ident = describe(system, cfg, previous)
    path = artifacts.manifest_path(run_dir, "06_retrieve")
    if path.exists():
        data = json.loads(path.read_text(encoding="utf-8"))
        data[MANIFEST_KEY] = ident
        write_json(path, data)
    for problem in problems(ident):
        print(f"WARNING: {system.name}'s protocol card ({ident.get('card')}) disagrees with this run: {problem}",
              flush=True)
    return ident
