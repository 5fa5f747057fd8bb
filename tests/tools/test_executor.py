"""The executor: ordering, parallel stretches, barriers, timeouts, failures, interceptors, the gate.

Tools that take time sleep on a :class:`~rxagent.clock.VirtualClock` that the executor shares, so their
order and the timeouts are exact and nothing is slept through.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import pytest
import reactivex
from pydantic import BaseModel
from reactivex import Observable
from reactivex import operators as ops

from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.messages import ToolResultBlock, ToolUseBlock
from rxagent.tools import (
    Permissions,
    SchemaTool,
    ToolBatchFinished,
    ToolBodyStarted,
    ToolCallNext,
    ToolCallProgress,
    ToolCallSettled,
    ToolCallSuspended,
    ToolContext,
    ToolEvent,
    ToolExecutor,
    ToolInvocation,
    Toolkit,
    ToolPermissionRequired,
    ToolSystemError,
    ToolTraits,
    tool,
)
from tests.streams import expect


def call(
    name: str, arguments: dict[str, Any] | None = None, *, id: str | None = None, raw: str | None = None
) -> ToolUseBlock:
    arguments = arguments or {}
    text = raw if raw is not None else json.dumps(arguments)
    return ToolUseBlock(
        id=id or f"{name}_{len(text)}",
        name=name,
        input=arguments if raw is None else None,
        raw_arguments=text,
    )


async def run(
    calls: Sequence[ToolUseBlock], toolkit: Toolkit, executor: ToolExecutor | None = None, **view: Any
) -> list[ToolEvent]:
    """The batch's events; on the executor's clock when that is virtual."""
    executor = executor or ToolExecutor()
    events = executor.execute(calls, toolkit.view(**view)).pipe(ops.to_list())
    if isinstance(executor.clock, VirtualClock):
        return await executor.clock.run(events)
    return await events


def batch(events: list[ToolEvent]) -> ToolBatchFinished:
    last = events[-1]
    assert isinstance(last, ToolBatchFinished)
    return last


def texts(events: list[ToolEvent]) -> list[str]:
    return [r.text for r in batch(events).results]


class Barrier:
    """Lets n async tools proceed only once all n have started: proves they run at the same time."""

    def __init__(self, n: int) -> None:
        self.n, self.arrived, self.all_in = n, 0, asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.n:
            self.all_in.set()
        await asyncio.wait_for(self.all_in.wait(), 2)


def safe_and_unsafe(log: list[str], clock: VirtualClock, barrier: Barrier | None = None) -> Toolkit:
    @tool(concurrency_safe=True)
    async def fetch(key: str, delay: float = 0.0) -> str:
        """Fetch (taking ``delay`` seconds of ``clock``)."""
        log.append(f"start {key}")
        if barrier is not None:
            await barrier.wait()
        await clock.sleep(delay)
        log.append(f"end {key}")
        return f"value of {key}"

    @tool
    async def write(key: str) -> str:
        """Write (not concurrency-safe)."""
        log.append(f"start write {key}")
        await asyncio.sleep(0)
        log.append(f"end write {key}")
        return f"wrote {key}"

    return Toolkit([fetch, write])


async def test_concurrency_safe_calls_run_together_and_results_keep_call_order(clock: VirtualClock) -> None:
    log: list[str] = []
    toolkit = safe_and_unsafe(log, clock, Barrier(3))
    calls = [call("fetch", {"key": k, "delay": d}, id=k) for k, d in [("a", 3), ("b", 0), ("c", 1)]]
    events = await run(calls, toolkit, ToolExecutor(clock=clock))
    assert log[:3] == ["start a", "start b", "start c"]
    finished = [(e.call.id, e.duration_s) for e in events if isinstance(e, ToolCallSettled)]
    assert finished == [("b", 0.0), ("c", 1.0), ("a", 3.0)]  # as they happen, timed on the clock
    assert texts(events) == ["value of a", "value of b", "value of c"]  # in call order
    assert clock.now() == 3.0  # together: the longest, not the sum


async def test_an_unsafe_call_is_a_barrier(clock: VirtualClock) -> None:
    log: list[str] = []
    toolkit = safe_and_unsafe(log, clock)
    calls = [
        call("fetch", {"key": "a", "delay": 1}, id="1"),
        call("fetch", {"key": "b"}, id="2"),
        call("write", {"key": "w"}, id="3"),
        call("fetch", {"key": "c"}, id="4"),
    ]
    events = await run(calls, toolkit, ToolExecutor(clock=clock))
    assert log == ["start a", "start b", "end b", "end a", "start write w", "end write w", "start c", "end c"]
    assert texts(events) == ["value of a", "value of b", "wrote w", "value of c"]


async def test_sequential_when_parallel_is_off(clock: VirtualClock) -> None:
    log: list[str] = []
    toolkit = safe_and_unsafe(log, clock)
    calls = [call("fetch", {"key": "a", "delay": 1}, id="1"), call("fetch", {"key": "b", "delay": 2}, id="2")]
    await run(calls, toolkit, ToolExecutor(parallel=False, clock=clock))
    assert log == ["start a", "end a", "start b", "end b"]
    assert clock.now() == 3.0  # one after the other: the sum


async def test_max_concurrency_caps_a_parallel_stretch(clock: VirtualClock) -> None:
    running = peak = 0

    @tool(concurrency_safe=True)
    async def job(n: int) -> int:
        """A job of one second."""
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await clock.sleep(1)
        running -= 1
        return n

    executor = ToolExecutor(max_concurrency=2, clock=clock)
    events = await run([call("job", {"n": i}, id=str(i)) for i in range(6)], Toolkit([job]), executor)
    assert peak == 2
    assert texts(events) == [str(i) for i in range(6)]
    assert clock.now() == 3.0  # six one-second jobs, two at a time


async def test_sync_tools_run_in_threads_without_blocking_the_loop() -> None:
    started = threading.Event()
    release = threading.Event()

    @tool
    def blocking(ctx: ToolContext) -> str:
        """Blocks its thread until the loop releases it."""
        started.set()
        ctx.progress("waiting for the loop", fraction=0.5)
        assert release.wait(5), "the loop was blocked"
        return threading.current_thread().name

    async def releaser() -> None:
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        release.set()

    helper = asyncio.ensure_future(releaser())
    events = await run([call("blocking", id="b")], Toolkit([blocking]))
    await helper
    assert texts(events)[0] != threading.current_thread().name
    progress = [e for e in events if isinstance(e, ToolCallProgress)]
    assert [(p.update.message, p.update.fraction) for p in progress] == [("waiting for the loop", 0.5)]


async def test_progress_comes_between_start_and_finish_and_is_never_a_result() -> None:
    @tool
    async def steps(ctx: ToolContext) -> str:
        """Three steps."""
        for i in range(3):
            ctx.progress(f"step {i}", fraction=(i + 1) / 3, data={"i": i})
            await asyncio.sleep(0)
        return "done"

    events = await run([call("steps", id="s")], Toolkit([steps]))
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["ToolBodyStarted"] + ["ToolCallProgress"] * 3 + ["ToolCallSettled", "ToolBatchFinished"]
    assert texts(events) == ["done"]


async def test_timeouts_become_error_results_and_mark_the_context_cancelled(clock: VirtualClock) -> None:
    contexts: list[ToolContext] = []
    cleaned_up: list[float] = []

    @tool(timeout=30)
    async def hang(ctx: ToolContext) -> str:
        """Never returns."""
        contexts.append(ctx)
        try:
            await asyncio.Event().wait()
        finally:
            cleaned_up.append(clock.now())
        return "unreachable"

    @tool
    async def own_timeout() -> str:
        """Raises TimeoutError itself (its own deadline, not ours)."""
        raise TimeoutError("upstream took too long")

    toolkit = Toolkit([hang, own_timeout])
    events = await run(
        [call("hang", id="h"), call("own_timeout", id="o")], toolkit, ToolExecutor(clock=clock)
    )
    results = batch(events).results
    assert results[0].status == "error"
    assert results[0].text == "Tool 'hang' timed out after 30 s."
    assert contexts[0].cancelled
    assert cleaned_up == [30.0]  # the tool's task was cancelled at the deadline
    assert results[1].text == "Error: tool 'own_timeout' raised TimeoutError"
    durations = [e.duration_s for e in events if isinstance(e, ToolCallSettled)]
    assert durations == [30.0, 0.0]  # one after the other (neither is concurrency-safe), timed on the clock
    finished = {e.call.id: e for e in events if isinstance(e, ToolCallSettled)}
    assert (finished["h"].error_type, finished["o"].error_type) == ("TimeoutError", "TimeoutError")


async def test_a_tool_that_finishes_in_time_is_not_timed_out(clock: VirtualClock) -> None:
    @tool(timeout=30)
    async def slow() -> str:
        """Takes 29.5 s."""
        await clock.sleep(29.5)
        return "in time"

    events = await run([call("slow", id="s")], Toolkit([slow]), ToolExecutor(clock=clock))
    assert texts(events) == ["in time"]
    assert clock.pending() == ()  # the deadline's timer went with the call


async def test_default_timeout_applies_to_tools_without_their_own(clock: VirtualClock) -> None:
    @tool
    async def hang() -> str:
        """Never returns."""
        await asyncio.Event().wait()
        return "unreachable"

    executor = ToolExecutor(default_timeout=20, clock=clock)
    events = await run([call("hang", id="h")], Toolkit([hang]), executor)
    assert texts(events) == ["Tool 'hang' timed out after 20 s."]
    assert clock.now() == 20.0


async def test_a_sync_tool_times_out_on_the_clock_and_its_late_result_is_discarded(
    clock: VirtualClock,
) -> None:
    entered, release = threading.Event(), threading.Event()
    saw_cancel: list[bool] = []

    @tool(timeout=10)
    def blocking(ctx: ToolContext) -> str:
        """Blocks its thread until released."""
        entered.set()
        release.wait(5)
        saw_cancel.append(ctx.cancelled)
        return "too late"

    pool = ThreadPoolExecutor(1)
    executor = ToolExecutor(clock=clock, thread_pool=pool)
    seen = expect(executor.execute([call("blocking", id="b")], Toolkit([blocking]).view()))
    await asyncio.to_thread(entered.wait, 5)
    await clock.advance(9.5)
    assert seen.outcome is None
    await clock.advance(0.5)  # a thread's work does not count as idle time: the test moves the clock
    await asyncio.wait_for(seen, 5)
    assert texts(seen.items) == ["Tool 'blocking' timed out after 10 s."]
    release.set()
    await asyncio.to_thread(pool.shutdown)  # the thread ran to its end; its result went nowhere
    assert saw_cancel == [True]


async def test_ordinary_exceptions_become_error_results_the_model_can_read() -> None:
    @tool
    def divide(a: float, b: float) -> float:
        """Divide."""
        return a / b

    events = await run(
        [call("divide", {"a": 1, "b": 0}, id="d"), call("divide", {"a": 1, "b": 4}, id="e")],
        Toolkit([divide]),
    )
    results = batch(events).results
    assert (results[0].status, results[0].text) == (
        "error",
        "Error: ZeroDivisionError: float division by zero",
    )
    assert (results[1].status, results[1].text) == ("ok", "0.25")
    finished = {e.call.id: e for e in events if isinstance(e, ToolCallSettled)}
    assert (finished["d"].error_type, finished["e"].error_type) == ("ZeroDivisionError", None)


async def test_error_results_name_the_class_of_error_when_one_is_known() -> None:
    @tool
    def count(n: int) -> int:
        """Count."""
        return n

    class Unprintable:
        def __str__(self) -> str:
            raise ValueError("no text")

    @tool
    def unencodable() -> object:
        """Returns what cannot be turned into text."""
        return [Unprintable()]

    @tool
    def says_error() -> ToolResultBlock:
        """Returns an error result itself."""
        return ToolResultBlock(tool_use_id="x", name="says_error", status="error")

    events = await run(
        [
            call("count", {"n": "not a number"}, id="a"),
            call("unencodable", id="u"),
            call("says_error", id="s"),
        ],
        Toolkit([count, unencodable, says_error]),
    )
    finished = {e.call.id: e for e in events if isinstance(e, ToolCallSettled)}
    assert {k: (e.result.status, e.error_type) for k, e in finished.items()} == {
        "a": ("error", "ToolArgumentError"),
        "u": ("error", "PydanticSerializationError"),
        "s": ("error", None),  # the tool's own error result: nothing names a class of error
    }


async def test_sync_and_async_tools_run_in_the_context_of_the_batchs_subscriber() -> None:
    # What the subscriber's context holds (the current run, a current span) reaches the tool's body,
    # in a worker thread too.
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    @tool
    def in_thread() -> str:
        """Reads the marker in a worker thread."""
        return marker.get()

    @tool
    async def on_loop() -> str:
        """Reads the marker on the loop."""
        return marker.get()

    token = marker.set("the caller's")
    try:
        batch_events = ToolExecutor().execute(
            [call("in_thread", id="t"), call("on_loop", id="l")], Toolkit([in_thread, on_loop]).view()
        )
        pending = asyncio.ensure_future(batch_events.pipe(ops.to_list()))  # the task copies the context
    finally:
        marker.reset(token)
    events = await pending
    assert texts(events) == ["the caller's", "the caller's"]


async def test_tool_system_error_fails_the_batch_and_cancels_running_siblings() -> None:
    cancelled = asyncio.Event()

    @tool(concurrency_safe=True)
    async def database() -> str:
        """The database is down."""
        await asyncio.sleep(0)
        raise ToolSystemError("database unreachable")

    @tool(concurrency_safe=True)
    async def long_job() -> str:
        """Runs long."""
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "unreachable"

    with pytest.raises(ToolSystemError, match="database unreachable"):
        await run([call("long_job", id="l"), call("database", id="d")], Toolkit([database, long_job]))
    await asyncio.wait_for(cancelled.wait(), 1)


async def test_dispose_cancels_running_async_tools_and_emits_nothing_more() -> None:
    started, cleaned = asyncio.Event(), asyncio.Event()

    @tool
    async def forever() -> str:
        """Runs until cancelled."""
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()
        return "unreachable"

    seen: list[ToolEvent] = []
    subscription = (
        ToolExecutor().execute([call("forever", id="f")], Toolkit([forever]).view()).subscribe(seen.append)
    )
    await asyncio.wait_for(started.wait(), 1)
    subscription.dispose()
    await asyncio.wait_for(cleaned.wait(), 1)
    await asyncio.sleep(0)
    assert [type(e) for e in seen] == [ToolBodyStarted]


async def test_dispose_while_a_sync_tool_runs_discards_its_result_and_flags_cancellation() -> None:
    entered, finished = threading.Event(), threading.Event()
    saw_cancel: list[bool] = []

    @tool
    def cooperative(ctx: ToolContext) -> str:
        """Checks for cancellation."""
        entered.set()
        while not ctx.cancelled:
            threading.Event().wait(0.001)
        saw_cancel.append(True)
        finished.set()
        return "discarded"

    seen: list[ToolEvent] = []
    pool = ThreadPoolExecutor(1)
    subscription = (
        ToolExecutor(thread_pool=pool)
        .execute([call("cooperative", id="c")], Toolkit([cooperative]).view())
        .subscribe(seen.append)
    )
    await asyncio.to_thread(entered.wait, 5)
    subscription.dispose()
    await asyncio.to_thread(pool.shutdown)  # the tool ran to its end and handed its result back
    await VirtualClock().advance(0)  # let the loop run until idle: the late result had its chance
    assert finished.is_set()
    assert saw_cancel == [True]
    assert [type(e) for e in seen] == [ToolBodyStarted]


async def test_the_batch_is_cold() -> None:
    count = 0

    @tool
    def tick() -> int:
        """Count."""
        nonlocal count
        count += 1
        return count

    batch_stream = ToolExecutor().execute([call("tick", id="t")], Toolkit([tick]).view())
    first: list[ToolEvent] = await batch_stream.pipe(ops.to_list())
    second: list[ToolEvent] = await batch_stream.pipe(ops.to_list())
    assert (texts(first), texts(second)) == (["1"], ["2"])


# ---- bad inputs --------------------------------------------------------------------------------------


class Line(BaseModel):
    sku: str
    qty: int


@tool
def order(lines: list[Line], express: bool = False, count: int = 1, mode: str = "air") -> str:
    """Order lines.

    Args:
        lines: order lines.
        express: ship fast.
        count: how many times.
        mode: shipping mode.
    """
    assert all(isinstance(line, Line) for line in lines)
    return f"{[(line.sku, line.qty) for line in lines]} express={express} count={count}"


async def test_bad_inputs_each_get_one_error_result_and_never_run() -> None:
    ran: list[str] = []

    @tool
    def shade(colour: Literal["red", "blue"], size: int) -> str:
        """Shade."""
        ran.append(colour)
        return colour

    toolkit = Toolkit([shade, order], max_argument_chars=500_000)
    bad = [
        call("shade", {}, id="empty"),
        call("shade", {"colour": "red", "size": ""}, id="empty_int"),
        call("shade", {"colour": "green", "size": 1}, id="enum"),
        call("shade", {"colour": "red", "size": 1, "extra": True}, id="extra"),
        call("shade", raw='{"colour": "red", "si', id="truncated"),
        call("shade", raw="[1, 2, 3]", id="array"),
        call("shade", raw='"just text"', id="string"),
        call("shade", {"colour": "red" * 200_000, "size": 1}, id="huge"),
        call("paint", {"colour": "red"}, id="unknown"),
        ToolUseBlock(
            id="invalid", name="shade", raw_arguments='{"a', state="invalid", error="not valid JSON"
        ),
    ]
    events = await run(bad, toolkit)
    results = {r.tool_use_id: r for r in batch(events).results}
    assert ran == []
    assert len(results) == len(bad)
    assert all(r.status == "error" for r in results.values())
    assert "colour: is required but missing" in results["empty"].text
    assert "size: None is not of type 'integer'" in results["empty_int"].text
    assert "'green' is not one of ['red', 'blue']" in results["enum"].text
    assert "'extra' was unexpected" in results["extra"].text
    assert "not valid JSON" in results["truncated"].text
    assert "must be a JSON object, got list" in results["array"].text
    assert "must be a JSON object, got str" in results["string"].text
    assert "over the limit of 500,000" in results["huge"].text
    assert "cannot be called: there is no such tool" in results["unknown"].text
    assert "not valid JSON" in results["invalid"].text


async def test_messy_but_recoverable_inputs_are_coerced_and_converted() -> None:
    events = await run(
        [
            call(
                "order",
                {
                    "lines": [{"sku": "a", "qty": "2"}, {"sku": "b", "qty": 1}],
                    "express": "false",
                    "count": "3",
                },
                id="o",
            )
        ],
        Toolkit([order]),
    )
    assert texts(events) == ["[('a', 2), ('b', 1)] express=False count=3"]


async def test_a_one_megabyte_string_is_accepted_when_the_limit_allows_it() -> None:
    @tool
    def size_of(text: str) -> int:
        """Length."""
        return len(text)

    big = "x" * 1_000_000
    assert texts(
        await run([call("size_of", {"text": big}, id="s")], Toolkit([size_of], max_argument_chars=2_000_000))
    ) == ["1000000"]
    refused = await run([call("size_of", {"text": big}, id="s")], Toolkit([size_of]))
    assert "over the limit of 1,000,000" in texts(refused)[0]


async def test_presets_always_win_over_the_model() -> None:
    seen: list[str] = []

    @tool
    def whoami(tenant: str, question: str) -> str:
        """Answer for a tenant."""
        seen.append(tenant)
        return tenant

    toolkit = Toolkit()
    toolkit.register(whoami, preset={"tenant": "acme"})
    events = await run([call("whoami", {"tenant": "evil", "question": "q"}, id="w")], toolkit)
    assert texts(events) == ["acme"]
    events = await run(
        [call("whoami", {"question": "q"}, id="w")], toolkit, presets={"whoami": {"tenant": "globex"}}
    )
    assert texts(events) == ["globex"]
    assert seen == ["acme", "globex"]


async def test_hidden_and_inactive_group_tools_are_not_executed() -> None:
    ran: list[str] = []

    @tool(groups=["admin"])
    def wipe() -> str:
        """Wipe everything."""
        ran.append("wipe")
        return "wiped"

    @tool
    def secret() -> str:
        """Outside the allow-list."""
        ran.append("secret")
        return "secret"

    toolkit = Toolkit([wipe, secret])
    toolkit.create_group("admin")
    events = await run([call("wipe", id="w"), call("secret", id="s")], toolkit, allow=["wipe"])
    results = batch(events).results
    assert ran == []
    assert "its tool group is not active" in results[0].text
    assert "there is no such tool" in results[1].text


# ---- the gate ---------------------------------------------------------------------------------------


async def test_every_tool_passes_the_gate_schema_tools_included() -> None:
    ran: list[str] = []

    def body(arguments: dict[str, Any], _: ToolContext) -> str:
        ran.append(arguments["path"])
        return "deleted"

    rm = SchemaTool(
        "rm",
        "Remove a file.",
        {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        body,
        traits=ToolTraits(concurrency_safe=True),
    )
    gate = Permissions().deny("rm", path="/etc/*", reason="system files").ask("rm", path="/home/*")
    executor = ToolExecutor(permissions=gate)
    events = await run(
        [
            call("rm", {"path": "/etc/passwd"}, id="1"),
            call("rm", {"path": "/home/a"}, id="2"),
            call("rm", {"path": "/tmp/x"}, id="3"),
        ],
        Toolkit([rm]),
        executor,
    )
    done = batch(events)
    assert ran == ["/tmp/x"]
    assert [(r.tool_use_id, r.status) for r in done.results] == [("1", "denied"), ("3", "ok")]
    assert "system files" in done.results[0].text
    (asked,) = done.waiting
    assert isinstance(asked, ToolPermissionRequired)
    assert (asked.call.id, asked.decision.decision) == ("2", "ask")


async def test_external_tools_suspend_and_nothing_runs() -> None:
    @tool(external=True)
    def approve(amount: float) -> str:
        """Approved by a human in the caller's app."""
        raise AssertionError("never runs here")

    events = await run([call("approve", {"amount": 3}, id="a")], Toolkit([approve]))
    done = batch(events)
    assert done.results == ()
    assert [type(w) for w in done.waiting] == [ToolCallSuspended]
    assert not done.return_direct


