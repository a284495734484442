"""The interface every memory system implements, and how the harness renders what it returns.

A system sees what stages 02-07 may see: the sessions of a memory (``MemoryView``: turns with
ids, speakers, dates, image captions) and the question (``Question``: id, text, date). It never
sees gold answers, evidence or categories; the poisoning test in ``tests/test_systems.py`` runs
every registered system on a gold-poisoned fixture and requires identical requests.

The harness calls ``ingest`` once per memory (in time order, state under ``state_dir``), then
``row`` once per question; the default ``row`` turns ``search``'s evidence into a
``RetrievalRow`` (the evidence buffer the answer stage reads). Answering, judging, aggregation,
fingerprints and the ledger are the harness's, the same for every system.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Optional

from common.core.config import Config
from common.core.schema import Question, RetrievalRow, Turn
from common.core.tokens import count_tokens, get_encoding
from common.method.render import MemoryView

# Stages every system goes through: the protocol is the harness's. A system adds the method
# stages it uses (EnSIMem: episodes, extract, index, plan); the others say "skipped".
PROTOCOL_STAGES = frozenset({"preprocess", "retrieve", "answer", "judge", "aggregate"})
# The graph stages that build EnSIMem's memory: a system runs those it declares in ``stages``.
# Every other stage (the protocol's, and stages a user adds to the graph) runs for every system.
METHOD_STAGES = frozenset({"episodes", "extract", "index", "plan"})


@dataclass
class Evidence:
    """One retrieved item: a memory text, where it came from and how well it matched."""

    text: str
    dia_ids: list[str] = field(default_factory=list)  # source turns, when the system knows them
    timestamp: str = ""  # the session date (or the system's own time) of the item
    score: Optional[float] = None
    source: str = ""  # e.g. the speaker whose memory it is (mem0 keeps one memory per speaker)


@dataclass
class Spent:
    """What a call of the system cost: LLM calls and tokens, and wall seconds."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    # Audit records of the calls (``Completion.record``: model, usage, cached; no text): the
    # ledger prices ingestion from them.
    llm_calls: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: "Spent") -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.seconds = round(self.seconds + other.seconds, 4)
        self.llm_calls += other.llm_calls

    def totals(self) -> dict[str, Any]:
        """The counts without the call records (manifests, console)."""
        return {k: v for k, v in asdict(self).items() if k != "llm_calls"}


@dataclass
class Found:
    """``search``'s answer: the evidence, best first, what it cost, and free-form notes.

    ``answer``: under ``systems.protocol: native``, the answer of a system whose reference
    evaluation lets the system itself answer (an agent that searches until it answers); 07 then
    takes it as the answer, with no answer call of its own (the agent's calls are the system's, in
    06's ledger). None everywhere else."""

    evidence: list[Evidence]
    spent: Spent = field(default_factory=Spent)
    info: dict[str, Any] = field(default_factory=dict)
    answer: Optional[str] = None


@dataclass
class Context:
    """What the harness hands a system: settings, where to keep state, shared tools.

    ``embedder()`` is the harness's embedding model (loaded on first use); ``llm`` is the
    harness's cached LLM client (``complete(role, messages, ...)``; role ``memory``) or None when
    the system declares no ``role``. ``read_gold`` exists only for a system that declares
    ``reads_gold`` (the labelled oracle); for every other system it is None.
    """

    cfg: Config
    run_dir: Path
    state_dir: Path
    embedder: Callable[[], Any]
    llm: Any = None
    read_gold: Optional[Callable[[], dict[str, Any]]] = None
    # ``advance(n)``: n more sessions ingested; the harness's ingestion progress bar (a no-op off a terminal).
    advance: Callable[[int], Any] = lambda n: None
    # The local OpenAI-compatible endpoint (``common.systems.gateway``: ``base_url``, ``api_key``,
    # ``session(spent)``) while the harness ingests and searches, for a system that declares
    # ``uses_gateway``; None for every other system.
    gateway: Any = None

    @property
    def options(self) -> dict[str, Any]:
        """``method.options`` of the config: the system's own settings."""
        return dict(self.cfg.method.options)

    @property
    def include_images(self) -> bool:
        return self.cfg.episodes.include_images


def turn_text(turn: Turn, include_images: bool) -> str:
    """A turn's text as an outside system ingests it: the image caption appended when images are on."""
    return turn.text + (f" [shares {turn.blip_caption}]" if include_images and turn.blip_caption else "")


