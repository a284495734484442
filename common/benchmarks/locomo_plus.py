"""LoCoMo-Plus adapter: ``locomo_plus.json`` stitched into ``locomo10.json`` -> ``Session`` / ``Question`` / ``Gold``.

LoCoMo-Plus (xjtuleeyf/Locomo-Plus at 059f4e3d) is LoCoMo's five question categories plus a sixth,
**Cognitive**: 401 items, each a ``cue_dialogue`` that sets an implicit constraint, a one-line
``trigger_query`` that never names it and a ``time_gap``. The official evaluation
(``data/unified_input.py``) asks LoCoMo's 1,986 questions of the ten conversations as they are,
and stitches each Cognitive item into one conversation: the cue placed by its time gap, the
trigger as the last turn (``common.benchmarks.locomo_plus_stitch`` says how, and its defects).

Decisions:

* **Memories.** Each LoCoMo conversation is one memory (its five categories' questions); each
  Cognitive item is its own memory: the conversation's sessions with the cue as one more session
  in date order, numbered in that order (``session_<k>``, turns ``D<k>:<t>``: a session after
  the cue is renumbered one up), so a stitched memory reads like any LoCoMo conversation. The
  trigger is the item's question, written as the official dialogue's last line
  (``<speaker_a> said, "<text>"``). Sessions that are the same in several memories (same id,
  date and turns) are partitioned and extracted once (``common.method.dedup``).
* **Ids name nothing.** Memory ids are opaque (``lp-<hash>`` of the conversation id or of the
  item number), so no prompt can tell a stitched memory from a plain one, and a qid is
  ``<memory>:q<k>`` for every category. ``MEMORIES`` takes LoCoMo conversation ids (the
  conversation and every item stitched into it) or memory ids.
* **Gold.** ``question_type`` is the official category name (``multi-hop``, ``temporal``,
  ``common-sense``, ``single-hop``, ``adversarial``, ``Cognitive``; LoCoMo's 1-5, 6 for
  Cognitive in ``category``). ``details`` records, for the judge, the official evidence text
  (``judge_evidence``: ``Speaker：text`` lines, with the full-width colon, as
  ``unified_input._evidence_to_text`` writes them) and the conversation; for a Cognitive item
  also its number, relation type, time gap, the days read, whether it parsed, the cue's place,
  whether the cue is right before the trigger, the pairing, and the cue and trigger dates.
  ``evidence`` is LoCoMo's cleaned turn ids, or the cue's turn ids in the stitched memory.
  Cognitive items have no answer (``answer`` is empty, as officially).
* **The switches** (``data.stitch``): ``pairing``, ``seed``, ``time_gaps``, ``context`` (the
  stitch module), and ``locomo_path``: the LoCoMo file (else ``$LOCOMO_JSON``, else
  ``locomo10.json`` beside the LoCoMo-Plus file, else ``data/locomo10.json``).

``data_path(cfg)`` is the one adapter call that sees the config (``load``, ``dataset_sha256``
take a path), and every caller makes it first: it records, for that path, the LoCoMo file and
the switches ``load`` then stitches with. A path loaded without it gets the defaults.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from common.benchmarks import checksums, sampling
from common.benchmarks import locomo_plus_stitch as stitch
from common.benchmarks.base import BenchmarkData, DataError, FileAdapter
from common.benchmarks.fields import Loc, read_json, required, show
from common.benchmarks.locomo import load_locomo
from common.core.config import resolve_path
from common.core.io import sha256_file
from common.core.schema import Gold, Question, Session, Turn

# The six official categories (unified_input.py), LoCoMo's by id order, then the sixth.
LOCOMO_CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "common-sense", 4: "single-hop", 5: "adversarial"}
COGNITIVE = "Cognitive"
COGNITIVE_ID = 6
CATEGORIES: tuple[str, ...] = (*LOCOMO_CATEGORIES.values(), COGNITIVE)
RELATION_TYPES = ("causal", "state", "goal", "value")
PLUS_FILE, LOCOMO_FILE = "locomo_plus.json", "locomo10.json"


@dataclass(frozen=True)
class Source:
    """The LoCoMo file a LoCoMo-Plus file is stitched into, and how (``data.stitch``)."""

    locomo: Path
    pairing: str = "round_robin"
    seed: int = 42
    time_gaps: str = "official"
    context: str = "official"


def memory_id_of(name: str) -> str:
    """Opaque, stable memory id of a conversation (``conv-26``) or an item (``item-17``)."""
    return "lp-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:10]


def official_sha256() -> str:
    """The dataset hash of the official pair (both files as released)."""
    return pair_sha256(checksums.official(PLUS_FILE), checksums.official(LOCOMO_FILE))


def pair_sha256(plus_sha: str, locomo_sha: str) -> str:
    """One sha256 over the two files' names and sha256s (what the run fingerprint records)."""
    h = hashlib.sha256()
    for name, sha in ((PLUS_FILE, plus_sha), (LOCOMO_FILE, locomo_sha)):
        h.update(name.encode("utf-8") + b"\0" + sha.encode("ascii") + b"\n")
    return h.hexdigest()


