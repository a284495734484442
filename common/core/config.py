"""One configuration schema for every benchmark, run and ablation.

A config is YAML validated against the dataclass tree below: unknown keys and wrong types are
errors that name the key. ``--set a.b=value`` overrides (YAML-parsed values) are applied after
the files. The resolved config is written into the run directory so every number can be traced
to the exact settings that produced it. No secret ever lives here: keys come from the
environment (see ``common.core.llm``).
"""
from __future__ import annotations

import dataclasses
import os
import re
import typing
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

from common.core import cache_store
from common.core.config_answer import (  # noqa: F401 (the one schema's names)
    AnswerConfig,
    JudgeConfig,
    RoutesConfig,
    ScoreConfig,
)
from common.core.config_method import (  # noqa: F401 (the one schema's names)
    EmbeddingConfig,
    EpisodesConfig,
    ExtractConfig,
    ImportPath,
    IndexConfig,
    MethodConfig,
    PlanConfig,
    RetrieveConfig,
    ScopeBudget,
)
from common.core.endpoints import parse_endpoints
from common.core.llm import RoleSettings
from common.core.yamlio import load_yaml

ROLES = ("partition", "extract", "plan", "bridge", "answer", "judge", "memory",
         "plan_audit", "answer_rerank", "answer_verify", "answer_draft", "answer_count", "answer_temporal",
         "answer_order", "gpt_score")
# The extra calls of the authors' planner and LongMemEval answer step (plan.audit, answer.rerank,
# answer.verify, answer.draft, answer.routes) have roles of their own, so the ledger and the dry run
# count them apart; their unset settings come from the role they assist, then from models.default.
ROLE_PARENT = {"plan_audit": "plan", "answer_rerank": "answer", "answer_verify": "answer", "answer_draft": "answer",
               "answer_count": "answer", "answer_temporal": "answer", "answer_order": "answer",
               "gpt_score": "judge"}
REPO_ROOT = Path(__file__).resolve().parents[2]


class ConfigError(ValueError):
    """A config file or override that does not fit the schema (one line, names the key)."""


@dataclass(frozen=True)
class RoleConfig:
    """Model settings of one LLM role; unset fields inherit from ``models.default``."""

    model: Optional[str] = None
    # One URL, or a list of replicas serving the same model: each item a URL or
    # {url: ..., concurrency: N} (N: that endpoint's bound; default llm.concurrency).
    base_url: Optional[Union[str, list]] = None
    temperature: Optional[float] = None
    seed: Optional[int] = None
    max_tokens: Optional[int] = None
    top_p: Optional[float] = None
    timeout: Optional[float] = None
    json_mode: Optional[bool] = None
    extra_body: Optional[dict] = None


@dataclass(frozen=True)
class ModelsConfig:
    default: RoleConfig = field(
        default_factory=lambda: RoleConfig(
            model="gpt-4.1-mini-2025-04-14", temperature=0.0, seed=42, timeout=120.0, json_mode=True
        )
    )
    partition: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=4096))
    extract: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=8192))
    plan: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=4096))
    bridge: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=512))  # authors' code: 512
    answer: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=256))
    judge: RoleConfig = field(default_factory=lambda: RoleConfig(model="gpt-4o-mini-2024-07-18"))
    # An outside memory system's own LLM calls (mem0's fact extraction), through the harness client.
    memory: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=4096))
    # The authors' max_tokens for these calls: audit 4096 (from plan), rerank 1400, verify 1400.
    plan_audit: RoleConfig = field(default_factory=RoleConfig)
    answer_rerank: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=1400))
    answer_verify: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=1400))
    # answer.draft: json: the answer as the authors' LongMemEval JSON draft, with their budget of 1200.
    answer_draft: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=1200))
    # answer.routes: the counting ledger's scans (the authors': 3000; their retry 2200 and
    # consolidation 4200 share it here) and the temporal ledger's extraction (1800).
    answer_count: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=3000))
    answer_temporal: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=1800))
    answer_order: RoleConfig = field(default_factory=lambda: RoleConfig(max_tokens=2200))  # their audit: 2200
    # REALTALK's official GPT score (0-1), a judge call of its own beside the LoCoMo judge; its unset
    # settings come from the judge role (score.realtalk_gpt_score_model: answer, from the answer role).
    gpt_score: RoleConfig = field(default_factory=RoleConfig)


