"""Async iterator → Observable: the bridge every loop-bound rxagent source is built on."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any, Generic, TypeVar

from reactivex import Observable, abc

from rxagent.operators._flow_control import FlowGate, current_gate
from rxagent.operators._source import Source

__all__ = ["SourceCancelledError", "from_async_batches", "from_async_iterable", "running_loop", "start_task"]

_T = TypeVar("_T")

_running_tasks: set[asyncio.Task[None]] = set()
"""Strong references to the tasks rxagent starts: the loop itself keeps only weak ones."""
# Every task's done callback: one bound method, run in one empty context (a callback added without a
# context gets a copy of the current one: an object per task, for a call that reads no context variable).
_forget = _running_tasks.discard
_NO_CONTEXT = contextvars.Context()


def running_loop(what: str) -> asyncio.AbstractEventLoop:
    """The running asyncio loop, or a clear error saying that ``what`` must be subscribed inside one."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError(
            f"{what} is loop-bound: subscribe to it inside a running asyncio event loop "
            "(for example `await observable`, or from a coroutine)"
        ) from None


def start_task(
    loop: asyncio.AbstractEventLoop, coroutine: Coroutine[Any, Any, None], name: str
) -> asyncio.Task[None]:
    """Run ``coroutine`` as a task on ``loop``, referenced until it is done.

    asyncio holds tasks weakly; a task waiting on a future that nothing else references could otherwise
    be garbage-collected mid-flight ("Task was destroyed but it is pending").
    """
    task = loop.create_task(coroutine, name=name)
    _running_tasks.add(task)
    task.add_done_callback(_forget, context=_NO_CONTEXT)
    return task


def from_async_iterable(factory: Callable[[], AsyncIterator[_T]]) -> Observable[_T]:
    """Turn an async iterator factory into a cold observable.

    ::

        factory() yields:  a ── b ── c ──|
        observable:        a ── b ── c ──|

    Each subscription calls ``factory()`` for a fresh iterator and drives it in an asyncio task on the
    running loop, so subscription must happen inside a running loop. After every item the task checks
    whether the subscription was disposed (so ``take(3)`` pulls three items, not the whole iterator) and
    waits while a buffering consumer's :class:`~rxagent.operators._flow_control.FlowGate` is closed, so
    it pulls the next item only when the consumer has room for it.

    Args:
        factory: called once per subscription, inside the driving task; returns the async iterator.

    Returns:
        An observable emitting the iterator's items, completing when it is exhausted and erroring with
        whatever it raises (or whatever a downstream ``on_next`` raises).

    Lifecycle:
        complete: the iterator is exhausted, then ``on_completed``.
        error: the iterator raised (or ``factory`` did), its ``aclose()`` runs, then ``on_error``.
        cancel: disposing cancels the task; the iterator's ``aclose()`` runs (its ``finally`` blocks and
        ``async with`` exits release what it holds); nothing more is emitted. Disposed from inside
        ``on_next`` (a downstream ``take``), the task is not cancelled but stops before the next pull,
        so the iterator's cleanup is not interrupted. A cancellation that is not a dispose (the
        iterator's own ``asyncio.timeout`` firing while the task waits at the flow gate) is thrown into
        the iterator; the stream ends with what it raises (or :class:`SourceCancelledError`).
        re-subscribe: a new iterator from ``factory()``; nothing is shared between subscriptions.
        threads: the event loop's only (the task runs on it; dispose on it).

    Example:
        >>> import asyncio, itertools
        >>> from reactivex import operators as ops
        >>> from rxagent.operators import to_list
        >>> async def naturals():
        ...     for number in itertools.count():
        ...         yield number
        >>> asyncio.run(to_list(from_async_iterable(naturals).pipe(ops.take(3))))
        [0, 1, 2]
    """

    return _driven(factory, batched=False)


def from_async_batches(factory: Callable[[], AsyncIterator[Iterable[_T]]]) -> Observable[_T]:
    """An async iterator of batches as an observable of their items (see the facade for details)."""
    return _driven(factory, batched=True)


