"""Observable → async iterator, through a bounded buffer with a documented overflow policy."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncGenerator
from typing import TypeVar, get_args

from reactivex import Observable, abc

from rxagent.operators import OverflowPolicy
from rxagent.operators._awaitables import scheduler_of as _scheduler_of
from rxagent.operators._flow_control import BufferOverflowError, FlowGate, current_gate
from rxagent.operators._source import Sink, subscribe_sink

__all__ = ["BufferOverflowError", "to_async_iterator"]

_T = TypeVar("_T")


def to_async_iterator(
    source: Observable[_T],
    *,
    max_buffer: int = 256,
    low_watermark: int | None = None,
    overflow: OverflowPolicy = "block",
) -> AsyncGenerator[_T, None]:
    """Consume ``source`` with ``async for`` through a buffer of bounded size.

    ::

        source:    ─ a ─ b ─ c ─ d ─ e ─|
        buffer:    [a] [a b] … (consumer takes at its own pace)
        async for: ─── a ───── b ───── c ───── d ───── e ──|

    Overflow policies, for the moment an item arrives and the buffer is full:

    - ``"block"``: when the buffer reaches ``max_buffer`` items the :class:`FlowGate` closes, and
      rxagent's sources (``from_async_iterable`` and everything built on it) stop pulling until the
      consumer has drained the buffer to ``low_watermark``; the gate is published in ``current_gate``
      while subscribing. Items already in flight when the gate closed (a ``flat_map`` burst, several
      merged sources each finishing their current item, an agent run's closing events) are still
      accepted, up to a hard cap of ``max_buffer + max(max_buffer, 64)`` items; a source that cannot
      pause (a synchronous one, a reactivex timer) and overruns the hard cap fails the iteration with
      :class:`BufferOverflowError`.
    - ``"drop_oldest"``: the oldest buffered item is discarded to make room; never fails.
    - ``"error"``: fails the iteration with :class:`BufferOverflowError` when an item arrives while
      ``max_buffer`` items are buffered.

    An overflow failure is immediate: the subscription is disposed, the buffered items are discarded,
    and the next ``__anext__`` raises. An error from the source, by contrast, is raised after the items
    buffered before it have been consumed.

    The subscription's default scheduler is the loop's ``AsyncIOScheduler``, so time-based reactivex
    operators in the chain run on this loop (not on threads) and synchronous sources emit on the loop's
    next turn. Items must arrive on the loop's thread.

    Implemented as an async generator, so it is lazy and has ``aclose()``. Cancelling the consuming task
    while it waits, or calling ``aclose()``, disposes the subscription at once. Leaving ``async for``
    early (``break``, an exception) drops the generator, and the event loop's async-generator finalizer
    closes it on its next turn (immediately on CPython's reference counting; wrap it in
    ``contextlib.aclosing`` to close it deterministically anywhere).

    Args:
        source: the observable to consume.
        max_buffer: the buffer's size (the high watermark for ``"block"``); at least 1.
        low_watermark: ``"block"`` reopens the gate when the buffer has drained to this many items;
            default ``max_buffer // 4``; ``0 <= low_watermark < max_buffer``.
        overflow: ``"block"``, ``"drop_oldest"`` or ``"error"``, as above.

    Returns:
        An async generator of the source's items.

    Raises:
        ValueError: at call time, for a bad ``max_buffer``, ``low_watermark`` or ``overflow``.
        BufferOverflowError: from ``__anext__``, when the overflow policy gives up.

    Lifecycle:
        subscribe: on the first ``__anext__``, not before. complete: buffered items, then
        ``StopAsyncIteration``. error: buffered items, then the error is raised. cancel: ``aclose()``,
        a cancelled consumer, or an abandoned generator disposes the subscription and opens the gate.
        re-subscribe: every call makes an independent iterator with its own subscription.
        threads: the event loop's only: items must arrive on it.

    Example:
        >>> import asyncio
        >>> from rxagent.operators import from_async_iterable
        >>> async def tokens():
        ...     for token in ("Hel", "lo"):
        ...         yield token
        >>> async def main() -> list[str]:
        ...     return [t async for t in to_async_iterator(from_async_iterable(tokens), max_buffer=64)]
        >>> asyncio.run(main())
        ['Hel', 'lo']
    """
    if max_buffer < 1:
        raise ValueError(f"max_buffer must be at least 1, got {max_buffer}")
    low = max_buffer // 4 if low_watermark is None else low_watermark
    if not 0 <= low < max_buffer:
        raise ValueError(
            f"low_watermark must satisfy 0 <= low_watermark < max_buffer={max_buffer}, got {low}"
        )
    if overflow not in _POLICIES:
        raise ValueError(f"overflow must be one of {', '.join(map(repr, _POLICIES))}, got {overflow!r}")
    return _iterate(source, max_buffer, low, overflow)


async def _iterate(
    source: Observable[_T], max_buffer: int, low_watermark: int, overflow: OverflowPolicy
) -> AsyncGenerator[_T, None]:
    loop = asyncio.get_running_loop()
    sink = _Buffer[_T](max_buffer, overflow)
    buffer, gate = sink.buffer, sink.gate
    try:
        token = current_gate.set(gate)  # None shields the sources from an enclosing consumer's gate
        try:
            subscription = subscribe_sink(source, sink, _scheduler_of(loop))
        finally:
            current_gate.reset(token)
        if sink.stopped:  # it ended (or overflowed) while it subscribed
            subscription.dispose()
        else:
            sink.subscription = subscription
        del source  # the observable is not kept while the iteration goes on
        while True:
            if buffer:
                item = buffer.popleft()
                if gate is not None and not gate.is_open and len(buffer) <= low_watermark:
                    gate.open()
                yield item
            elif sink.stopped:
                if sink.failure is not None:
                    raise sink.failure
                return
            else:
                waiter = sink.waiter = loop.create_future()
                try:
                    await waiter
                finally:
                    sink.waiter = None
    finally:
        sink.let_go()
        if gate is not None:
            gate.open()  # never leave a producer that did not hear the dispose parked on the gate


class _Buffer(Sink[_T]):
    """The observer of an iterated observable: buffers its items and wakes the iteration (one object with
    slots, not closures: see ``_source.py``)."""

    __slots__ = (
        "_hard_cap",
        "_max_buffer",
        "_overflow",
        "buffer",
        "failure",
        "gate",
        "subscription",
        "waiter",
    )

    def __init__(self, max_buffer: int, overflow: OverflowPolicy) -> None:
        super().__init__()
        self._max_buffer = max_buffer
        self._overflow: OverflowPolicy = overflow
        self.buffer: deque[_T] = deque(maxlen=max_buffer if overflow == "drop_oldest" else None)
        self.gate = FlowGate() if overflow == "block" else None
        # The slack takes bursts a source cannot pause inside (a run's closing events come together) while
        # still bounding memory when a source cannot pause at all.
        self._hard_cap = max_buffer + max(max_buffer, _BURST) if overflow == "block" else max_buffer
        self.failure: Exception | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.subscription: abc.DisposableBase | None = None

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _end(self, error: Exception | None) -> None:
        if not self.stopped:
            self.stopped, self.failure = True, error
            self._wake()

    def on_next(self, value: _T) -> None:
        if self.stopped:
            return
        # Once per item: one length test while the buffer has room, and a wake-up only when the consumer
        # waits (`_wake` clears the waiter, so the items that follow skip the call).
        buffer = self.buffer
        if len(buffer) < self._max_buffer - 1:
            buffer.append(value)
        elif self._overflow != "drop_oldest" and len(buffer) >= self._hard_cap:
            buffer.clear()
            self._end(
                BufferOverflowError(_overflow_message(self._overflow, self._max_buffer, self._hard_cap))
            )
            self.let_go()
            return
        else:
            buffer.append(value)
            if self.gate is not None:  # it holds max_buffer items now (or more: a burst)
                self.gate.close()
        if self.waiter is not None:
            self._wake()

    def on_error(self, error: Exception) -> None:
        self._end(error)

    def on_completed(self) -> None:
        self._end(None)

    def let_go(self) -> None:
        """Dispose the subscription (an overflow, or the iteration ended); later calls do nothing."""
        self.stopped = True
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            subscription.dispose()


_POLICIES: tuple[OverflowPolicy, ...] = get_args(OverflowPolicy)
_BURST = 64
"""Items a ``block`` buffer accepts beyond ``max_buffer`` from a burst that cannot pause (at least)."""


def _overflow_message(overflow: OverflowPolicy, max_buffer: int, hard_cap: int) -> str:
    if overflow == "error":
        return f"to_async_iterator: the buffer is full ({max_buffer} items) and overflow='error'"
    return (
        f"to_async_iterator: the source kept emitting while paused and overran the hard cap of "
        f"{hard_cap} items (max_buffer={max_buffer} plus a burst allowance); a source that cannot pause "
        "needs a faster consumer, a larger max_buffer, or overflow='drop_oldest'"
    )
