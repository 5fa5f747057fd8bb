"""The session store contract: an append-only log per session, and a writer lease with a fencing token.

One protocol, three stores: :class:`~rxagent.session.memory.MemoryStore` (one process),
:class:`~rxagent.session.sqlite.SQLiteStore` (a file: the embedded default) and
:class:`~rxagent.session.postgres.PostgresStore` (many processes and hosts). Every store passes the same
conformance tests.

**Lease and fencing.** A run takes its session's lease before it appends anything: the lease names an
owner, an expiry (wall-clock seconds, so processes on several hosts agree) and a *fencing token* that
grows by one each time the lease changes hands. Every append carries the lease; the store refuses it
(:class:`LeaseLostError`) unless the lease is still the current one and unexpired, so a process that was
paused past its expiry cannot write after another took the session over. A live run renews its lease; an
expired lease can be taken by anyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rxagent.session.facts import Checkpoint, Fact, StoredFact
from rxagent.state import SessionKey

__all__ = ["CHECKPOINTS_KEPT", "Lease", "LeaseLostError", "SessionExistsError", "SessionInfo", "SessionStore"]

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


class LeaseLostError(RuntimeError):
    """An append or renewal carried a lease that is no longer the session's current one (fencing)."""


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
        """Give the lease up now (a no-op if it is no longer current)."""
        ...

    async def append(self, lease: Lease, facts: Sequence[Fact]) -> int:
        """Append ``facts`` in order, atomically; returns the sequence number of the last one.

        Raises:
            LeaseLostError: ``lease`` is not the session's current, unexpired lease (nothing is written).
        """
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
