"""One way to open the on-disk caches' sqlite files (LLM responses, embeddings) in WAL mode.

Switching a database to WAL takes an exclusive lock, and sqlite answers "database is locked" at
once, without waiting out the busy timeout, when another connection opens the same new file at
that moment (the threads of a stage, two stages of one process, two processes on one cache).
The switch is retried here for as long as the connection's own timeout; every other statement
waits through sqlite's busy handler as usual.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path

from tenacity import retry, retry_if_exception, stop_after_delay, wait_random_exponential


def _locked(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)


def connect(path: str | Path, *, timeout: float = 60.0, autocommit: bool = False) -> sqlite3.Connection:
    """A connection to ``path`` with WAL journaling (``autocommit``: no implicit transactions)."""
    conn = (sqlite3.connect(str(path), timeout=timeout, isolation_level=None) if autocommit
            else sqlite3.connect(str(path), timeout=timeout))

    @retry(retry=retry_if_exception(_locked), stop=stop_after_delay(timeout),
           wait=wait_random_exponential(multiplier=0.005, max=0.25), reraise=True)
    def wal() -> None:
        conn.execute("PRAGMA journal_mode=WAL")

    try:
        wal()
    except BaseException:
        conn.close()
        raise
    return conn
