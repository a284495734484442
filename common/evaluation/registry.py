"""How each benchmark is judged and aggregated (``cfg.benchmark`` -> an ``Evaluator``)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from common.core.schema import Gold
from common.evaluation import beam, locomo, locomo_plus, longmemeval, realtalk


class Evaluator(Protocol):
    """The evaluation side of a benchmark, used by 08_judge and 09_aggregate only.

    ``run`` is the pipeline's run handle: ``run.path(artifact)``, ``run.judge_path(name)``,
    ``run.dir`` and ``run.cfg``.
    """

    def judge(self, client: Any, name: str, prompt_id: str, answer: Any, gold: Gold, repeat: int = 0) -> Any: ...

    def aggregate(self, run: Any, judges: list[str]) -> dict[str, Any]: ...

    def write_tables(self, run: Any, metrics: dict[str, Any]) -> list[Path]: ...


EVALUATORS: dict[str, Evaluator] = {"locomo": locomo, "longmemeval": longmemeval, "beam": beam.Beam(),
                                    "realtalk": realtalk.Realtalk(), "locomo_plus": locomo_plus.LocomoPlus()}


def evaluator(name: str, cfg: Any = None) -> Evaluator:
    """The evaluator of benchmark ``name``; with ``cfg``, BEAM's and LoCoMo-Plus's carry the run's scoring switches."""
    if name == "beam" and cfg is not None:
        return beam.Beam(beam.options(cfg))
    if name == "locomo_plus" and cfg is not None:
        return locomo_plus.LocomoPlus(locomo_plus.options(cfg))
    try:
        return EVALUATORS[name]
    except KeyError:
        raise ValueError(f"benchmark {name!r} has no evaluator (known: {', '.join(EVALUATORS)})") from None
