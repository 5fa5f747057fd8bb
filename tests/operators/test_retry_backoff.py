"""retry_backoff on virtual time: retries before the first item only, the exact waits, attempts,
Retry-After, a shared budget, the jitter's random source. Bad inputs tried: a non-retryable error, an
error after an item, a Retry-After over the cap, a failing budget listener, a subscription outside a loop."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

import rxagent.operators
from rxagent.clock import VirtualClock
from rxagent.operators import Outcome, retry_backoff
from rxagent.retry import RetryAttempt, RetryBudget, RetryExhausted, RetryPolicy
from tests.examples import run_examples
from tests.streams import expect

ONE_SECOND = RetryPolicy(max_attempts=4, base_delay=1, multiplier=2, jitter=0)
"""Waits of 1, 2, 4 s: on a virtual clock they cost nothing and can be asserted exactly."""


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

    def __init__(self, clock: VirtualClock, *plays: Play) -> None:
        self.clock = clock
        self.plays = list(plays)
        self.subscribed_at: list[float] = []
        """The clock's time at each subscription."""
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
            self.subscribed_at.append(self.clock.now())

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


async def test_retry_backoff_completes(clock: VirtualClock) -> None:
    source = Scripted(clock, Play([1, 2]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock))))
    assert seen.items == [1, 2]
    assert seen.outcome == Outcome.completed()
    assert source.subscriptions == 1
    assert clock.now() == 0.0


async def test_retry_backoff_retries_before_the_first_item_waiting_the_backoff(clock: VirtualClock) -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=2, multiplier=3, jitter=0)
    source = Scripted(clock, Play(error=Flaky()), Play(error=Flaky()), Play([1, 2]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(policy, clock=clock))))
    assert seen.items == [1, 2]
    assert seen.completed
    assert source.subscribed_at == [0.0, 2.0, 8.0]  # waits of 2 s, then 2 * 3 s


async def test_retry_backoff_starts_no_attempt_before_its_wait_is_over(clock: VirtualClock) -> None:
    source = Scripted(clock, Play(error=Flaky()), Play([1]))
    seen = expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock)))
    await clock.advance(0.5)
    assert source.subscriptions == 1
    assert clock.pending() == (1.0,)
    await clock.advance(0.5)
    assert source.subscriptions == 2
    assert seen.items == [1]
    assert seen.completed


async def test_retry_backoff_errors_pass_through_unchanged_when_not_retryable(clock: VirtualClock) -> None:
    error = ValueError("bad request")
    source = Scripted(clock, Play(error=error))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock))))
    assert seen.error is error
    assert source.subscriptions == 1
    assert clock.pending() == ()


async def test_retry_backoff_never_retries_after_an_item(clock: VirtualClock) -> None:
    error = Flaky("broke mid-stream")
    source = Scripted(clock, Play([1], error=error), Play([1, 2]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock))))
    assert seen.items == [1]  # a retry would have emitted 1 again
    assert seen.error is error
    assert source.subscriptions == 1


async def test_retry_backoff_gives_up_after_max_attempts(clock: VirtualClock) -> None:
    errors = [Flaky(f"attempt {n}") for n in (1, 2, 3)]
    source = Scripted(clock, *(Play(error=e) for e in errors))
    policy = RetryPolicy(max_attempts=3, base_delay=1, jitter=0)
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(policy, clock=clock))))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "attempts"
    assert seen.error.attempts == 3
    assert seen.error.last_error is errors[2]
    assert seen.error.__cause__ is errors[2]
    assert "gave up after 3 attempts: attempt 3" in str(seen.error)
    assert seen.signals == 1
    assert clock.now() == 3.0  # 1 s + 2 s of waiting, and no wait after the last attempt


async def test_retry_backoff_refuses_when_the_budget_is_spent(clock: VirtualClock) -> None:
    budget = RetryBudget(max_retries=1)
    source = Scripted(clock, Play(error=Flaky()), Play(error=Flaky()), Play([1]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, budget, clock=clock))))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "budget"
    assert "retry budget is exhausted" in str(seen.error)
    assert source.subscriptions == 2
    assert budget.used == 1


async def test_retry_backoff_budget_is_shared_by_every_call_of_a_run(clock: VirtualClock) -> None:
    run_budget = RetryBudget(max_retries=2)
    first = Scripted(clock, Play(error=Flaky()), Play(error=Flaky()), Play([1]))
    second = Scripted(clock, Play(error=Flaky()), Play([2]))
    retried = retry_backoff(ONE_SECOND, run_budget, clock=clock)
    seen_first = await clock.run(expect(first.observable().pipe(retried)))
    seen_second = await clock.run(expect(second.observable().pipe(retried)))
    assert seen_first.items == [1]
    assert isinstance(seen_second.error, RetryExhausted)
    assert seen_second.error.why == "budget"
    assert second.subscriptions == 1


async def test_retry_backoff_honours_a_longer_retry_after(clock: VirtualClock) -> None:
    source = Scripted(clock, Play(error=Flaky(retry_after=5)), Play([1]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock))))
    assert seen.items == [1]
    assert source.subscribed_at == [0.0, 5.0]


async def test_retry_backoff_keeps_its_own_wait_when_retry_after_is_shorter(clock: VirtualClock) -> None:
    source = Scripted(clock, Play(error=Flaky(retry_after=0.25)), Play([1]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock))))
    assert seen.items == [1]
    assert source.subscribed_at == [0.0, 1.0]


