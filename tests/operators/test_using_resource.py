"""using_resource: acquire, stream, release exactly once with the outcome (completed | failed | cancelled)."""

from __future__ import annotations

import asyncio
import doctest
import logging

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops
from reactivex.subject import Subject

import rxagent.operators._using_resource
from rxagent.operators import Outcome, frame, from_async_iterable, sync_of, to_list, using_resource
from tests.streams import Counter, FrameHooks, expect


class Pool:
    """Hands out resources "r1", "r2", … and records every release with its outcome.

    Args:
        release_error: raised by release, after recording it.
        sync_release: release is a plain function instead of a coroutine function.
        hold_release: an async release waits for this event before returning.
    """

    def __init__(
        self,
        *,
        release_error: Exception | None = None,
        sync_release: bool = False,
        hold_release: asyncio.Event | None = None,
    ) -> None:
        self.release_error = release_error
        self.sync_release = sync_release
        self.hold_release = hold_release
        self.acquired: list[str] = []
        self.released: list[tuple[str, Outcome]] = []
        self.log: list[object] = []
        """Releases and downstream signals, in the order they happened."""
        self.release_done = asyncio.Event()

    async def acquire(self) -> str:
        await asyncio.sleep(0)
        resource = f"r{len(self.acquired) + 1}"
        self.acquired.append(resource)
        return resource

    def release(self, resource: str, outcome: Outcome) -> asyncio.Future[None] | None:
        if self.sync_release:
            self._record(resource, outcome)
            return None
        return asyncio.ensure_future(self._release_async(resource, outcome))

    async def _release_async(self, resource: str, outcome: Outcome) -> None:
        await asyncio.sleep(0)
        if self.hold_release is not None:
            await self.hold_release.wait()
        self._record(resource, outcome)

    def _record(self, resource: str, outcome: Outcome) -> None:
        self.released.append((resource, outcome))
        self.log.append(("release", outcome.kind))
        self.release_done.set()
        if self.release_error is not None:
            raise self.release_error

    def watch(self, source: Observable[int]) -> Observable[int]:
        """``source`` with its signals added to :attr:`log`."""
        return source.pipe(
            ops.do_action(
                on_next=lambda item: self.log.append(("on_next", item)),
                on_error=lambda error: self.log.append(("on_error", error)),
                on_completed=lambda: self.log.append("on_completed"),
            )
        )


async def test_using_resource_completes() -> None:
    pool = Pool()
    seen = await expect(pool.watch(using_resource(pool.acquire, lambda _: reactivex.of(1, 2), pool.release)))
    assert seen.items == [1, 2]
    assert seen.outcome == Outcome.completed()
    assert pool.released == [("r1", Outcome.completed())]
    assert pool.log == [("on_next", 1), ("on_next", 2), ("release", "completed"), "on_completed"]


async def test_using_resource_completes_with_a_sync_release() -> None:
    pool = Pool(sync_release=True)
    seen = await expect(pool.watch(using_resource(pool.acquire, lambda _: reactivex.of(1), pool.release)))
    assert seen.outcome == Outcome.completed()
    assert pool.log == [("on_next", 1), ("release", "completed"), "on_completed"]


async def test_using_resource_streams_what_use_makes_of_the_resource() -> None:
    pool = Pool()
    source = using_resource(pool.acquire, lambda r: reactivex.of(f"{r}:a", f"{r}:b"), pool.release)
    assert await to_list(source) == ["r1:a", "r1:b"]


async def test_using_resource_errors() -> None:
    pool = Pool()
    boom = ValueError("boom")

    def use(_: str) -> Observable[int]:
        return reactivex.concat(reactivex.of(1), reactivex.throw(boom))

    seen = await expect(pool.watch(using_resource(pool.acquire, use, pool.release)))
    assert seen.items == [1]
    assert seen.error is boom
    assert pool.released == [("r1", Outcome.failed(boom))]
    assert pool.log == [("on_next", 1), ("release", "failed"), ("on_error", boom)]
    assert not hasattr(boom, "__notes__")  # release succeeded: nothing attached


async def test_using_resource_cancel_disposes_upstream() -> None:
    pool = Pool()
    counter = Counter()
    seen = expect(using_resource(pool.acquire, lambda _: from_async_iterable(counter), pool.release))
    await counter.until_pulled(2)
    seen.dispose()
    delivered = len(seen.items)
    await pool.release_done.wait()
    await counter.closed.wait()
    assert pool.released == [("r1", Outcome.cancelled())]
    assert len(seen.items) == delivered  # nothing after dispose
    assert seen.outcome is None


