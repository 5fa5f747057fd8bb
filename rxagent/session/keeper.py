"""Taking a session for a run, and giving it back: :class:`SessionKeeper`.

A run on a session needs, in order: its turn among this process's runs on the session (first come, first
served), the store's lease (so runs in other processes and on other hosts wait too), and the session's
projection. The keeper keeps projections in memory between runs (a bounded number of sessions, least
recently used first out), so a process that keeps serving a session reads only the facts others appended
since (usually none) instead of the whole log. While a run holds the session the keeper renews its lease;
when the run gives the session back the keeper releases the lease, then writes a checkpoint in the
background when enough facts have piled up since the last one (so loading stays short, and the cost of a
checkpoint, spread over the facts it covers, stays constant per fact).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field

from rxagent.clock import SYSTEM_CLOCK, Clock, Timer
from rxagent.operators import KeyedSerializer, Turn, start_task
from rxagent.session.feed import SessionFeed
from rxagent.session.projection import Projection
from rxagent.session.recorder import Recorder
from rxagent.session.store import Lease, LeaseLostError, SessionStore
from rxagent.state import SessionKey

__all__ = ["Claim", "SessionBusy", "SessionKeeper"]

_log = logging.getLogger("rxagent")
_instances = itertools.count(1)


class SessionBusy(Exception):
    """The session stayed held past the wait: by runs of this process (``ahead`` of this one), or by
    another process (``holder``)."""

    def __init__(self, waited: float, ahead: int, holder: str | None) -> None:
        super().__init__(f"busy after {waited:g} s")
        self.waited = waited
        self.ahead = ahead
        self.holder = holder


@dataclass(eq=False)
class Claim:
    """A session held for one run: its turn, its lease, its projection and the run's recorder."""

    key: SessionKey
    turn: Turn
    lease: Lease
    projection: Projection
    recorder: Recorder
    renewal: Timer | asyncio.Task[None] | None = None
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
    """Hands sessions of one store to runs, one at a time per session, across processes.

    Args:
        store: the session store.
        owner: this keeper's name in leases (default: host, process and a counter).
        lease_ttl: seconds a lease lasts without renewal; a live run renews it every third of that.
        cache_size: sessions whose projection is kept in memory between runs.
        flush_interval: seconds a run's facts wait at most before they are appended in the background, so
            that other processes following the session see them (see :mod:`rxagent.session.recorder`);
            ``None``: only when 256 are queued, or the run flushes.
        clock: what the keeper waits on (the session wait, polling a busy lease, renewing leases, the
            feeds' wake-ups and reads, background flushes); a :class:`~rxagent.clock.VirtualClock` in tests.
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
    ) -> None:
        if not lease_ttl > 0:
            raise ValueError("lease_ttl must be positive")
        if flush_interval is not None and not flush_interval > 0:
            raise ValueError("flush_interval must be None or a positive number of seconds")
        self.flush_interval = flush_interval
        self.store = store
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{next(_instances)}"
        self.lease_ttl = lease_ttl
        self.cache_size = cache_size
        self.clock = clock
        self._turns = KeyedSerializer()
        self._projections: OrderedDict[SessionKey, Projection] = OrderedDict()
        # A feed lives while something holds it: a watcher, or the recorder of a run going on (a session
        # nobody watches has none, so idle sessions keep no ring of items).
        self._feeds: weakref.WeakValueDictionary[SessionKey, SessionFeed] = weakref.WeakValueDictionary()
        self._claims: dict[SessionKey, Claim] = {}
        self._held_elsewhere: set[SessionKey] = set()
        self._checkpoints: set[asyncio.Task[None]] = set()

    def turn(self, key: SessionKey) -> Turn:
        """A place in ``key``'s queue in this process (see :meth:`claim`)."""
        return self._turns.turn(key)

    async def claim(self, turn: Turn, key: SessionKey, *, wait: float | None) -> Claim:
        """Wait for the turn, then the store's lease, then load the projection. A run the log leaves open
        (it started and has no end) is noted as failed, for the claim's first flush.

        Raises:
            SessionBusy: ``wait`` seconds passed first (nothing is held then).
        """
        started = self.clock.now()
        try:
            async with self.clock.timeout(wait):
                await turn.acquire()
        except TimeoutError:
            raise SessionBusy(wait or 0.0, turn.left_at or 0, None) from None
        try:
            lease = await self._lease(key, wait, started)
            try:
                projection = await self._project(key)
            except BaseException:
                await self.store.release(lease)
                raise
        except BaseException:
            turn.release()
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
        claim = Claim(key, turn, lease, projection, recorder)
        self._claims[key] = claim
        claim.renewal = self.clock.call_later(self.lease_ttl / 3, lambda: self._renew(claim))
        return claim

    async def _lease(self, key: SessionKey, wait: float | None, started: float) -> Lease:
        pause = 0.02
        try:
            while True:
                lease = await self.store.acquire(key, self.owner, self.lease_ttl)
                if lease is not None:
                    return lease
                self._held_elsewhere.add(key)
                waited = self.clock.now() - started
                if wait is not None and waited >= wait:
                    holder = next((s.owner for s in await self.store.sessions() if s.key == key), None)
                    raise SessionBusy(waited, 0, holder)
                remaining = None if wait is None else wait - waited
                await self.clock.sleep(pause if remaining is None else min(pause, remaining))
                pause = min(pause * 2, 1.0)
        finally:
            self._held_elsewhere.discard(key)

    def held_elsewhere(self, key: SessionKey) -> bool:
        """Whether a run of this process holds its turn on ``key`` and waits for the store's lease, which
        another process (or another keeper) holds: the run is queued behind a run that goes on elsewhere."""
        return key in self._held_elsewhere

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

    def _renew(self, claim: Claim) -> None:
        # A timer, not a task per run: most runs end long before their first renewal is due.
        async def renew() -> None:
            try:
                claim.lease = await self.store.renew(claim.lease, self.lease_ttl)
            except LeaseLostError:
                _log.warning("rxagent: lost the lease on session %r; its next append will fail", claim.key[1])
                claim.renewal = None
                return
            except Exception:
                _log.warning("rxagent: renewing the lease on session %r failed", claim.key[1], exc_info=True)
            if claim.renewal is not None:  # still held
                claim.renewal = self.clock.call_later(self.lease_ttl / 3, lambda: self._renew(claim))

        claim.renewal = start_task(asyncio.get_running_loop(), renew(), "rxagent.session.renew")

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
        """Give the session back: stop renewing, release the lease and the turn, keep the projection in
        memory (unless recording broke), and checkpoint in the background when due."""
        renewal, claim.renewal = claim.renewal, None  # the timer holds the claim: no cycle left
        if renewal is not None:
            renewal.cancel()
        await claim.recorder.aclose()
        held = self._claims.get(claim.key) is claim
        if held:
            del self._claims[claim.key]
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
            await self.store.release(claim.lease)
        finally:
            claim.turn.release()
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

    def forget(self, key: SessionKey) -> None:
        """Drop the session's projection from memory (the next run loads it from the store)."""
        self._projections.pop(key, None)

    async def aclose(self) -> None:
        """Wait for the checkpoints being written."""
        if self._checkpoints:
            await asyncio.gather(*self._checkpoints, return_exceptions=True)
