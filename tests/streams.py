"""Declarative stream tests: record what a subscription sees, then assert on the record.

``expect(observable)`` is the StepVerifier habit in miniature: it subscribes at once (inside the running
loop), records items and the terminal signal, and awaiting it waits for that signal without polling::

    seen = await expect(source)
    assert seen.items == [0, 1, 2]
    assert seen.outcome == Outcome.completed()

``Counter`` is a test double for a loop-bound producer: a factory of async generators yielding
0, 1, 2, … that records how many it was asked for and whether its cleanup ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, Generic, TypeVar

from reactivex import Observable

from rxagent.operators import Outcome, ProgressCounts

__all__ = ["Counter", "FrameHooks", "ProgressLog", "Recording", "expect"]

_T = TypeVar("_T")


class Recording(Generic[_T]):
    """What one subscription has seen so far; await it for the terminal signal."""

    def __init__(self, source: Observable[_T]) -> None:
        self.items: list[_T] = []
        self.error: Exception | None = None
        self.completed = False
        self.signals = 0
        """Terminal signals received: a well-behaved source sends at most one."""
        self._ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._subscription = source.subscribe(self._on_next, self._on_error, self._on_completed)

    @property
    def outcome(self) -> Outcome | None:
        """How the stream ended, or None while it runs (or after a dispose, which ends it silently)."""
        if self.completed:
            return Outcome.completed()
        if self.error is not None:
            return Outcome.failed(self.error)
        return None

    def dispose(self) -> None:
        """Dispose the subscription (a cancel, in Lifecycle terms)."""
        self._subscription.dispose()

    def __await__(self) -> Generator[Any, None, Recording[_T]]:
        yield from asyncio.shield(self._ended).__await__()
        return self

    def _on_next(self, item: _T) -> None:
        self.items.append(item)

    def _on_error(self, error: Exception) -> None:
        self.signals += 1
        self.error = error
        if not self._ended.done():
            self._ended.set_result(None)

    def _on_completed(self) -> None:
        self.signals += 1
        self.completed = True
        if not self._ended.done():
            self._ended.set_result(None)


def expect(source: Observable[_T]) -> Recording[_T]:
    """Subscribe to ``source`` now and record what it does."""
    return Recording(source)


class Counter:
    """A factory of async generators yielding 0, 1, 2, … (``stop`` items, or forever).

    Every item is preceded by a ``sleep(0)``, so the producer yields to the loop as real I/O does.

    Args:
        stop: how many items each generator yields; None for an endless one.
        error: raised after the items, instead of finishing.
        then_wait: after the items, wait until cancelled instead of finishing.
    """

    def __init__(self, stop: int | None = None, *, error: Exception | None = None, then_wait: bool = False):
        self.stop = stop
        self.error = error
        self.then_wait = then_wait
        self.starts = 0
        """How many generators have started (one per subscription for a cold source)."""
        self.pulled = 0
        """Items yielded, over all generators."""
        self.closes = 0
        """Generators whose cleanup (``finally``) has run."""
        self.closed = asyncio.Event()
        """Set when a generator's cleanup has run."""
        self.tasks: list[asyncio.Task[Any]] = []
        """The task that drove each generator."""
        self._pulls: list[tuple[int, asyncio.Future[None]]] = []

    def __call__(self) -> AsyncIterator[int]:
        return self._generate()

    async def until_pulled(self, count: int) -> None:
        """Return once ``count`` items have been yielded in total."""
        if self.pulled >= count:
            return
        reached: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pulls.append((count, reached))
        await reached

    async def _generate(self) -> AsyncIterator[int]:
        self.starts += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        try:
            index = 0
            while self.stop is None or index < self.stop:
                await asyncio.sleep(0)
                self.pulled += 1
                self._notify()
                yield index
                index += 1
            if self.error is not None:
                raise self.error
            if self.then_wait:
                await asyncio.Event().wait()
        finally:
            self.closes += 1
            self.closed.set()

    def _notify(self) -> None:
        for count, reached in self._pulls:
            if self.pulled >= count and not reached.done():
                reached.set_result(None)


class FrameHooks:
    """``until`` and ``inject`` hooks for ``frame`` that record which of them are registered right now."""

    def __init__(self) -> None:
        self.registered: list[str] = []

    def until(self, stop: Callable[[], None]) -> Callable[[], None]:
        return self._register("until")

    def inject(self, push: Callable[[Any], None]) -> Callable[[], None]:
        return self._register("inject")

    def _register(self, name: str) -> Callable[[], None]:
        self.registered.append(name)
        return lambda: self.registered.remove(name)


class ProgressLog:
    """A progress display factory that records what each display (one per subscription) was told."""

    def __init__(self) -> None:
        self.displays: list[ProgressLog.Display] = []

    class Display:
        def __init__(self) -> None:
            self.counts: list[ProgressCounts] = []
            self.closes = 0

        def update(self, counts: ProgressCounts, /) -> None:
            assert self.closes == 0, "updated after it was closed"
            self.counts.append(counts)

        def close(self) -> None:
            self.closes += 1

        @property
        def last(self) -> ProgressCounts:
            return self.counts[-1]

    def __call__(self) -> ProgressLog.Display:
        display = ProgressLog.Display()
        self.displays.append(display)
        return display

    @property
    def only(self) -> ProgressLog.Display:
        """The display of the one subscription there was."""
        [display] = self.displays
        return display
