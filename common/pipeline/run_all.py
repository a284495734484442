"""The whole stage graph, 01 to 09, in one process: what ``make locomo``, ``make longmemeval`` and
``make beam`` run.

Each stage reads its inputs from the run directory and writes its artifacts there exactly as the
numbered scripts do (``python -m LoCoMo.06_retrieve`` still runs one stage); one process only
saves loading the LLM SDK, the embedding model and the config nine times.

Run from the repository root: python -m common.pipeline.run_all BENCHMARK [the numbered scripts' options]
"""
from __future__ import annotations

import sys

from common.benchmarks.registry import ADAPTERS
from common.pipeline import cli
from common.pipeline.graph import STAGES


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ADAPTERS:
        sys.exit(f"usage: python -m common.pipeline.run_all {{{','.join(ADAPTERS)}}} [options]")
    benchmark = sys.argv.pop(1)
    cli.main_stages(STAGES, benchmark, __doc__)


if __name__ == "__main__":
    main()
