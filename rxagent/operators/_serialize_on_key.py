"""One holder at a time per key, first come first served: how runs on one session take turns."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import TypeVar

from reactivex import Observable

from rxagent.operators._outcome import Outcome
from rxagent.operators._typing import Operator
from rxagent.operators._using_resource import using_resource

__all__ = ["KeyedSerializer", "Turn"]

_T = TypeVar("_T")


class _Line:
    """The queue of one key: whether someone holds it, and who waits, in order."""

    __slots__ = ("held", "waiting")

    def __init__(self) -> None:
        self.held = False
        self.waiting: deque[Turn] = deque()


class Turn:
    """One place in a key's queue: :meth:`acquire` waits for it, :meth:`release` hands the key on.

    :attr:`position` says where it stands (``0``: it holds the key; ``n``: ``n - 1`` others wait ahead of
    it), readable at any moment, so a caller can show the queue moving.
    """

    __slots__ = ("_future", "_holding", "_key", "_line", "_lines", "left_at")

    def __init__(self, lines: dict[Hashable, _Line], key: Hashable) -> None:
        self._lines = lines
        self._key = key
        self._line: _Line | None = None
        self._future: asyncio.Future[None] | None = None
        self._holding = False
        self.left_at: int | None = None
        """The position it had when it left the line without the key (cancelled or timed out)."""

    @property
    def position(self) -> int | None:
        """``0`` while holding the key, ``n >= 1`` while ``n``-th in line, ``None`` before and after."""
        if self._holding:
            return 0
        line = self._line
        if line is None or self._future is None or self._future.done():
            return None
        try:
            return line.waiting.index(self) + 1
        except ValueError:
            return None

    async def acquire(self) -> None:
        """Wait until this turn holds the key.

        Cancelled while waiting (a timeout, a dispose), it leaves the line; if the key was handed to it in
        the same moment, it hands the key straight on, so the queue never stalls.
        """
        if self._line is not None:
            raise RuntimeError("a Turn is acquired once")
        line = self._lines.get(self._key)
        if line is None:
            line = self._lines[self._key] = _Line()
        self._line = line
        if not line.held and not line.waiting:
            line.held = True
            self._holding = True
            return
        future = asyncio.get_running_loop().create_future()
        self._future = future
        line.waiting.append(self)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():  # handed the key while being cancelled
                self._holding = True
                self.release()
            else:
                self.left_at = line.waiting.index(self) + 1
                line.waiting.remove(self)
                self._forget_if_idle(line)
            raise
        self._holding = True

    def release(self) -> None:
        """Hand the key to the next in line (or free it); a no-op unless this turn holds it."""
        if not self._holding:
            return
        self._holding = False
        line = self._line
        assert line is not None
        while line.waiting:
            future = line.waiting.popleft()._future
            if future is not None and not future.done():
                future.set_result(None)  # the key passes on: `held` stays true
                return
        line.held = False
        self._forget_if_idle(line)

    def _forget_if_idle(self, line: _Line) -> None:
        if not line.held and not line.waiting and self._lines.get(self._key) is line:
            del self._lines[self._key]


class KeyedSerializer:
    """Lets at most one holder per key run at once; later ones wait their turn, first come first served.

    Different keys never wait for each other. A key's queue lives only while someone holds or awaits it.

    Example:
        >>> sessions = KeyedSerializer()
        >>> run = some_stream.pipe(sessions.serialize(("user-1", "session-7")))  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._lines: dict[Hashable, _Line] = {}

    def turn(self, key: Hashable) -> Turn:
        """A new place in ``key``'s queue (it joins the line when :meth:`Turn.acquire` is awaited)."""
        return Turn(self._lines, key)

    def waiting(self, key: Hashable) -> int:
        """How many wait for ``key`` (not counting its holder)."""
        line = self._lines.get(key)
        return len(line.waiting) if line is not None else 0

    def serialize(self, key: Hashable) -> Operator[_T, _T]:
        """An operator that subscribes upstream only once the key is held, and frees it at the end.

        Lifecycle:
            complete/error/cancel: the key is released (exactly once). Disposed while waiting: the wait
            is cancelled and the queue moves on. threads: the event loop's only.
        """

        def operator(source: Observable[_T]) -> Observable[_T]:
            async def acquire() -> Turn:
                turn = self.turn(key)
                await turn.acquire()
                return turn

            def release(turn: Turn, _: Outcome) -> None:
                turn.release()

            return using_resource(acquire, lambda _turn: source, release)

        return operator
