"""Benchmark adapters: raw benchmark files -> ``common.schema`` rows.

One module per benchmark (loader, gold reader, category names). Only ``01_preprocess``,
``08_judge`` and ``09_aggregate`` import from here; stages 02-07 never learn which benchmark
they run on.
"""

from __future__ import annotations


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