async def test_retry_backoff_refuses_a_retry_after_beyond_the_policy_cap(clock: VirtualClock) -> None:
    error = Flaky(retry_after=120)
    source = Scripted(clock, Play(error=error), Play([1]))
    policy = RetryPolicy(max_attempts=4, max_retry_after=60)
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(policy, clock=clock))))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "retry_after"
    assert seen.error.last_error is error
    assert source.subscriptions == 1
    assert clock.now() == 0.0


async def test_retry_backoff_draws_its_jitter_from_the_policys_random_source(clock: VirtualClock) -> None:
    draws = iter([0.0, 1.0, 0.5])
    policy = RetryPolicy(max_attempts=4, base_delay=4, multiplier=1, jitter=0.5, rng=lambda: next(draws))
    source = Scripted(clock, Play(error=Flaky()), Play(error=Flaky()), Play(error=Flaky()), Play([1]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(policy, clock=clock))))
    assert seen.items == [1]
    # 4 s scaled by 0.5, 1.5 and 1.0: the lowest, highest and middle of the jitter's range
    assert source.subscribed_at == [0.0, 2.0, 8.0, 12.0]


async def test_retry_backoff_a_random_source_out_of_range_ends_the_stream(clock: VirtualClock) -> None:
    policy = RetryPolicy(jitter=0.5, rng=lambda: 1.5)
    source = Scripted(clock, Play(error=Flaky()), Play([1]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(policy, clock=clock))))
    assert isinstance(seen.error, ValueError)
    assert "must return a number between 0 and 1" in str(seen.error)
    assert source.subscriptions == 1


async def test_retry_backoff_tells_budget_listeners_before_each_wait(clock: VirtualClock) -> None:
    budget = RetryBudget(max_retries=5)
    source = Scripted(clock, Play(error=Flaky("one")), Play(error=Flaky("two")), Play([1]))
    heard: list[tuple[RetryAttempt, int, float]] = []
    budget.add_listener(lambda attempt: heard.append((attempt, source.subscriptions, clock.now())))
    await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, budget, clock=clock))))
    assert [
        (a.retry_number, str(a.error), a.budget_remaining, a.delay, subs, at) for a, subs, at in heard
    ] == [
        (1, "one", 4, 1.0, 1, 0.0),
        (2, "two", 3, 2.0, 2, 1.0),
    ]


async def test_retry_backoff_a_failing_listener_ends_the_stream(clock: VirtualClock) -> None:
    budget = RetryBudget()
    bug = RuntimeError("listener bug")

    def listener(attempt: RetryAttempt) -> None:
        raise bug

    budget.add_listener(listener)
    source = Scripted(clock, Play(error=Flaky()), Play([1]))
    seen = await clock.run(expect(source.observable().pipe(retry_backoff(ONE_SECOND, budget, clock=clock))))
    assert seen.error is bug
    assert source.subscriptions == 1


async def test_retry_backoff_cancel_during_the_wait_starts_no_new_attempt(clock: VirtualClock) -> None:
    source = Scripted(clock, Play(error=Flaky()), Play([1]))
    seen = expect(source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock)))
    await clock.advance(0)
    assert clock.pending() == (1.0,)  # the first attempt failed; its wait is set
    seen.dispose()
    assert clock.pending() == ()  # the wait's timer is cancelled, not merely ignored
    await clock.advance(10)
    assert source.subscriptions == 1
    assert seen.outcome is None
    assert seen.items == []


async def test_retry_backoff_a_listener_that_disposes_sets_no_timer(clock: VirtualClock) -> None:
    budget = RetryBudget()
    source = Scripted(clock, Play(error=Flaky()), Play([1]))
    subscription: list[abc.DisposableBase] = []
    budget.add_listener(lambda attempt: subscription[0].dispose())
    subscription.append(source.observable().pipe(retry_backoff(ONE_SECOND, budget, clock=clock)).subscribe())
    await clock.advance(0)
    assert clock.pending() == ()
    assert source.subscriptions == 1


async def test_retry_backoff_cancel_disposes_upstream(clock: VirtualClock) -> None:
    source = Scripted(clock, Play([1], hang=True))
    first_item = asyncio.Event()
    retried = source.observable().pipe(retry_backoff(ONE_SECOND, clock=clock))
    subscription = retried.subscribe(lambda _: first_item.set())
    await first_item.wait()
    subscription.dispose()
    assert source.disposals == 1


async def test_retry_backoff_resubscribe_is_cold(clock: VirtualClock) -> None:
    source = Scripted(clock, Play(error=Flaky()), Play([1]), Play(error=Flaky()), Play([2]))
    policy = RetryPolicy(max_attempts=2, base_delay=1, jitter=0)
    retried = source.observable().pipe(retry_backoff(policy, clock=clock))
    assert (await clock.run(expect(retried))).items == [1]
    assert (await clock.run(expect(retried))).items == [2]  # a shared attempt count would have given up
    assert source.subscribed_at == [0.0, 1.0, 1.0, 2.0]


def test_retry_backoff_needs_a_running_loop() -> None:
    errors: list[Exception] = []
    reactivex.of(1).pipe(retry_backoff()).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert "loop-bound" in str(errors[0])


def test_retry_backoff_example() -> None:
    results = run_examples(rxagent.operators.retry_backoff)
    assert results.attempted > 0
    assert results.failed == 0