def default_locomo(plus_path: Path) -> Path:
    """``$LOCOMO_JSON``, else ``locomo10.json`` beside the LoCoMo-Plus file, else ``data/locomo10.json``."""
    if os.environ.get("LOCOMO_JSON"):
        return resolve_path(os.environ["LOCOMO_JSON"])
    beside = plus_path.parent / LOCOMO_FILE
    return beside if beside.exists() else resolve_path(f"data/{LOCOMO_FILE}")


# --------------------------------------------------------------------------- loading
def load_locomo_plus(path: str | Path, source: Optional[Source] = None) -> BenchmarkData:
    """The ten conversations' memories and questions, then one stitched memory per Cognitive item.

    Raises:
        DataError: A file is unreadable, a field is missing or has the wrong type, a cue or trigger
            has no ``A:``/``B:`` line, or a LoCoMo session date does not parse (one line naming the
            file and the field).
    """
    path = Path(path)
    source = source or Source(default_locomo(path))
    if not source.locomo.exists():
        raise DataError(f"{source.locomo}: LoCoMo file not found (LoCoMo-Plus stitches into it); run `make "
                        f"data-locomo-plus` or set LOCOMO_JSON=/path/to/{LOCOMO_FILE} (or data.stitch.locomo_path)")
    items = _read_items(path)
    base = load_locomo(source.locomo)
    conversations = base.memory_ids
    by_conv: dict[str, list[Session]] = {c: [] for c in conversations}
    for s in base.sessions:
        by_conv[s.memory_id].append(s)
    times = {c: _times(by_conv[c], source.locomo, c) for c in conversations}
    sessions: list[Session] = []
    questions: list[Question] = []
    golds: list[Gold] = []
    for c in conversations:  # LoCoMo's five categories, asked of the conversation as it is
        mid = memory_id_of(c)
        sessions += [dataclasses.replace(s, memory_id=mid) for s in by_conv[c]]
        for q, g in zip([q for q in base.questions if q.memory_id == c], [g for g in base.gold if g.memory_id == c]):
            qid = f"{mid}:{q.qid.rsplit(':', 1)[1]}"
            questions.append(dataclasses.replace(q, qid=qid, memory_id=mid))
            golds.append(dataclasses.replace(g, qid=qid, memory_id=mid, question_type=LOCOMO_CATEGORIES[g.category],
                                             details={"conversation": c,
                                                      "judge_evidence": evidence_text(g.raw_evidence, by_conv[c])}))
    paired = stitch.pair(len(items), len(conversations), source.pairing, source.seed)
    shared: dict[tuple[str, int, bool], list[Turn]] = {}
    for i, (item, loc) in enumerate(items):
        c = conversations[paired[i]]
        try:
            stitched, q, g = stitch_item(i, item, by_conv[c], times[c], source, c, shared)
        except ValueError as exc:
            raise loc.error(str(exc)) from None
        sessions += stitched
        questions.append(q)
        golds.append(g)
    return BenchmarkData(sessions=sessions, questions=questions, gold=golds)


