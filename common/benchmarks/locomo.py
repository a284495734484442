"""LoCoMo adapter: ``locomo10.json`` -> ``Session`` / ``Question`` / ``Gold`` rows.

Layout of the canonical file (snap-research/locomo ``data/locomo10.json``): a JSON list of
samples ``{sample_id, conversation, qa, ...}``; ``conversation`` holds ``speaker_a``,
``speaker_b`` and, per session N, ``session_N`` (a list of turns) and ``session_N_date_time``.
``event_summary``, ``observation`` and ``session_summary`` are generated or annotated side data
and are deliberately not loaded: a method must build its memory from the turns alone.

Quirks handled here (see shared/spec/benchmarks.md section 2):
* conv-26 has ``session_N_date_time`` for N = 1..35 but only 19 sessions, so sessions are
  enumerated from the ``session_N`` keys, never from the date keys.
* ``answer`` is an int in 6 questions; it is cast to ``str``.
* 444 of 446 category-5 questions have no ``answer``, only ``adversarial_answer``. That field is
  the tempting *wrong* answer, so it is kept as a distractor and never used as gold.
* ``evidence`` holds malformed entries ("D8:6; D9:17", "D", "D:11:26", space-joined ids) and
  ids that name no turn; ``Gold.evidence`` keeps only real turn ids, ``Gold.raw_evidence`` the
  source list.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from common.benchmarks import checksums, sampling
from common.benchmarks.base import BenchmarkData, FileAdapter
from common.benchmarks.fields import Loc, is_instance, iter_items, optional, required, show
from common.core.schema import Gold, Question, Session, Turn

# Integer category -> name. The file's ids do not follow the paper's listing order, and other
# harnesses print permuted names (mem0ai/mem0#2609, EverMemOS, MIRIX). This is the official
# mapping implied by snap-research/locomo task_eval/evaluation.py and confirmed in
# snap-research/locomo issue #29 "Documentation: Category ID to Name Mapping".
CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
# Category 5 has no gold answer (only a distractor) and its official rule is a gameable refusal
# substring check, so the judged protocol scores categories 1-4 only (1,540 questions).
SCORED_CATEGORIES: tuple[int, ...] = (1, 2, 3, 4)

_SESSION_KEY = re.compile(r"session_(\d+)")
_DIA_ID = re.compile(r"D\d+:\d+")
# Evidence entries are sometimes several ids joined by ';', ',' or spaces.
_EVIDENCE_SEP = re.compile(r"[;,\s]+")


LocomoData = BenchmarkData  # the shared container; the name reads better in signatures


def load_locomo(path: str | Path) -> LocomoData:
    """Load and validate a LoCoMo file (the ``locomo10.json`` layout).

    Args:
        path: Path to the JSON file.

    Returns:
        Sessions, questions and gold rows, in file order.

    Raises:
        DataError: The file cannot be read or parsed, a required field is missing or has the
            wrong type, a category is outside 1-5, a session has no turns, or a ``sample_id`` or
            ``dia_id`` repeats.
    """
    sessions: list[Session] = []
    questions: list[Question] = []
    golds: list[Gold] = []
    for sample, sample_id, loc in iter_items(Path(path), "sample", "sample_id"):
        conversation = required(sample, "conversation", dict, loc)
        sample_sessions = parse_conversation(conversation, sample_id, loc.at("conversation"))
        dia_ids = {turn.dia_id for session in sample_sessions for turn in session.turns}
        sessions.extend(sample_sessions)

        qa = required(sample, "qa", list, loc)
        for j, item in enumerate(qa):
            # qid uses the 1-based position in the sample's qa list: stable across runs and
            # traceable back to the file without renaming anything upstream.
            qid = f"{sample_id}:q{j + 1:04d}"
            question, gold = parse_qa(item, qid, sample_id, dia_ids, loc.at(f"qa[{j}]"))
            questions.append(question)
            golds.append(gold)
    return LocomoData(sessions=sessions, questions=questions, gold=golds)


def parse_conversation(conv: dict[str, Any], sample_id: str, loc: Loc, speakers: list[str] | None = None,
                       text_key: str = "text") -> list[Session]:
    """The ``session_N`` lists of a conversation in LoCoMo's layout (REALTALK's too: its speakers
    come from its ``name`` field, its turns' text from ``clean_text``)."""
    if speakers is None:
        speakers = [required(conv, "speaker_a", str, loc), required(conv, "speaker_b", str, loc)]
    numbered = sorted((int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.fullmatch(key)))
    if not numbered:
        raise loc.error("no session_N keys")

    sessions: list[Session] = []
    seen_dia_ids: set[str] = set()
    for index, key in numbered:
        raw_turns = required(conv, key, list, loc)
        if not raw_turns:
            # Nothing to remember, and the partition stage would pay for an empty prompt.
            raise loc.at(key).error("empty session (no turns)")
        date_time = required(conv, f"{key}_date_time", str, loc)
        turns = [parse_turn(t, loc.at(key).at(f"[{k}]"), text_key) for k, t in enumerate(raw_turns)]
        for k, turn in enumerate(turns):
            # Evidence and retrieval are keyed by dia_id, so a repeat would make them ambiguous.
            if turn.dia_id in seen_dia_ids:
                raise loc.at(key).at(f"[{k}]").at("dia_id").error(f"duplicate {turn.dia_id!r}")
            seen_dia_ids.add(turn.dia_id)
        sessions.append(
            Session(
                memory_id=sample_id,
                session_id=key,
                session_index=index,
                date_time=date_time,
                turns=turns,
                speakers=list(speakers),
            )
        )
    return sessions


