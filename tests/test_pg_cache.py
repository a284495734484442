"""The PostgreSQL cache (llm.cache_url) against a real server from Debian's packages (tests/pg_server.py):
a pipeline run whose LLM and embedding calls all land in the database, a rerun that makes no call,
two processes writing the same keys at once, and `make cache-merge` in both directions.
Marked ``cluster``: `make test-slow` runs them (a server takes seconds to start)."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from common.core.cache_store import open_table
from common.core.embeddings import EmbeddingCache
from common.core.llm import ResponseCache
from tests.conftest import REPO, TINY_LOCOMO, fake_vectors, rows, run_overrides, run_stages
from tests.pg_server import postgres_server

PG_SECRET = "pg-pass-SECRET-81c2e7"
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("pg_cache")]


@pytest.fixture(scope="module")
def pg():
    with postgres_server() as server:
        yield server


@pytest.fixture
def db(pg, request) -> str:
    """A fresh database on the module's server, named after the test."""
    return pg.create_database(request.node.name.replace("[", "_").replace("]", "").lower()[:60])


def _run(tmp_path: Path, server, run: str, **cache: str):
    sets = run_overrides(tmp_path, TINY_LOCOMO, **fake_vectors(server.base_url), **{"run.name": run, **cache})
    return run_stages("configs/locomo.yaml", sets)


def _answers(tmp_path: Path, run: str) -> list[dict]:
    answered = rows(tmp_path / "results" / "locomo" / run / "07_answer.jsonl")
    return [{k: r[k] for k in ("qid", "answer")} for r in answered]


