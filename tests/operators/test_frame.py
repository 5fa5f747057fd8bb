"""frame: items before, a mapping of each item, items after, in one subscription; recover, until, inject.

The same contract for a :class:`Frame` subclass, whose mapping is its methods.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import reactivex
from reactivex import Observable, abc
from reactivex.subject import Subject

from rxagent.operators import Frame, Outcome, Source, frame, frame_pushing, from_async_iterable, sync_of
from tests.streams import Counter, FrameHooks, expect


def doubled(item: int) -> tuple[int, ...]:
    return (item, item * 10)


@contextmanager
def collector_off() -> Iterator[None]:
    """Reference counting alone must free what a finished stream held: no garbage collector."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def test_frame_completes() -> None:
    source = from_async_iterable(Counter(2)).pipe(frame(doubled, before=lambda: (-1,), after=lambda: (99,)))
    seen = await expect(source)
    assert seen.items == [-1, 0, 0, 1, 10, 99]
    assert seen.outcome == Outcome.completed()


async def test_frame_errors_from_the_source_the_mapper_and_after() -> None:
    boom = ValueError("boom")
    assert (await expect(reactivex.throw(boom).pipe(frame(doubled)))).error is boom

    def failing(item: int) -> tuple[int]:
        raise KeyError(item)

    mapped = await expect(sync_of(1, 2).pipe(frame(failing)))
    assert isinstance(mapped.error, KeyError)
    assert mapped.items == []
    assert mapped.signals == 1

    def after() -> tuple[int]:
        raise boom

    late = await expect(sync_of(1).pipe(frame(doubled, after=after)))
    assert late.items == [1, 10]
    assert late.error is boom


async def test_frame_recover_continues_with_another_stream_or_lets_the_error_stand() -> None:
    boom = ValueError("boom")
    failing = reactivex.concat(sync_of(1), reactivex.throw(boom))
    recovered = await expect(failing.pipe(frame(doubled, recover=lambda error: sync_of(7, 8))))
    assert recovered.items == [1, 10, 7, 8]
    assert recovered.outcome == Outcome.completed()

    standing = await expect(failing.pipe(frame(doubled, recover=lambda error: None)))
    assert standing.error is boom

    def broken(error: Exception) -> None:
        raise RuntimeError("recovery failed")

    replaced = await expect(failing.pipe(frame(doubled, recover=broken)))
    assert isinstance(replaced.error, RuntimeError)


async def test_frame_cancel_disposes_upstream_and_unregisters_hooks() -> None:
    counter = Counter()
    hooks = FrameHooks()
    seen = expect(from_async_iterable(counter).pipe(frame(doubled, until=hooks.until, inject=hooks.inject)))
    await counter.until_pulled(3)
    assert sorted(hooks.registered) == ["inject", "until"]
    seen.dispose()
    await counter.closed.wait()
    assert counter.closes == 1
    assert hooks.registered == []
    assert seen.outcome is None  # a cancel ends silently


async def test_frame_until_ends_the_source_early_as_a_completion() -> None:
    counter = Counter()
    stops: list[Callable[[], None]] = []
    source = from_async_iterable(counter).pipe(
        frame(doubled, after=lambda: ("after",), until=lambda stop: stops.append(stop) or (lambda: None))
    )
    seen = expect(source)
    await counter.until_pulled(2)
    stops[0]()
    await seen
    assert seen.items[-1] == "after"
    assert seen.outcome == Outcome.completed()
    await counter.closed.wait()  # the source was disposed


async def test_frame_inject_routes_outside_items_through_each() -> None:
    subject: Subject[int] = Subject()
    pushes: list[Callable[[int], None]] = []
    seen = expect(subject.pipe(frame(doubled, inject=lambda push: pushes.append(push) or (lambda: None))))
    subject.on_next(1)
    pushes[0](5)
    subject.on_completed()
    assert (await seen).items == [1, 10, 5, 50]


async def test_frame_resubscribe_is_cold() -> None:
    befores: list[int] = []
    source = from_async_iterable(Counter(1)).pipe(frame(doubled, before=lambda: befores.append(1) or ()))
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [0, 0]
    assert befores == [1, 1]


async def test_a_finished_frame_is_freed_without_the_garbage_collector() -> None:
    class Marker:
        pass

    with collector_off():
        marker = Marker()
        alive = weakref.ref(marker)

        def each(item: int, held: Marker = marker) -> tuple[int]:
            return (item,)

        seen = await expect(from_async_iterable(Counter(3)).pipe(frame(each, after=lambda: (9,))))
        assert seen.items == [0, 1, 2, 9]
        del marker, each, seen
        assert alive() is None


# ---- frame_pushing: the same contract, the mapper emitting its results itself ---------------------------


def pushed(item: int, emit: Callable[[int], None]) -> None:
    emit(item)
    emit(item * 10)


async def test_frame_pushing_completes() -> None:
    source = from_async_iterable(Counter(2)).pipe(
        frame_pushing(pushed, before=lambda: (-1,), after=lambda: (99,))
    )
    seen = await expect(source)
    assert seen.items == [-1, 0, 0, 1, 10, 99]
    assert seen.outcome == Outcome.completed()


async def test_frame_pushing_errors_from_the_source_the_mapper_and_downstream() -> None:
    boom = ValueError("boom")
    assert (await expect(reactivex.throw(boom).pipe(frame_pushing(pushed)))).error is boom

    def failing(item: int, emit: Callable[[int], None]) -> None:
        emit(item)
        raise KeyError(item)

    mapped = await expect(sync_of(1, 2).pipe(frame_pushing(failing)))
    assert isinstance(mapped.error, KeyError)
    assert mapped.items == [1]  # what it emitted before failing, then nothing more
    assert mapped.signals == 1

    counter = Counter()
    seen: list[int] = []
    failures: list[Exception] = []

    def refuse(item: int) -> None:
        seen.append(item)
        raise RuntimeError("downstream refused")

    from_async_iterable(counter).pipe(frame_pushing(pushed)).subscribe(refuse, failures.append)
    await counter.closed.wait()  # the failure ended the stream: the source was disposed
    assert seen == [0]
    assert [str(error) for error in failures] == ["downstream refused"]


