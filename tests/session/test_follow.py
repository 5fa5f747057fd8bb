"""Following a session written elsewhere: a feed with watchers and no run of its own follows the log.

Two agents share one store here, each with its own keeper, so each is "another process" for the other:
the memory store (it tells of its appends), a store that tells nothing and a SQLite file opened by two
stores (the follower reads the log every ``poll`` seconds, on a clock the test moves), and PostgreSQL (one
listening connection per store, opened again with backoff when lost). The
same over HTTP with two real ``rxagent serve`` processes is tests/serve/test_scaleout.py.

What must hold: the watcher sees every fact, numbered as in the log, with no gap and no repeat, while the
other agent's run goes on; exactly one follower task per followed feed, started by the first watcher and
stopped by the last or by a run of this agent (which then publishes), and nothing left behind.

Bad inputs tried: a database that cannot be reached (listening is tried again ever later, on a clock the
test moves), a notice for a session nobody follows, notices that name no session (not JSON, a number
for a session id, no fields), the listening connection killed by the database, a watcher that leaves
mid-follow, a local run that takes the session while the follower's read is on its way, a store that
fails to read, a store whose appends fail slowly while a run records (no background flush may outlive
the run) and whose head cannot be read when the broken run gives the session back.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from rxagent import ReActAgent, ScriptedModel, ScriptedResponse
from rxagent.agent import SessionHandle
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.session import (
    DelegatingStore,
    FeedGap,
    FeedItem,
    MemoryStore,
    SessionStore,
    SQLiteStore,
    StoredFact,
)
from rxagent.session.facts import Fact
from rxagent.session.postgres import NOTIFY_CHANNEL, PostgresStore
from rxagent.session.store import Batch, Lease, Listening, NotifyingStore
from rxagent.state import SessionKey
from tests.serve.conftest import ValveModel

from .test_postgres import query, until_connections, with_app

CTX = RuntimeContext(session_id="shared")
KEY: SessionKey = (None, "shared")
WAIT = 10.0


class Watcher:
    """A watcher of a handle's feed in a task, keeping what it got; the test awaits conditions on it."""

    def __init__(self, handle: SessionHandle, after: int = 0) -> None:
        self.items: list[FeedItem] = []
        self.gaps: list[FeedGap] = []
        self._changed = asyncio.Condition()
        self.task = asyncio.create_task(self._watch(handle, after))

    async def _watch(self, handle: SessionHandle, after: int) -> None:
        async for item in handle.watch(after):
            if isinstance(item, FeedGap):
                self.gaps.append(item)
            else:
                self.items.append(item)
            async with self._changed:
                self._changed.notify_all()

    async def until(self, check: Callable[[list[FeedItem]], bool]) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: check(self.items)), WAIT)

    async def until_result_of(self, run_id: str) -> None:
        await self.until(lambda items: any(is_result_of(i, run_id) for i in items))

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def is_result_of(item: FeedItem, run_id: str) -> bool:
    event = item.event
    return event is not None and event.type == "agent_result" and event.run_id == run_id


def has_delta(items: Sequence[FeedItem]) -> bool:
    return any(i.kind == "event" and i.data()["type"] == "text_delta" for i in items)


def same_as_log(items: Sequence[FeedItem], facts: Sequence[StoredFact]) -> None:
    """The watcher got exactly the log: 1..N in order, once each, with the log's kinds and payloads."""
    assert [i.seq for i in items] == list(range(1, len(items) + 1))
    assert [(i.seq, i.kind, i.run_id, json.loads(i.payload)) for i in items] == [
        (f.seq, f.kind, f.run_id, json.loads(f.payload)) for f in facts
    ]


async def no_follower_left() -> None:
    """Every follower task ends (they stop at their next wake-up, which stopping them causes)."""
    tasks = [t for t in asyncio.all_tasks() if t.get_name() == "rxagent.session.follow"]
    if tasks:
        done, pending = await asyncio.wait(tasks, timeout=WAIT)
        assert not pending, f"{len(pending)} follower task(s) still running"
        assert all(t.exception() is None for t in done)


