"""do_finally: action(outcome) exactly once, saying why the stream ended."""

from __future__ import annotations

import asyncio
import doctest
import logging
from collections.abc import Callable

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops
from reactivex.subject import Subject

import rxagent.operators._do_finally
from rxagent.operators import Outcome, do_finally, from_async_iterable, to_list
from tests.streams import Counter, expect


def recorder() -> tuple[list[object], Callable[[Outcome], None]]:
    """A shared log and an action that appends its outcome to it."""
    log: list[object] = []
    return log, log.append


async def test_do_finally_completes() -> None:
    log: list[object] = []
    finished = asyncio.Event()

    def action(outcome: Outcome) -> None:
        log.append(outcome)
        finished.set()

    source = from_async_iterable(Counter(2)).pipe(do_finally(action))
    source.subscribe(log.append, log.append, lambda: log.append("on_completed"))
    await finished.wait()
    assert log == [0, 1, "on_completed", Outcome.completed()]


async def test_do_finally_errors() -> None:
    log, action = recorder()
    boom = ValueError("boom")
    seen = expect(reactivex.throw(boom).pipe(do_finally(action)))
    seen_error = (await seen).error
    assert seen_error is boom
    assert log == [Outcome.failed(boom)]


async def test_do_finally_runs_after_the_error_is_delivered() -> None:
    log, action = recorder()
    boom = ValueError("boom")
    reactivex.throw(boom).pipe(do_finally(action)).subscribe(on_error=lambda e: log.append(("on_error", e)))
    assert log == [("on_error", boom), Outcome.failed(boom)]


async def test_do_finally_cancel_disposes_upstream() -> None:
    log, action = recorder()
    counter = Counter()
    seen = expect(from_async_iterable(counter).pipe(do_finally(action)))
    await counter.until_pulled(1)
    seen.dispose()
    assert log == [Outcome.cancelled()]
    await counter.closed.wait()
    seen.dispose()
    assert log == [Outcome.cancelled()]


async def test_do_finally_resubscribe_is_cold() -> None:
    log, action = recorder()
    attempts = 0

    def attempt(_: object) -> Observable[int]:
        nonlocal attempts
        attempts += 1
        return reactivex.throw(OSError("first")) if attempts == 1 else reactivex.of(1)

    source = reactivex.defer(attempt).pipe(do_finally(action))
    first = await expect(source)
    second = await expect(source)
    third = expect(reactivex.never().pipe(do_finally(action)))
    third.dispose()
    assert isinstance(first.error, OSError)
    assert second.items == [1]
    assert log == [Outcome.failed(first.error), Outcome.completed(), Outcome.cancelled()]


async def test_do_finally_dispose_after_complete_does_not_run_it_again() -> None:
    log, action = recorder()
    subject: Subject[int] = Subject()
    subscription = subject.pipe(do_finally(action)).subscribe()
    subject.on_next(1)
    subject.on_completed()
    subscription.dispose()
    assert log == [Outcome.completed()]


async def test_do_finally_disposed_inside_on_next_of_the_last_item_is_cancelled_once() -> None:
    log, action = recorder()
    # take(3) completes downstream and disposes upstream inside on_next of item 3, before `of` completes.
    assert await to_list(reactivex.of(1, 2, 3).pipe(do_finally(action), ops.take(3))) == [1, 2, 3]
    assert log == [Outcome.cancelled()]


async def test_do_finally_action_errors_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def broken(_: Outcome) -> None:
        raise RuntimeError("broken action")

    with caplog.at_level(logging.ERROR, logger="rxagent"):
        assert await to_list(reactivex.of(1).pipe(do_finally(broken))) == [1]
    assert "do_finally" in caplog.text
    assert "broken action" in caplog.text


def test_do_finally_examples() -> None:
    results = doctest.testmod(rxagent.operators._do_finally)
    assert results.attempted > 0
    assert results.failed == 0
