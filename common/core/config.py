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
class EpisodesConfig:
    mode: Literal["theme", "turn", "session"] = "theme"  # the episode-granularity ablation
    include_images: bool = True


@dataclass(frozen=True)
class ExtractConfig:
    # Prompt variants, the same block in the extraction and the planning prompt. none: no block at
    # all (the authors' LongMemEval extraction and planning prompts have none, reference_notes 3.3).
    granularity: Literal["fine", "broad", "broad_plus", "very_broad", "none"] = "broad"
    # Deterministic projections of the authors' extraction step (reference_notes 3.3), generic
    # part: speaker_event adds "<speaker> attend|see <entity>" for a record whose evidence turn says
    # "I/we attended/went to/visited/joined ... <entity>" or "I/we saw/watched/heard/listened to
    # ... <entity>"; object_creator adds "<speaker> paint 'made <entity>'" for a painting/drawing/
    # art object record whose creator or source is a speaker. (Their shoe coreference rule is
    # LoCoMo-specific and not reproduced.)
    speaker_event_projection: bool = False
    object_creator_projection: bool = False
    # harness: the speaker-event projection needs the entity and the verb in one sentence; code: the authors'
    # rule (the entity anywhere in the turn, attend(ing)/participate(ing) too, the speaker's own entity too).
    speaker_event_rule: Literal["harness", "code"] = "harness"


@dataclass(frozen=True)
class EmbeddingConfig:
    backend: Literal["sentence-transformers", "openai"] = "sentence-transformers"  # openai: any /v1/embeddings
    model: str = "all-MiniLM-L6-v2"  # packaged offline; the authors used Qwen/Qwen3-Embedding-8B
    device: str = "cpu"
    # sentence-transformers only: torch, or ONNX Runtime on the same weights exported once
    # (onnx-int8: dynamically quantized); docs/scale.md "Embedding throughput" has the measurements.
    runtime: Literal["torch", "onnx", "onnx-int8"] = "torch"
    batch_size: int = 64
    max_length: int = 256
    # A text longer than the model reads (max_length word pieces, specials included): truncate
    # (its beginning, sentence-transformers' own behaviour) or windows (the weighted mean of its
    # windows' vectors; common/core/long_texts.py). Counted either way; in the fingerprint when windows.
    long_texts: Literal["truncate", "windows"] = "truncate"
    cache_path: str = ".cache/embeddings.sqlite"
    base_url: Optional[str] = None


@dataclass(frozen=True)
class IndexConfig:
    chunk_turns: int = 4  # dense-fallback windows over episode turns (authors' code: 4 ...)
    chunk_stride: int = 3  # ... with stride 3, one turn of overlap


@dataclass(frozen=True)
class PlanConfig:
    # The authors inject every observed property (alphabetical). The list is cut, least frequent
    # first, only when it would exceed ``vocabulary_tokens`` (o200k tokens; large enough for every
    # LoCoMo conversation) or ``vocabulary_max`` properties (None = no count limit; the demo's
    # 135M model uses 40). The plan row records how many were left out.
    vocabulary_max: Optional[int] = None
    vocabulary_tokens: int = 50000
    # schema: the checks the harness always made (hops, anchors with entity and property,
    # dependencies on earlier hops). code: also the authors' normalize/validate_query_plan
    # (reference_notes 3.4): field aliases, required_properties cleaned or made from the hops,
    # and a plan is invalid (repair call) when an anchor property has more than two parts, a
    # condition is half filled, a concept hop depends on world knowledge, or a counterfactual
    # plan lacks its three roles.
    validation: Literal["schema", "code"] = "schema"
    # The authors' audit call (role plan_audit): a valid plan is shown to a conservative auditor
    # that returns it unchanged or corrected; an audited plan that fails validation, or any failed
    # call, keeps the pre-audit plan.
    audit: bool = False
    # The repair call after an invalid plan. harness: the error, the question and the failed plan
    # with a one-line schema reminder (plan_repair_*). code: the authors' repair request, which
    # adds a reminder list mirroring the planner rules, the vocabulary and the granularity block
    # (code_rules.plan_code_repair_*).
    repair: Literal["harness", "code"] = "harness"
    # The plan used when the repair failed too. harness: one hop from the question's words (first
    # capitalized name else user, the longest content word as property, all_matching for counting
    # and list wording). code: the authors' last-resort plan (keyword property rules, a short
    # required property of the failed reply, always one point hop).
    fallback: Literal["harness", "code"] = "harness"