class MemorySystem:
    """Subclass this; ``search`` is the one method a system must write.

    Class attributes: ``name`` (the registered name or the class's import path), ``stages``
    (graph stages it runs; at least ``PROTOCOL_STAGES``), ``role`` (the LLM role it calls
    through ``ctx.llm``, ``"memory"`` for outside systems, else None), ``reads_gold`` (only
    the oracle), ``uses_gateway`` (the system brings its own OpenAI client, pointed at
    ``ctx.gateway``; its calls are made under ``role``), ``outside`` (False only for the
    harness's own methods).
    """

    name: str = ""
    stages: ClassVar[frozenset[str]] = PROTOCOL_STAGES
    role: Optional[str] = None
    reads_gold: ClassVar[bool] = False
    uses_gateway: ClassVar[bool] = False
    # An outside system (not the harness's own EnSIMem and baselines): its exceptions in ingest and
    # search are counted failures of that memory or question (common.systems.failures), and the
    # errors it logs while searching are counted too; the harness's own code raises as it always did.
    outside: ClassVar[bool] = True
    # Under ``systems.protocol: native``, the answer prompt of the system's reference evaluation
    # (``answer.prompt`` style: ``mem0``, or ``<name>`` for common/prompts/answer_<name>_user.txt);
    # None: the harness's prompt under both protocols. A system in its own environment takes it from
    # its card's ``answer.native`` (common.systems.registry.native_answer_prompt).
    native_answer_prompt: ClassVar[Optional[str]] = None

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    @property
    def protocol(self) -> str:
        """``common`` or ``native`` (``systems.protocol``): how this run drives the system."""
        return self.ctx.cfg.systems.protocol

    def options(self, defaults: dict[str, Any]) -> dict[str, Any]:
        """``defaults`` updated with ``method.options``; an option the system does not know is refused."""
        unknown = set(self.ctx.options) - set(defaults)
        if unknown:
            raise ValueError(f"method.options: unknown {self.name} option(s) {sorted(unknown)} "
                             f"(known: {sorted(defaults)})")
        return {**defaults, **self.ctx.options}

    # ---- what the harness asks
    def settings(self) -> dict[str, Any]:
        """Everything that changes this system's output: a change re-ingests and redoes rows
        (the native protocol too; the common one is left out so earlier runs keep their digests)."""
        return {**self.ctx.options, **({"protocol": self.protocol} if self.protocol != "common" else {})}

    def search_settings(self) -> Optional[dict[str, Any]]:
        """The settings this run's search resolved to (``top_k``, ``mode``, ...), checked against the
        system's protocol card (``common.systems.cards.check``); None when they cannot be read now.
        Default: ``settings()``, where the registered adapters keep their resolved options."""
        return self.settings()

    def version(self) -> Optional[str]:
        """The system's version as it runs here, when the system itself says (a child's hello);
        None: the harness reads it from the installed package its card names."""
        return None

    def ingest(self, view: MemoryView, state_dir: Path) -> Spent:
        """Build this memory's state under ``state_dir`` (empty at the call). Default: nothing."""
        return Spent()

    def search(self, question: Question, view: MemoryView) -> Found:
        raise NotImplementedError(f"{type(self).__name__}.search")

    @classmethod
    def estimate_ingest(cls, view: MemoryView, cfg: Config) -> Optional[Spent]:
        """The dry run's hook: the LLM calls and tokens ``ingest`` will spend on this memory,
        or None when the system does not say (then the dry run lists it as not estimated)."""
        return None

    @classmethod
    def ingests(cls) -> bool:
        """Whether the system builds state in ``ingest`` (the harness then tracks it per memory)."""
        return cls.ingest is not MemorySystem.ingest

    def inputs(self) -> list[Path]:
        """Run files 06 reads for this system (the manifest's inputs)."""
        return [self.ctx.run_dir / "01_sessions.jsonl", self.ctx.run_dir / "01_questions.jsonl"]

    def digest(self, question: Question) -> str:
        """A digest of a question row's inputs beyond the question and the memory (stale rows)."""
        return ""

    def extra(self) -> dict[str, Any]:
        """Fields of 06's manifest that describe this run of the system."""
        return {"mode": self.name, "reads_gold": self.reads_gold}

    def close(self) -> None:
        """Called once when 06 is done with the system (a process system's children are reaped)."""

    def row(self, question: Question, view: MemoryView) -> RetrievalRow:
        """The 06 row of one question (built-in systems write their own; others get this)."""
        started = time.perf_counter()
        found = self.search(question, view)
        return render(question, self.name, found, round(time.perf_counter() - started, 4))


