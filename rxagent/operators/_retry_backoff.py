"""``retry_backoff``: re-subscribe after a retryable error, with backoff, only before the first item."""

from __future__ import annotations

from typing import TypeVar

from reactivex import Observable, abc

from rxagent.clock import SYSTEM_CLOCK, Clock, Timer
from rxagent.operators._from_async_iterable import running_loop
from rxagent.operators._source import Sink, Source, subscribe_sink
from rxagent.operators._typing import Operator
from rxagent.retry import RetryBudget, RetryExhausted, RetryPolicy, is_retryable, plan_retry

__all__ = ["retry_backoff"]

_T = TypeVar("_T")


def retry_backoff(
    policy: RetryPolicy | None = None, budget: RetryBudget | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> Operator[_T, _T]:
    """Retry before the first item, waiting on ``clock`` (see :func:`rxagent.operators.retry_backoff`)."""
    retry_policy = policy if policy is not None else RetryPolicy()

    def operator(source: Observable[_T]) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            running_loop("retry_backoff")  # loop-bound like every rxagent source: fail clearly outside one
            retrying = _Retrying(observer, scheduler, source, retry_policy, budget, clock)
            retrying.attempt()
            return retrying

        return Source(subscribe)

    return operator


class _Retrying(Sink[_T], abc.DisposableBase):
    """One subscription of :func:`retry_backoff`: the observer of each attempt, and the disposable its
    subscriber holds (one object with slots, not closures: see ``_source.py``)."""

    __slots__ = (
        "_attempts",
        "_budget",
        "_clock",
        "_current",
        "_disposed",
        "_emitted",
        "_observer",
        "_policy",
        "_scheduler",
        "_source",
        "_wait",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[_T],
        scheduler: abc.SchedulerBase | None,
        source: Observable[_T],
        policy: RetryPolicy,
        budget: RetryBudget | None,
        clock: Clock,
    ) -> None:
        super().__init__()
        self._observer = observer
        self._scheduler = scheduler
        self._source = source
        self._policy = policy
        self._budget = budget
        self._clock = clock
        self._attempts = 0
        self._emitted = False
        self._disposed = False
        self._wait: Timer | None = None
        self._current: abc.DisposableBase | None = None

    def on_next(self, value: _T) -> None:
        if not self._disposed:
            self._emitted = True
            self._observer.on_next(value)

    def on_completed(self) -> None:
        if not self._disposed:
            self.stopped = True
            self._observer.on_completed()

    def on_error(self, error: Exception) -> None:
        if self._disposed:
            return
        self.stopped = True
        if self._emitted or not is_retryable(error):
            self._observer.on_error(error)
            return
        try:
            plan = plan_retry(self._policy, self._attempts, error, self._budget)
        except Exception as listener_error:  # a listener's bug ends the stream, visibly
            self._observer.on_error(listener_error)
            return
        if isinstance(plan, RetryExhausted):
            plan.__cause__ = error
            self._observer.on_error(plan)
            return
        if self._disposed:  # a listener disposed the subscription: start no timer
            return
        self._wait = self._clock.call_later(plan, self.attempt)

    def attempt(self) -> None:
        """Subscribe to the source once more (the first time, at subscription)."""
        self._wait = None
        if self._disposed:
            return
        self._attempts += 1
        previous, self._current = self._current, None
        if previous is not None:
            previous.dispose()
        self.stopped = False
        current = subscribe_sink(self._source, self, self._scheduler)
        if self._disposed:
            current.dispose()
        else:
            self._current = current

    def dispose(self) -> None:
        """Cancel the pending wait, or dispose the current attempt; idempotent."""
        if self._disposed:
            return
        self._disposed = True
        if self._wait is not None:
            self._wait.cancel()
        current, self._current = self._current, None
        if current is not None:
            current.dispose()
