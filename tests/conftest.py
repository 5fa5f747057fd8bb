"""Shared test configuration. Tests run under pytest-asyncio in auto mode (see pyproject.toml)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest

from rxagent.clock import VirtualClock
from tests.model.openai_server import OpenAIServer


@pytest.fixture
async def server() -> AsyncIterator[OpenAIServer]:
    """A scriptable OpenAI-compatible server on 127.0.0.1 (see tests/model/openai_server.py)."""
    async with OpenAIServer() as running:
        yield running


@pytest.fixture
def clock() -> VirtualClock:
    """A virtual clock at 0 s: give it to what a test times, then ``run`` or ``advance`` it (no sleeping)."""
    return VirtualClock()


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