async def test_return_direct_only_when_every_call_is_return_direct_and_ok() -> None:
    @tool(return_direct=True)
    def final(text: str) -> str:
        """Final answer."""
        return text

    @tool
    def other() -> str:
        """Normal tool."""
        return "x"

    toolkit = Toolkit([final, other])
    assert batch(
        await run([call("final", {"text": "a"}, id="1"), call("final", {"text": "b"}, id="2")], toolkit)
    ).return_direct
    assert not batch(
        await run([call("final", {"text": "a"}, id="1"), call("other", id="2")], toolkit)
    ).return_direct
    assert not batch(await run([call("final", {}, id="1")], toolkit)).return_direct  # failed validation


# ---- interceptors (the tool_call cut point) ----------------------------------------------------------


class Weather(BaseModel):
    city: str
    celsius: float


@tool
def greet(name: str) -> str:
    """Greet."""
    return f"hello {name}"


async def test_interceptors_rewrite_short_circuit_and_wrap_in_onion_order() -> None:
    order_seen: list[str] = []

    def outer(invocation: ToolInvocation, ctx: RuntimeContext, next_: ToolCallNext) -> Observable[ToolEvent]:
        order_seen.append("outer")
        return next_(invocation).pipe(
            ops.map(
                lambda e: (
                    ToolCallSettled(
                        e.call,
                        ToolResultBlock(
                            tool_use_id=e.call.id, name=e.call.name, output=e.result.output + e.result.output
                        ),
                        e.duration_s,
                    )
                    if isinstance(e, ToolCallSettled)
                    else e
                )
            )
        )

    def inner(invocation: ToolInvocation, ctx: RuntimeContext, next_: ToolCallNext) -> Observable[ToolEvent]:
        order_seen.append("inner")
        if invocation.arguments.get("name") == "cached":
            return invocation.finished("from cache")
        return next_(invocation.with_arguments({"name": str(invocation.arguments["name"]).upper()}))

    executor = ToolExecutor(interceptors=[outer, inner])
    events = await run(
        [call("greet", {"name": "ada"}, id="1"), call("greet", {"name": "cached"}, id="2")],
        Toolkit([greet]),
        executor,
    )
    assert order_seen == ["outer", "inner", "outer", "inner"]
    assert [r.text for r in batch(events).results] == ["hello ADA\nhello ADA", "from cache\nfrom cache"]


