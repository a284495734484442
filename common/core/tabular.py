"""Small tables: Markdown and CSV written from already computed numbers, and their formats."""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np


def format_percent(x: Optional[float], digits: int = 1, missing: str = "n/a") -> str:
    """A fraction as a percentage with ``digits`` decimals (``0.906`` -> ``90.6``); ``missing`` for None."""
    return missing if x is None else f"{100 * x:.{digits}f}"


def format_accuracy(summary: dict[str, Any]) -> str:
    """``90.6 (1395/1540)``: every percentage carries its k/n."""
    if summary.get("accuracy") is None:
        return "n/a (0/0)"
    return f"{100 * summary['accuracy']:.1f} ({summary['k']}/{summary['n']})"


def describe(values: Sequence[float]) -> dict[str, Optional[float]]:
    """n, mean, p50, p95 (linear interpolation, as the ledger's latencies) and max of a list of
    numbers (None for an empty list)."""
    if not values:
        return {"n": 0, "mean": None, "p50": None, "p95": None, "max": None}
    p50, p95 = np.percentile(np.asarray(values, dtype=float), [50, 95])
    return {"n": len(values), "mean": round(statistics.fmean(values), 4), "p50": round(float(p50), 4),
            "p95": round(float(p95), 4), "max": round(float(max(values)), 4)}


def write_table(rows: list[dict[str, str]], md_path: Path, title: str) -> list[Path]:
    """One Markdown and one CSV file with the same rows."""
    import pandas as pd  # imported here: every stage process imports this module, few write tables

    df = pd.DataFrame(rows)
    md_path.parent.mkdir(parents=True, exist_ok=True)
    header = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    body = "".join("| " + " | ".join(str(v) for v in r) + " |\n" for r in df.itertuples(index=False))
    md_path.write_text(f"{title}\n\n{header}{body}", encoding="utf-8")
    csv_path = md_path.with_suffix(".csv")
    df.to_csv(csv_path, index=False)
    return [md_path, csv_path]
