"""Session stores under test: every conformance test runs against each kind of store.

``make_store`` is parametrised by store kind; each test gets a fresh, empty store whose leases expire on
the test's own wall clock (:class:`FakeNow`), so lease expiry is tested without waiting. The PostgreSQL
store runs on a real server (the ``postgres_url`` fixture in tests/conftest.py: a new database per test).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from rxagent.session import DelegatingStore, MemoryStore, SessionStore, SQLiteStore
from rxagent.session.postgres import PostgresStore


class FakeNow:
    """A wall clock the test moves: ``now()`` returns the time, ``advance(s)`` moves it."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.time = start

    def __call__(self) -> float:
        return self.time

    def advance(self, seconds: float) -> None:
        self.time += seconds


StoreFactory = Callable[..., Any]

STORE_KINDS = ["memory", "sqlite", "postgres", "delegating"]
"""The kinds of store the conformance suite runs against (``delegating``: a :class:`DelegatingStore` over
the memory store, which must keep its contract)."""


@pytest.fixture
def now() -> FakeNow:
    return FakeNow()


DURABLE_KINDS = ["sqlite", "postgres"]
"""The stores whose facts outlive the process: the ones a crash can leave a call uncertain in."""


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, now: FakeNow, tmp_path: Path) -> AsyncIterator[SessionStore]:
    """A fresh, empty store of each kind, on the test's clock."""
    async for made in _made(request.param, request, now, tmp_path):
        yield made


@pytest.fixture(params=DURABLE_KINDS)
async def durable_store(
    request: pytest.FixtureRequest, now: FakeNow, tmp_path: Path
) -> AsyncIterator[SessionStore]:
    """A fresh, empty store of each kind that outlives its process (a crash is meaningful for it)."""
    async for made in _made(request.param, request, now, tmp_path):
        yield made


async def _made(
    kind: str, request: pytest.FixtureRequest, now: FakeNow, tmp_path: Path
) -> AsyncIterator[SessionStore]:
    if kind == "memory":
        made: SessionStore = MemoryStore(now=now)
    elif kind == "sqlite":
        made = SQLiteStore(tmp_path / "sessions.db", now=now)
    elif kind == "postgres":
        # The server starts with the first test that needs it, on a new database per test.
        made = PostgresStore(request.getfixturevalue("postgres_url"), now=now)
    elif kind == "delegating":
        made = DelegatingStore(MemoryStore(now=now))
    else:  # pragma: no cover - each kind is added with its store
        raise AssertionError(f"unknown store kind {kind!r}")
    try:
        yield made
    finally:
        await made.aclose()
