"""Shared test configuration. Tests run under pytest-asyncio in auto mode (see pyproject.toml)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from rxagent.clock import VirtualClock
from tests import postgres_server
from tests.model.openai_server import OpenAIServer
from tests.postgres_server import TestPostgres

pytest_plugins = ["tests.isolation"]  # the `llm` tests run in pytest subprocesses of their own

_started_postgres: list[TestPostgres] = []


@pytest.fixture(autouse=True)
def user_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test's own ``$XDG_DATA_HOME`` (and no ``$RXAGENT_DB``): the ``rxagent`` command keeps its
    sessions there by default, so no test, and no command a test starts, writes into the real home."""
    folder = tmp_path_factory.mktemp("data-home")
    monkeypatch.setenv("XDG_DATA_HOME", str(folder))
    monkeypatch.delenv("RXAGENT_DB", raising=False)
    return folder


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    """A scriptable OpenAI-compatible server on 127.0.0.1 (see tests/model/openai_server.py)."""
    async with OpenAIServer() as running:
        yield running


@pytest.fixture
def clock() -> VirtualClock:
    """A virtual clock at 0 s: give it to what a test times, then ``run`` or ``advance`` it (no sleeping)."""
    return VirtualClock()


@pytest.fixture(scope="session")
def postgres() -> Iterator[TestPostgres]:
    """A real PostgreSQL server for the whole test session, started on first use (see
    tests/postgres_server.py). If it cannot start, every test that needs it fails: none is skipped."""
    try:
        running = postgres_server.start()
    except RuntimeError as exc:
        pytest.fail(f"{exc}\nThe PostgreSQL tests need this server and are never skipped.", pytrace=False)
    _started_postgres.append(running)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def postgres_url(postgres: TestPostgres) -> Iterator[str]:
    """The URL of a new, empty database on the test server, dropped after the test."""
    url = postgres.create_database()
    try:
        yield url
    finally:
        postgres.drop_database(url)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for running in _started_postgres:
        terminalreporter.write_line(
            f"postgres: PostgreSQL {running.version} (pgserver) started in {running.start_seconds:.2f} s; "
            f"{running.databases} test database(s)"
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # In CI nothing may be skipped silently: a skipped test fails the run.
    if not os.environ.get("CI") or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        names = ", ".join(getattr(report, "nodeid", "?") for report in skipped[:10])
        print(f"\nCI: {len(skipped)} test(s) were skipped, which CI does not allow: {names}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