def _merge(src: str, dst: str) -> str:
    out = subprocess.run(["make", "-s", "cache-merge", f"PY={sys.executable}", f"FROM={src}", f"TO={dst}"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def _copied(stdout: str) -> dict[str, tuple[int, int]]:
    """table -> (copied, already present) from cache-merge's lines."""
    out = {}
    for line in stdout.splitlines():
        table, rest = line.split(": ", 1)
        nums = rest.split(" (")[0].replace(" copied,", "").replace(" already present", "").split()
        out[table] = (int(nums[0]), int(nums[1]))
    return out


def test_a_run_on_the_postgres_cache_reruns_with_zero_calls(tmp_path, fake_server, monkeypatch, db):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    monkeypatch.setenv("PGPASSWORD", PG_SECRET)
    _run(tmp_path, fake_server, "first", **{"llm.cache_url": db})
    paid = fake_server.counts_by_kind()
    assert paid.get("embeddings", 0) > 0 and sum(paid.values()) > paid["embeddings"]
    # Both caches live in the database, no SQLite file was made.
    assert not (tmp_path / "llm.sqlite").exists() and not (tmp_path / "emb.sqlite").exists()
    llm_rows, emb_rows = open_table(db, "responses").count(), open_table(db, "embeddings").count()
    assert llm_rows == sum(paid.values()) - paid["embeddings"] and emb_rows > 0
    # A new run directory recomputes every stage: every call is answered by the database.
    _run(tmp_path, fake_server, "second", **{"llm.cache_url": db})
    assert fake_server.counts_by_kind() == paid, "a rerun on the shared cache must make zero calls"
    assert _answers(tmp_path, "second") == _answers(tmp_path, "first")
    # The run records where its cache was; the password (PGPASSWORD, which trust authentication
    # ignores here) is in no artifact, manifest or log of either run, nor in the cached requests.
    run_dir = tmp_path / "results" / "locomo" / "second"
    assert f"cache_url: {db}" in (run_dir / "config.resolved.yaml").read_text()
    written = b"".join(p.read_bytes() for p in (tmp_path / "results").rglob("*") if p.is_file())
    assert len(written) > 10000 and PG_SECRET.encode() not in written
    cached = "".join(map(str, open_table(db, "responses").lookup("request", "key IS NOT NULL", ())))
    assert len(cached) > 1000 and PG_SECRET not in cached  # the check reads real rows


def test_postgres_keeps_the_first_write_and_refresh_replaces_it(db):
    first, other = ResponseCache(db), ResponseCache(db)
    first.put("k", {"q": 1}, "first", {"prompt_tokens": 2}, 0.5)
    other.put("k", {"q": 1}, "second", {"prompt_tokens": 9}, 0.1)  # ON CONFLICT DO NOTHING
    assert other.get("k") == ("first", {"prompt_tokens": 2}, 0.5)
    ResponseCache(db, "refresh").put("k", {"q": 1}, "refreshed", {}, 0.0)
    assert first.get("k")[0] == "refreshed"
    assert ResponseCache(db, "ro").get("k")[0] == "refreshed"
    emb = EmbeddingCache(db)
    emb.put_many("ns", [("h", np.arange(4, dtype=np.float32))])
    emb.put_many("ns", [("h", np.ones(4, dtype=np.float32)), ("g", np.zeros(4, dtype=np.float32))])
    got = EmbeddingCache(db).get_many("ns", ["h", "g", "missing"])
    assert sorted(got) == ["g", "h"] and got["h"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert emb.count("ns") == 2 and emb.count("other") == 0


WRITER = textwrap.dedent("""
    import sys, time
    from concurrent.futures import ThreadPoolExecutor
    import numpy as np
    from common.core.embeddings import EmbeddingCache
    from common.core.llm import ResponseCache
    url, name, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
    llm, emb = ResponseCache(url), EmbeddingCache(url)
    time.sleep(max(0.0, start - time.time()))  # both processes begin writing at the same moment
    def write(i):
        llm.put(f"key-{i}", {"i": i}, f"{name}-{i}", {"prompt_tokens": i}, 0.0)
        emb.put_many("ns", [(f"h-{i}", np.full(8, i, dtype=np.float32))])
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(write, range(300)))
    print("ok")
""")


def test_two_processes_writing_the_same_keys_leave_one_row_each(db):
    start = __import__("time").time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, db, name, str(start)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("A", "B")]
    try:
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    llm, emb = open_table(db, "responses"), open_table(db, "embeddings")
    assert llm.count() == 300 and emb.count() == 300
    replies = dict(llm.lookup("key, response", "key LIKE ?", ("key-%",)))
    assert all(replies[f"key-{i}"] in (f"A-{i}", f"B-{i}") for i in range(300))


def test_cache_merge_both_directions_then_reruns_make_zero_calls(tmp_path, fake_server, monkeypatch, db):
    monkeypatch.setenv("OPENAI_BASE_URL", fake_server.base_url)
    local = tmp_path / "cache"
    files = {"llm.cache_path": str(local / "llm.sqlite"), "embedding.cache_path": str(local / "embeddings.sqlite")}
    _run(tmp_path, fake_server, "sqlite", **files)
    paid = fake_server.request_count
    n_llm = sqlite3.connect(local / "llm.sqlite").execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    n_emb = sqlite3.connect(local / "embeddings.sqlite").execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]

    # SQLite -> PostgreSQL: every row copied; then a run on the database pays nothing.
    assert _copied(_merge(f"{local}/", db)) == {"responses": (n_llm, 0), "embeddings": (n_emb, 0)}
    assert _copied(_merge(f"{local}/", db)) == {"responses": (0, n_llm), "embeddings": (0, n_emb)}
    _run(tmp_path, fake_server, "on-pg", **{"llm.cache_url": db})
    assert fake_server.request_count == paid

    # PostgreSQL -> SQLite (a new cache directory): the same rows, byte for byte; a run on it pays nothing.
    back = tmp_path / "back"
    assert _copied(_merge(db, f"{back}/")) == {"responses": (n_llm, 0), "embeddings": (n_emb, 0)}
    for name, table in (("llm.sqlite", "responses"), ("embeddings.sqlite", "embeddings")):
        dump = f"SELECT * FROM {table} ORDER BY 1, 2"
        assert sqlite3.connect(back / name).execute(dump).fetchall() == \
            sqlite3.connect(local / name).execute(dump).fetchall(), name
    _run(tmp_path, fake_server, "on-back", **{"llm.cache_path": str(back / "llm.sqlite"),
                                              "embedding.cache_path": str(back / "embeddings.sqlite")})
    assert fake_server.request_count == paid
    assert _answers(tmp_path, "on-back") == _answers(tmp_path, "on-pg") == _answers(tmp_path, "sqlite")
    assert json.loads((tmp_path / "results" / "locomo" / "on-back" / "metrics.json").read_text())["judges"] == \
        json.loads((tmp_path / "results" / "locomo" / "sqlite" / "metrics.json").read_text())["judges"]


def test_the_cache_reconnects_after_a_server_restart(pg, db):
    """A server restart (or failover) mid-run breaks every open connection; the next read or write
    opens a new one instead of failing the rest of the run."""
    cache, emb = ResponseCache(db), EmbeddingCache(db)
    cache.put("k", {"q": 1}, "before", {}, 0.0)
    emb.put_many("ns", [("h", np.ones(4, dtype=np.float32))])
    pg.restart()
    assert cache.get("k")[0] == "before"
    cache.put("k2", {"q": 2}, "after", {}, 0.0)
    assert cache.get("k2")[0] == "after"
    assert sorted(emb.get_many("ns", ["h"])) == ["h"]