@dataclass(frozen=True)
class ScopeBudget:
    structured_k: Optional[int] = 5  # structured episodes per hop (None = every match)
    fallback_k: Optional[int] = 12  # lexical+dense episodes per hop (None = every candidate)
    lexical_k: Optional[int] = 12
    dense_k: int = 8


@dataclass(frozen=True)
class RetrieveConfig:
    mode: Literal["adaptive", "fixed_k", "dense_only"] = "adaptive"
    fixed_k: int = 5  # episodes per hop in fixed_k mode; episodes per question in dense_only_query=question
    # dense_only (the authors' 11_retrieve_dense_only, reference_notes 4.3): each hop queries
    # "Question: <q>\nRetrieval sub-question: <hop purpose>" and keeps its top dense_only_point_k
    # episodes (point plans) or dense_only_all_matching_k (all_matching plans); hops are unioned.
    # question: the harness's earlier ablation, the question alone and ``fixed_k`` episodes.
    dense_only_query: Literal["hops", "question"] = "hops"
    dense_only_point_k: int = 5
    dense_only_all_matching_k: int = 50
    min_score: float = 0.35  # structured records below this weighted score are dropped
    property_threshold: float = 0.78  # cosine for a non-exact property to match
    value_threshold: float = 0.86  # cosine for a non-lexical value to match
    entity_fuzzy: float = 90.0  # rapidfuzz ratio for an entity to match a record's entity
    # Entity gate. fuzzy: a harness choice (rapidfuzz ratio >= entity_fuzzy, and 0.7 for the
    # possessor of "X's Y"); exact: the authors' gate, normalized equality only, no possessor path.
    entity_match: Literal["fuzzy", "exact"] = "fuzzy"
    # Field scores of a structured record. harness: a non-exact condition_property scores 0 and a
    # semantic property match scores its cosine; ties by episode position. code: as the authors'
    # code (reference_notes 3.5), every non-exact field max(0, cosine, Jaccard) over its embedded
    # text, ties by episode id.
    field_scores: Literal["harness", "code"] = "harness"
    # A hop whose $hN.bridge resolved to nothing: false searches with the emptied anchor field;
    # true blocks the hop (no episodes; the authors' status blocked_missing_bridge), which hops
    # under block_rule.
    block_empty_bridge: bool = False
    # Which hops block_empty_bridge blocks. empty_bridge (the harness's stricter rule): any
    # $hN.bridge that resolved to nothing, an emptied value or condition value included. code: the
    # authors' rule, only a hop whose entity or property is empty after substitution or whose
    # anchor still holds a string starting with "$".
    block_rule: Literal["empty_bridge", "code"] = "empty_bridge"
    # The authors' generic alias and synonym sets of the lexical guard (question-word aliases
    # such as lost -> lose, visit -> trip; term sets by property such as camp -> camping, campfire;
    # camp counted as its own forms only): common/prompts/code_rules/lexical_aliases.yaml. Their
    # tables naming benchmark content are not reproduced.
    lexical_aliases: bool = False
    # Structured gates (reference_notes 3.5 step 5). code: as the authors' code: a typed anchor
    # needs the same record type ("other" included), generic record properties are activity/event/
    # thing/other, a generic record property passes a SPECIFIC anchor property only when it holds
    # the anchor's value (else it is dropped), and the semantic property fallback is barred per
    # record entity that has the exact property. loose: the harness's earlier, wider gates (record
    # or anchor type "other" passes any type, "fact" generic, the value route for any anchor
    # property, the exact-property check over every entity the fuzzy gate lets through).
    gates: Literal["code", "loose"] = "code"
    # An anchor value that is a placeholder noun (book, art, kids, event, thing, favorite, ...;
    # retrieve.PLACEHOLDER_VALUES) passes any record with a non-empty value, as the authors' code.
    placeholder_values: bool = True
    # First-person anchor entities (I, me, my, the user, user's, ...) name the memory's user (the
    # one speaker of a user/assistant chat). A harness rewrite at retrieval time: in the authors'
    # code this is a planner rule ("my/the user -> user"), not a retrieval step.
    first_person: bool = True
    weights: dict = field(
        default_factory=lambda: {
            "entity": 0.25,
            "entity_type": 0.08,
            "property": 0.22,
            "value": 0.18,
            "condition_property": 0.12,
            "condition_value": 0.15,
        }
    )
    point: ScopeBudget = field(default_factory=ScopeBudget)
    all_matching: ScopeBudget = field(
        default_factory=lambda: ScopeBudget(structured_k=None, fallback_k=None, lexical_k=None, dense_k=20)
    )
    # The authors' code never stops a hop early (the paper lists early stopping as future work).
    # true = the paper's prose (Sec. 3.3): a point hop whose best structured match scores
    # ``coverage_score`` or more skips the fallback routes (ablation variant ``coverage_stop``).
    stop_when_covered: bool = False
    coverage_score: float = 0.8
    # guard: the authors' lexical recall guard, generic part (common.method.lexical); every
    # grounded match is a candidate (``lexical_k`` is not used), merged with the dense ones and
    # re-ranked by question terms. bm25: BM25 over whole episodes (question + anchor words, top
    # ``lexical_k``) fused with dense by reciprocal rank, the harness's earlier route.
    lexical: Literal["guard", "bm25"] = "guard"
    # answer_rank: the union of the hops re-ranked by question terms, as the authors' answer step
    # orders episodes (also the bridge context); conversation: time order.
    buffer_order: Literal["answer_rank", "conversation"] = "answer_rank"
    # The authors' LongMemEval retrieval: a hop without structured matches keeps its best dense
    # episode even past the ``fallback_k`` cut (configs/longmemeval.yaml; their LoCoMo code does not).
    keep_top_dense: bool = False
    # The authors' broad_state_lookup: a question with before/after/previous/earlier/later wording about
    # an item, device or move widens each hop's dense and point fallback budgets to 48 episodes.
    broad_state_lookup: bool = False
    temporal_neighbors: int = 0  # episodes on each side kept for temporal plans (date context)
    # Caps per question after merging hops (None = none: the authors' code drops nothing, and the
    # paper configs set none). When a cap binds, ``cap_drop`` says what goes first: route =
    # neighbour, then dense, then lexical episodes, structured matches last (each route from the
    # bottom of the answer ranking up); rank = the bottom of the answer ranking whatever the route
    # (the harness's earlier rule, which dropped structured matches without question terms first).
    max_episodes: Optional[int] = None
    max_buffer_tokens: Optional[int] = None  # o200k tokens of episode text; the first kept episode always stays
    cap_drop: Literal["route", "rank"] = "route"
    # A hop with a ``bridge_request`` gets one LLM call (role ``bridge``) over its selected
    # episodes; the value replaces ``$hN.bridge`` in the anchors of the hops that depend on it.
    # false: the placeholder is dropped and those hops rely on their other fields.
    bridges: bool = True
    bridge_context_k: int = 24  # selected episodes shown to the bridge call, in hop rank order
    # The lexical guard's and the question-term ranking's stop words: harness (common.core.text) or code (the
    # authors' query stop words, which keep after/before/one/still and drop common/please/really/tell).
    lexical_stopwords: Literal["harness", "code"] = "harness"
    # The guard's phrase bonus counts in the text its hits were counted on (counted), or in the entity's own
    # lines whenever it has some (speaker, the authors' evidence text).
    lexical_phrase_text: Literal["counted", "speaker"] = "counted"
    # The bridge call is shown the question for context (the harness's); false: the request, the anchor and
    # the episodes only (the authors' bridge prompt).
    bridge_question: bool = True


