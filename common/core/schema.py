"""Typed artifact rows exchanged between stages.

Every stage reads and writes JSONL whose rows are these dataclasses, serialized with
``to_dict`` and read back with ``from_dict``. The benchmark adapters (``common.benchmarks``)
turn raw files into ``Session``/``Question``/``Gold``; stages 02-07 only ever see sessions and
questions, never ``Gold``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Protocol, TypeVar, get_type_hints


class _Dataclass(Protocol):
    """Any dataclass (what ``dataclasses.fields`` accepts)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


T = TypeVar("T", bound=_Dataclass)


def to_dict(obj: Any) -> Any:
    """Recursively convert dataclasses into plain JSON-able dicts.

    Fields a row class lists in ``OMIT_EMPTY`` are left out while empty: they were added for an
    optional switch, and rows made without it stay byte-identical to those made before it.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        omit = getattr(obj, "OMIT_EMPTY", ())
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not (f.name in omit and not getattr(obj, f.name))}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def _convert(tp: Any, value: Any) -> Any:
    origin = getattr(tp, "__origin__", None)
    args: tuple[Any, ...] = getattr(tp, "__args__", ())
    if value is None:
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return from_dict(tp, value)
    if origin is list and args:
        return [_convert(args[0], v) for v in value]
    if origin is dict and len(args) == 2:
        return {k: _convert(args[1], v) for k, v in value.items()}
    if origin is not None and type(None) in args:  # Optional[X]
        inner = [a for a in args if a is not type(None)]
        return _convert(inner[0], value) if len(inner) == 1 else value
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build a dataclass from a dict; unknown keys are an error (artifacts are versioned)."""
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {sorted(unknown)}")
    return cls(**{k: _convert(hints[k], v) for k, v in data.items()})


# --------------------------------------------------------------------------- 01 preprocess
@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    role: str = "user"  # "user" | "assistant" (LongMemEval); LoCoMo speakers are both users
    img_url: list[str] = field(default_factory=list)
    blip_caption: str = ""
    query: str = ""


@dataclass
class Session:
    memory_id: str  # LoCoMo: conversation id (conv-26); LongMemEval: question id
    session_id: str  # e.g. "session_3"
    session_index: int  # 1-based order inside the memory
    date_time: str  # as written in the source ("1:56 pm on 8 May, 2023")
    turns: list[Turn]
    speakers: list[str] = field(default_factory=list)
    # The id in the source file when ``session_id`` is an opaque label (LongMemEval: official
    # ids such as "answer_280352e9" mark evidence sessions, so they never reach a prompt).
    source_id: str = ""

    @property
    def key(self) -> str:
        return f"{self.memory_id}::{self.session_id}"


@dataclass
class Question:
    """What the method may see of a question: no answer, no category, no evidence."""

    qid: str
    memory_id: str
    question: str
    question_date: str = ""


@dataclass
class Gold:
    """Read only by 08_judge and 09_aggregate (and an explicitly labelled oracle baseline)."""

    qid: str
    memory_id: str
    answer: str
    category: int  # LoCoMo 1..5; LongMemEval uses question_type
    evidence: list[str] = field(default_factory=list)  # cleaned dia_ids
    raw_evidence: list[str] = field(default_factory=list)  # as in the source file
    adversarial_answer: str = ""
    question_type: str = ""
    abstention: bool = False
    # LongMemEval: gold sessions and the dia_ids of turns flagged has_answer (any role).
    answer_session_ids: list[str] = field(default_factory=list)
    has_answer: list[str] = field(default_factory=list)
    # BEAM: the question's rubric items and its ability-specific fields (ordering_tested, difficulty, ...).
    rubric: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    # Left out of 01_gold.jsonl while empty, so LoCoMo and LongMemEval gold rows stay byte-identical.
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("rubric", "details")


# --------------------------------------------------------------------------- 02 episodes
@dataclass
class Episode:
    episode_id: str  # "{memory_id}::{session_id}::episode_{NNN}"
    memory_id: str
    session_id: str
    session_index: int
    date_time: str
    dia_ids: list[str]
    theme: str
    theme_type: str  # entity | event | topic
    theme_description: str = ""
    boundary_reason: str = ""
    mode: str = "theme"  # theme | turn | session


@dataclass
class PartitionRow:
    """One row of 02_episodes.jsonl: the partition of one session."""

    session_key: str
    memory_id: str
    session_id: str
    mode: str
    episodes: list[Episode]
    repaired: bool = False
    fallback_used: bool = False
    fallback_error: str = ""
    llm_calls: list[dict[str, Any]] = field(default_factory=list)  # cache keys, usage, latency


# --------------------------------------------------------------------------- 03 extract
@dataclass
class Record:
    record_id: str  # "{episode_id}::index_{NNN}"
    episode_id: str
    memory_id: str
    entity: str
    entity_type: str
    property: str
    value: str = ""
    condition_property: str = ""
    condition_value: str = ""
    property_kind: str = "relation"
    modality: str = "observed"
    valid_time: str = ""
    source: str = ""
    evidence_dia_ids: list[str] = field(default_factory=list)
    projection_kind: str = "direct"
    confidence: float = 1.0
    granularity: str = "broad"


@dataclass
class ExtractRow:
    """One row of 03_extract.jsonl: the records of one episode."""

    episode_id: str
    memory_id: str
    granularity: str
    records: list[Record]
    n_raw: int = 0  # records the model returned
    n_dropped: int = 0  # dropped by normalization (no entity/property/valid evidence)
    n_repaired_evidence: int = 0  # records whose evidence ids were partly outside the episode
    repaired: bool = False
    fallback_used: bool = False
    error: str = ""
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    input_digest: str = ""  # hash of the upstream row it was computed from (stale rows are redone)