@dataclass(frozen=True)
class PromptsConfig:
    # paper: the prompts printed in the paper's Appendix E (common/prompts/*.txt).
    # code_rules: the rules of the authors' code prompts (planner rules, extraction checklist,
    # answer safeguards), written for this harness (common/prompts/code_rules/, SOURCES.md).
    set: Literal["paper", "code_rules"] = "paper"


@dataclass(frozen=True)
class StitchConfig:
    """LoCoMo-Plus: how each Cognitive item is stitched into its LoCoMo conversation
    (common.benchmarks.locomo_plus_stitch; the defaults are the official code's)."""

    # The LoCoMo file stitched into; None: $LOCOMO_JSON, else locomo10.json beside the LoCoMo-Plus
    # file, else data/locomo10.json.
    locomo_path: Optional[str] = None
    # round_robin: item i with conversation i mod 10 (unified_input.py, the evaluation's input);
    # random: build_conv.py's random.choice, unseeded there, seeded here with ``seed``.
    pairing: Literal["round_robin", "random"] = "round_robin"
    seed: int = 42
    # official: build_conv.parse_time_gap ("several months later" matches nothing: 0 days);
    # extended: also "a couple of" (2), "a few" and "several" (3), and days.
    time_gaps: Literal["official", "extended"] = "official"
    # official: the stitched memory as the official dialogue is sent, no dates and no images;
    # dated: the LoCoMo sessions as they are, the cue and the question dated.
    context: Literal["official", "dated"] = "official"


@dataclass(frozen=True)
class DataConfig:
    path: Optional[str] = None  # raw benchmark file; else $<env>; else the default download
    env: str = "LOCOMO_JSON"
    # Memory ids to keep (LoCoMo conversation ids, LongMemEval question ids); empty = all.
    # ``conversations`` is the old name, still read with a warning (``ALIASES``).
    memories: list = field(default_factory=list)
    # N questions of each kept memory (a LongMemEval memory holds one question, so there N
    # questions of the file); None = all. How they are picked: ``limit_rule``.
    question_limit: Optional[int] = None
    # sample: drawn across the memory's categories (LoCoMo categories 1-4, LongMemEval question
    # types, BEAM abilities), seeded (common.benchmarks.sampling); first: the first N in file order.
    limit_rule: Literal["sample", "first"] = "sample"
    subset: Optional[str] = None  # a configs/subsets/*.yaml file: keep only its question_ids
    # LoCoMo's audited answer key (locomo-audit errors.json, CC BY-NC 4.0, never committed), e.g.
    # ../shared/data/locomo-audit/errors.json; None: the audited-key rows say "not configured".
    errata: Optional[str] = None
    # BEAM: the tier folder read when neither data.path nor $BEAM_DIR is set (data/beam/<tier>).
    tier: Literal["100K", "500K", "1M", "10M"] = "100K"
    # A bundled sample that is no benchmark release (the demo's synthetic conversation): its name.
    # Recorded as such in metrics.json instead of being compared with the official release.
    sample: Optional[str] = None
    stitch: StitchConfig = field(default_factory=StitchConfig)  # LoCoMo-Plus only


# Roles never sent as a batch: plan, bridge and answer are timed as the paper's online cost (Table 3);
# memory is a memory system's own ingestion (common.systems), whose calls depend on each other in order
# and are made outside LLMClient.map, where batching happens.
ONLINE_ROLES = ("plan", "bridge", "answer", "memory", "plan_audit", "answer_rerank", "answer_verify", "answer_draft",
                "answer_count", "answer_temporal", "answer_order")