def _read_items(path: Path) -> list[tuple[dict[str, Any], Loc]]:
    raw = read_json(path)
    root = Loc(str(path))
    if not isinstance(raw, list) or not raw:
        raise root.error(f"expected a non-empty JSON list of items, got {show(raw)}")
    out = []
    for i, item in enumerate(raw):
        loc = Loc(root.file, f"item[{i}]")
        if not isinstance(item, dict):
            raise loc.error(f"expected an object, got {show(item)}")
        for key in ("cue_dialogue", "trigger_query", "time_gap", "relation_type"):
            required(item, key, str, loc)
        out.append((item, loc))
    return out


def _times(sessions: list[Session], path: Path, conversation: str) -> list[Any]:
    out = []
    for s in sessions:
        try:
            out.append(stitch.session_time(s.date_time))
        except ValueError:
            raise DataError(f"{path}: {conversation}: conversation.{s.session_id}_date_time: {show(s.date_time)} is "
                            f"not a date like '1:56 pm on 8 May, 2023' (the official stitching reads it)") from None
    return out


def evidence_text(raw_evidence: list[str], sessions: list[Session]) -> str:
    """``unified_input._evidence_to_text``: each ``D<s>:<t>`` as ``Speaker：text`` (turn ``t`` by
    position), ``[id] [Missing turn]`` or ``[id] [Parse error]``; entries split on ``;`` only."""
    by_key = {s.session_id: s.turns for s in sessions}
    lines = []
    for evid in [p.strip() for ev in raw_evidence for p in str(ev).split(";") if p.strip()]:
        try:
            session_part, turn_part = evid.split(":")
            turns = by_key.get(f"session_{int(session_part.replace('D', ''))}", [])
            turn = int(turn_part)
        except ValueError:
            lines.append(f"[{evid}] [Parse error]")
            continue
        if 0 <= turn - 1 < len(turns):
            lines.append(f"{turns[turn - 1].speaker}：{turns[turn - 1].text}")
        else:
            lines.append(f"[{evid}] [Missing turn]")
    return "\n".join(lines)


def stitch_item(i: int, item: dict[str, Any], conv: list[Session], times: list[Any], source: Source,
                conversation: str, cache: Optional[dict[tuple[str, int, bool], list[Turn]]] = None
                ) -> tuple[list[Session], Question, Gold]:
    """The stitched memory, question and gold of item ``i`` (``ValueError`` for a cue or trigger
    without an ``A:``/``B:`` line). ``cache``: the renumbered sessions already built, shared."""
    cache = {} if cache is None else cache
    speaker_a, speaker_b = (conv[0].speakers + ["", ""])[:2]
    cue = [(stitch.speaker_of(t, speaker_a, speaker_b), text) for t, text in stitch.parse_ab(item["cue_dialogue"])]
    trigger = [(stitch.speaker_of(t, speaker_a, speaker_b), text)
               for t, text in stitch.parse_ab(item["trigger_query"])]
    for key, lines in (("cue_dialogue", cue), ("trigger_query", trigger)):
        if not lines:
            raise ValueError(f"{key}: no line starting 'A:' or 'B:'")
    placement = stitch.place(times, item["time_gap"], source.time_gaps == "extended")
    dated = source.context == "dated"
    mid = memory_id_of(f"item-{i}")
    sessions: list[Session] = []
    cue_ids: list[str] = []
    for k, event in enumerate(placement.order, 1):
        turns: list[Turn]
        if event == stitch.CUE:
            cue_ids = [f"D{k}:{n}" for n in range(1, len(cue) + 1)]
            turns = [Turn(dia_id=d, speaker=who, text=said) for d, (who, said) in zip(cue_ids, cue)]
            date = stitch.locomo_date(placement.cue_time) if dated else ""
        else:
            base = conv[event]
            turns = _renumbered(base, k, dated, cache)
            date = base.date_time if dated else ""
        sessions.append(Session(memory_id=mid, session_id=f"session_{k}", session_index=k, date_time=date,
                                turns=turns, speakers=[speaker_a, speaker_b]))
    qid = f"{mid}:q0001"
    question = Question(qid=qid, memory_id=mid, question="\n".join(f'{who} said, "{said}"' for who, said in trigger),
                        question_date=stitch.locomo_date(placement.query_time) if dated else "")
    details = {
        "conversation": conversation, "item": i, "relation_type": item["relation_type"],
        "time_gap": item["time_gap"], "gap_days": placement.gap.days, "gap_parsed": placement.gap.parsed,
        "cue_session": f"session_{placement.cue_position + 1}", "sessions": len(placement.order),
        "sessions_after_cue": placement.sessions_after_cue, "cue_before_trigger": placement.cue_before_trigger,
        "cue_idx_official": placement.cue_idx, "cue_time": placement.cue_time.strftime("%Y-%m-%d %H:%M"),
        "query_time": placement.query_time.strftime("%Y-%m-%d %H:%M"), "pairing": source.pairing,
        "time_gaps": source.time_gaps, "context": source.context,
        # unified_input._cue_dialogue_to_evidence: the cue only, speakers mapped, full-width colon.
        "judge_evidence": "\n".join(f"{who}：{said.strip()}" for who, said in cue if said),
    }
    gold = Gold(qid=qid, memory_id=mid, answer="", category=COGNITIVE_ID, evidence=cue_ids,
                question_type=COGNITIVE, details=details)
    return sessions, question, gold


