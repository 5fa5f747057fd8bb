"""from_async_iterable: async iterator → cold, loop-bound, cancellable observable."""

from __future__ import annotations

import asyncio
import doctest
from collections.abc import AsyncIterator

import pytest
from reactivex import operators as ops

import rxagent.operators._from_async_iterable
from rxagent.operators import Outcome, from_async_batches, from_async_iterable, last_value
from rxagent.operators._flow_control import FlowGate, current_gate
from tests.streams import Counter, expect


async def let_loop_run(turns: int = 20) -> None:
    """Give every ready task a few chances to run (to show that something does *not* happen)."""
    for _ in range(turns):
        await asyncio.sleep(0)


async def test_from_async_iterable_completes() -> None:
    counter = Counter(3)
    seen = await expect(from_async_iterable(counter))
    assert seen.items == [0, 1, 2]
    assert seen.outcome == Outcome.completed()
    assert counter.closes == 1


async def test_from_async_iterable_errors() -> None:
    boom = ValueError("boom")
    counter = Counter(2, error=boom)
    seen = await expect(from_async_iterable(counter))
    assert seen.items == [0, 1]
    assert seen.error is boom
    assert seen.signals == 1
    assert counter.closes == 1


async def test_from_async_iterable_errors_when_the_factory_raises() -> None:
    def factory() -> AsyncIterator[int]:
        raise LookupError("no such stream")

    seen = await expect(from_async_iterable(factory))
    assert isinstance(seen.error, LookupError)
    assert seen.items == []


async def test_from_async_iterable_errors_when_the_subscriber_on_next_raises() -> None:
    counter = Counter(5)
    received: list[int] = []
    failed: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()

    def on_next(item: int) -> None:
        if item == 1:
            raise RuntimeError("bad item")
        received.append(item)

    from_async_iterable(counter).subscribe(on_next, failed.set_result)
    assert isinstance(await failed, RuntimeError)
    await counter.closed.wait()
    assert received == [0]
    assert counter.pulled == 2


async def test_from_async_iterable_cancel_disposes_upstream() -> None:
    counter = Counter()
    seen = expect(from_async_iterable(counter))
    await counter.until_pulled(2)
    seen.dispose()
    await counter.closed.wait()
    await asyncio.wait(counter.tasks)
    assert counter.tasks[0].cancelled()
    pulled = counter.pulled
    await let_loop_run()
    assert counter.pulled == pulled
    assert len(seen.items) == pulled
    assert seen.outcome is None


async def test_from_async_iterable_resubscribe_is_cold() -> None:
    counter = Counter(3)
    source = from_async_iterable(counter)
    assert counter.starts == 0
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [0, 1, 2]
    assert counter.starts == 2
    assert counter.closes == 2


async def test_from_async_iterable_take_pulls_only_what_it_needs() -> None:
    counter = Counter()
    assert await last_value(from_async_iterable(counter).pipe(ops.take(3))) == 2
    await counter.closed.wait()
    assert counter.pulled == 3
    assert not counter.tasks[0].cancelled()  # it stopped by itself, cleanup uninterrupted


def test_from_async_iterable_subscribed_outside_a_loop_is_a_clear_error() -> None:
    errors: list[Exception] = []
    from_async_iterable(Counter(1)).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)
    assert "running asyncio event loop" in str(errors[0])

    with pytest.raises(RuntimeError, match="loop-bound"):
        from_async_iterable(Counter(1)).subscribe()


async def test_from_async_iterable_pauses_while_the_flow_gate_is_closed() -> None:
    counter = Counter(10)
    gate = FlowGate()
    token = current_gate.set(gate)
    try:
        seen = expect(from_async_iterable(counter).pipe(ops.do_action(on_next=lambda _: gate.close())))
    finally:
        current_gate.reset(token)
    await counter.until_pulled(1)
    await let_loop_run()
    assert counter.pulled == 1
    assert seen.items == [0]

    gate.open()
    await counter.until_pulled(2)
    gate.open()  # it closes after every item; keep opening until the end
    await counter.until_pulled(3)
    assert seen.items[:3] == [0, 1, 2]
    seen.dispose()
    await counter.closed.wait()


async def test_from_async_iterable_disposed_inside_on_next_does_not_wait_on_a_closed_gate() -> None:
    counter = Counter()
    gate = FlowGate()

    def close_gate_and_stop(_: int) -> None:
        gate.close()
        seen.dispose()

    token = current_gate.set(gate)
    try:
        seen = expect(from_async_iterable(counter).pipe(ops.do_action(on_next=close_gate_and_stop)))
    finally:
        current_gate.reset(token)
    async with asyncio.timeout(5):  # a safety net: it would hang here if it waited on the gate
        await counter.closed.wait()
    assert counter.pulled == 1
    assert not gate.is_open


