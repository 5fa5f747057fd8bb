"""The clock: virtual sleeps in due order, deadlines that expire, move and cancel, and virtual time over
real loopback I/O. Bad inputs tried: negative, NaN and infinite advances, a NaN start and due time, a
deadline rescheduled outside its ``async with``, one entered twice, and one told when to wake once entered."""

from __future__ import annotations

import asyncio
import doctest
import threading
import time
from collections.abc import Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

import rxagent.clock
from rxagent.clock import SYSTEM_CLOCK, Clock, Timer, VirtualClock


async def test_sleepers_wake_in_due_order_each_at_its_own_time() -> None:
    clock = VirtualClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper(name, s)) for name, s in [("c", 3), ("a", 1), ("b", 2), ("a2", 1)]]
    await clock.advance(10)
    assert woke == [("a", 1.0), ("a2", 1.0), ("b", 2.0), ("c", 3.0)]  # ties in the order they were set
    assert clock.now() == 10.0
    assert all(task.done() for task in tasks)


async def test_time_moves_only_when_advanced() -> None:
    clock = VirtualClock(start=100)
    sleeping = asyncio.create_task(clock.sleep(2))
    await clock.advance(0)  # the loop runs; the time does not move
    assert clock.now() == 100.0
    await clock.advance(1.5)
    assert not sleeping.done()
    assert clock.pending() == (102.0,)
    await clock.advance(0.5)
    assert sleeping.done()
    assert clock.pending() == ()


async def test_advance_with_nothing_pending_just_moves_the_time() -> None:
    clock = VirtualClock()
    await clock.advance(5)
    await clock.advance(0)
    assert clock.now() == 5.0
    assert clock.pending() == ()


async def test_what_a_callback_schedules_within_the_advance_fires_in_the_same_advance() -> None:
    clock = VirtualClock()
    seen: list[float] = []

    def first() -> None:
        seen.append(clock.now())
        clock.call_later(1, lambda: seen.append(clock.now()))

    clock.call_later(1, first)
    await clock.advance(3)
    assert seen == [1.0, 2.0]


async def test_a_timer_due_now_fires_without_advancing() -> None:
    clock = VirtualClock()
    fired = asyncio.Event()
    clock.call_later(0, fired.set)
    await asyncio.wait_for(fired.wait(), 5)
    await clock.sleep(0)
    await clock.sleep(-1)
    assert clock.now() == 0.0


async def test_a_cancelled_timer_never_fires_and_leaves_nothing_pending() -> None:
    clock = VirtualClock()
    fired: list[int] = []
    timer = clock.call_later(1, lambda: fired.append(1))
    timer.cancel()
    timer.cancel()  # harmless twice
    await clock.advance(5)
    assert fired == []
    assert clock.pending() == ()


async def test_cancelling_a_sleep_cancels_its_timer() -> None:
    clock = VirtualClock()
    sleeping = asyncio.create_task(clock.sleep(10))
    await clock.advance(1)
    assert clock.pending() == (10.0,)
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    assert clock.pending() == ()


async def test_a_failing_callback_goes_to_the_loop_and_the_other_timers_still_fire() -> None:
    clock = VirtualClock()
    loop = asyncio.get_running_loop()
    reported: list[object] = []
    loop.set_exception_handler(lambda _, context: reported.append(context.get("exception")))
    bug = RuntimeError("callback bug")
    fired: list[str] = []

    def broken() -> None:
        raise bug

    clock.call_later(1, broken)
    clock.call_later(1, lambda: fired.append("after"))
    try:
        await clock.advance(1)
    finally:
        loop.set_exception_handler(None)
    assert reported == [bug]
    assert fired == ["after"]


@pytest.mark.parametrize("seconds", [-1, float("nan"), float("inf")])
async def test_advance_rejects_bad_durations(seconds: float) -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError, match="finite number of seconds >= 0"):
        await clock.advance(seconds)
    assert clock.now() == 0.0


