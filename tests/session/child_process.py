"""A Python script in a child process, spoken to one JSON line at a time (the cross-process session tests).

The child runs with this interpreter (the venv's), reads requests from its stdin and answers on its stdout,
one JSON object per line. Every wait for an answer has a timeout, so a child that hangs fails the test
instead of stalling it; ``close`` kills a child that is still running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, cast

__all__ = ["ChildProcess"]


class ChildProcess:
    """A running child script (see the module)."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, script: Path, *arguments: str) -> ChildProcess:
        """Start ``script`` with ``arguments`` (it answers on stdout; its stderr goes to the test's)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(script),
            *arguments,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        return cls(process)

    @classmethod
    async def ready(cls, script: Path, *arguments: str) -> ChildProcess:
        """Start ``script`` and wait for its ``{"ready": true}`` line (the child is ended if it never
        comes)."""
        child = await cls.start(script, *arguments)
        try:
            assert await child.answer(within=60) == {"ready": True}
        except BaseException:
            await child.close()
            raise
        return child

    @property
    def pid(self) -> int:
        return self.process.pid

    async def ask(self, within: float = 30, **request: object) -> dict[str, Any]:
        """Send ``request`` and return the next answer."""
        self.send(**request)
        return await self.answer(within)

    def send(self, **request: object) -> None:
        """Write ``request`` as one line on the child's stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")

    async def answer(self, within: float = 30) -> dict[str, Any]:
        """The child's next line, decoded (fails after ``within`` seconds, or if the child ended)."""
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), within)
        assert line, f"the child process ended (exit code {await self.process.wait()})"
        return cast("dict[str, Any]", json.loads(line))

    async def kill(self) -> None:
        """SIGKILL, and wait until the child is gone."""
        os.kill(self.process.pid, signal.SIGKILL)
        assert await asyncio.wait_for(self.process.wait(), 30) == -signal.SIGKILL

    async def close(self) -> None:
        """End the child (killing it if it still runs) and wait for it."""
        if self.process.returncode is None:
            self.process.kill()
        await asyncio.wait_for(self.process.wait(), 30)
