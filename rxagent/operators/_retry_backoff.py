"""``retry_backoff``: re-subscribe after a retryable error, with backoff, only before the first item."""

from __future__ import annotations

from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable, SerialDisposable

from rxagent.clock import SYSTEM_CLOCK, Clock, Timer
from rxagent.operators._from_async_iterable import running_loop
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
            attempts = 0
            emitted = False
            disposed = False
            wait: Timer | None = None
            current = SerialDisposable()

            def on_next(value: _T) -> None:
                nonlocal emitted
                emitted = True
                observer.on_next(value)

            def on_error(error: Exception) -> None:
                nonlocal wait
                if disposed:
                    return
                if emitted or not is_retryable(error):
                    observer.on_error(error)
                    return
                try:
                    plan = plan_retry(retry_policy, attempts, error, budget)
                except Exception as listener_error:  # a listener's bug ends the stream, visibly
                    observer.on_error(listener_error)
                    return
                if isinstance(plan, RetryExhausted):
                    plan.__cause__ = error
                    observer.on_error(plan)
                    return
                delay = plan
                if disposed:  # a listener disposed the subscription: start no timer
                    return
                wait = clock.call_later(delay, attempt)

            def attempt() -> None:
                nonlocal attempts, wait
                wait = None
                if disposed:
                    return
                attempts += 1
                current.disposable = source.subscribe(
                    on_next, on_error, observer.on_completed, scheduler=scheduler
                )

            def dispose() -> None:
                nonlocal disposed
                disposed = True
                if wait is not None:
                    wait.cancel()
                current.dispose()

            attempt()
            return Disposable(dispose)

        return Observable(subscribe)

    return operator
