"""The benchmark adapters by name (``cfg.benchmark``)."""
from __future__ import annotations

from common.benchmarks import beam, locomo, locomo_plus, longmemeval, realtalk
from common.benchmarks.base import BenchmarkAdapter

ADAPTERS: dict[str, BenchmarkAdapter] = {"locomo": locomo.ADAPTER, "longmemeval": longmemeval.ADAPTER,
                                       "beam": beam.ADAPTER, "realtalk": realtalk.ADAPTER,
                                       "locomo_plus": locomo_plus.ADAPTER}


def adapter(name: str) -> BenchmarkAdapter:
    """The data adapter of a benchmark: ``data_path, load, select, is_scored, category, categories``."""
    try:
        return ADAPTERS[name]
    except KeyError:
        raise ValueError(f"benchmark {name!r} has no adapter yet (known: {', '.join(ADAPTERS)})") from None
