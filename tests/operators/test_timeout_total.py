"""timeout_total: a deadline for the whole stream, counted from subscription."""

from __future__ import annotations

import asyncio
import doctest

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable

import rxagent.operators._timeout_total
from rxagent.operators import Outcome, from_async_iterable, timeout_total
from tests.streams import Counter, expect


class Slow(Exception):
    pass


def ticking(period: float, disposals: list[int]) -> Observable[int]:
    """0, 1, 2, … every ``period`` seconds, forever; records disposal."""

    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Disposable:
        loop = asyncio.get_running_loop()
        count = 0
        handle: asyncio.TimerHandle | None = None

        def tick() -> None:
            nonlocal count, handle
            observer.on_next(count)
            count += 1
            handle = loop.call_later(period, tick)

        handle = loop.call_later(period, tick)

        def dispose() -> None:
            disposals.append(1)
            if handle is not None:
                handle.cancel()

        return Disposable(dispose)

    return Observable(subscribe)


async def test_timeout_total_completes() -> None:
    seen = await expect(reactivex.of(1, 2, 3).pipe(timeout_total(0.05)))
    assert seen.items == [1, 2, 3]
    assert seen.outcome == Outcome.completed()
    await asyncio.sleep(0.1)  # past the deadline: the cancelled timer must not fire a second signal
    assert seen.signals == 1


async def test_timeout_total_errors() -> None:
    error = ValueError("upstream")
    seen = await expect(reactivex.throw(error).pipe(timeout_total(0.05)))
    assert seen.error is error
    await asyncio.sleep(0.1)  # past the deadline: still one terminal signal
    assert seen.signals == 1


async def test_timeout_total_bounds_the_whole_stream_not_the_gap_between_items() -> None:
    disposals: list[int] = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    # An item every 10 ms never trips ops.timeout(0.1); the total deadline still ends it.
    seen = await expect(ticking(0.01, disposals).pipe(timeout_total(0.1, lambda: Slow("too long"))))
    assert isinstance(seen.error, Slow)
    assert str(seen.error) == "too long"
    assert loop.time() - start >= 0.1
    assert len(seen.items) >= 3
    assert disposals == [1]  # upstream disposed before the error went out


async def test_timeout_total_default_error_is_timeout_error() -> None:
    seen = await expect(reactivex.never().pipe(timeout_total(0.01)))
    assert isinstance(seen.error, TimeoutError)
    assert "0.01 s" in str(seen.error)


async def test_timeout_total_a_failing_error_factory_still_ends_the_stream() -> None:
    bug = RuntimeError("factory bug")

    def factory() -> Exception:
        raise bug

    seen = await expect(reactivex.never().pipe(timeout_total(0.01, factory)))
    assert seen.error is bug


async def test_timeout_total_deadline_cancels_an_async_source_task() -> None:
    counter = Counter(1, then_wait=True)
    seen = await expect(from_async_iterable(counter).pipe(timeout_total(0.05)))
    assert seen.items == [0]
    assert isinstance(seen.error, TimeoutError)
    await counter.closed.wait()
    assert counter.closes == 1


async def test_timeout_total_cancel_disposes_upstream_and_the_timer() -> None:
    disposals: list[int] = []
    seen = expect(ticking(0.01, disposals).pipe(timeout_total(0.05)))
    seen.dispose()
    assert disposals == [1]
    await asyncio.sleep(0.1)  # past the deadline: the cancelled timer emits nothing
    assert seen.outcome is None
    assert seen.signals == 0


async def test_timeout_total_resubscribe_is_cold() -> None:
    loop = asyncio.get_running_loop()
    timed = reactivex.never().pipe(timeout_total(0.05))
    first = await expect(timed)
    start = loop.time()
    second = await expect(timed)  # a new deadline, counted from this subscription
    assert isinstance(first.error, TimeoutError)
    assert isinstance(second.error, TimeoutError)
    assert loop.time() - start >= 0.05


@pytest.mark.parametrize("seconds", [0, -1, float("inf"), float("nan")])
def test_timeout_total_rejects_bad_deadlines(seconds: float) -> None:
    with pytest.raises(ValueError, match="positive, finite"):
        timeout_total(seconds)


def test_timeout_total_example() -> None:
    results = doctest.testmod(rxagent.operators._timeout_total)
    assert results.attempted > 0
    assert results.failed == 0
