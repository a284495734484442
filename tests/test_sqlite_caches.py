"""The two on-disk caches open while another connection writes to their file.

Switching a sqlite file to WAL fails at once with "database is locked" (the busy timeout does
not apply) while another connection holds a write lock: the threads of a stage, or two stages
of one ``make locomo`` process, opening one new cache together. Both caches go through
``common.core.sqlitedb.connect``, which waits that out.
"""
from __future__ import annotations

import sqlite3
import threading
import time

import numpy as np
import pytest

from common.core import sqlitedb
from common.core.embeddings import EmbeddingCache
from common.core.llm import ResponseCache


def _held_for(path, seconds: float) -> threading.Thread:
    """A connection that holds a write lock on ``path`` for ``seconds``, then commits."""
    other = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE IF NOT EXISTS held (x)")
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO held VALUES (1)")

    def release():
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    t = threading.Thread(target=release)
    t.start()
    return t


def test_plain_sqlite_fails_at_once_on_the_switch_to_wal(tmp_path):
    # The behaviour the helper exists for: were this to change, the helper would be moot.
    path = tmp_path / "plain.sqlite"
    t = _held_for(path, 0.3)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlite3.connect(str(path), timeout=5).execute("PRAGMA journal_mode=WAL")
    t.join()


@pytest.mark.parametrize("kind", ["embeddings", "responses"])
def test_a_cache_opened_during_anothers_write_waits_and_works(tmp_path, kind):
    path = tmp_path / f"{kind}.sqlite"
    t = _held_for(path, 0.3)
    started = time.time()
    if kind == "embeddings":
        cache = EmbeddingCache(path)
        cache.put_many("ns", [("h", np.ones(3, dtype=np.float32))])
        assert list(cache.get_many("ns", ["h"])) == ["h"]
    else:
        cache = ResponseCache(str(path))
        cache.put("k", {"messages": []}, "reply", {"prompt_tokens": 1, "completion_tokens": 1})
        assert cache.get("k")[0] == "reply"
    assert time.time() - started >= 0.2  # it waited for the writer instead of failing
    t.join()
    with sqlite3.connect(str(path)) as con:
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_eight_threads_opening_one_new_embedding_cache_together_all_succeed(tmp_path):
    errors: list[str] = []
    for round_ in range(10):
        path = tmp_path / f"race{round_}.sqlite"
        barrier = threading.Barrier(8)

        def open_and_write(i: int, path=path, barrier=barrier) -> None:
            try:
                barrier.wait()
                EmbeddingCache(path).put_many("ns", [(f"{i}-{k}", np.ones(4, dtype=np.float32)) for k in range(20)])
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                errors.append(repr(exc))

        threads = [threading.Thread(target=open_and_write, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_the_wait_is_bounded_by_the_connections_timeout(tmp_path):
    path = tmp_path / "bounded.sqlite"
    t = _held_for(path, 1.5)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        sqlitedb.connect(path, timeout=0.3)
    t.join()