def _driven(factory: Callable[[], AsyncIterator[Any]], *, batched: bool) -> Observable[Any]:
    def subscribe(
        observer: abc.ObserverBase[Any], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        loop = running_loop("this rxagent source")
        driver = _Driver(observer, current_gate.get(), batched=batched)
        driver.task = start_task(loop, driver.drive(factory), name="rxagent.from_async_iterable")
        return driver

    return Source(subscribe)


class _Driver(abc.DisposableBase, Generic[_T]):
    """One subscription of :func:`from_async_iterable`: the task's state, and the disposable its subscriber
    holds (one object with slots, not closures: see ``_source.py``)."""

    __slots__ = ("_batched", "_gate", "_observer", "disposed", "task")

    def __init__(self, observer: abc.ObserverBase[_T], gate: FlowGate | None, *, batched: bool) -> None:
        self._observer = observer
        self._gate = gate
        self._batched = batched
        """Each item of the iterator is a batch whose items are emitted one by one."""
        self.disposed = False
        self.task: asyncio.Task[None] | None = None

    async def drive(self, factory: Callable[[], AsyncIterator[Any]]) -> None:
        """Pull the iterator ``factory()`` makes and emit its items, or its batches' items (the task's
        body)."""
        observer, gate = self._observer, self._gate
        iterator: AsyncIterator[Any] | None = None
        failure: Exception | None = None
        try:
            iterator = factory()
            if self._batched:
                async for batch in iterator:
                    if self.disposed:
                        return
                    for item in batch:
                        observer.on_next(item)
                        if self.disposed:
                            return
                        if gate is not None and not gate.is_open:
                            await gate.wait_open()
            else:
                async for item in iterator:
                    if self.disposed:
                        return
                    observer.on_next(item)
                    if self.disposed:
                        return
                    if gate is not None and not gate.is_open:
                        await gate.wait_open()
        except Exception as error:  # the iterator's (or a downstream on_next's) error ends the stream
            failure = error
        except asyncio.CancelledError:
            if self.disposed:
                raise
            # Not our dispose: a deadline the iterator set with `asyncio.timeout` (which targets this
            # task) fired while the task waited here, at the gate, outside the iterator. Hand the
            # cancellation to the iterator, where its deadline turns it into its timeout error.
            failure = await _cancel_inside(iterator)
        finally:
            if iterator is not None:
                try:
                    await _close(iterator)
                except Exception as error:  # a failing cleanup fails a stream that had not failed
                    failure = failure or error
        if self.disposed:
            return
        if failure is None:
            observer.on_completed()
        else:
            observer.on_error(failure)

    def dispose(self) -> None:
        """Stop the source: cancel its task (its iterator's ``aclose()`` runs); idempotent."""
        if self.disposed:
            return
        self.disposed = True
        task = self.task
        # Disposed from inside on_next (downstream `take`): the task sees the flag and returns by
        # itself; cancelling it would interrupt the iterator's own cleanup in `aclose()`.
        if task is not None and asyncio.current_task() is not task:
            task.cancel()


class SourceCancelledError(RuntimeError):
    """A source's task was cancelled by something other than a dispose, and its iterator did not say why.

    The stream still ends with a terminal signal: an observer is never left waiting forever.
    """


async def _cancel_inside(iterator: AsyncIterator[Any] | None) -> Exception:
    """Throw the task's cancellation into ``iterator`` and return the error the stream ends with."""
    athrow: Callable[[BaseException], Awaitable[object]] | None = getattr(iterator, "athrow", None)
    if athrow is not None:
        try:
            await athrow(asyncio.CancelledError())
        except (StopAsyncIteration, asyncio.CancelledError):
            pass
        except Exception as error:  # the iterator's own answer, e.g. its deadline's timeout error
            return error
    return SourceCancelledError("the source's task was cancelled from outside, not by a dispose")


async def _close(iterator: AsyncIterator[Any]) -> None:
    """Run the iterator's ``aclose()`` if it has one (async generators do; plain iterators may not)."""
    aclose: Callable[[], Awaitable[object]] | None = getattr(iterator, "aclose", None)
    if aclose is not None:
        await aclose()