def agents(writer_store: SessionStore, reader_store: SessionStore, *script: Any, **reader: Any) -> Any:
    """A writer agent whose model the test paces, and a reader agent on (a view of) the same store."""
    valve = ValveModel(*script)
    writer = ReActAgent(valve, store=writer_store)
    reading = ReActAgent(reader.pop("model", ScriptedModel([])), store=reader_store, **reader)
    return valve, writer, reading


# ---- the memory store: notices of appends ----------------------------------------------------------------


async def test_a_watcher_follows_another_agents_run_live_with_the_logs_numbers() -> None:
    store = MemoryStore()
    valve, writer, reader = agents(store, store, ScriptedResponse(text="Once upon a time", chunk_size=5))
    run = writer.session(CTX).submit("a story")
    await valve.until_sent(0)
    watcher = Watcher(reader.session(CTX))
    valve.release(1)
    # Live: the first delta reaches the other agent's watcher while the model still holds the rest back.
    await watcher.until(has_delta)
    assert not run.done()
    assert (await reader.session(CTX).open_feed()).following
    valve.open()
    await run
    await watcher.until_result_of(run.id)
    same_as_log(watcher.items, await store.read(KEY))
    await watcher.stop()
    await no_follower_left()


async def test_a_local_run_takes_over_from_the_follower_and_hands_back_without_skip_or_repeat() -> None:
    store = MemoryStore()
    valve, writer, reader = agents(store, store, "first", "third", model=ValveModel("second"))
    local_valve: ValveModel = reader.model
    valve.open()
    await writer.session(CTX).submit("one")
    head = await store.head(KEY)
    reading = reader.session(CTX)
    watcher = Watcher(reading)
    await watcher.until(lambda items: len(items) == head)
    feed = await reading.open_feed()
    assert feed.following

    # A run of this agent takes the session: it publishes, so nothing follows the log meanwhile; a run of
    # the other agent waits for the lease (queued, and the status says where the session is held).
    mine = reading.submit("two")
    await asyncio.wait_for(local_valve.waiting.wait(), WAIT)
    assert not feed.following
    theirs = writer.session(CTX).submit("three")
    await until(lambda: writer.session(CTX).status().held_elsewhere)  # after its first try for the lease
    status = writer.session(CTX).status()
    assert (status.state, status.queued, status.running) == ("queued", 1, None)
    assert theirs.status == "queued"
    local_valve.open()
    await mine
    assert feed.following  # the run gave the session back with a watcher left
    await theirs
    await watcher.until_result_of(theirs.id)
    same_as_log(watcher.items, await store.read(KEY))
    await watcher.stop()
    assert not feed.following
    await no_follower_left()


