"""A throwaway PostgreSQL server for the tests: the real PostgreSQL 16 binaries of the ``pgserver`` wheel.

``bash scripts/test.sh`` installs ``pgserver`` with the ``test`` extra, so a fresh machine needs no apt and no
database of its own: :func:`start` runs ``initdb`` and ``pg_ctl`` in a new temporary directory, listening on
a unix socket only (nothing on the network), and :meth:`TestPostgres.stop` stops the server and deletes the
directory. Run as root, ``pgserver`` runs the server as its own unprivileged system user (``pgserver``,
created on first use), since PostgreSQL refuses to run as root.

A server that cannot start is an error, never a reason to skip: the PostgreSQL tests must run wherever the
suite runs, CI included.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

__all__ = ["TestPostgres", "start"]


@dataclass
class TestPostgres:
    """A running server: its admin URL, how long it took to start, and fresh databases on demand."""

    __test__ = False  # not a test class, whatever its name

    server: Any
    directory: Path
    admin_url: str
    version: str
    start_seconds: float
    databases: int = field(default=0)

    def url(self, database: str) -> str:
        """The URL of ``database`` on this server (a unix socket, user ``postgres``, no password)."""
        return str(self.server.get_uri(database=database))

    def create_database(self) -> str:
        """Create a new, empty database and return its URL."""
        self.databases += 1
        name = f"rxtest_{self.databases}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {} STRATEGY FILE_COPY").format(sql.Identifier(name)))
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop the database of ``url``, closing any connection a test left open in it."""
        name = url.rsplit("/", 1)[1].split("?", 1)[0]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def stop(self) -> None:
        """Stop the server and delete its directory."""
        try:
            self.server.cleanup()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


def start() -> TestPostgres:
    """Start a server in a new temporary directory.

    Raises:
        RuntimeError: ``pgserver`` is not installed, or the server did not start (with its log).
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells) and falls back to /tmp.
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError as exc:
        raise RuntimeError(
            "the PostgreSQL tests need the pgserver package: pip install -e '.[test]' installs it"
        ) from exc
    # Under /tmp rather than pytest's tmp_path: pgserver opens the directory's parents to its server user,
    # and pytest keeps its own base directory private; a short path also keeps the socket path legal.
    directory = Path(tempfile.mkdtemp(prefix="rxagent-pg-"))
    started = time.perf_counter()
    try:
        server = pgserver.get_server(directory / "data", cleanup_mode="delete")
        admin_url = str(server.get_uri())
        with psycopg.connect(admin_url, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            # A throwaway cluster: nothing here must survive a power cut, and without fsync a new database
            # per test costs milliseconds instead of a flush of every file copied (and stopping is quick).
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")
    except Exception as exc:
        log = directory / "data" / "log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else "(no server log)"
        shutil.rmtree(directory, ignore_errors=True)
        raise RuntimeError(f"the test PostgreSQL server did not start: {exc!r}\nserver log:\n{tail}") from exc
    version = str(row[0]) if row is not None else "?"
    return TestPostgres(server, directory, admin_url, version, time.perf_counter() - started)