@dataclass(frozen=True)
class LLMConfig:
    concurrency: int = 16  # requests in flight per endpoint (unless the endpoint sets its own)
    cache_path: str = ".cache/llm.sqlite"
    cache_mode: Literal["rw", "ro", "off", "refresh"] = "rw"
    # postgresql://user@host:port/dbname: the LLM and embedding caches live in that database, read
    # and written live by every worker (instead of cache_path and embedding.cache_path). No password
    # here: libpq reads PGPASSWORD or ~/.pgpass.
    cache_url: Optional[str] = None
    max_attempts: int = 6
    initial_wait: float = 1.0
    max_wait: float = 30.0
    endpoint_cooldown: float = 30.0  # seconds an endpoint failing with connection errors is set aside
    # OpenAI Batch API (/v1/files + /v1/batches, half price) instead of live calls: true = the
    # offline roles (every role not in ONLINE_ROLES: partition, extract, judge), or a list of roles.
    batch: Union[bool, list] = False
    batch_poll_seconds: float = 30.0
    batch_completion_window: str = "24h"
    batch_max_requests: int = 50000  # requests per batch file (the API's limit)
    # Requests a batch left undone when it expired: sent in a new batch (keeps the batch price) or live.
    batch_on_expiry: Literal["batch", "live"] = "batch"
    # Ray executor: a worker merges its new cache entries into the run's cache at least every N
    # answered calls (a killed worker loses at most N); not in the fingerprint.
    shard_flush_calls: int = 50

    def batch_roles(self, roles: Sequence[str]) -> tuple[str, ...]:
        """The roles sent through the Batch API (``ConfigError`` for an unknown or online role)."""
        if self.batch is True:
            return tuple(r for r in roles if r not in ONLINE_ROLES)
        if self.batch is False:
            return ()
        for i, r in enumerate(self.batch):
            if r not in roles:
                raise ConfigError(f"llm.batch[{i}]: unknown role {r!r} (roles: {', '.join(roles)})")
            if r in ONLINE_ROLES:
                why = ("a memory system's ordered ingestion" if r == "memory"
                       else "its latency is the paper's Table 3 cost")
                raise ConfigError(f"llm.batch[{i}]: role {r!r} is online ({why}); batch the offline roles only")
        return tuple(self.batch)


@dataclass(frozen=True)
class SystemsConfig:
    """How the harness drives an outside memory system (``common.systems``)."""

    # common: the harness's protocol (its answer prompt, judge and optional parity cap; only the
    # evidence buffer is the system's). native: each system as its reference evaluation runs it
    # (its k, search mode, rendering and, where the reference has one, its own answer prompt or
    # agent), as its protocol card says (common/systems/cards.py). In the fingerprint when native.
    protocol: Literal["common", "native"] = "common"

    # Memories ingested at the same time (each memory's own calls stay in order: a system's
    # ingestion of one memory is sequential by design). Not in the fingerprint.
    ingest_concurrency: int = 4
    # A system in its own process (systems/<name>/): seconds the child may take to answer one
    # request (hello, search, close), and one ingestion of a memory; then it is killed and the
    # memory or question counted failed (child_timeout). Not in the fingerprint.
    child_timeout: float = 300.0
    child_ingest_timeout: float = 3600.0
    # Parity: every system's buffer cut to this many o200k tokens, keeping its own ranking's
    # first items (0: off). It changes the buffers, so it is in the fingerprint when set.
    buffer_tokens: int = 0


@dataclass(frozen=True)
class RunConfig:
    name: str = "paper"
    results_dir: str = "results"
    max_error_rate: float = 0.2  # a stage exits non-zero above this fraction of failed rows
    export: bool = True  # 09_aggregate writes export/questions.jsonl|csv + manifest (common.pipeline.export)
    # A line 09_aggregate puts at the top of the run's tables and in metrics.json (the demo: what its
    # 135M model's numbers show and what they do not).
    note: Optional[str] = None
    # Where stages 02-07 run (common.pipeline.ray_executor): local = this process; ray = one Ray task
    # per memory. Results do not depend on it (not in the fingerprint).
    executor: Literal["local", "ray"] = "local"
    ray_address: str = ""  # the cluster to join (RAY_ADDRESS wins); "" and no RAY_ADDRESS: start a local one
    ray_cpus: int = 0  # CPUs of a local cluster started here (0: all of this machine's)
    ray_task_cpus: float = 1.0  # CPUs each memory's task declares
    ray_task_gpus: float = 0.0  # GPUs each memory's task declares (an embedding model on a GPU node)