class HeldReads(MemoryStore):
    """The memory store, whose next read waits for the test once armed (a follower's read "on its way")."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.held_after: int | None = None

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        if self.armed:
            self.armed = False
            self.held_after = after
            self.entered.set()
            await self.go.wait()
        return await super().read(key, after, limit)


async def test_a_read_on_its_way_when_a_local_run_takes_the_session_is_dropped() -> None:
    store = HeldReads()
    valve, writer, reader = agents(store, store, "first", "second", "fourth", model=ScriptedModel(["third"]))
    valve.open()
    await writer.session(CTX).submit("one")
    head = await store.head(KEY)
    reading = reader.session(CTX)
    watcher = Watcher(reading)
    await watcher.until(lambda items: len(items) == head)
    store.armed = True
    await writer.session(CTX).submit("two")  # its appends wake the follower, whose read is held
    await asyncio.wait_for(store.entered.wait(), WAIT)
    assert store.held_after == head
    # Meanwhile this agent's run takes the session and publishes: the held read must not be published.
    await reading.submit("three")
    store.go.set()
    last = await writer.session(CTX).submit("four")
    await watcher.until_result_of(last.run_id)
    same_as_log(watcher.items, await store.read(KEY))
    await watcher.stop()
    await no_follower_left()


async def test_a_watcher_leaving_mid_follow_stops_the_follower_and_the_feed_goes() -> None:
    store = MemoryStore()
    valve, writer, reader = agents(store, store, ScriptedResponse(text="a long answer", chunk_size=2))
    run = writer.session(CTX).submit("go")
    valve.release(2)
    reading = reader.session(CTX)
    first, second = Watcher(reading), Watcher(reading)
    await first.until(has_delta)
    await second.until(has_delta)
    await first.stop()
    assert (await reading.open_feed()).following  # one watcher is left
    await second.stop()
    assert not (await reading.open_feed()).following
    await no_follower_left()
    valve.open()
    await run  # the run never noticed
    assert reader.keeper.feed(KEY).watchers == 0


class CountedListening(MemoryStore):
    """The memory store, counting who listens to its appends now."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = 0

    def listen(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        inner = super().listen(key, wake)
        self.listening += 1
        store = self

        class Counted:
            @property
            def live(self) -> bool:
                return inner.live

            def close(self) -> None:
                inner.close()
                store.listening -= 1

        return Counted()


async def test_the_last_watcher_leaving_releases_the_follower_task_and_its_listening() -> None:
    store = CountedListening()
    valve, writer, reader = agents(store, store, ScriptedResponse(text="a long answer", chunk_size=2))
    run = writer.session(CTX).submit("go")
    valve.release(2)
    reading = reader.session(CTX)
    watcher = Watcher(reading)
    await watcher.until(has_delta)
    assert (await reading.open_feed()).following
    assert store.listening == 1  # the follower listens (the writer's run does not)
    await watcher.stop()
    await no_follower_left()
    assert store.listening == 0
    valve.open()
    await run
    assert store.listening == 0  # appends after the release wake nobody and start nothing
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "rxagent.session.follow"]


async def test_a_follower_that_cannot_read_keeps_trying_and_catches_up() -> None:
    class Failing(MemoryStore):
        failures = 0

        async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("the database went away")
            return await super().read(key, after, limit)

    store = Failing()
    clock = VirtualClock()
    valve, writer, reader = agents(store, store, "one", "two", clock=clock)
    valve.open()
    await writer.session(CTX).submit("first")
    head = await store.head(KEY)
    watcher = Watcher(reader.session(CTX))
    await watcher.until(lambda items: len(items) == head)
    store.failures = 2
    second = await writer.session(CTX).submit("second")
    await clock.advance(0.25)  # first retry fails too
    await clock.advance(0.25)
    await watcher.until_result_of(second.run_id)
    same_as_log(watcher.items, await store.read(KEY))
    await watcher.stop()
    await no_follower_left()


# ---- what a run leaves behind ------------------------------------------------------------------------------


class Outage(DelegatingStore):
    """A store whose appends fail while ``down`` (and its heads while ``headless``), slowly, as a database
    that went away: each append then waits until the test lets it fail, or, given a ``clock``, fails after
    0.2 s on it. It counts the appends."""

    def __init__(self, inner: MemoryStore, clock: VirtualClock | None = None) -> None:
        super().__init__(inner)
        self.clock = clock
        self.down = False
        self.headless = False
        self.appends = 0
        self.reached = asyncio.Event()
        self.fail = asyncio.Event()

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        self.appends += 1
        if not self.down:
            return await super().append(lease, facts, batch=batch)
        self.reached.set()
        if self.clock is not None:
            await self.clock.sleep(0.2)
        else:
            await self.fail.wait()
        raise OSError("database unavailable")

    async def head(self, key: SessionKey) -> int:
        if self.headless:
            raise OSError("database unavailable")
        return await super().head(key)


