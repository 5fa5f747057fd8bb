"""Taking a session for a run, and giving it back: :class:`SessionKeeper`.

A run on a session needs, in order: its turn in the session's line, the store's lease (so runs in other
processes and on other hosts wait too), and the session's projection. The keeper keeps projections in
memory between runs (a bounded number of sessions, least recently used first out), so a process that keeps
serving a session reads only the facts others appended since (usually none) instead of the whole log.
While a run holds the session the keeper renews its lease; when the run gives the session back the keeper
releases the lease, then writes a checkpoint in the background when enough facts have piled up since the
last one (so loading stays short, and the cost of a checkpoint, spread over the facts it covers, stays
constant per fact).

**Turns in submission order.** A run joins the session's line in the store when it is submitted
(:meth:`~rxagent.session.store.SessionStore.enqueue`), and the lease goes to the lowest live ticket, so runs
start in the order they were submitted whichever agent object, process or host submitted them, and none
waits behind more than the runs submitted before it. The runs of one keeper join in the order they came
(one at a time per session: a store may run calls concurrently). A waiter asks the store again when the
store says the line may have moved (:meth:`~rxagent.session.store.SessionStore.listen_turns`: at once
inside this process, through notifications on PostgreSQL), when the holder's lease or a ticket ahead may
have expired, and every :data:`TURN_POLL` seconds while the store cannot tell of changes made elsewhere
(SQLite); all these waits are on the keeper's clock. It renews its ticket every third of ``lease_ttl``, so
the ticket of a waiter that crashed stops counting ``lease_ttl`` seconds later, and it leaves the line when
it gives up (a timeout, a cancel). A store call that a cancel interrupts still finishes: a ticket it took is
dropped, a lease it granted released, in the background (:meth:`SessionKeeper.aclose` waits for them).
:attr:`Place.position` is the run's place in that line.

**Owners that are gone.** A keeper names itself after its process (see :mod:`rxagent.session.owner`). When
the session's lease is held by an owner of the same machine whose process is gone (killed, say), a waiter
releases that lease and the line moves at once, instead of waiting for the lease to expire.

**Closing.** :meth:`SessionKeeper.aclose` waits (at most ``close_timeout`` seconds) until every session the
keeper holds or is taking is given back, and the lease work under way is done: a run cancelled a moment
before records its end and releases its lease on the loop's next turns, so a store closed after ``aclose``
is never closed under them. A lease is released in a task of its own, which a cancel of the caller does not
stop; a run whose recorder left facts out of the log, or an append of unknown outcome, leaves no projection
behind (the log is the truth).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import logging
import math
import os
import socket
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from rxagent.clock import SYSTEM_CLOCK, Clock, Timer
from rxagent.operators import Resumed, first_step, start_task
from rxagent.session.feed import SessionFeed
from rxagent.session.in_process import MemoryStore
from rxagent.session.owner import ProcessOwner, owner_gone
from rxagent.session.projection import Projection
from rxagent.session.recorder import Recorder
from rxagent.session.store import (
    Lease,
    LeaseLostError,
    Listening,
    SessionStore,
    Ticket,
    TicketLostError,
    Waiting,
)
from rxagent.state import SessionKey

# The done callbacks of the keeper's store calls read no context variable: they run in one empty context
# (a callback added without one gets a copy of the current context, an object per call).
_NO_CONTEXT = contextvars.Context()

__all__ = ["TURN_POLL", "Claim", "Place", "SessionBusy", "SessionKeeper"]

TURN_POLL = 0.05
"""Seconds between two attempts of a waiting run while its store cannot tell it of changes another
process makes to the session's line (SQLite; PostgreSQL while its listening connection is down)."""

_RETRY_FLOOR = 0.001
"""The shortest wait before asking again when the store says the line moves in less (never a busy loop)."""

_log = logging.getLogger("rxagent")
_instances = itertools.count(1)
_T = TypeVar("_T")


def _default_owner() -> str:
    instance = next(_instances)
    named = ProcessOwner.this_process(instance)
    return str(named) if named is not None else f"{socket.gethostname()}:{os.getpid()}:{instance}"


