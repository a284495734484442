"""Seeded, stratified question subsets for the ablations, and applying one at 01_preprocess.

The paper ran its ablations on an unpublished 88-question LoCoMo subset (every ablation number
is a multiple of 1/88). We store our own: an equal number of questions from each scored
category, drawn with a seeded generator, written with its recipe and the source file's sha256
so anyone can regenerate and check it (``python -m common.benchmarks.subset --help``).

Drawing a stratified subset reads the category labels: that is evaluation design, done once
offline, and the method never sees it (01_preprocess only filters by question id).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import yaml

from common.benchmarks.base import BenchmarkData
from common.benchmarks.registry import ADAPTERS, adapter
from common.core.config import ConfigError, read_yaml_mapping, resolve_path


def stratum(benchmark: str, gold: Any) -> str:
    # LoCoMo strata are the category NUMBERS, not the adapter's names: the draw visits strata in
    # sorted order, and the stored subset was drawn in numeric order.
    return str(gold.category) if benchmark == "locomo" else gold.question_type


def draw(benchmark: str, gold: Sequence[Any], n: int, seed: int, scored: Any) -> list[str]:
    """``n`` question ids, ``n / strata`` per stratum, each stratum sampled without replacement.

    The ids come back in file order, so the subset reads like the benchmark does.
    """
    by: dict[str, list[str]] = defaultdict(list)
    for g in gold:
        if scored(g):
            by[stratum(benchmark, g)].append(g.qid)
    strata = sorted(by)
    if not strata or n % len(strata):
        raise ValueError(f"n={n} must be a multiple of the {len(strata)} strata {strata}")
    per = n // len(strata)
    rng = np.random.default_rng(seed)
    chosen: set[str] = set()
    for s in strata:  # sorted, so the draw order (and the result) is fixed for a seed
        if len(by[s]) < per:
            raise ValueError(f"stratum {s} has {len(by[s])} questions, fewer than {per}")
        chosen.update(rng.choice(by[s], size=per, replace=False).tolist())
    return [g.qid for g in gold if g.qid in chosen]


def apply(data: Any, question_ids: Sequence[str], source: str) -> Any:
    """Keep only the listed questions (and gold), and only memories that still have one.

    Raises:
        ValueError: an id in the subset is not in the loaded data (wrong file or a typo).
    """
    wanted = set(question_ids)
    known = {q.qid for q in data.questions}
    missing = sorted(wanted - known)
    if missing:
        raise ValueError(f"{source}: question_ids: {len(missing)} id(s) not in the selected data, "
                         f"e.g. {missing[:3]}")
    questions = [q for q in data.questions if q.qid in wanted]
    memories = {q.memory_id for q in questions}
    return dataclasses.replace(
        data, questions=questions, gold=[g for g in data.gold if g.qid in wanted],
        sessions=[s for s in data.sessions if s.memory_id in memories])


@dataclass(frozen=True)
class Subset:
    """A stored, seeded question subset (``configs/subsets/*.yaml``)."""

    name: str
    path: Path
    question_ids: tuple[str, ...]


def load_subset(path: str | Path) -> Subset:
    p = resolve_path(str(path))
    data = read_yaml_mapping(p, "subset")
    ids = data.get("question_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ConfigError(f"{p}: question_ids: expected a list of question id strings")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{p}: question_ids: duplicate ids")
    return Subset(str(data.get("name") or p.stem), p, tuple(ids))


def load_selected(cfg: Any) -> tuple[Path, BenchmarkData, Optional[Subset]]:
    """(source file, the data 01_preprocess keeps, the subset or None): limits, then the subset."""
    data_adapter = adapter(cfg.benchmark)
    src = data_adapter.data_path(cfg)
    data = data_adapter.select(data_adapter.load(src), cfg)
    chosen = load_subset(cfg.data.subset) if cfg.data.subset else None
    if chosen is not None:
        data = apply(data, chosen.question_ids, str(chosen.path))
    return src, data, chosen


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m common.benchmarks.subset", description=__doc__.split("\n\n")[0])
    p.add_argument("--benchmark", choices=tuple(ADAPTERS), default="locomo")
    p.add_argument("--data", required=True, help="raw benchmark file (e.g. data/locomo10.json; BEAM: a tier folder)")
    p.add_argument("--n", type=int, default=88)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--name", default="s88", help="short tag used in run names")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    data_adapter = adapter(a.benchmark)
    data = data_adapter.load(Path(a.data))
    try:
        ids = draw(a.benchmark, data.gold, a.n, a.seed, data_adapter.is_scored)
    except ValueError as exc:
        sys.exit(f"error: {exc}")
    counts: dict[str, int] = defaultdict(int)
    by_qid = {g.qid: g for g in data.gold}
    for i in ids:
        counts[stratum(a.benchmark, by_qid[i])] += 1
    doc = {
        "name": a.name, "benchmark": a.benchmark,
        "recipe": {"command": f"python -m common.benchmarks.subset --benchmark {a.benchmark} --data <file> --n {a.n} "
                              f"--seed {a.seed} --name {a.name}",
                   "rule": "equal count per scored stratum (LoCoMo category / LongMemEval question_type), "
                           "numpy default_rng(seed).choice without replacement, strata in sorted order, "
                           "ids listed in file order",
                   "source_file": Path(a.data).name, "source_sha256": data_adapter.dataset_sha256(Path(a.data))},
        "per_stratum": dict(sorted(counts.items())),
        "question_ids": ids,
    }
    Path(a.out).write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    print(f"{len(ids)} questions ({dict(counts)}) -> {a.out}")


if __name__ == "__main__":
    main()