class ImportPath(str):
    """``package.module:Class``: a memory system outside the harness, chosen by ``method.name``."""


@dataclass(frozen=True)
class MethodConfig:
    """Which memory method builds the evidence buffer (the harness's own baselines beside EnSIMem).

    ``ensimem`` runs 02-06 as in the paper. The baselines skip 02-05 and build the buffer in 06:
    ``full_context`` (the whole conversation, oldest sessions dropped first when it exceeds
    ``context_tokens``), ``rag_turns`` (top ``rag_k`` turns by dense similarity, shown in
    conversation order), ``no_memory`` (empty buffer: closed book) and ``oracle`` (only the gold
    evidence turns: an upper bound, and the only method that reads the gold file before judging).
    """

    # A registered system (common.systems.registry) or a user's class as package.module:Class.
    name: Union[Literal["ensimem", "full_context", "rag_turns", "no_memory", "oracle", "mem0", "amem",
                        "langmem", "graphiti", "simplemem"],
                ImportPath] = "ensimem"
    context_tokens: int = 120000  # full_context budget (o200k tokens); fits 128k-window models
    # full_context's rendering: harness (every benchmark's session blocks), or REALTALK's
    # evaluate_memory.py context (common.method.official_context): official = byte for byte (every
    # session twice, newest first), chronological = the same text with each session once, oldest first.
    context_builder: Literal["harness", "official", "chronological"] = "harness"
    # The official/chronological header names the two speakers in the order Python's set() gives
    # under PYTHONHASHSEED=<this> (as the official code, whose order changes from process to process);
    # null: their order of first appearance (one prompt whatever the hash seed).
    context_hash_seed: Optional[int] = None
    rag_k: int = 10  # rag_turns: turns retrieved per question
    options: dict = field(default_factory=dict)  # a system's own settings (mem0: top_k, batch_size)


