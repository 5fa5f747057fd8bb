"""The SQLite store beyond the shared contract: its file, its threads, group commit, several processes.

(The contract itself runs on it through test_store_conformance.py.)

Bad inputs tried: a path in a folder that does not exist, a folder as the path, ``":memory:"``, a file that
is not a SQLite database, another application's SQLite database, a file of a newer schema version, an
unknown ``synchronous`` level, a fact whose payload SQLite cannot store (in a batch with good appends),
a stale lease in a batch with good appends, a write lock held by another connection past the busy
timeout (while appending, and while opening: a new file locked exclusively, a new file another connection
is writing, a store whose write lock is held), a lease that expired while its process was stopped
(SIGSTOP), a process killed (SIGKILL) while appending, and another thread that frees the writer's cursors
while an append runs. Eight processes open new files together, round after round.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import closing
from pathlib import Path
from typing import Any, cast

import pytest

from rxagent.messages import Msg
from rxagent.session import (
    Batch,
    Fact,
    Lease,
    LeaseLostError,
    Projection,
    SessionFileError,
    SessionFileLockedError,
    SQLiteStore,
    Waiting,
)
from rxagent.session.sqlite import SCHEMA_VERSION
from rxagent.state import SessionKey

from .child_process import ChildProcess
from .conftest import FakeNow

KEY: SessionKey = ("ada", "s1")
PROCESS = Path(__file__).with_name("sqlite_process.py")
OPENER = Path(__file__).with_name("opener_process.py")


def message(text: str) -> Fact:
    return Fact("message", json.dumps({"message": Msg.user(text).model_dump(mode="json")}), "run_1")


def texts(facts: list[Any]) -> list[str]:
    return [json.loads(f.payload)["message"]["content"][0]["text"] for f in facts]


class Hooked(str):
    """A payload that calls ``hook()`` as SQLite binds it: on the writer thread, inside an append's insert
    (through the adapter registered below)."""

    hook: Callable[[], None]

    def __new__(cls, text: str, hook: Callable[[], None]) -> Hooked:
        made = super().__new__(cls, text)
        made.hook = hook
        return made


def bind_hooked(value: Hooked) -> str:
    value.hook()
    return str(value)


sqlite3.register_adapter(Hooked, bind_hooked)  # only payloads of this test class go through it


def store_threads(path: Path) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("rxagent-sqlite") and str(path) in t.name]


def contents(path: Path) -> bytes | None:
    """The file's bytes (``None``: there is no such file)."""
    return path.read_bytes() if path.exists() else None


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
async def store(path: Path, now: FakeNow) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(path, now=now) as opened:
        yield opened


# ---- the file and its schema ---------------------------------------------------------------------------


async def test_a_fresh_file_gets_the_schema_at_version_3_in_wal_mode(path: Path) -> None:
    async with SQLiteStore(path):
        pass
    assert SCHEMA_VERSION == 3
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM rxagent_schema_version").fetchall() == [(3,)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"rxagent_schema_version", "sessions", "facts", "checkpoints", "tickets", "batches"} <= tables


async def test_a_file_of_version_1_is_migrated_keeping_its_log_and_lease(path: Path, now: FakeNow) -> None:
    # A file as rxagent wrote it before sessions had a line for their lease (schema version 1).
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE rxagent_schema_version (version INTEGER NOT NULL)")
        conn.execute("INSERT INTO rxagent_schema_version (version) VALUES (1)")
        conn.execute(
            "CREATE TABLE sessions (id INTEGER PRIMARY KEY, user_id TEXT, session_id TEXT NOT NULL, "
            "head INTEGER NOT NULL DEFAULT 0, updated_at REAL, lease_owner TEXT, "
            "lease_token INTEGER NOT NULL DEFAULT 0, lease_expires_at REAL)"
        )
        conn.execute("CREATE UNIQUE INDEX sessions_key ON sessions (ifnull(user_id, X''), session_id)")
        conn.execute(
            "CREATE TABLE facts (session INTEGER NOT NULL REFERENCES sessions (id), "
            "seq INTEGER NOT NULL, kind TEXT NOT NULL, payload TEXT NOT NULL, run_id TEXT, at REAL NOT NULL, "
            "PRIMARY KEY (session, seq))"
        )
        conn.execute(
            "CREATE TABLE checkpoints (session INTEGER NOT NULL REFERENCES sessions (id), "
            "seq INTEGER NOT NULL, payload TEXT NOT NULL, PRIMARY KEY (session, seq))"
        )
        fact = message("kept")
        conn.execute(
            "INSERT INTO sessions (user_id, session_id, head, updated_at, lease_owner, lease_token, "
            "lease_expires_at) VALUES (?, ?, 1, ?, 'old process', 7, ?)",
            (*KEY, fact.at, now() + 60),
        )
        conn.execute(
            "INSERT INTO facts VALUES (1, 1, ?, ?, ?, ?)", (fact.kind, fact.payload, fact.run_id, fact.at)
        )
        conn.commit()
    async with SQLiteStore(path, now=now) as store:
        assert texts(await store.read(KEY)) == ["kept"]
        waiting = await store.enqueue(KEY, "me", 120)  # the old lease still holds: a ticket
        assert isinstance(waiting, Waiting)
        assert (waiting.ahead, waiting.holder) == (0, "old process")
        now.advance(61)
        lease = await store.take_turn(waiting.ticket, 60)
        assert isinstance(lease, Lease)
        assert lease.token == 8  # the tokens go on from the file's
        assert await store.append(lease, [message("new")]) == 2
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM rxagent_schema_version").fetchall() == [(3,)]


