"""retry_backoff: retries before the first item only, with waits, attempts, Retry-After, a shared budget."""

from __future__ import annotations

import asyncio
import doctest
from dataclasses import dataclass, field

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

import rxagent.operators._retry_backoff
from rxagent.operators import Outcome, retry_backoff
from rxagent.retry import RetryAttempt, RetryBudget, RetryExhausted, RetryPolicy
from tests.streams import expect

FAST = RetryPolicy(max_attempts=4, base_delay=0.001, jitter=0)


class Flaky(Exception):
    """A retryable error, optionally carrying a server's Retry-After."""

    retryable = True

    def __init__(self, name: str = "flaky", retry_after: float | None = None) -> None:
        super().__init__(name)
        self.retry_after = retry_after


@dataclass
class Play:
    """What one subscription does: emit ``items``, then fail with ``error``, complete, or (``hang``) wait."""

    items: list[int] = field(default_factory=lambda: [])
    error: Exception | None = None
    hang: bool = False


class Scripted:
    """A cold source whose n-th subscription plays ``plays[n]`` on the loop's next turn."""

    def __init__(self, *plays: Play) -> None:
        self.plays = list(plays)
        self.subscribed_at: list[float] = []
        self.disposals = 0

    @property
    def subscriptions(self) -> int:
        return len(self.subscribed_at)

    def observable(self) -> Observable[int]:
        def subscribe(
            observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None
        ) -> Disposable:
            loop = asyncio.get_running_loop()
            play = self.plays[self.subscriptions]
            self.subscribed_at.append(loop.time())

            def run() -> None:
                for item in play.items:
                    observer.on_next(item)
                if play.hang:
                    return
                if play.error is not None:
                    observer.on_error(play.error)
                else:
                    observer.on_completed()

            handle = loop.call_soon(run)

            def dispose() -> None:
                self.disposals += 1
                handle.cancel()

            return Disposable(dispose)

        return Observable(subscribe)

    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.subscribed_at, self.subscribed_at[1:], strict=False)]


async def test_retry_backoff_completes() -> None:
    source = Scripted(Play([1, 2]))
    seen = await expect(source.observable().pipe(retry_backoff(FAST)))
    assert seen.items == [1, 2]
    assert seen.outcome == Outcome.completed()
    assert source.subscriptions == 1


async def test_retry_backoff_retries_before_the_first_item_waiting_the_backoff() -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=0.02, multiplier=2, jitter=0)
    source = Scripted(Play(error=Flaky()), Play(error=Flaky()), Play([1, 2]))
    seen = await expect(source.observable().pipe(retry_backoff(policy)))
    assert seen.items == [1, 2]
    assert seen.completed
    assert source.subscriptions == 3
    first, second = source.gaps()
    assert first >= 0.02
    assert second >= 0.04


async def test_retry_backoff_errors_pass_through_unchanged_when_not_retryable() -> None:
    error = ValueError("bad request")
    source = Scripted(Play(error=error))
    seen = await expect(source.observable().pipe(retry_backoff(FAST)))
    assert seen.error is error
    assert source.subscriptions == 1


async def test_retry_backoff_never_retries_after_an_item() -> None:
    error = Flaky("broke mid-stream")
    source = Scripted(Play([1], error=error), Play([1, 2]))
    seen = await expect(source.observable().pipe(retry_backoff(FAST)))
    assert seen.items == [1]  # a retry would have emitted 1 again
    assert seen.error is error
    assert source.subscriptions == 1


async def test_retry_backoff_gives_up_after_max_attempts() -> None:
    errors = [Flaky(f"attempt {n}") for n in (1, 2, 3)]
    source = Scripted(*(Play(error=e) for e in errors))
    seen = await expect(
        source.observable().pipe(retry_backoff(RetryPolicy(max_attempts=3, base_delay=0.001)))
    )
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "attempts"
    assert seen.error.attempts == 3
    assert seen.error.last_error is errors[2]
    assert seen.error.__cause__ is errors[2]
    assert "gave up after 3 attempts: attempt 3" in str(seen.error)
    assert seen.signals == 1


async def test_retry_backoff_refuses_when_the_budget_is_spent() -> None:
    budget = RetryBudget(max_retries=1)
    source = Scripted(Play(error=Flaky()), Play(error=Flaky()), Play([1]))
    seen = await expect(source.observable().pipe(retry_backoff(FAST, budget)))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "budget"
    assert "retry budget is exhausted" in str(seen.error)
    assert source.subscriptions == 2
    assert budget.used == 1


