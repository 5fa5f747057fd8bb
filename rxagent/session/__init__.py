"""Sessions that outlive a process: an append-only log per session, projected into the agent's state.

- :mod:`~rxagent.session.facts`: what the log holds (facts) and checkpoints beside it.
- :mod:`~rxagent.session.projection`: the log replayed into an :class:`~rxagent.state.AgentState`.
- :mod:`~rxagent.session.store`: the store contract, the writer lease and its fencing token.
- :class:`MemoryStore` (one process), :class:`SQLiteStore` (a file), ``PostgresStore`` (many processes).
"""

from __future__ import annotations

from rxagent.session.facts import Checkpoint, Fact, FactKind, StoredFact
from rxagent.session.memory import MemoryStore
from rxagent.session.projection import Projection
from rxagent.session.sqlite import SessionFileError, SQLiteStore
from rxagent.session.store import Lease, LeaseLostError, SessionExistsError, SessionInfo, SessionStore

__all__ = [
    "Checkpoint",
    "Fact",
    "FactKind",
    "Lease",
    "LeaseLostError",
    "MemoryStore",
    "Projection",
    "SQLiteStore",
    "SessionExistsError",
    "SessionFileError",
    "SessionInfo",
    "SessionStore",
    "StoredFact",
]
