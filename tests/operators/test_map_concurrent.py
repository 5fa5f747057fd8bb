"""map_concurrent: at most n inner streams at once, in input order (a bounded hold) or as they come."""

from __future__ import annotations

import doctest

import pytest
import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable
from reactivex.subject import Subject

import rxagent.operators
from rxagent.operators import Outcome, map_concurrent, sync_of
from tests.streams import expect


class Inners:
    """Inner streams the test drives by hand: ``project(key)`` is a stream that records its life."""

    def __init__(self) -> None:
        self.subjects: dict[str, Subject[str]] = {}
        self.running: set[str] = set()
        self.disposed: list[str] = []
        self.peak = 0

    def project(self, key: str) -> Observable[str]:
        def subscribe(
            observer: abc.ObserverBase[str], scheduler: abc.SchedulerBase | None = None
        ) -> Disposable:
            subject: Subject[str] = Subject()
            self.subjects[key] = subject
            self.running.add(key)
            self.peak = max(self.peak, len(self.running))
            inner = subject.subscribe(observer)

            def dispose() -> None:
                if key in self.running:  # disposed before it ended
                    self.disposed.append(key)
                self.running.discard(key)
                inner.dispose()

            return Disposable(dispose)

        return Observable(subscribe)

    def finish(self, key: str, *items: str) -> None:
        subject = self.subjects[key]
        for item in items:
            subject.on_next(item)
        self.running.discard(key)
        subject.on_completed()

    def fail(self, key: str, error: Exception) -> None:
        self.running.discard(key)
        self.subjects[key].on_error(error)


async def test_map_concurrent_completes_in_input_order() -> None:
    inners = Inners()
    source: Subject[str] = Subject()
    seen = expect(source.pipe(map_concurrent(inners.project, 2)))
    for key in "abcd":
        source.on_next(key)
    source.on_completed()
    assert inners.running == {"a", "b"}  # c and d wait for a place
    inners.finish("b", "b1", "b2")  # after the head: held
    assert seen.items == []
    assert inners.running == {"a"}  # c is beyond the window [a, b] until a ends: the hold stays bounded
    inners.subjects["a"].on_next("a1")  # the head's items pass at once
    assert seen.items == ["a1"]
    inners.finish("a", "a2")
    assert seen.items == ["a1", "a2", "b1", "b2"]
    assert inners.running == {"c", "d"}
    inners.subjects["d"].on_next("d1")
    inners.finish("c", "c1")
    assert seen.items[-2:] == ["c1", "d1"]  # d's held item follows once c ended
    inners.finish("d", "d2")
    await seen
    assert seen.items == ["a1", "a2", "b1", "b2", "c1", "d1", "d2"]
    assert seen.outcome == Outcome.completed()
    assert inners.peak == 2
    assert inners.disposed == []


async def test_map_concurrent_unordered_emits_as_items_come() -> None:
    inners = Inners()
    seen = expect(reactivex.from_iterable("abcd").pipe(map_concurrent(inners.project, 2, ordered=False)))
    assert inners.running == {"a", "b"}
    inners.finish("b", "b1")
    assert seen.items == ["b1"]
    assert inners.running == {"a", "c"}  # a free place starts the next item at once
    inners.finish("c", "c1")
    inners.finish("d", "d1")
    inners.finish("a", "a1")
    await seen
    assert seen.items == ["b1", "c1", "d1", "a1"]
    assert seen.outcome == Outcome.completed()
    assert inners.peak == 2


async def test_map_concurrent_never_runs_more_than_the_limit_over_many_items() -> None:
    inners = Inners()
    keys = [f"k{i}" for i in range(50)]
    for ordered in (True, False):
        seen = expect(reactivex.from_iterable(keys).pipe(map_concurrent(inners.project, 4, ordered=ordered)))
        finished = 0
        while inners.running:
            assert len(inners.running) <= 4
            newest = max(inners.running, key=lambda key: int(key[1:]))  # finish out of order
            inners.finish(newest, newest)
            finished += 1
        await seen
        assert finished == 50
        assert inners.peak == 4
        if ordered:
            assert seen.items == keys
        else:
            assert sorted(seen.items, key=lambda key: int(key[1:])) == keys
            assert seen.items != keys


async def test_map_concurrent_errors_dispose_the_running_streams() -> None:
    boom = ValueError("boom")
    # an inner stream fails
    inners = Inners()
    seen = expect(reactivex.from_iterable("abc").pipe(map_concurrent(inners.project, 2)))
    inners.fail("b", boom)
    await seen
    assert seen.error is boom
    assert inners.disposed == ["a"]
    assert "c" not in inners.subjects  # never started
    # the source fails
    inners = Inners()
    source: Subject[str] = Subject()
    seen = expect(source.pipe(map_concurrent(inners.project, 2, ordered=False)))
    source.on_next("a")
    source.on_error(boom)
    await seen
    assert seen.error is boom
    assert inners.disposed == ["a"]

    # the projection fails
    def broken(item: str) -> Observable[str]:
        raise KeyError(item)

    failed = await expect(sync_of("a").pipe(map_concurrent(broken, 2)))
    assert isinstance(failed.error, KeyError)
    assert failed.signals == 1


async def test_map_concurrent_cancel_disposes_upstream_and_every_running_stream() -> None:
    inners = Inners()
    source: Subject[str] = Subject()
    seen = expect(source.pipe(map_concurrent(inners.project, 2)))
    for key in "abc":
        source.on_next(key)
    seen.dispose()
    assert sorted(inners.disposed) == ["a", "b"]
    assert not source.observers  # the source subscription went too
    source.on_next("d")
    assert "c" not in inners.subjects
    assert "d" not in inners.subjects
    assert seen.outcome is None
    assert seen.items == []


async def test_map_concurrent_resubscribe_is_cold() -> None:
    stream = reactivex.from_iterable([1, 2, 3]).pipe(map_concurrent(lambda n: sync_of(n, n * 10), 2))
    first = await expect(stream)
    second = await expect(stream)
    assert first.items == second.items == [1, 10, 2, 20, 3, 30]


async def test_map_concurrent_synchronous_streams_run_at_constant_depth() -> None:
    many = 20_000
    stream = reactivex.from_iterable(range(many)).pipe(map_concurrent(lambda n: sync_of(n), 3))
    seen = await expect(stream)
    assert seen.items == list(range(many))
    assert seen.outcome == Outcome.completed()


def test_map_concurrent_refuses_a_limit_below_one() -> None:
    for bad in (0, -3):
        with pytest.raises(ValueError, match="max_concurrent must be at least 1"):
            map_concurrent(sync_of, bad)


def test_map_concurrent_example() -> None:
    runner = doctest.DocTestRunner()
    globs = {"map_concurrent": map_concurrent, "to_list": rxagent.operators.to_list}
    for test in doctest.DocTestFinder().find(rxagent.operators.map_concurrent, globs=globs):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.attempted > 0
    assert results.failed == 0
