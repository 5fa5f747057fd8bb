"""`call` is `stream_events` filtered to the result, even where it skips building events nobody sees;
`run_sync` is `call` for scripts.

Bad inputs tried: ``run_sync`` and ``close`` where an event loop runs (a coroutine), text a log cannot keep
given to ``run_sync``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ActingStep, AgentOptions, InvalidInputError, Middleware, ReActAgent, insert
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, ToolExecutionStarted, ToolResult
from rxagent.messages import Msg
from rxagent.operators import to_list
from rxagent.session import SQLiteStore
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


def test_run_sync_answers_a_script_and_close_lets_the_store_it_opened_go(tmp_path: Path) -> None:
    # No event loop runs in a sync test, as in a script.
    path = str(tmp_path / "sessions.db")
    model = ScriptedModel(["Hello, Ada.", "You are Ada."])
    agent = ReActAgent(model, store=path)
    assert agent.run_sync("I am Ada.").text == "Hello, Ada."
    assert agent.run_sync("Who am I?").text == "You are Ada."  # the same store, on the same loop
    assert [m.text for m in model.requests[1].messages] == ["I am Ada.", "Hello, Ada.", "Who am I?"]
    store = agent.store
    assert isinstance(store, SQLiteStore)
    assert all(thread.is_alive() for thread in store.threads)  # open for the next run_sync
    agent.close()
    assert not any(thread.is_alive() for thread in store.threads)

    # Each run_sync gave the session back: another agent (another script) takes it without waiting.
    later = ReActAgent(ScriptedModel(["Still Ada."]), store=path, options=AgentOptions(session_wait=0))
    assert later.run_sync("And now?", None).text == "Still Ada."
    later.close()


def test_close_leaves_a_store_passed_in_open(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    agent = ReActAgent(ScriptedModel(["hi"]), store=store)
    assert agent.run_sync("hello").text == "hi"
    agent.close()
    assert all(thread.is_alive() for thread in store.threads)  # its owner closes it
    asyncio.run(store.aclose())


def test_run_sync_raises_what_call_raises_and_the_agent_goes_on(tmp_path: Path) -> None:
    model = ScriptedModel(["fine"])
    agent = ReActAgent(model, store=str(tmp_path / "sessions.db"))
    with pytest.raises(InvalidInputError, match="the text holds"):
        agent.run_sync(Msg.user("caf\udce9"))  # a lone surrogate: no log can keep it
    assert agent.run_sync("hello").text == "fine"
    assert [m.text for m in model.requests[0].messages] == ["hello"]  # nothing of the refused input
    agent.close()


async def test_run_sync_where_a_loop_runs_refuses_at_once_and_runs_nothing() -> None:
    model = ScriptedModel(["answered by call"])
    agent = ReActAgent(model)
    with pytest.raises(RuntimeError, match=r"Use `await agent\.call\(\.\.\.\)` there"):
        agent.run_sync("hi")
    with pytest.raises(RuntimeError, match=r"Use `await agent\.aclose\(\)` there"):
        agent.close()
    assert model.requests == []
    assert await agent.sessions.facts() == []
    assert (await agent.call("hi")).text == "answered by call"