def test_a_virtual_clock_needs_a_finite_start_and_due_times() -> None:
    with pytest.raises(ValueError, match="finite start"):
        VirtualClock(float("nan"))
    with pytest.raises(ValueError, match="NaN"):
        VirtualClock().call_at(float("nan"), lambda: None)


async def test_two_advances_at_once_are_refused() -> None:
    clock = VirtualClock()
    clock.call_later(1, lambda: None)
    first = asyncio.create_task(clock.advance(1))
    await asyncio.sleep(0)  # `first` is now letting the loop settle
    with pytest.raises(RuntimeError, match="already being advanced"):
        await clock.advance(1)
    await first
    assert clock.now() == 1.0


# ---- deadlines -------------------------------------------------------------------------------------


async def test_a_deadline_expires_cancels_only_its_body_and_raises_timeout_error() -> None:
    clock = VirtualClock()
    cleaned_up: list[float] = []
    deadline = clock.timeout(5)

    async def body() -> None:
        async with deadline:
            try:
                await asyncio.Event().wait()
            finally:
                cleaned_up.append(clock.now())

    with pytest.raises(TimeoutError) as raised:
        await clock.run(body())
    assert isinstance(raised.value.__cause__, asyncio.CancelledError)
    assert deadline.expired()
    assert cleaned_up == [5.0]
    assert clock.now() == 5.0


async def test_a_deadline_that_is_not_reached_changes_nothing() -> None:
    clock = VirtualClock()
    async with clock.timeout(5) as deadline:
        await clock.sleep(0)
    assert not deadline.expired()
    assert clock.pending() == ()  # leaving the block cancelled its timer


async def test_pushing_a_deadline_back_reuses_one_timer() -> None:
    clock = VirtualClock()

    async def reads() -> float:
        async with clock.timeout(5) as deadline:
            for _ in range(1000):  # an idle deadline pushed on every read: one timer, not a thousand
                deadline.reschedule(clock.now() + 5)
                assert len(clock.pending()) == 1
            await clock.sleep(4)
            deadline.reschedule(clock.now() + 5)  # due at 9 now, its timer still set for 5
            await asyncio.Event().wait()
        return clock.now()

    with pytest.raises(TimeoutError):
        await clock.run(reads())
    assert clock.now() == 9.0


async def test_a_deadline_woken_early_keeps_its_time_and_its_one_timer_when_moved_there() -> None:
    clock = VirtualClock()
    moved_at: list[float] = []

    async def waits_then_moves() -> None:
        deadline = clock.timeout_at(600)
        deadline.wake_by(60)  # the request's idle limit, expected once it has a connection
        async with deadline:
            assert clock.pending() == (60.0,)  # one timer, at the expected time
            await clock.sleep(100)  # still waiting for a connection: woken at 60, not expired
            assert not deadline.expired()
            assert clock.pending() == (600.0,)  # woken at 60, the timer re-armed itself at the deadline
            deadline.reschedule(clock.now() + 60)  # a connection: the idle limit, earlier than the total
            moved_at.append(clock.now())
            await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        await clock.run(waits_then_moves())
    assert moved_at == [100.0]
    assert clock.now() == 160.0


async def test_a_deadline_moved_to_its_wake_time_sets_no_second_timer() -> None:
    clock = VirtualClock()

    async def body() -> None:
        deadline = clock.timeout_at(600)
        deadline.wake_by(60)
        async with deadline:
            await clock.sleep(1)
            deadline.reschedule(clock.now() + 60)  # due at 61, its timer still set for 60
            assert clock.pending() == (60.0,)
            await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        await clock.run(body())
    assert clock.now() == 61.0


async def test_wake_by_is_refused_once_entered() -> None:
    clock = VirtualClock()
    async with clock.timeout(5) as deadline:
        with pytest.raises(RuntimeError, match="not entered yet"):
            deadline.wake_by(1)


async def test_a_deadline_moved_earlier_fires_earlier() -> None:
    clock = VirtualClock()

    async def body() -> None:
        async with clock.timeout(60) as deadline:
            deadline.reschedule(clock.now() + 2)
            await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        await clock.run(body())
    assert clock.now() == 2.0