async def test_a_file_of_version_2_is_migrated_and_keeps_its_log(path: Path) -> None:
    async with SQLiteStore(path) as store:
        lease = await store.acquire(KEY, "a", 60)
        assert lease is not None
        await store.append(lease, [message("one"), message("two")])
    with closing(sqlite3.connect(path)) as conn:  # as rxagent's schema version 2 left it
        conn.execute("DROP TABLE batches")
        conn.execute("UPDATE rxagent_schema_version SET version = 2")
        conn.commit()
    async with SQLiteStore(path) as store:
        assert texts(await store.read(KEY)) == ["one", "two"]
        batch = Batch.new(3)
        assert await store.append(lease, [message("three")], batch=batch) == 3
        assert await store.appended(KEY, batch.id) == 3
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM rxagent_schema_version").fetchall() == [(3,)]


async def test_reopening_keeps_facts_checkpoints_and_the_lease(path: Path, now: FakeNow) -> None:
    async with SQLiteStore(path, now=now) as store:
        lease = await store.acquire(KEY, "a", 60)
        assert lease is not None
        await store.append(lease, [message("one"), message("two"), message("three")])
        checkpoint, facts = await store.load(KEY)
        await store.save_checkpoint(KEY, Projection.replay(checkpoint, facts[:2]).checkpoint())
    async with SQLiteStore(path, now=now) as store:
        checkpoint, facts = await store.load(KEY)
        assert checkpoint is not None
        assert checkpoint.seq == 2
        assert texts(facts) == ["three"]
        assert await store.acquire(KEY, "b", 60) is None  # the lease outlived the process's store
        assert await store.append(lease, [message("four")]) == 4
        now.advance(61)
        taken = await store.acquire(KEY, "b", 60)
        assert taken is not None
        assert taken.token > lease.token
        # Deleting keeps the session's token count: a lease from before the delete stays stale.
        await store.delete(KEY)
        again = await store.acquire(KEY, "c", 60)
        assert again is not None
        assert again.token > taken.token
        with pytest.raises(LeaseLostError):
            await store.append(taken, [message("before the delete")])
    async with SQLiteStore(path, now=now) as store:
        assert await store.head(KEY) == 0


async def test_a_file_of_a_newer_schema_is_refused_and_left_as_it_was(path: Path) -> None:
    async with SQLiteStore(path) as store:
        lease = await store.acquire(KEY, "a", 60)
        assert lease is not None
        await store.append(lease, [message("kept")])
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE rxagent_schema_version SET version = 4")
        conn.commit()
    before = contents(path)
    with pytest.raises(SessionFileError, match=r"schema version 4, newer than the version 3"):
        SQLiteStore(path)
    assert contents(path) == before
    assert store_threads(path) == []


def test_a_file_that_is_not_sqlite_is_refused_and_left_as_it_was(path: Path) -> None:
    path.write_bytes(b"my notes, not a database\n" * 100)
    with pytest.raises(SessionFileError, match="is not a SQLite database") as refused:
        SQLiteStore(path)
    assert refused.type is SessionFileError  # not taken for a lock: opening it again would not help
    assert path.read_bytes() == b"my notes, not a database\n" * 100
    assert store_threads(path) == []


