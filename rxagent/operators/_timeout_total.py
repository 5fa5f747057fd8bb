"""``timeout_total``: fail a stream that has not terminated within a deadline after subscription."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc

from rxagent.clock import SYSTEM_CLOCK, Clock, Timer
from rxagent.operators._from_async_iterable import running_loop
from rxagent.operators._source import Relay, Source
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
            bounded = _Bounded(observer, make_error)
            bounded.deadline = clock.call_later(seconds, bounded.expire)
            return bounded.attach(source, scheduler)

        return Source(subscribe)

    return operator


class _Bounded(Relay[_T]):
    """One subscription of :func:`timeout_total` (one object with slots, not closures: see ``_source.py``)."""

    __slots__ = ("_make_error", "deadline")

    def __init__(self, observer: abc.ObserverBase[_T], make_error: Callable[[], Exception]) -> None:
        super().__init__(observer)
        self._make_error = make_error
        self.deadline: Timer | None = None

    def expire(self) -> None:
        """The deadline: dispose upstream first (its task and connection are released), then fail."""
        if self.stopped or self.is_disposed:
            return
        self.stopped = True
        self.deadline = None
        self._let_go()
        self._observer.on_error(self._make_error())

    def _let_go(self) -> None:
        deadline, self.deadline = self.deadline, None
        if deadline is not None:
            deadline.cancel()
        super()._let_go()
