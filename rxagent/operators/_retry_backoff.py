"""``retry_backoff``: re-subscribe after a retryable error, with backoff, only before the first item."""

from __future__ import annotations

import asyncio
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable, SerialDisposable

from rxagent.operators._from_async_iterable import running_loop
from rxagent.operators._typing import Operator
from rxagent.retry import RetryBudget, RetryExhausted, RetryPolicy, is_retryable, plan_retry

__all__ = ["retry_backoff"]

_T = TypeVar("_T")


def retry_backoff(policy: RetryPolicy | None = None, budget: RetryBudget | None = None) -> Operator[_T, _T]:
    """Re-subscribe to the source after a retryable error, waiting ``policy.delay(n, error)`` first.

    ::

        attempt 1: ─ X(503)                 wait ≈ base_delay
        attempt 2: ─ X(429, Retry-After 2)  wait 2 s
        attempt 3: ─ a ─ b ─|           ─▶  ─ a ─ b ─|

    An error is retried only when all of these hold: it is retryable
    (:func:`rxagent.retry.is_retryable`); this subscription has not emitted an item yet (a retry would
    emit those items again); the policy has attempts left; the server's ``Retry-After`` is within the
    policy's cap; and ``budget`` (when given) grants a retry. Before each wait the budget's listeners hear
    a :class:`~rxagent.retry.RetryAttempt`. Non-retryable errors, and every error after the first item,
    pass through unchanged; a retryable error that was refused a retry ends the stream as
    :class:`~rxagent.retry.RetryExhausted` (``why`` says which limit, ``__cause__`` is the error).

    Args:
        policy: attempts and backoff; ``None`` uses ``RetryPolicy()``.
        budget: the run's shared retry budget; ``None`` limits retries by ``policy.max_attempts`` only.

    Returns:
        An operator that re-subscribes as described.

    Lifecycle:
        complete: passes through.
        error: retried after a wait on the subscribing loop (``loop.call_later``), or passed on as above.
        cancel: disposes the current attempt, or cancels the pending wait so no new attempt starts.
        re-subscribe: a fresh attempt count; the budget, being the run's, is shared.

    Example:
        >>> import asyncio, reactivex
        >>> class Flaky(Exception):
        ...     retryable = True
        >>> calls = []
        >>> def call() -> reactivex.Observable[str]:
        ...     calls.append(1)
        ...     return reactivex.throw(Flaky()) if len(calls) < 3 else reactivex.of("ok")
        >>> async def main() -> str:
        ...     policy = RetryPolicy(max_attempts=3, base_delay=0.001)
        ...     return await reactivex.defer(lambda _: call()).pipe(retry_backoff(policy))
        >>> asyncio.run(main()), len(calls)
        ('ok', 3)
    """
    retry_policy = policy if policy is not None else RetryPolicy()

    def operator(source: Observable[_T]) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            loop = running_loop("retry_backoff")
            attempts = 0
            emitted = False
            disposed = False
            wait: asyncio.TimerHandle | None = None
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
                wait = loop.call_later(delay, attempt)

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