@dataclass(frozen=True)
class RoutesConfig:
    """``answer.routes``: the generic answer routes of the authors' LongMemEval answer step
    (common.method.routes), each chosen by the question's wording or the plan, never by a label."""

    date_window: bool = False  # buffer episodes dated after the question date are dropped
    user_overlap: bool = False  # counting/temporal questions: add episodes whose user turns overlap it
    user_overlap_max: int = 48  # at most this many added (the authors' 48)
    relative_age: bool = False  # "how many <unit> ago": date from the temporal ledger, then arithmetic
    temporal: bool = False  # interval questions: the user-turn temporal ledger (role answer_temporal)
    temporal_batch: int = 24  # episodes per temporal ledger call (the authors' 24)
    count: bool = False  # counting questions: the counting ledger (role answer_count)
    count_batch: int = 10  # episodes per scan call (the authors' 10)
    order: bool = False  # first/latest/previous/sequence wording: one operator audit (role answer_order)
    # The authors' versions of the guards and ledgers (each off here, on in configs/longmemeval_code.yaml):
    # date_window_dates: add every memory episode observed on the dates the question names relative to
    # its date (today, yesterday, a week ago, last weekend, last <weekday>), at most date_window_max.
    date_window_dates: bool = False
    date_window_max: int = 48  # the authors': max(48, 4 x dense_top_k)
    user_overlap_temporal_max: int = 48  # temporal wording: at most this many added (the authors' 96)
    user_overlap_below: int = 0  # counting wording: only while the buffer has fewer episodes (the authors' 32)
    # name_quantity: items with the same name stems and quantity are one (the harness's rule);
    # duplicate_of: only a consolidation row's high-confidence duplicate_of merges (the authors').
    count_dedup: Literal["name_quantity", "duplicate_of"] = "name_quantity"
    count_complete_gate: bool = False  # a ledger with unaccounted episodes or failed calls does not answer
    count_cumulative: bool = False  # a user's own cumulative total ("N different ones") overrides the sum
    count_reference_event: bool = False  # before/after counts: one call dates the reference event, then scope
    temporal_answer_call: bool = False  # no deterministic answer: ledger-answer call, evidence gate, repair
    temporal_completed_upgrade: bool = False  # explicit completed-action wording upgrades a fact to completed
    age_chain: bool = False  # "how many <unit> ago": anchor age +/- offset chain call when no unique date
    order_move_rows: bool = False  # where/which + move questions: "moved to X" user turns become rows
    order_bare_last: bool = False  # a bare "last" ("my last trip") asks for the latest
    order_previous_earliest: bool = False  # previous/before wording picks the earliest state (the authors')
    tenure_duration: bool = False  # "how long ... current role/job/position": a duration, temporal ledger
    # The counting ledger as the authors' (their consolidation and _normalize_audit); each off here:
    count_sessions: bool = False  # consolidation sees each item's session; repeats within one session are one
    count_item_dates: bool = False  # items carry their own event_date and are scoped by it, not by their episode's
    count_scan_context: bool = False  # scan and consolidation are shown the question's window and the plan
    # filter: the reference event's date is a Python window (before/after/since); shown: the reference call's
    # reply is shown to the scan and consolidation, which decide (before/after only; the authors').
    count_reference: Literal["filter", "shown"] = "filter"
    count_merge_tokens: Optional[int] = None  # the consolidation's budget (None: answer_count's; the authors' 4200)
    # turns: a cumulative total from any in-window user turn; items: from the ledger's grounded items, not for
    # "how many times" (the authors' explicit totals)
    count_cumulative_from: Literal["turns", "items"] = "turns"
    count_inactive: bool = False  # items given away, sold, ... do not count for current-inventory wording
    # answer: the date_window_dates and user_overlap guards act on the answer step's buffer (the harness's);
    # retrieval: per hop in 06, before its bridge, as the authors' (top N overall, "< 32" per hop)
    guard_stage: Literal["answer", "retrieval"] = "answer"
    age_chain_checks: bool = False  # the chain's anchor path also needs same_anchor_event and evidence_complete
    # Each route call its own max_tokens as theirs (count retry 2200, reference 900, ledger answer 1200, citation
    # repair 1000, age chain 1600); false: the role's budget for every call of the role.
    call_budgets: bool = False


