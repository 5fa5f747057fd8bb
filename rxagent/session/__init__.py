"""Sessions that outlive a process: an append-only log per session, projected into the agent's state.

- :mod:`~rxagent.session.facts`: what the log holds (facts) and checkpoints beside it.
- :mod:`~rxagent.session.projection`: the log replayed into an :class:`~rxagent.state.AgentState`.
- :mod:`~rxagent.session.store`: the store contract, the writer lease and its fencing token, idempotent
  appends.
- :mod:`~rxagent.session.owner`: lease owners named after their process, so a dead one is told apart.
- :mod:`~rxagent.session.recorder`: how a run's changes become facts; :mod:`~rxagent.session.keeper`:
  taking a session for a run (its place in the session's line, lease, cached projection, checkpoints).
- :mod:`~rxagent.session.reconcile`: calls with no recorded outcome, and settling them.
- :mod:`~rxagent.session.feed`: a session's log, live, for any number of watchers.
- :class:`MemoryStore` (one process), :class:`SQLiteStore` (a file),
  :class:`~rxagent.session.postgres.PostgresStore` (many processes and hosts; extra ``rxagent[postgres]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rxagent.session.facts import Checkpoint, Fact, FactKind, StoredFact, UnreadableFactError
from rxagent.session.feed import FeedGap, FeedItem, FeedLagError, FeedPolicy, SessionFeed, one_by_one
from rxagent.session.history import AnswerKind, AnswerRecord, RunRecord, TurnRecord, answers_of, turns_of
from rxagent.session.in_process import MemoryStore
from rxagent.session.keeper import Claim, Place, SessionBusy, SessionKeeper
from rxagent.session.open import check_store, default_db_path, open_store, store_file, store_name
from rxagent.session.projection import Projection
from rxagent.session.reconcile import Reconcile, ReconcileError, UncertainToolCallsError
from rxagent.session.recorder import Recorder, seed_session
from rxagent.session.store import (
    Batch,
    DelegatingStore,
    HeadMovedError,
    Lease,
    LeaseLostError,
    SessionExistsError,
    SessionInfo,
    SessionStore,
    Ticket,
    TicketLostError,
    Waiting,
)

if TYPE_CHECKING:
    from rxagent.session.sqlite import SessionFileError, SessionFileLockedError, SQLiteStore

__all__ = [
    "AnswerKind",
    "AnswerRecord",
    "Batch",
    "Checkpoint",
    "Claim",
    "DelegatingStore",
    "Fact",
    "FactKind",
    "FeedGap",
    "FeedItem",
    "FeedLagError",
    "FeedPolicy",
    "HeadMovedError",
    "Lease",
    "LeaseLostError",
    "MemoryStore",
    "Place",
    "Projection",
    "Reconcile",
    "ReconcileError",
    "Recorder",
    "RunRecord",
    "SQLiteStore",
    "SessionBusy",
    "SessionExistsError",
    "SessionFeed",
    "SessionFileError",
    "SessionFileLockedError",
    "SessionInfo",
    "SessionKeeper",
    "SessionStore",
    "StoredFact",
    "Ticket",
    "TicketLostError",
    "TurnRecord",
    "UncertainToolCallsError",
    "UnreadableFactError",
    "Waiting",
    "answers_of",
    "check_store",
    "default_db_path",
    "one_by_one",
    "open_store",
    "seed_session",
    "store_file",
    "store_name",
    "turns_of",
]


def __getattr__(name: str) -> object:
    # The SQLite store loads when it is first named (``sqlite3`` with it), not with every agent: an agent
    # keeps its sessions in memory unless it is given a store.
    if name in ("SQLiteStore", "SessionFileError", "SessionFileLockedError"):
        from rxagent.session import sqlite

        return getattr(sqlite, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
