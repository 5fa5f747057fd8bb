"""Which coroutines become tasks: for tests that say a path makes none (or which)."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any


def counting_tasks(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Record, for every coroutine made a task on ``loop`` from now on, its qualified name (or its type's
    name, for an object that is not a plain coroutine); undo with ``loop.set_task_factory(None)``."""
    made: list[str] = []

    def factory(
        loop: asyncio.AbstractEventLoop,
        coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any],
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", type(coro).__name__))
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(factory)  # pyright: ignore[reportArgumentType]
    return made