class SessionBusy(Exception):
    """The session stayed held past the wait: ``ahead`` runs were still in line before this one (of any
    process), and ``holder`` held the lease (``None``: nobody, at the last look)."""

    def __init__(self, waited: float, ahead: int, holder: str | None) -> None:
        super().__init__(f"busy after {waited:g} s")
        self.waited = waited
        self.ahead = ahead
        self.holder = holder


class Place:
    """One run's place in the line for a session (see the module's **Turns**), made by
    :meth:`SessionKeeper.place` and taken by :meth:`SessionKeeper.claim`.

    :attr:`position` says where it stands, readable at any moment (from any thread), so a caller can show
    the queue moving.
    """

    __slots__ = ("_gone", "_left", "_position", "holder", "key")

    def __init__(self, key: SessionKey) -> None:
        self.key = key
        """The session."""
        self._position: int | None = None
        self._left = False
        # Made when someone waits for it (rarely): an event is two more objects per run in flight for the
        # garbage collector to walk (see bench/turn_objects.py).
        self._gone: asyncio.Event | None = None
        self.holder: str | None = None
        """Who held the session's lease when this place last looked (``None``: nobody, or it holds it)."""

    @property
    def position(self) -> int | None:
        """``0`` while its run holds the session, ``n >= 1`` while ``n``-th in line (``n - 1`` runs of any
        process wait ahead of it), ``None`` before it joined and once it left."""
        return self._position

    async def gone(self) -> None:
        """Wait until the run gave the session back, or left the line without it."""
        if self._left:
            return
        if self._gone is None:
            self._gone = asyncio.Event()
        await self._gone.wait()

    def _stands(self, waiting: Waiting) -> None:
        self._position = waiting.ahead + 1
        self.holder = waiting.holder

    def _holds(self) -> None:
        self._position = 0
        self.holder = None

    def _leaves(self) -> None:
        self._position = None
        self.holder = None
        self._left = True
        if self._gone is not None:
            self._gone.set()


@dataclass(eq=False, slots=True)
class _Line:
    """This keeper's places on one session (waiting or holding it), and the order they join the store's
    line in: ``joining`` exists while ``joiners`` of them are joining (a lock kept by every session held
    would be one more object per run in flight for the garbage collector to walk)."""

    places: list[Place] = field(default_factory=lambda: [])
    joining: asyncio.Lock | None = None
    joiners: int = 0


@dataclass(eq=False)
class Claim:
    """A session held for one run: its place, its lease, its projection and the run's recorder."""

    key: SessionKey
    place: Place
    lease: Lease
    projection: Projection
    recorder: Recorder
    renew_at: float = math.inf
    """When the lease's next renewal is due, on the keeper's clock (``inf``: never, the lease was lost)."""
    renewal: asyncio.Task[None] | None = None
    """The renewal under way, if one is."""
    broken: bool = False
    """Something failed to be recorded: the projection may be ahead of the log, so it is not kept."""
    extras: dict[str, object] = field(default_factory=lambda: {})

    async def flush(self) -> None:
        """Append what the recorder holds (see :meth:`Recorder.flush`); if that fails the claim is
        ``broken`` (the log is the truth again when it is released), and the error is raised."""
        try:
            await self.recorder.flush()
        except Exception:
            self.broken = True
            raise


