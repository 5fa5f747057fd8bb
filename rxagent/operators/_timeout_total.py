"""``timeout_total``: fail a stream that has not terminated within a deadline after subscription."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxagent.operators._from_async_iterable import running_loop
from rxagent.operators._typing import Operator

__all__ = ["timeout_total"]

_T = TypeVar("_T")


def timeout_total(seconds: float, error: Callable[[], Exception] | None = None) -> Operator[_T, _T]:
    """Fail the stream with ``error()`` if it has not completed or failed ``seconds`` after subscription.

    ::

        source:  ─ a ─ b ──────── c ─|
        deadline:            ▲
        result:  ─ a ─ b ─── X(error())

    Unlike ``reactivex.operators.timeout``, which bounds the gap between items and raises a bare
    ``Exception('Timeout')``, this bounds the whole stream (all retries included when placed after
    :func:`~rxagent.operators.retry_backoff`), and the error is yours to choose.

    Args:
        seconds: the deadline, counted from subscription; must be positive.
        error: makes the error to raise; ``None`` gives ``TimeoutError``.

    Returns:
        An operator that passes items through until the deadline.

    Raises:
        ValueError: ``seconds`` is not a positive number.

    Lifecycle:
        complete/error before the deadline: passes through and cancels the timer.
        deadline: disposes upstream first (so its task and connection are released), then errors.
        cancel: cancels the timer and disposes upstream.
        re-subscribe: a new deadline per subscription.

    Example:
        >>> import asyncio, reactivex
        >>> async def main() -> str:
        ...     never = reactivex.never()
        ...     try:
        ...         await never.pipe(timeout_total(0.01, lambda: TimeoutError("too slow")))
        ...     except TimeoutError as error:
        ...         return str(error)
        ...     return "unreachable"
        >>> asyncio.run(main())
        'too slow'
    """
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"timeout_total needs a positive, finite number of seconds, got {seconds!r}")

    def make_error() -> Exception:
        if error is None:
            return TimeoutError(f"the stream did not finish within {seconds:g} s")
        try:
            return error()
        except Exception as factory_error:  # a broken factory must still end the stream
            return factory_error

    def operator(source: Observable[_T]) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            loop = running_loop("timeout_total")
            finished = False
            upstream = SingleAssignmentDisposable()

            def on_deadline() -> None:
                nonlocal finished
                if finished:
                    return
                finished = True
                upstream.dispose()
                observer.on_error(make_error())

            deadline = loop.call_later(seconds, on_deadline)

            def on_next(value: _T) -> None:
                if not finished:
                    observer.on_next(value)

            def on_error(exception: Exception) -> None:
                nonlocal finished
                if finished:
                    return
                finished = True
                deadline.cancel()
                observer.on_error(exception)

            def on_completed() -> None:
                nonlocal finished
                if finished:
                    return
                finished = True
                deadline.cancel()
                observer.on_completed()

            upstream.disposable = source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)

            def dispose() -> None:
                nonlocal finished
                finished = True
                deadline.cancel()
                upstream.dispose()

            return Disposable(dispose)

        return Observable(subscribe)

    return operator
