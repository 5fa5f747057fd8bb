"""Custom steps get the built-in steps' guarantees: interrupt, cancel without leaks, save on error,
middleware; and the decisions between steps are plain functions a test calls without streams.

An assembly is ``react_steps().on(Think, step)`` with typed steps (``Step[Think, Reason]``): the type
checker verifies each edge, and at run time a node no step handles is a clear error.

Bad inputs tried: a step that raises, a step that errors its stream, a step that completes without
naming the next node, a node no step handles, a StopRun from a custom step, a registration for a type
that is not a node.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import ClassVar, Literal, NoReturn

import pytest
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import Agent, AgentOptions, Middleware, ReasoningStep, RunControl, StopRun
from rxagent.agent.loop import (
    Act,
    AppliedInput,
    Finish,
    Node,
    ReActNode,
    Reason,
    Reprompt,
    RunInput,
    RunState,
    Start,
    Step,
    StepOutput,
    Steps,
    after_acting,
    after_reasoning,
    after_tools,
    continue_reasoning,
    emit,
    new_run,
    react_steps,
    reason_step,
    route_input,
    start_step,
)
from rxagent.context import RunContext, RuntimeContext
from rxagent.events import AgentEvent, AgentResult, ErrorEvent, StepNote
from rxagent.messages import Msg, ToolUseBlock
from rxagent.operators import from_async_iterable, to_list
from rxagent.state import AgentState, PendingCall
from rxagent.tools import ToolBatchFinished, Toolkit, result_of, tool
from tests.streams import expect

from .helpers import check_invariants, run

CTX = RuntimeContext(user_id="u", session_id="custom")


@dataclass(frozen=True, slots=True)
class Think(Node):
    """A custom node: a step of the test's own before the model."""

    label: str = "think"


def think_first(applied: AppliedInput, run: RunState) -> Act | Finish | Reason | Think:
    """The start's route: new text goes to ``Think`` first; answers for waiting calls as usual."""
    return Think() if not applied.approved and not run.pending else route_input(applied, run)


def starting_with(step: Step[Think, Reason], *script: str | ScriptedResponse) -> Agent:
    steps: Steps[ReActNode | Think] = react_steps().on(Think, step).on(Start, start_step(think_first))
    return Agent(ScriptedModel(list(script)), steps=steps)


def noting(node: Think, run: RunState) -> Observable[StepOutput[Reason]]:
    run.add_messages([Msg.system(f"({node.label}: be brief)")])
    return emit(StepNote(**run.head, source="test", text=node.label), then=Reason())


class Held:
    """A custom step that waits forever, recording whether its work was cancelled and cleaned up."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cleaned = asyncio.Event()

    def __call__(self, node: Think, run: RunState) -> Observable[StepOutput[Reason]]:
        async def wait() -> AsyncIterator[StepOutput[Reason]]:
            self.started.set()
            try:
                await asyncio.Event().wait()
            finally:
                self.cleaned.set()
            yield StepNote(**run.head, source="test", text="never reached")

        return from_async_iterable(wait)


async def test_a_custom_step_runs_between_the_built_in_ones() -> None:
    agent = starting_with(noting, "short answer")
    result, events = await run(agent, "hi", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "short answer")
    assert [e.text for e in events if isinstance(e, StepNote)] == ["think"]
    assert isinstance(agent.model, ScriptedModel)
    assert agent.model.requests[0].messages[-1].text == "(think: be brief)"


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
    agent.steps = agent.steps.on(Think, noting)  # the next run passes the custom step
    assert (await asyncio.wait_for(agent.call("again", CTX), 5)).text == "second run"
    assert seen.outcome is None
    texts = [m.text for m in (await agent.sessions.state(CTX)).messages]
    assert texts == ["first", "again", "(think: be brief)", "second run"]


def raising(node: Think, run: RunState) -> Observable[StepOutput[Reason]]:
    raise ValueError("the custom step broke")


def erroring(node: Think, run: RunState) -> Observable[StepOutput[Reason]]:
    async def fail() -> AsyncIterator[StepOutput[Reason]]:
        yield StepNote(**run.head, source="test", text="about to fail")
        raise ValueError("the custom step broke")

    return from_async_iterable(fail)


def silent(node: Think, run: RunState) -> Observable[StepOutput[Reason]]:
    return emit(then=Reason()).pipe(ops.take(0))


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
    step: Step[Think, Reason], error: type[Exception], why: str
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
    def route(applied: AppliedInput, run: RunState) -> Think:
        return Think("unhandled")

    # `widen` announces Think to the checker without registering a step for it: only the run finds out
    steps = react_steps().widen(Think).on(Start, start_step(route))
    with pytest.raises(KeyError, match="no step for node Think"):
        await Agent(ScriptedModel([]), steps=steps).call("hi", CTX)


def test_only_node_types_take_steps() -> None:
    with pytest.raises(TypeError, match="Node subclasses"):
        react_steps().on(str, noting)  # type: ignore[arg-type]


async def test_a_stop_run_from_a_custom_step_ends_the_run_stopped() -> None:
    def stopping(node: Think, run: RunState) -> NoReturn:
        raise StopRun("the custom step said so")

    result = await starting_with(stopping).call("hi", CTX)
    assert (result.reason, result.detail) == ("STOPPED", "the custom step said so")


@dataclass(frozen=True, slots=True)
class Draft(Node):
    """A custom model turn: the loop wraps its step in the ``reasoning`` cut point, as it wraps Reason's."""

    cut_point: ClassVar[Literal["reasoning", "acting"] | None] = "reasoning"