async def test_using_resource_resubscribe_is_cold() -> None:
    pool = Pool()
    source = using_resource(pool.acquire, lambda r: reactivex.of(r), pool.release)
    assert pool.acquired == []
    assert await to_list(source) == ["r1"]
    assert await to_list(source) == ["r2"]
    assert pool.released == [("r1", Outcome.completed()), ("r2", Outcome.completed())]


async def test_using_resource_dispose_while_acquiring_cancels_acquire() -> None:
    pool = Pool()
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def acquire() -> str:
        entered.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    used: list[str] = []
    seen = expect(using_resource(acquire, lambda r: reactivex.of(used.append(r)), pool.release))
    await entered.wait()
    seen.dispose()
    await cancelled.wait()
    for _ in range(10):
        await asyncio.sleep(0)
    assert pool.released == []
    assert used == []
    assert seen.outcome is None


async def test_using_resource_acquire_that_outlives_its_cancellation_is_released_as_cancelled() -> None:
    pool = Pool()
    entered, connected = asyncio.Event(), asyncio.Event()

    async def acquire() -> str:
        entered.set()
        try:
            await asyncio.shield(connected.wait())
        except asyncio.CancelledError:
            await connected.wait()  # a connection half-open cannot be abandoned: finish, then hand it back
        return "stubborn"

    used: list[str] = []
    seen = expect(using_resource(acquire, lambda r: reactivex.of(used.append(r)), pool.release))
    await entered.wait()
    seen.dispose()
    await asyncio.sleep(0)
    connected.set()
    await pool.release_done.wait()
    assert pool.released == [("stubborn", Outcome.cancelled())]
    assert used == []
    assert seen.outcome is None


async def test_using_resource_acquire_failing_is_an_error_without_release() -> None:
    pool = Pool()

    async def acquire() -> str:
        raise ConnectionRefusedError("no")

    seen = await expect(using_resource(acquire, lambda r: reactivex.of(r), pool.release))
    assert isinstance(seen.error, ConnectionRefusedError)
    assert pool.released == []


async def test_using_resource_use_failing_releases_as_failed() -> None:
    pool = Pool()
    broken = TypeError("bad use")

    def use(_: str) -> Observable[int]:
        raise broken

    seen = await expect(pool.watch(using_resource(pool.acquire, use, pool.release)))
    assert seen.error is broken
    assert pool.released == [("r1", Outcome.failed(broken))]
    assert pool.log == [("release", "failed"), ("on_error", broken)]


@pytest.mark.parametrize("sync_release", [False, True])
async def test_using_resource_release_failing_on_error_is_attached_to_the_error(sync_release: bool) -> None:
    release_error = OSError("release failed")
    pool = Pool(release_error=release_error, sync_release=sync_release)
    boom = ValueError("boom")
    seen = await expect(using_resource(pool.acquire, lambda _: reactivex.throw(boom), pool.release))
    assert seen.error is boom
    assert boom.__context__ is release_error
    assert any("release failed" in note for note in boom.__notes__)


async def test_using_resource_release_failing_keeps_an_existing_context() -> None:
    release_error = OSError("release failed")
    pool = Pool(release_error=release_error)
    try:
        try:
            raise KeyError("first")
        except KeyError:
            raise ValueError("boom") from None
    except ValueError as error:
        boom = error
    original_context = boom.__context__
    seen = await expect(using_resource(pool.acquire, lambda _: reactivex.throw(boom), pool.release))
    assert seen.error is boom
    assert boom.__context__ is original_context
    assert any("release failed" in note for note in boom.__notes__)


@pytest.mark.parametrize("sync_release", [False, True])
async def test_using_resource_release_failing_on_completion_is_the_error(sync_release: bool) -> None:
    release_error = OSError("release failed")
    pool = Pool(release_error=release_error, sync_release=sync_release)
    seen = await expect(using_resource(pool.acquire, lambda _: reactivex.of(1), pool.release))
    assert seen.items == [1]
    assert seen.error is release_error
    assert seen.signals == 1


