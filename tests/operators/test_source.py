"""Direct subscription between rxagent's observables keeps what reactivex's subscribe guarantees."""

from __future__ import annotations

from typing import Any

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops
from reactivex.disposable import Disposable

from rxagent.operators import Outcome, frame, from_async_iterable, run_steps, sync_of
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
