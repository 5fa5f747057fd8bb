"""Observable → awaitable: the last item, or all of them."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable
from reactivex.scheduler.eventloop import AsyncIOScheduler

from rxagent.operators._from_async_iterable import running_loop

__all__ = ["drain", "last_value", "to_list"]

_T = TypeVar("_T")


async def drain(source: Observable[_T], on_next: Callable[[_T], None]) -> None:
    """Subscribe to ``source`` on the running loop, feed ``on_next``, and return when it completes.

    The subscription gets the loop's ``AsyncIOScheduler`` as its default scheduler, so time-based
    reactivex operators in the chain run on this loop instead of on threads.

    Raises:
        Exception: whatever ``source`` errors with.

    Lifecycle:
        complete: returns. error: raises the error. cancel: cancelling the awaiting task disposes the
        subscription, then ``CancelledError`` propagates. re-subscribe: each call subscribes afresh.
    """
    loop = running_loop("awaiting an observable")
    ended: asyncio.Future[None] = loop.create_future()

    def on_error(error: Exception) -> None:
        if not ended.done():
            ended.set_exception(error)

    def on_completed() -> None:
        if not ended.done():
            ended.set_result(None)

    subscription = source.subscribe(on_next, on_error, on_completed, scheduler=AsyncIOScheduler(loop))
    try:
        await ended
    finally:
        subscription.dispose()


async def last_value(source: Observable[_T]) -> _T:
    """Await the last item of ``source``.

    Raises:
        LookupError: ``source`` completed without an item.
        Exception: whatever ``source`` errors with.

    Lifecycle:
        as :func:`drain`.

    Example:
        >>> import asyncio, reactivex
        >>> asyncio.run(last_value(reactivex.of(1, 2, 3)))
        3
    """
    last: deque[_T] = deque(maxlen=1)
    await drain(source, last.append)
    if not last:
        raise LookupError("last_value: the observable completed without emitting any item")
    return last[0]


async def to_list(source: Observable[_T]) -> list[_T]:
    """Await all items of ``source`` as a list, in order.

    Lifecycle:
        as :func:`drain`.

    Example:
        >>> import asyncio, reactivex
        >>> asyncio.run(to_list(reactivex.of(1, 2, 3)))
        [1, 2, 3]
    """
    items: list[_T] = []
    await drain(source, items.append)
    return items
