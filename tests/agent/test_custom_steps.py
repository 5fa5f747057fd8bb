"""Custom steps get the built-in steps' guarantees: interrupt, cancel without leaks, save on error,
middleware; and the decisions between steps are plain functions a test calls without streams.

Bad inputs tried: a step that raises, a step that errors its stream, a step that completes without
naming the next node, a node no step handles, a StopRun from a custom step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, Middleware, ReActAgent, ReasoningStep, RunControl, StopRun
from rxagent.agent.loop import (
    Act,
    Finish,
    Reason,
    Reprompt,
    RunInput,
    RunState,
    Start,
    StepOutput,
    after_reasoning,
    after_tools,
    continue_reasoning,
    emit,
    reason_step,
    route_input,
    start_step,
)
from rxagent.context import RunContext, RuntimeContext
from rxagent.events import AgentEvent, AgentResult, ErrorEvent, StepNote
from rxagent.messages import Msg, ToolUseBlock
from rxagent.operators import from_async_iterable, to_list
from rxagent.state import AgentState
from rxagent.tools import Toolkit, tool
from tests.streams import expect

from .helpers import check_invariants, run

CTX = RuntimeContext(user_id="u", session_id="custom")


@dataclass(frozen=True)
class Think:
    """A custom node: a step of the test's own before the model."""

    label: str = "think"


def starting_with(step: Callable[[Think, RunState], Observable[StepOutput]], *script: Any) -> ReActAgent:
    def route(approved: tuple[ToolUseBlock, ...], run: RunState) -> Any:
        return Think() if not approved and not run.state.pending else route_input(approved, run)

    return ReActAgent(ScriptedModel(list(script)), steps={Start: start_step(route), Think: step})


def noting(node: Think, run: RunState) -> Observable[StepOutput]:
    run.add_messages([Msg.system(f"({node.label}: be brief)")])
    return emit(StepNote(**run.head, source="test", text=node.label), then=Reason())


