"""Middleware semantics: where a rewrite lands, short-circuits, retries, stopping a run, onion order."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ActingStep, Middleware, ReActAgent, ReasoningStep, StopRun, insert
from rxagent.agent.loop import RunInput
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, MessageCompleted, TextDelta, ToolResult
from rxagent.model import ChatChunk, ChatRequest, ModelHTTPError
from rxagent.tools import ToolEvent, ToolInvocation, Toolkit, tool

from .helpers import of_type, run


def upper_chunk(chunk: ChatChunk) -> ChatChunk:
    return dataclasses.replace(chunk, text=chunk.text.upper())


def upper_event(event: AgentEvent) -> AgentEvent:
    if isinstance(event, TextDelta):
        return dataclasses.replace(event, text=event.text.upper())
    return event


async def test_text_rewritten_at_model_call_is_what_history_keeps() -> None:
    model = ScriptedModel(["hello there", "second"])
    agent = ReActAgent(model, middleware=[insert("model_call", ops.map(upper_chunk))])
    result, events = await run(agent, "hi")
    assert result.text == "HELLO THERE"
    assert "".join(e.text for e in of_type(events, TextDelta)) == "HELLO THERE"  # type: ignore[attr-defined]
    await run(agent, "again")
    assert model.requests[1].messages[1].text == "HELLO THERE"


async def test_text_rewritten_at_reasoning_or_agent_changes_only_what_subscribers_see() -> None:
    for cut_point in ("reasoning", "agent"):
        model = ScriptedModel(["hello there", "second"])
        agent = ReActAgent(model, middleware=[insert(cut_point, ops.map(upper_event))])  # type: ignore[arg-type]
        _, events = await run(agent, "hi", deltas_match=False)
        assert "".join(e.text for e in of_type(events, TextDelta)) == "HELLO THERE"  # type: ignore[attr-defined]
        completed = [e for e in of_type(events, MessageCompleted) if e.message.role == "assistant"]  # type: ignore[attr-defined]
        assert completed[0].message.text == "hello there"  # type: ignore[attr-defined]
        await run(agent, "again", deltas_match=False)
        assert model.requests[1].messages[1].text == "hello there", cut_point


class Cache(Middleware):
    """Answers repeated requests from a cache instead of calling the model."""

    def __init__(self) -> None:
        self.cache: dict[str, list[ChatChunk]] = {}
        self.hits = 0

    def model_call(
        self, request: ChatRequest, ctx: RuntimeContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        key = request.messages[-1].text
        if key in self.cache:
            self.hits += 1
            return reactivex.from_iterable(self.cache[key])
        return next(request).pipe(
            ops.to_list(),
            ops.do_action(lambda chunks: self.cache.__setitem__(key, chunks)),
            ops.flat_map(reactivex.from_iterable),
        )


async def test_a_middleware_can_short_circuit_the_model_call() -> None:
    model = ScriptedModel(["computed once"])
    cache = Cache()
    agent = ReActAgent(model, middleware=[cache])
    first, _ = await run(agent, "question", RuntimeContext(session_id="a"))
    second, _ = await run(agent, "question", RuntimeContext(session_id="b"))
    assert first.text == second.text == "computed once"
    assert (cache.hits, len(model.requests)) == (1, 1)


async def test_a_middleware_can_retry_a_model_call() -> None:
    class RetryOnce(Middleware):
        def model_call(
            self,
            request: ChatRequest,
            ctx: RuntimeContext,
            next: Callable[[ChatRequest], Observable[ChatChunk]],
        ) -> Observable[ChatChunk]:
            return next(request).pipe(ops.catch(lambda error, _: next(request)))

    model = ScriptedModel([ModelHTTPError(400, "flaky proxy"), "worked"])
    result, _ = await run(ReActAgent(model, middleware=[RetryOnce()]), "hi")
    assert result.text == "worked"
    assert len(model.requests) == 2


@pytest.mark.parametrize("raised", [False, True], ids=["emitted", "raised"])
async def test_a_middleware_can_stop_the_run_with_a_reason(raised: bool) -> None:
    class Budget(Middleware):
        def reasoning(
            self,
            step: ReasoningStep,
            ctx: RuntimeContext,
            next: Callable[[ReasoningStep], Observable[AgentEvent]],
        ) -> Observable[AgentEvent]:
            if step.iteration > 1:
                if raised:  # raised by the hook itself instead of failing its stream: the same stop
                    raise StopRun("token budget spent")
                return reactivex.throw(StopRun("token budget spent"))
            return next(step)

    @tool
    def noop() -> str:
        """Nothing."""
        return "ok"

    model = ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("noop", {})]), "never"])
    result, _ = await run(ReActAgent(model, Toolkit([noop]), middleware=[Budget()]), "go")
    assert (result.reason, result.detail) == ("STOPPED", "token budget spent")
    assert len(model.requests) == 1


async def test_the_request_hook_sees_and_rewrites_the_final_request() -> None:
    seen: list[ChatRequest] = []

    class Tag(Middleware):
        def request(
            self,
            request: ChatRequest,
            ctx: RuntimeContext,
            next: Callable[[ChatRequest], Observable[ChatRequest]],
        ) -> Observable[ChatRequest]:
            seen.append(request)
            return next(dataclasses.replace(request, extra={"user": ctx.user_id}, temperature=0.0))

    model = ScriptedModel(["ok"])
    await run(ReActAgent(model, middleware=[Tag()]), "hi", RuntimeContext(user_id="ada", session_id="x"))
    assert len(seen) == 1
    assert model.requests[0].extra == {"user": "ada"}
    assert model.requests[0].temperature == 0.0


async def test_hooks_compose_like_an_onion_in_list_order() -> None:
    order: list[str] = []

    class Named(Middleware):
        def __init__(self, name: str) -> None:
            self.name = name

        def agent(
            self, run_input: RunInput, ctx: RuntimeContext, next: Callable[[RunInput], Observable[AgentEvent]]
        ) -> Observable[AgentEvent]:
            order.append(f"{self.name} in")
            return next(run_input).pipe(ops.do_action(on_completed=lambda: order.append(f"{self.name} out")))

    await run(ReActAgent(ScriptedModel(["ok"]), middleware=[Named("outer"), Named("inner")]), "hi")
    assert order == ["outer in", "inner in", "inner out", "outer out"]


async def test_acting_and_tool_call_hooks_wrap_the_batch_and_each_call() -> None:
    @tool
    def double(n: int) -> int:
        """Double it."""
        return 2 * n

    batches: list[tuple[str, ...]] = []

    class Watch(Middleware):
        def acting(
            self, step: ActingStep, ctx: RuntimeContext, next: Callable[[ActingStep], Observable[AgentEvent]]
        ) -> Observable[AgentEvent]:
            batches.append(tuple(c.name for c in step.calls))
            return next(step)

        def tool_call(
            self,
            invocation: ToolInvocation,
            ctx: RuntimeContext,
            next: Callable[[ToolInvocation], Observable[ToolEvent]],
        ) -> Observable[ToolEvent]:
            if invocation.arguments.get("n") == 0:
                return invocation.finished("refusing zero")
            return next(invocation.with_arguments({"n": int(invocation.arguments["n"]) + 1}))

    script = [
        ScriptedResponse(
            tool_calls=[ScriptedToolCall("double", {"n": 0}), ScriptedToolCall("double", {"n": 4})]
        ),
        "done",
    ]
    _, events = await run(ReActAgent(ScriptedModel(script), Toolkit([double]), middleware=[Watch()]), "go")
    assert batches == [("double", "double")]
    assert [e.result.text for e in of_type(events, ToolResult)] == ["refusing zero", "10"]  # type: ignore[attr-defined]


async def test_request_hooks_may_publish_events_and_keep_data_in_the_session_state() -> None:
    from rxagent.context import RunContext
    from rxagent.events import ErrorEvent

    class Counting(Middleware):
        def request(
            self,
            request: ChatRequest,
            ctx: RunContext,
            next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
        ) -> Observable[ChatRequest | AgentEvent]:
            assert ctx.state is not None
            seen = ctx.state.extras.get("counting", 0)
            assert isinstance(seen, int)
            ctx.state.extras["counting"] = seen + 1
            note = ErrorEvent(
                run_id=ctx.run_id,
                session_id=ctx.session_id,
                trace_id=ctx.trace_id,
                seq=0,
                error_type="Note",
                message=f"request {seen + 1}",
            )
            return reactivex.concat(reactivex.of(note), next(request))

    agent = ReActAgent(ScriptedModel(["one", "two"]), middleware=[Counting()])
    _, events = await run(agent, "a")
    notes = [e for e in events if e.type == "error"]
    assert [n.message for n in notes] == ["request 1"]  # type: ignore[attr-defined]
    assert events.index(notes[0]) < [e.type for e in events].index("model_call_started")
    await run(agent, "b")
    assert (await agent.sessions.state()).extras == {"counting": 2}


class WatchingRun(Middleware):
    """Notes the type of every event its agent hook sees."""

    def __init__(self) -> None:
        self.types: list[str] = []

    def agent(
        self, run: RunInput, ctx: RuntimeContext, next: Callable[[RunInput], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        return next(run).pipe(ops.do_action(lambda event: self.types.append(event.type)))


class ResultOnly(WatchingRun):
    watches_events = False


async def test_call_builds_step_events_only_for_hooks_that_watch_them() -> None:
    for middleware, built in ((WatchingRun(), True), (ResultOnly(), False)):
        agent = ReActAgent(ScriptedModel(["hello there", "again"]), middleware=[middleware])
        result = await agent.call("hi")
        assert result.text == "hello there"
        assert ("text_delta" in middleware.types) is built
        assert ("run_started" in middleware.types) is built
        assert middleware.types[-1] == "agent_result"
        # stream_events always builds them: its caller watches
        middleware.types.clear()
        await run(agent, "again")
        assert "text_delta" in middleware.types