async def test_middleware_sees_custom_steps_and_wraps_the_model_turns_of_custom_nodes() -> None:
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

    def then_answer(node: Draft, message: Msg | None, run: RunState) -> Reason:
        return Reason()

    def route(applied: AppliedInput, run: RunState) -> Think:
        return Think()

    def to_draft(node: Think, run: RunState) -> Observable[StepOutput[Draft]]:
        return emit(StepNote(**run.head, source="test", text="drafting"), then=Draft())

    draft = reason_step(then_answer, instructions="Draft first.", tools=False)
    steps = react_steps().on(Draft, draft).on(Think, to_draft).on(Start, start_step(route))
    model = ScriptedModel(["a draft", "final"])
    agent = Agent(model, steps=steps, middleware=[Watch()])
    result = await agent.call("hi", CTX)
    assert result.text == "final"
    assert [t.iteration for t in turns] == [1, 2]  # the Draft turn passed the reasoning hook; Think did not
    assert seen[0] == "run_started"
    assert "step_note" in seen  # the agent hook sees the custom step's events
    assert seen.count("message_completed") == 2
    assert model.requests[0].messages[-1].text == "Draft first."


# ---- decisions, without streams ----------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


def a_run(iteration: int = 1, state: AgentState | None = None) -> RunState:
    """A run's state with no agent object at all."""
    run = new_run(ScriptedModel([]), Toolkit([add]), options=AgentOptions(max_iters=3), ctx=CTX, state=state)
    run.iteration = iteration
    return run


def test_decisions_are_plain_functions() -> None:
    run = a_run()
    call = ToolUseBlock(id="c1", name="add", input={"a": 1, "b": 2})
    assert after_reasoning(Reason(), Msg(role="assistant", content=(call,)), run) == Act((call,))
    answer = Msg.assistant("3")
    assert after_reasoning(Reason(), answer, run) == Finish("MODEL_STOP", answer)
    blank = Msg.assistant("  ")
    assert after_reasoning(Reason(), blank, run) == Reprompt()
    assert after_reasoning(Reason(reprompted=True), blank, run) == Finish(
        "NO_ANSWER", blank, detail="the model gave no answer text twice"
    )
    no_message = Finish("NO_ANSWER", None, detail="the reasoning step produced no message")
    assert after_reasoning(Reason(), None, run) == no_message
    assert after_reasoning(Reason(summarising=True), blank, run) == Finish("MAX_ITERATIONS", blank)
    assert continue_reasoning(run) == Reason()
    assert continue_reasoning(a_run(iteration=3)) == Reason(summarising=True)
    assert route_input(AppliedInput((call,)), run) == Act((call,), frozenset({"c1"}))
    assert after_tools(run) == Reason()
    waiting = a_run(state=AgentState(pending=[PendingCall(call=call, kind="ask")]))
    assert after_tools(waiting) == Finish("PERMISSION_ASKING")
    direct = ToolBatchFinished(results=(result_of(call, "3", "ok"),), waiting=(), return_direct=True)
    finished = after_acting(direct, run)
    assert isinstance(finished, Finish)
    assert finished.reason == "TOOL_RETURN_DIRECT"
    assert finished.message is not None
    assert finished.message.text == "3"


async def test_a_custom_assembly_keeps_the_event_invariants() -> None:
    agent = starting_with(
        noting, ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 2})]), "3"
    )
    agent.toolkit.register(add)
    events = await to_list(agent.stream_events("1+2", CTX))
    result = check_invariants(events)
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "3", 2)