async def test_frame_pushing_recover_continues_with_another_stream() -> None:
    failing = reactivex.concat(sync_of(1), reactivex.throw(ValueError("boom")))
    recovered = await expect(failing.pipe(frame_pushing(pushed, recover=lambda error: sync_of(7))))
    assert recovered.items == [1, 10, 7]
    assert recovered.outcome == Outcome.completed()


async def test_frame_pushing_cancel_disposes_upstream_and_unregisters_hooks() -> None:
    counter = Counter()
    hooks = FrameHooks()
    seen = expect(
        from_async_iterable(counter).pipe(frame_pushing(pushed, until=hooks.until, inject=hooks.inject))
    )
    await counter.until_pulled(3)
    assert sorted(hooks.registered) == ["inject", "until"]
    seen.dispose()
    await counter.closed.wait()
    assert counter.closes == 1


class Tally(Frame[int, int]):
    """A frame with methods: each item doubled, the count of items after them, a recovery stream."""

    __slots__ = ("seen",)

    def __init__(self, observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None) -> None:
        super().__init__(observer, scheduler)
        self.seen = 0  # per subscription, in the frame's own slots

    def each(self, value: int) -> tuple[int]:
        self.seen += 1
        return (value * 2,)

    def after(self) -> tuple[int]:
        return (100 + self.seen,)

    def recover(self, error: Exception) -> Observable[int] | None:
        return sync_of(-1) if isinstance(error, KeyError) else None


def tallied(source: Observable[int], hooks: FrameHooks | None = None) -> Observable[int]:
    def subscribe(
        observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None
    ) -> Frame[int, int]:
        framed = Tally(observer, scheduler)
        if hooks is None:
            return framed.attach(source, before=lambda: (7,))
        return framed.attach(source, until=hooks.until, inject=hooks.inject)

    return Source(subscribe)


async def test_a_frame_subclass_completes_with_its_after() -> None:
    seen = await expect(tallied(from_async_iterable(Counter(3))))
    assert seen.items == [7, 0, 2, 4, 103]
    assert seen.outcome == Outcome.completed()


async def test_a_frame_subclass_errors_or_recovers() -> None:
    boom = ValueError("boom")
    failed = await expect(tallied(reactivex.concat(sync_of(1), reactivex.throw(boom))))
    assert failed.items == [7, 2]
    assert failed.error is boom
    recovered = await expect(tallied(reactivex.concat(sync_of(1), reactivex.throw(KeyError("k")))))
    assert recovered.items == [7, 2, -1]
    assert recovered.outcome == Outcome.completed()


async def test_a_frame_subclass_cancel_disposes_upstream_and_unregisters_hooks() -> None:
    counter = Counter()
    hooks = FrameHooks()
    seen = expect(tallied(from_async_iterable(counter), hooks))
    await counter.until_pulled(2)
    assert sorted(hooks.registered) == ["inject", "until"]
    seen.dispose()
    await counter.closed.wait()
    assert hooks.registered == []
    assert seen.outcome is None


async def test_frame_pushing_inject_routes_outside_items_through_push() -> None:
    subject: Subject[int] = Subject()
    pushes: list[Callable[[int], None]] = []
    seen = expect(
        subject.pipe(frame_pushing(pushed, inject=lambda push: pushes.append(push) or (lambda: None)))
    )
    subject.on_next(1)
    pushes[0](5)
    subject.on_completed()
    assert (await seen).items == [1, 10, 5, 50]


async def test_frame_pushing_resubscribe_is_cold() -> None:
    befores: list[int] = []
    source = from_async_iterable(Counter(1)).pipe(
        frame_pushing(pushed, before=lambda: befores.append(1) or ())
    )
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [0, 0]
    assert befores == [1, 1]


async def test_a_finished_frame_pushing_is_freed_without_the_garbage_collector() -> None:
    class Marker:
        pass

    with collector_off():
        marker = Marker()
        alive = weakref.ref(marker)

        def push(item: int, emit: Callable[[int], None], held: Marker = marker) -> None:
            emit(item)

        seen = await expect(from_async_iterable(Counter(3)).pipe(frame_pushing(push, after=lambda: (9,))))
        assert seen.items == [0, 1, 2, 9]
        del marker, push, seen
        assert alive() is None


async def test_a_frame_subclass_resubscribe_is_cold() -> None:
    source = tallied(from_async_iterable(Counter(2)))
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [7, 0, 2, 102]  # each subscription counts from zero


async def test_a_frame_is_the_callback_its_until_hook_gets() -> None:
    # Calling the frame ends it as a completion: the hook needs no bound method or closure of its own.
    counter = Counter()
    stops: list[Callable[[], None]] = []

    def until(stop: Callable[[], None]) -> Callable[[], None]:
        stops.append(stop)
        return lambda: None

    def subscribe(
        observer: abc.ObserverBase[int], scheduler: abc.SchedulerBase | None = None
    ) -> Frame[int, int]:
        return Tally(observer, scheduler).attach(from_async_iterable(counter), until=until)

    seen = expect(Source(subscribe))
    await counter.until_pulled(2)
    assert isinstance(stops[0], Tally)
    stops[0]()
    await seen
    assert seen.items[-1] == 100 + len(seen.items) - 1
    assert seen.outcome == Outcome.completed()
    await counter.closed.wait()
