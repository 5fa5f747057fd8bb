"""last_value / to_list: observable → awaitable, cancellable."""

from __future__ import annotations

import asyncio
import doctest
import threading

import pytest
import reactivex
from reactivex import operators as ops

import rxagent.operators._awaitables
from rxagent.operators import from_async_iterable, last_value, to_list
from tests.streams import Counter


async def test_last_value_completes() -> None:
    assert await last_value(from_async_iterable(Counter(4))) == 3
    assert await last_value(reactivex.of("a", "b")) == "b"


async def test_last_value_of_an_empty_stream_is_a_lookup_error() -> None:
    with pytest.raises(LookupError, match="completed without emitting any item"):
        await last_value(reactivex.empty())


async def test_last_value_errors() -> None:
    boom = ValueError("boom")
    with pytest.raises(ValueError, match="boom") as raised:
        await last_value(from_async_iterable(Counter(2, error=boom)))
    assert raised.value is boom


async def test_last_value_cancel_disposes_upstream() -> None:
    counter = Counter()
    waiting = asyncio.create_task(last_value(from_async_iterable(counter)))
    await counter.until_pulled(2)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await counter.closed.wait()
    await asyncio.wait(counter.tasks)
    assert counter.tasks[0].cancelled()


async def test_last_value_resubscribe_is_cold() -> None:
    counter = Counter(2)
    source = from_async_iterable(counter)
    assert await last_value(source) == await last_value(source) == 1
    assert counter.starts == 2


async def test_to_list_completes() -> None:
    assert await to_list(from_async_iterable(Counter(3))) == [0, 1, 2]
    assert await to_list(reactivex.empty()) == []


async def test_to_list_errors() -> None:
    with pytest.raises(KeyError):
        await to_list(from_async_iterable(Counter(3, error=KeyError("k"))))


async def test_to_list_cancel_disposes_upstream() -> None:
    counter = Counter()
    waiting = asyncio.create_task(to_list(from_async_iterable(counter)))
    await counter.until_pulled(3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await counter.closed.wait()
    pulled = counter.pulled
    await asyncio.wait(counter.tasks)
    assert counter.pulled == pulled


async def test_to_list_resubscribe_is_cold() -> None:
    counter = Counter(2)
    source = from_async_iterable(counter)
    assert await to_list(source) == await to_list(source) == [0, 1]
    assert counter.starts == 2


async def test_time_based_operators_run_on_the_awaiting_loop() -> None:
    threads: list[int] = []
    source = reactivex.of(1, 2).pipe(
        ops.delay(0.001), ops.do_action(lambda _: threads.append(threading.get_ident()))
    )
    assert await to_list(source) == [1, 2]
    assert threads == [threading.get_ident()] * 2


def test_awaitables_examples() -> None:
    results = doctest.testmod(rxagent.operators._awaitables)
    assert results.attempted > 0
    assert results.failed == 0
