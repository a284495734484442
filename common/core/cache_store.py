"""Where the two content-addressed caches (LLM replies, embedding vectors) keep their rows.

Two backends behind one small interface, chosen by the location string:

* a file path: SQLite in WAL mode, the harness's store from the start (tables ``responses`` and
  ``embeddings``; the keys and rows are exactly those of earlier releases, so old cache files
  keep working);
* ``postgresql://user@host:port/dbname`` (``llm.cache_url``): one PostgreSQL database that every
  worker of a run reads and writes live, on any machine. SQLite's WAL needs shared memory and
  so cannot be shared over a network file system; a server can.

Writes never replace a row another worker wrote first (``ON CONFLICT DO NOTHING``), except in the
LLM cache's ``refresh`` mode, whose point is to replace replies. The password never appears in the
URL (so never in a config, manifest or log): libpq reads it from ``PGPASSWORD`` or ``~/.pgpass``.

Connections are per thread (LLMClient calls from a thread pool) and per process (a forked child
must not share its parent's socket).
"""
from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence
from urllib.parse import unquote, urlsplit

from common.core import sqlitedb
from common.core.lazy import lazy_module

# The PostgreSQL driver, loaded on first use: a run on SQLite files never imports it.
psycopg: Any = lazy_module("psycopg")

__all__ = ["PgLocation", "parse_url", "is_url", "redact", "open_table", "TABLES", "Table",
           "SqliteTable", "PgTable", "CacheStoreError"]

URL_SCHEMES = ("postgresql", "postgres")


class CacheStoreError(RuntimeError):
    """A cache location that cannot be used (bad URL, unreachable server): one line, no secret."""


# ----------------------------------------------------------------------------- locations
@dataclass(frozen=True)
class PgLocation:
    """A PostgreSQL cache named by URL; never holds a password."""

    url: str
    user: str
    host: str
    port: int
    dbname: str


def is_url(location: str) -> bool:
    return urlsplit(str(location)).scheme.lower() in URL_SCHEMES


