"""Observable → awaitable: the last item, or all of them."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from typing import Any, Generic, TypeVar

from reactivex import Observable
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxagent.operators._from_async_iterable import running_loop
from rxagent.operators._source import Sink, subscribe_sink

__all__ = ["last_value", "scheduler_of", "to_list"]

_T = TypeVar("_T")
_V = TypeVar("_V")

_schedulers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncIOScheduler] = (
    weakref.WeakKeyDictionary()
)
"""One ``AsyncIOScheduler`` per loop: it holds nothing but its loop, so every await on a loop shares it."""


def scheduler_of(loop: asyncio.AbstractEventLoop) -> AsyncIOScheduler:
    """The loop's ``AsyncIOScheduler`` (one per loop), the default scheduler of the subscriptions rxagent
    awaits or iterates."""
    scheduler = _schedulers.get(loop)
    if scheduler is None:
        scheduler = _schedulers[loop] = AsyncIOScheduler(loop)
    return scheduler


class _Awaiting(Sink[_T], Generic[_T, _V]):
    """The observer of an awaited observable: keeps what it needs of the items, ends a future."""

    __slots__ = ("ended",)

    def __init__(self) -> None:
        super().__init__()
        self.ended: asyncio.Future[None] | None = None
        """Done when the source has ended (made on the running loop by :func:`_drain`)."""

    def on_error(self, error: Exception) -> None:
        self.stopped = True
        ended = self.ended
        if ended is not None and not ended.done():
            ended.set_exception(error)

    def on_completed(self) -> None:
        self.stopped = True
        ended = self.ended
        if ended is not None and not ended.done():
            ended.set_result(None)

    def value(self) -> _V:
        """What the await returns."""
        raise NotImplementedError


class _Last(_Awaiting[_T, _T]):
    __slots__ = ("_last", "_seen")

    def __init__(self) -> None:
        super().__init__()
        self._seen = False
        self._last: _T | None = None

    def on_next(self, value: _T) -> None:
        self._seen = True
        self._last = value

    def value(self) -> _T:
        if not self._seen:
            raise LookupError("last_value: the observable completed without emitting any item")
        return self._last  # type: ignore[return-value] - set with _seen


class _All(_Awaiting[_T, list[_T]]):
    __slots__ = ("_items",)

    def __init__(self) -> None:
        super().__init__()
        self._items: list[_T] = []

    def on_next(self, value: _T) -> None:
        self._items.append(value)

    def value(self) -> list[_T]:
        return self._items


async def _drain(source: Observable[_T], sink: _Awaiting[_T, _V]) -> _V:
    """Subscribe ``sink`` to ``source`` on the running loop and return its value when the source completes.

    The subscription gets the loop's ``AsyncIOScheduler`` as its default scheduler, so time-based
    reactivex operators in the chain run on this loop instead of on threads.

    Lifecycle:
        complete: returns. error: raises the error. cancel: cancelling the awaiting task disposes the
        subscription, then ``CancelledError`` propagates. re-subscribe: each call subscribes afresh.
        threads: the event loop's only.
    """
    loop = running_loop("awaiting an observable")
    ended = sink.ended = loop.create_future()
    subscription = subscribe_sink(source, sink, scheduler_of(loop))
    del source  # the observable is not kept while its run goes on: its subscription holds what it needs
    try:
        await ended
    finally:
        subscription.dispose()
    return sink.value()


def last_value(source: Observable[_T]) -> Coroutine[Any, Any, _T]:
    """Await the last item of ``source`` (one coroutine: the await is the subscription's only frame).

    Raises:
        LookupError: ``source`` completed without an item.
        Exception: whatever ``source`` errors with.

    Lifecycle:
        as :func:`_drain`.

    Example:
        >>> import asyncio, reactivex
        >>> asyncio.run(last_value(reactivex.of(1, 2, 3)))
        3
    """
    return _drain(source, _Last[_T]())


def to_list(source: Observable[_T]) -> Coroutine[Any, Any, list[_T]]:
    """Await all items of ``source`` as a list, in order.

    Lifecycle:
        as :func:`_drain`.

    Example:
        >>> import asyncio, reactivex
        >>> asyncio.run(to_list(reactivex.of(1, 2, 3)))
        [1, 2, 3]
    """
    return _drain(source, _All[_T]())
