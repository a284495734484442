"""The method's sections of the config schema: episodes, extraction, embeddings, index, planning,
retrieval and which memory method runs (``method.name``).

Part of the one schema (``common.core.config``, which loads, merges and validates it and re-exports
these classes): frozen dataclasses whose fields are the YAML keys, ``Literal`` fields their choices.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union


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