async def test_rewritten_arguments_pass_the_gate_again() -> None:
    def sneaky(invocation: ToolInvocation, ctx: RuntimeContext, next_: ToolCallNext) -> Observable[ToolEvent]:
        return next_(invocation.with_arguments({"name": "root"}))

    executor = ToolExecutor(interceptors=[sneaky], permissions=Permissions().deny("greet", name="root"))
    events = await run([call("greet", {"name": "ada"}, id="1")], Toolkit([greet]), executor)
    (result,) = batch(events).results
    assert result.status == "denied"
    assert "after its arguments were rewritten" in result.text


async def test_an_interceptor_that_produces_no_result_gives_an_error_result() -> None:
    def swallow(
        invocation: ToolInvocation, ctx: RuntimeContext, next_: ToolCallNext
    ) -> Observable[ToolEvent]:
        return reactivex.empty()

    events = await run(
        [call("greet", {"name": "a"}, id="1")], Toolkit([greet]), ToolExecutor(interceptors=[swallow])
    )
    assert "ended without a result" in texts(events)[0]


async def test_only_the_first_result_of_an_interceptor_counts() -> None:
    def twice(invocation: ToolInvocation, ctx: RuntimeContext, next_: ToolCallNext) -> Observable[ToolEvent]:
        return reactivex.concat(invocation.finished("first"), invocation.finished("second"))

    events = await run(
        [call("greet", {"name": "a"}, id="1")], Toolkit([greet]), ToolExecutor(interceptors=[twice])
    )
    assert [type(e) for e in events] == [ToolCallSettled, ToolBatchFinished]
    assert texts(events) == ["first"]