# --------------------------------------------------------------------------- 05 plan
@dataclass
class Anchor:
    entity: str = ""
    entity_type: str = ""
    property: str = ""
    value: str = ""
    condition_property: str = ""
    condition_value: str = ""


@dataclass
class Hop:
    hop_id: str
    purpose: str = ""
    anchor: Anchor = field(default_factory=Anchor)
    depends_on: list[str] = field(default_factory=list)
    bridge_request: str = ""


@dataclass
class Plan:
    answer_target: dict[str, str]
    reasoning_type: str
    retrieval_scope: str
    required_properties: list[dict[str, str]]
    hops: list[Hop]


@dataclass
class PlanRow:
    qid: str
    memory_id: str
    question: str
    plan: Plan
    vocabulary_size: int = 0  # properties shown to the planner
    vocabulary_total: int = 0  # properties in the index
    vocabulary_left_out: int = 0  # least frequent properties cut to fit plan.vocabulary_tokens / vocabulary_max
    repaired: bool = False
    fallback_used: bool = False
    error: str = ""
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    input_digest: str = ""  # hash of the upstream row it was computed from (stale rows are redone)
    # plan.audit: {"outcome": "unchanged" | "corrected" | "kept_pre_audit", "error": ...}
    audit: dict[str, Any] = field(default_factory=dict)
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("audit",)


# --------------------------------------------------------------------------- 06 retrieve
@dataclass
class Selected:
    episode_id: str
    hop_id: str
    route: str  # structured | lexical | dense | neighbor
    score: float
    record_id: str = ""


@dataclass
class Bridge:
    """A hop's declared bridge: the value its dependent hops search with, from one LLM call."""

    hop_id: str
    request: str  # the plan's bridge_request
    value: str = ""  # "" when the episodes do not establish it, or the call failed
    supporting_episode_ids: list[str] = field(default_factory=list)  # within the call's context
    context_episode_ids: list[str] = field(default_factory=list)  # what the call was shown
    repaired: bool = False
    error: str = ""  # "<cause>: <detail>" when the call failed or the reply stayed invalid


@dataclass
class RetrievalRow:
    qid: str
    memory_id: str
    question: str
    mode: str
    scope: str
    reasoning_type: str
    selected: list[Selected]
    episode_ids: list[str]  # final buffer order (session, then turn)
    dia_ids: list[str]  # every turn in the buffer
    coverage: dict[str, bool]  # hop_id -> a structured match above the bar was found
    buffer_text: str
    buffer_tokens: int
    seconds: float = 0.0  # retrieval compute plus the bridge calls' latency (Table 3 "retrieval")
    method_info: dict[str, Any] = field(default_factory=dict)  # baselines: truncation, scores, source
    input_digest: str = ""  # hash of the upstream row it was computed from (stale rows are redone)
    # hop_id -> the anchor searched with, after $hN.bridge placeholders were replaced
    resolved_anchors: dict[str, Anchor] = field(default_factory=dict)
    bridges: list[Bridge] = field(default_factory=list)
    bridge_seconds: float = 0.0  # the bridge calls' latency within ``seconds``
    fallback_used: bool = False  # a bridge call failed or its reply stayed invalid (value "")
    error: str = ""  # the first such bridge error
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    # Per route (structured/lexical/dense/neighbor): episodes and tokens in the buffer; scope, caps.
    contributions: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- 07 answer
@dataclass
class AnswerRow:
    qid: str
    memory_id: str
    question: str
    answer: Optional[str]
    model: str
    prompt_id: str
    cache_key: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    latency: float = 0.0
    error: str = ""
    cached: bool = False  # served from the LLM cache (not paid in this run)
    input_digest: str = ""  # hash of the upstream row it was computed from (stale rows are redone)
    # answer.rerank / answer.verify: every call of the row (each with its role; the ledger reads
    # these instead of the single-call fields, and ``latency`` is their sum), the draft the verify
    # call checked, and what each step did.
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    draft: Optional[str] = None
    steps: dict[str, Any] = field(default_factory=dict)
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("llm_calls", "draft", "steps")


# --------------------------------------------------------------------------- 08 judge
@dataclass
class JudgeRow:
    qid: str
    judge: str  # judge name from config (file suffix)
    judge_model: str
    prompt_id: str
    label: Optional[int]  # 1 correct, 0 wrong, None = failure (counted, never dropped)
    raw: str = ""
    parse_ok: bool = False
    cache_key: str = ""
    error: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    latency: float = 0.0
    cached: bool = False
    input_digest: str = ""  # hash of the upstream row it was computed from (stale rows are redone)
    # judge.runs > 1: one label per judge run (run i sent with seed 42+i); ``label`` is then their
    # majority (None when a run failed). Empty for a single run: ``label`` is that run's label.
    labels: list[Optional[int]] = field(default_factory=list)
    # data.errata: the same answer judged against the corrected golden answer (only for questions
    # whose golden answer the audit corrected): {answer, label, labels, error}.
    corrected: Optional[dict[str, Any]] = None
    # BEAM (common.evaluation.beam): every call of the row (one per rubric item, the event-ordering
    # alignment calls; the ledger reads these) and the question's scores under the official rule and
    # its corrections. ``label`` is then 1 iff the headline score is 1.0. Left out while empty.
    llm_calls: list[dict[str, Any]] = field(default_factory=list)
    scores: dict[str, Any] = field(default_factory=dict)
    OMIT_EMPTY: ClassVar[tuple[str, ...]] = ("llm_calls", "scores")