async def test_using_resource_release_failing_after_dispose_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = Pool(release_error=OSError("release failed"))
    used = asyncio.Event()

    def use(_: str) -> Observable[int]:
        used.set()
        return reactivex.never()

    seen = expect(using_resource(pool.acquire, use, pool.release))
    await used.wait()
    with caplog.at_level(logging.WARNING, logger="rxagent"):
        seen.dispose()
        await pool.release_done.wait()
        for _ in range(5):
            await asyncio.sleep(0)
    assert pool.released == [("r1", Outcome.cancelled())]
    assert "release failed" in caplog.text
    assert seen.outcome is None


async def test_using_resource_sync_release_on_dispose_runs_on_the_next_loop_turn() -> None:
    pool = Pool(sync_release=True)
    subject: Subject[int] = Subject()
    used = asyncio.Event()

    def use(_: str) -> Observable[int]:
        used.set()
        return subject

    seen = expect(using_resource(pool.acquire, use, pool.release))
    await used.wait()
    seen.dispose()
    assert pool.released == []  # not inside dispose(), which may be called mid-callback
    await pool.release_done.wait()
    assert pool.released == [("r1", Outcome.cancelled())]


async def test_using_resource_disposed_inside_on_next_of_the_last_item_releases_once() -> None:
    pool = Pool()
    # take(3) completes downstream, then disposes using_resource inside on_next of item 3, while
    # the inner `of` is still on the stack and about to complete.
    source = using_resource(pool.acquire, lambda _: reactivex.of(1, 2, 3), pool.release).pipe(ops.take(3))
    assert await to_list(source) == [1, 2, 3]
    await pool.release_done.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert pool.released == [("r1", Outcome.cancelled())]


async def test_using_resource_complete_then_dispose_releases_once_and_drops_the_signal() -> None:
    hold = asyncio.Event()
    pool = Pool(hold_release=hold)
    subject: Subject[int] = Subject()
    used = asyncio.Event()

    def use(_: str) -> Observable[int]:
        used.set()
        return subject

    seen = expect(using_resource(pool.acquire, use, pool.release))
    await used.wait()
    subject.on_next(7)
    subject.on_completed()  # release(completed) starts and waits on `hold`
    seen.dispose()
    hold.set()
    await pool.release_done.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert pool.released == [("r1", Outcome.completed())]
    assert seen.items == [7]
    assert seen.outcome is None  # disposed before the release finished: the completion is not delivered


async def test_using_resource_error_then_dispose_releases_once() -> None:
    pool = Pool()
    subject: Subject[int] = Subject()
    used = asyncio.Event()

    def use(_: str) -> Observable[int]:
        used.set()
        return subject

    seen = expect(using_resource(pool.acquire, use, pool.release))
    await used.wait()
    boom = ValueError("boom")
    subject.on_error(boom)
    seen.dispose()
    subject.on_completed()
    await pool.release_done.wait()
    for _ in range(5):
        await asyncio.sleep(0)
    assert pool.released == [("r1", Outcome.failed(boom))]


def test_using_resource_subscribed_outside_a_loop_is_a_clear_error() -> None:
    async def acquire() -> int:
        return 1

    with pytest.raises(RuntimeError, match="using_resource is loop-bound"):
        using_resource(acquire, reactivex.of, lambda _r, _o: None).subscribe()


async def test_using_resource_release_error_chained_to_the_error_is_noted_without_a_cycle() -> None:
    async def acquire() -> str:
        return "r"

    def release(_: str, outcome: Outcome) -> None:
        raise OSError("release failed") from outcome.error

    boom = ValueError("boom")
    seen = await expect(using_resource(acquire, lambda _: reactivex.throw(boom), release))
    assert seen.error is boom
    assert boom.__context__ is None  # linking back to the release error would make a cycle
    assert any("release failed" in note for note in boom.__notes__)


@pytest.mark.parametrize("synchronous", [False, True])
async def test_using_resource_lets_go_of_the_stream_when_it_ends(synchronous: bool) -> None:
    # A frame's hooks are unregistered when its subscription is disposed: the ended stream must be.
    hooks = FrameHooks()
    pool = Pool()
    stream = sync_of(1, 2) if synchronous else from_async_iterable(Counter(2))
    hooked = frame(lambda item: (item,), until=hooks.until, inject=hooks.inject)
    framed = using_resource(pool.acquire, lambda _: stream.pipe(hooked), pool.release)
    seen = await expect(framed)
    assert seen.outcome == Outcome.completed()
    assert hooks.registered == []
    assert pool.released == [("r1", Outcome.completed())]


def test_using_resource_examples() -> None:
    results = doctest.testmod(rxagent.operators._using_resource)
    assert results.attempted > 0
    assert results.failed == 0