async def test_a_run_whose_last_append_failed_leaves_no_flush_behind() -> None:
    clock = VirtualClock()
    store = Outage(MemoryStore(), clock)
    agent = ReActAgent(ScriptedModel(["one", "two", "three"]), store=store, clock=clock)
    await agent.call("first", CTX)
    store.down = True
    run = asyncio.ensure_future(agent.call("second", CTX))
    await asyncio.wait_for(store.reached.wait(), WAIT)  # the run's own flush is on its way
    # Time goes on in small steps: the background flush's timer fires while the run's flushes fail
    # slowly, so background flushes wait behind them, the last one until the run gives the session back.
    while not run.done():
        await clock.advance(0.05)
    with pytest.raises(OSError, match="database unavailable"):
        await run
    tried = store.appends
    await clock.advance(5.0)  # still down: nothing tries again under the lease the run gave back
    store.down = False
    await clock.advance(5.0)  # back: nothing tries either
    assert store.appends == tried
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "rxagent.record"]
    # The session goes on from what the log has.
    assert (await agent.call("third", CTX)).text == "three"


async def test_a_broken_run_whose_log_cannot_be_asked_leaves_the_feed_to_ask_it_later() -> None:
    store = Outage(MemoryStore())
    agent = ReActAgent(ScriptedModel(["one", "two"]), store=store)
    await agent.call("first", CTX)
    durable = await store.head(KEY)
    early = Watcher(agent.session(CTX))  # keeps the feed alive across the broken run
    await early.until(lambda items: len(items) == durable)
    store.down = True
    store.fail.set()
    run = asyncio.ensure_future(agent.call("second", CTX))
    await asyncio.wait_for(store.reached.wait(), WAIT)
    store.headless = True
    with pytest.raises(OSError, match="database unavailable"):
        await asyncio.wait_for(run, WAIT)  # its items reached the feed, never the log
    store.down = store.headless = False
    late = Watcher(agent.session(CTX))  # asks the log, not the ring the broken run left
    await late.until(lambda items: len(items) >= durable)
    assert (await agent.session(CTX).open_feed()).head == durable
    same_as_log(late.items, await store.read(KEY))
    await early.stop()
    await late.stop()
    await no_follower_left()


async def test_closing_a_handles_watch_lets_go_of_the_feed_at_once() -> None:
    agent = ReActAgent(ScriptedModel(["hi"]), store=MemoryStore())
    await agent.call("hello", CTX)
    handle = agent.session(CTX)
    watching = handle.watch()
    await anext(watching)
    feed = await handle.open_feed()
    assert (feed.watchers, feed.following) == (1, True)
    await watching.aclose()
    assert (feed.watchers, feed.following) == (0, False)  # not at the collector's leisure
    await no_follower_left()


# ---- a store that tells nothing: reading the log every `poll` seconds -------------------------------------


class Quiet(DelegatingStore):
    """A view of a store that sends no notices of appends (as a SQLite file written by another process),
    counting the reads."""

    def __init__(self, inner: MemoryStore) -> None:
        super().__init__(inner)
        self.reads = 0

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        self.reads += 1
        return await super().read(key, after, limit)


async def test_without_notices_the_follower_reads_the_log_every_poll_interval() -> None:
    inner = MemoryStore()
    quiet = Quiet(inner)
    clock = VirtualClock()
    valve, writer, reader = agents(inner, quiet, "one", "two", clock=clock)
    valve.open()
    await writer.session(CTX).submit("first")
    head = await inner.head(KEY)
    watcher = Watcher(reader.session(CTX))
    await watcher.until(lambda items: len(items) == head)
    reads = quiet.reads
    # Nothing appended: one read per 0.25 s of the reader's clock, never more (no busy loop).
    await clock.advance(1.0)
    assert quiet.reads == reads + 4
    second = await writer.session(CTX).submit("second")
    got = len(watcher.items)
    await clock.advance(0.2)
    assert len(watcher.items) == got  # not read yet: the next read is due at the next 0.25 s
    await clock.advance(0.05)
    await watcher.until_result_of(second.run_id)
    same_as_log(watcher.items, await inner.read(KEY))
    await watcher.stop()
    await no_follower_left()
    reads = quiet.reads
    await clock.advance(1.0)
    assert quiet.reads == reads  # no watcher, no reading