def render_evidence(evidence: list[Evidence]) -> str:
    """The evidence buffer of an outside system: one line per item, grouped by source, in the
    order the system returned them (best first), each with its date when it has one."""
    groups: dict[str, list[str]] = {}
    for e in evidence:
        line = f"- {e.timestamp}: {e.text}" if e.timestamp else f"- {e.text}"
        groups.setdefault(e.source, []).append(line)
    blocks = [(f"Memories of {src}:\n" if src else "") + "\n".join(lines) for src, lines in groups.items()]
    return "\n\n".join(blocks)


def render(question: Question, name: str, found: Found, seconds: float) -> RetrievalRow:
    text = render_evidence(found.evidence)
    dia = list(dict.fromkeys(d for e in found.evidence for d in e.dia_ids))
    # The search's call records (a gateway system's, each with its role) go where the ledger reads
    # a row's calls; the notes keep the counts.
    info = {**found.info, "evidence": [asdict(e) for e in found.evidence], "spent": found.spent.totals()}
    if found.answer is not None:  # the system answered itself (native protocol): 07 takes it
        info["native_answer"] = found.answer
    return RetrievalRow(qid=question.qid, memory_id=question.memory_id, question=question.question, mode=name,
                        scope="", reasoning_type="", selected=[], episode_ids=[], dia_ids=dia, coverage={},
                        buffer_text=text, buffer_tokens=count_tokens(text) if text else 0,
                        seconds=found.spent.seconds or seconds, method_info=info,
                        llm_calls=list(found.spent.llm_calls))


def cap_buffer(row: RetrievalRow, budget: int) -> RetrievalRow:
    """The parity option (``systems.buffer_tokens``): the row's buffer cut to ``budget`` o200k tokens.

    An outside system's evidence keeps its own ranking: its first items, as many as fit whole,
    rendered as the harness renders evidence (a system's own template, e.g. Zep's, is replaced:
    it cannot be cut item by item); a first item longer than the budget is cut. A buffer without
    an evidence list (EnSIMem's episodes, the baselines) is cut at the budget. Under the budget a
    row is left as it was; ``method_info.parity`` says what was done.
    """
    if budget <= 0:
        return row
    info = dict(row.method_info)
    before = row.buffer_tokens
    if before <= budget:
        row.method_info = {**info, "parity": {"buffer_tokens": budget, "cut": False, "tokens_before": before}}
        return row
    evidence = info.get("evidence")
    note: dict[str, Any] = {"buffer_tokens": budget, "cut": True, "tokens_before": before}
    if isinstance(evidence, list) and evidence:
        items = [Evidence(**{k: v for k, v in e.items() if k in Evidence.__dataclass_fields__}) for e in evidence]
        kept = 0
        while kept < len(items) and count_tokens(render_evidence(items[: kept + 1])) <= budget:
            kept += 1
        text = render_evidence(items[:kept]) if kept else _cut(render_evidence(items[:1]), budget)
        kept_items = items[: max(kept, 1)]
        info["evidence"] = [asdict(e) for e in kept_items]
        row.dia_ids = list(dict.fromkeys(d for e in kept_items for d in e.dia_ids))
        note.update(items_before=len(items), items_kept=len(kept_items), first_item_cut=not kept)
    else:
        text = _cut(row.buffer_text, budget)
    row.buffer_text, row.buffer_tokens = text, count_tokens(text)
    # The slots a system rendered for its own answer prompt hold the whole search, not the cut: they
    # go, and that prompt then refuses the row (answer.system_messages) rather than exceed the budget.
    if info.pop("answer_slots", None) is not None:
        note["answer_slots_dropped"] = True
    row.method_info = {**info, "parity": note}
    return row


def _cut(text: str, budget: int) -> str:
    """The first ``budget`` o200k tokens of ``text`` (fewer if decoding splits a character)."""
    enc = get_encoding()
    ids = enc.encode(text)[:budget]
    while ids and count_tokens(enc.decode(ids)) > budget:
        ids = ids[:-1]
    return enc.decode(ids)
