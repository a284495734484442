"""Protocol fingerprints: a short hash saying exactly which protocol produced a score.

Two numbers are comparable only when the dataset, the prompts, the models and their decoding,
the method settings, the scoring policy and the code's protocol version all agree. The
fingerprint hashes all of them; it is printed beside every score, stored in ``metrics.json``,
and a run directory refuses to resume (mix rows) under a different one.

* The RUN fingerprint covers everything up to the answers: dataset sha256, the text of every
  non-judge prompt, the partition/extract/plan/bridge/answer/memory models and decoding parameters, and the
  method sections of the config (episodes, extract, embedding model, index, plan, retrieve,
  method, answer). Question selection (limit, subset) is not part of it: a larger selection extends a
  run, and every table states its k/n.
* A JUDGE fingerprint adds the judge model, its decoding, its prompt texts and the benchmark's
  scoring policy (which categories count, how failures count) to the run fingerprint.

Endpoints (base URLs), keys, cache paths and concurrency are deliberately excluded: they do not
change outputs, and keys must never reach an artifact.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from common.core.config import Config, RoutesConfig
from common.core.prompts import PROMPT_DIR

# Bump when a code change alters any artifact or score for the same config and data.
# 2026.11.2: bridges resolved in 06; 2026.12.1: dense chunks under the authors' header; 2026.12.2:
# retrieval keeps what the authors' code kept (no buffer cap in the paper configs, the code's
# structured gates, placeholder values, first-person anchors, per-hop dense_only).
PROTOCOL_VERSION = "2026.12.2"

METHOD_SECTIONS = ("episodes", "extract", "embedding", "index", "prompts", "plan", "retrieve", "method", "answer")
# Settings added after runs were made, left out while they keep their default so those runs keep
# their fingerprint (a changed value counts, like any other setting).
LATER_DEFAULTS: dict[str, dict[str, Any]] = {
    "embedding": {"runtime": "torch", "long_texts": "truncate"},
    "prompts": {"set": "paper"},
    "plan": {"validation": "schema", "audit": False, "repair": "harness", "fallback": "harness"},
    "answer": {"rerank": False, "rerank_max": 20, "verify": False, "rerank_keep_all": True, "draft": "plain",
               "verify_personal": True, "draft_prompt": "answer_system",
               "keep_whole_point": False, "routes": dataclasses.asdict(RoutesConfig()), "strip": True,
               "rerank_pad_operators": False, "draft_rules": False, "draft_audit": False, "verify_checklist": False,
               "verify_short": True},
    "extract": {"speaker_event_projection": False, "object_creator_projection": False, "speaker_event_rule": "harness"},
    "method": {"context_builder": "harness", "context_hash_seed": None},
    "retrieve": {"entity_match": "fuzzy", "field_scores": "harness", "block_empty_bridge": False,
                 "broad_state_lookup": False, "block_rule": "empty_bridge", "lexical_aliases": False,
                 "lexical_stopwords": "harness", "lexical_phrase_text": "counted", "bridge_question": True},
}
# The roles of those switches, fingerprinted only when their switch is on.
SWITCHED_ROLES = {"plan_audit": ("plan", "audit"), "answer_rerank": ("answer", "rerank"),
                  "answer_verify": ("answer", "verify"), "answer_draft": ("answer", "draft"),
                  "answer_count": ("answer", "routes", "count"),
                  "answer_temporal": ("answer", "routes", "temporal", "relative_age"),
                  "answer_order": ("answer", "routes", "order")}
# A switch's value when off (all others are booleans, off = False).
SWITCH_OFF = {("answer", "draft"): "plain"}


AUTHORS_PREFIX = "judge_lme_authors_"  # judge.prompt: authors (the authors' LongMemEval judge)
EXCLUDED_FIELDS = {"base_url", "timeout", "cache_path", "batch_size", "device"}
FILE = "fingerprint.json"


class FingerprintMismatch(RuntimeError):
    """A run directory holds rows made under another protocol."""


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode("utf-8")).hexdigest()


def _switched(cfg: Config, role: str) -> bool:
    """Whether a switched role's switch is on: ``(section, key)``, or ``(section, block, key, ...)``
    for a block of switches (answer.routes), any of whose keys turns the role on."""
    section, *rest = SWITCHED_ROLES[role]
    node = getattr(cfg, section)
    if len(rest) == 1:
        return getattr(node, rest[0]) != SWITCH_OFF.get((section, rest[0]), False)
    block = getattr(node, rest[0])
    return any(getattr(block, k) for k in rest[1:])


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in EXCLUDED_FIELDS}


def _role(cfg: Config, role: str) -> dict[str, Any]:
    return _clean(dataclasses.asdict(cfg.role(role)))


def _prompt_hashes(judge: bool) -> dict[str, str]:
    out = {}
    for p in sorted(PROMPT_DIR.glob("*.txt")):
        if p.stem.startswith("judge_") == judge:
            out[p.stem] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return out


def _set_prompt_hashes(cfg: Config) -> dict[str, str]:
    """The prompt-set files (``common/prompts/<set>/``), only for a run that uses one of them: the
    set itself, or a switch whose prompts live there (plan.audit, plan.repair, answer.rerank, answer.verify)."""
    used = (cfg.prompts.set != "paper" or cfg.plan.repair != "harness"
            or any(_switched(cfg, r) for r in SWITCHED_ROLES))
    if not used:
        return {}
    return {f"{p.parent.name}.{p.stem}": hashlib.sha256(p.read_bytes()).hexdigest()[:16]
            for p in sorted(PROMPT_DIR.glob("*/*.txt"))}


def _data_hashes(cfg: Config) -> dict[str, str]:
    """Data files a switch reads (retrieve.lexical_aliases: the lexical guard's alias and term sets),
    only for a run that reads them, so that editing one shows in the fingerprint."""
    if not cfg.retrieve.lexical_aliases:
        return {}
    path = PROMPT_DIR / "code_rules" / "lexical_aliases.yaml"
    return {"code_rules.lexical_aliases.yaml": hashlib.sha256(path.read_bytes()).hexdigest()[:16]}


def run_components(cfg: Config, dataset_sha256: str) -> dict[str, Any]:
    return {
        "protocol_version": PROTOCOL_VERSION,
        "benchmark": cfg.benchmark,
        "dataset_sha256": dataset_sha256,
        "prompts": {**_prompt_hashes(judge=False), **_set_prompt_hashes(cfg), **_data_hashes(cfg)},
        "roles": {r: _role(cfg, r) for r in ("partition", "extract", "plan", "bridge", "answer", "memory",
                                              *SWITCHED_ROLES)
                  if r not in SWITCHED_ROLES or _switched(cfg, r)},
        # A section added later (prompts) is left out while it holds only defaults.
        "method": {s: sec for s in METHOD_SECTIONS if (sec := _method_section(cfg, s)) or s != "prompts"},
        # The parity cap on every system's buffer (systems.buffer_tokens): only when set, so the
        # fingerprints of runs without it stay as they were.
        **({"parity": {"buffer_tokens": cfg.systems.buffer_tokens}} if cfg.systems.buffer_tokens else {}),
        # systems.protocol: native changes what every outside system does; only when set, as parity.
        **({"systems_protocol": cfg.systems.protocol} if cfg.systems.protocol != "common" else {}),
        # LoCoMo-Plus: how the Cognitive items are stitched changes the memories (data.stitch; the
        # LoCoMo file itself is in dataset_sha256).
        **({"stitch": {k: v for k, v in dataclasses.asdict(cfg.data.stitch).items() if k != "locomo_path"}}
           if str(cfg.benchmark) == "locomo_plus" else {}),
    }


def _method_section(cfg: Config, section: str) -> dict[str, Any]:
    out = _clean(dataclasses.asdict(getattr(cfg, section)))
    # e.g. embedding.runtime: its default (torch) is left out so that runs made before it keep
    # their fingerprint; onnx vectors differ in the last digits, so it counts when set.
    for name, default in LATER_DEFAULTS.get(section, {}).items():
        if out.get(name) == default:
            del out[name]
    return out


def judge_components(cfg: Config, run_fp: str, policy: str) -> dict[str, Any]:
    beam, plus = str(cfg.benchmark) == "beam", str(cfg.benchmark) == "locomo_plus"
    realtalk = str(cfg.benchmark) == "realtalk"
    prompts = {k: v for k, v in _prompt_hashes(judge=True).items()
               if k == cfg.judge.prompt
               or (cfg.judge.prompt == "official" and k.startswith("judge_lme_") and not k.startswith(AUTHORS_PREFIX)
                   and not plus)
               or (cfg.judge.prompt == "authors" and k.startswith(AUTHORS_PREFIX))
               or (beam and k.startswith("judge_beam_")) or (realtalk and k.startswith("judge_realtalk_"))
               or (plus and k.startswith("judge_locomo_plus_"))}
    out: dict[str, Any] = {"run": run_fp, "judge_role": _role(cfg, "judge"), "judge_prompt": cfg.judge.prompt,
           "judge_prompts": prompts, "scoring_policy": policy}
    if cfg.judge.runs != 1:  # only then: single-run fingerprints made before judge.runs stay valid
        out["judge_runs"] = cfg.judge.runs
    if beam:  # the scoring switches (common.evaluation.beam): only BEAM runs carry them
        out["beam_scoring"] = {"float_scores": cfg.score.beam_float_scores,
                               "fill_question": cfg.score.beam_fill_question}
        if cfg.score.beam_empty_answers != "zero":  # added later: only when set, older fingerprints stay
            out["beam_scoring"]["empty_answers"] = cfg.score.beam_empty_answers
    if realtalk:  # the GPT score's own role (its model: the judge's, or officially the answer model's)
        out["gpt_score_role"] = _role(cfg, "gpt_score")
        out["realtalk_scoring"] = {"gpt_score_model": cfg.score.realtalk_gpt_score_model,
                                   "sampling": cfg.score.realtalk_sampling}
    if plus:  # common.evaluation.locomo_plus: the headline parser and the failed-answer rule
        out["locomo_plus_scoring"] = {"parser": cfg.score.locomo_plus_parser,
                                      "error_answers": cfg.score.locomo_plus_error_answers}
    return out


def short(components: dict[str, Any]) -> str:
    return _digest(components)[:12]


def diff(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the components that differ (for a one-line refusal)."""
    out = []
    for k in sorted(set(before) | set(after)):
        a, b = before.get(k), after.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += diff(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out


def shown(name: str) -> str:
    """A differing component as the config key a user would set: the method sections sit under
    ``method`` in the fingerprint, and the config's own ``method`` section would read
    ``method.method.name``; it is the key ``method.name``."""
    return name.removeprefix("method.") if name.startswith("method.method.") else name


def check_and_store(run_dir: Path, components: dict[str, Any], *, key: str, force: bool) -> str:
    """Compare with the fingerprint stored in the run directory; store it when new or forced.

    ``key`` is "run" or "judge:<name>". Returns the short fingerprint.
    """
    path = run_dir / FILE
    stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    fp = short(components)
    old = stored.get(key)
    if old and old["id"] != fp and not force:
        changed = ", ".join(shown(d) for d in diff(old["components"], components)[:6]) or "components"
        raise FingerprintMismatch(
            f"{run_dir} was made under protocol {old['id']} and this config gives {fp} "
            f"(changed: {changed}); use a new run name (RUN=...), or redo it under this config with FORCE=1 "
            "(--force)")
    if old is None or old["id"] != fp:
        stored[key] = {"id": fp, "components": components}
        run_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return fp


def stored(run_dir: Path, key: str = "run") -> str | None:
    path = run_dir / FILE
    if not path.exists():
        return None
    entry = json.loads(path.read_text(encoding="utf-8")).get(key)
    return entry["id"] if entry else None


def imported(run_dir: Path) -> dict[str, Any] | None:
    """The published source of an imported run (``common.pipeline.importer``), None for a run made here.

    An imported run's RUN fingerprint hashes the source file and the published prompts instead of
    this harness's settings; stages that would add answers to it are refused.
    """
    path = run_dir / FILE
    if not path.exists():
        return None
    entry = json.loads(path.read_text(encoding="utf-8")).get("run") or {}
    source = entry.get("components", {}).get("imported")
    return source if isinstance(source, dict) else None
