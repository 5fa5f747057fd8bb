"""Running an agent from synchronous code (a script): one event loop per agent, kept between calls.

A store's connections belong to the event loop that opened them, so every ``Agent.run_sync`` of one agent
goes on the same loop, made at the first call; ``Agent.close`` closes the store (if the agent opened it)
on that loop and then the loop. Both refuse where an event loop already runs (a notebook cell, a
coroutine, a tool): waiting there would block the loop the run needs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["SyncLoop"]

_T = TypeVar("_T")


class SyncLoop:
    """The event loop an agent's synchronous calls run on (made at the first call, kept until closed)."""

    __slots__ = ("_runner",)

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None

    def run(self, work: Callable[[], Awaitable[_T]], *, instead: str) -> _T:
        """Run ``work()`` to its end on this loop and return its value.

        Raises:
            RuntimeError: called where an event loop runs (``instead`` says what to await there); nothing
                ran.
        """
        _refuse_in_loop(instead)
        if self._runner is None:
            self._runner = asyncio.Runner()

        async def main() -> _T:
            return await work()

        return self._runner.run(main())

    def close(self, last: Callable[[], Awaitable[None]], *, instead: str) -> None:
        """Run ``last()`` on this loop (a fresh one if none was made), then close the loop.

        Raises:
            RuntimeError: called where an event loop runs; nothing ran.
        """
        _refuse_in_loop(instead)
        runner, self._runner = self._runner, None
        if runner is None:
            asyncio.run(_awaited(last))
            return
        with runner:  # closes the loop, whatever `last` does
            runner.run(_awaited(last))


async def _awaited(work: Callable[[], Awaitable[None]]) -> None:
    await work()


def _refuse_in_loop(instead: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # none runs here: the caller may run one
        return
    raise RuntimeError(
        "this cannot be called where an event loop runs (a notebook cell, a coroutine, a tool): it would "
        f"block the loop the agent needs. Use `{instead}` there"
    )