def parse_turn(raw: Any, loc: Loc, text_key: str = "text") -> Turn:
    if not isinstance(raw, dict):
        raise loc.error(f"expected an object, got {show(raw)}")
    img_url = optional(raw, "img_url", (list, str), loc)
    if isinstance(img_url, str):
        img_url = [img_url]
    for k, url in enumerate(img_url or []):
        if not isinstance(url, str):
            raise loc.at("img_url").at(f"[{k}]").error(f"expected str, got {show(url)}")
    return Turn(
        dia_id=required(raw, "dia_id", str, loc),
        speaker=required(raw, "speaker", str, loc),
        text=required(raw, text_key, str, loc),
        role="user",  # both LoCoMo speakers are people; neither is an assistant
        img_url=list(img_url or []),
        blip_caption=optional(raw, "blip_caption", str, loc) or "",
        query=optional(raw, "query", str, loc) or "",
    )


def parse_qa(
    raw: Any, qid: str, sample_id: str, dia_ids: set[str], loc: Loc
) -> tuple[Question, Gold]:
    if not isinstance(raw, dict):
        raise loc.error(f"expected an object, got {show(raw)}")
    text = required(raw, "question", str, loc)
    if "category" not in raw:
        raise loc.at("category").error("missing required field")
    category = raw["category"]
    if not is_instance(category, int) or category not in CATEGORY_NAMES:
        raise loc.at("category").error(f"expected int 1-5, got {show(category)}")

    # Only category 5 may lack `answer`: its gold is "the conversation does not say".
    answer = optional(raw, "answer", (str, int), loc)
    if answer is None and category != 5:
        raise loc.at("answer").error("missing required field")
    adversarial = optional(raw, "adversarial_answer", (str, int), loc)

    raw_evidence = required(raw, "evidence", list, loc)
    for k, entry in enumerate(raw_evidence):
        if not isinstance(entry, str):
            raise loc.at("evidence").at(f"[{k}]").error(f"expected str, got {show(entry)}")

    question = Question(qid=qid, memory_id=sample_id, question=text)
    gold = Gold(
        qid=qid,
        memory_id=sample_id,
        answer="" if answer is None else str(answer),
        category=category,
        evidence=clean_evidence(raw_evidence, dia_ids),
        raw_evidence=list(raw_evidence),
        adversarial_answer="" if adversarial is None else str(adversarial),
    )
    return question, gold


def clean_evidence(raw_evidence: list[str], dia_ids: set[str]) -> list[str]:
    """Turn the source ``evidence`` list into well-formed ids that name real turns.

    Entries are split on ';', ',' and whitespace, stripped of parentheses (as the official
    stats code does), kept only if they look like ``D<session>:<turn>`` and name a turn of
    this conversation, and de-duplicated in first-seen order. Ids are not re-padded:
    "D30:05" is dropped as dangling rather than guessed to mean "D30:5".

    Args:
        raw_evidence: The ``evidence`` list as in the file.
        dia_ids: Every turn id of the question's conversation.

    Returns:
        The cleaned ids, possibly empty.
    """
    cleaned: list[str] = []
    for entry in raw_evidence:
        for token in _EVIDENCE_SEP.split(entry):
            token = token.strip("() ")
            if _DIA_ID.fullmatch(token) and token in dia_ids and token not in cleaned:
                cleaned.append(token)
    return cleaned


