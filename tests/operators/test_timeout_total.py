"""timeout_total on virtual time: a deadline for the whole stream, counted from subscription. Bad inputs
tried: zero, negative, infinite and NaN deadlines, an error factory that raises."""

from __future__ import annotations

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

import rxagent.operators
from rxagent.clock import Timer, VirtualClock
from rxagent.operators import Outcome, from_async_iterable, timeout_total
from tests.examples import run_examples
from tests.streams import Counter, expect


class Slow(Exception):
    pass


def ticking(clock: VirtualClock, period: float, disposals: list[int]) -> Observable[int]:
    """0, 1, 2, … every ``period`` seconds of ``clock``, forever; records disposal."""

    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Disposable:
        count = 0
        timer: Timer | None = None

        def tick() -> None:
            nonlocal count, timer
            observer.on_next(count)
            count += 1
            timer = clock.call_later(period, tick)

        timer = clock.call_later(period, tick)

        def dispose() -> None:
            disposals.append(1)
            if timer is not None:
                timer.cancel()

        return Disposable(dispose)

    return Observable(subscribe)


async def test_timeout_total_completes(clock: VirtualClock) -> None:
    seen = await expect(reactivex.of(1, 2, 3).pipe(timeout_total(5, clock=clock)))
    assert seen.items == [1, 2, 3]
    assert seen.outcome == Outcome.completed()
    assert clock.pending() == ()  # the deadline's timer is cancelled, so it cannot fire a second signal
    await clock.advance(10)
    assert seen.signals == 1


async def test_timeout_total_errors(clock: VirtualClock) -> None:
    error = ValueError("upstream")
    seen = await expect(reactivex.throw(error).pipe(timeout_total(5, clock=clock)))
    assert seen.error is error
    assert clock.pending() == ()
    await clock.advance(10)
    assert seen.signals == 1


async def test_timeout_total_bounds_the_whole_stream_not_the_gap_between_items(clock: VirtualClock) -> None:
    disposals: list[int] = []
    # An item every second never trips ops.timeout(10); the total deadline still ends it, at 10 s exactly.
    timed = ticking(clock, 1, disposals).pipe(timeout_total(10, lambda: Slow("too long"), clock=clock))
    seen = await clock.run(expect(timed))
    assert isinstance(seen.error, Slow)
    assert str(seen.error) == "too long"
    assert clock.now() == 10.0
    assert seen.items == list(range(9))  # ticks at 1…9 s; the one due at 10 s lost to the deadline
    assert disposals == [1]  # upstream disposed before the error went out
    assert clock.pending() == ()


async def test_timeout_total_passes_everything_until_the_deadline(clock: VirtualClock) -> None:
    disposals: list[int] = []
    seen = expect(ticking(clock, 1, disposals).pipe(timeout_total(10, clock=clock)))
    await clock.advance(9.5)
    assert seen.items == list(range(9))
    assert seen.outcome is None
    await clock.advance(0.5)
    assert isinstance(seen.error, TimeoutError)


async def test_timeout_total_default_error_is_timeout_error(clock: VirtualClock) -> None:
    seen = await clock.run(expect(reactivex.never().pipe(timeout_total(0.25, clock=clock))))
    assert isinstance(seen.error, TimeoutError)
    assert str(seen.error) == "the stream did not finish within 0.25 s"


async def test_timeout_total_a_failing_error_factory_still_ends_the_stream(clock: VirtualClock) -> None:
    bug = RuntimeError("factory bug")

    def factory() -> Exception:
        raise bug

    seen = await clock.run(expect(reactivex.never().pipe(timeout_total(1, factory, clock=clock))))
    assert seen.error is bug


async def test_timeout_total_deadline_cancels_an_async_source_task(clock: VirtualClock) -> None:
    counter = Counter(1, then_wait=True)
    seen = await clock.run(expect(from_async_iterable(counter).pipe(timeout_total(5, clock=clock))))
    assert seen.items == [0]
    assert isinstance(seen.error, TimeoutError)
    await counter.closed.wait()
    assert counter.closes == 1


async def test_timeout_total_cancel_disposes_upstream_and_the_timer(clock: VirtualClock) -> None:
    disposals: list[int] = []
    seen = expect(ticking(clock, 1, disposals).pipe(timeout_total(5, clock=clock)))
    seen.dispose()
    assert disposals == [1]
    assert clock.pending() == ()  # neither the deadline nor the source's tick is left
    await clock.advance(10)
    assert seen.outcome is None
    assert seen.signals == 0


async def test_timeout_total_resubscribe_is_cold(clock: VirtualClock) -> None:
    timed = reactivex.never().pipe(timeout_total(5, clock=clock))
    first = await clock.run(expect(timed))
    await clock.advance(100)
    second = await clock.run(expect(timed))  # a new deadline, counted from this subscription
    assert isinstance(first.error, TimeoutError)
    assert isinstance(second.error, TimeoutError)
    assert clock.now() == 110.0


@pytest.mark.parametrize("seconds", [0, -1, float("inf"), float("nan")])
def test_timeout_total_rejects_bad_deadlines(seconds: float) -> None:
    with pytest.raises(ValueError, match="positive, finite"):
        timeout_total(seconds)


def test_timeout_total_needs_a_running_loop() -> None:
    errors: list[Exception] = []
    reactivex.of(1).pipe(timeout_total(1)).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert "loop-bound" in str(errors[0])


def test_timeout_total_example() -> None:
    results = run_examples(rxagent.operators.timeout_total)
    assert results.attempted > 0
    assert results.failed == 0