async def test_a_disarmed_deadline_never_fires_until_armed_again() -> None:
    clock = VirtualClock()
    body_done = asyncio.Event()

    async def body() -> None:
        async with clock.timeout(1) as deadline:
            deadline.reschedule(None)
            assert deadline.when() is None
            await clock.sleep(100)
            body_done.set()
            deadline.reschedule(clock.now() + 3)
            await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        await clock.run(body())
    assert body_done.is_set()
    assert clock.now() == 103.0


async def test_a_deadline_of_none_never_fires() -> None:
    clock = VirtualClock()

    async def body() -> str:
        async with clock.timeout(None):
            await clock.sleep(10_000)
        return "slept"

    assert await clock.run(body()) == "slept"


async def test_an_outside_cancel_inside_a_deadline_stays_a_cancel() -> None:
    clock = VirtualClock()
    entered = asyncio.Event()

    async def body() -> None:
        async with clock.timeout(5):
            entered.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(body())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.pending() == ()


async def test_nested_deadlines_the_inner_one_expires_first() -> None:
    clock = VirtualClock()

    async def body() -> str:
        async with clock.timeout(10) as outer:
            try:
                async with clock.timeout(2):
                    await asyncio.Event().wait()
            except TimeoutError:
                pass
            assert not outer.expired()
            await clock.sleep(1)
        return f"inner expired, outer left at {clock.now()}"

    assert await clock.run(body()) == "inner expired, outer left at 3.0"


async def test_nested_deadlines_the_outer_one_expires_first() -> None:
    clock = VirtualClock()
    inner_saw: list[str] = []

    async def body() -> None:
        async with clock.timeout(2):
            try:
                async with clock.timeout(10):
                    await asyncio.Event().wait()
            except asyncio.CancelledError:
                inner_saw.append("cancel")  # the outer deadline's cancel passes the inner one untouched
                raise

    with pytest.raises(TimeoutError):
        await clock.run(body())
    assert inner_saw == ["cancel"]
    assert clock.now() == 2.0


async def test_deadline_misuse_is_a_clear_error() -> None:
    clock = VirtualClock()
    deadline = clock.timeout(1)
    with pytest.raises(RuntimeError, match="only inside its `async with`"):
        deadline.reschedule(5)
    async with deadline:
        pass
    with pytest.raises(RuntimeError, match="only inside its `async with` \\(it is exited\\)"):
        deadline.reschedule(5)
    with pytest.raises(RuntimeError, match="entered only once"):
        async with deadline:
            pass
    assert repr(deadline) == "Deadline(when=1.0, state='exited')"


# ---- run ---------------------------------------------------------------------------------------------


async def test_run_jumps_to_each_timer_and_returns_the_result() -> None:
    clock = VirtualClock()

    async def three_waits() -> list[float]:
        times = []
        for seconds in (0.5, 30, 600):
            await clock.sleep(seconds)
            times.append(clock.now())
        return times

    assert await clock.run(three_waits()) == [0.5, 30.5, 630.5]


async def test_run_raises_the_awaitables_error() -> None:
    clock = VirtualClock()

    async def fails() -> None:
        await clock.sleep(1)
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        await clock.run(fails())


async def test_run_with_nothing_scheduled_waits_without_moving_the_time() -> None:
    clock = VirtualClock()
    clock.call_later(float("inf"), lambda: None)  # never due: no reason to jump
    release = threading.Event()

    def in_a_thread() -> str:
        release.wait(5)
        return "from the thread"

    async def work() -> str:
        return await asyncio.to_thread(in_a_thread)

    running = asyncio.create_task(clock.run(work()))
    await clock.advance(0)
    assert not running.done()
    release.set()
    assert await asyncio.wait_for(running, 5) == "from the thread"
    assert clock.now() == 0.0


