"""The PostgreSQL session store: many processes, on one host or several, sharing sessions in one database.

Install with ``pip install 'rxagent[postgres]'`` (psycopg 3 and its connection pool).

**Tables** (created and migrated by the store, in the connection's current schema — its ``search_path``):

==========================  ==============================================================================
``rxagent_schema``          one row per schema version applied (``version``, ``applied_at``)
``rxagent_sessions``        one row per session: its key, head sequence number, last append time and lease
                            (owner, fencing token, expiry)
``rxagent_facts``           the log, keyed by ``(sid, seq)``
``rxagent_checkpoints``     projections beside the log, keyed by ``(sid, seq)``: the newest few
``rxagent_lease_tokens``    the sequence fencing tokens come from
``rxagent_tickets``         the line for each session's lease: tickets keyed by a number from an identity
                            column (never reused), with the session's key, their owner and their expiry
``rxagent_batches``         the ids of idempotent appends (:class:`~rxagent.session.store.Batch`), keyed by
                            ``(sid, id)``, each with the sequence number its append ended at (version 3)
==========================  ==============================================================================

**Leases and fencing across hosts.** Every lease operation and every append is one statement whose
``WHERE`` checks the lease on the session's row, which the statement locks: an append is
``UPDATE rxagent_sessions … WHERE lease_token = <the append's token> AND lease_expires_at > <now>`` (and, for
an append with a batch, ``AND head + 1 = <its first sequence number>``) with the fact rows and the batch id
inserted by the same statement, so the check and the write happen in one transaction that holds
the row lock until it commits. A takeover (``acquire``) updates that same row, so it waits for an append in
progress, and an append waits for a takeover in progress and then sees the new token (PostgreSQL re-checks
the condition on the row's newest version): a stale or expired lease writes nothing and gets
:class:`~rxagent.session.store.LeaseLostError`. Fencing tokens come from one database sequence, so they grow
on every session and are never reused, not even after a session is deleted and started again.

**Group commit.** Appends wait in a queue; one task of the store sends all that are waiting (up to 256,
from any sessions) through one pooled connection as one transaction — each its own statement with its own
lease check, pipelined in one round trip — and commits them together, so the sessions appending at the
same moment share one commit and one WAL flush. A statement the server refuses (bad data) rolls its batch
back; the batch then goes again one append at a time, so only the faulty append fails. A batch locks its
sessions' rows in key order, so batches of several processes cannot deadlock. Reads, leases and
checkpoints use the other pooled connections meanwhile.

**Clocks.** Expiry is wall-clock seconds from the store's ``now`` (``time.time`` unless a test passes its own
clock), never the database server's clock, so that tests can move time. Hosts sharing a database therefore
need synchronised clocks (NTP): a host whose clock runs ``d`` seconds fast takes an expired-looking lease
``d`` seconds early. Skew cannot corrupt a log — once another owner holds the lease, the old token is
refused whatever the clocks say — but it can cut a live run's lease short, so keep ``ttl`` well above the
skew you allow.

**Notifications.** Every append (and a fork) sends ``NOTIFY`` on the channel :data:`NOTIFY_CHANNEL` once it
commits, with the JSON payload ``{"user_id": str | null, "session_id": str, "head": int}``: the session
and its new head sequence number. PostgreSQL limits a payload to 8 000 bytes, so
:meth:`PostgresStore.acquire` refuses session keys longer than :data:`MAX_KEY_BYTES`.

**The line for a lease.** Every change to a session's line (:meth:`PostgresStore.enqueue`,
:meth:`PostgresStore.take_turn`) first locks the session's row (``SELECT … FOR UPDATE``), then reads and
changes the line in its next statement, which therefore sees every change committed by whoever held the
lock before: two processes joining at once are numbered in the order they got the lock, and a lease is
never granted past a ticket that was committed first. Both go in one round trip (pipeline mode). A waiter's
attempt reads without the lock first and takes it only when it looks like its turn. A release, a grant
from the line, a dropped ticket and an expired one swept away each send ``NOTIFY`` on
:data:`TURN_CHANNEL` (``{"user_id", "session_id"}``) so that waiters of every process ask again at once.

**Listening.** A store hears of appends (:meth:`PostgresStore.listen`, which session feeds use to follow
runs of other processes, and :meth:`PostgresStore.follow`) on **one** connection of its own, outside the
pool, whatever the number of sessions and listeners: it is opened when the first listener comes and
closed when the last one leaves (or the store closes), and its ``application_name`` is the URL's (else
``rxagent``) followed by `` (listening)``. Waiters for a session's line
(:meth:`PostgresStore.listen_turns`) listen on the same connection, to :data:`TURN_CHANNEL`. A
notification wakes the listeners of its session only; one that is not a session's (someone else's
``NOTIFY`` on the channel) is ignored. When the connection is lost, the listeners are told
(:attr:`~rxagent.session.store.Listening.live` turns false: they read the logs at intervals meanwhile)
and it is opened again, after 0.05 s and then twice as long each time it fails, up to 5 s; once it
listens again every listener is woken to read what it missed. After 15 s without a notification a
``SELECT 1`` checks that the connection still answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, LiteralString, Self, cast

from psycopg import AsyncConnection, Error, OperationalError
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from rxagent.clock import SYSTEM_CLOCK, Clock
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

__all__ = [
    "MAX_KEY_BYTES",
    "NOTIFY_CHANNEL",
    "SCHEMA_VERSION",
    "TURN_CHANNEL",
    "PostgresStore",
    "SchemaVersionError",
    "StoreUnavailableError",
]

NOTIFY_CHANNEL: Final = "rxagent_session"
"""The channel every append notifies, with ``{"user_id", "session_id", "head"}`` as JSON."""

TURN_CHANNEL: Final = "rxagent_turn"
"""The channel a session's line notifies when it may have moved, with ``{"user_id", "session_id"}``
as JSON."""

SCHEMA_VERSION: Final = 3
"""The schema version this rxagent creates and reads."""

MAX_KEY_BYTES: Final = 7_000
"""The longest session key (user id and session id as JSON, UTF-8) a lease is granted for: the notification
that carries it must stay under PostgreSQL's 8 000-byte payload limit."""

# Taken for the length of the migrating transaction, so that two processes opening a fresh database at
# once do not both create the tables (CREATE TABLE IF NOT EXISTS is not safe against a concurrent create).
_SCHEMA_LOCK: Final = 0x7278_6167_656E_7431  # "rxagent1"