# ``data.question_limit`` on LoCoMo (``data.limit_rule: sample``): N judged questions of each
# conversation drawn across categories 1-4. In file order, conv-26's first 20 hold no single-hop one.
LIMIT_RULE = sampling.rule("categories", "category", "conversation")


def select(
    data: LocomoData,
    conversations: list[str] | None = None,
    question_limit: int | None = None,
    limit_rule: str = "first",
) -> LocomoData:
    """Restrict a loaded dataset for debug or partial runs.

    Args:
        data: A loaded dataset.
        conversations: Conversation ids to keep (``["conv-26"]``), or None for all. The result
            keeps file order, not the order given here.
        question_limit: Keep N questions of each kept conversation; None keeps all. Sessions of
            kept conversations are always kept in full, so a limited run still sees the whole memory.
        limit_rule: ``first`` (the default here, where other adapters reuse this selection): the
            first N questions in file order, category 5 included; ``sample`` (what LoCoMo's adapter
            passes by default, ``data.limit_rule``): N judged questions drawn across categories 1-4,
            seeded per conversation (``common.benchmarks.sampling``; category 5 takes no slot).

    Returns:
        A new ``LocomoData``; gold rows follow the kept questions.

    Raises:
        ValueError: An unknown conversation id or a negative limit (a typo in a config
            should fail loudly, not silently run on nothing).
    """
    known = data.memory_ids
    if conversations is not None:
        unknown = [c for c in conversations if c not in known]
        if unknown:
            raise ValueError(f"data.memories: unknown LoCoMo conversation(s) {unknown}; known: {known}")
    if question_limit is not None and question_limit < 0:
        raise ValueError(f"data.question_limit: must be >= 0, got {question_limit}")

    keep = set(known if conversations is None else conversations)
    first_n = question_limit if limit_rule == "first" else None
    taken: Counter[str] = Counter()
    questions: list[Question] = []
    for question in data.questions:
        if question.memory_id not in keep:
            continue
        if first_n is not None and taken[question.memory_id] >= first_n:
            continue
        taken[question.memory_id] += 1
        questions.append(question)
    qids = {q.qid for q in questions}
    kept = LocomoData(
        sessions=[s for s in data.sessions if s.memory_id in keep],
        questions=questions,
        gold=[g for g in data.gold if g.qid in qids],
    )
    if question_limit is None or first_n is not None:
        return kept
    return sampling.sample_across(kept, question_limit, lambda g: CATEGORY_NAMES[g.category],
                                  [CATEGORY_NAMES[c] for c in SCORED_CATEGORIES],
                                  scored=lambda g: g.category in SCORED_CATEGORIES)


# ----------------------------------------------------------------------------- protocol
class _LocomoAdapter(FileAdapter):
    """The LoCoMo data: where the file is, how to load and select it, its category names.

    Judging and aggregation live in ``common.evaluation.locomo``.
    """

    name, label = "locomo", "LoCoMo"
    default_path, default_env, make_target = "data/locomo10.json", "LOCOMO_JSON", "data"
    official_sha256 = checksums.official("locomo10.json")
    # Judged categories in the column order of the paper's Table 1.
    categories: tuple[str, ...] = tuple(CATEGORY_NAMES[c] for c in SCORED_CATEGORIES)

    def category(self, gold: Gold) -> str:
        return CATEGORY_NAMES[gold.category]

    def load(self, path: Path) -> LocomoData:
        return load_locomo(path)

    limit_rule = LIMIT_RULE

    def select(self, data: LocomoData, cfg: Any) -> LocomoData:
        return select(data, cfg.data.memories or None, cfg.data.question_limit, cfg.data.limit_rule)

    def is_scored(self, gold: Gold) -> bool:
        return gold.category in SCORED_CATEGORIES


ADAPTER = _LocomoAdapter()
