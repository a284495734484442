"""Benchmark adapters: raw benchmark files -> ``common.schema`` rows.

One module per benchmark (loader, gold reader, category names). Only ``01_preprocess``,
``08_judge`` and ``09_aggregate`` import from here; stages 02-07 never learn which benchmark
they run on.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.schema import Gold, Question, Session


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


class DataError(ValueError):
    """A benchmark file is unreadable or does not have the expected layout.

    The message is always a single line of the form ``<file>: <where>: <what>`` so that one log
    line tells the user which file and which field to fix. It subclasses ``ValueError`` because
    malformed input is a bad value, and callers that already catch ``ValueError`` keep working.
    """


def registry(name: str):  # -> adapter module-level object with the protocol below
    """The adapter of a benchmark: ``data_path, load, select, is_scored, aggregate, write_tables``."""
    if name == "locomo":
        from common.benchmarks.locomo import ADAPTER

        return ADAPTER
    if name == "longmemeval":
        from common.benchmarks.longmemeval import ADAPTER

        return ADAPTER
    raise ValueError(f"benchmark {name!r} has no adapter yet (known: locomo, longmemeval)")


class FileAdapter:
    """Shared part of the adapters: where the raw benchmark file is."""

    label = ""  # "LoCoMo"
    default_path = ""  # where the Makefile's download target puts the file
    default_env = ""  # environment variable naming the file
    make_target = ""  # the Makefile target that downloads it

    def data_path(self, cfg):  # -> Path
        """``data.path``, else ``$<data.env>``, else the default download location."""
        import os
        from pathlib import Path

        from common.config import resolve_path

        env = cfg.data.env or self.default_env
        path = resolve_path(cfg.data.path or os.environ.get(env) or self.default_path)
        if not path.exists():
            raise DataError(f"{path}: {self.label} file not found; run `make {self.make_target}` or set "
                            f"{env}=/path/to/{Path(self.default_path).name} (or data.path in the config)")
        return path
