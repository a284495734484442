"""The cache backends' pure logic (common/core/cache_store.py, common/core/cache_merge.py): the
PostgreSQL URL and its secret, the SQLite store's unchanged files, and merging SQLite caches by key.
The PostgreSQL store itself runs against a real server in tests/test_pg_cache.py (make test-slow)."""
from __future__ import annotations

import pickle
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from common.core import cache_merge, cache_store
from common.core.config import ConfigError, load_config, to_yaml
from common.core.embeddings import EmbeddingCache
from common.core.llm import ResponseCache
from tests.conftest import REPO

SECRET = "pg-SECRET-4b1e9d"


# --------------------------------------------------------------------------- URLs and secrets
def test_parse_url_reads_user_host_port_and_database():
    loc = cache_store.parse_url("postgresql://harness@10.0.0.5:6543/cache")
    assert (loc.user, loc.host, loc.port, loc.dbname) == ("harness", "10.0.0.5", 6543, "cache")
    assert cache_store.parse_url("postgres://u@db/c").port == 5432
    assert cache_store.is_url("postgresql://u@h/c") and not cache_store.is_url(".cache/llm.sqlite")


@pytest.mark.parametrize("url, why", [
    ("mysql://u@h/c", "scheme"),
    ("postgresql://u@h:5432/", "dbname"),
    ("postgresql://u@h:port/c", "not a number"),
])
def test_parse_url_refuses_what_is_not_a_database_url(url, why):
    with pytest.raises(ValueError, match=why):
        cache_store.parse_url(url)


def test_a_password_in_the_url_is_refused_and_never_echoed(monkeypatch):
    with pytest.raises(ValueError) as err:
        cache_store.parse_url(f"postgresql://u:{SECRET}@h:5432/c")
    assert "PGPASSWORD" in str(err.value) and SECRET not in str(err.value)
    with pytest.raises(ConfigError) as cfg_err:
        load_config(["configs/locomo.yaml"], [f"llm.cache_url=postgresql://u:{SECRET}@h:5432/c"])
    assert str(cfg_err.value).startswith("llm.cache_url:") and SECRET not in str(cfg_err.value)


def test_a_url_without_password_is_kept_in_the_resolved_config():
    cfg = load_config(["configs/locomo.yaml"], ["llm.cache_url=postgresql://u@127.0.0.1:5432/c"])
    assert cfg.llm.cache_url == "postgresql://u@127.0.0.1:5432/c"
    assert "cache_url: postgresql://u@127.0.0.1:5432/c" in to_yaml(cfg)


