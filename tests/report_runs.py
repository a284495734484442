"""Runs made for the report tests (tests/test_report*.py) through the local fake OpenAI server.

``report_runs(base)`` makes, once per test session, under ``base``:

* ``results/locomo/a``: the method (01-09) on the tiny LoCoMo fixture;
* ``results/locomo/b``: the RAG-over-turns baseline with one turn (``method.rag_k=1``): a baseline
  (no plan), and on this fixture some questions flip both ways against ``a``;
* ``results/longmemeval/a``: the method on the tiny LongMemEval fixture (has_answer evidence).
"""
from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import REPO, TINY_LOCOMO, run_overrides, run_stages

TINY_LME = REPO / "tests" / "fixtures" / "lme_tiny.json"
_DONE: dict[Path, dict[str, Path]] = {}


def report_runs(base: Path) -> dict[str, Path]:
    """Run directories by name (``a``, ``b``, ``lme``); made on first use, then reused."""
    if base in _DONE:
        return _DONE[base]
    from tests.fake_openai import FakeOpenAI

    before = os.environ.get("OPENAI_BASE_URL")
    with FakeOpenAI() as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        try:
            run_stages("configs/locomo.yaml", run_overrides(base, TINY_LOCOMO, **{"run.name": "a"}))
            run_stages("configs/locomo.yaml", run_overrides(
                base, TINY_LOCOMO, **{"run.name": "b", "method.name": "rag_turns", "method.rag_k": 1}))
            run_stages("configs/longmemeval.yaml", run_overrides(base, TINY_LME, **{"run.name": "a"}))
        finally:
            if before is None:
                os.environ.pop("OPENAI_BASE_URL", None)
            else:
                os.environ["OPENAI_BASE_URL"] = before
    results = base / "results"
    _DONE[base] = {"a": results / "locomo" / "a", "b": results / "locomo" / "b",
                   "lme": results / "longmemeval" / "a"}
    return _DONE[base]