_Connection = AsyncConnection[tuple[Any, ...]]

_log = logging.getLogger("rxagent")

_LISTEN_CHECK: Final = 15.0
"""Seconds without a notification after which the listening connection is checked (and the most the
check may take)."""

_RELISTEN_FIRST: Final = 0.05
_RELISTEN_MAX: Final = 5.0
"""Seconds before opening a lost listening connection again: the first wait, doubling up to this."""

_FOLLOW_POLL: Final = 0.5
"""Seconds between two reads of the log by :meth:`PostgresStore.follow` while not listening."""

_BATCH_LIMIT: Final = 256
"""The most appends one transaction carries."""

# SQLSTATE classes of errors the server reports for a statement, rolling its transaction back: nothing of
# the batch was committed (unlike a lost connection, after which a COMMIT's outcome is unknown).
_STATEMENT_ERRORS: Final = frozenset({"22", "23", "40", "42", "54"})


def _rolled_back(exc: Error) -> bool:
    return exc.sqlstate is not None and exc.sqlstate[:2] in _STATEMENT_ERRORS


@dataclass(slots=True)
class _QueuedAppend:
    order: tuple[str, str, bool]
    params: dict[str, Any]
    head: asyncio.Future[int | None]
    """The session's new head, or ``None``: the lease was not current."""


class SchemaVersionError(RuntimeError):
    """The database holds a session schema this version of rxagent does not know (a newer one)."""


class StoreUnavailableError(ConnectionError):
    """The store could not connect to its database (the message says where, never the password)."""


async def _create_version_1(conn: _Connection) -> None:
    # fillfactor leaves room in each page so that the frequent updates of a session's row (head, lease)
    # stay heap-only (HOT) and never touch the key index.
    await conn.execute(
        """
        CREATE TABLE rxagent_sessions (
            sid bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            user_id text NOT NULL,
            has_user boolean NOT NULL,
            session_id text NOT NULL,
            head bigint NOT NULL DEFAULT 0,
            updated_at double precision,
            lease_owner text,
            lease_token bigint NOT NULL DEFAULT 0,
            lease_expires_at double precision,
            UNIQUE (session_id, user_id, has_user)
        ) WITH (fillfactor = 70)
        """
    )
    await conn.execute(
        """
        CREATE TABLE rxagent_facts (
            sid bigint NOT NULL REFERENCES rxagent_sessions (sid) ON DELETE CASCADE,
            seq bigint NOT NULL,
            kind text NOT NULL,
            payload text NOT NULL,
            run_id text,
            at double precision NOT NULL,
            PRIMARY KEY (sid, seq)
        )
        """
    )
    await conn.execute(
        """
        CREATE TABLE rxagent_checkpoints (
            sid bigint NOT NULL REFERENCES rxagent_sessions (sid) ON DELETE CASCADE,
            seq bigint NOT NULL,
            payload text NOT NULL,
            PRIMARY KEY (sid, seq)
        )
        """
    )
    await conn.execute("CREATE SEQUENCE rxagent_lease_tokens")


async def _create_version_2(conn: _Connection) -> None:
    # Keyed by the session's key, not its row: the runs waiting for a session keep their places when it is
    # deleted (its row goes) and started again.
    await conn.execute(
        """
        CREATE TABLE rxagent_tickets (
            number bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            session_id text NOT NULL,
            user_id text NOT NULL,
            has_user boolean NOT NULL,
            owner text NOT NULL,
            expires_at double precision NOT NULL
        )
        """
    )
    await conn.execute(
        "CREATE INDEX rxagent_tickets_line ON rxagent_tickets (session_id, user_id, has_user, number)"
    )


async def _add_batches_version_3(conn: _Connection) -> None:
    # The ids of idempotent appends: one indexed read tells whether an append of unknown outcome committed.
    await conn.execute(
        """
        CREATE TABLE rxagent_batches (
            sid bigint NOT NULL REFERENCES rxagent_sessions (sid) ON DELETE CASCADE,
            id text NOT NULL,
            last bigint NOT NULL,
            PRIMARY KEY (sid, id)
        )
        """
    )


_MIGRATIONS: Final[dict[int, Callable[[_Connection], Awaitable[None]]]] = {
    1: _create_version_1,
    2: _create_version_2,
    3: _add_batches_version_3,
}
"""Version ``n`` -> the function that brings a database at version ``n - 1`` to ``n`` (0: empty)."""

# A session key is three columns: ``user_id`` is '' with ``has_user`` false for a key without a user, so that
# (None, "s") and ("", "s") stay two sessions while every column is NOT NULL and the unique index applies.
_KEY: Final = "session_id = %(session)s AND user_id = %(user)s AND has_user = %(has_user)s"

_NOTIFY: Final = (
    f"pg_notify('{NOTIFY_CHANNEL}', json_build_object("
    "'user_id', CASE WHEN {t}.has_user THEN {t}.user_id END, 'session_id', {t}.session_id, 'head', {t}.head"
    ")::text)"
)

_ACQUIRE: Final = """
INSERT INTO rxagent_sessions AS s (session_id, user_id, has_user, lease_owner, lease_token, lease_expires_at)
VALUES (%(session)s, %(user)s, %(has_user)s, %(owner)s, nextval('rxagent_lease_tokens'), %(now)s + %(ttl)s)
ON CONFLICT (session_id, user_id, has_user) DO UPDATE
SET lease_owner = excluded.lease_owner, lease_token = excluded.lease_token,
    lease_expires_at = excluded.lease_expires_at
WHERE s.lease_owner IS NULL OR s.lease_owner = excluded.lease_owner OR s.lease_expires_at <= %(now)s
RETURNING s.lease_token, s.lease_expires_at
"""

# A released lease has no expiry (NULL), so the expiry test refuses it as well.
_LEASE_IS_CURRENT: Final = "lease_token = %(token)s AND lease_expires_at > %(now)s"

_RENEW: Final = f"""
UPDATE rxagent_sessions SET lease_expires_at = %(now)s + %(ttl)s
WHERE {_KEY} AND {_LEASE_IS_CURRENT}
RETURNING lease_expires_at
"""