async def test_run_wakes_for_a_timer_scheduled_while_it_waits() -> None:
    clock = VirtualClock()
    loop = asyncio.get_running_loop()
    go = asyncio.Event()

    async def work() -> float:
        await go.wait()
        await clock.sleep(7)
        return clock.now()

    running = asyncio.create_task(clock.run(work()))
    await asyncio.sleep(0)
    # Another thread sets `go`: run() is waiting with nothing scheduled, then a timer appears.
    threading.Thread(target=lambda: loop.call_soon_threadsafe(go.set)).start()
    assert await asyncio.wait_for(running, 5) == 7.0


async def test_two_clocks_run_side_by_side_on_one_loop() -> None:
    first, second = VirtualClock(), VirtualClock()

    async def wait(clock: VirtualClock, seconds: float) -> float:
        await clock.sleep(seconds)
        return clock.now()

    both = asyncio.gather(first.run(wait(first, 5)), second.run(wait(second, 50)))
    assert await asyncio.wait_for(both, 5) == [5.0, 50.0]


async def test_cancelling_run_cancels_the_awaitable() -> None:
    clock = VirtualClock()
    entered = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    running = asyncio.create_task(clock.run(work()))
    await entered.wait()
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.wait_for(cancelled.wait(), 5)


# ---- virtual time over real I/O ----------------------------------------------------------------------


async def test_virtual_time_with_real_loopback_io() -> None:
    """A loopback server that takes 30 virtual seconds to answer: the client waits on the same clock."""
    clock = VirtualClock()
    disconnected = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        try:
            await clock.sleep(30)
        except asyncio.CancelledError:
            disconnected.set()
            raise
        return web.Response(text=f"answered at {clock.now()}")

    app = web.Application()
    app.router.add_get("/", slow)
    async with TestServer(app, host="127.0.0.1", port=0) as server, aiohttp.ClientSession() as session:

        async def fetch(limit: float) -> str:
            async with clock.timeout(limit), session.get(server.make_url("/")) as response:
                return await response.text()

        assert await clock.run(fetch(60)) == "answered at 30.0"
        assert clock.now() == 30.0
        with pytest.raises(TimeoutError):
            await clock.run(fetch(10))
        assert clock.now() == 40.0
        await clock.run(asyncio.wait_for(disconnected.wait(), 5))


# ---- the system clock --------------------------------------------------------------------------------


async def test_the_system_clock_is_the_loops_clock() -> None:
    loop = asyncio.get_running_loop()
    before = loop.time()
    now = SYSTEM_CLOCK.now()
    assert before <= now <= loop.time()
    fired = asyncio.Event()
    SYSTEM_CLOCK.call_later(0, fired.set)
    await asyncio.wait_for(fired.wait(), 5)
    await SYSTEM_CLOCK.sleep(0)
    with pytest.raises(TimeoutError):
        async with SYSTEM_CLOCK.timeout(0):  # already due: expires on the loop's next turn
            await asyncio.Event().wait()
    async with SYSTEM_CLOCK.timeout_at(loop.time() + 60) as deadline:
        deadline.reschedule(None)
        await asyncio.sleep(0)
    assert not deadline.expired()
    assert repr(SYSTEM_CLOCK) == "SystemClock()"


def test_the_system_clock_outside_a_loop_reads_the_monotonic_clock() -> None:
    before = time.monotonic()
    assert before <= SYSTEM_CLOCK.now() <= time.monotonic()


def test_a_clock_of_your_own_needs_now_and_call_at_only() -> None:
    class Recorded(Clock):
        def __init__(self) -> None:
            self.due: list[float] = []

        def now(self) -> float:
            return 42.0

        def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
            self.due.append(when)
            return self

        def cancel(self) -> None:
            self.due.clear()

    clock = Recorded()
    clock.call_later(8, lambda: None)
    assert clock.due == [50.0]
    assert clock.timeout(8).when() == 50.0
    assert clock.timeout(None).when() is None


def test_module_examples() -> None:
    results = doctest.testmod(rxagent.clock)
    assert results.attempted > 0
    assert results.failed == 0