class Held:
    """A custom step that waits forever, recording whether its work was cancelled and cleaned up."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cleaned = asyncio.Event()

    def __call__(self, node: Think, run: RunState) -> Observable[StepOutput]:
        async def wait() -> AsyncIterator[StepOutput]:
            self.started.set()
            try:
                await asyncio.Event().wait()
            finally:
                self.cleaned.set()
            yield emit(then=Reason())  # never reached  # type: ignore[misc]

        return from_async_iterable(wait)


async def test_a_custom_step_runs_between_the_built_in_ones() -> None:
    agent = starting_with(noting, "short answer")
    result, events = await run(agent, "hi", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "short answer")
    assert [e.text for e in events if isinstance(e, StepNote)] == ["think"]
    sent = agent.model.requests[0].messages  # type: ignore[attr-defined]
    assert sent[-1].text == "(think: be brief)"


async def test_an_interrupt_cuts_a_custom_step_and_ends_the_run_interrupted() -> None:
    held = Held()
    agent = starting_with(held)
    control = RunControl()

    async def interrupt() -> None:
        await asyncio.wait_for(held.started.wait(), 5)
        control.interrupt()

    helper = asyncio.ensure_future(interrupt())
    result, events = await asyncio.wait_for(run(agent, "hi", CTX, control), 5)
    await helper
    assert result.reason == "INTERRUPTED"
    assert held.cleaned.is_set()
    check_invariants(events)
    assert [m.text for m in (await agent.sessions.state(CTX)).messages] == ["hi"]  # saved


async def test_a_cancel_during_a_custom_step_releases_it_saves_and_frees_the_session() -> None:
    held = Held()
    agent = starting_with(held, "second run")
    seen = expect(agent.stream_events("first", CTX))
    await asyncio.wait_for(held.started.wait(), 5)
    seen.dispose()
    await asyncio.wait_for(held.cleaned.wait(), 5)
    agent.steps = {**agent.steps, Think: noting}  # the next run passes the custom step
    assert (await asyncio.wait_for(agent.call("again", CTX), 5)).text == "second run"
    assert seen.outcome is None
    texts = [m.text for m in (await agent.sessions.state(CTX)).messages]
    assert texts == ["first", "again", "(think: be brief)", "second run"]


def raising(node: Think, run: RunState) -> Observable[StepOutput]:
    raise ValueError("the custom step broke")


def erroring(node: Think, run: RunState) -> Observable[StepOutput]:
    async def fail() -> AsyncIterator[StepOutput]:
        yield StepNote(**run.head, source="test", text="about to fail")
        raise ValueError("the custom step broke")

    return from_async_iterable(fail)


def silent(node: Think, run: RunState) -> Observable[StepOutput]:
    return emit(then=Finish("MODEL_STOP")).pipe(ops.take(0))


@pytest.mark.parametrize(
    ("step", "error", "why"),
    [
        (raising, ValueError, "the custom step broke"),
        (erroring, ValueError, "the custom step broke"),
        (silent, RuntimeError, "without naming the next node"),
    ],
    ids=["raises", "errors", "no-next"],
)
async def test_a_failing_custom_step_ends_with_an_error_result_after_saving(
    step: Callable[[Think, RunState], Observable[StepOutput]], error: type[Exception], why: str
) -> None:
    agent = starting_with(step)
    seen = await asyncio.wait_for(expect(agent.stream_events("hi", CTX)), 5)
    assert isinstance(seen.error, error)
    assert why in str(seen.error)
    report, result = seen.items[-3], seen.items[-1]
    assert isinstance(report, ErrorEvent)
    assert isinstance(result, AgentResult)
    assert result.reason == "ERROR"
    assert [m.text for m in (await agent.sessions.state(CTX)).messages] == ["hi"]


async def test_a_node_without_a_step_is_a_clear_error() -> None:
    def route(approved: tuple[ToolUseBlock, ...], run: RunState) -> Any:
        return Think("unhandled")

    agent = ReActAgent(ScriptedModel([]), steps={Start: start_step(route)})
    with pytest.raises(KeyError, match="no step for node Think"):
        await agent.call("hi", CTX)


async def test_a_stop_run_from_a_custom_step_ends_the_run_stopped() -> None:
    def stopping(node: Think, run: RunState) -> Observable[StepOutput]:
        raise StopRun("the custom step said so")

    result = await starting_with(stopping).call("hi", CTX)
    assert (result.reason, result.detail) == ("STOPPED", "the custom step said so")


async def test_middleware_sees_custom_steps_and_wraps_reasoning_turns_they_reuse() -> None:
    seen: list[str] = []
    turns: list[ReasoningStep] = []

    class Watch(Middleware):
        def agent(
            self, run: RunInput, ctx: RunContext, next: Callable[[RunInput], Observable[AgentEvent]]
        ) -> Observable[AgentEvent]:
            return next(run).pipe(ops.do_action(lambda e: seen.append(e.type)))

        def reasoning(
            self,
            step: ReasoningStep,
            ctx: RunContext,
            next: Callable[[ReasoningStep], Observable[AgentEvent]],
        ) -> Observable[AgentEvent]:
            turns.append(step)
            return next(step)

    @dataclass(frozen=True)
    class Draft:
        pass

    def route(approved: tuple[ToolUseBlock, ...], run: RunState) -> Any:
        return Draft()

    draft = reason_step(lambda node, message, run: Reason(), instructions="Draft first.", tools=False)
    model = ScriptedModel(["a draft", "final"])
    agent = ReActAgent(model, steps={Start: start_step(route), Draft: draft}, middleware=[Watch()])
    result = await agent.call("hi", CTX)
    assert result.text == "final"
    assert [t.iteration for t in turns] == [1, 2]  # the custom drafting turn passed the reasoning hook
    assert seen[0] == "run_started"
    assert seen.count("message_completed") == 2
    assert model.requests[0].messages[-1].text == "Draft first."


# ---- decisions, without streams ----------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def run_state(agent: ReActAgent, iteration: int = 1) -> RunState:
    async def save(_: Exception | None) -> None:
        return None

    state = RunState(agent, CTX, (CTX.user_id, "custom"), AgentState(), RunControl(), save)
    state.iteration = iteration
    return state


def test_decisions_are_plain_functions() -> None:
    agent = ReActAgent(ScriptedModel([]), Toolkit([add]), options=AgentOptions(max_iters=3))
    run = run_state(agent)
    call = ToolUseBlock(id="c1", name="add", input={"a": 1, "b": 2})
    assert after_reasoning(Reason(), Msg(role="assistant", content=(call,)), run) == Act((call,))
    answer = Msg.assistant("3")
    assert after_reasoning(Reason(), answer, run) == Finish("MODEL_STOP", answer)
    blank = Msg.assistant("  ")
    assert after_reasoning(Reason(), blank, run) == Reprompt()
    run.reprompted = True
    assert after_reasoning(Reason(), blank, run) == Finish(
        "NO_ANSWER", blank, detail="the model gave no answer text twice"
    )
    assert after_reasoning(Reason(summarising=True), blank, run).reason == "MAX_ITERATIONS"
    assert continue_reasoning(run) == Reason()
    assert continue_reasoning(run_state(agent, iteration=3)) == Reason(summarising=True)
    assert route_input((call,), run) == Act((call,), frozenset({"c1"}))
    assert after_tools(run) == Reason()
    run.failure = "the pool died"
    assert after_tools(run) == Finish("ERROR", None, detail="tool system error: the pool died")


async def test_a_custom_assembly_keeps_the_event_invariants() -> None:
    agent = starting_with(
        noting, ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 2})]), "3"
    )
    agent.toolkit.register(add)
    events = await to_list(agent.stream_events("1+2", CTX))
    result = check_invariants(events)
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "3", 2)
