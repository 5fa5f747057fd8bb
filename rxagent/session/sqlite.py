"""The embedded session store: one SQLite file is the whole deployment.

:class:`SQLiteStore` keeps the logs, checkpoints and leases of
:class:`~rxagent.session.store.SessionStore` in one file that several processes may open at once.

**Threads, not the loop.** Every SQLite call runs off the event loop, on two threads the store owns: a
*writer* with the one write connection and a *reader* with a read-only one (WAL lets readers go on while
the writer commits). A coroutine puts a job on the thread's queue and awaits a future; the thread
settles every future of a batch with one ``call_soon_threadsafe`` per loop. Any thread may drop the last
reference to a cursor, and in CPython 3.11 freeing a cursor resets the statement it keeps, on that thread:
so no cursor keeps a statement the writer may run again (see ``_append_rows``).

**Group commit.** The writer takes every job waiting in its queue (up to 512) and runs them in **one**
``BEGIN IMMEDIATE`` transaction, each job inside its own savepoint: a job that fails (a stale lease, a bad
value) is rolled back to its savepoint and fails alone, the others commit together, and no future is
settled before the ``COMMIT`` returned. While one batch commits, the next gathers, so the commit cost is
shared by all the sessions appending at the time instead of paid once per append.

**Leases across processes.** A lease is checked and changed inside the write transaction that uses it.
``BEGIN IMMEDIATE`` takes the file's write lock first, so between the check and the ``COMMIT`` no other
process can take the session over; an append whose lease is not the current, unexpired one writes nothing
and raises :class:`~rxagent.session.store.LeaseLostError`. (A process paused *inside* a transaction
holds the write lock meanwhile: the others wait up to ``busy_timeout``, then get ``database is locked``.)

**Durability.** The journal is WAL. ``synchronous`` is ``FULL`` by default: each commit is fsynced, so
a committed fact survives the process being killed *and* the machine losing power — a ``tool_dispatched``
fact must be on disk before a refund runs, or a crash could make the refund run twice. Group commit pays
that fsync once per batch. ``NORMAL`` (no fsync per commit, only at WAL checkpoints) also keeps every
committed fact when the process is killed, since SQLite has written it to the operating system; a power
loss may roll back the last transactions (never corrupt the file).

**The line for a lease.** Tickets (:meth:`SQLiteStore.enqueue`) are rows of ``tickets``, numbered by
``AUTOINCREMENT`` so that a number is never given out twice; the write lock orders them as they were
taken, by any process. A waiter's attempt reads first, on the reader thread, and takes the write lock only
when it looks like its turn (so waiting costs no write transaction). Changes to the line made through this
store object wake this process's waiters at once (:meth:`SQLiteStore.listen_turns`); SQLite tells nobody
of another process's, so waiters also ask again at intervals.

**Schema.** The library creates and migrates it; ``rxagent_schema_version`` holds its version
(:data:`SCHEMA_VERSION`). Migration ``n`` is the function ``_MIGRATIONS[n - 1]``: version 1 holds the
sessions (head and lease), facts and checkpoints; version 2 adds ``tickets``, the lines for leases;
version 3 adds ``batches``, the ids of idempotent appends (see :class:`~rxagent.session.store.Batch`)
keyed by session and id. A file of a newer version,
a file that is not SQLite, and a SQLite database of another application are refused with
:class:`SessionFileError`, and left untouched. Any number of processes may open a new file at once: one
switches it to WAL and creates the schema, the others wait for it (up to ``busy_timeout`` in all); a file
another connection keeps locked for longer is refused with :class:`SessionFileLockedError`.
Deleting a session keeps its row, so the fencing tokens of a session never go back, even across a delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeAlias, TypeVar, cast

from rxagent.session.facts import Checkpoint, Fact, FactKind, StoredFact
from rxagent.session.store import (
    CHECKPOINTS_KEPT,
    AppendListeners,
    Batch,
    HeadMovedError,
    Lease,
    LeaseLostError,
    Listening,
    SessionExistsError,
    SessionInfo,
    Ticket,
    TicketLostError,
    Waiting,
)
from rxagent.state import SessionKey

__all__ = ["SCHEMA_VERSION", "SQLiteStore", "SessionFileError", "SessionFileLockedError", "Synchronous"]

T = TypeVar("T")

Synchronous: TypeAlias = Literal["FULL", "NORMAL"]
"""SQLite's ``synchronous`` levels the store allows (see the module: both keep committed facts when the
process is killed; ``FULL`` also when the machine loses power)."""


class SessionFileError(ValueError):
    """The file cannot hold the session store: its folder does not exist, it is not a SQLite database,
    it is another application's database, its schema is of a newer rxagent, or SQLite failed to open it
    (the message says why). Nothing was changed."""


class SessionFileLockedError(SessionFileError):
    """The file could not be opened now: another connection kept it locked for longer than the store's
    ``busy_timeout``. Nothing was changed; opening it again later may succeed."""


# ---- schema ---------------------------------------------------------------------------------------------

_VERSION_TABLE = "rxagent_schema_version"


def _create_v1(conn: sqlite3.Connection) -> None:
    """Sessions with their head and lease, facts keyed by (session, seq), checkpoints beside them."""
    for statement in (
        """CREATE TABLE sessions (
            id INTEGER PRIMARY KEY,
            user_id TEXT,
            session_id TEXT NOT NULL,
            head INTEGER NOT NULL DEFAULT 0,
            updated_at REAL,
            lease_owner TEXT,
            lease_token INTEGER NOT NULL DEFAULT 0,
            lease_expires_at REAL
        )""",
        # A NULL user is its own user (not ''): X'' is a blob, never equal to any text.
        "CREATE UNIQUE INDEX sessions_key ON sessions (ifnull(user_id, X''), session_id)",
        """CREATE TABLE facts (
            session INTEGER NOT NULL REFERENCES sessions (id),
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            payload TEXT NOT NULL,
            run_id TEXT,
            at REAL NOT NULL,
            PRIMARY KEY (session, seq)
        )""",
        """CREATE TABLE checkpoints (
            session INTEGER NOT NULL REFERENCES sessions (id),
            seq INTEGER NOT NULL,
            payload TEXT NOT NULL,
            PRIMARY KEY (session, seq)
        )""",
    ):
        conn.execute(statement)


def _create_v2(conn: sqlite3.Connection) -> None:
    """The line for each session's lease: tickets numbered in the order they were taken, never reused."""
    conn.execute(
        """CREATE TABLE tickets (
            number INTEGER PRIMARY KEY AUTOINCREMENT,
            session INTEGER NOT NULL REFERENCES sessions (id),
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL
        )"""
    )
    conn.execute("CREATE INDEX tickets_line ON tickets (session, number)")


