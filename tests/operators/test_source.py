"""Direct subscription between rxagent's observables keeps what reactivex's subscribe guarantees."""

from __future__ import annotations

from typing import Any

import pytest
import reactivex
from reactivex import Observable, Observer, abc
from reactivex import operators as ops
from reactivex.disposable import Disposable

from rxagent.operators import (
    NO_SUBSCRIPTION,
    Outcome,
    Relay,
    Slot,
    frame,
    from_async_iterable,
    run_steps,
    subscribe_sink,
    subscribe_through,
    sync_of,
)
from rxagent.operators._source import Source, deferred, subscribe_to
from tests.streams import Counter, expect


def record() -> tuple[list[Any], dict[str, Any]]:
    log: list[Any] = []
    callbacks: dict[str, Any] = {
        "on_next": log.append,
        "on_error": lambda error: log.append(("error", error)),
        "on_completed": lambda: log.append("completed"),
    }
    return log, callbacks


async def test_a_source_is_subscribed_directly_and_anything_else_the_reactivex_way() -> None:
    calls: list[str] = []

    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Disposable:
        calls.append(type(observer).__name__)
        observer.on_next(1)
        observer.on_completed()
        return Disposable()

    log, callbacks = record()
    subscribe_to(Source(subscribe), **callbacks)
    assert calls == ["_Callbacks"]  # no AutoDetachObserver in between
    assert log == [1, "completed"]

    log, callbacks = record()
    subscribe_to(reactivex.of(1, 2), **callbacks)
    assert log == [1, 2, "completed"]

    Source(subscribe).subscribe(lambda _: None)
    assert calls[-1] == "AutoDetachObserver"  # to everyone else it is an ordinary Observable


async def test_a_direct_subscribe_that_raises_is_an_error_signal() -> None:
    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Disposable:
        raise RuntimeError("no loop")

    log, callbacks = record()
    subscription = subscribe_to(Source(subscribe), **callbacks)
    subscription.dispose()
    assert [type(entry[1]) for entry in log] == [RuntimeError]
    seen = await expect(Source(subscribe).pipe(frame(lambda item: (item,))))
    assert isinstance(seen.error, RuntimeError)


async def test_a_downstream_take_stops_a_loop_of_asynchronous_steps() -> None:
    first, second = Counter(), Counter()
    steps = iter([from_async_iterable(first), from_async_iterable(second)])
    seen = await expect(run_steps(lambda: next(steps, None)).pipe(frame(lambda item: (item,)), ops.take(3)))
    assert seen.items == [0, 1, 2]
    assert seen.outcome == Outcome.completed()
    await first.closed.wait()
    assert second.starts == 0  # the next step never started


async def test_nothing_passes_a_frame_after_it_was_disposed() -> None:
    # A downstream that disposes inside on_next: the source (subscribed directly) stops being heard at once.
    counter = Counter()
    seen_items: list[int] = []
    subscription: list[abc.DisposableBase] = []

    def on_next(item: int) -> None:
        seen_items.append(item)
        if item == 1:
            subscription[0].dispose()

    framed = from_async_iterable(counter).pipe(frame(lambda item: (item, item), after=lambda: (-1,)))
    subscription.append(framed.subscribe(on_next))
    await counter.closed.wait()
    assert seen_items == [0, 0, 1]
    assert counter.pulled == 2


async def test_sync_of_is_a_source_and_completes_in_subscribe() -> None:
    log, callbacks = record()
    subscribe_to(sync_of("a", "b"), **callbacks)
    assert log == ["a", "b", "completed"]


async def test_deferred_builds_a_stream_per_subscription_and_reports_a_failing_factory() -> None:
    built: list[int] = []

    def factory() -> Observable[int]:
        built.append(len(built))
        return sync_of(len(built))

    source = deferred(factory)
    assert (await expect(source)).items == [1]
    assert (await expect(source)).items == [2]
    assert built == [0, 1]

    def broken() -> Observable[int]:
        raise KeyError("no plan")

    assert isinstance((await expect(deferred(broken))).error, KeyError)