class SessionKeeper:
    """Hands sessions of one store to runs, one at a time per session and in the order they were submitted,
    across agent objects and processes.

    Args:
        store: the session store.
        owner: this keeper's name in leases (default: its process, see :mod:`rxagent.session.owner`: a
            lease left by a process of this machine that is gone is then taken over at once).
        lease_ttl: seconds a lease lasts without renewal; a live run renews it every third of that.
        cache_size: sessions whose projection is kept in memory between runs.
        flush_interval: seconds a run's facts wait at most before they are appended in the background, so
            that other processes following the session see them (see :mod:`rxagent.session.recorder`);
            ``None``: only when 256 are queued, or the run flushes.
        clock: what the keeper waits on (the session wait, waiting in a session's line, renewing leases, the
            feeds' wake-ups and reads, background flushes); a :class:`~rxagent.clock.VirtualClock` in tests.
        close_timeout: seconds :meth:`aclose` waits at most for the sessions held to be given back.
    """

    def __init__(
        self,
        store: SessionStore,
        *,
        owner: str | None = None,
        lease_ttl: float = 30.0,
        cache_size: int = 10_000,
        flush_interval: float | None = 0.05,
        clock: Clock = SYSTEM_CLOCK,
        close_timeout: float = 10.0,
    ) -> None:
        if not lease_ttl > 0:
            raise ValueError("lease_ttl must be positive")
        if not close_timeout >= 0:
            raise ValueError("close_timeout must be a number of seconds, 0 or more")
        self.close_timeout = close_timeout
        if flush_interval is not None and not flush_interval > 0:
            raise ValueError("flush_interval must be None or a positive number of seconds")
        self.flush_interval = flush_interval
        self.store = store
        # Only the memory store's calls are run at once up to their first wait (`first_step`): that step
        # runs in the run's own task, and any other store's code may bind that task before it waits (an
        # `asyncio.timeout`, as psycopg_pool's `wait_for` is on Python 3.12+, a TaskGroup, anyio's
        # scopes), which would then cancel the run, not the store's call going on in a task of its own.
        self._at_once = type(store) is MemoryStore
        self.owner = owner or _default_owner()
        self.lease_ttl = lease_ttl
        self.cache_size = cache_size
        self.clock = clock
        self._lines: dict[SessionKey, _Line] = {}
        self._projections: OrderedDict[SessionKey, Projection] = OrderedDict()
        # A feed lives while something holds it: a watcher, or the recorder of a run going on (a session
        # nobody watches has none, so idle sessions keep no ring of items).
        self._feeds: weakref.WeakValueDictionary[SessionKey, SessionFeed] = weakref.WeakValueDictionary()
        self._claims: dict[SessionKey, Claim] = {}
        self._renewer: Timer | None = None
        """The one timer that renews the leases of the claims held, armed while any is (a timer per claim
        was three more objects per run in flight for the garbage collector to walk, and most runs end
        long before their first renewal is due)."""
        self._checkpoints: set[asyncio.Task[None]] = set()
        self._undoing: set[asyncio.Future[Any]] = set()
        """Lease work under way that outlives a cancel of whoever asked: a taking of a lease or a ticket,
        a release, a giving back of what a cancelled run took."""
        self._claiming = 0
        """Claims joining the line, taking the lease or loading the projection."""
        self._releasing = 0
        """Claims being given back (see :meth:`release`)."""
        self._quiet: asyncio.Event | None = None
        """Set, while :meth:`aclose` waits, once nothing is held or under way."""

    def place(self, key: SessionKey) -> Place:
        """A new place in ``key``'s line for one run (it joins the line in :meth:`claim`)."""
        return Place(key)

    async def claim(self, place: Place, key: SessionKey, *, wait: float | None) -> Claim:
        """Join the session's line, wait for the lease, then load the projection. A run the log leaves open
        (it started and has no end) is noted as failed, for the claim's first flush.

        Raises:
            SessionBusy: ``wait`` seconds passed first (nothing is held then, and the place left the line).
        """
        self._claiming += 1  # from here until the claim is held (or failed), aclose() waits for it
        try:
            lease = await self._take_turn(place, key, wait)
            try:
                projection = await self._project(key)
            except BaseException:
                await self._give_back(lease)
                raise
        except BaseException:
            self._leave(place)
            self._claiming -= 1
            self._check_quiet()
            raise
        feed = self._feeds.get(key)
        if feed is not None:
            # From here on this run publishes: the feed stops following the log (a read it has under way is
            # dropped), and starts from the log's head, which the projection was just brought up to.
            feed.writing_here(True)
            if feed.head != projection.seq:
                feed.reset(projection.seq)
        recorder = Recorder(
            self.store,
            lease,
            projection,
            feed=feed,
            flush_interval=self.flush_interval,
            clock=self.clock,
        )
        if projection.open_run is not None:
            # The lease is ours, so the run the log leaves open holds nothing any more: its process stopped
            # (or lost the session) before recording how it ended. Whoever takes the session next records
            # that, with its first flush: a run, a reconciliation, an injected message, a refused resume.
            recorder.lost(projection.open_run)
        claim = Claim(key, place, lease, projection, recorder, renew_at=self.clock.now() + self.lease_ttl / 3)
        self._claims[key] = claim
        self._claiming -= 1
        if self._renewer is None:  # else it is due no later than this claim (claims renew after one ttl)
            self._renewer = self.clock.call_at(claim.renew_at, self._renew_due)
        return claim

    async def _take_turn(self, place: Place, key: SessionKey, wait: float | None) -> Lease:
        """Join the line, then wait for the lease (see the module's **Turns**)."""
        started = self.clock.now()
        deadline = None if wait is None else started + wait
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = _Line()
        line.places.append(place)  # until it leaves (_leave)
        # Made once the run has to wait (most runs get the lease at once): an event and a listener are four
        # more objects per run in flight for the garbage collector to walk.
        woken: asyncio.Event | None = None
        listening: Listening | None = None
        ticket: Ticket | None = None
        try:
            if line.joining is None:
                line.joining = asyncio.Lock()
            joining = line.joining
            line.joiners += 1
            try:
                async with joining:  # this keeper's runs join in the order they came
                    outcome = await self._finishing(self.store.enqueue(key, self.owner, self.lease_ttl))
            finally:
                line.joiners -= 1
                if not line.joiners:
                    line.joining = None
            renew_at = self.clock.now() + self.lease_ttl / 3
            while isinstance(outcome, Waiting):
                ticket = outcome.ticket
                place._stands(outcome)  # pyright: ignore[reportPrivateUsage] - the keeper moves its places
                if outcome.holder not in (None, self.owner) and await self._reclaim(key, outcome.holder):
                    # The holder's process is gone and its lease released: the line moves now.
                    outcome = await self._finishing(self.store.take_turn(ticket, self.lease_ttl))
                    continue
                now = self.clock.now()
                if deadline is not None and now >= deadline:
                    raise SessionBusy(now - started, outcome.ahead, outcome.holder)
                if woken is None or listening is None:
                    woken = asyncio.Event()
                    listening = self.store.listen_turns(key, woken.set)
                    woken.set()  # the line may have moved before this listened: ask again at once
                pause = max(outcome.retry_in, _RETRY_FLOOR)
                if not listening.live:
                    pause = min(pause, TURN_POLL)
                pause = min(pause, max(renew_at - now, 0.0))
                if deadline is not None:
                    pause = min(pause, deadline - now)
                with contextlib.suppress(TimeoutError):
                    async with self.clock.timeout(pause):
                        await woken.wait()
                woken.clear()  # before asking: a wake that comes during the question is kept
                try:
                    if self.clock.now() >= renew_at:
                        ticket = await self.store.renew_ticket(ticket, self.lease_ttl)
                        renew_at = self.clock.now() + self.lease_ttl / 3
                    outcome = await self._finishing(self.store.take_turn(ticket, self.lease_ttl))
                except TicketLostError:
                    # It stopped counting (this process stalled past its expiry): the end of the line.
                    _log.warning("rxagent: session %r: a run lost its place in line; it joins again", key[1])
                    ticket = None
                    outcome = await self._finishing(self.store.enqueue(key, self.owner, self.lease_ttl))
                    renew_at = self.clock.now() + self.lease_ttl / 3
            ticket = None  # spent: the lease is the run's
            place._holds()  # pyright: ignore[reportPrivateUsage]
            return outcome
        except BaseException as error:
            self._leave(place)
            if ticket is not None:
                if isinstance(error, asyncio.CancelledError):
                    self._undo(self.store.drop_ticket(ticket))  # awaiting here could be cancelled again
                else:
                    await self._drop(ticket)
            raise
        finally:
            if listening is not None:
                listening.close()

    def _leave(self, place: Place) -> None:
        """``place`` gave the session back, or left the line without it (a no-op the second time)."""
        place._leaves()  # pyright: ignore[reportPrivateUsage]
        line = self._lines.get(place.key)
        if line is not None and place in line.places:
            line.places.remove(place)
            if not line.places:
                del self._lines[place.key]

    async def _reclaim(self, key: SessionKey, holder: str | None) -> bool:
        """If ``holder``, who holds ``key``'s lease, is a process of this machine that is gone (see
        :mod:`rxagent.session.owner`), release its lease; return whether it did."""
        if holder is None or not owner_gone(holder):
            return False
        held = await self.store.lease(key)
        if held is None or held.owner != holder:
            return held is None  # it moved meanwhile: ask again at once
        _log.info("rxagent: session %r is held by %s, whose process is gone: taking it over", key[1], holder)
        await self.store.release(held)  # a no-op if someone took it over meanwhile (its token changed)
        return True

    async def _finishing(self, call: Coroutine[Any, Any, Lease | Waiting]) -> Lease | Waiting:
        """``await call``, which finishes even if the caller is cancelled meanwhile: then the ticket it
        took is dropped, or the lease it granted released, in the background."""
        finished, outcome = self._begin(call)
        if finished:  # at once (the memory store): no cancel could come in between
            return cast("Lease | Waiting", outcome)
        task = cast("asyncio.Future[Lease | Waiting]", outcome)
        try:
            await _finished(task)
            return task.result()
        except asyncio.CancelledError:
            if task.done():
                # The call finished before the cancel reached us: undo now. A done callback would run a
                # loop turn later, and the call no longer counts as work under way (`_done` ran), so
                # aclose() could find the keeper quiet in between and let the store close with a lease
                # granted and not yet released (held until it expires).
                self._undo_outcome(task)
            else:
                task.add_done_callback(self._undo_outcome)  # runs right after `_done`, in the same turn
            raise

    def _undo_outcome(self, task: asyncio.Future[Lease | Waiting]) -> None:
        if task.cancelled() or task.exception() is not None:
            return  # nothing was taken
        outcome = task.result()
        if isinstance(outcome, Waiting):
            self._undo(self.store.drop_ticket(outcome.ticket))
        else:
            self._undo(self.store.release(outcome))

    def _undo(self, call: Awaitable[None]) -> None:
        async def undo() -> None:
            try:
                await call
            except Exception:
                _log.warning("rxagent: giving back what a cancelled run took failed", exc_info=True)

        self._track(start_task(asyncio.get_running_loop(), undo(), "rxagent.session.undo"))

    async def _give_back(self, lease: Lease) -> None:
        """Release ``lease`` in a task of its own, which a cancel of the caller does not stop (a failure is
        raised to the caller, or logged when the caller was cancelled)."""
        finished, outcome = self._begin(self.store.release(lease))
        if finished:  # at once (the memory store): no cancel could come in between
            return
        task = cast("asyncio.Future[None]", outcome)
        try:
            await _finished(task)
            task.result()
        except asyncio.CancelledError:
            task.add_done_callback(_log_failed_release)
            raise

    def _begin(self, call: Coroutine[Any, Any, _T]) -> tuple[bool, object]:
        """A store call started: ``(True, its result)`` when it finished at once (the memory store's, run
        up to its first wait here), else ``(False, the task that goes on with it)``, tracked."""
        if not self._at_once:
            return False, self._track(asyncio.ensure_future(call))
        finished, outcome = first_step(call)
        return (
            (True, outcome)
            if finished
            else (False, self._track(asyncio.ensure_future(Resumed(call, outcome))))
        )

    def _track(self, work: asyncio.Future[_T]) -> asyncio.Future[_T]:
        self._undoing.add(work)
        work.add_done_callback(self._done, context=_NO_CONTEXT)  # it reads no context variable
        return work

    def _done(self, work: asyncio.Future[Any]) -> None:
        self._undoing.discard(work)
        self._check_quiet()

    def _busy(self) -> bool:
        return bool(self._claims or self._claiming or self._releasing or self._undoing)

    def _check_quiet(self) -> None:
        if self._quiet is not None and not self._busy():
            self._quiet.set()

    async def _drop(self, ticket: Ticket) -> None:
        try:
            await self.store.drop_ticket(ticket)
        except Exception:  # it expires on its own: the error that ended the wait is the one to raise
            _log.warning("rxagent: session %r: leaving the line failed", ticket.key[1], exc_info=True)

    def held_elsewhere(self, key: SessionKey) -> bool:
        """Whether a run of this keeper waits in ``key``'s line while another process (or another keeper)
        holds the session's lease: the run is queued behind a run that goes on elsewhere."""
        line = self._lines.get(key)
        return line is not None and any(p.holder not in (None, self.owner) for p in line.places)

    async def settled(self, key: SessionKey) -> None:
        """Wait until every run of this keeper that is now in ``key``'s line or holds it has given the
        session back (a cancelled run records its end before it does)."""
        line = self._lines.get(key)
        for place in list(line.places) if line is not None else []:
            await place.gone()

    async def _project(self, key: SessionKey) -> Projection:
        head = await self.store.head(key)
        cached = self._projections.pop(key, None)
        if cached is not None and cached.seq <= head:
            if cached.seq < head:  # someone else appended since: read just that
                for fact in await self.store.read(key, after=cached.seq):
                    cached.apply(fact)
            return cached
        checkpoint, facts = await self.store.load(key)
        return Projection.replay(checkpoint, facts)

    def _renew_due(self) -> None:
        """The renewal timer fired: renew every lease due (or due within a sixth of ``lease_ttl``, so that
        the claims taken around the same time share a firing), then arm for the next one due."""
        self._renewer = None
        now = self.clock.now()
        soon = now + self.lease_ttl / 6
        for claim in self._claims.values():
            if claim.renew_at <= soon:
                claim.renew_at = now + self.lease_ttl / 3
                if claim.renewal is None:  # else the last one is still under way: it is this one
                    claim.renewal = start_task(
                        asyncio.get_running_loop(), self._renew(claim), "rxagent.session.renew"
                    )
        self._arm_renewer()

    def _arm_renewer(self) -> None:
        due = min((claim.renew_at for claim in self._claims.values()), default=math.inf)
        if self._renewer is not None:
            self._renewer.cancel()
            self._renewer = None
        if due < math.inf:
            self._renewer = self.clock.call_at(due, self._renew_due)

    async def _renew(self, claim: Claim) -> None:
        try:
            claim.lease = await self.store.renew(claim.lease, self.lease_ttl)
        except LeaseLostError:
            _log.warning("rxagent: lost the lease on session %r; its next append will fail", claim.key[1])
            claim.renew_at = math.inf
        except Exception:
            _log.warning("rxagent: renewing the lease on session %r failed", claim.key[1], exc_info=True)
        finally:
            claim.renewal = None

    def feed(self, key: SessionKey, *, head: int | None = None) -> SessionFeed:
        """The session's feed in this process (``head``: the log's head, if known).

        Made when first asked for, and kept while anything holds it (its watchers, a run recording into
        it): a run going on publishes into it from then on, beginning with what it has not appended yet.
        """
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = SessionFeed(self.store, key, clock=self.clock)
            claim = self._claims.get(key)
            if claim is not None:
                feed.writing_here(True)
                claim.recorder.attach(feed)
            elif head is not None:
                feed.reset(head)
        elif head is not None and feed.head < head:  # others appended meanwhile: the log has it
            feed.reset(head)
        return feed

    async def release(self, claim: Claim) -> None:
        """Give the session back: stop renewing, release the lease and the place, keep the projection in
        memory (unless recording broke, or left facts out of the log or unsure of it), and checkpoint in
        the background when due. The lease is released in a task of its own, which a cancel of the caller
        does not stop."""
        self._releasing += 1
        try:
            await self._release(claim)
        finally:
            self._releasing -= 1
            self._check_quiet()

    async def _release(self, claim: Claim) -> None:
        claim.renew_at = math.inf
        renewal, claim.renewal = claim.renewal, None
        if renewal is not None:
            renewal.cancel()
        await claim.recorder.aclose()
        if not claim.recorder.settled:  # the projection holds what the log may not: the log is the truth
            claim.broken = True
        held = self._claims.get(claim.key) is claim
        if held:
            del self._claims[claim.key]
            if not self._claims and self._renewer is not None:  # nothing left to renew: no timer left
                self._renewer.cancel()
                self._renewer = None
        feed = self._feeds.get(claim.key)
        try:
            if claim.broken and feed is not None:  # it numbered facts the log never got: the log is the truth
                try:
                    feed.reset(await self.store.head(claim.key))
                except Exception:  # the log cannot say where it stands: the feed asks it before going on
                    feed.forget()
                    _log.warning(
                        "rxagent: session %r: reading the log's head failed", claim.key[1], exc_info=True
                    )
            await self._give_back(claim.lease)
        finally:
            self._leave(claim.place)
            if held and feed is not None:  # its watchers follow the log again, from the run's last fact
                feed.writing_here(False)
        if claim.broken:
            return
        projection = claim.projection
        self._projections[claim.key] = projection
        while len(self._projections) > self.cache_size:
            self._projections.popitem(last=False)
        if projection.since_checkpoint >= max(64, projection.seq // 4):
            self._checkpoint(claim.key, projection)

    def _checkpoint(self, key: SessionKey, projection: Projection) -> None:
        snapshot = projection.snapshot()  # on the loop: consistent, and cheap (lists of references)
        projection.since_checkpoint = 0
        projection.checkpoint_seq = snapshot.seq

        async def write() -> None:
            try:
                checkpoint = await asyncio.to_thread(snapshot.checkpoint)
                await self.store.save_checkpoint(key, checkpoint)
            except Exception:
                _log.warning("rxagent: writing a checkpoint of session %r failed", key[1], exc_info=True)

        task = start_task(asyncio.get_running_loop(), write(), "rxagent.session.checkpoint")
        self._checkpoints.add(task)
        task.add_done_callback(self._checkpoints.discard)

    async def peek(self, key: SessionKey) -> Projection:
        """The session's projection as the store has it now, without taking the session (a copy)."""
        head = await self.store.head(key)
        cached = self._projections.get(key)
        if cached is not None and cached.seq == head:
            return cached.snapshot()
        checkpoint, facts = await self.store.load(key)
        return Projection.replay(checkpoint, facts)

    def cached(self, key: SessionKey) -> Projection | None:
        """The session's projection as this process last held it (``None``: not in memory)."""
        return self._projections.get(key)

    def in_use(self, key: SessionKey) -> bool:
        """Whether something of this process holds the session now: a run holding it or waiting in its
        line, or a watcher of its feed."""
        feed = self._feeds.get(key)
        return key in self._claims or key in self._lines or (feed is not None and feed.watchers > 0)

    def forget(self, key: SessionKey) -> None:
        """Drop the session's projection from memory (the next run loads it from the store)."""
        self._projections.pop(key, None)

    async def aclose(self) -> None:
        """Wait until every session this keeper holds or is taking is given back (a run cancelled a moment
        ago records its end and releases its lease on the loop's next turns) and the lease work under way
        is done, at most ``close_timeout`` seconds on the keeper's clock; then for the checkpoints being
        written (see the module's **Closing**).

        A run still going after ``close_timeout`` keeps its session (a warning says which); its lease
        expires if the store is closed under it.
        """
        if self._busy():
            self._quiet = quiet = asyncio.Event()
            try:
                async with self.clock.timeout(self.close_timeout):
                    while self._busy():  # a task that ends may start another (a release after a grant)
                        quiet.clear()
                        await quiet.wait()
            except TimeoutError:
                _log.warning(
                    "rxagent: sessions still held after %g s: %s",
                    self.close_timeout,
                    ", ".join(repr(key[1]) for key in self._claims) or "(leases being taken or released)",
                )
            finally:
                self._quiet = None
        if self._checkpoints:
            await asyncio.gather(*self._checkpoints, return_exceptions=True)


class _Wake:
    """Sets ``waiter`` when the work it is a done callback of is done."""

    __slots__ = ("waiter",)

    def __init__(self, waiter: asyncio.Future[None]) -> None:
        self.waiter = waiter

    def __call__(self, work: asyncio.Future[Any]) -> None:
        if not self.waiter.done():
            self.waiter.set_result(None)


def _finished(work: asyncio.Future[Any]) -> asyncio.Future[None]:
    """A future done when ``work`` is; cancelling it (a cancel of whoever awaits it) leaves ``work`` going.

    What ``asyncio.shield`` does, in one slotted callback run in the shared empty context instead of two
    closures, their cells and a copy of the context each: the keeper waits so at every turn's start and
    end, and with a thousand turns in flight all of it is walked by the garbage collector's collections.
    """
    waiter = asyncio.get_running_loop().create_future()
    if work.done():
        waiter.set_result(None)
    else:
        work.add_done_callback(_Wake(waiter), context=_NO_CONTEXT)
    return waiter


def _log_failed_release(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        _log.warning(
            "rxagent: releasing a session's lease failed: it stays held until it expires",
            exc_info=task.exception(),
        )
