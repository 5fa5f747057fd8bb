"""The official AG-UI client (``@ag-ui/client`` from npm, in node) driven by a test, command by command.

``tests/serve/agui_client/agui_driver.mjs`` runs an ``HttpAgent`` and answers each command with what the
client saw (see there). The packages are installed from ``tests/serve/agui_client/package-lock.json`` by
the set-up (``npm ci`` there, which ``bash scripts/test.sh`` runs); without node or them the tests fail in
CI and are skipped elsewhere, saying why.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.serve.conftest import WAIT

JS = Path(__file__).resolve().parent / "agui_client"
"""The node project of the suite's JavaScript clients."""


def _node() -> str:
    node = shutil.which("node")
    problem = None
    if node is None:
        problem = "node is not installed: the AG-UI client tests run @ag-ui/client in node (20 or later)"
    elif not (JS / "node_modules" / "@ag-ui" / "client").is_dir():
        problem = f"@ag-ui/client is not installed: run `npm ci --prefix {JS}` (bash scripts/test.sh does)"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    assert node is not None
    return node


class AguiClient:
    """One node process with one ``HttpAgent`` at a time (see the module)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self._process = process

    async def call(self, op: str, *, refused: bool = False, **fields: Any) -> dict[str, Any]:
        """Send one command; its answer. The driver must not fail, and the client must warn of nothing
        (``refused``: the server is to refuse the run, which the client reports, and nothing else)."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None
        assert stdout is not None
        stdin.write(json.dumps({"op": op, **fields}).encode() + b"\n")
        await stdin.drain()
        line = await asyncio.wait_for(stdout.readline(), WAIT)
        assert line, "the AG-UI driver ended: see its stderr above"
        answer: dict[str, Any] = json.loads(line)
        assert "driverError" not in answer, answer["driverError"]
        if refused:
            assert answer["error"] is not None, "the run was not refused"
            assert all(w.startswith("Agent execution failed") for w in answer["warnings"]), answer["warnings"]
        else:
            assert answer["warnings"] == [], answer["warnings"]
        return answer

    async def agent(self, url: str, thread: str, **fields: Any) -> None:
        """A new ``HttpAgent`` for ``url``'s ``/ag-ui`` on ``thread`` (``headers``, ``state`` as given)."""
        await self.call("agent", url=f"{url}/ag-ui", threadId=thread, **fields)

    async def say(self, message_id: str, text: str) -> None:
        """Add a user message, as a front end does before it runs the agent."""
        await self.call("addMessage", message={"id": message_id, "role": "user", "content": text})

    async def run(self, *, refused: bool = False, **fields: Any) -> dict[str, Any]:
        """``runAgent()``: what the client saw (events, messages, state, outcome, error); ``refused``: the
        server is to refuse it (the error says how)."""
        return await self.call("run", refused=refused, **fields)


@asynccontextmanager
async def agui_client() -> AsyncIterator[AguiClient]:
    """A driver process, ended after the test."""
    node = _node()
    process = await asyncio.create_subprocess_exec(
        node,
        str(JS / "agui_driver.mjs"),
        cwd=JS,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        yield AguiClient(process)
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()
            try:
                await asyncio.wait_for(process.wait(), WAIT)
            except TimeoutError:
                process.kill()
                await process.wait()


def types(events: list[dict[str, Any]]) -> list[str]:
    """The event types, in order."""
    return [e["type"] for e in events]


def of(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The events of one type."""
    return [e for e in events if e["type"] == kind]