# Its parameters carry the key (cast: json_build_object takes any type, so PostgreSQL cannot infer them).
_TURN_NOTIFY: Final = (
    f"pg_notify('{TURN_CHANNEL}', json_build_object("
    "'user_id', CASE WHEN %(has_user)s::boolean THEN %(user)s::text END, 'session_id', %(session)s::text"
    ")::text)"
)

_RELEASE: Final = f"""
WITH released AS (
    UPDATE rxagent_sessions SET lease_owner = NULL, lease_expires_at = NULL
    WHERE {_KEY} AND lease_token = %(token)s AND lease_owner IS NOT NULL
    RETURNING sid
)
SELECT {_TURN_NOTIFY} FROM released
"""

_BEHIND_EVERY_TICKET: Final = 2**63 - 1

_LOCK_LINE: Final = f"SELECT 1 FROM rxagent_sessions WHERE {_KEY} FOR UPDATE"

_LEASE_IS_FREE: Final = "(lease_owner IS NULL OR lease_expires_at <= %(now)s)"

_GRANT: Final = f"""
UPDATE rxagent_sessions SET lease_owner = %(owner)s, lease_token = nextval('rxagent_lease_tokens'),
    lease_expires_at = %(now)s + %(ttl)s
WHERE {_KEY} AND {_LEASE_IS_FREE}
"""

_SWEEP: Final = f"DELETE FROM rxagent_tickets WHERE {_KEY} AND expires_at <= %(now)s RETURNING number"

# Where a ticket stands: whether it is live in the line, the live tickets ahead of it, when the first of
# them expires; and the session's lease.
_STANDING: Final = f"""
line AS (
    SELECT coalesce(bool_or(number = %(number)s AND owner = %(owner)s), false) AS mine,
           count(*) FILTER (WHERE number < %(number)s) AS ahead,
           min(expires_at) FILTER (WHERE number < %(number)s) AS first_expiry
    FROM rxagent_tickets WHERE {_KEY} AND expires_at > %(now)s
), cur AS (
    SELECT lease_owner, lease_expires_at FROM rxagent_sessions WHERE {_KEY}
)"""

_LOOK: Final = f"""
WITH {_STANDING}
SELECT line.mine, line.ahead, line.first_expiry, cur.lease_owner, cur.lease_expires_at
FROM line LEFT JOIN cur ON true
"""

# After _LOCK_LINE, in its transaction. It stands as a ticket numbered above every other would (its
# parameter ``number`` is _BEHIND_EVERY_TICKET): every live ticket is ahead of it.
_ENQUEUE: Final = f"""
WITH swept AS ({_SWEEP}), {_STANDING},
granted AS (
    {_GRANT} AND (SELECT ahead FROM line) = 0
    RETURNING lease_token, lease_expires_at
), ticket AS (
    INSERT INTO rxagent_tickets (session_id, user_id, has_user, owner, expires_at)
    SELECT %(session)s, %(user)s, %(has_user)s, %(owner)s, %(now)s + %(ttl)s
    WHERE NOT EXISTS (SELECT 1 FROM granted)
    RETURNING number
)
SELECT ticket.number, line.ahead, line.first_expiry, cur.lease_owner, cur.lease_expires_at,
       granted.lease_token, granted.lease_expires_at, EXISTS (SELECT 1 FROM swept),
       CASE WHEN EXISTS (SELECT 1 FROM swept) THEN {_TURN_NOTIFY} END
FROM line LEFT JOIN cur ON true LEFT JOIN granted ON true LEFT JOIN ticket ON true
"""

# After _LOCK_LINE, in its transaction: the lease for the lowest live ticket, when nobody holds it.
_TAKE_TURN: Final = f"""
WITH swept AS ({_SWEEP}), {_STANDING},
granted AS (
    {_GRANT} AND (SELECT mine AND ahead = 0 FROM line)
    RETURNING lease_token, lease_expires_at
), spent AS (
    DELETE FROM rxagent_tickets WHERE number = %(number)s AND EXISTS (SELECT 1 FROM granted)
)
SELECT line.mine, line.ahead, line.first_expiry, cur.lease_owner, cur.lease_expires_at,
       granted.lease_token, granted.lease_expires_at,
       EXISTS (SELECT 1 FROM swept) OR EXISTS (SELECT 1 FROM granted),
       CASE WHEN EXISTS (SELECT 1 FROM swept) OR EXISTS (SELECT 1 FROM granted) THEN {_TURN_NOTIFY} END
FROM line LEFT JOIN cur ON true LEFT JOIN granted ON true
"""

_RENEW_TICKET: Final = f"""
UPDATE rxagent_tickets SET expires_at = %(now)s + %(ttl)s
WHERE number = %(number)s AND owner = %(owner)s AND {_KEY} AND expires_at > %(now)s
RETURNING expires_at
"""

_DROP_TICKET: Final = f"""
WITH dropped AS (
    DELETE FROM rxagent_tickets WHERE number = %(number)s AND owner = %(owner)s AND {_KEY} RETURNING number
)
SELECT {_TURN_NOTIFY} FROM dropped
"""

# One statement, so one transaction: the UPDATE locks the session's row only if the lease is current (and,
# with a batch, the head is where the batch starts), the facts are numbered from the head it returns, the
# batch id is kept beside them, and the notification goes out when it commits.
_APPEND: Final = f"""
WITH s AS (
    UPDATE rxagent_sessions SET head = head + %(count)s, updated_at = %(updated_at)s
    WHERE {_KEY} AND {_LEASE_IS_CURRENT} AND (%(first)s::bigint IS NULL OR head + 1 = %(first)s::bigint)
    RETURNING sid, head, session_id, user_id, has_user
), inserted AS (
    INSERT INTO rxagent_facts (sid, seq, kind, payload, run_id, at)
    SELECT s.sid, s.head - %(count)s + f.n, f.kind, f.payload, f.run_id, f.at
    FROM s, unnest(%(kinds)b::text[], %(payloads)b::text[], %(run_ids)b::text[], %(ats)b::float8[])
        WITH ORDINALITY AS f(kind, payload, run_id, at, n)
), batch AS (
    INSERT INTO rxagent_batches (sid, id, last) SELECT s.sid, %(batch)s::text, s.head FROM s
    WHERE %(batch)s::text IS NOT NULL
)
SELECT s.head, {_NOTIFY.format(t="s")} FROM s
"""

