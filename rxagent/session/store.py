"""The session store contract: an append-only log per session, and a writer lease with a fencing token.

One protocol, three stores: :class:`~rxagent.session.in_process.MemoryStore` (one process),
:class:`~rxagent.session.sqlite.SQLiteStore` (a file: the embedded default) and
:class:`~rxagent.session.postgres.PostgresStore` (many processes and hosts). Every store passes the same
conformance tests.

**Lease and fencing.** A run takes its session's lease before it appends anything: the lease names an
owner, an expiry (wall-clock seconds, so processes on several hosts agree) and a *fencing token* that
grows by one each time the lease changes hands. Every append carries the lease; the store refuses it
(:class:`LeaseLostError`) unless the lease is still the current one and unexpired, so a process that was
paused past its expiry cannot write after another took the session over. A live run renews its lease; an
expired lease can be taken by anyone. Who holds a session now is :meth:`SessionStore.lease`: a keeper that
finds the holder's process gone (on its own host, see :mod:`rxagent.session.owner`) releases that lease
(releasing needs only its token) instead of waiting for it to expire.

**Idempotent appends.** An append may carry a :class:`Batch`: an id, and the sequence number its first
fact must get. The store refuses it (:class:`HeadMovedError`, nothing written) unless the log's head is
right before that number, records the id with it, and answers :meth:`SessionStore.appended` with one
indexed read. So a writer whose append failed or was cancelled, not knowing whether it committed (a
database commits a statement whose caller went away), asks before it sends the facts again: an append
that committed is never made twice, and one that did not is made once. An append of a batch id the session
already has writes nothing and returns where that one ended.

**Notices of appends.** A store may also tell when a session's log grows, whoever appended
(:class:`NotifyingStore`): :class:`~rxagent.session.postgres.PostgresStore` listens to the database's
notifications on one connection per store, :class:`~rxagent.session.MemoryStore` tells of its own appends.
A session's feed follows a log written elsewhere by reading it after each notice; with a store that sends
none (SQLite: another process may write the file) it reads the log at intervals instead.

**Turns in submission order.** Runs wait for a session's lease in one line kept in the store, whichever
agent object, process or host they come from: a run joins it when it is submitted
(:meth:`SessionStore.enqueue`), and the lease goes to the lowest *live* ticket once nobody holds it
(:meth:`SessionStore.take_turn`), so no run waits behind more than the runs submitted before it. A ticket
lives ``ttl`` seconds unless its waiter renews it (:meth:`SessionStore.renew_ticket`), so the ticket of a
waiter that crashed stops counting once it expires, as a crashed holder's lease does; a waiter that gives
up leaves the line (:meth:`SessionStore.drop_ticket`). A waiter learns that the line may have moved from
:meth:`SessionStore.listen_turns` (a lease released, a ticket granted, dropped or expired): at once for
changes made through the same store object, through the database's notifications on PostgreSQL, and for
changes another process makes to a SQLite file only by asking again at intervals. ``acquire`` itself takes
no ticket and does not look at the line: it is for code that takes a session outside the runs' turns.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rxagent.session.facts import Checkpoint, Fact, StoredFact
from rxagent.state import SessionKey

__all__ = [
    "CHECKPOINTS_KEPT",
    "AppendListeners",
    "Batch",
    "DelegatingStore",
    "HeadMovedError",
    "Lease",
    "LeaseLostError",
    "Listening",
    "NotifyingStore",
    "SessionExistsError",
    "SessionInfo",
    "SessionStore",
    "Ticket",
    "TicketLostError",
    "Waiting",
]

CHECKPOINTS_KEPT = 2
"""Checkpoints a store keeps per session, newest first (each is the whole state: older ones only cost
space; a fork at an older point replays from the start instead)."""


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to append to one session until ``expires_at`` (wall-clock seconds).

    Attributes:
        key: the session.
        owner: who holds it (a process and agent identity, for people reading it).
        token: the fencing token: larger than any earlier lease's on this session.
        expires_at: when another owner may take the session over.
    """

    key: SessionKey
    owner: str
    token: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A stored session, as :meth:`SessionStore.sessions` lists it."""

    key: SessionKey
    facts: int
    """The sequence number of its last fact."""
    updated_at: float
    """When its last fact was appended (wall-clock seconds)."""
    owner: str | None
    """Who holds its lease now (``None``: nobody, or an expired lease)."""


@dataclass(frozen=True, slots=True)
class Ticket:
    """A place in the line for a session's lease, kept in the store (see the module's **Turns**).

    Attributes:
        key: the session.
        owner: who waits (as in leases).
        number: its place: the tickets of a session are numbered in the order they were taken, and a
            number is never given out twice.
        expires_at: when it stops counting unless renewed (wall-clock seconds, as a lease's expiry).
    """

    key: SessionKey
    owner: str
    number: int
    expires_at: float


@dataclass(frozen=True, slots=True)
class Waiting:
    """Where a ticket stands when it is not its turn yet (:meth:`SessionStore.enqueue`,
    :meth:`SessionStore.take_turn`).

    Attributes:
        ticket: the ticket, in line.
        ahead: live tickets ahead of it (``0``: it is next, once the lease is free).
        holder: who holds the session's lease now (``None``: nobody; the tickets ahead go first).
        retry_in: seconds (of the store's clock) after which the line may move although nobody says so:
            the holder's lease or a ticket ahead expires. Ask again then, or when woken.
    """

    ticket: Ticket
    ahead: int
    holder: str | None
    retry_in: float


@dataclass(frozen=True, slots=True)
class Batch:
    """What makes an append idempotent (see the module's **Idempotent appends**).

    Attributes:
        id: the append's id, which the store records with it (unique per session: :meth:`new` makes one).
        first: the sequence number the append's first fact must get (the log's head plus one).

    Raises:
        ValueError: an empty id, one longer than 128 characters, or ``first`` below 1.
    """

    id: str
    first: int

    def __post_init__(self) -> None:
        if not self.id or len(self.id) > 128:
            raise ValueError(f"a batch id is 1 to 128 characters, not {self.id!r:.140}")
        if self.first < 1:
            raise ValueError(f"a batch's first sequence number is 1 or more, not {self.first}")

    @classmethod
    def new(cls, first: int) -> Batch:
        """A batch with a fresh random id whose first fact is to be ``first``."""
        return cls(secrets.token_hex(12), first)


class LeaseLostError(RuntimeError):
    """An append or renewal carried a lease that is no longer the session's current one (fencing)."""


class TicketLostError(RuntimeError):
    """A ticket is no longer in its session's line: it expired (its waiter did not renew it in time), it
    was dropped, or it was never issued. Its waiter takes a new ticket, at the end of the line."""

    @classmethod
    def of(cls, ticket: Ticket) -> TicketLostError:
        """The error a store raises for ``ticket`` (naming it and its session)."""
        return cls(
            f"ticket {ticket.number} for session {ticket.key[1]!r} is not in the line: it expired, was "
            "dropped, or was never issued"
        )


class HeadMovedError(RuntimeError):
    """An append's :class:`Batch` expected the log's head elsewhere: nothing was written.

    Under a current lease only its holder appends, so the head moved by an append of the holder whose
    outcome it did not know (ask :meth:`SessionStore.appended`), or by someone writing without the lease.

    Attributes:
        key: the session.
        first: the sequence number the append's first fact was to get.
        head: the log's head the store found.
    """

    def __init__(self, key: SessionKey, first: int, head: int) -> None:
        super().__init__(
            f"session {key[1]!r}: the append was to start at {first}, but the log's head is {head} "
            "(nothing was written)"
        )
        self.key = key
        self.first = first
        self.head = head


class SessionExistsError(ValueError):
    """A fork's target session already has facts."""


@runtime_checkable
class SessionStore(Protocol):
    """Where session logs live. All methods are coroutines on the caller's loop.

    ``durable`` says whether appended facts outlive the process: a run records each tool call before it
    runs (and its result after) only where that protects anything; elsewhere they are appended with the
    run's next flush.
    """

    durable: bool

    async def acquire(self, key: SessionKey, owner: str, ttl: float) -> Lease | None:
        """Take the session's lease for ``ttl`` seconds, or ``None`` while someone else holds it unexpired.

        The same owner asking again gets a new lease (and token).
        """
        ...

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Push the lease's expiry ``ttl`` seconds from now (same token).

        Raises:
            LeaseLostError: the lease expired and was taken, or was released.
        """
        ...

    async def release(self, lease: Lease) -> None:
        """Give the lease up now (a no-op if it is no longer current: only its token is compared, so a
        keeper may release a lease its :meth:`lease` names whose owner is known to be gone); the session's
        line may move."""
        ...

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        """Join the line for the session's lease (see the module's **Turns**).

        Returns:
            the lease for ``ttl`` seconds when nobody holds it and no live ticket waits (no ticket is kept
            then), else a new ticket at the end of the line, live for ``ttl`` seconds unless renewed.
        """
        ...

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        """The lease for ``ttl`` seconds if ``ticket`` is the lowest live ticket and nobody holds the lease
        (not even its own owner: the ticket leaves the line), else where the ticket stands.

        Raises:
            TicketLostError: the ticket is not in the line (expired, dropped, or never issued).
        """
        ...

    async def renew_ticket(self, ticket: Ticket, ttl: float) -> Ticket:
        """Keep ``ticket`` in line for ``ttl`` seconds from now (same number, same place).

        Raises:
            TicketLostError: the ticket is not in the line (expired, dropped, or never issued).
        """
        ...

    async def drop_ticket(self, ticket: Ticket) -> None:
        """Leave the line (a no-op if the ticket is no longer in it); the tickets behind move up."""
        ...

    def listen_turns(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` (on this loop) when ``key``'s line may have moved: its lease was released, a
        ticket was granted the lease, dropped or found expired.

        Changes made through this store object wake at once; :attr:`Listening.live` says whether changes
        made elsewhere (other processes) wake too. While it is ``False`` the waiter asks again at
        intervals. Extra wakes are harmless.
        """
        ...

    async def lease(self, key: SessionKey) -> Lease | None:
        """The session's current, unexpired lease (``None``: nobody holds it)."""
        ...

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        """Append ``facts`` in order, atomically; returns the sequence number of the last one.

        With ``batch``, idempotently: if the session already has an append of ``batch.id``, nothing is
        written and the sequence number of that append's last fact is returned (whatever the lease now:
        what committed stays committed); otherwise the append is refused unless the log's head is
        ``batch.first - 1``, and the id is recorded with it (see :meth:`appended`).

        Raises:
            LeaseLostError: ``lease`` is not the session's current, unexpired lease (nothing is written).
            HeadMovedError: ``batch.first`` is not the log's head plus one (nothing is written).
            ValueError: ``batch`` given with no facts (an empty append records nothing).
        """
        ...

    async def appended(self, key: SessionKey, batch_id: str) -> int | None:
        """The sequence number of the last fact of the session's append of ``batch_id`` (one indexed read),
        or ``None``: none committed. An append still on its way may commit after this answered ``None``;
        it cannot once another append took its place (its ``first`` is then at or below the head)."""
        ...

    async def load(self, key: SessionKey) -> tuple[Checkpoint | None, list[StoredFact]]:
        """What projecting the session needs: its last checkpoint, and the facts after it (all of them
        when it has none)."""
        ...

    async def save_checkpoint(self, key: SessionKey, checkpoint: Checkpoint) -> None:
        """Keep ``checkpoint`` beside the log (it needs no lease: it stays true whatever comes after it).

        A checkpoint older than the newest kept is ignored; one beyond the log's head is refused with
        ``ValueError``. Only the newest :data:`CHECKPOINTS_KEPT` are kept.
        """
        ...

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        """Facts with sequence numbers above ``after``, in order (at most ``limit``)."""
        ...

    async def head(self, key: SessionKey) -> int:
        """The sequence number of the session's last fact (0: none)."""
        ...

    async def sessions(self) -> list[SessionInfo]:
        """Every stored session."""
        ...

    async def fork(self, key: SessionKey, at: int, into: SessionKey) -> None:
        """Copy the facts of ``key`` up to sequence ``at`` into the new session ``into`` (with the last
        checkpoint at or before ``at``).

        Raises:
            SessionExistsError: ``into`` already has facts.
        """
        ...

    async def delete(self, key: SessionKey) -> None:
        """Delete the session's facts and lease."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (connections, threads)."""
        ...


class DelegatingStore:
    """A :class:`SessionStore` that passes every call on to ``inner``: subclass it and override what you
    want to observe or change (time the appends, count the reads, fail one on purpose), the rest keeps
    ``inner``'s behaviour.

    It sends no notices of appends, even over a store that does (it is no :class:`NotifyingStore`): the
    feeds of sessions it holds read the log at intervals instead; a subclass that wants them adds
    ``listen``. It passes ``listen_turns`` on: a turn notice only makes a waiter ask the store again, which
    no change a subclass makes can turn into a wrong answer. ``aclose`` closes ``inner``.

    Example:
        >>> from rxagent.session import DelegatingStore, MemoryStore
        >>> class CountedReads(DelegatingStore):
        ...     reads = 0
        ...     async def read(self, key, after=0, limit=None):
        ...         self.reads += 1
        ...         return await super().read(key, after, limit)
        >>> CountedReads(MemoryStore()).durable
        False
    """

    def __init__(self, inner: SessionStore) -> None:
        self.inner = inner
        """The store every call goes to."""
        self.durable: bool = inner.durable

    async def acquire(self, key: SessionKey, owner: str, ttl: float) -> Lease | None:
        """See :meth:`SessionStore.acquire`."""
        return await self.inner.acquire(key, owner, ttl)

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """See :meth:`SessionStore.renew`."""
        return await self.inner.renew(lease, ttl)

    async def release(self, lease: Lease) -> None:
        """See :meth:`SessionStore.release`."""
        await self.inner.release(lease)

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        """See :meth:`SessionStore.enqueue`."""
        return await self.inner.enqueue(key, owner, ttl)

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        """See :meth:`SessionStore.take_turn`."""
        return await self.inner.take_turn(ticket, ttl)

    async def renew_ticket(self, ticket: Ticket, ttl: float) -> Ticket:
        """See :meth:`SessionStore.renew_ticket`."""
        return await self.inner.renew_ticket(ticket, ttl)

    async def drop_ticket(self, ticket: Ticket) -> None:
        """See :meth:`SessionStore.drop_ticket`."""
        await self.inner.drop_ticket(ticket)

    def listen_turns(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """See :meth:`SessionStore.listen_turns` (``inner``'s notices)."""
        return self.inner.listen_turns(key, wake)

    async def lease(self, key: SessionKey) -> Lease | None:
        """See :meth:`SessionStore.lease`."""
        return await self.inner.lease(key)

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        """See :meth:`SessionStore.append`."""
        return await self.inner.append(lease, facts, batch=batch)

    async def appended(self, key: SessionKey, batch_id: str) -> int | None:
        """See :meth:`SessionStore.appended`."""
        return await self.inner.appended(key, batch_id)

    async def load(self, key: SessionKey) -> tuple[Checkpoint | None, list[StoredFact]]:
        """See :meth:`SessionStore.load`."""
        return await self.inner.load(key)

    async def save_checkpoint(self, key: SessionKey, checkpoint: Checkpoint) -> None:
        """See :meth:`SessionStore.save_checkpoint`."""
        await self.inner.save_checkpoint(key, checkpoint)

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        """See :meth:`SessionStore.read`."""
        return await self.inner.read(key, after, limit)

    async def head(self, key: SessionKey) -> int:
        """See :meth:`SessionStore.head`."""
        return await self.inner.head(key)

    async def sessions(self) -> list[SessionInfo]:
        """See :meth:`SessionStore.sessions`."""
        return await self.inner.sessions()

    async def fork(self, key: SessionKey, at: int, into: SessionKey) -> None:
        """See :meth:`SessionStore.fork`."""
        await self.inner.fork(key, at, into)

    async def delete(self, key: SessionKey) -> None:
        """See :meth:`SessionStore.delete`."""
        await self.inner.delete(key)

    async def aclose(self) -> None:
        """Close ``inner``."""
        await self.inner.aclose()


class Listening(Protocol):
    """One subscription to a session's appends (see :meth:`NotifyingStore.listen`)."""

    @property
    def live(self) -> bool:
        """Whether notices arrive now. ``False`` while the store cannot tell (its listening connection is
        being opened, or was lost and is being opened again): the listener reads the log at intervals
        meanwhile, and is woken once notices arrive again."""
        ...

    def close(self) -> None:
        """Stop listening (the store lets go of what it holds for listening once nobody listens)."""
        ...


@runtime_checkable
class NotifyingStore(Protocol):
    """A store that tells when a session's log grows, whichever process appended."""

    def listen(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` (on this loop) after each append to ``key`` is durable, and whenever notices
        may have been missed (listening began, or began again after its connection was lost): the
        listener then reads the log from where it stands. Extra wakes are harmless; a notice never
        carries facts, so ``wake`` reads them.
        """
        ...


class AppendListeners:
    """Who listens to which session's appends: what a :class:`NotifyingStore` keeps to tell them (and what
    every store keeps for :meth:`SessionStore.listen_turns`: who waits for which session's line).

    Args:
        live: whether notices arrive from the start (``False`` for a store that must first open a
            connection to hear of appends; it calls :meth:`set_live` once they arrive).
        on_first: called when the first listener arrives (a store opens its listening connection).
        on_last: called when the last one leaves (a store closes it).
    """

    def __init__(
        self,
        *,
        live: bool = True,
        on_first: Callable[[], None] | None = None,
        on_last: Callable[[], None] | None = None,
    ) -> None:
        self._by_key: dict[SessionKey, set[_Listening]] = {}
        self._count = 0
        self._live = live
        self._on_first = on_first
        self._on_last = on_last

    @property
    def live(self) -> bool:
        """Whether notices arrive now (see :attr:`Listening.live`)."""
        return self._live

    def __len__(self) -> int:
        return self._count

    def add(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """A new listener to ``key``'s appends (see :meth:`NotifyingStore.listen`)."""
        listening = _Listening(self, key, wake)
        self._by_key.setdefault(key, set()).add(listening)
        self._count += 1
        if self._count == 1 and self._on_first is not None:
            self._on_first()
        return listening

    def remove(self, listening: _Listening) -> None:
        """Forget ``listening`` (a no-op the second time)."""
        listeners = self._by_key.get(listening.key)
        if listeners is None or listening not in listeners:
            return
        listeners.discard(listening)
        if not listeners:
            del self._by_key[listening.key]
        self._count -= 1
        if self._count == 0 and self._on_last is not None:
            self._on_last()

    def notify(self, key: SessionKey) -> None:
        """``key``'s log grew: wake its listeners (a session nobody listens to costs a lookup)."""
        for listening in tuple(self._by_key.get(key, ())):
            listening.wake()

    def set_live(self, live: bool) -> None:
        """Notices arrive from now on, or stopped arriving: either way every listener is woken, to read
        what it may have missed (and, when not live, to go on reading at intervals)."""
        self._live = live
        for listeners in tuple(self._by_key.values()):
            for listening in tuple(listeners):
                listening.wake()


class _Listening:
    __slots__ = ("key", "registry", "wake")

    def __init__(self, registry: AppendListeners, key: SessionKey, wake: Callable[[], None]) -> None:
        self.registry = registry
        self.key = key
        self.wake = wake

    @property
    def live(self) -> bool:
        return self.registry.live

    def close(self) -> None:
        self.registry.remove(self)