def _renumbered(session: Session, k: int, keep_images: bool, cache: dict[tuple[str, int, bool], list[Turn]]
                ) -> list[Turn]:
    """A LoCoMo session's turns as session ``k`` of a stitched memory: the same turns when it keeps
    its number (so it is shared with the plain conversation), else ``D<j>:`` renamed ``D<k>:``;
    without images under the official context (its dialogue prints text only). A session has two
    versions at most (before or after its item's cue): each is built once and shared, read-only."""
    key = (session.key, k, keep_images)
    if key in cache:
        return cache[key]
    old, new = f"D{session.session_index}:", f"D{k}:"
    out = cache[key] = []
    for n, t in enumerate(session.turns, 1):
        dia = t.dia_id if k == session.session_index else (
            new + t.dia_id[len(old):] if t.dia_id.startswith(old) else f"{new}{n}")
        out.append(dataclasses.replace(t, dia_id=dia) if keep_images else Turn(dia_id=dia, speaker=t.speaker,
                                                                                text=t.text))
    return out


# --------------------------------------------------------------------------- selection
POOL = "locomo-plus"  # the draw's one pool: LIMIT is a number of questions of the whole benchmark
LIMIT_RULE = (f"N questions of the whole benchmark drawn across its six categories (stratified: one category after "
              f"another in a seeded order, a seeded question of each; seed {sampling.SEED}); only the memories of "
              "the drawn questions are built")


def category_name(gold: Gold) -> str:
    return gold.question_type or LOCOMO_CATEGORIES.get(gold.category, COGNITIVE)


def sample(data: BenchmarkData, question_limit: int) -> BenchmarkData:
    """``question_limit`` questions over the whole benchmark, spread over its six categories.

    The Cognitive items are appended after LoCoMo's questions and every item is its own memory, so
    neither "the first N" nor "N per memory" gives a small run across the categories: the draw is
    ``sampling.sample_across`` over one pool (every question, seed 42).
    """
    pooled = dataclasses.replace(data, gold=[dataclasses.replace(g, memory_id=POOL) for g in data.gold])
    kept = {g.qid for g in sampling.sample_across(pooled, question_limit, category_name, CATEGORIES,
                                                  number_of=lambda _: 0).gold}
    return _keep(data, kept)


def _keep(data: BenchmarkData, qids: set[str]) -> BenchmarkData:
    questions = [q for q in data.questions if q.qid in qids]
    memories = {q.memory_id for q in questions}
    return BenchmarkData(sessions=[s for s in data.sessions if s.memory_id in memories], questions=questions,
                         gold=[g for g in data.gold if g.qid in qids])


