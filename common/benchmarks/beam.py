"""BEAM adapter: one tier folder of the official release -> ``Session`` / ``Question`` / ``Gold`` rows.

Layout (mohammadtavakoli78/BEAM ``chats/<tier>/``; ``make data-beam SIZE=...`` or ``BEAM_DIR``):
one numbered folder per chat, ``<n>/chat_trunecated.json`` where the release has one, else
``<n>/chat.json`` (the file the official ``answer_generation.py`` reads), and
``<n>/probing_questions/probing_questions.json``. A chat is a JSON list of batches
``{batch_number, time_anchor, turns}``; ``turns`` is a list of groups, each a list of messages
``{role, id, content, ...}``. The question file maps each of the ten abilities to a list of
questions ``{question, <answer>, rubric, difficulty, ..., source_chat_ids?}``.

Decisions (shared/spec and the release's PROVENANCE):

* Each chat is one memory, ``beam-<folder>-<n>`` (``beam-100K-7``: the folder's name is the tier),
  chats in numeric order as the official runner sorts them. Its batches are its sessions
  (``session_<batch_number>``, 1-based ``session_index`` in file order). A batch's date is its
  ``time_anchor``, else the first message ``time_anchor`` inside it, else empty. Session ids say
  nothing about the gold, so ``Session.source_id`` stays empty as for LoCoMo.
* A message's ``id`` (an int in the file) is its turn id, as a string; the questions'
  ``source_chat_ids`` refer to it. Speakers are the roles ``user`` / ``assistant``. The other
  message fields (``index``, ``question_type``, ``time_anchor``) are generation labels and never
  reach a ``Turn``.
* A question's id is ``<memory_id>:q<k>`` with ``k`` its 1-based position over the file (abilities
  in file order), so the id names no ability. The method sees only the question text: BEAM gives
  no question date.
* ``Gold``: ``question_type`` = the ability; ``answer`` = the question's answer or ideal response
  (the first of ``ANSWER_KEYS`` it has); ``rubric`` = its rubric items; ``evidence`` = every message
  id in ``source_chat_ids`` (lists, nested lists and the ``{first_..., second_...}`` mappings
  flattened in order, duplicates dropped) as strings; ``details`` = every other field (the raw
  ``source_chat_ids`` included, for its structure); ``abstention`` for the abstention ability.
  Abstention questions have no ``source_chat_ids``: their evidence is empty.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from common.benchmarks import beam_data, checksums, locomo, sampling
from common.benchmarks.base import BenchmarkData, DataError, FileAdapter, named_memories
from common.benchmarks.fields import Loc, is_instance, read_json, required, show
from common.core.config import resolve_path
from common.core.schema import Gold, Question, Session, Turn

# The ten memory abilities, in the order of the official report (report_results.py).
ABILITIES: tuple[str, ...] = (
    "abstention",
    "contradiction_resolution",
    "event_ordering",
    "information_extraction",
    "instruction_following",
    "knowledge_update",
    "multi_session_reasoning",
    "preference_following",
    "summarization",
    "temporal_reasoning",
)
ABSTENTION = "abstention"
# Where a question keeps its reference answer, by ability (the first present is used).
ANSWER_KEYS: tuple[str, ...] = ("answer", "ideal_response", "ideal_answer", "ideal_summary", "expected_compliance")
ROLES: tuple[str, ...] = ("user", "assistant")
SPEAKERS: list[str] = ["user", "assistant"]
# The tiers a run reads (data.tier): every tier make data-beam downloads. The 1M and 10M lists name
# their largest chat files by git blob id, which the dataset check compares as such (checksums.py).
TIERS: tuple[str, ...] = beam_data.TIERS
CHAT_FILES: tuple[str, ...] = ("chat_trunecated.json", "chat.json")  # the official runner's preference
QUESTIONS_FILE = Path("probing_questions") / "probing_questions.json"
_CHAT_DIR = re.compile(r"^\d+$")


def chat_dirs(root: Path) -> list[Path]:
    """The numbered chat folders of a tier, in numeric order (as the official runner sorts them)."""
    if not root.is_dir():
        raise DataError(f"{root}: expected a BEAM tier folder (numbered chat folders), got a file")
    dirs = sorted((p for p in root.iterdir() if p.is_dir() and _CHAT_DIR.match(p.name)), key=lambda p: int(p.name))
    if not dirs:
        raise DataError(f"{root}: no numbered chat folders (expected <n>/chat.json and "
                        f"<n>/{QUESTIONS_FILE})")
    return dirs


def chat_file(chat_dir: Path) -> Path:
    """``chat_trunecated.json`` where the chat has one, else ``chat.json``."""
    for name in CHAT_FILES:
        if (chat_dir / name).is_file():
            return chat_dir / name
    raise DataError(f"{chat_dir / 'chat.json'}: chat file not found")


def data_files(root: Path) -> list[Path]:
    """Every file ``load_beam`` reads, in reading order (what the dataset sha256 covers)."""
    return [f for d in chat_dirs(root) for f in (chat_file(d), d / QUESTIONS_FILE)]


def official_files(tier: str) -> dict[str, str]:
    """File (relative to the tier folder) -> digest (sha256, or git blob id where the list has one) of
    the official release of ``tier``: the list
    ``make data-beam`` checks its downloads against (``configs/beam_sha256/<tier>.txt``)."""
    return {rel.removeprefix(f"{tier}/"): sha for sha, rel in beam_data.checksums(tier)}


def dataset_sha256(root: Path) -> str:
    """One sha256 over the files read: their paths relative to the tier folder and contents."""
    return checksums.folder_sha256(root, data_files(root))


def load_beam(root: str | Path) -> BenchmarkData:
    """Load and validate a BEAM tier folder.

    Raises:
        DataError: A file is missing or unreadable, or a required field is missing or has the
            wrong type (one line naming the file and the field).
    """
    root = Path(root)
    sessions: list[Session] = []
    questions: list[Question] = []
    golds: list[Gold] = []
    for d in chat_dirs(root):
        memory_id = f"beam-{root.name}-{d.name}"
        sessions.extend(_parse_chat(chat_file(d), memory_id))
        qs, gs = _parse_questions(d / QUESTIONS_FILE, memory_id)
        questions.extend(qs)
        golds.extend(gs)
    return BenchmarkData(sessions=sessions, questions=questions, gold=golds)


def _parse_chat(path: Path, memory_id: str) -> list[Session]:
    raw = read_json(path)
    root = Loc(str(path))
    if not isinstance(raw, list) or not raw:
        raise root.error(f"expected a non-empty JSON list of batches, got {show(raw)}")
    sessions: list[Session] = []
    seen: dict[str, str] = {}
    for i, batch in enumerate(raw):
        loc = Loc(root.file, f"batch[{i}]")
        if not isinstance(batch, dict):
            raise loc.error(f"expected an object, got {show(batch)}")
        number = required(batch, "batch_number", int, loc)
        anchor = batch.get("time_anchor")
        if anchor is not None and not isinstance(anchor, str):
            raise loc.at("time_anchor").error(f"expected str or null, got {show(anchor)}")
        groups = required(batch, "turns", list, loc)
        session_id = f"session_{number}"
        turns: list[Turn] = []
        for g, group in enumerate(groups):
            where = loc.at("turns").at(f"[{g}]")
            if not isinstance(group, list):
                raise where.error(f"expected a list of messages, got {show(group)}")
            for m, message in enumerate(group):
                turn, message_anchor = _parse_message(message, where.at(f"[{m}]"))
                if turn.dia_id in seen:
                    raise where.at(f"[{m}]").at("id").error(
                        f"duplicate message id {turn.dia_id} (first in {seen[turn.dia_id]})")
                seen[turn.dia_id] = session_id
                anchor = anchor or message_anchor
                turns.append(turn)
        if any(s.session_id == session_id for s in sessions):
            raise loc.at("batch_number").error(f"duplicate batch_number {number}")
        sessions.append(Session(memory_id=memory_id, session_id=session_id, session_index=i + 1,
                                date_time=anchor or "", turns=turns, speakers=list(SPEAKERS)))
    return sessions


def _parse_message(raw: Any, loc: Loc) -> tuple[Turn, str]:
    if not isinstance(raw, dict):
        raise loc.error(f"expected an object, got {show(raw)}")
    role = required(raw, "role", str, loc)
    if role not in ROLES:
        raise loc.at("role").error(f"expected 'user' or 'assistant', got {show(role)}")
    ident = required(raw, "id", int, loc)
    content = required(raw, "content", str, loc)
    anchor = raw.get("time_anchor")
    if anchor is not None and not isinstance(anchor, str):
        raise loc.at("time_anchor").error(f"expected str or null, got {show(anchor)}")
    return Turn(dia_id=str(ident), speaker=role, text=content, role=role), anchor or ""


def _message_ids(value: Any, loc: Loc) -> list[str]:
    """Message ids of ``source_chat_ids`` in order: an int, or lists / mappings of them."""
    if is_instance(value, int):
        return [str(value)]
    if isinstance(value, list):
        return [i for k, v in enumerate(value) for i in _message_ids(v, loc.at(f"[{k}]"))]
    if isinstance(value, dict):
        return [i for k, v in value.items() for i in _message_ids(v, loc.at(str(k)))]
    raise loc.error(f"expected message ids (int, list or mapping), got {show(value)}")


def _parse_questions(path: Path, memory_id: str) -> tuple[list[Question], list[Gold]]:
    raw = read_json(path)
    root = Loc(str(path))
    if not isinstance(raw, dict) or not raw:
        raise root.error(f"expected a JSON object of abilities, got {show(raw)}")
    questions: list[Question] = []
    golds: list[Gold] = []
    for ability, items in raw.items():
        where = Loc(root.file, field=ability)
        if ability not in ABILITIES:
            raise where.error(f"unknown ability; expected one of {', '.join(ABILITIES)}")
        if not isinstance(items, list):
            raise where.error(f"expected a list of questions, got {show(items)}")
        for k, item in enumerate(items):
            loc = Loc(root.file, f"{ability}[{k}]")
            if not isinstance(item, dict):
                raise loc.error(f"expected an object, got {show(item)}")
            text = required(item, "question", str, loc)
            rubric = required(item, "rubric", list, loc)
            for r, entry in enumerate(rubric):
                if not isinstance(entry, str):
                    raise loc.at("rubric").at(f"[{r}]").error(f"expected str, got {show(entry)}")
            key = next((a for a in ANSWER_KEYS if a in item), None)
            if key is None:
                raise loc.error(f"missing required field (one of {', '.join(ANSWER_KEYS)})")
            answer = required(item, key, str, loc)
            evidence = []
            if item.get("source_chat_ids") is not None:
                evidence = list(dict.fromkeys(_message_ids(item["source_chat_ids"], loc.at("source_chat_ids"))))
            qid = f"{memory_id}:q{len(questions) + 1}"
            questions.append(Question(qid=qid, memory_id=memory_id, question=text))
            details = {f: v for f, v in item.items() if f not in ("question", "rubric", key)}
            golds.append(Gold(qid=qid, memory_id=memory_id, answer=answer, category=0, evidence=evidence,
                              question_type=ability, abstention=ability == ABSTENTION, rubric=list(rubric),
                              details=details))
    if not questions:
        raise root.error("no probing questions in the file")
    return questions, golds


# ``data.question_limit`` on BEAM: the per-chat draw across abilities (common.benchmarks.sampling).
LIMIT_SEED = sampling.SEED
LIMIT_RULE = sampling.rule("abilities", "ability", "chat")


def sample(data: BenchmarkData, question_limit: int) -> BenchmarkData:
    """``question_limit`` questions of each chat, spread over its abilities.

    A chat's question file lists its abilities one block after another, abstention first, so its
    first N questions would all be abstention questions: the draw is ``sampling.sample_across``,
    seeded by the chat's folder number (``beam-100K-7`` -> 7).
    """
    return sampling.sample_across(data, question_limit, lambda g: g.question_type, ABILITIES,
                                  number_of=_chat_number)


def _chat_number(memory_id: str) -> int:
    number = memory_id.rsplit("-", 1)[-1]
    return int(number) if number.isdigit() else 0


def select(data: BenchmarkData, chats: list[str] | None = None, question_limit: int | None = None,
           limit_rule: str = "sample") -> BenchmarkData:
    """Keep the chats named (memory ids, or their folder numbers) and N questions of each, drawn
    across its abilities (``sample``; ``limit_rule="first"``: the first N in file order)."""
    if chats is not None:
        chats = named_memories(data, chats, "BEAM chat(s)")
    if limit_rule == "first":
        return locomo.select(data, chats, question_limit, "first")
    kept = locomo.select(data, chats, None)  # the chats, as LoCoMo keeps conversations
    return kept if question_limit is None else sample(kept, question_limit)


class _BeamAdapter(FileAdapter):
    """The BEAM data: a tier folder (not one file), its ten abilities. Judging: common.evaluation."""

    name, label = "beam", "BEAM"
    default_env, make_target = "BEAM_DIR", "data-beam"
    categories: tuple[str, ...] = ABILITIES
    # The official release, per file under chats/ of the pinned commit (<tier>/<n>/<file>), both tiers.
    official_sha256 = {f"{tier}/{rel}": sha for tier in TIERS for rel, sha in official_files(tier).items()}
    official_is_folder = True
    limit_rule = LIMIT_RULE

    def official(self, cfg: Any) -> dict[str, str]:
        """The tier's files (``data.tier``), relative to the tier folder as ``data_files`` reads them."""
        return official_files(cfg.data.tier)

    def data_files(self, path: Path) -> list[Path]:
        return data_files(path)

    def data_path(self, cfg: Any) -> Path:
        """``data.path``, else ``$BEAM_DIR``, else ``data/beam/<data.tier>`` (``make data-beam``)."""
        env = cfg.data.env or self.default_env
        path = resolve_path(cfg.data.path or os.environ.get(env) or f"data/beam/{cfg.data.tier}")
        if not path.exists():
            raise DataError(f"{path}: BEAM folder not found; run `make data-beam SIZE={cfg.data.tier}` or set "
                            f"{env}=/path/to/<tier folder> (or data.path in the config)")
        return path

    def dataset_sha256(self, path: Path) -> str:
        return dataset_sha256(path)

    def category(self, gold: Gold) -> str:
        return gold.question_type

    def load(self, path: Path) -> BenchmarkData:
        return load_beam(path)

    def select(self, data: BenchmarkData, cfg: Any) -> BenchmarkData:
        return select(data, cfg.data.memories or None, cfg.data.question_limit, cfg.data.limit_rule)

    def is_scored(self, gold: Gold) -> bool:
        return True  # every ability is scored, abstention included (by its rubric)


ADAPTER = _BeamAdapter()