@dataclass(frozen=True)
class AnswerConfig:
    # harness: the common answer prompt of every system without a plan (one protocol);
    # mem0: mem0's own LoCoMo answer prompt, to show how much the prompt alone moves a number.
    # beam: the official BEAM runner's answer prompt (its RAG template), for rows comparable to BEAM's.
    # realtalk: REALTALK's official QA prompt after the buffer (evaluate_memory.py's one user message).
    prompt: Literal["harness", "mem0", "beam", "realtalk"] = "harness"
    # The generic parts of the authors' LongMemEval answer step, never routed on a label:
    # rerank: one call (role answer_rerank) picks up to rerank_max buffer episodes that fill the
    # question's evidence slots; the answer call then reads only those. verify: the answer is a
    # draft that an independent call (role answer_verify) checks against the same episodes and
    # keeps or rewrites.
    rerank: bool = False
    rerank_max: int = 20
    # A plan that needs every candidate (retrieval scope all_matching, or an answer target of type
    # count, list or time) is not reranked: all its episodes are read, as the authors keep every
    # candidate for their aggregate and interval operators. false: every plan is reranked.
    rerank_keep_all: bool = True
    verify: bool = False
    # plain: the answer is one plain-text call (role answer). json: the authors' LongMemEval draft,
    # a JSON object {answer, evidence_episode_ids, reasoning} from role answer_draft (own budget,
    # 1200 tokens), whose answer field is the answer.
    draft: Literal["plain", "json"] = "plain"
    # verify: a question asking for a suggestion fitted to the user (recommend, suggest, tips,
    # advice, ideas, in its own wording) keeps the draft's personal details instead of being cut
    # down to the shortest form. false: every verify asks for the shortest sufficient answer.
    verify_personal: bool = True
    # The draft's system prompt: answer_system (the prompt set's, LoCoMo's safeguards under
    # code_rules) or longmemeval (the authors' LongMemEval draft prompt, code_rules.answer_draft_system).
    draft_prompt: Literal["answer_system", "longmemeval"] = "answer_system"
    # With draft_prompt: longmemeval, the draft's system prompt carries the rules of the authors'
    # FINAL_ANSWER_SYSTEM (order, elapsed time, first/latest, the state at the question date, counts,
    # recommendations): code_rules.answer_draft_rules_system instead of the fourth pass's shorter prompt.
    draft_rules: bool = False
    # Rerank and verify keep every candidate for the plans the authors keep whole: point lookups
    # about the user, latest/previous-state wording and temporal point plans (plan and wording only).
    keep_whole_point: bool = False
    # The authors' rerank pads an ordering, first/latest, previous-state or elapsed-time question's
    # selection to its limit (20), not to 2 (chosen here by the wording).
    rerank_pad_operators: bool = False
    # The answer routes' checked lines go to the JSON draft's and verify's user messages as an evidence
    # audit beside the plan (the authors'), instead of before the episodes.
    draft_audit: bool = False
    # verify: the authors' checks (date arithmetic, order, previous/current, counting, avoidances) as rewrite
    # conditions; verify_short: false drops the harness's "shortest sufficient answer" rewrite (theirs has none).
    verify_checklist: bool = False
    verify_short: bool = True
    routes: RoutesConfig = field(default_factory=lambda: RoutesConfig())
    # The answer is the reply with its surrounding whitespace stripped. false (configs/beam.yaml):
    # the raw reply, as BEAM's official runner stores and scores it (an event-ordering answer's
    # trailing newline is one more line to align).
    strip: bool = True


