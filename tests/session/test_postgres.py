"""What the PostgreSQL store guarantees beyond the shared contract (test_store_conformance.py runs that on
it too): its schema and versions, several connections and processes on one database, notifications, and
closing. Every test runs on a new database of a real PostgreSQL server (tests/postgres_server.py).

Bad inputs tried: an unreachable server (a closed port, a socket directory that does not exist), a URL
with a password (never echoed), a database whose schema is newer than this rxagent, pool sizes and
timeouts out of range, a session key too long for a notification (long, or short but long once escaped), a
payload with a NUL character (refused before sending), a run id with one (refused by the server, inside a
batch of other sessions' appends), a lease from before its session was deleted, a lease whose process was
paused past its expiry (another process), an append cancelled while queued, and using a closed store.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import psycopg
import pytest

from rxagent import ReActAgent, ScriptedModel
from rxagent.context import RuntimeContext
from rxagent.session import Batch, Fact, Lease, LeaseLostError, SessionStore, Waiting, open_store
from rxagent.session.postgres import (
    NOTIFY_CHANNEL,
    SCHEMA_VERSION,
    PostgresStore,
    SchemaVersionError,
    StoreUnavailableError,
)
from rxagent.state import SessionKey

from .lease_worker import KEY as SHARED_KEY

KEY: SessionKey = ("ada", "s1")
ROOT = Path(__file__).resolve().parents[2]


def text_fact(text: str) -> Fact:
    return Fact("steer", json.dumps({"text": text}), run_id="run_1")


def texts(facts: list[Any]) -> list[str]:
    return [json.loads(f.payload)["text"] for f in facts]


async def query(url: str, sql: Any, *params: object) -> list[tuple[Any, ...]]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(sql, params or None)
        return await cursor.fetchall() if cursor.description is not None else []


def with_app(url: str, name: str) -> str:
    """The URL with an application name, so the test can count the connections that carry it."""
    return f"{url}{'&' if '?' in url else '?'}application_name={name}"


async def connections(url: str, name: str) -> int:
    rows = await query(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", name)
    return int(rows[0][0])


async def until_connections(url: str, name: str, expected: int, within: float = 10.0) -> None:
    # A server process ends just after its client hangs up; watch for it, within a deadline.
    deadline = time.monotonic() + within
    while (count := await connections(url, name)) != expected:
        assert time.monotonic() < deadline, f"{count} connections named {name!r}, expected {expected}"
        await asyncio.sleep(0.02)


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(postgres_url) as opened:
        yield opened


# ---- schema ---------------------------------------------------------------------------------------------


async def test_the_schema_is_created_at_its_version_and_reopening_keeps_the_log(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as first:
        lease = await first.acquire(KEY, "me", 30)
        assert lease is not None
        await first.append(lease, [text_fact("a"), text_fact("b")])
    assert SCHEMA_VERSION == 3
    assert [v for (v,) in await query(postgres_url, "SELECT version FROM rxagent_schema")] == [1, 2, 3]
    tables = await query(
        postgres_url, "SELECT tablename FROM pg_tables WHERE tablename LIKE 'rxagent%%' ORDER BY tablename"
    )
    assert [t for (t,) in tables] == [
        "rxagent_batches",
        "rxagent_checkpoints",
        "rxagent_facts",
        "rxagent_schema",
        "rxagent_sessions",
        "rxagent_tickets",
    ]
    async with PostgresStore(postgres_url) as second:
        assert texts(await second.read(KEY)) == ["a", "b"]
        assert await second.acquire(KEY, "someone else", 30) is None  # the lease survived the reopening
        again = await second.acquire(KEY, "me", 30)
        assert again is not None
        assert again.token > lease.token
        assert await second.append(again, [text_fact("c")]) == 3
    assert [v for (v,) in await query(postgres_url, "SELECT version FROM rxagent_schema")] == [1, 2, 3]


async def test_a_database_of_version_2_is_migrated_and_keeps_its_log(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as first:
        lease = await first.acquire(KEY, "me", 30)
        assert lease is not None
        await first.append(lease, [text_fact("a"), text_fact("b")])
    # As rxagent's schema version 2 left it.
    await query(postgres_url, "DROP TABLE rxagent_batches")
    await query(postgres_url, "DELETE FROM rxagent_schema WHERE version = 3")
    async with PostgresStore(postgres_url) as second:
        assert texts(await second.read(KEY)) == ["a", "b"]
        batch = Batch.new(3)
        assert await second.append(lease, [text_fact("c")], batch=batch) == 3
        assert await second.appended(KEY, batch.id) == 3
    assert [v for (v,) in await query(postgres_url, "SELECT version FROM rxagent_schema")] == [1, 2, 3]


async def test_stores_opening_a_fresh_database_at_once_create_the_schema_once(postgres_url: str) -> None:
    # Each store migrates on a connection of its own (its own server process), as separate hosts would.
    stores = [PostgresStore(postgres_url, min_connections=0) for _ in range(6)]
    try:
        await asyncio.gather(*(store.open() for store in stores))
        for n, store in enumerate(stores):
            lease = await store.acquire(("u", f"s{n}"), "me", 30)
            assert lease is not None
            assert await store.append(lease, [text_fact(str(n))]) == 1
    finally:
        await asyncio.gather(*(store.aclose() for store in stores))
    assert await query(postgres_url, "SELECT version FROM rxagent_schema ORDER BY version") == [
        (1,),
        (2,),
        (3,),
    ]


async def test_a_database_at_version_1_is_migrated_keeping_its_log_and_lease(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as store:
        lease = await store.acquire(KEY, "old process", 60)
        assert lease is not None
        await store.append(lease, [text_fact("kept")])
    # As rxagent left a database before sessions had a line for their lease.
    await query(postgres_url, "DROP TABLE rxagent_tickets")
    await query(postgres_url, "DROP TABLE rxagent_batches")
    await query(postgres_url, "DELETE FROM rxagent_schema WHERE version >= 2")
    async with PostgresStore(postgres_url) as store:
        assert texts(await store.read(KEY)) == ["kept"]
        waiting = await store.enqueue(KEY, "me", 60)  # the old lease still holds: a ticket
        assert isinstance(waiting, Waiting)
        assert (waiting.ahead, waiting.holder) == (0, "old process")
        await store.release(lease)
        taken = await store.take_turn(waiting.ticket, 60)
        assert isinstance(taken, Lease)
        assert taken.token > lease.token
        assert await store.append(taken, [text_fact("new")]) == 2
    assert await query(postgres_url, "SELECT version FROM rxagent_schema ORDER BY version") == [
        (1,),
        (2,),
        (3,),
    ]


async def test_a_database_with_a_newer_schema_is_refused_and_left_alone(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as store:
        lease = await store.acquire(KEY, "me", 30)
        assert lease is not None
        await store.append(lease, [text_fact("kept")])
    await query(postgres_url, "INSERT INTO rxagent_schema (version) VALUES (4)")
    newer = PostgresStore(postgres_url)
    try:
        with pytest.raises(SchemaVersionError, match=r"version 4, newer than the version 3"):
            await newer.head(KEY)
    finally:
        await newer.aclose()
    assert await query(postgres_url, "SELECT count(*) FROM rxagent_facts") == [(1,)]
    assert await query(postgres_url, "SELECT max(version) FROM rxagent_schema") == [(4,)]


# ---- bad inputs -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize("where", ["closed port", "missing socket directory"])
async def test_an_unreachable_server_fails_at_once_with_where_and_why(where: str, tmp_path: Path) -> None:
    if where == "closed port":
        url = f"postgresql://ada:hunter2-secret@127.0.0.1:{free_port()}/sessions"
        place = "127.0.0.1:"
    else:
        url = f"postgresql://ada:hunter2-secret@/sessions?host={tmp_path / 'nowhere'}"
        place = str(tmp_path / "nowhere")
    store = PostgresStore(url, connect_timeout=5)
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await store.head(KEY)
    assert time.monotonic() - started < 3
    assert place in str(caught.value)
    assert "/sessions" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    assert "hunter2" not in repr(store)
    await store.aclose()


def test_pool_sizes_and_timeouts_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        PostgresStore("postgresql:///x", min_connections=5, max_connections=2)
    with pytest.raises(ValueError, match="max_connections"):
        PostgresStore("postgresql:///x", min_connections=0, max_connections=0)
    with pytest.raises(ValueError, match="connect_timeout"):
        PostgresStore("postgresql:///x", connect_timeout=0)


async def test_a_key_too_long_for_a_notification_gets_no_lease(store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="longer than the 7000"):
        await store.acquire(("u", "s" * 7_000), "me", 30)
    with pytest.raises(ValueError, match="longer than the 7000"):  # short, but long once escaped
        await store.acquire(("u", "\x01" * 1_200), "me", 30)
    longest = await store.acquire(("u", "s" * 6_900), "me", 30)
    assert longest is not None
    assert await store.append(longest, [text_fact("its notification fits")]) == 1
    assert [info.key for info in await store.sessions()] == [("u", "s" * 6_900)]


async def test_a_payload_postgres_cannot_store_writes_nothing_and_keeps_the_lease(
    store: PostgresStore,
) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    await store.append(lease, [text_fact("before")])
    with pytest.raises(ValueError, match=r"fact 1 \(steer\) has a NUL character"):
        await store.append(lease, [text_fact("fine"), Fact("steer", '{"text": "nul \x00 inside"}')])
    assert await store.head(KEY) == 1
    assert await store.append(lease, [text_fact("after")]) == 2
    assert texts(await store.read(KEY)) == ["before", "after"]


async def test_a_lease_from_before_a_delete_cannot_write_into_the_new_session(store: PostgresStore) -> None:
    # Tokens come from one sequence for the whole database, so a recreated session never reuses one.
    old = await store.acquire(KEY, "me", 30)
    assert old is not None
    await store.append(old, [text_fact("deleted")])
    await store.delete(KEY)
    with pytest.raises(LeaseLostError):
        await store.append(old, [text_fact("into nothing")])
    new = await store.acquire(KEY, "someone", 30)
    assert new is not None
    assert new.token > old.token
    with pytest.raises(LeaseLostError):
        await store.append(old, [text_fact("into the new session")])
    await store.append(new, [text_fact("fresh")])
    assert texts(await store.read(KEY)) == ["fresh"]


async def test_a_session_without_a_user_is_not_the_one_of_the_empty_user(store: PostgresStore) -> None:
    nobody = await store.acquire((None, "s"), "me", 30)
    empty = await store.acquire(("", "s"), "me", 30)
    assert nobody is not None
    assert empty is not None
    await store.append(nobody, [text_fact("no user")])
    await store.append(empty, [text_fact("empty user")])
    assert texts(await store.read((None, "s"))) == ["no user"]
    assert texts(await store.read(("", "s"))) == ["empty user"]
    assert {info.key for info in await store.sessions()} == {(None, "s"), ("", "s")}


async def test_a_closed_store_says_so(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    await store.open()
    await store.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await store.head(KEY)


# ---- many sessions, connections and processes ----------------------------------------------------------


async def test_concurrent_appends_from_many_sessions_keep_each_log_whole_and_in_order(
    postgres_url: str,
) -> None:
    sessions, turns, per_append = 40, 8, 3

    async def run(store: SessionStore, key: SessionKey) -> None:
        lease = await store.acquire(key, f"owner-{key[1]}", 60)
        assert lease is not None
        for turn in range(turns):
            facts = [text_fact(f"{key[1]}:{turn}:{n}") for n in range(per_append)]
            assert await store.append(lease, facts) == (turn + 1) * per_append
        await store.release(lease)

    keys: list[SessionKey] = [("u", f"s{n}") for n in range(sessions)]
    async with PostgresStore(postgres_url, min_connections=2, max_connections=4) as store:
        await asyncio.gather(*(run(store, key) for key in keys))
        for key in keys:
            facts = await store.read(key)
            assert [f.seq for f in facts] == list(range(1, turns * per_append + 1))
            assert texts(facts) == [f"{key[1]}:{t}:{n}" for t in range(turns) for n in range(per_append)]
        listed = await store.sessions()
        assert sorted(info.key for info in listed) == sorted(keys)
        assert {info.facts for info in listed} == {turns * per_append}
        assert {info.owner for info in listed} == {None}


async def test_appends_of_sessions_appending_at_once_share_transactions(postgres_url: str) -> None:
    keys: list[SessionKey] = [("u", f"s{n}") for n in range(100)]
    async with PostgresStore(postgres_url) as store:
        leases = [await store.acquire(key, "me", 60) for key in keys]
        before = store.append_transactions
        heads = await asyncio.gather(
            *(store.append(lease, [text_fact("a"), text_fact("b")]) for lease in leases if lease is not None)
        )
        assert heads == [2] * 100
        assert store.append_transactions - before < 100 / 5
    # What the server says: the transaction that wrote each row (xmin), counted.
    [(transactions,)] = await query(postgres_url, "SELECT count(DISTINCT xmin::text) FROM rxagent_facts")
    assert transactions < 100 / 5
    assert await query(postgres_url, "SELECT count(*) FROM rxagent_facts") == [(200,)]


async def test_an_append_the_server_refuses_fails_alone_and_its_batch_commits(store: PostgresStore) -> None:
    keys: list[SessionKey] = [("u", f"s{n}") for n in range(10)]
    leases = [await store.acquire(key, "me", 60) for key in keys]
    assert all(lease is not None for lease in leases)
    bad = Fact("steer", json.dumps({"text": "bad"}), run_id="run \x00 with a NUL")  # the server refuses it
    outcomes = await asyncio.gather(
        *(
            store.append(lease, [text_fact(f"fine {n}")] if n != 4 else [text_fact("fine"), bad])
            for n, lease in enumerate(leases)
            if lease is not None
        ),
        return_exceptions=True,
    )
    assert isinstance(outcomes[4], psycopg.DataError)
    assert [o for n, o in enumerate(outcomes) if n != 4] == [1] * 9
    assert await store.head(keys[4]) == 0
    assert [texts(await store.read(key)) for key in keys if key != keys[4]] == [
        [f"fine {n}"] for n in range(10) if n != 4
    ]


async def test_an_append_cancelled_before_it_is_sent_is_not_written(
    store: PostgresStore, postgres_url: str
) -> None:
    first = await store.acquire(("u", "first"), "me", 60)
    second = await store.acquire(("u", "second"), "me", 60)
    assert first is not None
    assert second is not None
    async with await psycopg.AsyncConnection.connect(postgres_url) as blocker:
        # Another transaction holds the first session's row, as a takeover in progress would.
        await blocker.execute("SELECT 1 FROM rxagent_sessions WHERE session_id = 'first' FOR UPDATE")
        sent = asyncio.create_task(store.append(first, [text_fact("sent")]))
        deadline = time.monotonic() + 10
        while not await query(postgres_url, "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock'"):
            assert time.monotonic() < deadline, "the first append never waited for the row"
            await asyncio.sleep(0.02)
        queued = asyncio.create_task(store.append(second, [text_fact("cancelled")]))
        await asyncio.sleep(0)  # it runs up to its place in the queue, behind the batch that waits
        queued.cancel()
        await blocker.rollback()
    assert await asyncio.wait_for(sent, 10) == 1
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert await store.head(("u", "second")) == 0
    assert await store.append(second, [text_fact("next")]) == 1


async def test_aclose_commits_the_appends_already_queued(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    keys: list[SessionKey] = [("u", f"s{n}") for n in range(20)]
    leases = [await store.acquire(key, "me", 60) for key in keys]
    appends = [
        asyncio.create_task(store.append(lease, [text_fact("queued")]))
        for lease in leases
        if lease is not None
    ]
    await asyncio.sleep(0)  # every append is queued
    await store.aclose()
    assert [task.result() for task in appends] == [1] * 20
    assert await query(postgres_url, "SELECT count(*) FROM rxagent_facts") == [(20,)]


async def test_two_stores_on_one_session_serialise_through_the_lease(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as a, PostgresStore(postgres_url) as b:
        lease = await a.acquire(KEY, "a", 30)
        assert lease is not None
        assert await b.acquire(KEY, "b", 30) is None
        await a.append(lease, [text_fact("a")])
        await a.release(lease)
        taken = await b.acquire(KEY, "b", 30)
        assert taken is not None
        await b.append(taken, [text_fact("b")])
        with pytest.raises(LeaseLostError):
            await a.append(lease, [text_fact("a, released")])
        assert texts(await a.read(KEY)) == ["a", "b"]


async def read_line(process: asyncio.subprocess.Process, within: float = 30) -> dict[str, Any]:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), within)
    if not line:
        assert process.stderr is not None
        error = await asyncio.wait_for(process.stderr.read(), within)
        raise AssertionError(f"worker ended without a report: {error.decode(errors='replace')}")
    report: dict[str, Any] = json.loads(line)
    return report


async def tell(process: asyncio.subprocess.Process) -> None:
    """Let a worker waiting for a line on stdin go on."""
    assert process.stdin is not None
    process.stdin.write(b"go on\n")
    await process.stdin.drain()


async def worker(role: str, url: str, ttl: float) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.session.lease_worker",
        role,
        url,
        str(ttl),
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def test_a_process_paused_past_its_lease_is_fenced_off_after_another_took_over(
    postgres_url: str,
) -> None:
    ttl = 3.0  # real seconds: the holder is really paused past its expiry
    holder = await worker("holder", postgres_url, ttl)
    taker = await worker("taker", postgres_url, ttl)
    try:
        # The taker starts before the holder is paused, so that it contends while the holder's lease is live.
        assert (await read_line(taker))["event"] == "ready"
        holding = await read_line(holder)
        assert holding["event"] == "holding"
        os.kill(holder.pid, signal.SIGSTOP)
        await tell(taker)
        took = await read_line(taker)
        assert took["event"] == "took over"
        assert took["token"] > holding["token"]
        assert took["taken_at"] >= holding["expires_at"]  # never while the holder's lease was live
        assert took["refused"] > 0  # it did try while the holder held the lease
        assert await asyncio.wait_for(taker.wait(), 30) == 0
        os.kill(holder.pid, signal.SIGCONT)
        await tell(holder)
        late = await read_line(holder)
        assert late["event"] == "fenced", late
        assert await asyncio.wait_for(holder.wait(), 30) == 0
    finally:
        for process in (holder, taker):
            if process.returncode is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
                await process.wait()
    async with PostgresStore(postgres_url) as store:
        facts = await store.read(SHARED_KEY)
    assert texts(facts) == ["holder-1", "taker-1", "taker-2"]
    assert [f.seq for f in facts] == [1, 2, 3]


async def test_two_agents_on_two_stores_continue_one_conversation(postgres_url: str) -> None:
    # As two hosts would: each agent has its own store (pool) on the same database.
    ctx = RuntimeContext(user_id="ada", session_id="chat")
    async with PostgresStore(postgres_url) as one, PostgresStore(postgres_url) as two:
        first = ReActAgent(ScriptedModel(["hello, Ada"]), store=one)
        await first.call("hi, I am Ada", ctx)
        second = ReActAgent(ScriptedModel(["you are Ada"]), store=two)
        await second.call("who am I?", ctx)
        state = await second.sessions.state(ctx)
        assert [m.text for m in state.messages] == ["hi, I am Ada", "hello, Ada", "who am I?", "you are Ada"]
        listed = await one.sessions()
        assert [info.key for info in listed] == [("ada", "chat")]
        assert listed[0].owner is None  # both runs gave the lease back


async def test_open_store_opens_a_postgres_url(postgres_url: str) -> None:
    store = open_store(postgres_url)
    assert isinstance(store, PostgresStore)
    try:
        lease = await store.acquire(KEY, "me", 30)
        assert lease is not None
        assert await store.append(lease, [text_fact("via open_store")]) == 1
    finally:
        await store.aclose()


# ---- notifications --------------------------------------------------------------------------------------


async def test_every_append_notifies_its_session_and_head_and_a_refused_one_does_not(
    store: PostgresStore, postgres_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        lease = await store.acquire(KEY, "me", 30)
        anonymous = await store.acquire((None, "s2"), "me", 30)
        assert lease is not None
        assert anonymous is not None
        await store.append(lease, [text_fact("a"), text_fact("b"), text_fact("c")])
        await store.release(lease)
        with pytest.raises(LeaseLostError):
            await store.append(lease, [text_fact("refused")])
        await store.append(anonymous, [text_fact("x")])
        received = [json.loads(note.payload) async for note in listener.notifies(timeout=10, stop_after=2)]
    # Notifications arrive in commit order: the refused append, between the two, sent nothing.
    assert received == [
        {"user_id": "ada", "session_id": "s1", "head": 3},
        {"user_id": None, "session_id": "s2", "head": 1},
    ]


async def test_follow_yields_what_is_stored_then_what_others_append(postgres_url: str) -> None:
    name = "rxtest-follow"
    async with PostgresStore(postgres_url) as writer, PostgresStore(with_app(postgres_url, name)) as reader:
        lease = await writer.acquire(KEY, "writer", 30)
        other = await writer.acquire(("ada", "other"), "writer", 30)
        assert lease is not None
        assert other is not None
        await writer.append(lease, [text_fact("1"), text_fact("2")])
        async with aclosing(reader.follow(KEY, after=1)) as follow:
            assert texts([await anext(follow)]) == ["2"]
            await writer.append(other, [text_fact("not this session")])
            await writer.append(lease, [text_fact("3"), text_fact("4")])
            nxt = [await asyncio.wait_for(anext(follow), 10) for _ in range(2)]
            assert [f.seq for f in nxt] == [3, 4]
            assert texts(nxt) == ["3", "4"]
            await writer.append(lease, [text_fact("5")])
            assert (await asyncio.wait_for(anext(follow), 10)).seq == 5
        # the pool's connection stays; the listening one closed with its last listener
        await until_connections(postgres_url, name, 1)
        await until_connections(postgres_url, f"{name} (listening)", 0)


async def test_cancelling_a_follower_closes_its_connection(postgres_url: str) -> None:
    name = "rxtest-follow-cancel"
    async with PostgresStore(with_app(postgres_url, name), min_connections=1) as reader:
        started = asyncio.Event()

        async def consume() -> None:
            async with aclosing(reader.follow(KEY)) as follow:
                started.set()
                async for _ in follow:
                    pass

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), 10)
        await until_connections(postgres_url, f"{name} (listening)", 1)  # the store's listening one
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await until_connections(postgres_url, f"{name} (listening)", 0)
        await until_connections(postgres_url, name, 1)  # the pool's


# ---- closing --------------------------------------------------------------------------------------------


async def test_aclose_closes_every_connection_of_the_pool(postgres_url: str) -> None:
    name = "rxtest-close"
    store = PostgresStore(with_app(postgres_url, name), min_connections=2, max_connections=4)
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    # Four appends at once make the pool open connections beyond its minimum.
    heads = await asyncio.gather(*(store.append(lease, [text_fact(str(n))]) for n in range(4)))
    assert sorted(heads) == [1, 2, 3, 4]  # concurrent appends under one lease queue on the session's row
    assert [f.seq for f in await store.read(KEY)] == [1, 2, 3, 4]
    assert await connections(postgres_url, name) >= 2
    await store.aclose()
    await until_connections(postgres_url, name, 0)
