"""What every benchmark adapter provides: the data container, the error type and the ``Protocol``.

One module per benchmark (loader, gold reader, selection, category names); judging and
aggregation live in ``common.evaluation``. Only ``01_preprocess``, ``08_judge`` and
``09_aggregate`` reach the adapters; stages 02-07 never learn which benchmark they run on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from common.core.config import resolve_path
from common.core.io import sha256_file
from common.core.schema import Gold, Question, Session

# ``data.limit_rule: first``: what LIMIT=N keeps, in the words the manifest records.
FIRST_N = "the first N questions of each memory, in file order"


@dataclass(frozen=True)
class BenchmarkData:
    """Everything ``01_preprocess`` writes for one benchmark file, in file order."""

    sessions: list[Session]
    questions: list[Question]
    gold: list[Gold]

    @property
    def memory_ids(self) -> list[str]:
        """Memory ids (LoCoMo conversations, LongMemEval questions) in file order."""
        ids = [s.memory_id for s in self.sessions] + [q.memory_id for q in self.questions]
        return list(dict.fromkeys(ids))


def named_memories(data: BenchmarkData, wanted: list[Any], label: str) -> list[str]:
    """``data.memories`` as memory ids: each given as its id or as its number (``3`` for
    ``beam-100K-3`` or ``realtalk-3``; ``MEMORIES=1,2`` arrives as YAML ints). ``ValueError`` names
    the unknown ones and the known ids (a typo fails loudly rather than running on nothing)."""
    names = [str(c) for c in wanted]
    known = data.memory_ids
    by_number = {m.rsplit("-", 1)[-1]: m for m in known}
    unknown = [c for c in names if c not in known and c not in by_number]
    if unknown:
        raise ValueError(f"data.memories: unknown {label} {unknown}; known: {known}")
    return [c if c in known else by_number[c] for c in names]


class DataError(ValueError):
    """A benchmark file is unreadable or does not have the expected layout.

    The message is always a single line of the form ``<file>: <where>: <what>`` so that one log
    line tells the user which file and which field to fix. It subclasses ``ValueError`` because
    malformed input is a bad value, and callers that already catch ``ValueError`` keep working.
    """


class BenchmarkAdapter(Protocol):
    """A benchmark's data side: where its file is, how to load and select it, what is scored.

    ``categories`` are the judged groups in the column order of the paper's table;
    ``category`` names a gold row's group (read only by evaluation code, never by the method).
    """

    name: str
    label: str
    categories: tuple[str, ...]

    def data_path(self, cfg: Any) -> Path: ...

    def load(self, path: Path) -> BenchmarkData: ...

    def select(self, data: BenchmarkData, cfg: Any) -> BenchmarkData: ...

    def is_scored(self, gold: Gold) -> bool: ...

    def category(self, gold: Gold) -> str: ...

    def dataset_sha256(self, path: Path) -> str: ...


class FileAdapter:
    """Shared part of the adapters: where the raw benchmark file is."""

    label = ""  # "LoCoMo"
    default_path = ""  # where the Makefile's download target puts the file
    default_env = ""  # environment variable naming the file
    make_target = ""  # the Makefile target that downloads it
    # sha256 of the official release (configs/datasets.sha256): one hash, or {file name: hash}
    # for a benchmark released as several files; another file runs but is marked "modified dataset".
    official_sha256: Any = ""
    official_is_folder = False  # the release is a folder checked file by file (BEAM)
    # How ``data.question_limit`` picks a memory's questions (``data.limit_rule: sample``; ``first`` is
    # always ``FIRST_N``): 01_preprocess records it in its manifest. An adapter that draws across
    # its categories (common.benchmarks.sampling) says so here.
    limit_rule = FIRST_N

    def official(self, cfg: Any) -> Any:
        """The official hashes for this run's configuration (``official_sha256`` unless the
        release has variants, such as BEAM's tiers)."""
        return self.official_sha256

    def data_path(self, cfg: Any) -> Path:
        """``data.path``, else ``$<data.env>``, else the default download location."""
        env = cfg.data.env or self.default_env
        path = resolve_path(cfg.data.path or os.environ.get(env) or self.default_path)
        if not path.exists():
            raise DataError(f"{path}: {self.label} file not found; run `make {self.make_target}` or set "
                            f"{env}=/path/to/{Path(self.default_path).name} (or data.path in the config)")
        return path

    def dataset_sha256(self, path: Path) -> str:
        """The sha256 the run fingerprint records for the data (of the file itself here)."""
        return sha256_file(path)