# Why an append with a batch wrote nothing: its batch committed before, the lease is not current, or the
# head moved. Each answer, once true, stays true (a lease that is not current never becomes current again),
# so asking after the append's own statement tells what that statement found.
_REFUSED: Final = f"""
SELECT s.head, {_LEASE_IS_CURRENT},
       (SELECT b.last FROM rxagent_batches b WHERE b.sid = s.sid AND b.id = %(batch)s)
FROM rxagent_sessions s WHERE {_KEY}
"""

_LEASE: Final = f"""
SELECT lease_owner, lease_token, lease_expires_at FROM rxagent_sessions
WHERE {_KEY} AND lease_owner IS NOT NULL AND lease_expires_at > %(now)s
"""

_CHECK: Final = f"SELECT head FROM rxagent_sessions WHERE {_KEY} AND {_LEASE_IS_CURRENT}"

_SID: Final = f"SELECT sid FROM rxagent_sessions WHERE {_KEY}"

_APPENDED: Final = f"SELECT last FROM rxagent_batches WHERE sid = ({_SID}) AND id = %(batch)s"

_READ: Final = f"""
SELECT seq, kind, payload, run_id, at FROM rxagent_facts
WHERE sid = ({_SID}) AND seq > %(after)s ORDER BY seq LIMIT %(limit)s
"""

_LAST_CHECKPOINT: Final = f"""
SELECT seq, payload FROM rxagent_checkpoints WHERE sid = ({_SID}) ORDER BY seq DESC LIMIT 1
"""

_HEAD: Final = f"SELECT head FROM rxagent_sessions WHERE {_KEY}"

_CHECKPOINT_PLACE: Final = f"""
SELECT s.sid, s.head, (SELECT max(c.seq) FROM rxagent_checkpoints c WHERE c.sid = s.sid)
FROM rxagent_sessions s WHERE {_KEY}
"""

_ENSURE_SESSION: Final = """
INSERT INTO rxagent_sessions (session_id, user_id, has_user) VALUES (%(session)s, %(user)s, %(has_user)s)
ON CONFLICT DO NOTHING
"""

# ON CONFLICT: another process may keep the same checkpoint at the same moment.
# The DELETE sees the table as it was before the INSERT (one snapshot for the statement): it keeps the
# newest CHECKPOINTS_KEPT - 1 of the earlier checkpoints, which with the new one make CHECKPOINTS_KEPT.
_ADD_CHECKPOINT: Final = f"""
WITH s AS (SELECT sid FROM rxagent_sessions WHERE {_KEY}),
added AS (
    INSERT INTO rxagent_checkpoints (sid, seq, payload) SELECT sid, %(seq)s, %(payload)s FROM s
    ON CONFLICT DO NOTHING
)
DELETE FROM rxagent_checkpoints c USING s
WHERE c.sid = s.sid AND c.seq NOT IN (
    SELECT k.seq FROM rxagent_checkpoints k WHERE k.sid = s.sid ORDER BY k.seq DESC LIMIT %(earlier_kept)s
)
"""

_LOCK_FORK_TARGET: Final = f"SELECT sid, head FROM rxagent_sessions WHERE {_KEY} FOR UPDATE"

# FOR SHARE keeps the source from being deleted while it is copied; its facts up to the fork's point never
# change, so appends to it may go on meanwhile.
_LOCK_FORK_SOURCE: Final = f"SELECT sid FROM rxagent_sessions WHERE {_KEY} FOR SHARE"

_COPY_FACTS: Final = """
INSERT INTO rxagent_facts (sid, seq, kind, payload, run_id, at)
SELECT %(target)s, seq, kind, payload, run_id, at FROM rxagent_facts WHERE sid = %(source)s AND seq <= %(at)s
"""

_COPY_CHECKPOINT: Final = """
INSERT INTO rxagent_checkpoints (sid, seq, payload)
SELECT %(target)s, seq, payload FROM rxagent_checkpoints
WHERE sid = %(source)s AND seq <= %(at)s ORDER BY seq DESC LIMIT 1
"""

_SET_FORK_HEAD: Final = f"""
WITH last AS (SELECT seq, at FROM rxagent_facts WHERE sid = %(target)s ORDER BY seq DESC LIMIT 1),
t AS (
    UPDATE rxagent_sessions SET head = last.seq, updated_at = last.at FROM last WHERE sid = %(target)s
    RETURNING head, session_id, user_id, has_user
)
SELECT {_NOTIFY.format(t="t")} FROM t
"""

_SESSIONS: Final = """
SELECT user_id, has_user, session_id, head, updated_at,
       CASE WHEN lease_expires_at > %(now)s THEN lease_owner END
FROM rxagent_sessions WHERE head > 0 ORDER BY sid
"""

_DELETE: Final = f"DELETE FROM rxagent_sessions WHERE {_KEY}"


def _key(key: SessionKey) -> dict[str, Any]:
    user, session = key
    return {"session": session, "user": user or "", "has_user": user is not None}


def _conninfo(url: str) -> dict[str, Any] | None:
    try:
        return dict(conninfo_to_dict(url))
    except Exception:  # a malformed URL is reported by the connection attempt itself
        return None


def _where(url: str) -> str:
    """The URL's host, port and database for messages: never its password."""
    parts = _conninfo(url)
    if parts is None:
        return "the given URL"
    host = str(parts.get("host") or "localhost")
    port = str(parts.get("port") or 5432)
    return f"{host}:{port}/{parts.get('dbname') or parts.get('user') or '(default database)'}"


