"""A session's feed: everything appended to its log, live, for any number of watchers joining at any time.

Each :class:`FeedItem` is one fact of the session's log, numbered by the log's sequence: the run's events
(when runs record them, as runs submitted through a session handle do: ``kind == "event"``, with the
:class:`~rxagent.events.AgentEvent` in ``item.event``) and the facts about the conversation (messages,
tool calls dispatched and their results, runs and turns starting and ending).

::

    writer (the run holding the lease):  publish(7) publish(8) publish(9) … durable(9) …
    ring (the newest items, shared):     [ … 5 6 7 8 9 ]
    watcher from 0:  log 1..4 (catching up, in pages) ─▶ ring 5..9 ─▶ live 10, 11, … (once durable)
    watcher from 8:  ring 9 ─▶ live …

**Replay, then live, with no gap and no duplicate.** A watcher starting after sequence ``n`` reads the
log from ``n`` in pages until it reaches what the ring holds, then the ring, then waits for new items:
one cursor moves through all three, so the seams cannot skip or repeat an item.

**Watchers never slow the run.** Publishing appends to one shared ring (bounded: ``capacity`` items)
and wakes the watchers once per loop turn at most, and no more often than every ``interval`` (10 ms),
however many items came; each watcher reads at its own pace through its own cursor, taking everything
new at once (:meth:`SessionFeed.watch_batches` hands it over as one list). Memory does not grow with
the number of watchers nor with how far one falls behind. A watcher the ring has left behind follows
its ``policy``: ``catch_up`` reads what it missed from the log (exactly, in pages), ``drop`` skips to
the oldest item still held and says so with a :class:`FeedGap` (what it names is still in the log),
``disconnect`` ends its iteration with :class:`FeedLagError`. Stopping a watcher (leaving
``async for``, disposing) never stops a run.

**Only durable facts.** A run in this process publishes its items as it queues them, before they are in
the log, but watchers get an item only once the log has it (:meth:`SessionFeed.durable`, which the run's
recorder calls after each append: at each tool call, at the run's end, and at most ``flush_interval``
after anything was queued, 50 ms by default). A sequence number a watcher saw is thus the log's for
good: a writer that dies, or is fenced after losing its lease, never leaves a watcher holding a number
the log then gives to another fact. What the ring holds past the durable head is dropped when the writer
fails (:meth:`SessionFeed.reset`).

**In-process and across processes.** The log is read only for what the ring no longer holds. While the
feed has watchers and no run of this process writes the session (:meth:`SessionFeed.writing_here`), one task
*follows* the log for them: it reads what others append (another process, another agent on the same
store) and publishes it, so watchers see the same items with the same numbers, as soon as they are
durable. It reads after each notice of an append when the store sends them
(:class:`~rxagent.session.store.NotifyingStore`: PostgreSQL, the memory store), and every ``poll``
seconds otherwise (SQLite), or while the store's notices are down.

::

    watchers:        0 ──▶ 1 ─────────────────────────────────▶ 0
    local run:                    claims ───── releases
    follower task:         ┌─────┐                 ┌─────────┐
                           └ reads ┘ stops (the run  └ reads from the run's last item
                                     publishes)

The follower starts with the first watcher and stops when the last one leaves or a run of this process
takes the session; that run publishes from the log's head on (a read the follower had under way when the
run took over is dropped), and when it gives the session back with watchers left, the follower starts
again right after the run's last item. Each of its reads publishes only if the head did not move while it
read, so the hand-overs never skip nor repeat a number.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import deque
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from reactivex import Observable

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.events import AgentEvent, event_from_json
from rxagent.operators import from_async_iterable
from rxagent.session.facts import Fact, FactKind, StoredFact
from rxagent.session.store import NotifyingStore, SessionStore
from rxagent.state import SessionKey

__all__ = ["FeedGap", "FeedItem", "FeedLagError", "FeedPolicy", "SessionFeed", "one_by_one"]

_log = logging.getLogger("rxagent")

FeedPolicy: TypeAlias = Literal["catch_up", "drop", "disconnect"]
"""What a watcher the ring left behind does: read the log, skip ahead (told by a gap), or stop."""


class FeedItem:
    """One fact of the session, as the feed delivers it.

    Attributes:
        seq: its sequence number in the session's log.
        kind: the fact's kind (``"event"`` for a run's events).
        run_id: the run that wrote it.
        at: when (wall-clock seconds).
    """

    __slots__ = ("_event", "_fact", "at", "kind", "run_id", "seq")

    def __init__(self, seq: int, fact: Fact | StoredFact) -> None:
        self.seq = seq
        self.kind: FactKind = fact.kind
        self.run_id = fact.run_id
        self.at = fact.at
        self._fact = fact
        self._event: AgentEvent | None = None

    @property
    def payload(self) -> str:
        """The fact's JSON payload (encoded the first time anyone asks, for a run's own facts)."""
        return self._fact.payload

    def __repr__(self) -> str:
        return f"FeedItem({self.seq}, {self.kind!r})"

    @property
    def event(self) -> AgentEvent | None:
        """The run's event, for ``kind == "event"`` (``None`` for other facts)."""
        if self._event is None and self.kind == "event":
            self._event = event_from_json(self.payload)
        return self._event

    def attach(self, event: AgentEvent) -> None:
        """Give the item the event its payload encodes (so watchers in this process skip decoding it)."""
        self._event = event

    def data(self) -> Any:
        """The payload, decoded."""
        return json.loads(self.payload)

    @classmethod
    def of(cls, fact: StoredFact) -> FeedItem:
        """The feed item of a stored fact."""
        return cls(fact.seq, fact)


