"""``LIMIT=N`` as a draw across a memory's question groups, for every benchmark.

A partial run's first N questions in file order say little: a release lists its questions by
category or ability (BEAM's abilities one block after another, LoCoMo-Plus's Cognitive items
appended after the base questions), so the first N of a memory can all be of one kind. Which
questions a partial run covers is a choice of the data subset, made in 01_preprocess before any
stage runs and never seen by the method (as ``common.benchmarks.subset`` draws the ablation
subsets): the draw reads the gold group labels for that only.

The draw is seeded per memory (``SEED`` and the memory's own number, so a memory gets the same
questions whichever other memories are selected); the groups are visited in a seeded order and
each gives one seeded question per round until N are taken. The kept questions stay in file order.
Where every memory holds one question (LongMemEval), the file is one pool (``per_memory=False``):
N questions of the file, drawn across its question types. ``data.limit_rule: first`` keeps the
first N in file order instead (``FIRST_N``).
"""
from __future__ import annotations

import zlib
from typing import Callable, Optional, Sequence

import numpy as np

from common.benchmarks.base import BenchmarkData
from common.core.schema import Gold

SEED = 42


def rule(groups: str, group: str, memory: str = "memory", *, per_memory: bool = True) -> str:
    """The sentence 01_preprocess records in its manifest for this draw (``rule("abilities",
    "ability", "chat")``; ``per_memory=False``: the file as one pool)."""
    where, seed = (f"each {memory}", f"seed {SEED} and the {memory}'s number") if per_memory else ("the file",
                                                                                                   f"seed {SEED}")
    return (f"N questions of {where} drawn across its {groups} (stratified: one {group} after another "
            f"in a seeded order, a seeded question of each; {seed})")


def memory_number(memory_id: str) -> int:
    """A memory's number for its seed: the trailing number of its id (``beam-100K-7`` -> 7,
    ``conv-26`` -> 26), else a stable CRC32 of the id (LongMemEval's hashed ids)."""
    tail = memory_id.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else zlib.crc32(memory_id.encode("utf-8"))


def sample_across(data: BenchmarkData, question_limit: int, group_of: Callable[[Gold], str],
                  known_order: Sequence[str] = (), scored: Optional[Callable[[Gold], bool]] = None,
                  number_of: Callable[[str], int] = memory_number, per_memory: bool = True) -> BenchmarkData:
    """``question_limit`` questions of each memory (``per_memory=False``: of the whole file), spread
    over the groups ``group_of`` names.

    ``known_order`` lists the benchmark's groups in their canonical order (the seeded order
    permutes it; groups not listed follow, sorted). ``scored``: when given, only questions it
    accepts are drawn (a LoCoMo category-5 question is not scored, so it never takes a slot).
    Sessions are kept as given: the caller drops memories left without a question if it must.
    """
    if question_limit < 0:
        raise ValueError(f"data.question_limit: must be >= 0, got {question_limit}")
    by_memory: dict[str, dict[str, list[str]]] = {}
    for g in data.gold:
        if scored is None or scored(g):
            by_memory.setdefault(g.memory_id if per_memory else "", {}).setdefault(group_of(g), []).append(g.qid)
    keep: set[str] = set()
    for memory_id, by_group in by_memory.items():
        rng = np.random.default_rng([SEED, number_of(memory_id) if per_memory else 0])
        order = [a for a in known_order if a in by_group] + sorted(a for a in by_group if a not in known_order)
        order = [order[i] for i in rng.permutation(len(order))]
        pools = {a: [by_group[a][i] for i in rng.permutation(len(by_group[a]))] for a in order}
        taken: list[str] = []
        while len(taken) < question_limit and any(pools.values()):
            for a in order:
                if pools[a] and len(taken) < question_limit:
                    taken.append(pools[a].pop(0))
        keep.update(taken)
    return BenchmarkData(sessions=data.sessions, questions=[q for q in data.questions if q.qid in keep],
                         gold=[g for g in data.gold if g.qid in keep])