def select(data: BenchmarkData, memories: Optional[list[str]] = None,
           question_limit: Optional[int] = None, limit_rule: str = "sample") -> BenchmarkData:
    """Keep the memories named (LoCoMo conversation ids: the conversation and its items; or memory
    ids), then ``question_limit`` questions drawn across the categories (``limit_rule="first"``: the
    first N in file order); a memory left without a question is not built."""
    if question_limit is not None and question_limit < 0:
        raise ValueError(f"data.question_limit: must be >= 0, got {question_limit}")
    of_conv: dict[str, set[str]] = {}
    for g in data.gold:
        of_conv.setdefault(str(g.details.get("conversation", "")), set()).add(g.memory_id)
    known = set(data.memory_ids)
    if memories is not None:
        names = [str(m) for m in memories]
        unknown = [m for m in names if m not in known and m not in of_conv]
        if unknown:
            raise ValueError(f"data.memories: unknown LoCoMo-Plus memory or conversation id(s) {unknown}; "
                             f"conversations: {sorted(of_conv)}")
        keep = {mid for m in names for mid in (of_conv.get(m) or {m})}
        data = _keep(data, {q.qid for q in data.questions if q.memory_id in keep})
    if question_limit is None:
        return data
    if limit_rule == "first":
        return _keep(data, {q.qid for q in data.questions[:question_limit]})
    return sample(data, question_limit)


# --------------------------------------------------------------------------- the adapter
class _LocomoPlusAdapter(FileAdapter):
    """The LoCoMo-Plus data: two files, six categories. Judging: ``common.evaluation.locomo_plus``."""

    name, label = "locomo_plus", "LoCoMo-Plus"
    default_path, default_env, make_target = f"data/{PLUS_FILE}", "LOCOMO_PLUS_JSON", "data-locomo-plus"
    categories: tuple[str, ...] = CATEGORIES
    limit_rule = LIMIT_RULE

    # One hash over the two files as released (configs/datasets.sha256 lists each).
    official_sha256 = official_sha256()

    def __init__(self) -> None:
        self._sources: dict[Path, Source] = {}

    def data_path(self, cfg: Any) -> Path:
        path = super().data_path(cfg)
        st = cfg.data.stitch
        locomo = resolve_path(st.locomo_path) if st.locomo_path else default_locomo(path)
        self._sources[path.resolve()] = Source(locomo, st.pairing, st.seed, st.time_gaps, st.context)
        return path

    def source(self, path: Path) -> Source:
        return self._sources.get(Path(path).resolve()) or Source(default_locomo(Path(path)))

    def dataset_sha256(self, path: Path) -> str:
        locomo = self.source(path).locomo
        if not locomo.exists():
            raise DataError(f"{locomo}: LoCoMo file not found; run `make data-locomo-plus` or set LOCOMO_JSON")
        return pair_sha256(sha256_file(path), sha256_file(locomo))

    def load(self, path: Path) -> BenchmarkData:
        return load_locomo_plus(path, self.source(path))

    def select(self, data: BenchmarkData, cfg: Any) -> BenchmarkData:
        return select(data, cfg.data.memories or None, cfg.data.question_limit, cfg.data.limit_rule)

    def is_scored(self, gold: Gold) -> bool:
        return True  # all six categories, adversarial and Cognitive included, as the official judge scores them

    def category(self, gold: Gold) -> str:
        return category_name(gold)

    def notes(self, data: BenchmarkData) -> dict[str, Any]:
        """What 01_preprocess records and prints: the stitching's counts over the kept items."""
        items = [g.details for g in data.gold if g.question_type == COGNITIVE]
        return {"stitching": {"items": len(items), "time_gap_not_parsed": sum(not d["gap_parsed"] for d in items),
                              "cue_before_trigger": sum(bool(d["cue_before_trigger"]) for d in items),
                              "cue_before_first_session": sum(d["cue_idx_official"] is None for d in items),
                              **({"pairing": items[0]["pairing"], "time_gaps": items[0]["time_gaps"],
                                  "context": items[0]["context"]} if items else {})}}


ADAPTER = _LocomoPlusAdapter()
