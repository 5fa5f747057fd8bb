"""``timeout_total``: fail a stream that has not terminated within a deadline after subscription."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.operators._from_async_iterable import running_loop
from rxagent.operators._typing import Operator

__all__ = ["timeout_total"]

_T = TypeVar("_T")


def timeout_total(
    seconds: float, error: Callable[[], Exception] | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> Operator[_T, _T]:
    """Fail the stream at a deadline on ``clock`` (see :func:`rxagent.operators.timeout_total`)."""
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
            running_loop("timeout_total")  # loop-bound like every rxagent source: fail clearly outside one
            finished = False
            upstream = SingleAssignmentDisposable()

            def on_deadline() -> None:
                nonlocal finished
                if finished:
                    return
                finished = True
                upstream.dispose()
                observer.on_error(make_error())

            deadline = clock.call_later(seconds, on_deadline)

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
