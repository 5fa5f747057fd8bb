"""`call` is `stream_events` filtered to the result, even where it skips building events nobody sees."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from collections.abc import Callable
from typing import Any

from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ActingStep, AgentOptions, Middleware, ReActAgent, insert
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, ToolExecutionStarted, ToolResult
from rxagent.operators import to_list
from rxagent.tools import Toolkit, tool

from .helpers import run


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def script() -> list[ScriptedResponse | str]:
    return [
        ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 2})]),
        ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 3, "b": "4"})]),
        ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": "x"})]),  # invalid: an error result
        "The sum is 7.",
    ]


def essentials(result: AgentResult) -> tuple[Any, ...]:
    return (
        result.reason,
        result.text,
        result.iterations,
        result.usage.model_calls,
        result.usage.input_tokens,
        result.usage.output_tokens,
        result.detail,
        result.pending,
    )


async def test_call_gives_the_result_and_history_stream_events_gives() -> None:
    streamed, events = await run(ReActAgent(ScriptedModel(script()), Toolkit([add])), "add")
    called_agent = ReActAgent(ScriptedModel(script()), Toolkit([add]))
    called = await called_agent.call("add")
    assert essentials(called) == essentials(streamed)
    assert streamed.seq == len(events) - 1
    assert called.seq == 0  # it counts what subscribers saw: the result alone
    messages = (await called_agent.sessions.state()).messages
    assert [m.role for m in messages] == ["user", *["assistant", "tool"] * 3, "assistant"]
    results = [r.text for m in messages for r in m.tool_results]
    assert results[:2] == ["3", "7"]
    assert results[2].startswith("Invalid arguments for tool 'add'")
    assert messages[-1].text == "The sum is 7."


async def test_max_iterations_and_repeat_guard_end_the_same_way_under_call() -> None:
    same = [ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 1})])] * 4 + ["gave up"]
    options = AgentOptions(max_iters=4, repeat_guard=2)
    streamed, _ = await run(ReActAgent(ScriptedModel(same), Toolkit([add]), options=options), "loop")
    called_agent = ReActAgent(ScriptedModel(same), Toolkit([add]), options=options)
    called = await called_agent.call("loop")
    assert essentials(called) == essentials(streamed)
    assert called.reason == "MAX_ITERATIONS"
    saved = (await called_agent.sessions.state()).messages
    hints = [m for m in saved if m.metadata.get("rxagent") == "repeat_guard"]
    assert len(hints) == 2  # the guard still acts (it steers the model) though its events are not built


async def test_an_acting_hook_sees_the_tool_events_under_call() -> None:
    seen: list[str] = []

    class Watch(Middleware):
        def acting(
            self, step: ActingStep, ctx: RuntimeContext, next: Callable[[ActingStep], Observable[AgentEvent]]
        ) -> Observable[AgentEvent]:
            return next(step).pipe(ops.do_action(lambda event: seen.append(type(event).__name__)))

    agent = ReActAgent(ScriptedModel(script()), Toolkit([add]), middleware=[Watch()])
    result = await agent.call("add")
    assert result.text == "The sum is 7."
    assert seen.count(ToolResult.__name__) == 3
    assert seen.count(ToolExecutionStarted.__name__) == 2  # the invalid call never starts


async def test_a_request_hook_still_shapes_the_request_under_call() -> None:
    model = ScriptedModel(["fine"])
    trimmed = insert("request", ops.map(lambda request: dataclasses.replace(request, max_tokens=5)))
    result = await ReActAgent(model, middleware=[trimmed]).call("hi")
    assert result.text == "fine"
    assert model.requests[0].max_tokens == 5


async def test_a_finished_run_leaves_no_cycles_for_the_garbage_collector() -> None:
    # Every step's subscriptions, closures and messages go when the run ends, by reference counting: a run
    # that left cycles behind made the collector sweep after every conversation.
    agent = ReActAgent(ScriptedModel(script() * 3), Toolkit([add]))
    await agent.call("warm up")
    gc.collect()
    gc.disable()
    try:
        await agent.call("add")
        await to_list(agent.stream_events("add again"))
        await asyncio.sleep(0)  # let finished tasks run their done callbacks
        assert gc.collect() == 0
    finally:
        gc.enable()
