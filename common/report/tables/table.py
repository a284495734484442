"""The table as written: display rows, notes, the provenance of every measured cell, the paper rows.

Builders fill a ``Table``; ``common.report.tables.writers`` turns it into md/csv/tex and the
``tableN.sources.json`` sidecar. ``fmt_acc`` is the one format of a measured accuracy cell.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from common.evaluation.stats import degenerate
from common.report.tables.published import Identity, PublishedRow, comparable
from common.report.tables.runs import ci_bounds


@dataclass
class Table:
    """A table as written: display rows, notes, and the provenance of its measured cells."""

    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Printed above the table and by ``make tables``: what must be read before any row (rows over
    # different question sets).
    warnings: list[str] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    published: list[dict[str, Any]] = field(default_factory=list)
    # (row ref, column) -> a file the Markdown cell links to (a system's protocol card); the CSV and
    # LaTeX keep the text.
    hrefs: dict[tuple[str, str], Path] = field(default_factory=dict)

    def add_cell(self, ref: str, column: str, text: str, source: dict[str, Any]) -> None:
        self.cells.append({"row": ref, "column": column, "text": text, **source})

    def add_published(self, ref: str, row: PublishedRow) -> None:
        """Record a paper row in the sidecar, with the identity that decided its comparability."""
        self.published.append({"row": ref, "method": row.method, "values": row.values, "source": row.source,
                               "answer_model": row.identity.answer_model, "judge_model": row.identity.judge_model,
                               "protocol": row.identity.protocol, "note": row.note})

    def link(self, pubs: list[tuple[str, PublishedRow]], meas: list[tuple[str, Identity]]) -> None:
        """Fill the "Comparable with" column both ways and explain every non-comparable paper row."""
        by_ref = {r["Ref"]: r for r in self.rows}
        links: dict[str, list[str]] = {ref: [] for ref in [p for p, _ in pubs] + [m for m, _ in meas]}
        for pref, prow in pubs:
            best = None
            for mref, ident in meas:
                ok, why = comparable(prow.identity, ident)
                if ok:
                    links[pref].append(mref)
                    links[mref].append(pref)
                elif best is None or why.count(";") < best.count(";"):
                    best = why
            by_ref[pref]["Comparable with"] = ", ".join(links[pref]) or f"none ({best or 'no measured row'})"
        for mref, _ in meas:
            by_ref[mref]["Comparable with"] = ", ".join(links[mref]) or "none"

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame([[r.get(c, "") for c in self.columns] for r in self.rows], columns=self.columns)


def fmt_acc(summary: dict[str, Any], digits: int = 1) -> str:
    """``90.6 [89.1, 92.0; cl 86.9, 93.8] (1395/1540)``: accuracy in %, always k/n.

    In the brackets: the question bootstrap CI if present, then after ``cl`` the cluster bootstrap
    CI (conversations / haystacks resampled) if present and defined; at 0/n or n/n, where the
    bootstrap interval is one point, after ``exact`` the Clopper-Pearson interval.
    """
    if summary.get("accuracy") is None:
        return f"n/a ({summary.get('k', 0)}/{summary.get('n', 0)})"
    text = f"{100 * summary['accuracy']:.{digits}f}"
    ci = ci_bounds(summary.get("ci"))
    clustered = ci_bounds(summary.get("ci_cluster"))
    exact = ci_bounds(summary.get("ci_exact")) if degenerate(summary.get("ci")) else None
    if ci:
        cl = f"; cl {100 * clustered[0]:.{digits}f}, {100 * clustered[1]:.{digits}f}" if clustered else ""
        cl += f"; exact {100 * exact[0]:.{digits}f}, {100 * exact[1]:.{digits}f}" if exact else ""
        text += f" [{100 * ci[0]:.{digits}f}, {100 * ci[1]:.{digits}f}{cl}]"
    return f"{text} ({summary['k']}/{summary['n']})"