def test_a_consumer_failing_after_the_end_is_not_swallowed() -> None:
    # reactivex re-raises what a subscribe function raises once its observer has stopped (here, the
    # consumer's own on_completed); subscribing directly must not turn that into a dropped on_error.
    def broken() -> None:
        raise RuntimeError("consumer bug")

    steps = iter([sync_of(1)])
    chains = [
        sync_of(1).pipe(frame(lambda item: (item,)), frame(lambda item: (item,))),
        run_steps(lambda: next(steps, None)).pipe(frame(lambda item: (item,))),
    ]
    for chain in chains:
        errors: list[Exception] = []
        with pytest.raises(RuntimeError, match="consumer bug"):
            chain.subscribe(on_error=errors.append, on_completed=broken)
        assert errors == []


class Evens(Relay[int]):
    """A relay that passes even numbers only."""

    __slots__ = ()

    def on_next(self, value: int) -> None:
        if value % 2 == 0:
            super().on_next(value)


def evens(source: Observable[int]) -> Observable[int]:
    return Source(lambda observer, scheduler=None: Evens(observer).attach(source, scheduler))


async def test_a_relay_passes_signals_on_and_lets_go_of_its_source() -> None:
    seen = await expect(evens(from_async_iterable(Counter(5))))
    assert seen.items == [0, 2, 4]
    assert seen.outcome == Outcome.completed()
    boom = ValueError("boom")
    assert (await expect(evens(reactivex.throw(boom)))).error is boom
    counter = Counter()
    running = expect(evens(from_async_iterable(counter)))
    await counter.until_pulled(3)
    running.dispose()
    await counter.closed.wait()
    assert running.outcome is None
    first, second = await expect(evens(sync_of(1, 2))), await expect(evens(sync_of(1, 2)))
    assert first.items == second.items == [2]


async def test_subscribe_sink_hands_the_sink_itself_to_a_source_and_reports_a_failing_subscribe() -> None:
    observers: list[object] = []

    def subscribe(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Disposable:
        observers.append(observer)
        raise RuntimeError("no loop")

    errors: list[Exception] = []

    class Collect(Relay[int]):
        __slots__ = ()

        def on_error(self, error: Exception) -> None:
            errors.append(error)

    sink = Collect(Observer[int]())  # its observer is never reached here
    subscription = subscribe_sink(Source(subscribe), sink)
    assert observers == [sink]  # no wrapper in between
    assert [type(error) for error in errors] == [RuntimeError]
    assert subscription is NO_SUBSCRIPTION
    NO_SUBSCRIPTION.dispose()  # nothing to dispose, any number of times


def test_subscribe_through_passes_the_subscribers_own_observer() -> None:
    seen: list[object] = []

    def inner(observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None) -> Disposable:
        seen.append(observer)
        observer.on_next(1)
        observer.on_completed()
        return Disposable()

    def outer(
        observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        seen.append(observer)
        return subscribe_through(Source(inner), observer, scheduler)

    log, callbacks = record()
    subscribe_to(Source(outer), **callbacks)
    assert log == [1, "completed"]
    assert seen[0] is seen[1]  # the same observer: the outer stream adds no link


def test_a_slot_runs_its_action_once_and_disposes_what_it_holds() -> None:
    actions: list[str] = []
    disposed: list[str] = []
    slot = Slot(lambda: actions.append("action"))
    slot.current = Disposable(lambda: disposed.append("first"))
    slot.current = Disposable(lambda: disposed.append("second"))  # replacing disposes the one before
    assert disposed == ["first"]
    slot.dispose()
    slot.dispose()
    assert disposed == ["first", "second"]
    assert actions == ["action"]
    slot.current = Disposable(lambda: disposed.append("late"))  # after dispose: disposed at once
    assert disposed == ["first", "second", "late"]


async def test_a_source_makes_its_lock_only_for_the_reactivex_operators_that_ask() -> None:
    # No RLock per observable (several per agent step); take_while synchronises on its source's lock.
    source = from_async_iterable(Counter(5))
    assert isinstance(source, Source)
    assert source._lock is None  # pyright: ignore[reportPrivateUsage]
    seen = await expect(source.pipe(ops.take_while(lambda item: item < 3)))
    assert seen.items == [0, 1, 2]
    assert seen.outcome == Outcome.completed()
    made = source._lock  # pyright: ignore[reportPrivateUsage]
    assert made is not None  # take_while asked for it
    assert source.lock is made