async def test_return_values_are_encoded_as_text() -> None:
    @tool
    def weather() -> Weather:
        """Weather."""
        return Weather(city="Oslo", celsius=-3.5)

    @tool
    def nothing() -> None:
        """Nothing."""

    @tool
    def data() -> dict[str, Any]:
        """Data."""
        return {"a": [1, 2], "when": __import__("datetime").date(2026, 1, 2)}

    events = await run(
        [call("weather", id="1"), call("nothing", id="2"), call("data", id="3")],
        Toolkit([weather, nothing, data]),
    )
    assert texts(events) == [
        '{"city":"Oslo","celsius":-3.5}',
        "(no output)",
        '{"a":[1,2],"when":"2026-01-02"}',
    ]
    finished = [e for e in events if isinstance(e, ToolCallSettled)]
    assert isinstance(finished[0].value, Weather)


@pytest.mark.parametrize("module", ["rxagent.tools", "rxagent.tools.events"])
def test_tool_call_finished_is_a_deprecated_alias_of_tool_call_settled(module: str) -> None:
    imported = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="ToolCallFinished is renamed ToolCallSettled"):
        old = imported.ToolCallFinished
    assert old is ToolCallSettled
    with pytest.raises(AttributeError, match="ToolCallFinishd"):
        _ = imported.ToolCallFinishd
