"""run_steps: a loop of observables at constant depth, with recovery, cancel and cold re-subscription; the
same for a :class:`StepLoop` subclass, whose steps come from its methods."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable, Iterator

import reactivex
from reactivex import Observable, abc

from rxagent.operators import Outcome, Source, StepLoop, from_async_iterable, run_steps, sync_of
from tests.streams import Counter, expect


def steps_of(*observables: Observable[int]) -> Callable[[], Observable[int] | None]:
    remaining: Iterator[Observable[int]] = iter(observables)
    return lambda: next(remaining, None)


def cold(*observables: Observable[int]) -> Observable[int]:
    """A run_steps whose step list starts afresh for every subscription."""
    return reactivex.defer(lambda _: run_steps(steps_of(*observables)))


async def test_run_steps_completes() -> None:
    source = run_steps(steps_of(sync_of(1, 2), from_async_iterable(Counter(2)), sync_of(3)))
    seen = await expect(source)
    assert seen.items == [1, 2, 0, 1, 3]
    assert seen.outcome == Outcome.completed()


async def test_run_steps_keeps_constant_depth_over_many_synchronous_steps() -> None:
    count = 0

    def next_step() -> Observable[int] | None:
        nonlocal count
        count += 1
        return sync_of(count) if count <= 20_000 else None

    seen = await expect(run_steps(next_step))
    assert len(seen.items) == 20_000
    assert seen.outcome == Outcome.completed()


async def test_run_steps_errors_from_a_step_or_from_next_step() -> None:
    boom = ValueError("boom")
    seen = await expect(run_steps(steps_of(sync_of(1), reactivex.throw(boom), sync_of(2))))
    assert seen.items == [1]
    assert seen.error is boom

    def broken() -> Observable[int] | None:
        raise KeyError("no step")

    assert isinstance((await expect(run_steps(broken))).error, KeyError)


async def test_run_steps_recover_turns_an_error_into_one_final_step() -> None:
    boom = ValueError("boom")
    recoveries: list[Exception] = []

    def recover(error: Exception) -> Observable[int] | None:
        recoveries.append(error)
        return sync_of(-1)

    failing = run_steps(steps_of(sync_of(1), reactivex.throw(boom), sync_of(2)), recover)
    seen = await expect(failing)
    assert seen.items == [1, -1]
    assert seen.outcome == Outcome.completed()
    assert recoveries == [boom]

    def recover_failing(error: Exception) -> Observable[int] | None:
        return reactivex.throw(KeyError("again"))  # a failing recovery is not recovered again

    again = await expect(run_steps(steps_of(reactivex.throw(boom)), recover_failing))
    assert isinstance(again.error, KeyError)


async def test_run_steps_recovers_from_next_step_raising() -> None:
    def broken() -> Observable[int] | None:
        raise KeyError("no step")

    async with asyncio.timeout(5):  # it used to hang: the recovery step was never started
        seen = await expect(run_steps(broken, lambda error: sync_of(-1)))
    assert seen.items == [-1]
    assert seen.outcome == Outcome.completed()


async def test_run_steps_cancel_disposes_the_current_step_and_starts_no_other() -> None:
    counter = Counter()
    started: list[int] = []

    def next_step() -> Observable[int] | None:
        started.append(len(started))
        return from_async_iterable(counter)

    seen = expect(run_steps(next_step))
    await counter.until_pulled(2)
    seen.dispose()
    await counter.closed.wait()
    assert counter.closes == 1
    assert started == [0]
    assert seen.outcome is None


async def test_run_steps_resubscribe_is_cold() -> None:
    source = cold(sync_of(1), from_async_iterable(Counter(1)))
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [1, 0]


async def test_a_finished_loop_is_freed_without_the_garbage_collector() -> None:
    # A loop built from closures that call each other holds itself in a reference cycle, and a whole agent
    # run with it, until the collector runs: on a busy loop that is most of the collector's work.
    class Marker:
        pass

    gc.collect()
    gc.disable()
    try:
        marker = Marker()
        alive = weakref.ref(marker)
        steps = iter([sync_of(1), from_async_iterable(Counter(2)), sync_of(2)])

        def next_step(held: Marker = marker) -> Observable[int] | None:
            return next(steps, None)

        seen = await expect(run_steps(next_step))
        assert seen.items == [1, 0, 1, 2]
        del marker, next_step, seen
        assert alive() is None
    finally:
        gc.enable()


class Countdown(StepLoop[int]):
    """A loop with state of its own: steps of ``n``, ``n - 1``, … items, then a recovery step on failure."""

    __slots__ = ("left", "started")

    def __init__(self, observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None, n: int) -> None:
        super().__init__(observer, scheduler)
        self.left = n  # per subscription, in the loop's own slots
        self.started: list[Observable[int]] = []

    def next_step(self) -> Observable[int] | None:
        if self.left == 0:
            return None
        self.left -= 1
        step = sync_of(*range(self.left + 1)) if self.left != 99 else reactivex.throw(KeyError("k"))
        self.started.append(step)
        return step

    def recover(self, error: Exception) -> Observable[int] | None:
        return sync_of(-1) if isinstance(error, KeyError) else None


def countdown(n: int, loops: list[Countdown] | None = None) -> Observable[int]:
    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Countdown:
        loop = Countdown(observer, scheduler, n)
        if loops is not None:
            loops.append(loop)
        loop.advance()
        return loop

    return Source(subscribe)


async def test_a_step_loop_subclass_completes_and_recovers() -> None:
    seen = await expect(countdown(3))
    assert seen.items == [0, 1, 2, 0, 1, 0]
    assert seen.outcome == Outcome.completed()
    recovered = await expect(countdown(100))  # its first step fails; the recovery step is the last
    assert recovered.items == [-1]
    assert recovered.outcome == Outcome.completed()


async def test_a_step_loop_subclass_errors_and_cancel_disposes_its_step() -> None:
    boom = ValueError("boom")

    class Failing(Countdown):
        __slots__ = ()

        def next_step(self) -> Observable[int] | None:
            return reactivex.throw(boom)

    def failing(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Failing:
        loop = Failing(observer, scheduler, 1)
        loop.advance()
        return loop

    assert (await expect(Source(failing))).error is boom

    counter = Counter()

    class Endless(Countdown):
        __slots__ = ()

        def next_step(self) -> Observable[int] | None:
            return from_async_iterable(counter)

    def endless(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Endless:
        loop = Endless(observer, scheduler, 1)
        loop.advance()
        return loop

    seen = expect(Source(endless))
    await counter.until_pulled(2)
    seen.dispose()
    await counter.closed.wait()
    assert counter.starts == 1  # no further step started
    assert seen.outcome is None


async def test_a_step_loop_subclass_resubscribe_is_cold() -> None:
    loops: list[Countdown] = []
    source = countdown(2, loops)
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [0, 1, 0]
    assert loops[0] is not loops[1]
    assert [len(loop.started) for loop in loops] == [2, 2]
