"""The paper's Tables 1, 2, 3, 4 and 10 from the harness's runs (``python -m common.report.tables``).

Reads only each run's ``metrics.json`` and per-question artifacts (01_gold, 05-08 JSONL) of the
runs named in ``configs/experiments.yaml``, and the paper's transcribed rows in
``configs/published.yaml``; it makes no LLM call. Before a measured accuracy is printed its
k, n and failures are recounted from ``01_gold.jsonl`` + ``08_judge_<judge>.jsonl`` and a
mismatch with ``metrics.json`` is an error: a number that cannot be traced is never printed.

Each table is written to ``results/tables/`` as ``tableN.md``, ``.csv`` and ``.tex`` plus
``tableN.sources.json``, which maps every measured cell to its run directory, files (sha256),
metric key, k, n, CI and config fingerprint when present.

Modules: ``published`` (the paper's rows, comparability), ``runs`` (run readers, shared with
``common.report.figures``), ``table`` (the table model), ``accuracy`` + ``table1``/``table2``,
``table3``, ``table4``, ``table10`` (one builder each), ``writers`` (md/csv/tex/sources.json),
``command`` (``main``, and the ``cli`` shared with the figures).

    python -m common.report.tables [--results results] [--out results/tables] [--only 1,2,3,4,10]
"""
from __future__ import annotations

# The names callers of the single-module ``tables`` used: ``from common.report import tables`` keeps working.
from common.report.tables.command import cli, main
from common.report.tables.published import (
    NOT_REPORTED,
    NOT_STATED,
    Identity,
    Published,
    PublishedRow,
    canonical_model,
    comparable,
    load_published,
    number,
)
from common.report.tables.runs import (
    Context,
    InconsistentRun,
    Measured,
    MissingRun,
    RunData,
    TableError,
    measured,
    open_run,
)
from common.report.tables.table import Table

__all__ = ["cli", "main", "NOT_REPORTED", "NOT_STATED", "Identity", "Published", "PublishedRow", "canonical_model",
           "comparable", "load_published", "number", "Context", "InconsistentRun", "Measured", "MissingRun", "RunData",
           "TableError", "measured", "open_run", "Table"]