@dataclass(frozen=True)
class Config:
    benchmark: Literal["locomo", "longmemeval", "beam", "realtalk", "locomo_plus"] = "locomo"
    data: DataConfig = field(default_factory=DataConfig)
    models: ModelsConfig = field(default_factory=ModelsConfig)
    llm: LLMConfig = field(default_factory=LLMConfig)
    episodes: EpisodesConfig = field(default_factory=EpisodesConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    prompts: PromptsConfig = field(default_factory=PromptsConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    retrieve: RetrieveConfig = field(default_factory=RetrieveConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    score: ScoreConfig = field(default_factory=ScoreConfig)
    systems: SystemsConfig = field(default_factory=SystemsConfig)
    run: RunConfig = field(default_factory=RunConfig)

    # ---- derived
    @property
    def run_dir(self) -> Path:
        return resolve_path(self.run.results_dir) / self.benchmark / self.run.name

    def role(self, role: str) -> RoleSettings:
        """Merge ``models.default`` with ``models.<role>`` into resolved settings."""
        parent = ROLE_PARENT.get(role)
        if role == "gpt_score" and self.score.realtalk_gpt_score_model == "answer":
            parent = "answer"  # REALTALK's official GPT score asks the answer model (its own answers)
        owners = [role] + ([parent] if parent else [])
        chain = [getattr(self.models, r) for r in owners]
        base = self.models.default

        def pick(name: str) -> Any:
            return next((getattr(c, name) for c in chain if getattr(c, name) is not None), getattr(base, name))

        merged = {f.name: pick(f.name) for f in dataclasses.fields(RoleConfig)}
        if role == "judge" and self.benchmark == "beam" and not self.score.beam_judge_seed:
            merged["seed"] = None  # the official BEAM judge client sends none
        official = self.benchmark == "realtalk" and self.score.realtalk_sampling == "official"
        if official and role in ("answer", "gpt_score"):
            merged["temperature"] = merged["seed"] = None  # REALTALK's client sends neither
        if not merged["model"]:
            raise ConfigError(f"models.{role}.model: no model configured")
        base_url = merged["base_url"]
        if isinstance(base_url, list):
            owner = next((r for r, c in zip(owners, chain) if c.base_url is not None), "default")
            where = f"models.{owner}.base_url"
            try:
                base_url = parse_endpoints(base_url, where)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        return RoleSettings(
            role=role,
            model=merged["model"],
            base_url=base_url,
            temperature=(None if official and role in ("answer", "gpt_score") else
                         merged["temperature"] if merged["temperature"] is not None else 0.0),
            seed=merged["seed"],
            max_tokens=merged["max_tokens"],
            top_p=merged["top_p"],
            timeout=merged["timeout"] or 120.0,
            json_mode=True if merged["json_mode"] is None else merged["json_mode"],
            extra_body=merged["extra_body"] or {},
        )


# --------------------------------------------------------------------------- loading
def resolve_path(p: str) -> Path:
    """Relative paths in configs are relative to the repository root, not the cwd."""
    path = Path(os.path.expanduser(p))
    return path if path.is_absolute() else REPO_ROOT / path


def _check_type(where: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union:
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if ImportPath in options:  # method.name: a registered name, else an import path
            return _system_name(where, options[0], value)
        if len(options) > 1:  # e.g. a URL or a list of URLs: the first type the value fits
            for option in options:
                try:
                    return _check_type(where, option, value)
                except ConfigError:
                    continue
            names = " or ".join(getattr(o, "__name__", str(o)) for o in options)
            raise ConfigError(f"{where}: expected {names}, got {value!r}")
        tp = options[0]
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, args))}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
        return build(tp, value, where)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    expected = origin or tp
    if expected in (list, dict) and isinstance(value, expected):
        return value
    if isinstance(expected, type) and isinstance(value, expected) and not (
        expected is int and isinstance(value, bool)
    ):
        return value
    raise ConfigError(f"{where}: expected {getattr(expected, '__name__', expected)}, got {value!r}")


def _own_environment(name: str) -> bool:
    """A system in its own environment: ``systems/<name>/adapter.py`` (``HARNESS_SYSTEMS_ROOT``
    moves the folder; common.systems.envs builds and runs it)."""
    if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", name):
        return False
    root = Path(os.environ.get("HARNESS_SYSTEMS_ROOT") or REPO_ROOT / "systems")
    return ((root if root.is_absolute() else REPO_ROOT / root) / name / "adapter.py").is_file()


def _system_name(where: str, names: Any, value: Any) -> Any:
    if value in typing.get_args(names):
        return value
    if isinstance(value, str) and _own_environment(value):
        return value
    module, _, attr = str(value).partition(":") if isinstance(value, str) else ("", "", "")
    if module and attr.isidentifier() and all(p.isidentifier() for p in module.split(".")):
        return str(value)  # a plain str: it is written to YAML and JSON
    raise ConfigError(f"{where}: {value!r} is not one of {', '.join(typing.get_args(names))}, "
                      "a folder systems/<name>/ with adapter.py, nor an import path package.module:Class")


def build(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """Build a config dataclass from a mapping, rejecting unknown keys and wrong types."""
    return _merge_dataclass(cls(), data, where)


def _merge_dataclass(current: Any, value: dict[str, Any], where: str) -> Any:
    hints = typing.get_type_hints(type(current))
    names = [f.name for f in dataclasses.fields(current)]
    changes: dict[str, Any] = {}
    for key, v in value.items():
        path = f"{where}.{key}" if where else key
        if key not in names:
            raise ConfigError(f"unknown config key '{path}' (valid: {', '.join(names)})")
        cur = getattr(current, key)
        if dataclasses.is_dataclass(cur) and isinstance(v, dict):
            changes[key] = _merge_dataclass(cur, v, path)
        else:
            changes[key] = _check_type(path, hints[key], v)
    # Config sections are frozen: a merged section is a new object, never an edited one.
    return dataclasses.replace(current, **changes)


def _deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_yaml_mapping(path: Path, what: str = "config") -> dict[str, Any]:
    """A YAML file whose top level is a mapping; every problem is one ConfigError line."""
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return data


def _read_yaml(path: Path) -> dict[str, Any]:
    # Aliases are resolved per file, so an old key in a child file overrides its parent's new key.
    data = _apply_aliases(read_yaml_mapping(path))
    parents = data.pop("defaults", [])
    merged: dict[str, Any] = {}
    for parent in parents if isinstance(parents, list) else [parents]:
        merged = _deep_merge(merged, _read_yaml(path.parent / parent))
    return _deep_merge(merged, data)


def rejoin_overrides(overrides: Sequence[str]) -> list[str]:
    """Words of ``SET="..."`` that make split at spaces, joined back into overrides.

    ``make`` hands ``SET="method.options={k: 5}"`` over as two words, ``method.options={k:`` and
    ``5}``: a word without ``=`` cannot start an override, so it continues the one before it.
    """
    out: list[str] = []
    for word in overrides:
        if out and "=" not in word:
            out[-1] = f"{out[-1]} {word}"
        else:
            out.append(word)
    return out


def parse_override(text: str) -> dict[str, Any]:
    """``a.b.c=value`` -> {"a": {"b": {"c": value}}}; the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"--set expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = load_yaml(raw) if raw != "" else ""
    except yaml.YAMLError as exc:  # one line naming the key, never a parser traceback
        problem = getattr(exc, "problem", None) or exc.__class__.__name__
        raise ConfigError(f"{key.strip()}: cannot read the value {raw!r} as YAML ({problem}); quote it, or set "
                          f"one key at a time ({key.strip()}.<name>=<value>)") from None
    if isinstance(value, bool) and raw.strip().lower() not in ("true", "false"):
        # YAML 1.1 reads off/on/yes/no as booleans: llm.cache_mode=off means the word "off".
        value = raw.strip()
    if not key.strip() or any(not part.strip() for part in key.split(".")):
        raise ConfigError(f"--set expects key=value with a dotted key such as run.name, got {text!r}")
    out: dict[str, Any] = {}
    cur = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        cur = cur.setdefault(part, {})
    cur[parts[-1]] = value
    return out


# Old key -> its current name. Read with a DeprecationWarning so existing configs keep working.
ALIASES = {("data", "conversations"): "memories"}


def _apply_aliases(data: dict[str, Any]) -> dict[str, Any]:
    for (section, old), new in ALIASES.items():
        block = data.get(section)
        if isinstance(block, dict) and old in block:
            warnings.warn(f"config key {section}.{old} is deprecated: use {section}.{new} "
                          f"(it also holds LongMemEval question ids)", DeprecationWarning, stacklevel=2)
            block = dict(block)
            value = block.pop(old)
            block.setdefault(new, value)
            data = {**data, section: block}
    return data


def load_config(paths: list[str], overrides: Sequence[str] = ()) -> Config:
    """Load YAML files (later ones win, ``defaults:`` lists parents), then ``--set`` overrides."""
    data: dict[str, Any] = {}
    for p in paths:
        data = _deep_merge(data, _read_yaml(resolve_path(p)))
    for o in rejoin_overrides(overrides):
        data = _deep_merge(data, _apply_aliases(parse_override(o)))
    cfg = build(Config, data)
    validate(cfg)
    return cfg


def choices(cls: type = Config, prefix: str = "") -> dict[str, tuple[Any, ...]]:
    """Every ``Literal`` field of the schema: dotted key -> its allowed values (for docs and checks)."""
    out: dict[str, tuple[Any, ...]] = {}
    for name, tp in typing.get_type_hints(cls).items():
        key = f"{prefix}{name}"
        if typing.get_origin(tp) is typing.Union and typing.get_origin(typing.get_args(tp)[0]) is Literal:
            tp = typing.get_args(tp)[0]  # method.name: the registered names (import paths besides)
        if typing.get_origin(tp) is Literal:
            out[key] = typing.get_args(tp)
        elif isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out.update(choices(tp, key + "."))
    return out


def validate(cfg: Config) -> None:
    # Literal fields are checked while the config is built (``_check_type``).
    unknown = set(cfg.retrieve.weights) - {
        "entity", "entity_type", "property", "value", "condition_property", "condition_value"
    }
    if unknown:
        raise ConfigError(f"retrieve.weights: unknown field(s) {sorted(unknown)}")
    for key, name in (("run.name", cfg.run.name), ("judge.name", cfg.judge.name)):
        # Both name files and directories (results/<benchmark>/<run>/, 08_judge_<judge>.jsonl).
        if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
            raise ConfigError(f"{key}: {name!r} is not a plain name (no '/', not empty, not '.' or '..')")
    if not cfg.llm.cache_path.strip():
        raise ConfigError("llm.cache_path: empty; give a file path (or llm.cache_mode=off)")
    if cfg.llm.concurrency < 1:
        raise ConfigError("llm.concurrency: must be >= 1")
    if cfg.llm.shard_flush_calls < 1:
        raise ConfigError("llm.shard_flush_calls: must be >= 1")
    if cfg.run.ray_task_cpus < 0 or cfg.run.ray_task_gpus < 0 or cfg.run.ray_cpus < 0:
        raise ConfigError("run.ray_cpus, run.ray_task_cpus, run.ray_task_gpus: must be >= 0")
    if cfg.embedding.long_texts == "windows" and cfg.embedding.backend == "openai":
        raise ConfigError("embedding.long_texts: windows needs the sentence-transformers backend (an /v1/embeddings "
                          "server applies its own limit, which the harness cannot read)")
    if cfg.systems.ingest_concurrency < 1:
        raise ConfigError("systems.ingest_concurrency: must be >= 1")
    if cfg.llm.cache_url is not None:
        try:
            cache_store.parse_url(cfg.llm.cache_url, "llm.cache_url")
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.systems.child_timeout <= 0 or cfg.systems.child_ingest_timeout <= 0:
        raise ConfigError("systems.child_timeout / systems.child_ingest_timeout: must be > 0 seconds")
    if cfg.systems.buffer_tokens < 0:
        raise ConfigError("systems.buffer_tokens: must be >= 0 (0: no parity cap)")
    if cfg.llm.batch_max_requests < 1:
        raise ConfigError("llm.batch_max_requests: must be >= 1")
    if cfg.judge.runs < 1:
        raise ConfigError("judge.runs: must be >= 1")
    if cfg.method.context_builder != "harness" and cfg.benchmark != "realtalk":
        raise ConfigError(f"method.context_builder: {cfg.method.context_builder!r} is REALTALK's context "
                          f"(benchmark realtalk), not {cfg.benchmark}'s; use harness")
    if cfg.answer.rerank_max < 1:
        raise ConfigError("answer.rerank_max: must be >= 1")
    for key in ("user_overlap_max", "temporal_batch", "count_batch", "date_window_max", "user_overlap_temporal_max"):
        if getattr(cfg.answer.routes, key) < 1:
            raise ConfigError(f"answer.routes.{key}: must be >= 1")
    if cfg.answer.routes.user_overlap_below < 0:
        raise ConfigError("answer.routes.user_overlap_below: must be >= 0")
    if cfg.answer.routes.count_merge_tokens is not None and cfg.answer.routes.count_merge_tokens < 1:
        raise ConfigError("answer.routes.count_merge_tokens: must be >= 1 (or null: the answer_count role's)")
    for role in ROLES:
        cfg.role(role)
    cfg.llm.batch_roles(ROLES)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False, allow_unicode=True)
