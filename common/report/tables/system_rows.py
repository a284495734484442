"""The systems table's cells that say what a row is, and the native row beside its common one.

Every row says the system's protocol (``systems.protocol``: common or native), its version, how
many departures from the system's reference evaluation that protocol has (linked to the system's
protocol card, with any disagreement between the card and what ran), and the embedding model it
used; read from ``metrics.json`` (``system``, ``embedding``), else from 06's manifest.

``pair_protocols``: where a system has a native and a common run on one benchmark, answered by the
same model and judged by the same judge, each row gets the paired difference of strict accuracy
(native - common, percentage points, with its 95% paired bootstrap CI over the questions both runs
scored), so a vendor-style number and the like-for-like one sit together.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from common.evaluation.labels import load_labels
from common.evaluation.stats import pair_labels, paired_difference_ci
from common.report.tables.published import DASH
from common.report.tables.runs import RunData
from common.systems import envs, identity

COLUMNS = ["System protocol", "Version", "Departures", "Embedding model"]
PAIR_COLUMN = "Native - common"


def identity_of(run: RunData) -> dict[str, Any]:
    """The run's system identity (metrics.json's, else 06's manifest's, else its config's)."""
    recorded = run.metrics.get("system")
    return recorded if isinstance(recorded, dict) else identity.of_run(run.dir)


def cells(run: RunData) -> tuple[dict[str, str], Optional[Path]]:
    """The identity cells of ``run`` and the card file the departures cell links to (None: no card)."""
    ident = identity_of(run)
    embedding = run.metrics.get("embedding") or ident.get("embedding") or {}
    label = str(embedding.get("label") or embedding.get("model") or DASH)
    over = embedding.get("over_limit_total")
    if over:
        label += f"; {over} texts over its limit"
    deps = ident.get("departures")
    problems = identity.problems(ident)
    if deps is None:
        departures = "own method" if ident.get("outside") is False else "no card"
    else:
        departures = str(deps) + (f" (card disagrees: {'; '.join(problems)})" if problems else "")
    card = envs.REPO / ident["card"] if ident.get("card") else None
    return ({"System protocol": str(ident.get("protocol") or "common"), "Version": str(ident.get("version") or DASH),
             "Departures": departures, "Embedding model": label}, card)


def _pp(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{100 * x:+.1f}"


def difference(native: RunData, common: RunData, judge: str) -> str:
    """``+4.2 pp [-1.0, +9.5] over 150 shared questions``: native - common, strict, paired."""
    a, b = load_labels(common.dir, judge).by_qid(), load_labels(native.dir, judge).by_qid()
    pairs = pair_labels(a, b, "strict")
    if not pairs.qids:
        return "no shared question"
    low, high = paired_difference_ci(pairs.a, pairs.b)
    diff = (sum(pairs.b) - sum(pairs.a)) / len(pairs.qids)
    return f"{_pp(diff)} pp [{_pp(low)}, {_pp(high)}] over {len(pairs.qids)} shared questions"


def pair_protocols(rows: list[tuple[dict[str, str], RunData, str]]) -> None:
    """Fill ``PAIR_COLUMN`` of each (row, run, judge): the difference to the other protocol's run of
    the same system, benchmark, answer model and judge (the first such run, by reference)."""
    for row, run, judge in rows:
        row.setdefault(PAIR_COLUMN, DASH)
        if row.get("System protocol") not in ("common", "native"):
            continue
        other = "common" if row["System protocol"] == "native" else "native"
        match = next(((r, o) for r, o, j in rows if j == judge and r["System protocol"] == other
                      and (r["Benchmark"], r["System"], r["Answer model"]) ==
                      (row["Benchmark"], row["System"], row["Answer model"])), None)
        if match is None:
            continue
        mine, theirs = (run, match[1]) if row["System protocol"] == "native" else (match[1], run)
        row[PAIR_COLUMN] = f"{match[0]['Ref']} ({other}): " + difference(mine, theirs, judge)