async def test_retry_backoff_budget_is_shared_by_every_call_of_a_run() -> None:
    run_budget = RetryBudget(max_retries=2)
    first = Scripted(Play(error=Flaky()), Play(error=Flaky()), Play([1]))
    second = Scripted(Play(error=Flaky()), Play([2]))
    seen_first = await expect(first.observable().pipe(retry_backoff(FAST, run_budget)))
    seen_second = await expect(second.observable().pipe(retry_backoff(FAST, run_budget)))
    assert seen_first.items == [1]
    assert isinstance(seen_second.error, RetryExhausted)
    assert seen_second.error.why == "budget"
    assert second.subscriptions == 1


async def test_retry_backoff_honours_retry_after() -> None:
    source = Scripted(Play(error=Flaky(retry_after=0.05)), Play([1]))
    seen = await expect(source.observable().pipe(retry_backoff(FAST)))
    assert seen.items == [1]
    assert source.gaps()[0] >= 0.05


async def test_retry_backoff_refuses_a_retry_after_beyond_the_policy_cap() -> None:
    error = Flaky(retry_after=120)
    source = Scripted(Play(error=error), Play([1]))
    policy = RetryPolicy(max_attempts=4, max_retry_after=60)
    seen = await expect(source.observable().pipe(retry_backoff(policy)))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "retry_after"
    assert seen.error.last_error is error
    assert source.subscriptions == 1


async def test_retry_backoff_tells_budget_listeners_before_each_wait() -> None:
    budget = RetryBudget(max_retries=5)
    source = Scripted(Play(error=Flaky("one")), Play(error=Flaky("two")), Play([1]))
    heard: list[tuple[RetryAttempt, int]] = []
    budget.add_listener(lambda attempt: heard.append((attempt, source.subscriptions)))
    await expect(source.observable().pipe(retry_backoff(FAST, budget)))
    assert [(a.retry_number, str(a.error), a.budget_remaining, subs) for a, subs in heard] == [
        (1, "one", 4, 1),
        (2, "two", 3, 2),
    ]
    assert all(a.delay == pytest.approx(0.001 * 2 ** (a.retry_number - 1)) for a, _ in heard)


async def test_retry_backoff_a_failing_listener_ends_the_stream() -> None:
    budget = RetryBudget()
    bug = RuntimeError("listener bug")

    def listener(attempt: RetryAttempt) -> None:
        raise bug

    budget.add_listener(listener)
    source = Scripted(Play(error=Flaky()), Play([1]))
    seen = await expect(source.observable().pipe(retry_backoff(FAST, budget)))
    assert seen.error is bug
    assert source.subscriptions == 1


async def test_retry_backoff_cancel_during_the_wait_starts_no_new_attempt() -> None:
    budget = RetryBudget()
    waiting = asyncio.Event()
    budget.add_listener(lambda attempt: waiting.set())
    source = Scripted(Play(error=Flaky()), Play([1]))
    policy = RetryPolicy(base_delay=0.05, jitter=0)
    seen = expect(source.observable().pipe(retry_backoff(policy, budget)))
    await waiting.wait()
    seen.dispose()
    await asyncio.sleep(0.1)  # the cancelled wait (0.05 s) is what is under test
    assert source.subscriptions == 1
    assert seen.outcome is None
    assert seen.items == []


async def test_retry_backoff_cancel_disposes_upstream() -> None:
    source = Scripted(Play([1], hang=True))
    first_item = asyncio.Event()
    subscription = source.observable().pipe(retry_backoff(FAST)).subscribe(lambda _: first_item.set())
    await first_item.wait()
    subscription.dispose()
    assert source.disposals == 1


async def test_retry_backoff_resubscribe_is_cold() -> None:
    source = Scripted(Play(error=Flaky()), Play([1]), Play(error=Flaky()), Play([2]))
    retried = source.observable().pipe(retry_backoff(RetryPolicy(max_attempts=2, base_delay=0.001)))
    assert (await expect(retried)).items == [1]
    assert (await expect(retried)).items == [2]  # a shared attempt count would have given up here
    assert source.subscriptions == 4


def test_retry_backoff_needs_a_running_loop() -> None:
    errors: list[Exception] = []
    reactivex.of(1).pipe(retry_backoff()).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert "loop-bound" in str(errors[0])


def test_retry_backoff_example() -> None:
    results = doctest.testmod(rxagent.operators._retry_backoff)
    assert results.attempted > 0
    assert results.failed == 0