def parse_url(url: str, where: str = "llm.cache_url") -> PgLocation:
    """Check a ``postgresql://user@host:port/dbname`` URL (ValueError in one line naming ``where``).

    A password in the URL is refused rather than dropped: it would be copied into the run's
    resolved config and manifests, and a silently dropped one would fail later with a less clear
    error."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in URL_SCHEMES:
        raise ValueError(f"{where}: expected postgresql://user@host:port/dbname, got scheme {parts.scheme!r}")
    if parts.password is not None:
        raise ValueError(f"{where}: the URL holds a password; remove it and set PGPASSWORD "
                         f"(or ~/.pgpass) in the environment instead: {redact(url)}")
    try:
        port = parts.port or 5432
    except ValueError:
        raise ValueError(f"{where}: the port of {redact(url)} is not a number") from None
    dbname = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not dbname or "/" in dbname:
        raise ValueError(f"{where}: expected postgresql://user@host:port/dbname, got {redact(url)}")
    return PgLocation(url=url, user=unquote(parts.username or ""), host=parts.hostname, port=port, dbname=dbname)


def redact(text: str) -> str:
    """``text`` with the password of any postgres URL in it and the value of $PGPASSWORD masked."""
    out = []
    for word in str(text).split(" "):
        parts = urlsplit(word) if "://" in word else None
        if parts is not None and parts.scheme.lower() in URL_SCHEMES and parts.password is not None:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
            word = parts._replace(netloc=netloc).geturl()
        out.append(word)
    joined = " ".join(out)
    secret = os.environ.get("PGPASSWORD", "")
    return joined.replace(secret, "***") if secret else joined


# ----------------------------------------------------------------------------- tables
@dataclass(frozen=True)
class TableSpec:
    """One cache table: its columns (key columns first) in both SQL dialects."""

    name: str
    key: tuple[str, ...]
    columns: tuple[str, ...]
    sqlite_ddl: str
    pg_ddl: str


TABLES: dict[str, TableSpec] = {
    "responses": TableSpec(
        "responses", ("key",), ("key", "request", "response", "usage", "created", "latency"),
        "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, request TEXT,"
        " response TEXT, usage TEXT, created REAL, latency REAL)",
        "CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, request TEXT,"
        " response TEXT, usage TEXT, created DOUBLE PRECISION, latency DOUBLE PRECISION)"),
    "embeddings": TableSpec(
        "embeddings", ("namespace", "text_hash"), ("namespace", "text_hash", "vec"),
        "CREATE TABLE IF NOT EXISTS embeddings ("
        " namespace TEXT NOT NULL, text_hash TEXT NOT NULL, vec BLOB NOT NULL,"
        " PRIMARY KEY (namespace, text_hash))",
        "CREATE TABLE IF NOT EXISTS embeddings ("
        " namespace TEXT NOT NULL, text_hash TEXT NOT NULL, vec BYTEA NOT NULL,"
        " PRIMARY KEY (namespace, text_hash))"),
}
_SQL_CHUNK = 500


class Table:
    """One cache table in one backend. Rows are tuples in ``TableSpec.columns`` order."""

    spec: TableSpec
    location: str  # for messages: a path or a URL (which never holds a password)

    def lookup(self, columns: str, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def lookup_in(self, columns: str, fixed: str, fixed_value: Any, column: str,
                  values: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Rows with ``fixed = fixed_value`` (when ``fixed``) and ``column`` among ``values``."""
        raise NotImplementedError

    def insert(self, rows: Sequence[tuple[Any, ...]], *, replace: bool = False) -> int:
        """Write rows; an existing key is kept unless ``replace``. Returns the rows written."""
        raise NotImplementedError

    def count(self, where: str = "", params: Sequence[Any] = ()) -> int:
        raise NotImplementedError

    def scan(self, batch: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        """Every row, in key order, ``batch`` at a time (keyset paging: no long-held cursor)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class _PerThread:
    """One connection per (process, thread); every one of them is closed by ``close``."""

    def __init__(self) -> None:
        self._local = threading.local()
        self._all: list[Any] = []
        self._lock = threading.Lock()

    def get(self, make: Any, usable: Any = None) -> Any:
        """The thread's connection; a new one when there is none, it belongs to a parent process,
        or ``usable(conn)`` says it is no longer usable (a server restart broke it)."""
        held = getattr(self._local, "conn", None)
        if held is None or held[0] != os.getpid() or (usable is not None and not usable(held[1])):
            conn = make()
            self._local.conn = (os.getpid(), conn)
            with self._lock:
                self._all.append(conn)
            return conn
        return held[1]

    def close_all(self, closed_elsewhere: type[BaseException]) -> None:
        with self._lock:
            conns, self._all = self._all, []
        for conn in conns:
            try:
                conn.close()
            except closed_elsewhere:  # sqlite: made in another thread that is still alive
                pass
        self._local = threading.local()


class SqliteTable(Table):
    def __init__(self, path: str | Path, spec: TableSpec, *, create: bool = True, synchronous_normal: bool = False):
        self.spec, self.path, self.location = spec, Path(path), str(path)
        self._sync_normal = synchronous_normal
        self._conns = _PerThread()
        # The threads of one process write one after the other behind this lock: waiting on it
        # wakes a thread the moment the writer is done, whereas a thread that finds the file
        # locked sleeps in sqlite's busy handler (1, 2, 5 ... 100 ms steps), which with 16 threads
        # writing a row per answered call made those calls wait far longer than the write took.
        self._write = threading.Lock()
        if create:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = self._conn()
            con.execute(spec.sqlite_ddl)
            if spec.name == "responses":
                # Caches made before latency was kept gain the column (NULL = unknown, read as 0).
                cols = {r[1] for r in con.execute("PRAGMA table_info(responses)")}
                if "latency" not in cols:
                    con.execute("ALTER TABLE responses ADD COLUMN latency REAL")

    def _make(self) -> sqlite3.Connection:
        con = sqlitedb.connect(self.path, timeout=60.0, autocommit=True)
        if self._sync_normal:
            con.execute("PRAGMA synchronous=NORMAL")
        return con

    def _conn(self) -> sqlite3.Connection:
        con: sqlite3.Connection = self._conns.get(self._make)
        return con

    def exists(self) -> bool:
        return self._conn().execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                                    (self.spec.name,)).fetchone() is not None

    def lookup(self, columns: str, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._conn().execute(f"SELECT {columns} FROM {self.spec.name} WHERE {where}", list(params)).fetchall()

    def lookup_in(self, columns: str, fixed: str, fixed_value: Any, column: str,
                  values: Sequence[Any]) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for start in range(0, len(values), _SQL_CHUNK):
            chunk = list(values[start:start + _SQL_CHUNK])
            marks = ",".join("?" * len(chunk))
            cond = f"{fixed} = ? AND " if fixed else ""
            out += self._conn().execute(
                f"SELECT {columns} FROM {self.spec.name} WHERE {cond}{column} IN ({marks})",
                ([fixed_value] if fixed else []) + chunk).fetchall()
        return out

    def insert(self, rows: Sequence[tuple[Any, ...]], *, replace: bool = False) -> int:
        if not rows:
            return 0
        cols = self.spec.columns
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        sql = f"{verb} INTO {self.spec.name} ({', '.join(cols)}) VALUES ({','.join('?' * len(cols))})"
        con = self._conn()
        with self._write:
            if len(rows) == 1:  # one statement, its own transaction (autocommit): the lock held shortest
                return con.execute(sql, rows[0]).rowcount
            con.execute("BEGIN")
            try:
                cur = con.executemany(sql, rows)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
            return cur.rowcount

    def count(self, where: str = "", params: Sequence[Any] = ()) -> int:
        sql = f"SELECT COUNT(*) FROM {self.spec.name}" + (f" WHERE {where}" if where else "")
        return int(self._conn().execute(sql, list(params)).fetchone()[0])

    def scan(self, batch: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        key, cols = self.spec.key, ", ".join(self.spec.columns)
        order = ", ".join(key)
        last: Optional[tuple[Any, ...]] = None
        while True:
            if last is None:
                rows = self._conn().execute(f"SELECT {cols} FROM {self.spec.name} ORDER BY {order} LIMIT ?",
                                            (batch,)).fetchall()
            else:
                rows = self._conn().execute(
                    f"SELECT {cols} FROM {self.spec.name} WHERE ({order}) > ({','.join('?' * len(key))}) "
                    f"ORDER BY {order} LIMIT ?", (*last, batch)).fetchall()
            if not rows:
                return
            yield rows
            last = tuple(rows[-1][:len(key)])

    def close(self) -> None:
        self._conns.close_all(sqlite3.ProgrammingError)


class PgTable(Table):
    """The same table in PostgreSQL (psycopg 3, autocommit: every statement is its own transaction)."""

    def __init__(self, url: str, spec: TableSpec, *, create: bool = True, where: str = "llm.cache_url"):
        try:
            self.pg = parse_url(url, where)
        except ValueError as exc:
            raise CacheStoreError(str(exc)) from None
        self.spec, self.location = spec, url
        self._conns = _PerThread()
        if create:
            con = self._conn()
            # CREATE TABLE IF NOT EXISTS races with itself in PostgreSQL (two processes creating the
            # same table: one fails on the catalog's unique index), so creators take a lock first.
            with con.transaction():
                con.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"ensimem-cache-{spec.name}",))
                con.execute(spec.pg_ddl)

    def _make(self) -> Any:
        try:
            return psycopg.connect(self.pg.url, autocommit=True, connect_timeout=20,
                                   application_name="ensimem-cache")
        except psycopg.Error as exc:
            raise CacheStoreError(redact(f"cannot connect to the cache at {self.pg.url}: "
                                         f"{' '.join(str(exc).split())}")) from None

    def _conn(self) -> Any:
        return self._conns.get(self._make, lambda c: not (c.closed or c.broken))

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A read, tried once more on a new connection when the server dropped this one (a
        restart or failover during a long run): reads are idempotent."""
        try:
            rows = self._conn().execute(sql, list(params)).fetchall()
        except psycopg.OperationalError:
            rows = self._conn().execute(sql, list(params)).fetchall()
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]

    def exists(self) -> bool:
        return bool(self._read("SELECT to_regclass(%s) IS NOT NULL", (self.spec.name,))[0][0])

    def lookup(self, columns: str, where: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._read(f"SELECT {columns} FROM {self.spec.name} WHERE {where.replace('?', '%s')}", params)

    def lookup_in(self, columns: str, fixed: str, fixed_value: Any, column: str,
                  values: Sequence[Any]) -> list[tuple[Any, ...]]:
        cond = f"{fixed} = %s AND " if fixed else ""
        params = ([fixed_value] if fixed else []) + [list(values)]
        return self._read(f"SELECT {columns} FROM {self.spec.name} WHERE {cond}{column} = ANY(%s)", params)

    def insert(self, rows: Sequence[tuple[Any, ...]], *, replace: bool = False) -> int:
        if not rows:
            return 0
        cols, key = self.spec.columns, self.spec.key
        if replace:
            rest = [c for c in cols if c not in key]
            conflict = f"DO UPDATE SET {', '.join(f'{c} = EXCLUDED.{c}' for c in rest)}"
        else:
            conflict = "DO NOTHING"
        sql = (f"INSERT INTO {self.spec.name} ({', '.join(cols)}) VALUES ({','.join(['%s'] * len(cols))}) "
               f"ON CONFLICT ({', '.join(key)}) {conflict}")
        try:
            return self._insert(sql, rows)
        except psycopg.OperationalError:  # as for reads: the statement is idempotent (ON CONFLICT)
            return self._insert(sql, rows)

    def _insert(self, sql: str, rows: Sequence[tuple[Any, ...]]) -> int:
        con = self._conn()
        written = 0
        with con.transaction(), con.cursor() as cur:
            for start in range(0, len(rows), _SQL_CHUNK):
                # returning=True: psycopg then keeps each statement's result, so rowcount below
                # counts the rows this call wrote, not those another worker had written first.
                cur.executemany(sql + " RETURNING 1", rows[start:start + _SQL_CHUNK], returning=True)
                while True:
                    written += cur.rowcount if cur.rowcount > 0 else 0
                    if not cur.nextset():
                        break
        return written

    def count(self, where: str = "", params: Sequence[Any] = ()) -> int:
        sql = f"SELECT COUNT(*) FROM {self.spec.name}" + (f" WHERE {where.replace('?', '%s')}" if where else "")
        return int(self._read(sql, params)[0][0])

    def scan(self, batch: int = 2000) -> Iterator[list[tuple[Any, ...]]]:
        key, cols = self.spec.key, ", ".join(self.spec.columns)
        collated = [k + ' COLLATE "C"' for k in key]  # byte order, as SQLite compares TEXT
        order = ", ".join(collated)
        last: Optional[tuple[Any, ...]] = None
        while True:
            if last is None:
                rows = self._read(f"SELECT {cols} FROM {self.spec.name} ORDER BY {order} LIMIT %s", (batch,))
            else:
                cmp = f"({order}) > ({', '.join(['%s'] * len(key))})"
                rows = self._read(f"SELECT {cols} FROM {self.spec.name} WHERE {cmp} ORDER BY {order} LIMIT %s",
                                  (*last, batch))
            if not rows:
                return
            yield rows
            last = tuple(rows[-1][:len(key)])

    def close(self) -> None:
        self._conns.close_all(psycopg.Error)


def open_table(location: str | Path, name: str, *, create: bool = True, **sqlite_options: Any) -> Table:
    """The cache table ``name`` ("responses" | "embeddings") at a file path or a postgres URL."""
    spec = TABLES[name]
    if is_url(str(location)):
        return PgTable(str(location), spec, create=create)
    return SqliteTable(location, spec, create=create, **sqlite_options)