def test_another_applications_database_is_refused_and_left_as_it_was(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
        conn.execute("INSERT INTO users VALUES ('ada')")
        conn.commit()
    with pytest.raises(SessionFileError, match=r"another application \(tables: users\)"):
        SQLiteStore(path)
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall() == [("users",)]


def lock_a_new_file_exclusively(other: sqlite3.Connection) -> None:
    other.execute("BEGIN EXCLUSIVE")  # nobody reads it, not even its header


def write_to_a_new_file(other: sqlite3.Connection) -> None:
    # A reserved lock on a file in rollback mode: an opener reads the header, then cannot upgrade to write
    # WAL mode into it, and SQLite says "busy" at once (waiting could deadlock) instead of waiting.
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE notes (text TEXT)")


def hold_the_write_lock_of_a_store(other: sqlite3.Connection) -> None:
    other.execute("BEGIN IMMEDIATE")  # a store in WAL mode: its migration waits for this lock


LOCKS = [lock_a_new_file_exclusively, write_to_a_new_file, hold_the_write_lock_of_a_store]


@pytest.mark.parametrize("lock", LOCKS, ids=[lock.__name__ for lock in LOCKS])
async def test_a_file_locked_past_the_busy_timeout_is_refused_as_locked_and_opens_once_free(
    path: Path, lock: Callable[[sqlite3.Connection], None]
) -> None:
    if lock is hold_the_write_lock_of_a_store:
        async with SQLiteStore(path):
            pass
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        before = contents(path)
        lock(other)
        with pytest.raises(
            SessionFileLockedError, match=r"locked by another connection.*busy_timeout \(0.2 s\)"
        ):
            SQLiteStore(path, busy_timeout=0.2)
        assert store_threads(path) == []
        other.execute("ROLLBACK")
    assert contents(path) == before
    async with SQLiteStore(path, busy_timeout=0.2) as store:  # a lock, not a fault of the file
        lease = await store.acquire(KEY, "me", 60)
        assert lease is not None
        assert await store.append(lease, [message("once free")]) == 1


def test_paths_that_name_no_usable_file_are_clear_errors(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder" / "sessions.db"
    with pytest.raises(SessionFileError, match=r"the folder .*no-such-folder does not exist"):
        SQLiteStore(missing)
    assert not missing.parent.exists()
    with pytest.raises(SessionFileError, match="it is a folder"):
        SQLiteStore(tmp_path)
    with pytest.raises(ValueError, match="MemoryStore"):
        SQLiteStore(":memory:")
    with pytest.raises(ValueError, match="synchronous"):
        SQLiteStore(tmp_path / "s.db", synchronous=cast("Any", "OFF"))
    assert not (tmp_path / "s.db").exists()


# ---- group commit and the threads ------------------------------------------------------------------------


async def test_concurrent_appends_from_many_sessions_keep_each_sessions_order(store: SQLiteStore) -> None:
    keys: list[SessionKey] = [("ada", f"s{i}") for i in range(100)]

    async def session(key: SessionKey) -> None:
        lease = await store.acquire(key, "me", 60)
        assert lease is not None
        for turn in range(10):
            facts = [message(f"{key[1]} {turn}.{n}") for n in range(3)]
            assert await store.append(lease, facts) == 3 * (turn + 1)

    await asyncio.wait_for(asyncio.gather(*(session(key) for key in keys)), 60)
    for key in keys:
        facts = await store.read(key)
        assert [f.seq for f in facts] == list(range(1, 31))
        assert texts(facts) == [f"{key[1]} {turn}.{n}" for turn in range(10) for n in range(3)]
    # Group commit: 1 100 writes (acquires and appends) shared far fewer transactions.
    assert store.write_transactions < 1_100 / 5


async def test_a_failing_append_writes_nothing_and_fails_alone_in_its_batch(store: SQLiteStore) -> None:
    keys: list[SessionKey] = [("ada", f"s{i}") for i in range(20)]
    leases = [await store.acquire(key, "me", 60) for key in keys]
    stale = leases[0]
    assert stale is not None
    current = await store.acquire(keys[0], "me", 60)  # makes `stale` stale
    unstorable = Fact("message", "{}", cast("str", object()))  # a run id SQLite cannot bind
    before = store.write_transactions
    outcomes = await asyncio.wait_for(
        asyncio.gather(
            store.append(stale, [message("stale")]),
            *(store.append(cast("Any", lease), [message("good")]) for lease in leases[2:]),
            store.append(cast("Any", leases[1]), [message("written, then undone"), unstorable]),
            return_exceptions=True,
        ),
        30,
    )
    assert isinstance(outcomes[0], LeaseLostError)
    assert outcomes[1:-1] == [1] * 18
    assert isinstance(outcomes[-1], sqlite3.Error)
    assert store.write_transactions - before < 20  # they shared transactions all the same
    assert await store.head(keys[0]) == 0
    assert await store.head(keys[1]) == 0  # the fact before the bad one was rolled back with it
    assert current is not None
    assert await store.append(current, [message("after")]) == 1


async def test_an_append_runs_on_while_another_thread_frees_the_writers_cursors(store: SQLiteStore) -> None:
    """Another thread may hold the writer's cursors for a moment and drop the last references: bench/soak.py
    takes ``gc.get_objects()`` on the loop thread at each full collection, and one soak run in six failed
    an append with ``InterfaceError: bad parameter or other API misuse``. In CPython 3.11, freeing a cursor
    resets the statement it keeps, on the freeing thread; the cursor of an insert of several facts kept the
    connection's cached statement for that insert, so the next such insert, paused here after its first
    value, had its statement reset under it and could not bind its second row (SQLITE_MISUSE: this test
    failed every time then)."""
    lease = await store.acquire(KEY, "me", 60)
    assert lease is not None
    held: list[sqlite3.Cursor] = []

    def hold_the_cursors() -> None:  # on the writer thread, while it inserts
        held.extend(o for o in gc.get_objects() if isinstance(o, sqlite3.Cursor))

    assert await store.append(lease, [Fact("message", Hooked("{}", hold_the_cursors)), message("one")]) == 2
    assert held  # the insert's cursor among them: the writer is done with it, the loop thread holds it
    paused, go_on = threading.Event(), threading.Event()

    def pause() -> None:  # on the writer thread, binding the first row of the next insert
        paused.set()
        assert go_on.wait(30)

    paused_fact = Fact("message", Hooked("{}", pause))
    appending = asyncio.ensure_future(store.append(lease, [paused_fact, message("two")]))
    assert await asyncio.to_thread(paused.wait, 30)
    held.clear()  # the last references: the cursors are freed on the loop thread, mid-insert
    go_on.set()
    assert await asyncio.wait_for(appending, 30) == 4
    assert texts((await store.read(KEY))[1::2]) == ["one", "two"]


async def test_the_loop_runs_while_another_connection_holds_the_write_lock(
    store: SQLiteStore, path: Path
) -> None:
    lease = await store.acquire(KEY, "me", 60)
    assert lease is not None
    await store.append(lease, [message("one")])
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        waiting = asyncio.ensure_future(store.append(lease, [message("two")]))
        assert await asyncio.wait_for(store.head(KEY), 5) == 1  # reads go on (WAL), the loop is free
        assert not waiting.done()
        other.execute("COMMIT")
    assert await asyncio.wait_for(waiting, 5) == 2


async def test_a_write_lock_held_past_the_busy_timeout_fails_the_append_and_writes_nothing(
    path: Path,
) -> None:
    async with SQLiteStore(path, busy_timeout=0.2) as store:
        lease = await store.acquire(KEY, "me", 60)
        assert lease is not None
        with closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                await asyncio.wait_for(store.append(lease, [message("blocked")]), 10)
            other.execute("COMMIT")
        assert await store.append(lease, [message("later")]) == 1
        assert texts(await store.read(KEY)) == ["later"]


async def test_aclose_finishes_queued_work_ends_its_threads_and_frees_the_file(path: Path) -> None:
    store = SQLiteStore(path)
    assert all(thread.is_alive() for thread in store.threads)
    lease = await store.acquire(KEY, "me", 60)
    assert lease is not None
    *seqs, _ = await asyncio.wait_for(
        asyncio.gather(*(store.append(lease, [message(str(n))]) for n in range(20)), store.aclose()), 30
    )
    assert seqs == list(range(1, 21))  # queued before aclose: carried out
    assert not any(thread.is_alive() for thread in store.threads)
    assert store_threads(path) == []
    # The last connection closed, so SQLite folded the WAL into the file and removed it.
    assert contents(Path(f"{path}-wal")) is None
    with closing(sqlite3.connect(path, timeout=0, isolation_level=None)) as other:
        other.execute("BEGIN EXCLUSIVE")
        other.execute("UPDATE sessions SET lease_owner = 'someone else'")
        other.execute("COMMIT")
    with pytest.raises(RuntimeError, match="closed"):
        await store.head(KEY)
    await store.aclose()  # a second close is a no-op


# ---- several processes -----------------------------------------------------------------------------------


async def start_store_process(path: Path) -> ChildProcess:
    """tests/session/sqlite_process.py in a child process, once its store is open."""
    started = await ChildProcess.start(PROCESS, str(path))
    assert await started.answer(within=60) == {"ready": True}
    return started


async def test_many_processes_opening_one_new_file_at_once_all_open_it_and_write(tmp_path: Path) -> None:
    # Each round, every process gets its request at the same moment and opens the same new file: their
    # openings meet at the switch to WAL and the first migration. (Without trying again after SQLite's
    # immediate "busy", about one round in 20 lost an opener here.)
    processes, rounds = 8, 20
    children = await asyncio.gather(*(ChildProcess.ready(OPENER) for _ in range(processes)))
    try:
        for round_ in range(rounds):
            path = tmp_path / f"round-{round_}.db"
            for n, child in enumerate(children):
                child.send(path=str(path), session=f"s{n}", text=f"p{n}")
            answers = await asyncio.gather(*(child.answer(within=60) for child in children))
            assert answers == [{"seq": 1}] * processes, f"round {round_}"
            with closing(sqlite3.connect(path)) as conn:
                assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
                assert conn.execute("SELECT version FROM rxagent_schema_version").fetchall() == [
                    (SCHEMA_VERSION,)
                ]
            async with SQLiteStore(path) as store:
                for n in range(processes):
                    assert texts(await store.read(("ada", f"s{n}"))) == [f"p{n}"]
    finally:
        await asyncio.gather(*(child.close() for child in children))


async def test_a_process_stopped_past_its_lease_is_fenced_off_after_another_took_over(path: Path) -> None:
    a, b = await asyncio.gather(start_store_process(path), start_store_process(path))
    try:
        assert (await a.ask(op="acquire", owner="process-a", ttl=1.0))["token"] == 1
        assert await a.ask(op="append", text="a: before the pause") == {"seq": 1}
        assert await b.ask(op="acquire", owner="process-b", ttl=30) == {"token": None}  # no overlap
        os.kill(a.process.pid, signal.SIGSTOP)
        try:
            # B retries until A's lease (1 s) has expired; A cannot renew it while stopped.
            assert await b.ask(op="acquire_wait", owner="process-b", ttl=30, timeout=10) == {"token": 2}
            assert await b.ask(op="append", text="b: took over") == {"seq": 2}
            assert await b.ask(op="append", text="b: still mine") == {"seq": 3}
        finally:
            os.kill(a.process.pid, signal.SIGCONT)
        assert await a.ask(op="append", text="a: late write") == {"error": "LeaseLostError"}
        assert await a.ask(op="renew", ttl=30) == {"error": "LeaseLostError"}
        assert await b.ask(op="append", text="b: unaffected") == {"seq": 4}
    finally:
        await asyncio.gather(a.close(), b.close())
    async with SQLiteStore(path) as store:
        facts = await store.read(("ada", "shared"))
    assert texts(facts) == ["a: before the pause", "b: took over", "b: still mine", "b: unaffected"]


async def test_every_acknowledged_append_survives_the_process_being_killed(path: Path) -> None:
    writer = await start_store_process(path)
    try:
        assert (await writer.ask(op="acquire", owner="doomed", ttl=60))["token"] == 1
        writer.send(op="append_forever")
        acknowledged = 0
        while acknowledged < 200:
            acknowledged = (await writer.answer())["seq"]
        writer.process.send_signal(signal.SIGKILL)  # mid-stream: appends are in flight
        assert await asyncio.wait_for(writer.process.wait(), 30) == -signal.SIGKILL
    finally:
        await writer.close()
    async with SQLiteStore(path) as store:
        facts = await store.read(("ada", "shared"))
    assert len(facts) >= acknowledged
    assert [f.seq for f in facts] == list(range(1, len(facts) + 1))
    assert texts(facts) == [f"fact {n}" for n in range(1, len(facts) + 1)]
