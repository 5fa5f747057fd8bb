"""The in-process session store: logs and leases in dicts (the default when no store is given)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

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

__all__ = ["MemoryStore"]


_FIELDS = 5
"""A fact's slots in :attr:`_Log.facts`: its kind, its payload (the JSON text, or the source its encoder
encodes), its encoder (``None`` once encoded), its run id, when it was written."""


@dataclass(slots=True)
class _Log:
    """One session: its facts, checkpoints, lease and line."""

    facts: list[object] = field(default_factory=lambda: [])
    """The facts in order, flat, :data:`_FIELDS` slots each (fact ``n`` from ``(n - 1) * _FIELDS``): a list
    of strings and numbers is one object for the garbage collector to walk, where a fact object each was
    eleven more a turn, all walked by every full collection while the process lives. A payload not
    encoded yet is kept as its source (a message or a block the session's history holds anyway) and its
    encoder, and encoded when first read (see :meth:`~rxagent.session.facts.Fact.later`)."""
    checkpoints: tuple[Checkpoint, ...] = ()
    """The last few, oldest first (a tuple, replaced whole: a session without one keeps no empty list for
    the garbage collector to walk)."""
    batches: dict[str, int] = field(default_factory=lambda: {})
    """The ids of the appends made with a batch, and the sequence number each one ended at."""
    lease: Lease | None = None
    tokens: int = 0
    tickets: dict[int, Ticket] = field(default_factory=lambda: {})
    """The line for the lease, by number (taken in increasing order, so the dict keeps them in line)."""

    @property
    def head(self) -> int:
        return len(self.facts) // _FIELDS

    def extend(self, facts: Sequence[Fact]) -> None:
        for fact in facts:
            deferred = fact.deferred()
            encode, payload = (None, fact.payload) if deferred is None else deferred
            self.facts.extend((fact.kind, payload, encode, fact.run_id, fact.at))

    def stored(self, start: int, end: int | None) -> list[StoredFact]:
        """Facts ``start + 1`` to ``end`` (``None``: the head), their payloads encoded (once: kept so)."""
        end = self.head if end is None else min(end, self.head)
        facts: list[StoredFact] = []
        slots = self.facts
        for seq in range(start + 1, end + 1):
            at = (seq - 1) * _FIELDS
            kind, payload, encode, run_id, written = slots[at : at + _FIELDS]
            if encode is not None:
                payload = slots[at + 1] = cast("Callable[[object], str]", encode)(payload)
                slots[at + 2] = None
            facts.append(
                StoredFact(
                    seq,
                    cast("FactKind", kind),
                    cast("str", payload),
                    cast("str | None", run_id),
                    cast("float", written),
                )
            )
        return facts

    def written_at(self, seq: int) -> float:
        """When fact ``seq`` was written."""
        return cast("float", self.facts[seq * _FIELDS - 1])

    def copy_facts(self, source: _Log, end: int) -> None:
        """Take ``source``'s first ``end`` facts (this log has none)."""
        self.facts = source.facts[: end * _FIELDS]


class MemoryStore:
    """Session logs in this process's memory: the same contract as the database stores, nothing durable.

    Payloads are kept as the JSON text they were appended as, so what a reader gets never changes when
    a run mutates its own objects. It tells listeners of its appends
    (:class:`~rxagent.session.store.NotifyingStore`), so agents sharing it in one process follow each
    other's runs at once.

    Args:
        now: the wall clock leases expire on (a test can pass its own).
    """

    durable = False
    """Nothing outlives the process."""

    def __init__(self, *, now: Callable[[], float] = time.time) -> None:
        self._logs: dict[SessionKey, _Log] = {}
        self._now = now
        self._listeners = AppendListeners()
        self._turn_listeners = AppendListeners()
        self._numbers = itertools.count(1)

    def _log(self, key: SessionKey) -> _Log:
        log = self._logs.get(key)
        if log is None:
            log = self._logs[key] = _Log()
        return log

    async def acquire(self, key: SessionKey, owner: str, ttl: float) -> Lease | None:
        """Take the lease (see :class:`~rxagent.session.store.SessionStore`)."""
        log = self._log(key)
        now = self._now()
        current = log.lease
        if current is not None and current.owner != owner and current.expires_at > now:
            return None
        return self._grant(log, key, owner, now + ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Push the expiry (see :class:`~rxagent.session.store.SessionStore`)."""
        log = self._check(lease)
        log.lease = Lease(lease.key, lease.owner, lease.token, self._now() + ttl)
        return log.lease

    async def release(self, lease: Lease) -> None:
        """Give the lease up."""
        log = self._logs.get(lease.key)
        if log is not None and log.lease is not None and log.lease.token == lease.token:
            log.lease = None
            self._turn_listeners.notify(lease.key)

    # ---- the line for the lease ----------------------------------------------------------------------

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        """Join the line (see :meth:`~rxagent.session.store.SessionStore.enqueue`)."""
        log = self._log(key)
        now = self._now()
        self._sweep(log, key, now)
        if not log.tickets and _lease_free(log, now):
            return self._grant(log, key, owner, now + ttl)
        ticket = Ticket(key, owner, next(self._numbers), now + ttl)
        log.tickets[ticket.number] = ticket
        return _waiting(log, ticket, now)

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        """The lease if it is ``ticket``'s turn (see
        :meth:`~rxagent.session.store.SessionStore.take_turn`)."""
        log, now = self._holding(ticket)
        self._sweep(log, ticket.key, now)
        if next(iter(log.tickets)) == ticket.number and _lease_free(log, now):
            del log.tickets[ticket.number]
            lease = self._grant(log, ticket.key, ticket.owner, now + ttl)
            self._turn_listeners.notify(ticket.key)  # the ones behind it moved up
            return lease
        return _waiting(log, ticket, now)

    async def renew_ticket(self, ticket: Ticket, ttl: float) -> Ticket:
        """Keep the ticket in line (see :meth:`~rxagent.session.store.SessionStore.renew_ticket`)."""
        log, now = self._holding(ticket)
        renewed = log.tickets[ticket.number] = Ticket(ticket.key, ticket.owner, ticket.number, now + ttl)
        return renewed

    async def drop_ticket(self, ticket: Ticket) -> None:
        """Leave the line (a no-op if the ticket is not in it)."""
        log = self._logs.get(ticket.key)
        held = log.tickets.get(ticket.number) if log is not None else None
        if log is not None and held is not None and held.owner == ticket.owner:
            del log.tickets[ticket.number]
            self._turn_listeners.notify(ticket.key)

    def listen_turns(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` when ``key``'s line may have moved (every change is made here: always live)."""
        return self._turn_listeners.add(key, wake)

    def _holding(self, ticket: Ticket) -> tuple[_Log, float]:
        log = self._logs.get(ticket.key)
        now = self._now()
        held = log.tickets.get(ticket.number) if log is not None else None
        if log is None or held is None or held.owner != ticket.owner or held.expires_at <= now:
            raise TicketLostError.of(ticket)
        return log, now

    def _sweep(self, log: _Log, key: SessionKey, now: float) -> None:
        expired = [number for number, ticket in log.tickets.items() if ticket.expires_at <= now]
        for number in expired:
            del log.tickets[number]
        if expired:
            self._turn_listeners.notify(key)

    def _grant(self, log: _Log, key: SessionKey, owner: str, expires_at: float) -> Lease:
        log.tokens += 1
        log.lease = Lease(key, owner, log.tokens, expires_at)
        return log.lease

    async def lease(self, key: SessionKey) -> Lease | None:
        """The current, unexpired lease (see :class:`~rxagent.session.store.SessionStore`)."""
        log = self._logs.get(key)
        current = log.lease if log is not None else None
        return current if current is not None and current.expires_at > self._now() else None

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        """Append under the lease, idempotently with ``batch`` (see
        :class:`~rxagent.session.store.SessionStore`)."""
        if batch is not None:
            if not facts:
                raise ValueError("an append with a batch needs facts: an empty one records nothing")
            known = self._logs[lease.key].batches.get(batch.id) if lease.key in self._logs else None
            if known is not None:
                return known
        log = self._check(lease)
        if batch is not None:
            if batch.first != log.head + 1:
                raise HeadMovedError(lease.key, batch.first, log.head)
            log.batches[batch.id] = log.head + len(facts)
        log.extend(facts)
        if facts:
            self._listeners.notify(lease.key)
        return log.head

    async def appended(self, key: SessionKey, batch_id: str) -> int | None:
        """Where the append of ``batch_id`` ended (see :class:`~rxagent.session.store.SessionStore`)."""
        log = self._logs.get(key)
        return log.batches.get(batch_id) if log is not None else None

    def listen(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` after each append to ``key`` (see
        :meth:`~rxagent.session.store.NotifyingStore.listen`)."""
        return self._listeners.add(key, wake)

    def _check(self, lease: Lease) -> _Log:
        log = self._logs.get(lease.key)
        current = log.lease if log is not None else None
        if (
            log is None
            or current is None
            or current.token != lease.token
            or current.expires_at <= self._now()
        ):
            raise LeaseLostError(
                f"the lease on session {lease.key[1]!r} (token {lease.token}) is no longer current: "
                "it expired and was taken over, or was released"
            )
        return log

    async def load(self, key: SessionKey) -> tuple[Checkpoint | None, list[StoredFact]]:
        """The last checkpoint and the facts after it."""
        log = self._logs.get(key)
        if log is None:
            return None, []
        checkpoint = log.checkpoints[-1] if log.checkpoints else None
        return checkpoint, log.stored(checkpoint.seq if checkpoint is not None else 0, None)

    async def save_checkpoint(self, key: SessionKey, checkpoint: Checkpoint) -> None:
        """Keep a checkpoint (see :class:`~rxagent.session.store.SessionStore`)."""
        log = self._log(key)
        if checkpoint.seq > log.head:
            raise ValueError(f"checkpoint {checkpoint.seq} is beyond the log's head ({log.head})")
        if not log.checkpoints or checkpoint.seq > log.checkpoints[-1].seq:
            log.checkpoints = (*log.checkpoints[-(CHECKPOINTS_KEPT - 1) :], checkpoint)

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        """Facts after ``after``."""
        log = self._logs.get(key)
        if log is None:
            return []
        return log.stored(after, None if limit is None else after + limit)

    async def head(self, key: SessionKey) -> int:
        """The last sequence number."""
        log = self._logs.get(key)
        return log.head if log is not None else 0

    async def sessions(self) -> list[SessionInfo]:
        """Every session with facts."""
        now = self._now()
        return [
            SessionInfo(
                key,
                log.head,
                log.written_at(log.head),
                log.lease.owner if log.lease is not None and log.lease.expires_at > now else None,
            )
            for key, log in self._logs.items()
            if log.head
        ]

    async def fork(self, key: SessionKey, at: int, into: SessionKey) -> None:
        """Copy facts up to ``at`` into a new session."""
        target = self._log(into)
        if target.head:
            raise SessionExistsError(f"session {into[1]!r} already has facts")
        source = self._logs.get(key)
        if source is not None:
            target.copy_facts(source, at)
            target.checkpoints = tuple(c for c in source.checkpoints if c.seq <= at)[-1:]
            if target.head:
                self._listeners.notify(into)

    async def delete(self, key: SessionKey) -> None:
        """Forget the session's facts, checkpoints and lease (its fencing tokens keep counting up, so a
        lease from before the delete never matches a later one)."""
        log = self._logs.get(key)
        if log is not None:  # the runs waiting for the session keep their places
            self._logs[key] = _Log(tokens=log.tokens, tickets=log.tickets)

    async def aclose(self) -> None:
        """Nothing to release."""


def _lease_free(log: _Log, now: float) -> bool:
    return log.lease is None or log.lease.expires_at <= now


def _waiting(log: _Log, ticket: Ticket, now: float) -> Waiting:
    ahead = [t.expires_at for t in log.tickets.values() if t.number < ticket.number and t.expires_at > now]
    lease = log.lease
    holder = lease if lease is not None and lease.expires_at > now else None
    expiries = [*ahead, holder.expires_at] if holder is not None else ahead
    return Waiting(
        ticket, len(ahead), holder.owner if holder is not None else None, min(expiries, default=now) - now
    )