def _add_batches_v3(conn: sqlite3.Connection) -> None:
    """The ids of idempotent appends, each with the sequence number its append ended at."""
    conn.execute(
        """CREATE TABLE batches (
            session INTEGER NOT NULL REFERENCES sessions (id),
            id TEXT NOT NULL,
            last INTEGER NOT NULL,
            PRIMARY KEY (session, id)
        ) WITHOUT ROWID"""
    )


_MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _create_v1,
    _create_v2,
    _add_batches_v3,
)
"""``_MIGRATIONS[n]`` takes a file from schema version ``n`` to ``n + 1``, inside the opening transaction."""

SCHEMA_VERSION = len(_MIGRATIONS)
"""The schema version this rxagent writes (and the newest it opens)."""


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    # IMMEDIATE: two processes opening a new file at once must not both create the tables.
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _schema_version(conn, path)
        if version > SCHEMA_VERSION:
            raise SessionFileError(
                f"{path} holds a session store of schema version {version}, newer than the version "
                f"{SCHEMA_VERSION} this rxagent knows: open it with a newer rxagent"
            )
        for migration in _MIGRATIONS[version:]:
            migration(conn)
        if version < SCHEMA_VERSION:
            conn.execute(f"UPDATE {_VERSION_TABLE} SET version = ?", (SCHEMA_VERSION,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _schema_version(conn: sqlite3.Connection, path: str) -> int:
    tables = {str(name) for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if _VERSION_TABLE in tables:
        row = conn.execute(f"SELECT version FROM {_VERSION_TABLE}").fetchone()
        if row is None or not isinstance(row[0], int):
            raise SessionFileError(f"{path}: the table {_VERSION_TABLE} holds no schema version")
        return cast("int", row[0])
    if tables:
        names = ", ".join(sorted(tables)[:5])
        raise SessionFileError(
            f"{path} is a SQLite database of another application (tables: {names}), not an rxagent "
            "session store: give the sessions a file of their own"
        )
    conn.execute(f"CREATE TABLE {_VERSION_TABLE} (version INTEGER NOT NULL)")
    conn.execute(f"INSERT INTO {_VERSION_TABLE} (version) VALUES (0)")
    return 0


def _connect(path: str, busy_timeout: float, synchronous: Synchronous, *, write: bool) -> sqlite3.Connection:
    # isolation_level=None: the store says BEGIN and COMMIT itself (group commit needs savepoints).
    try:
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None)
    except sqlite3.Error as error:
        raise SessionFileError(f"cannot open {path} as a SQLite database: {error}") from error
    try:
        try:
            _while_busy(conn, busy_timeout, functools.partial(_prepare, conn, path, synchronous, write=write))
        except sqlite3.Error as error:
            raise _refusal(path, busy_timeout, error) from error
        return conn
    except BaseException:
        conn.close()
        raise


def _prepare(conn: sqlite3.Connection, path: str, synchronous: Synchronous, *, write: bool) -> None:
    """Put a new connection in WAL mode, set it up, and (``write``) create or migrate the schema.

    Safe to run again after it failed: each step is a no-op once done, and the migration is one
    transaction."""
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise SessionFileError(f"{path}: SQLite could not put the file in WAL mode (got {mode!r})")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    if write:
        _migrate(conn, path)
    else:
        conn.execute("PRAGMA query_only = ON")


# Seconds between the attempts of _while_busy: short, since the other opener is done in milliseconds;
# doubling, so that many openers that keep colliding spread out.
_FIRST_PAUSE = 0.001
_LONGEST_PAUSE = 0.05


def _while_busy(conn: sqlite3.Connection, budget: float, attempt: Callable[[], None]) -> None:
    """``attempt()``, tried again while SQLite answers busy, for ``budget`` seconds in all.

    The busy timeout alone does not cover opening a file: SQLite answers busy *at once*, without waiting,
    when waiting could deadlock. Switching a new file (rollback journal) to WAL reads its header under a
    shared lock, then upgrades to an exclusive one to write it; when two connections do so at the same
    time, the one that finds the other's reserved lock must give its shared lock up, so SQLite fails its
    statement instead of calling the busy handler (see ``sqlite3_busy_handler``). A ``BEGIN EXCLUSIVE``
    around the switch cannot serialise the two: SQLite leaves the journal mode as it is when asked for WAL
    inside a transaction. Trying again can: the failed attempt let the other connection finish, and the
    file is in WAL mode by then, which a connection reads under a shared lock alone. (The migration, tried
    again with it, starts with ``BEGIN IMMEDIATE``: it waits for the write lock instead of upgrading to
    it, so two openers of a new file never both create the tables.)
    """
    deadline = time.monotonic() + budget
    pause = _FIRST_PAUSE
    try:
        while True:
            # Each attempt's own waits (the busy handler) count against the one budget.
            conn.execute(f"PRAGMA busy_timeout = {_milliseconds(deadline - time.monotonic())}")
            try:
                attempt()
                return
            except sqlite3.OperationalError as error:
                left = deadline - time.monotonic()
                if not _is_busy(error) or left <= 0:
                    raise
            time.sleep(min(pause, left))
            pause = min(2 * pause, _LONGEST_PAUSE)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {_milliseconds(budget)}")  # each later transaction's own


def _milliseconds(seconds: float) -> int:
    return max(0, int(seconds * 1000))


def _error_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code for ``error`` (``None``: raised by Python's module, not by SQLite)."""
    code: int | None = getattr(error, "sqlite_errorcode", None)  # extended codes keep it in the low byte
    return None if code is None else code & 0xFF


def _is_busy(error: sqlite3.Error) -> bool:
    return _error_code(error) == sqlite3.SQLITE_BUSY


def _refusal(path: str, busy_timeout: float, error: sqlite3.Error) -> SessionFileError:
    """The error that says why SQLite would not open ``path`` as the store."""
    if _is_busy(error):
        return SessionFileLockedError(
            f"{path} is locked by another connection (another process, or another store on the file "
            f"here): it was not free within busy_timeout ({busy_timeout:g} s)"
        )
    if _error_code(error) == sqlite3.SQLITE_NOTADB:
        return SessionFileError(f"{path} is not a SQLite database ({error})")
    return SessionFileError(f"cannot open {path} as a session store: {error}")


# ---- the threads ---------------------------------------------------------------------------------------

_MAX_BATCH = 512
"""Jobs per write transaction at most: bounds how long one commit keeps the others waiting."""

_Outcome: TypeAlias = tuple[bool, object]  # (succeeded, value or exception)


@dataclass(slots=True)
class _Job:
    run: Callable[[sqlite3.Connection], object]
    future: asyncio.Future[object]
    loop: asyncio.AbstractEventLoop


@dataclass(slots=True)
class _Stop:
    done: Callable[[], None]  # called by the thread once its connection is closed


class _Worker:
    """One thread, one connection, one queue of jobs run in batches (see the module)."""

    def __init__(self, name: str, connect: Callable[[], sqlite3.Connection], *, write: bool) -> None:
        self._queue: queue.SimpleQueue[_Job | _Stop] = queue.SimpleQueue()
        self._write = write
        self.transactions = 0
        opened: list[BaseException | None] = []
        ready = threading.Event()
        # A daemon: a program that forgets aclose() must still be able to exit (SQLite rolls an
        # unfinished transaction back when the file is next opened).
        self.thread = threading.Thread(
            target=self._main, args=(connect, opened, ready), name=name, daemon=True
        )
        self.thread.start()
        ready.wait()
        if opened[0] is not None:
            self.thread.join()
            raise opened[0]

    def submit(self, run: Callable[[sqlite3.Connection], object]) -> asyncio.Future[object]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[object] = loop.create_future()
        self._queue.put(_Job(run, future, loop))
        return future

    async def stop(self) -> None:
        """Finish the queued jobs, close the connection, end the thread (without blocking the loop)."""
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()

        def done() -> None:
            loop.call_soon_threadsafe(_set_done, closed)

        self._queue.put(_Stop(done))
        await closed
        self.thread.join()  # the thread's last step: it only returns now

    def stop_blocking(self) -> None:
        """:meth:`stop` for a caller outside the loop (a constructor that failed half-way)."""
        closed = threading.Event()
        self._queue.put(_Stop(closed.set))
        closed.wait()
        self.thread.join()

    def _main(
        self,
        connect: Callable[[], sqlite3.Connection],
        opened: list[BaseException | None],
        ready: threading.Event,
    ) -> None:
        try:
            conn = connect()
        except BaseException as error:
            opened.append(error)
            ready.set()
            return
        opened.append(None)
        ready.set()
        stop: _Stop | None = None
        try:
            while stop is None:
                batch, stop = self._take()
                if batch:
                    outcomes = self._run_writes(conn, batch) if self._write else _run_reads(conn, batch)
                    _settle_from_thread(batch, outcomes)
                    del outcomes
                # The thread waits for the next jobs now: it must not keep what it read alive meanwhile.
                del batch
        finally:
            try:
                conn.close()
            finally:
                if stop is not None:
                    stop.done()

    def _take(self) -> tuple[list[_Job], _Stop | None]:
        """The jobs waiting now (at least one item, blocking), and the stop request if one came."""
        item = self._queue.get()
        batch: list[_Job] = []
        while isinstance(item, _Job):
            batch.append(item)
            if len(batch) == _MAX_BATCH:
                return batch, None
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return batch, None
        return batch, item

    def _run_writes(self, conn: sqlite3.Connection, batch: list[_Job]) -> list[_Outcome]:
        try:
            conn.execute("BEGIN IMMEDIATE")
            outcomes = [_run_in_savepoint(conn, job) for job in batch]
            conn.execute("COMMIT")
        except Exception as error:
            # The transaction as a whole failed (locked past busy_timeout, disk full, I/O error):
            # nothing of the batch is written, every job says why.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return [(False, _own_copy(error)) for _ in batch]
        self.transactions += 1
        return outcomes


def _own_copy(error: Exception) -> Exception:
    # One exception object raised in many tasks would collect all their tracebacks: each gets a copy,
    # caused by the original (which keeps the writer thread's traceback).
    copied = copy.copy(error)
    copied.__cause__ = error
    return copied


def _run_in_savepoint(conn: sqlite3.Connection, job: _Job) -> _Outcome:
    conn.execute("SAVEPOINT job")
    try:
        value = job.run(conn)
    except Exception as error:
        # This job alone is undone; the batch's other jobs still commit.
        conn.execute("ROLLBACK TO job")
        conn.execute("RELEASE job")
        return False, error
    conn.execute("RELEASE job")
    return True, value


def _run_reads(conn: sqlite3.Connection, batch: list[_Job]) -> list[_Outcome]:
    outcomes: list[_Outcome] = []
    for job in batch:
        try:
            conn.execute("BEGIN")  # one snapshot per job: a load's checkpoint and facts agree
            try:
                outcomes.append((True, job.run(conn)))
            finally:
                conn.execute("COMMIT")
        except Exception as error:
            outcomes.append((False, error))
    return outcomes


def _settle_from_thread(batch: list[_Job], outcomes: list[_Outcome]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[object], _Outcome]]] = {}
    for job, outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(job.loop, []).append((job.future, outcome))
    for loop, settled in by_loop.items():
        # A closed loop raises RuntimeError: nobody awaits these futures any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, settled)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _settle(settled: list[tuple[asyncio.Future[object], _Outcome]]) -> None:
    for future, (succeeded, value) in settled:
        if future.done():  # the caller was cancelled (the job ran all the same)
            continue
        if succeeded:
            future.set_result(value)
        else:
            future.set_exception(cast("BaseException", value))


def _release_row(lease: Lease, conn: sqlite3.Connection) -> None:
    """:meth:`SQLiteStore.release`'s transaction, on the writer thread."""
    conn.execute(
        "UPDATE sessions SET lease_owner = NULL, lease_expires_at = NULL "
        f"WHERE id = {_SESSION_ID} AND lease_token = ? AND lease_owner IS NOT NULL",
        (*lease.key, lease.token),
    )


def _head_of(key: SessionKey, conn: sqlite3.Connection) -> int:
    """:meth:`SQLiteStore.head`'s read, on the reader thread."""
    row = _find(conn, key)
    return 0 if row is None else row.head


# ---- the store -----------------------------------------------------------------------------------------

_FIND = (
    "SELECT id, head, lease_owner, lease_token, lease_expires_at FROM sessions "
    "WHERE ifnull(user_id, X'') = ifnull(?, X'') AND session_id = ?"
)
_SESSION_ID = "(SELECT id FROM sessions WHERE ifnull(user_id, X'') = ifnull(?, X'') AND session_id = ?)"


@dataclass(slots=True)
class _Row:
    id: int
    head: int
    owner: str | None
    token: int
    expires_at: float | None


def _find(conn: sqlite3.Connection, key: SessionKey) -> _Row | None:
    row = conn.execute(_FIND, key).fetchone()
    return None if row is None else _Row(*row)


def _find_or_create(conn: sqlite3.Connection, key: SessionKey) -> _Row:
    row = _find(conn, key)
    if row is not None:
        return row
    cursor = conn.execute("INSERT INTO sessions (user_id, session_id) VALUES (?, ?)", key)
    return _Row(cast("int", cursor.lastrowid), 0, None, 0, None)


def _lease_free(row: _Row, now: float) -> bool:
    return row.owner is None or row.expires_at is None or row.expires_at <= now


def _grant(conn: sqlite3.Connection, row: _Row, key: SessionKey, owner: str, expires_at: float) -> Lease:
    lease = Lease(key, owner, row.token + 1, expires_at)
    conn.execute(
        "UPDATE sessions SET lease_owner = ?, lease_token = ?, lease_expires_at = ? WHERE id = ?",
        (owner, lease.token, lease.expires_at, row.id),
    )
    return lease


def _sweep(conn: sqlite3.Connection, session: int, now: float) -> bool:
    """Drop the session's expired tickets; whether there were any (the line moved)."""
    swept = conn.execute("DELETE FROM tickets WHERE session = ? AND expires_at <= ?", (session, now))
    return swept.rowcount > 0


def _standing(conn: sqlite3.Connection, row: _Row, ticket: Ticket, now: float) -> Waiting:
    """Where ``ticket`` stands in ``row``'s line (it is in it, and live)."""
    ahead, first_expiry = conn.execute(
        "SELECT count(*), min(expires_at) FROM tickets WHERE session = ? AND number < ? AND expires_at > ?",
        (row.id, ticket.number, now),
    ).fetchone()
    holder = None if _lease_free(row, now) else row.owner
    expiries = [e for e in (first_expiry, row.expires_at if holder is not None else None) if e is not None]
    return Waiting(ticket, int(ahead), holder, min(expiries, default=now) - now)


class SQLiteStore:
    """Session logs in a SQLite file that several processes may share (see the module).

    Opening creates the file and its schema if needed, or migrates an older schema, in the calling
    thread; after that every call runs on the store's own threads. Use it as ``async with`` or call
    :meth:`aclose`.

    Args:
        path: the database file (its folder must exist).
        now: the wall clock leases expire on, called on the store's threads (a test can pass its own;
            processes sharing the file must agree on it).
        synchronous: ``"FULL"`` (default: a commit survives a power loss) or ``"NORMAL"`` (a commit
            survives the process being killed, not a power loss; commits cost less).
        busy_timeout: seconds to wait for another process's write lock before failing with
            ``sqlite3.OperationalError`` (``database is locked``); while opening, the time all of the
            opening may wait for locks before failing with :class:`SessionFileLockedError`.

    Attributes:
        path: the database file.

    Raises:
        SessionFileError: the folder does not exist, the file is not a SQLite database or is another
            application's, or its schema is newer than this rxagent's.
        SessionFileLockedError: (a :class:`SessionFileError`) another connection kept the file locked
            for longer than ``busy_timeout``.
        ValueError: ``path`` names no file (``""``, ``":memory:"``: use
            :class:`~rxagent.session.in_process.MemoryStore`), or a bad ``synchronous``/``busy_timeout``.
    """

    durable = True
    """Committed facts survive the process (and, with ``synchronous="FULL"``, the machine)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        now: Callable[[], float] = time.time,
        synchronous: Synchronous = "FULL",
        busy_timeout: float = 5.0,
    ) -> None:
        name = os.fspath(path)
        if name in ("", ":memory:") or name.startswith("file:"):
            raise ValueError(
                f"SQLiteStore needs a file path, not {name!r} (for sessions in memory use MemoryStore)"
            )
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, not {busy_timeout}")
        folder = Path(name).parent
        if not folder.is_dir():
            why = f"{folder} is not a folder" if folder.exists() else f"the folder {folder} does not exist"
            raise SessionFileError(f"cannot open the session store {name}: {why}")
        if Path(name).is_dir():
            raise SessionFileError(f"cannot open the session store {name}: it is a folder")
        self.path = Path(name)
        self._now = now
        self._closed = False
        # Another process changes the line without telling: never live, waiters ask again at intervals.
        self._turn_listeners = AppendListeners(live=False)
        self._writer = _Worker(
            f"rxagent-sqlite-writer {name}",
            lambda: _connect(name, busy_timeout, synchronous, write=True),
            write=True,
        )
        try:
            self._reader = _Worker(
                f"rxagent-sqlite-reader {name}",
                lambda: _connect(name, busy_timeout, synchronous, write=False),
                write=False,
            )
        except BaseException:
            self._writer.stop_blocking()
            raise

    @property
    def write_transactions(self) -> int:
        """Write transactions committed so far: with group commit, fewer than the appends they carried."""
        return self._writer.transactions

    @property
    def threads(self) -> tuple[threading.Thread, threading.Thread]:
        """The store's writer and reader threads (both end in :meth:`aclose`)."""
        return self._writer.thread, self._reader.thread

    async def __aenter__(self) -> SQLiteStore:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    # Futures, not coroutines: a call in flight is then one object fewer for the garbage collector to walk
    # (with a thousand sessions, every turn has one or more in flight at every collection).
    def _write(self, run: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        self._check_open()
        return cast("asyncio.Future[T]", self._writer.submit(run))

    def _read(self, run: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        self._check_open()
        return cast("asyncio.Future[T]", self._reader.submit(run))

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the session store {self.path} is closed")

    def _lost(self, lease: Lease) -> LeaseLostError:
        return LeaseLostError(
            f"the lease on session {lease.key[1]!r} (token {lease.token}) is no longer current: "
            "it expired and was taken over, or was released"
        )

    def _current(self, conn: sqlite3.Connection, lease: Lease, row: _Row | None = None) -> _Row:
        if row is None:
            row = _find(conn, lease.key)
        if (
            row is None
            or row.owner is None
            or row.token != lease.token
            or row.expires_at is None
            or row.expires_at <= self._now()
        ):
            raise self._lost(lease)
        return row

    # ---- leases ------------------------------------------------------------------------------------------

    async def acquire(self, key: SessionKey, owner: str, ttl: float) -> Lease | None:
        """Take the lease (see :class:`~rxagent.session.store.SessionStore`)."""

        def run(conn: sqlite3.Connection) -> Lease | None:
            row = _find_or_create(conn, key)
            now = self._now()
            if (
                row.owner is not None
                and row.owner != owner
                and row.expires_at is not None
                and row.expires_at > now
            ):
                return None
            return _grant(conn, row, key, owner, now + ttl)

        return await self._write(run)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Push the expiry (see :class:`~rxagent.session.store.SessionStore`)."""

        def run(conn: sqlite3.Connection) -> Lease:
            row = self._current(conn, lease)
            renewed = Lease(lease.key, lease.owner, lease.token, self._now() + ttl)
            conn.execute(
                "UPDATE sessions SET lease_expires_at = ? WHERE id = ?", (renewed.expires_at, row.id)
            )
            return renewed

        return await self._write(run)

    async def release(self, lease: Lease) -> None:
        """Give the lease up (a no-op if it is no longer current)."""
        # Partials, not closures, for the calls every turn makes (see append).
        await self._write(functools.partial(_release_row, lease))
        self._turn_listeners.notify(lease.key)

    # ---- the line for the lease --------------------------------------------------------------------------

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        """Join the line (see :meth:`~rxagent.session.store.SessionStore.enqueue`)."""
        change = self._write(functools.partial(self._enqueue_row, key, owner, ttl))
        return await self._line_change(key, change)

    def _enqueue_row(
        self, key: SessionKey, owner: str, ttl: float, conn: sqlite3.Connection
    ) -> tuple[Lease | Waiting, bool]:
        """:meth:`enqueue`'s transaction, on the writer thread: the outcome, and whether the line moved."""
        row = _find_or_create(conn, key)
        now = self._now()
        moved = _sweep(conn, row.id, now)
        waiting = conn.execute("SELECT 1 FROM tickets WHERE session = ? LIMIT 1", (row.id,)).fetchone()
        if waiting is None and _lease_free(row, now):
            return _grant(conn, row, key, owner, now + ttl), moved
        cursor = conn.execute(
            "INSERT INTO tickets (session, owner, expires_at) VALUES (?, ?, ?)",
            (row.id, owner, now + ttl),
        )
        ticket = Ticket(key, owner, cast("int", cursor.lastrowid), now + ttl)
        return _standing(conn, row, ticket, now), moved

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        """The lease if it is ``ticket``'s turn (see
        :meth:`~rxagent.session.store.SessionStore.take_turn`)."""

        def look(conn: sqlite3.Connection) -> Waiting | None:
            row = self._holding(conn, ticket)
            standing = _standing(conn, row, ticket, self._now())
            return standing if standing.ahead or standing.holder is not None else None

        # A read first: most attempts find the line as it was, and cost no write transaction.
        standing = await self._read(look)
        if standing is not None:
            return standing

        def run(conn: sqlite3.Connection) -> tuple[Lease | Waiting, bool]:
            row = self._holding(conn, ticket)
            now = self._now()
            moved = _sweep(conn, row.id, now)
            standing = _standing(conn, row, ticket, now)
            if standing.ahead or standing.holder is not None:
                return standing, moved
            conn.execute("DELETE FROM tickets WHERE number = ?", (ticket.number,))
            return _grant(conn, row, ticket.key, ticket.owner, now + ttl), True

        return await self._line_change(ticket.key, self._write(run))

    async def renew_ticket(self, ticket: Ticket, ttl: float) -> Ticket:
        """Keep the ticket in line (see :meth:`~rxagent.session.store.SessionStore.renew_ticket`)."""

        def run(conn: sqlite3.Connection) -> Ticket:
            self._holding(conn, ticket)
            renewed = Ticket(ticket.key, ticket.owner, ticket.number, self._now() + ttl)
            conn.execute(
                "UPDATE tickets SET expires_at = ? WHERE number = ?", (renewed.expires_at, ticket.number)
            )
            return renewed

        return await self._write(run)

    async def drop_ticket(self, ticket: Ticket) -> None:
        """Leave the line (a no-op if the ticket is not in it)."""

        def run(conn: sqlite3.Connection) -> bool:
            return (
                conn.execute(
                    f"DELETE FROM tickets WHERE number = ? AND owner = ? AND session = {_SESSION_ID}",
                    (ticket.number, ticket.owner, *ticket.key),
                ).rowcount
                > 0
            )

        if await self._write(run):
            self._turn_listeners.notify(ticket.key)

    def listen_turns(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` when this store object changes ``key``'s line; never live (another process may
        change it without telling: see the module)."""
        return self._turn_listeners.add(key, wake)

    def _holding(self, conn: sqlite3.Connection, ticket: Ticket) -> _Row:
        """The session's row, if ``ticket`` is live in its line (else :class:`TicketLostError`)."""
        row = _find(conn, ticket.key)
        held = (
            None
            if row is None
            else conn.execute(
                "SELECT 1 FROM tickets WHERE number = ? AND session = ? AND owner = ? AND expires_at > ?",
                (ticket.number, row.id, ticket.owner, self._now()),
            ).fetchone()
        )
        if row is None or held is None:
            raise TicketLostError.of(ticket)
        return row

    async def _line_change(
        self, key: SessionKey, change: Awaitable[tuple[Lease | Waiting, bool]]
    ) -> Lease | Waiting:
        """The outcome of a ``change`` to ``key``'s line; this process's waiters hear of it if it moved."""
        outcome, moved = await change
        if moved:
            self._turn_listeners.notify(key)
        return outcome

    # ---- the log -----------------------------------------------------------------------------------------

    async def lease(self, key: SessionKey) -> Lease | None:
        """The current, unexpired lease (see :class:`~rxagent.session.store.SessionStore`)."""

        def run(conn: sqlite3.Connection) -> Lease | None:
            row = _find(conn, key)
            if row is None or row.owner is None or row.expires_at is None or row.expires_at <= self._now():
                return None
            return Lease(key, row.owner, row.token, row.expires_at)

        return await self._read(run)

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        """Append under the lease, idempotently with ``batch`` (see
        :class:`~rxagent.session.store.SessionStore`).

        The facts are committed (and, with ``synchronous="FULL"``, on disk) when this returns. An append
        whose caller is cancelled once it was queued still runs; :meth:`appended` tells whether it did.
        """
        if batch is not None and not facts:
            raise ValueError("an append with a batch needs facts: an empty one records nothing")
        rows = [(fact.kind, fact.payload, fact.run_id, fact.at) for fact in facts]
        # A partial, not a closure: the hottest write (several a turn) in flight as two objects, not six.
        return await self._write(functools.partial(self._append_rows, lease, batch, rows))

    def _append_rows(
        self,
        lease: Lease,
        batch: Batch | None,
        rows: list[tuple[str, str, str | None, float]],
        conn: sqlite3.Connection,
    ) -> int:
        """:meth:`append`'s transaction, on the writer thread."""
        # The checks and the insert are in the same write transaction (see the module).
        found = _find(conn, lease.key)
        if batch is not None and found is not None:
            known = conn.execute(
                "SELECT last FROM batches WHERE session = ? AND id = ?", (found.id, batch.id)
            ).fetchone()
            if known is not None:
                return cast("int", known[0])
        session = self._current(conn, lease, found)
        if not rows:
            return session.head
        if batch is not None and batch.first != session.head + 1:
            raise HeadMovedError(lease.key, batch.first, session.head)
        head = session.head + len(rows)
        # Closed here, on the writer thread: the cursor executemany returns keeps the connection's cached
        # statement for this insert (CPython 3.11), and whichever thread frees a cursor resets its statement
        # there. Another thread may hold the cursor for a moment (gc.get_objects(), a debugger) and free it
        # while the next append runs that statement here: its bind then fails with SQLITE_MISUSE. (The
        # other calls' cursors let their statements go by themselves: each runs or reads to its end.)
        conn.executemany(
            "INSERT INTO facts (session, seq, kind, payload, run_id, at) VALUES (?, ?, ?, ?, ?, ?)",
            [(session.id, session.head + n, *row) for n, row in enumerate(rows, 1)],
        ).close()
        conn.execute(
            "UPDATE sessions SET head = ?, updated_at = ? WHERE id = ?", (head, rows[-1][3], session.id)
        )
        if batch is not None:
            conn.execute(
                "INSERT INTO batches (session, id, last) VALUES (?, ?, ?)", (session.id, batch.id, head)
            )
        return head

    async def appended(self, key: SessionKey, batch_id: str) -> int | None:
        """Where the append of ``batch_id`` ended (see :class:`~rxagent.session.store.SessionStore`)."""

        def run(conn: sqlite3.Connection) -> int | None:
            row = conn.execute(
                f"SELECT last FROM batches WHERE session = {_SESSION_ID} AND id = ?", (*key, batch_id)
            ).fetchone()
            return None if row is None else cast("int", row[0])

        return await self._read(run)

    async def load(self, key: SessionKey) -> tuple[Checkpoint | None, list[StoredFact]]:
        """The last checkpoint and the facts after it (read in one snapshot)."""

        def run(conn: sqlite3.Connection) -> tuple[Checkpoint | None, list[StoredFact]]:
            row = conn.execute(
                f"SELECT seq, payload FROM checkpoints WHERE session = {_SESSION_ID} "
                "ORDER BY seq DESC LIMIT 1",
                key,
            ).fetchone()
            checkpoint = None if row is None else Checkpoint(row[0], row[1])
            return checkpoint, _facts(conn, key, checkpoint.seq if checkpoint is not None else 0, None)

        return await self._read(run)

    async def save_checkpoint(self, key: SessionKey, checkpoint: Checkpoint) -> None:
        """Keep a checkpoint (see :class:`~rxagent.session.store.SessionStore`)."""

        def run(conn: sqlite3.Connection) -> None:
            row = _find_or_create(conn, key)
            if checkpoint.seq > row.head:
                raise ValueError(f"checkpoint {checkpoint.seq} is beyond the log's head ({row.head})")
            (last,) = conn.execute("SELECT max(seq) FROM checkpoints WHERE session = ?", (row.id,)).fetchone()
            if last is None or checkpoint.seq > last:
                conn.execute(
                    "INSERT INTO checkpoints (session, seq, payload) VALUES (?, ?, ?)",
                    (row.id, checkpoint.seq, checkpoint.payload),
                )
                conn.execute(  # each is the whole state: keep the newest few, not a growing pile
                    "DELETE FROM checkpoints WHERE session = ? AND seq NOT IN "
                    "(SELECT seq FROM checkpoints WHERE session = ? ORDER BY seq DESC LIMIT ?)",
                    (row.id, row.id, CHECKPOINTS_KEPT),
                )

        await self._write(run)

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        """Facts after ``after``, in order (at most ``limit``)."""
        return await self._read(lambda conn: _facts(conn, key, after, limit))

    async def head(self, key: SessionKey) -> int:
        """The last sequence number (0: none)."""
        return await self._read(functools.partial(_head_of, key))

    async def sessions(self) -> list[SessionInfo]:
        """Every session with facts, in the order they were created."""

        def run(conn: sqlite3.Connection) -> list[SessionInfo]:
            now = self._now()
            cursor = conn.execute(
                "SELECT user_id, session_id, head, updated_at, lease_owner, lease_expires_at "
                "FROM sessions WHERE head > 0 ORDER BY id"
            )
            return [
                SessionInfo(
                    (user, session),
                    head,
                    updated,
                    owner if owner is not None and expires is not None and expires > now else None,
                )
                for user, session, head, updated, owner, expires in cursor
            ]

        return await self._read(run)

    async def fork(self, key: SessionKey, at: int, into: SessionKey) -> None:
        """Copy facts up to ``at`` into a new session, with the last checkpoint at or before ``at``."""

        def run(conn: sqlite3.Connection) -> None:
            target = _find_or_create(conn, into)
            if target.head > 0:
                raise SessionExistsError(f"session {into[1]!r} already has facts")
            source = _find(conn, key)
            if source is None:
                return
            conn.execute(
                "INSERT INTO facts (session, seq, kind, payload, run_id, at) "
                "SELECT ?, seq, kind, payload, run_id, at FROM facts WHERE session = ? AND seq <= ?",
                (target.id, source.id, at),
            )
            last = conn.execute(
                "SELECT seq, at FROM facts WHERE session = ? ORDER BY seq DESC LIMIT 1", (target.id,)
            ).fetchone()
            if last is not None:
                conn.execute("UPDATE sessions SET head = ?, updated_at = ? WHERE id = ?", (*last, target.id))
            conn.execute("DELETE FROM checkpoints WHERE session = ?", (target.id,))
            conn.execute(
                "INSERT INTO checkpoints (session, seq, payload) SELECT ?, seq, payload FROM checkpoints "
                "WHERE session = ? AND seq <= ? ORDER BY seq DESC LIMIT 1",
                (target.id, source.id, at),
            )

        await self._write(run)

    async def delete(self, key: SessionKey) -> None:
        """Delete the session's facts, checkpoints and lease (its fencing tokens keep counting up)."""

        def run(conn: sqlite3.Connection) -> None:
            row = _find(conn, key)
            if row is None:
                return
            conn.execute("DELETE FROM facts WHERE session = ?", (row.id,))
            conn.execute("DELETE FROM checkpoints WHERE session = ?", (row.id,))
            conn.execute("DELETE FROM batches WHERE session = ?", (row.id,))
            conn.execute(
                "UPDATE sessions SET head = 0, updated_at = NULL, lease_owner = NULL, "
                "lease_expires_at = NULL WHERE id = ?",
                (row.id,),
            )

        await self._write(run)

    async def aclose(self) -> None:
        """Finish the queued work, close both connections and end both threads (idempotent).

        Afterwards the file is free for other connections, and every other method raises ``RuntimeError``.
        """
        if self._closed:
            return
        self._closed = True
        await asyncio.gather(self._writer.stop(), self._reader.stop())


def _facts(conn: sqlite3.Connection, key: SessionKey, after: int, limit: int | None) -> list[StoredFact]:
    cursor = conn.execute(
        f"SELECT seq, kind, payload, run_id, at FROM facts WHERE session = {_SESSION_ID} AND seq > ? "
        "ORDER BY seq LIMIT ?",
        (*key, after, -1 if limit is None else limit),
    )
    return [
        StoredFact(seq, cast("FactKind", kind), payload, run_id, at)
        for seq, kind, payload, run_id, at in cursor
    ]
