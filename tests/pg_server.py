"""A real, throw-away PostgreSQL server for tests, from Debian's packages (`make postgres`).

``with postgres_server() as pg:`` runs ``initdb`` into a fresh temporary directory and starts the
server on 127.0.0.1 and a free port, with trust authentication for 127.0.0.1 only (no password
exists anywhere); it is stopped (``pg_ctl stop -m immediate``) and its directory removed however
the block ends. ``initdb`` refuses to run as root, so as root the server runs as the ``postgres``
user that the Debian package creates. ``pg.create_database(name)`` returns the URL of a new
database (one per test keeps tests independent on one server).

Tests that use it are marked ``cluster`` (``make test-slow``): a server takes a few seconds to start.
A missing server is a failure with the command to run, never a skip.
"""
from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator


class PostgresUnavailable(RuntimeError):
    pass


def server_bin() -> Path:
    """The directory of Debian's initdb/pg_ctl (the newest installed major version)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if not found:
        raise PostgresUnavailable("PostgreSQL's server is not installed: run `make postgres` "
                                  "(apt-get install postgresql)")
    return Path(found[-1]).parent


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    host: str
    port: int
    user: str
    data_dir: Path
    bin_dir: Path

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@{self.host}:{self.port}/{dbname}"

    def sql(self, statement: str, dbname: str = "postgres") -> str:
        """Run one statement with psql (as the superuser, over TCP) and return its bare output."""
        out = subprocess.run([str(self.bin_dir / "psql"), "-X", "-At", "-v", "ON_ERROR_STOP=1",
                              "-h", self.host, "-p", str(self.port), "-U", self.user, "-d", dbname,
                              "-c", statement], capture_output=True, text=True, timeout=60)
        if out.returncode:
            raise RuntimeError(f"psql failed: {out.stderr.strip()}")
        return out.stdout.strip()

    def create_database(self, name: str) -> str:
        self.sql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def restart(self) -> None:
        """Stop the server (fast: every client's connection is cut, committed data kept) and start it again."""
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(self.data_dir.parent / "server.log"),
              "-w", "-t", "60", "-m", "fast", "restart"], "pg_ctl restart")


def _as_server_user(cmd: list[str]) -> list[str]:
    """``cmd`` run as the ``postgres`` user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return cmd
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise PostgresUnavailable("no `postgres` user to run the server as: run `make postgres`") from None
    return ["runuser", "-u", "postgres", "--", *cmd]


def _run(cmd: list[str], what: str, timeout: float = 120) -> None:
    out = subprocess.run(_as_server_user(cmd), capture_output=True, text=True, timeout=timeout)
    if out.returncode:
        raise PostgresUnavailable(f"{what} failed ({out.returncode}): {(out.stderr or out.stdout).strip()[-800:]}")


@contextlib.contextmanager
def postgres_server() -> Iterator[PgServer]:
    bin_dir = server_bin()
    tmp = Path(tempfile.mkdtemp(prefix="ensimem-pg-"))
    data, log = tmp / "data", tmp / "server.log"
    started = False
    try:
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(tmp, user.pw_uid, user.pw_gid)
        os.chmod(tmp, 0o700)
        _run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
              "--locale=C", "--no-sync"], "initdb")
        port = free_port()
        with open(data / "postgresql.conf", "a") as conf:
            # Listen on loopback only; the socket directory in the temporary dir (the default
            # /var/run/postgresql may not exist); no fsync: a test server's data is thrown away.
            conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {port}\n"
                       f"unix_socket_directories = '{tmp}'\nfsync = off\nsynchronous_commit = off\n"
                       "full_page_writes = off\nmax_connections = 200\n")
        with open(data / "pg_hba.conf", "w") as hba:
            hba.write("local all all trust\nhost all all 127.0.0.1/32 trust\n")
        started = True
        _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60", "start"], "pg_ctl start")
        yield PgServer("127.0.0.1", port, "postgres", data, bin_dir)
    finally:
        if started:
            subprocess.run(_as_server_user([str(bin_dir / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate"]),
                           capture_output=True, timeout=60)
        shutil.rmtree(tmp, ignore_errors=True)