def test_redact_masks_url_passwords_and_the_pgpassword_value(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", SECRET)
    text = cache_store.redact(f"failed: postgresql://u:hunter2@h:1/c and password {SECRET} rejected")
    assert "hunter2" not in text and SECRET not in text and "postgresql://u:***@h:1/c" in text


def test_an_unreachable_server_is_one_line_without_the_password(monkeypatch):
    monkeypatch.setenv("PGPASSWORD", SECRET)
    with pytest.raises(cache_store.CacheStoreError) as err:
        ResponseCache("postgresql://u@127.0.0.1:1/c")  # port 1: nothing listens
    msg = str(err.value)
    assert msg.startswith("cannot connect to the cache at postgresql://u@127.0.0.1:1/c") and "\n" not in msg
    assert SECRET not in msg


# --------------------------------------------------------------------------- SQLite as before
HISTORICAL_DDL = ("CREATE TABLE responses (key TEXT PRIMARY KEY, request TEXT, response TEXT, usage TEXT,"
                  " created REAL, latency REAL)")


def test_sqlite_files_keep_their_schema_and_rows(tmp_path):
    path = tmp_path / "llm.sqlite"
    cache = ResponseCache(str(path))
    cache.put("k1", {"model": "m", "messages": [{"role": "user", "content": "é"}]}, "reply", {"prompt_tokens": 3}, 0.25)
    con = sqlite3.connect(path)
    assert " ".join(con.execute("SELECT sql FROM sqlite_master WHERE name='responses'").fetchone()[0].split()) \
        == HISTORICAL_DDL
    key, request, response, usage, _, latency = con.execute("SELECT * FROM responses").fetchone()
    assert (key, request, response, usage, latency) == (
        "k1", '{"model": "m", "messages": [{"role": "user", "content": "é"}]}', "reply", '{"prompt_tokens": 3}', 0.25)
    # A SQLite file keeps its historical write: a later put of a key replaces it.
    cache.put("k1", {}, "newer", {}, 0.0)
    assert cache.get("k1")[0] == "newer"


def test_an_old_cache_file_without_latency_still_opens(tmp_path):
    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE responses (key TEXT PRIMARY KEY, request TEXT, response TEXT, usage TEXT, created REAL)")
    con.execute("INSERT INTO responses VALUES ('k', '{}', 'r', '{\"prompt_tokens\": 1}', 0)")
    con.commit()
    con.close()
    assert ResponseCache(str(path)).get("k") == ("r", {"prompt_tokens": 1}, 0.0)


def test_caches_travel_to_another_process_as_their_location(tmp_path):
    """A cache pickled for another process (a Ray task) arrives as its location and mode and opens
    its own connections there (a connection itself cannot be pickled)."""
    llm = ResponseCache(str(tmp_path / "llm.sqlite"), "ro")
    emb = EmbeddingCache(tmp_path / "emb.sqlite")
    _llm(tmp_path / "llm.sqlite", ["k"], "r")
    emb.put_many("ns", [("h", np.ones(4, dtype=np.float32))])
    llm2, emb2 = pickle.loads(pickle.dumps(llm)), pickle.loads(pickle.dumps(emb))
    assert (llm2.path, llm2.mode) == (llm.path, "ro") and llm2.get("k")[0] == "r-k"
    assert sorted(emb2.get_many("ns", ["h"])) == ["h"]


# --------------------------------------------------------------------------- merging
def _llm(path, keys, reply):
    cache = ResponseCache(str(path))
    for k in keys:
        cache.put(k, {"k": k}, f"{reply}-{k}", {"prompt_tokens": 1}, 0.1)
    cache.close()


def _emb(path, hashes, value):
    cache = EmbeddingCache(path)
    cache.put_many("ns", [(h, np.full(4, value, dtype=np.float32)) for h in hashes])
    cache.close()


def test_merge_two_sqlite_caches_by_key_never_overwriting(tmp_path):
    src, dst = tmp_path / "shard" / "llm.sqlite", tmp_path / "run" / "llm.sqlite"
    _llm(src, ["a", "b", "c"], "shard")
    _llm(dst, ["c", "d"], "run")
    [result] = cache_merge.merge(str(src), str(dst), ("llm",), progress=False)
    assert (result.table, result.copied, result.present) == ("responses", 2, 1)
    merged = ResponseCache(str(dst))
    assert [merged.get(k)[0] for k in "abcd"] == ["shard-a", "shard-b", "run-c", "run-d"]
    # Rows arrive exactly as stored (created time included), and a second merge copies nothing.
    row = "SELECT * FROM responses WHERE key='a'"
    assert sqlite3.connect(src).execute(row).fetchone() == sqlite3.connect(dst).execute(row).fetchone()
    [again] = cache_merge.merge(str(src), str(dst), ("llm",), progress=False)
    assert (again.copied, again.present) == (0, 3)


def test_merge_a_cache_directory_moves_both_caches(tmp_path):
    src, dst = tmp_path / "cache", tmp_path / "into"
    _llm(src / "llm.sqlite", ["a"], "x")
    _emb(src / "embeddings.sqlite", ["h1", "h2"], 1.0)
    _emb(dst / "embeddings.sqlite", ["h2"], 2.0)
    results = cache_merge.merge(f"{src}/", f"{dst}/", progress=False)
    assert [(r.table, r.copied, r.present) for r in results] == [("responses", 1, 0), ("embeddings", 1, 1)]
    vecs = EmbeddingCache(dst / "embeddings.sqlite").get_many("ns", ["h1", "h2"])
    assert vecs["h1"][0] == 1.0 and vecs["h2"][0] == 2.0  # the key the target held is kept


def test_merge_refuses_a_missing_source_and_the_same_file(tmp_path):
    with pytest.raises(ValueError, match="FROM: .*does not exist"):
        cache_merge.merge(str(tmp_path / "nope.sqlite"), str(tmp_path / "t.sqlite"), progress=False)
    assert not (tmp_path / "t.sqlite").exists()
    _llm(tmp_path / "a.sqlite", ["k"], "r")
    with pytest.raises(ValueError, match="same file"):
        cache_merge.merge(str(tmp_path / "a.sqlite"), str(tmp_path / "a.sqlite"), progress=False)
    with pytest.raises(ValueError, match="holds no embeddings table"):
        cache_merge.merge(str(tmp_path / "a.sqlite"), str(tmp_path / "t.sqlite"), ("embeddings",), progress=False)


def test_cache_merge_command_prints_the_counts_and_fails_in_one_line(tmp_path):
    _llm(tmp_path / "a.sqlite", ["k1", "k2"], "r")
    ok = subprocess.run([sys.executable, "-m", "common.core.cache_merge", str(tmp_path / "a.sqlite"),
                         str(tmp_path / "b.sqlite")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("responses: 2 copied, 0 already present")

def test_cache_merge_refuses_a_password_in_one_line(tmp_path, capsys):
    _llm(tmp_path / "a.sqlite", ["k1"], "r")
    assert cache_merge.main([str(tmp_path / "a.sqlite"), f"postgresql://u:{SECRET}@127.0.0.1:1/c"]) == 2
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and out.err.startswith("cache-merge: TO: the URL holds a password")
    assert SECRET not in out.err + out.out


# --------------------------------------------------------------------------- writes under concurrency
def test_threads_of_one_process_never_wait_in_sqlites_busy_handler(tmp_path, monkeypatch):
    """A stage writes one cache row per answered call from 16 threads. Writers that meet a locked
    file sleep in sqlite's busy handler in 1-100 ms steps; they must queue on the process's own
    lock instead. With no busy wait allowed at all (timeout 0), concurrent writers then never see
    "database is locked"."""
    import threading

    from common.core import sqlitedb

    real = sqlitedb.connect
    monkeypatch.setattr(sqlitedb, "connect", lambda path, *, timeout=60.0, autocommit=False:
                        real(path, timeout=0.0, autocommit=autocommit))
    cache = ResponseCache(str(tmp_path / "llm.sqlite"))
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write(t: int) -> None:
        start.wait()
        for i in range(40):
            try:
                cache.put(f"k{t}-{i}", {"n": i}, "reply " * 50, {"prompt_tokens": i}, 0.1)
            except sqlite3.OperationalError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, f"{len(errors)} writes met a locked file: {errors[0]}"
    assert cache._table is not None and cache._table.count() == 8 * 40


def test_the_llm_cache_commits_without_waiting_for_an_fsync(tmp_path):
    """synchronous=NORMAL, as the embedding cache: in WAL mode a commit is not an fsync (a row
    per answered call made the fsyncs the stages' bound); the rows are still there after a close."""
    path = tmp_path / "llm.sqlite"
    cache = ResponseCache(str(path))
    cache.put("k", {}, "r", {}, 0.0)
    con = cache._conn()
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (FULL is 2)
    cache.close()
    assert ResponseCache(str(path)).get("k") == ("r", {}, 0.0)