@dataclass(frozen=True)
class JudgeConfig:
    name: str = "gpt-4o-mini"  # file suffix of 08_judge_<name>.jsonl; judges are never averaged
    prompt: str = "judge_locomo_mem0"
    # Ask the judge N times per answer (run i: seed 42+i, its own cache entry); metrics report
    # per-run accuracy, mean +- std, majority vote and the fraction of labels that flip.
    runs: int = 1


@dataclass(frozen=True)
class ScoreConfig:
    # LoCoMo category 5: score the answers by the abstention rule (common.evaluation.adversarial)
    # and report them as their own column, never in the overall.
    adversarial: bool = False
    # BEAM: the official scorer's two defects are reproduced by default; each switch corrects one.
    # beam_float_scores: score a rubric item float(score) (officially int(score): every 0.5 -> 0);
    # the same judge replies, no new call. beam_fill_question: fill the judge prompt's <question>
    # placeholder (officially never filled): one more call per rubric item.
    beam_float_scores: bool = False
    beam_fill_question: bool = False
    # BEAM: an empty answer and a failed answer call. zero (the harness's rule): no judge call, the
    # question scores 0 and is counted (no_answer). official: as BEAM's own runner, the empty
    # answer is judged as it is, and a failed call's error text ("Error in <ability> question type
    # and <question> and for <answers file>") is judged as the answer.
    beam_empty_answers: Literal["zero", "official"] = "zero"
    # BEAM: the judge request carries seed 42 (models.default.seed, every role's); the official
    # client (langchain's ChatOpenAI in src/llm.py) sends no seed: false drops it for the judge role
    # of a BEAM run (a new cache entry per call).
    beam_judge_seed: bool = True
    # REALTALK (common.evaluation.realtalk): the official GPT score is asked of the judge role's model
    # (role gpt_score); answer: of the answer model, as evaluate_memory.py does (the model judges its
    # own answers). official sampling: the answer and GPT-score requests carry no temperature and no
    # seed, as the official client sends them (harness: temperature 0, seed 42).
    realtalk_gpt_score_model: Literal["judge", "answer"] = "judge"
    realtalk_sampling: Literal["harness", "official"] = "harness"
    # LoCoMo-Plus (common.evaluation.locomo_plus): the headline reading of the judge's reply. official:
    # llm_as_judge._parse_judge_response, whose fallback for a reply that is not JSON looks for
    # "correct" before "wrong" (so "incorrect" is correct); strict: JSON only, anything else a
    # counted failure. Both are read from the same replies and reported.
    locomo_plus_parser: Literal["official", "strict"] = "official"
    # LoCoMo-Plus: a failed answer call. zero (the harness's rule): no judge call, the question scores 0
    # and is counted (no_answer). official: as utils.call_llm, its error text "[API Error: ...]" (and
    # "(empty)" for an empty reply) is judged as the answer.
    locomo_plus_error_answers: Literal["zero", "official"] = "zero"


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