@dataclass(frozen=True, slots=True)
class FeedGap:
    """Items ``first`` to ``last`` were skipped (policy ``drop``); the log still has them."""

    first: int
    last: int

    @property
    def missed(self) -> int:
        """How many items were skipped."""
        return self.last - self.first + 1


class FeedLagError(RuntimeError):
    """A watcher with policy ``disconnect`` fell further behind than the feed holds."""


class SessionFeed:
    """The feed of one session in this process (see the module).

    Args:
        store: where the session's log is, for watchers that start before what the ring holds.
        key: the session.
        capacity: items the shared ring holds.
        page: facts read from the log at a time while catching up.
        interval: seconds between two wakes of the watchers, at least.
        poll: seconds between two reads of the log while following a store that sends no notices of
            appends (or whose notices are down).
        clock: what the wake-ups and the follower's reads are timed on.
    """

    def __init__(
        self,
        store: SessionStore,
        key: SessionKey,
        *,
        capacity: int = 4096,
        page: int = 512,
        interval: float = 0.010,
        poll: float = 0.25,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if capacity < 1 or page < 1:
            raise ValueError("capacity and page must be at least 1")
        if not poll > 0:
            raise ValueError("poll must be a positive number of seconds")
        self.store = store
        self.key = key
        self.capacity = capacity
        self.page = page
        self._ring: deque[FeedItem] = deque(maxlen=capacity)
        self._head = 0
        self._synced = False  # whether _head is the log's (a feed made without it asks the store)
        self._durable = 0
        self._waiting: list[asyncio.Future[None]] = []
        self._wake_scheduled = False
        self._last_wake = float("-inf")
        self.interval = interval
        self.clock = clock
        """Seconds between two wakes of the watchers, at least (items that come sooner wait for it)."""
        self.poll = poll
        self.watchers = 0
        """Watchers iterating now."""
        self._writing_here = False
        self._follower: _Follower | None = None

    @property
    def held(self) -> int:
        """Items the ring holds now (at most ``capacity``, however far watchers fall behind)."""
        return len(self._ring)

    def resize(self, capacity: int) -> None:
        """Hold at most ``capacity`` items from now on (the newest are kept)."""
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._ring = deque(self._ring, maxlen=capacity)

    @property
    def head(self) -> int:
        """The sequence number of the newest item published (or read from the log by the follower task:
        :attr:`following`); items past :attr:`durable_head` are not in the log yet, and watchers do not
        get them yet."""
        return self._head

    @property
    def durable_head(self) -> int:
        """The sequence number of the newest item the log has, as this feed knows: what watchers get up
        to, and where a client reconnects from."""
        return min(self._durable, self._head)

    def reset(self, head: int) -> None:
        """Forget what the ring holds: the log is the truth again from ``head`` on (a writer's items that
        never became durable are gone)."""
        self._ring.clear()
        self._head = self._durable = head
        self._synced = True
        self._wake()

    def forget(self) -> None:
        """Forget what the ring holds and where the log stands: the next read (a watcher's, or the
        follower's) asks the log for its head first (a writer's items may never have become durable, and
        the log could not be asked just now)."""
        self._ring.clear()
        self._synced = False
        self._wake()

    def publish(self, items: Sequence[FeedItem]) -> None:
        """Add items (numbered right after the head, in order); watchers get them once :meth:`durable`
        says the log has them (nobody is woken here: a delta costs the run no more than an append)."""
        for item in items:
            if item.seq != self._head + 1:
                raise ValueError(f"feed item {item.seq} does not follow {self._head}")
            self._ring.append(item)
            self._head = item.seq
            self._synced = True

    def durable(self, seq: int) -> None:
        """Everything up to ``seq`` is in the log now: watchers get it, woken soon."""
        if seq > self._durable:
            self._durable = seq
            self._schedule()

    def _schedule(self) -> None:
        # Watchers wake on the next loop turn, but not more often than every `interval`: a stream of
        # deltas a loop turn apart costs each watcher one wake per interval, not one per delta.
        if self._wake_scheduled:
            return
        self._wake_scheduled = True
        delay = self._last_wake + self.interval - self.clock.now()
        if delay > 0:
            self.clock.call_later(delay, self._wake)
        else:
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_scheduled = False
        self._last_wake = self.clock.now()
        waiting, self._waiting = self._waiting, []
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    async def _next_change(self) -> None:
        # A future per watcher: one watcher leaving (its wait cancelled) must not cancel the others'.
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        await waiter

    def watch(
        self, after: int = 0, *, policy: FeedPolicy = "catch_up"
    ) -> AsyncGenerator[FeedItem | FeedGap, None]:
        """Every item after sequence ``after``, then the live ones as they come (see the module).

        Raises:
            FeedLagError: ``policy="disconnect"`` and the watcher fell behind what the feed holds.
        """
        return one_by_one(self.watch_batches(after, policy=policy))

    async def watch_batches(
        self, after: int = 0, *, policy: FeedPolicy = "catch_up"
    ) -> AsyncGenerator[list[FeedItem] | FeedGap, None]:
        """:meth:`watch`, in batches: everything new at each wake as one list (what a server writes to a
        client in one go; a watcher's cost then grows with its wakes, not with the items)."""
        if policy not in ("catch_up", "drop", "disconnect"):
            raise ValueError(f"policy must be catch_up, drop or disconnect, not {policy!r}")
        cursor = max(0, after)
        caught_up = False  # the replay it asked for is done: from now on, falling behind is lagging
        self.watchers += 1
        self._refresh()
        try:
            if not self._synced:  # nobody told this feed where the log stands: ask the log
                head = await self.store.head(self.key)
                if not self._synced:
                    self.reset(head)
            while True:
                ring = self._ring
                oldest = ring[0].seq if ring else self._head + 1
                if cursor + 1 < oldest:  # what it wants next is no longer in the ring
                    if caught_up and policy == "disconnect":
                        behind = oldest - cursor - 1
                        raise FeedLagError(f"a watcher of session {self.key[1]!r} fell {behind} items behind")
                    if caught_up and policy == "drop":
                        yield FeedGap(cursor + 1, oldest - 1)
                        cursor = oldest - 1
                        continue
                    upto = min(oldest - 1, self._durable)
                    if upto <= cursor:
                        await self._next_change()  # what it needs is still on its way to the log
                        continue
                    limit = min(self.page, upto - cursor)
                    facts = await self.store.read(self.key, after=cursor, limit=limit)
                    if facts:
                        cursor = facts[-1].seq
                        yield [FeedItem.of(fact) for fact in facts]
                    # A watcher that waits next must not keep the page it was given (a page per idle
                    # watcher, read from the log and held by no one else).
                    del facts
                    continue
                caught_up = True
                durable = self.durable_head
                new = durable - cursor
                if new > 0:  # the newest durable items, from the ring's right end: O(new), not O(ring)
                    ahead = self._head - durable  # published, not in the log yet: not given out
                    batch = list(itertools.islice(reversed(ring), ahead, ahead + new))
                    batch.reverse()
                    cursor = batch[-1].seq
                    yield batch
                    del batch  # nor the items the ring has let go of since
                    continue
                await self._next_change()
        finally:
            self.watchers -= 1
            self._refresh()

    def observe(self, after: int = 0, *, policy: FeedPolicy = "catch_up") -> Observable[FeedItem | FeedGap]:
        """:meth:`watch` as a cold observable: each subscription is one watcher; disposing stops only it."""
        return from_async_iterable(lambda: self.watch(after, policy=policy))

    # ---- following a log written elsewhere ----------------------------------------------------------

    def writing_here(self, writing: bool) -> None:
        """A run of this process took the session (``True``: it publishes, so the follower stops) or gave
        it back (``False``: the follower starts again if watchers are left). The keeper calls this."""
        self._writing_here = writing
        self._refresh()

    @property
    def following(self) -> bool:
        """Whether a task follows the log for the watchers now (see the module)."""
        follower = self._follower
        return follower is not None and not follower.stopped

    def _refresh(self) -> None:
        wanted = self.watchers > 0 and not self._writing_here
        follower = self._follower
        if wanted:
            if follower is None:
                follower = self._follower = _Follower()
                follower.task = asyncio.get_running_loop().create_task(
                    self._follow(follower), name="rxagent.session.follow"
                )
            else:  # still finishing a read after a stop: it goes on instead of a second task
                follower.stopped = False
        elif follower is not None and not follower.stopped:
            follower.stopped = True
            follower.woken.set()

    async def _follow(self, follower: _Follower) -> None:
        store = self.store
        listening = None
        if isinstance(store, NotifyingStore):
            try:
                listening = store.listen(self.key, follower.woken.set)
            except Exception:  # a closed store, say: reading the log at intervals is all there is
                _log.warning("rxagent: cannot listen to session %r's appends", self.key[1], exc_info=True)
        failing = False
        try:
            while not follower.stopped:
                follower.woken.clear()
                start = self._head
                try:
                    if not self._synced:
                        facts: list[StoredFact] = []
                        head = await store.head(self.key)
                        if not follower.stopped and not self._synced:
                            self.reset(head)
                    else:
                        facts = await store.read(self.key, after=start, limit=self.page)
                except Exception:
                    if not failing:  # once per outage: the follower keeps trying at the poll interval
                        _log.warning("rxagent: following session %r failed", self.key[1], exc_info=True)
                    failing = True
                    await self._pause(follower, self.poll)
                    continue
                failing = False
                # A run of this process took the session while this read was on its way (it publishes
                # now), or the head moved (reset): what was read may be old news.
                if follower.stopped or self._head != start:
                    continue
                if facts:
                    self.publish([FeedItem.of(f) for f in facts])
                    self.durable(facts[-1].seq)
                    continue
                live = listening is not None and listening.live
                await self._pause(follower, None if live else self.poll)
        finally:
            if listening is not None:
                listening.close()
            if self._follower is follower:
                self._follower = None

    async def _pause(self, follower: _Follower, seconds: float | None) -> None:
        """Wait for a notice, a stop, or ``seconds`` (``None``: no limit)."""
        if follower.woken.is_set():
            return
        timer = None if seconds is None else self.clock.call_later(seconds, follower.woken.set)
        try:
            await follower.woken.wait()
        finally:
            if timer is not None:
                timer.cancel()


class _Follower:
    """The task following a feed's log, and how it is told to stop or to read again."""

    __slots__ = ("stopped", "task", "woken")

    def __init__(self) -> None:
        self.stopped = False
        self.woken = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


async def one_by_one(
    batches: AsyncGenerator[list[FeedItem] | FeedGap, None],
) -> AsyncGenerator[FeedItem | FeedGap, None]:
    """The items of a :meth:`SessionFeed.watch_batches` stream one at a time, gaps where they fall (what
    :meth:`SessionFeed.watch` and :meth:`~rxagent.agent.SessionHandle.watch` emit)."""
    async with aclosing(batches):  # closing this closes the watch now, not when the collector finds it
        async for batch in batches:
            if isinstance(batch, FeedGap):
                yield batch
                continue
            for item in batch:
                yield item
