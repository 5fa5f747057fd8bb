"""to_async_iterator: observable → async iterator through a bounded buffer (block | drop_oldest | error)."""

from __future__ import annotations

import asyncio
import contextlib
import doctest
from collections.abc import AsyncIterator, Iterator

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops

import rxagent.operators._to_async_iterator
from rxagent.operators import BufferOverflowError, OverflowPolicy, from_async_iterable, to_async_iterator
from tests.streams import Counter


async def collect(source: Observable[int], *, max_buffer: int = 256) -> list[int]:
    return [item async for item in to_async_iterator(source, max_buffer=max_buffer)]


async def consume_into(
    iterator: AsyncIterator[int], received: list[int], *, fail_at: int | None = None
) -> None:
    """Append every item to ``received``; raise ``KeyError`` in the loop body at item ``fail_at``."""
    async for item in iterator:
        if item == fail_at:
            raise KeyError(item)
        received.append(item)


def numbers(count: int, pulled: list[int]) -> Iterator[int]:
    """0 … count-1, recording how far a synchronous source got."""
    for number in range(count):
        pulled.append(number)
        yield number


async def test_to_async_iterator_completes() -> None:
    assert await collect(from_async_iterable(Counter(5))) == [0, 1, 2, 3, 4]
    assert await collect(reactivex.empty()) == []


async def test_to_async_iterator_errors_after_the_buffered_items() -> None:
    boom = ValueError("boom")
    source: Observable[int] = reactivex.concat(reactivex.of(1, 2, 3), reactivex.throw(boom))
    iterator = to_async_iterator(source)
    received: list[int] = []
    with pytest.raises(ValueError, match="boom") as raised:
        await consume_into(iterator, received)
    assert received == [1, 2, 3]
    assert raised.value is boom


async def test_to_async_iterator_subscribes_lazily() -> None:
    counter = Counter(2)
    iterator = to_async_iterator(from_async_iterable(counter))
    for _ in range(5):
        await asyncio.sleep(0)
    assert counter.starts == 0
    assert await anext(iterator) == 0
    assert counter.starts == 1
    await iterator.aclose()


async def test_to_async_iterator_cancel_disposes_upstream() -> None:
    counter = Counter()
    consumer_waiting = asyncio.Event()

    async def consume_forever() -> None:
        async for _ in to_async_iterator(from_async_iterable(counter), max_buffer=4):
            consumer_waiting.set()

    task = asyncio.create_task(consume_forever())
    await consumer_waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await counter.closed.wait()
    await asyncio.wait(counter.tasks)
    assert counter.tasks[0].cancelled()


async def test_to_async_iterator_cancel_while_waiting_for_an_item_disposes_upstream() -> None:
    counter = Counter(1, then_wait=True)
    first = asyncio.Event()

    async def consume() -> None:
        async for _ in to_async_iterator(from_async_iterable(counter)):
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    await asyncio.sleep(0)  # the consumer is now parked in __anext__, the source in its endless wait
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await counter.closed.wait()
    assert counter.closes == 1


async def test_to_async_iterator_break_disposes_upstream() -> None:
    counter = Counter()
    async for item in to_async_iterator(from_async_iterable(counter)):
        if item == 2:
            break
    async with asyncio.timeout(5):  # the loop's async-generator finalizer closes it on its next turn
        await counter.closed.wait()


async def test_to_async_iterator_exception_in_the_loop_body_disposes_upstream() -> None:
    counter = Counter()
    with pytest.raises(KeyError):
        await consume_into(to_async_iterator(from_async_iterable(counter)), [], fail_at=1)
    async with asyncio.timeout(5):
        await counter.closed.wait()


async def test_to_async_iterator_aclose_disposes_upstream() -> None:
    counter = Counter()
    iterator = to_async_iterator(from_async_iterable(counter))
    assert await anext(iterator) == 0
    await iterator.aclose()
    await counter.closed.wait()
    with pytest.raises(StopAsyncIteration):
        await anext(iterator)


async def test_to_async_iterator_aclosing_disposes_upstream() -> None:
    counter = Counter()
    async with contextlib.aclosing(to_async_iterator(from_async_iterable(counter))) as iterator:
        assert await anext(iterator) == 0
    await counter.closed.wait()


async def test_to_async_iterator_resubscribe_is_cold() -> None:
    counter = Counter(3)
    source = from_async_iterable(counter)
    assert await collect(source) == await collect(source) == [0, 1, 2]
    assert counter.starts == 2


