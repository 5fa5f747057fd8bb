"""Trace ids and ``traceparent``: W3C ids by default, a caller's trace joined through its header, and the
run's own facts (agent, model, provider) in the context hooks receive."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from reactivex import Observable

from rxagent import ScriptedModel
from rxagent.agent import Middleware, ReActAgent
from rxagent.agent.loop import RunInput
from rxagent.context import RunContext, RuntimeContext, TraceParent, is_trace_id, new_trace_id
from rxagent.events import AgentEvent
from rxagent.model import ChatChunk, ChatRequest, provider_of
from rxagent.operators import to_list

from .agent.helpers import run

HEADER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_new_trace_ids_are_w3c_ids_and_differ() -> None:
    ids = {new_trace_id() for _ in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 32 and is_trace_id(i) for i in ids)
    assert RuntimeContext().trace_id != RuntimeContext().trace_id
    assert is_trace_id(RuntimeContext().trace_id)


def test_is_trace_id_rejects_what_the_w3c_forbids() -> None:
    assert is_trace_id("4bf92f3577b34da6a3ce929d0e0e4736")
    assert not is_trace_id("0" * 32)  # all zeros
    assert not is_trace_id("4BF92F3577B34DA6A3CE929D0E0E4736")  # uppercase
    assert not is_trace_id("4bf92f3577b34da6a3ce929d0e0e473")  # 31 digits
    assert not is_trace_id("trace_4bf92f3577b34da6a3ce929d")  # the old prefixed form
    assert not is_trace_id("")


def test_a_traceparent_is_read_and_written_back() -> None:
    parent = TraceParent.parse(HEADER)
    assert parent == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", sampled=True)
    assert parent.header() == HEADER
    unsampled = TraceParent.parse("  00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00 ")
    assert not unsampled.sampled
    assert unsampled.header().endswith("-00")
    # Flags other than "sampled" are ignored; a later version may add fields after the four.
    assert TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03").sampled
    future = TraceParent.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more-fields")
    assert future.span_id == "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("", "not a W3C traceparent"),
        ("garbage", "not a W3C traceparent"),
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "not a W3C traceparent"),  # uppercase
        ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", "not a W3C traceparent"),  # short id
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b-01", "not a W3C traceparent"),  # short span
        ("00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", "not a W3C traceparent"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "exactly four fields"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "all-zero trace id"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "all-zero parent span id"),
    ],
)
def test_a_bad_traceparent_is_refused_with_the_reason(header: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        TraceParent.parse(header)
    ctx = RuntimeContext(session_id="s")
    with pytest.raises(ValueError, match=why):
        ctx.with_traceparent(header)


def test_with_traceparent_joins_the_trace_and_keeps_the_rest() -> None:
    ctx = RuntimeContext(user_id="u", session_id="s", attributes={"tenant": "acme"}, parent_run_id="run_p")
    joined = ctx.with_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")
    assert (joined.trace_id, joined.parent_span_id, joined.trace_sampled) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
        False,
    )
    assert (joined.user_id, joined.session_id, joined.attributes, joined.parent_run_id) == (
        "u",
        "s",
        {"tenant": "acme"},
        "run_p",
    )
    assert ctx.parent_span_id is None  # the original is untouched
    run_ctx = RunContext(session_id="s", run_id="run_1").with_traceparent(HEADER)
    assert isinstance(run_ctx, RunContext)
    assert run_ctx.run_id == "run_1"


class Recording(Middleware):
    """Keeps the context every hook receives."""

    def __init__(self) -> None:
        self.seen: list[RunContext] = []

    def agent(
        self, run: RunInput, ctx: RunContext, next: Callable[[RunInput], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        self.seen.append(ctx)
        return next(run)

    def model_call(
        self, request: ChatRequest, ctx: RunContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        self.seen.append(ctx)
        return next(request)


async def test_hooks_see_the_runs_agent_model_provider_and_trace() -> None:
    recording = Recording()
    agent = ReActAgent(ScriptedModel(["hi"], model_name="tiny"), name="greeter", middleware=[recording])
    ctx = RuntimeContext(session_id="s").with_traceparent(HEADER)
    result, _ = await run(agent, "hello", ctx)
    assert result.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert len(recording.seen) == 2
    for seen in recording.seen:
        assert (seen.agent_name, seen.model_name, seen.provider_name) == (
            "greeter",
            "tiny",
            "rxagent.scripted",
        )
        assert (seen.trace_id, seen.parent_span_id, seen.run_id) == (
            ctx.trace_id,
            "00f067aa0ba902b7",
            result.run_id,
        )


async def test_a_run_named_by_its_caller_has_that_id_in_its_context() -> None:
    recording = Recording()
    agent = ReActAgent(ScriptedModel(["hi"]), middleware=[recording])
    events = await to_list(agent.stream_events("hello", run_id="run_chosen"))
    assert {e.run_id for e in events} == {"run_chosen"}
    assert {c.run_id for c in recording.seen} == {"run_chosen"}


def test_provider_of_a_model_without_a_provider_name_is_its_class_name() -> None:
    class MyModel(ScriptedModel):
        provider_name = ""

    assert provider_of(ScriptedModel(["x"])) == "rxagent.scripted"
    assert provider_of(MyModel(["x"])) == "MyModel"