class PostgresStore:
    """Session logs in a PostgreSQL database, shared by every process and host that opens it.

    Implements :class:`~rxagent.session.store.SessionStore`, with the schema, lease and notification
    semantics of this module's docstring. Connections come from a pool opened on first use (or by
    :meth:`open`, which also checks the database and migrates its schema); :meth:`aclose` closes them.
    Use it as ``async with PostgresStore(url) as store: ...`` to do both.

    Args:
        url: a libpq connection string or URL (``postgresql://user:password@host:5432/db``).
        now: the wall clock leases expire on: seconds since the epoch, read on this host, not the
            database's clock (see the module's **Clocks**: hosts need synchronised clocks). A test can
            pass its own.
        min_connections: connections the pool keeps open.
        max_connections: the most the pool opens; further callers wait for one.
        connect_timeout: seconds to wait for the database when connecting, and for a pooled connection.
        clock: what the waits before opening a lost listening connection again are timed on (see the
            module's **Listening**); a :class:`~rxagent.clock.VirtualClock` in tests.

    Raises:
        ValueError: a pool size or timeout out of range.
    """

    durable = True
    """Committed facts survive the process (the database's own durability settings decide the rest)."""

    def __init__(
        self,
        url: str,
        *,
        now: Callable[[], float] = time.time,
        min_connections: int = 1,
        max_connections: int = 10,
        connect_timeout: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if min_connections < 0 or max_connections < max(1, min_connections):
            raise ValueError(
                f"need 0 <= min_connections <= max_connections and max_connections >= 1, "
                f"got {min_connections} and {max_connections}"
            )
        if connect_timeout <= 0:
            raise ValueError(f"connect_timeout must be positive, got {connect_timeout}")
        self._url = url
        self._now = now
        self._clock = clock
        self._min = min_connections
        self._max = max_connections
        self._timeout = connect_timeout
        self._pool: AsyncConnectionPool[_Connection] | None = None
        self._opening = asyncio.Lock()
        self._closed = False
        self._queue: list[_QueuedAppend] = []
        self._writer: asyncio.Task[None] | None = None
        self._append_transactions = 0
        self._listeners = AppendListeners(
            live=False, on_first=self._listener_came, on_last=self._listener_left
        )
        self._turn_listeners = AppendListeners(
            live=False, on_first=self._listener_came, on_last=self._listener_left
        )
        self._listening: asyncio.Task[None] | None = None
        self._listen_tasks: set[asyncio.Task[None]] = set()
        self.listen_connections = 0
        """Listening connections opened so far (a lost one is opened again)."""

    def __repr__(self) -> str:
        return f"PostgresStore({_where(self._url)})"

    # ---- opening and closing -------------------------------------------------------------------------

    async def open(self) -> Self:
        """Connect, create or migrate the schema, and open the pool (every other method does it first).

        Returns:
            the store.

        Raises:
            StoreUnavailableError: the database cannot be reached within ``connect_timeout``.
            SchemaVersionError: the database's schema is newer than :data:`SCHEMA_VERSION`.
        """
        await self._ready()
        return self

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Commit the appends already queued, then close the pool and every connection in it; the store
        cannot be used afterwards (its methods raise ``RuntimeError``)."""
        self._closed = True
        self._stop_listening()
        if self._listen_tasks:  # they end cancelled; waiting does not swallow a cancel of this caller
            await asyncio.wait(list(self._listen_tasks))
        writer = self._writer
        if writer is not None:
            await asyncio.shield(writer)  # the appends already queued commit first
        async with self._opening:
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _connect(self, application_name: str | None = None) -> _Connection:
        # A name given here wins over the URL's (libpq's keyword arguments override the connection string).
        named: dict[str, Any] = {} if application_name is None else {"application_name": application_name}
        try:
            return await AsyncConnection.connect(
                self._url, autocommit=True, connect_timeout=max(1, round(self._timeout)), **named
            )
        except OperationalError as exc:
            raise StoreUnavailableError(
                f"cannot connect to the PostgreSQL session store at {_where(self._url)}: {exc}"
            ) from exc

    async def _ready(self) -> AsyncConnectionPool[_Connection]:
        pool = self._pool
        if pool is not None:
            return pool
        async with self._opening:
            if self._closed:
                raise RuntimeError(f"{self!r} is closed")
            pool = self._pool
            if pool is None:
                # One direct connection first: it reports an unreachable database at once with libpq's own
                # reason, where a pool would retry in the background until its timeout.
                conn = await self._connect()
                try:
                    await _migrate(conn)
                finally:
                    await conn.close()
                pool = AsyncConnectionPool[_Connection](
                    self._url,
                    min_size=self._min,
                    max_size=self._max,
                    timeout=self._timeout,
                    kwargs={"autocommit": True, "connect_timeout": max(1, round(self._timeout))},
                    open=False,
                    name="rxagent-sessions",
                )
                try:
                    await pool.open(wait=self._min > 0, timeout=self._timeout)
                except PoolTimeout as exc:
                    await pool.close()
                    raise StoreUnavailableError(
                        f"the pool could not open {self._min} connection(s) to {_where(self._url)} "
                        f"within {self._timeout} s"
                    ) from exc
                self._pool = pool
            return pool

    async def _fetchone(
        self, query: LiteralString, params: dict[str, Any], *, stamped: bool = False
    ) -> tuple[Any, ...] | None:
        pool = await self._ready()
        async with pool.connection() as conn:
            cursor = await conn.execute(query, self._stamp(params) if stamped else params)
            return await cursor.fetchone()

    async def _fetchall(
        self, query: LiteralString, params: dict[str, Any], *, stamped: bool = False
    ) -> list[tuple[Any, ...]]:
        pool = await self._ready()
        async with pool.connection() as conn:
            cursor = await conn.execute(query, self._stamp(params) if stamped else params)
            return await cursor.fetchall()

    def _stamp(self, params: dict[str, Any]) -> dict[str, Any]:
        # Read the clock once a connection is ours: a wait for the pool must not make a lease look fresher.
        return {**params, "now": self._now()}

    # ---- the lease -----------------------------------------------------------------------------------

    async def acquire(self, key: SessionKey, owner: str, ttl: float) -> Lease | None:
        """Take the lease (see :class:`~rxagent.session.store.SessionStore`).

        Raises:
            ValueError: the key is longer than :data:`MAX_KEY_BYTES`.
        """
        _check_key(key)
        row = await self._fetchone(_ACQUIRE, {**_key(key), "owner": owner, "ttl": ttl}, stamped=True)
        return None if row is None else Lease(key, owner, int(row[0]), float(row[1]))

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        """Push the expiry (see :class:`~rxagent.session.store.SessionStore`)."""
        row = await self._fetchone(
            _RENEW, {**_key(lease.key), "token": lease.token, "ttl": ttl}, stamped=True
        )
        if row is None:
            raise _lost(lease)
        return Lease(lease.key, lease.owner, lease.token, float(row[0]))

    async def release(self, lease: Lease) -> None:
        """Give the lease up (a no-op if it is no longer current), and tell the session's waiters."""
        pool = await self._ready()
        async with pool.connection() as conn:
            cursor = await conn.execute(_RELEASE, {**_key(lease.key), "token": lease.token})
            released = await cursor.fetchone()
        if released is not None:
            self._turn_listeners.notify(lease.key)  # this process's waiters need not wait for the NOTIFY

    # ---- the line for the lease ----------------------------------------------------------------------

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        """Join the line (see :meth:`~rxagent.session.store.SessionStore.enqueue` and the module's **The
        line for a lease**).

        Raises:
            ValueError: the key is longer than :data:`MAX_KEY_BYTES`.
        """
        _check_key(key)
        params = {**_key(key), "owner": owner, "ttl": ttl, "number": _BEHIND_EVERY_TICKET}
        row, now = await self._under_lock(_ENQUEUE, params)
        number, *standing, token, expires_at, moved, _ = row
        if moved:
            self._turn_listeners.notify(key)
        if token is not None:
            return Lease(key, owner, int(token), float(expires_at))
        return _waiting(Ticket(key, owner, int(number), now + ttl), now, *standing)

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        """The lease if it is ``ticket``'s turn (see
        :meth:`~rxagent.session.store.SessionStore.take_turn`)."""
        params = {**_key(ticket.key), "owner": ticket.owner, "ttl": ttl, "number": ticket.number}
        # A read first, without the lock: most attempts find the line as it was.
        stamped = self._stamp(params)
        row = await self._fetchone(_LOOK, stamped)
        assert row is not None  # an aggregate: always one row
        now = float(stamped["now"])
        mine, ahead, first_expiry, owner, expires = row
        if mine and not ahead and (owner is None or expires is None or expires <= now):
            row, now = await self._under_lock(_TAKE_TURN, params)
            mine, ahead, first_expiry, owner, expires, token, expires_at, moved, _ = row
            if moved:
                self._turn_listeners.notify(ticket.key)
            if token is not None:
                return Lease(ticket.key, ticket.owner, int(token), float(expires_at))
        if not mine:
            raise TicketLostError.of(ticket)
        return _waiting(ticket, now, ahead, first_expiry, owner, expires)

    async def renew_ticket(self, ticket: Ticket, ttl: float) -> Ticket:
        """Keep the ticket in line (see :meth:`~rxagent.session.store.SessionStore.renew_ticket`)."""
        params = {**_key(ticket.key), "owner": ticket.owner, "ttl": ttl, "number": ticket.number}
        row = await self._fetchone(_RENEW_TICKET, params, stamped=True)
        if row is None:
            raise TicketLostError.of(ticket)
        return Ticket(ticket.key, ticket.owner, ticket.number, float(row[0]))

    async def drop_ticket(self, ticket: Ticket) -> None:
        """Leave the line (a no-op if the ticket is not in it), and tell the waiters behind it."""
        params = {**_key(ticket.key), "owner": ticket.owner, "number": ticket.number}
        if await self._fetchone(_DROP_TICKET, params) is not None:
            self._turn_listeners.notify(ticket.key)

    def listen_turns(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` when ``key``'s line may have moved, whichever process moved it (through the
        listening connection: see the module's **Listening**).

        Raises:
            RuntimeError: the store is closed.
        """
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        return self._turn_listeners.add(key, wake)

    async def _under_lock(
        self, statement: LiteralString, params: dict[str, Any]
    ) -> tuple[tuple[Any, ...], float]:
        """Run ``statement`` after locking the session's row, in one transaction and one round trip; its
        row, and the time it was stamped with."""
        pool = await self._ready()
        async with pool.connection() as conn:
            stamped = self._stamp(params)
            async with conn.pipeline(), conn.transaction():
                await conn.execute(_ENSURE_SESSION, stamped)
                await conn.execute(_LOCK_LINE, stamped)
                cursor = await conn.execute(statement, stamped)
            row = await cursor.fetchone()
        assert row is not None  # an aggregate: always one row
        return row, float(stamped["now"])

    # ---- the log -------------------------------------------------------------------------------------

    async def lease(self, key: SessionKey) -> Lease | None:
        """The current, unexpired lease (see :class:`~rxagent.session.store.SessionStore`)."""
        row = await self._fetchone(_LEASE, _key(key), stamped=True)
        return None if row is None else Lease(key, str(row[0]), int(row[1]), float(row[2]))

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        """Append under the lease, idempotently with ``batch``, then notify :data:`NOTIFY_CHANNEL` (see the
        module's **Group commit** and :class:`~rxagent.session.store.SessionStore`).

        The facts are committed when this returns. An append whose caller is cancelled before its batch
        is sent is dropped; once sent, it commits or fails with its batch (:meth:`appended` tells which).

        Raises:
            LeaseLostError: the lease is not current and unexpired (nothing is written, nobody notified).
            HeadMovedError: ``batch.first`` is not the log's head plus one (nothing is written).
            ValueError: a payload holds a NUL character, which PostgreSQL text cannot (nothing is written),
                or ``batch`` comes with no facts.
        """
        for n, fact in enumerate(facts):
            if "\x00" in fact.payload:
                raise ValueError(
                    f"fact {n} ({fact.kind}) has a NUL character in its payload: PostgreSQL cannot store it"
                )
        if batch is not None and not facts:
            raise ValueError("an append with a batch needs facts: an empty one records nothing")
        params = {**_key(lease.key), "token": lease.token}
        if not facts:
            row = await self._fetchone(_CHECK, params, stamped=True)
            if row is None:
                raise _lost(lease)
            return int(row[0])
        params.update(
            count=len(facts),
            updated_at=facts[-1].at,
            kinds=[f.kind for f in facts],
            payloads=[f.payload for f in facts],
            run_ids=[f.run_id for f in facts],
            ats=[f.at for f in facts],
            first=None if batch is None else batch.first,
            batch=None if batch is None else batch.id,
        )
        await self._ready()  # a closed or unreachable store fails here, before anything is queued
        queued = _QueuedAppend(
            (lease.key[1], lease.key[0] or "", lease.key[0] is not None),
            params,
            asyncio.get_running_loop().create_future(),
        )
        self._queue.append(queued)
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_queued(), name="rxagent-postgres-appends")
        head = await queued.head
        if head is not None:
            return head
        if batch is None:
            raise _lost(lease)
        # Refused: the batch committed before (an append whose outcome its writer did not know), the lease
        # is not current, or the head moved.
        asked = {**_key(lease.key), "token": lease.token, "batch": batch.id}
        why = await self._fetchone(_REFUSED, asked, stamped=True)
        if why is not None and why[2] is not None:
            return int(why[2])
        if why is None or not why[1]:
            raise _lost(lease)
        raise HeadMovedError(lease.key, batch.first, int(why[0]))

    async def appended(self, key: SessionKey, batch_id: str) -> int | None:
        """Where the append of ``batch_id`` ended (see :class:`~rxagent.session.store.SessionStore`)."""
        row = await self._fetchone(_APPENDED, {**_key(key), "batch": batch_id})
        return None if row is None else int(row[0])

    @property
    def append_transactions(self) -> int:
        """Transactions committed for appends so far: with group commit, fewer than the appends."""
        return self._append_transactions

    async def _write_queued(self) -> None:
        try:
            while self._queue:
                batch = [q for q in self._queue[:_BATCH_LIMIT] if not q.head.cancelled()]
                del self._queue[:_BATCH_LIMIT]
                if batch:
                    await self._commit(batch)
        finally:
            self._writer = None

    async def _commit(self, batch: list[_QueuedAppend]) -> None:
        # Sorted by session (stably: a session's appends keep their order), so that every batch, in every
        # process, locks session rows in one order and two batches can never deadlock.
        batch.sort(key=lambda queued: queued.order)
        try:
            pool = await self._ready()
            async with pool.connection() as conn:
                now = self._now()
                if len(batch) == 1:
                    # Alone, it is one statement in autocommit: one round trip, no BEGIN and COMMIT.
                    heads = [await (await conn.execute(_APPEND, {**batch[0].params, "now": now})).fetchone()]
                else:
                    async with conn.transaction():
                        cursor = conn.cursor()
                        await cursor.executemany(
                            _APPEND, [{**queued.params, "now": now} for queued in batch], returning=True
                        )
                        heads = [await cursor.fetchone()]
                        while cursor.nextset():
                            heads.append(await cursor.fetchone())
        except Error as exc:
            if len(batch) > 1 and _rolled_back(exc):
                # The server refused one statement and rolled the batch back: nothing of it was written, so
                # each append goes again on its own, and only the one at fault fails.
                for queued in batch:
                    await self._commit([queued])
                return
            _fail(batch, exc)
            return
        except Exception as exc:  # the pool or the store is gone: every caller hears why
            _fail(batch, exc)
            return
        except BaseException:
            for queued in batch:
                queued.head.cancel()
            raise
        self._append_transactions += 1
        for queued, row in zip(batch, heads, strict=True):
            if not queued.head.done():
                queued.head.set_result(None if row is None else int(row[0]))

    async def load(self, key: SessionKey) -> tuple[Checkpoint | None, list[StoredFact]]:
        """The last checkpoint and the facts after it."""
        row = await self._fetchone(_LAST_CHECKPOINT, _key(key))
        checkpoint = None if row is None else Checkpoint(int(row[0]), str(row[1]))
        return checkpoint, await self.read(key, checkpoint.seq if checkpoint is not None else 0)

    async def save_checkpoint(self, key: SessionKey, checkpoint: Checkpoint) -> None:
        """Keep a checkpoint, and only the newest :data:`~rxagent.session.store.CHECKPOINTS_KEPT` (see
        :class:`~rxagent.session.store.SessionStore`)."""
        pool = await self._ready()
        params = {
            **_key(key),
            "seq": checkpoint.seq,
            "payload": checkpoint.payload,
            "earlier_kept": CHECKPOINTS_KEPT - 1,
        }
        async with pool.connection() as conn:
            row = await (await conn.execute(_CHECKPOINT_PLACE, params)).fetchone()
            head = 0 if row is None else int(row[1])
            if checkpoint.seq > head:
                raise ValueError(f"checkpoint {checkpoint.seq} is beyond the log's head ({head})")
            if row is not None and row[2] is not None and checkpoint.seq <= int(row[2]):
                return  # older than the newest kept
            if row is None:
                await conn.execute(_ENSURE_SESSION, params)
            await conn.execute(_ADD_CHECKPOINT, params)

    async def read(self, key: SessionKey, after: int = 0, limit: int | None = None) -> list[StoredFact]:
        """Facts after ``after``, in order (at most ``limit``)."""
        rows = await self._fetchall(_READ, {**_key(key), "after": after, "limit": limit})
        return [_stored(row) for row in rows]

    async def head(self, key: SessionKey) -> int:
        """The last sequence number (0: none)."""
        row = await self._fetchone(_HEAD, _key(key))
        return 0 if row is None else int(row[0])

    async def sessions(self) -> list[SessionInfo]:
        """Every session with facts, in the order they were first stored."""
        rows = await self._fetchall(_SESSIONS, {}, stamped=True)
        return [
            SessionInfo(
                (str(user) if has_user else None, str(session)),
                int(head),
                float(updated_at),
                None if owner is None else str(owner),
            )
            for user, has_user, session, head, updated_at, owner in rows
        ]

    async def fork(self, key: SessionKey, at: int, into: SessionKey) -> None:
        """Copy facts up to ``at`` (and the last checkpoint at or before it) into a new session.

        Raises:
            SessionExistsError: ``into`` already has facts.
        """
        pool = await self._ready()
        async with pool.connection() as conn, conn.transaction():
            await conn.execute(_ENSURE_SESSION, _key(into))
            target = await (await conn.execute(_LOCK_FORK_TARGET, _key(into))).fetchone()
            assert target is not None  # ensured above, in this transaction
            if int(target[1]) > 0:
                raise SessionExistsError(f"session {into[1]!r} already has facts")
            source = await (await conn.execute(_LOCK_FORK_SOURCE, _key(key))).fetchone()
            if source is None:
                return
            copy = {"source": int(source[0]), "target": int(target[0]), "at": at}
            await conn.execute(_COPY_FACTS, copy)
            await conn.execute(_COPY_CHECKPOINT, copy)
            await conn.execute(_SET_FORK_HEAD, copy)

    async def delete(self, key: SessionKey) -> None:
        """Delete the session: its facts, checkpoints and lease (a later acquire starts it anew)."""
        pool = await self._ready()
        async with pool.connection() as conn:
            await conn.execute(_DELETE, _key(key))

    # ---- listening -----------------------------------------------------------------------------------

    def listen(self, key: SessionKey, wake: Callable[[], None]) -> Listening:
        """Call ``wake()`` after each append to ``key`` commits, from any process (see the module's
        **Listening** and :meth:`~rxagent.session.store.NotifyingStore.listen`).

        Raises:
            RuntimeError: the store is closed.
        """
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        return self._listeners.add(key, wake)

    def _listener_came(self) -> None:
        # Appends and turns are heard on the one listening connection: open it for the first of either.
        if self._listening is None:
            self._start_listening()

    def _listener_left(self) -> None:
        if not len(self._listeners) and not len(self._turn_listeners):
            self._stop_listening()

    def _start_listening(self) -> None:
        task = asyncio.get_running_loop().create_task(self._listen(), name="rxagent-postgres-listen")
        self._listening = task
        self._listen_tasks.add(task)
        task.add_done_callback(self._listen_tasks.discard)

    def _stop_listening(self) -> None:
        task, self._listening = self._listening, None
        if task is not None:
            task.cancel()  # its connection closes as it ends
            self._listeners.set_live(False)
            self._turn_listeners.set_live(False)

    async def _listen(self) -> None:
        """Hold the listening connection: open it, LISTEN, hand each notification on; open it again when
        it is lost (the listeners read the logs at intervals meanwhile)."""
        name = f"{(_conninfo(self._url) or {}).get('application_name') or 'rxagent'} (listening)"
        delay = _RELISTEN_FIRST
        while True:
            try:
                conn = await self._connect(application_name=name)
            except StoreUnavailableError as exc:
                _log.warning("rxagent: cannot listen to session appends yet (again in %g s): %s", delay, exc)
            else:
                self.listen_connections += 1
                try:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    await conn.execute(f"LISTEN {TURN_CHANNEL}")
                    self._listeners.set_live(True)  # what was appended before is in the logs: read it
                    self._turn_listeners.set_live(True)  # and waiters ask where their line stands now
                    delay = _RELISTEN_FIRST
                    while True:
                        async for notice in conn.notifies(timeout=_LISTEN_CHECK):
                            turns = notice.channel == TURN_CHANNEL
                            self._notice(notice.payload, self._turn_listeners if turns else self._listeners)
                        async with asyncio.timeout(_LISTEN_CHECK):  # one that died quietly fails here
                            await conn.execute("SELECT 1")
                except (Error, TimeoutError) as exc:
                    _log.warning(
                        "rxagent: lost the connection listening to session appends (%s); reading the logs "
                        "at intervals until it is back",
                        exc,
                    )
                finally:
                    if self._listening is asyncio.current_task():  # not a task being stopped
                        self._listeners.set_live(False)
                        self._turn_listeners.set_live(False)
                    await conn.close()
            await self._clock.sleep(delay)
            delay = min(delay * 2, _RELISTEN_MAX)

    def _notice(self, payload: str, listeners: AppendListeners) -> None:
        try:
            data = json.loads(payload)
            user, session = data["user_id"], data["session_id"]
            if not isinstance(session, str) or not (user is None or isinstance(user, str)):
                raise TypeError("not a session key")
        except (ValueError, KeyError, TypeError):
            _log.debug("rxagent: ignored a notification that names no session: %.200r", payload)
            return
        listeners.notify((user, session))

    async def follow(self, key: SessionKey, after: int = 0) -> AsyncIterator[StoredFact]:
        """The session's facts after ``after``, then each new one as any process appends it, without end.

        Listens through the store's listening connection (see the module's **Listening**), and reads the
        log once more each time listening (re)starts, so that no fact falls between reading and listening
        and none comes twice. Close it with ``contextlib.aclosing`` (or ``aclose()``), or cancel the task
        iterating it: either stops its listening.

        Yields:
            stored facts in sequence order, each once.
        """
        await self._ready()
        woken = asyncio.Event()
        listening = self.listen(key, woken.set)
        try:
            seen = after
            while True:
                woken.clear()
                facts = await self.read(key, seen)
                for fact in facts:
                    seen = fact.seq
                    yield fact
                if facts:
                    continue
                if listening.live:
                    await woken.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(_FOLLOW_POLL):
                            await woken.wait()
        finally:
            listening.close()


def _fail(batch: list[_QueuedAppend], exc: Exception) -> None:
    for queued in batch:
        if not queued.head.done():
            queued.head.set_exception(exc)


def _check_key(key: SessionKey) -> None:
    # Measured as a notification spells it: JSON, escapes included.
    size = len(json.dumps([key[0], key[1]], ensure_ascii=False).encode())
    if size > MAX_KEY_BYTES:
        raise ValueError(
            f"session key of {size} bytes (as JSON) is longer than the {MAX_KEY_BYTES} a PostgreSQL "
            "notification can carry"
        )


def _waiting(
    ticket: Ticket,
    now: float,
    ahead: int,
    first_expiry: float | None,
    owner: str | None,
    expires: float | None,
) -> Waiting:
    holder = owner if owner is not None and expires is not None and expires > now else None
    expiries = [e for e in (first_expiry, expires if holder is not None else None) if e is not None]
    return Waiting(ticket, int(ahead), holder, min(expiries, default=now) - now)


def _lost(lease: Lease) -> LeaseLostError:
    return LeaseLostError(
        f"the lease on session {lease.key[1]!r} (token {lease.token}) is no longer current: "
        "it expired or was taken over, or was released"
    )


def _stored(row: tuple[Any, ...]) -> StoredFact:
    seq, kind, payload, run_id, at = row
    return StoredFact(
        int(seq), cast("FactKind", kind), str(payload), None if run_id is None else str(run_id), float(at)
    )


async def _migrate(conn: _Connection) -> None:
    """Bring the database's schema to :data:`SCHEMA_VERSION`, or refuse a newer one."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS rxagent_schema ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        row = await (await conn.execute("SELECT max(version) FROM rxagent_schema")).fetchone()
        current = 0 if row is None or row[0] is None else int(row[0])
        if current > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the database's rxagent session schema is version {current}, newer than the version "
                f"{SCHEMA_VERSION} this rxagent knows: upgrade rxagent, or use another database"
            )
        for version in range(current + 1, SCHEMA_VERSION + 1):
            await _MIGRATIONS[version](conn)
            await conn.execute("INSERT INTO rxagent_schema (version) VALUES (%s)", (version,))
