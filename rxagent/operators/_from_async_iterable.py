from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable

from rxagent.operators._flow_control import current_gate

__all__ = ["from_async_iterable", "running_loop"]

_T = TypeVar("_T")


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or a clear error saying that ``what`` must be subscribed inside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} is loop-bound: subscribe to it inside a running asyncio event loop "
            "(for example `await observable`, or from a coroutine)"
        ) from None


def from_async_iterable(factory: Callable[[], AsyncIterator[_T]]) -> Observable[_T]:
    """Turn an async iterator factory into a cold observable.

    ::

        factory() yields:  a ── b ── c ──|
        observable:        a ── b ── c ──|

    Each subscription calls ``factory()`` for a fresh iterator and drives it in an asyncio task on the
    running loop, so subscription must happen inside a running loop. Before every item the task checks
    whether the subscription was disposed (so ``take(3)`` pulls three items, not the whole iterator) and
    waits while a buffering consumer's :class:`~rxagent.operators._flow_control.FlowGate` is closed.

    Args:
        factory: called once per subscription; returns the async iterator to drive.

    Returns:
        An observable emitting the iterator's items, completing when it is exhausted and erroring with
        whatever it raises.

    Lifecycle:
        complete: the iterator is exhausted, then ``on_completed``.
        error: the iterator raised (or ``factory`` did), then ``on_error``.
        cancel: disposing cancels the task; the iterator's ``aclose()`` runs (its ``finally`` blocks and
        ``async with`` exits release what it holds); nothing more is emitted.
        re-subscribe: a new iterator from ``factory()``; nothing is shared between subscriptions.
    """

    def subscribe(observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None) -> abc.DisposableBase:
        loop = running_loop("this rxagent source")
        gate = current_gate.get()
        disposed = False

        async def drive() -> None:
            iterator: AsyncIterator[_T] | None = None
            try:
                iterator = factory()
                async for item in iterator:
                    if disposed:
                        return
                    observer.on_next(item)
                    if gate is not None and not gate.is_open:
                        await gate.wait_open()
                    if disposed:
                        return
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the iterator's error is the stream's error
                if not disposed:
                    observer.on_error(error)
                return
            finally:
                aclose: Any = getattr(iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
            if not disposed:
                observer.on_completed()

        task = loop.create_task(drive())

        def dispose() -> None:
            nonlocal disposed
            disposed = True
            # Disposed from inside on_next (downstream `take`): the task sees the flag and returns
            # by itself; cancelling it would interrupt the iterator's own cleanup in `aclose()`.
            if asyncio.current_task() is not task:
                task.cancel()

        return Disposable(dispose)

    return Observable(subscribe)
