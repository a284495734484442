"""REALTALK adapter: the release's ten chat files -> ``Session`` / ``Question`` / ``Gold`` rows.

Layout (danny911kr/REALTALK @b903e06a ``data/Chat_<n>_<A>_<B>.json``; ``make data-realtalk`` or
``REALTALK_DIR``): one JSON object per chat in LoCoMo's conversation layout, at the top level.
``name`` holds ``speaker_1`` and ``speaker_2``; ``session_<k>`` the turns (``clean_text``,
``speaker``, ``dia_id``, ``date_time``, ``img_file``, ``img_url``, sometimes ``blip_caption``);
``session_<k>_date_time`` the session's date; ``events_session_<k>`` annotated events (side data,
never loaded: a method builds its memory from the turns alone, as on LoCoMo); ``qa`` the questions
(``question``, ``answer``, ``evidence``, ``category`` 1 multi-hop, 2 temporal, 3 inference).

Decisions:

* Each chat is one memory, ``realtalk-<n>`` (its file's number), chats in numeric order. Sessions,
  turns and questions are parsed by the LoCoMo adapter's code (``common.benchmarks.locomo``): the
  speakers from ``name``, a turn's text from ``clean_text``. A turn's ``date_time`` (the message's
  own timestamp) and ``img_file`` are not kept: the official scorer shows neither.
* A question's id is ``<memory>:q<k>`` (its 1-based position in ``qa``, 4 digits), naming no
  category or answer. REALTALK gives no question date.
* ``Gold``: ``category`` the file's number, ``question_type`` its name; ``evidence`` the ids that
  name a turn of the chat (LoCoMo's cleaning), ``raw_evidence`` the file's list; ``details.quirks``
  the question's data quirks (``common.benchmarks.realtalk_errata``).
* ``LIMIT=N`` draws N questions of each chat across the three categories
  (``common.benchmarks.sampling``); ``MEMORIES`` takes chat ids or their numbers.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from common.benchmarks import checksums, locomo, realtalk_errata, sampling
from common.benchmarks.base import BenchmarkData, DataError, FileAdapter, named_memories
from common.benchmarks.fields import Loc, is_instance, read_json, required, show
from common.core.config import resolve_path
from common.core.schema import Gold, Question, Session

CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "inference"}
FILE_RE = re.compile(r"Chat_(\d+)_.+\.json")
PREFIX = "realtalk"


def chat_files(root: Path) -> list[Path]:
    """The chat files of a REALTALK folder, in the order of their numbers."""
    if not root.is_dir():
        raise DataError(f"{root}: expected the REALTALK data folder (Chat_<n>_<A>_<B>.json files), got a file")
    files = sorted((p for p in root.iterdir() if p.is_file() and FILE_RE.fullmatch(p.name)),
                   key=lambda p: int(FILE_RE.fullmatch(p.name).group(1)))  # type: ignore[union-attr]
    if not files:
        raise DataError(f"{root}: no Chat_<n>_<A>_<B>.json files (run `make data-realtalk` or set REALTALK_DIR)")
    return files


def memory_id(path: Path) -> str:
    match = FILE_RE.fullmatch(path.name)
    assert match is not None
    return f"{PREFIX}-{int(match.group(1))}"


def load_realtalk(root: str | Path) -> BenchmarkData:
    """Load and validate a REALTALK folder (one line naming the file and the field on bad input)."""
    sessions: list[Session] = []
    questions: list[Question] = []
    golds: list[Gold] = []
    seen: dict[str, Path] = {}
    for path in chat_files(Path(root)):
        mid = memory_id(path)
        if mid in seen:
            raise DataError(f"{path}: chat number {mid.rsplit('-', 1)[1]} is also {seen[mid].name}'s")
        seen[mid] = path
        s, q, g = _parse_chat(path, mid)
        sessions += s
        questions += q
        golds += g
    return BenchmarkData(sessions=sessions, questions=questions, gold=golds)


def _parse_chat(path: Path, mid: str) -> tuple[list[Session], list[Question], list[Gold]]:
    raw = read_json(path)
    loc = Loc(str(path))
    if not isinstance(raw, dict):
        raise loc.error(f"expected a JSON object (one chat), got {show(raw)}")
    name = required(raw, "name", dict, loc)
    speakers = [required(name, "speaker_1", str, loc.at("name")), required(name, "speaker_2", str, loc.at("name"))]
    sessions = locomo.parse_conversation(raw, mid, loc, speakers=speakers, text_key="clean_text")
    dia_ids = {t.dia_id for s in sessions for t in s.turns}
    questions, golds = [], []
    for j, item in enumerate(required(raw, "qa", list, loc)):
        where = loc.at(f"qa[{j}]")
        category = item.get("category") if isinstance(item, dict) else None
        if isinstance(item, dict) and "category" in item and not (is_instance(category, int)
                                                                  and category in CATEGORY_NAMES):
            raise where.at("category").error(f"expected int 1-3, got {show(category)}")
        question, gold = locomo.parse_qa(item, f"{mid}:q{j + 1:04d}", mid, dia_ids, where)
        gold.question_type = CATEGORY_NAMES[gold.category]
        quirks = realtalk_errata.question_quirks(mid, question.question, gold.raw_evidence, dia_ids)
        if quirks:
            gold.details = {"quirks": quirks}
        questions.append(question)
        golds.append(gold)
    if not questions:
        raise loc.at("qa").error("no questions in the chat")
    return sessions, questions, golds


LIMIT_RULE = sampling.rule("categories", "category", "chat")


def select(data: BenchmarkData, chats: list[Any] | None = None, question_limit: int | None = None) -> BenchmarkData:
    """Keep the chats named (ids or numbers) and N questions of each, drawn across its categories."""
    kept = locomo.select(data, named_memories(data, chats, "REALTALK chat(s)") if chats else None, None)
    if question_limit is None:
        return kept
    return sampling.sample_across(kept, question_limit, lambda g: g.question_type, tuple(CATEGORY_NAMES.values()))


class _RealtalkAdapter(FileAdapter):
    """The REALTALK data: a folder of chat files, three categories. Judging: common.evaluation.realtalk."""

    name, label = "realtalk", "REALTALK"
    default_path, default_env, make_target = "data/realtalk", "REALTALK_DIR", "data-realtalk"
    categories: tuple[str, ...] = tuple(CATEGORY_NAMES.values())
    # The ten chat files of the pinned commit (configs/datasets.sha256), checked file by file.
    official_sha256 = checksums.official_files(FILE_RE.pattern)
    official_is_folder = True
    limit_rule = LIMIT_RULE

    def data_files(self, path: Path) -> list[Path]:
        return chat_files(path)

    def dataset_sha256(self, path: Path) -> str:
        return checksums.folder_sha256(path, chat_files(path))

    def category(self, gold: Gold) -> str:
        return gold.question_type

    def load(self, path: Path) -> BenchmarkData:
        return load_realtalk(path)

    def select(self, data: BenchmarkData, cfg: Any) -> BenchmarkData:
        return select(data, cfg.data.memories or None, cfg.data.question_limit)

    def is_scored(self, gold: Gold) -> bool:
        return True  # all three categories are scored (evaluate_memory.py skips only LoCoMo's 4 and 5)

    def notes(self, data: BenchmarkData) -> dict[str, str]:
        """What 01_preprocess says (and records in its manifest) about the selected questions."""
        return {"data_quirks": realtalk_errata.summary(data.gold)}


ADAPTER = _RealtalkAdapter()


COMMIT = "b903e06a9770bf4e5fe9018c3e132889666d3b4a"  # danny911kr/REALTALK: the release make data-realtalk fetches


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m common.benchmarks.realtalk",
                                description="REALTALK's data quirks: count them, and write their list")
    p.add_argument("--data", default=None, help="the chat folder (default: $REALTALK_DIR, else data/realtalk)")
    p.add_argument("--errata", default=None, metavar="FILE", help="write the list here (configs/realtalk_errata.yaml)")
    a = p.parse_args(argv)
    root = resolve_path(a.data or os.environ.get(ADAPTER.default_env) or ADAPTER.default_path)
    try:
        data = load_realtalk(root)
    except DataError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(realtalk_errata.summary(data.gold))
    if a.errata:
        status = checksums.check(ADAPTER.official_sha256, root, folder=True,
                                 read=[f.name for f in chat_files(root)])["status"]
        source = {"release": f"danny911kr/REALTALK@{COMMIT} data/", "folder_sha256": ADAPTER.dataset_sha256(root),
                  "status": status}
        doc = realtalk_errata.listing(data.gold, data.sessions, source)
        header = ("# REALTALK's data quirks, generated by `python -m common.benchmarks.realtalk --errata "
                  "configs/realtalk_errata.yaml` (common/benchmarks/realtalk_errata.py; docs/realtalk.md).\n")
        Path(a.errata).write_text(header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True), encoding="utf-8")
        print(f"-> {a.errata}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
