"""The one progress bar of the harness: tqdm (count, rate, ETA) on a terminal, silent in logs and CI.

``interactive()`` is true when stderr is a terminal and ``CI`` is not set (any value but empty,
``0`` or ``false``); every long step (a stage's rows, stage 04's encoding, a system's ingestion,
judge audits, imports) draws its bar through ``bar`` so they all follow that one rule.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Optional

from tqdm import tqdm

# Encodes of at least this many texts draw a bar (stage 04: one LoCoMo conversation's index is about
# a thousand texts, half a minute on a CPU); the few texts of a query never do.
MIN_ENCODE_TEXTS = 256


def interactive() -> bool:
    """Whether progress bars are drawn: stderr is a terminal and this is not CI."""
    ci = os.environ.get("CI", "").strip().lower()
    return sys.stderr.isatty() and ci in ("", "0", "false", "no")


def bar(iterable: Optional[Iterable[Any]] = None, *, total: Optional[int] = None, desc: str = "",
        enabled: bool = True, unit: str = "it", min_items: int = 2) -> tqdm:
    """A tqdm bar, disabled off a terminal, in CI, when ``enabled`` is false, or for fewer than
    ``min_items`` items; it clears itself when done (the stage's summary line stays)."""
    n = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)  # type: ignore[arg-type]
    quiet = not (enabled and interactive()) or (n is not None and n < min_items)
    return tqdm(iterable, total=n, desc=desc, unit=unit, disable=quiet, leave=False, dynamic_ncols=True)