class _FailingClose:
    """An async iterator (not a generator) whose cleanup fails."""

    def __init__(self) -> None:
        self.items = iter([1, 2])

    def __aiter__(self) -> _FailingClose:
        return self

    async def __anext__(self) -> int:
        try:
            return next(self.items)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        raise OSError("close failed")


async def test_from_async_iterable_errors_when_the_iterator_cleanup_fails() -> None:
    async with asyncio.timeout(5):  # a safety net: a swallowed cleanup error would leave it hanging
        seen = await expect(from_async_iterable(_FailingClose))
    assert seen.items == [1, 2]
    assert isinstance(seen.error, OSError)


def test_from_async_iterable_examples() -> None:
    results = doctest.testmod(rxagent.operators._from_async_iterable)
    assert results.attempted > 0
    assert results.failed == 0


# ---- from_async_batches: the iterator yields lists, each item is emitted on its own -------------------


class Batches:
    """A factory of async generators yielding ``batches`` (then endless ``[n]`` batches when ``forever``)
    and then raising ``error`` if given; it records pulls, starts and cleanups as :class:`Counter` does."""

    def __init__(self, *batches: list[int], error: Exception | None = None, forever: bool = False) -> None:
        self.batches = batches
        self.error = error
        self.forever = forever
        self.starts = 0
        self.pulled = 0
        self.closes = 0
        self.closed = asyncio.Event()
        self.three_pulled = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def __call__(self) -> AsyncIterator[list[int]]:
        return self._generate()

    async def _generate(self) -> AsyncIterator[list[int]]:
        self.starts += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.append(task)
        try:
            for batch in self.batches:
                await asyncio.sleep(0)
                self.pulled += 1
                yield batch
            number = 100
            while self.forever:
                await asyncio.sleep(0)
                self.pulled += 1
                if self.pulled == 3:
                    self.three_pulled.set()
                yield [number]
                number += 1
            if self.error is not None:
                raise self.error
        finally:
            self.closes += 1
            self.closed.set()


async def test_from_async_batches_completes_emitting_each_item() -> None:
    batches = Batches([0, 1], [2], [], [3, 4])
    seen = await expect(from_async_batches(batches))
    assert seen.items == [0, 1, 2, 3, 4]
    assert seen.outcome == Outcome.completed()
    assert batches.closes == 1


async def test_from_async_batches_errors_after_the_items_before_it() -> None:
    boom = ValueError("boom")
    batches = Batches([0, 1], [2], error=boom)
    seen = await expect(from_async_batches(batches))
    assert seen.items == [0, 1, 2]
    assert seen.error is boom
    assert seen.signals == 1
    assert batches.closes == 1


async def test_from_async_batches_take_stops_inside_a_batch() -> None:
    batches = Batches([0, 1, 2, 3], [4, 5])
    assert await last_value(from_async_batches(batches).pipe(ops.take(2))) == 1
    await batches.closed.wait()
    assert batches.pulled == 1  # the second batch was never asked for
    assert not batches.tasks[0].cancelled()  # it stopped by itself, cleanup uninterrupted


async def test_from_async_batches_cancel_disposes_upstream() -> None:
    batches = Batches([0, 1], forever=True)
    seen = expect(from_async_batches(batches))
    await batches.three_pulled.wait()
    seen.dispose()
    await batches.closed.wait()
    await asyncio.wait(batches.tasks)
    assert batches.tasks[0].cancelled()
    count = len(seen.items)
    await let_loop_run()
    assert len(seen.items) == count
    assert seen.outcome is None


async def test_from_async_batches_pauses_inside_a_batch_while_the_flow_gate_is_closed() -> None:
    batches = Batches([0, 1, 2], [3])
    gate = FlowGate()
    token = current_gate.set(gate)
    try:
        seen = expect(from_async_batches(batches).pipe(ops.do_action(on_next=lambda _: gate.close())))
    finally:
        current_gate.reset(token)
    await let_loop_run()
    assert seen.items == [0]  # the rest of the batch waits for the gate
    gate.open()
    await let_loop_run()
    assert seen.items == [0, 1]
    for _ in range(3):
        gate.open()
        await let_loop_run()
    assert seen.items == [0, 1, 2, 3]
    assert seen.outcome == Outcome.completed()


async def test_from_async_batches_resubscribe_is_cold() -> None:
    batches = Batches([0], [1, 2])
    source = from_async_batches(batches)
    assert batches.starts == 0
    first = await expect(source)
    second = await expect(source)
    assert first.items == second.items == [0, 1, 2]
    assert batches.starts == 2
    assert batches.closes == 2