async def test_to_async_iterator_block_pauses_a_cooperative_source() -> None:
    counter = Counter()
    iterator = to_async_iterator(from_async_iterable(counter), max_buffer=8, low_watermark=2)
    assert await anext(iterator) == 0
    await counter.until_pulled(9)  # item 0 plus a full buffer of 8
    for _ in range(50):
        await asyncio.sleep(0)
    assert counter.pulled == 9  # paused at the high watermark

    for expected in range(1, 6):  # buffer 8 → 3: still above the low watermark
        assert await anext(iterator) == expected
    for _ in range(20):
        await asyncio.sleep(0)
    assert counter.pulled == 9

    assert await anext(iterator) == 6  # buffer 2: at the low watermark, the gate reopens
    await counter.until_pulled(10)
    await iterator.aclose()
    await counter.closed.wait()


async def test_to_async_iterator_block_keeps_a_slow_consumer_bounded() -> None:
    counter = Counter()
    consumed = 0
    peak_lag = 0
    async for item in to_async_iterator(from_async_iterable(counter), max_buffer=16):
        assert item == consumed
        consumed += 1
        peak_lag = max(peak_lag, counter.pulled - consumed)
        for _ in range(5):  # a consumer several times slower than the producer
            await asyncio.sleep(0)
        if consumed == 300:
            break
    assert 12 <= peak_lag <= 16


async def test_to_async_iterator_block_gates_sources_subscribed_later_by_flat_map() -> None:
    outer = Counter(3)
    inners = [Counter() for _ in range(3)]
    source = from_async_iterable(outer).pipe(ops.flat_map(lambda index: from_async_iterable(inners[index])))
    consumed = 0
    async for _ in to_async_iterator(source, max_buffer=8):
        consumed += 1
        for _ in range(5):
            await asyncio.sleep(0)
        if consumed == 200:
            break
    buffered = sum(inner.pulled for inner in inners) - consumed
    assert buffered <= 2 * 8  # the inner endless producers were paused: no overflow, bounded lag


async def test_to_async_iterator_block_accepts_a_burst_within_the_hard_cap() -> None:
    def burst(index: int) -> Observable[int]:  # ten items at once for every item of the outer source
        return reactivex.from_iterable(range(index * 10, index * 10 + 10))

    source = from_async_iterable(Counter(20)).pipe(ops.flat_map(burst))
    assert await collect(source, max_buffer=8) == list(range(200))


async def test_to_async_iterator_block_fails_a_source_that_cannot_pause_beyond_the_hard_cap() -> None:
    pulled: list[int] = []
    iterator = to_async_iterator(reactivex.from_iterable(numbers(100, pulled)), max_buffer=10)
    with pytest.raises(BufferOverflowError, match="hard cap of 74 items"):
        await anext(iterator)  # immediate: the 74 buffered items are discarded
    assert len(pulled) == 75  # the source was disposed at the first item beyond the cap (10 + 64)
    assert await collect(reactivex.from_iterable(range(74)), max_buffer=10) == list(range(74))
    with pytest.raises(BufferOverflowError, match="hard cap of 400 items"):  # 200 + 200
        await anext(to_async_iterator(reactivex.from_iterable(range(1000)), max_buffer=200))


async def test_to_async_iterator_drop_oldest_keeps_the_newest() -> None:
    source = reactivex.from_iterable(range(100))
    assert await collect_with(source, max_buffer=10, overflow="drop_oldest") == list(range(90, 100))


async def test_to_async_iterator_error_policy_fails_when_full() -> None:
    pulled: list[int] = []
    iterator = to_async_iterator(
        reactivex.from_iterable(numbers(100, pulled)), max_buffer=10, overflow="error"
    )
    with pytest.raises(BufferOverflowError, match="full"):
        await anext(iterator)
    assert len(pulled) == 11
    assert await collect_with(reactivex.from_iterable(range(10)), max_buffer=10, overflow="error") == list(
        range(10)
    )


async def collect_with(source: Observable[int], *, max_buffer: int, overflow: OverflowPolicy) -> list[int]:
    return [item async for item in to_async_iterator(source, max_buffer=max_buffer, overflow=overflow)]


@pytest.mark.parametrize(
    ("max_buffer", "low_watermark", "overflow"),
    [(0, None, "block"), (8, 8, "block"), (8, -1, "block"), (8, None, "wait")],
)
def test_to_async_iterator_rejects_bad_settings_at_call_time(
    max_buffer: int, low_watermark: int | None, overflow: OverflowPolicy
) -> None:
    with pytest.raises(ValueError, match=r"max_buffer|low_watermark|overflow"):
        to_async_iterator(
            reactivex.empty(), max_buffer=max_buffer, low_watermark=low_watermark, overflow=overflow
        )


def test_to_async_iterator_examples() -> None:
    results = doctest.testmod(rxagent.operators._to_async_iterator)
    assert results.attempted > 0
    assert results.failed == 0