async def test_a_sqlite_file_another_store_writes_is_read_every_poll_interval(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    writer_store, reader_store = SQLiteStore(path), SQLiteStore(path)  # as two processes would open it
    assert not isinstance(reader_store, NotifyingStore)
    clock = VirtualClock()
    valve, writer, reader = agents(writer_store, reader_store, "one", "two", clock=clock)
    try:
        valve.open()
        await writer.session(CTX).submit("first")
        head = await reader_store.head(KEY)
        watcher = Watcher(reader.session(CTX))
        await watcher.until(lambda items: len(items) == head)
        await until(lambda: 0.25 in clock.pending())  # the follower read the file and waits for the next
        second = await writer.session(CTX).submit("second")
        got = len(watcher.items)
        await clock.advance(0.2)
        assert len(watcher.items) == got  # not read yet: the next read is due at 0.25 s
        await clock.advance(0.05)
        await watcher.until_result_of(second.run_id)
        same_as_log(watcher.items, await reader_store.read(KEY))
        await watcher.stop()
        await no_follower_left()
    finally:
        await writer.aclose()
        await reader.aclose()
        await writer_store.aclose()
        await reader_store.aclose()


# ---- PostgreSQL: one listening connection per store ------------------------------------------------------


async def test_postgres_followers_share_one_listening_connection_closed_with_the_last(
    postgres_url: str,
) -> None:
    name = "rxtest-followers"
    listening = f"{name} (listening)"
    writer_store = PostgresStore(postgres_url)
    reader_store = PostgresStore(with_app(postgres_url, name))
    valve, writer, reader = agents(
        writer_store, reader_store, ScriptedResponse(text="streamed slowly", chunk_size=3)
    )
    try:
        other = RuntimeContext(session_id="other")
        valve.inner.extend("other session")
        run = writer.session(CTX).submit("go")
        valve.release(1)
        await until_appended(writer_store, KEY)
        watchers = [Watcher(reader.session(CTX)) for _ in range(3)]
        await until_connections(postgres_url, listening, 1)
        valve.release(3)
        for watcher in watchers:
            await watcher.until(has_delta)
        assert not run.done()
        valve.open()
        await run
        await writer.session(other).submit("x")  # another session's appends reach nobody here
        for watcher in watchers:
            await watcher.until_result_of(run.id)
            same_as_log(watcher.items, await writer_store.read(KEY))
        assert await connections_named(postgres_url, listening) == 1  # one for every watcher
        for watcher in watchers:
            await watcher.stop()
        await no_follower_left()
        await until_connections(postgres_url, listening, 0)
        assert reader_store.listen_connections == 1
    finally:
        await writer.aclose()
        await reader.aclose()
        await writer_store.aclose()
        await reader_store.aclose()


async def test_postgres_notices_that_name_no_followed_session_wake_nobody(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as store:
        wakes: list[str] = []
        woken = asyncio.Event()

        def wake() -> None:
            wakes.append("shared")
            woken.set()

        listening = store.listen(KEY, wake)
        await until_live(listening, woken)
        wakes.clear()
        woken.clear()
        for junk in (
            "not json",
            "42",
            json.dumps({"session_id": 5, "user_id": None, "head": 1}),
            json.dumps({"head": 1}),
            json.dumps({"user_id": None, "session_id": "unknown", "head": 3}),
            json.dumps({"user_id": "someone", "session_id": "shared", "head": 3}),  # another user's
        ):
            await query(postgres_url, "SELECT pg_notify(%s, %s)", NOTIFY_CHANNEL, junk)
        await query(
            postgres_url,
            "SELECT pg_notify(%s, %s)",
            NOTIFY_CHANNEL,
            json.dumps({"user_id": None, "session_id": "shared", "head": 1}),
        )
        # Notifications arrive in order: when this one woke the listener, the junk before it was read.
        await asyncio.wait_for(woken.wait(), WAIT)
        assert wakes == ["shared"]
        assert store.listen_connections == 1  # nothing broke the connection
        listening.close()


async def test_a_killed_listening_connection_is_opened_again_and_nothing_is_missed(postgres_url: str) -> None:
    name = "rxtest-relisten"
    listening = f"{name} (listening)"
    writer_store = PostgresStore(postgres_url)
    reader_store = PostgresStore(with_app(postgres_url, name))
    valve, writer, reader = agents(writer_store, reader_store, "one", "two", "three")
    try:
        valve.open()
        await writer.session(CTX).submit("first")
        watcher = Watcher(reader.session(CTX))
        await until_connections(postgres_url, listening, 1)
        await watcher.until_result_of(await last_run(writer_store))
        # The database drops the listening connection; a run appends while it is being opened again.
        killed = await query(
            postgres_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            listening,
        )
        assert killed == [(True,)]
        second = await writer.session(CTX).submit("second")
        await watcher.until_result_of(second.run_id)
        await until(lambda: reader_store.listen_connections == 2)
        await until_connections(postgres_url, listening, 1)
        third = await writer.session(CTX).submit("third")  # notices flow again
        await watcher.until_result_of(third.run_id)
        same_as_log(watcher.items, await writer_store.read(KEY))
        await watcher.stop()
        await no_follower_left()
        await until_connections(postgres_url, listening, 0)
    finally:
        await writer.aclose()
        await reader.aclose()
        await writer_store.aclose()
        await reader_store.aclose()


async def test_closing_the_store_closes_its_listening_connection(postgres_url: str) -> None:
    name = "rxtest-listen-close"
    store = PostgresStore(with_app(postgres_url, name))
    woken = asyncio.Event()
    listening = store.listen(KEY, woken.set)
    await until_live(listening, woken)
    await until_connections(postgres_url, f"{name} (listening)", 1)
    await store.aclose()
    await until_connections(postgres_url, f"{name} (listening)", 0)
    await until_connections(postgres_url, name, 0)
    with pytest.raises(RuntimeError, match="closed"):
        store.listen(KEY, woken.set)


async def test_a_listening_connection_that_cannot_be_opened_is_tried_again_ever_later() -> None:
    clock = VirtualClock()
    store = PostgresStore("postgresql://rxagent@127.0.0.1:1/nowhere", clock=clock)  # nothing listens there
    listening = store.listen(KEY, lambda: None)
    waits: list[float] = []
    for _ in range(9):
        await until(lambda: bool(clock.pending()))  # an attempt failed: the next one is timed
        (due,) = clock.pending()
        waits.append(round(due - clock.now(), 6))
        assert not listening.live  # meanwhile the listeners read the logs at intervals
        await clock.advance(due - clock.now())
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    listening.close()  # the last listener left: the store stops trying
    await until(lambda: not clock.pending())
    assert store.listen_connections == 0
    await store.aclose()


# ---- helpers ---------------------------------------------------------------------------------------------


async def until(condition: Callable[[], bool]) -> None:
    """Wait for a condition nothing signals (state another task changes as it polls or reconnects),
    looking every 10 ms, within :data:`WAIT`."""
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        await asyncio.sleep(0.01)


async def until_live(listening: Any, woken: asyncio.Event) -> None:
    """Wait until the store listens (it wakes its listeners when it starts)."""
    async with asyncio.timeout(WAIT):
        while not listening.live:
            await woken.wait()
            woken.clear()


async def until_appended(store: SessionStore, key: SessionKey) -> None:
    woken = asyncio.Event()
    assert isinstance(store, PostgresStore)
    listening = store.listen(key, woken.set)
    try:
        async with asyncio.timeout(WAIT):
            while not await store.head(key):
                await woken.wait()
                woken.clear()
    finally:
        listening.close()


async def last_run(store: SessionStore) -> str:
    facts = await store.read(KEY)
    return next(f.data()["run_id"] for f in reversed(facts) if f.kind == "run_started")  # type: ignore[index]


async def connections_named(url: str, name: str) -> int:
    rows = await query(url, "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", name)
    return int(rows[0][0])
