"""``first_step`` and ``Resumed``: our own call run at once up to its first wait, a task only for the rest.

Bad inputs tried: a call that raises in its first step (an ``Exception`` and a ``KeyboardInterrupt``), a
cancel of the task before it has run the call's next step (thrown into the call: its ``finally`` runs), a
call that finishes while its caller's task is the current one (what it sees: the caller's task and
context, as the module says).
"""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from rxagent.operators import Resumed, first_step, start_task

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("SEEN", default="caller")


async def at_once(value: int) -> int:
    return value * 2


async def after(wake: asyncio.Future[int], log: list[str]) -> int:
    try:
        return await wake + 1
    finally:
        log.append("finally")


async def test_a_call_that_does_not_wait_finishes_in_its_first_step() -> None:
    assert first_step(at_once(21)) == (True, 42)


async def test_a_call_that_waits_goes_on_in_a_task_handed_what_it_waits_on() -> None:
    loop = asyncio.get_running_loop()
    wake: asyncio.Future[int] = loop.create_future()
    log: list[str] = []
    call = after(wake, log)
    finished, waiting = first_step(call)
    assert not finished
    assert waiting is wake
    task = start_task(loop, Resumed(call, waiting), "test.resumed")  # pyright: ignore[reportArgumentType]
    await asyncio.sleep(0)
    assert not task.done()
    wake.set_result(1)
    await task
    assert log == ["finally"]


async def test_a_resumed_call_can_be_awaited_inside_a_coroutine() -> None:
    wake: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    call = after(wake, [])
    _, waiting = first_step(call)
    asyncio.get_running_loop().call_soon(wake.set_result, 9)
    assert await Resumed(call, waiting) == 10


async def test_a_cancel_before_the_task_resumes_is_thrown_into_the_call() -> None:
    loop = asyncio.get_running_loop()
    wake: asyncio.Future[int] = loop.create_future()
    log: list[str] = []
    call = after(wake, log)
    _, waiting = first_step(call)
    task = start_task(loop, Resumed(call, waiting), "test.resumed")  # pyright: ignore[reportArgumentType]
    task.cancel()  # before the task's first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert log == ["finally"]


async def test_an_error_in_the_first_step_is_raised_by_first_step() -> None:
    async def broken() -> None:
        raise ValueError("bad at once")

    async def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(ValueError, match="bad at once"):
        first_step(broken())
    with pytest.raises(KeyboardInterrupt):
        first_step(interrupted())


async def test_the_first_step_runs_in_the_callers_task_and_context() -> None:
    caller = asyncio.current_task()

    async def look() -> asyncio.Task[object] | None:
        SEEN.set("the call")
        return asyncio.current_task()

    finished, task = first_step(look())
    assert finished
    assert task is caller  # no task of its own: what binds the current task would bind the caller's
    assert SEEN.get() == "the call"  # and its context is the caller's: for our own calls only
