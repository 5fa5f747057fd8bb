"""The ReAct agent end to end over HTTP: ``OpenAIChatModel`` against a real aiohttp server on 127.0.0.1.

Everything is asserted through the public surface: the events of ``stream_events``, the final
``AgentResult``, and the JSON bodies the server received (what the agent sent back to the model).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.events import (
    AgentEvent,
    AgentResult,
    MessageCompleted,
    ModelCallStarted,
    RetryScheduled,
    RunStarted,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolResult,
)
from rxagent.messages import Msg
from rxagent.model.openai import OpenAIChatModel
from rxagent.operators import to_list
from rxagent.retry import RetryPolicy
from rxagent.tools import Toolkit, tool
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)

TINY_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, jitter=0.0)
"""Retries after 10 ms, so the retry test is fast (and the delay exact: no jitter)."""


@pytest.fixture
async def model(server: OpenAIServer) -> AsyncIterator[OpenAIChatModel]:
    async with make_model(server, retry=TINY_RETRY) as client:
        yield client


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


def answer_reply(*pieces: str, prompt: int = 30, completion: int = 4) -> Reply:
    """A streamed text answer: ``pieces`` as deltas, ``stop``, usage, ``[DONE]``."""
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}),
        *(text_chunk(piece) for piece in pieces),
        finish_chunk("stop"),
        usage_chunk(prompt, completion),
        DONE,
    )


def assistant_messages(events: Sequence[AgentEvent]) -> list[Msg]:
    return [e.message for e in events if isinstance(e, MessageCompleted) and e.message.role == "assistant"]


def check_event_order(events: Sequence[AgentEvent]) -> AgentResult:
    """Assert the invariants every run satisfies and return its result.

    RunStarted first; exactly one AgentResult, last; ``seq`` counts 0, 1, 2, …; every text or argument
    delta comes before the MessageCompleted that holds it (and the deltas add up to exactly that message);
    ToolResult events follow the order of the calls of the assistant message they answer.

    An argument fragment sent without an id belongs to the call last started at its index (the
    ToolCallStarted events say which), as a streaming UI would attribute it.
    """
    assert isinstance(events[0], RunStarted), events[0]
    results = [e for e in events if isinstance(e, AgentResult)]
    assert len(results) == 1
    assert events[-1] is results[0]
    assert [e.seq for e in events] == list(range(len(events)))
    text = ""
    started_at: dict[int, str | None] = {}
    fragments: dict[str | None, list[str]] = {}
    calls: list[str] = []
    for event in events:
        if isinstance(event, TextDelta):
            text += event.text
        elif isinstance(event, ToolCallStarted):
            started_at[event.index] = event.call_id
        elif isinstance(event, ToolCallArgumentsDelta):
            owner = event.call_id if event.call_id is not None else started_at[event.index]
            fragments.setdefault(owner, []).append(event.fragment)
        elif isinstance(event, MessageCompleted) and event.message.role == "assistant":
            assert event.message.text == text
            streamed = {owner: "".join(pieces) for owner, pieces in fragments.items()}
            assert streamed == {c.id: c.raw_arguments for c in event.message.tool_calls if c.raw_arguments}
            calls = [c.id for c in event.message.tool_calls]
            text, started_at, fragments = "", {}, {}
        elif isinstance(event, ToolResult):
            assert calls, "a tool result before (or without) the call it answers"
            assert event.result.tool_use_id == calls.pop(0), "tool results out of call order"
    assert text == "", "text deltas that no MessageCompleted holds"
    return results[0]


async def test_a_tool_round_then_an_answer(server: OpenAIServer, model: OpenAIChatModel) -> None:
    server.script(
        Reply.sse(
            chunk({"role": "assistant", "content": None}),
            tool_chunk(0, "call_add_1", "add", '{"a"'),
            tool_chunk(0, None, None, ": 2, "),
            tool_chunk(0, None, None, '"b": '),
            tool_chunk(0, None, None, "3}"),
            finish_chunk("tool_calls"),
            usage_chunk(11, 7),
            DONE,
        ),
        answer_reply("2 + 3", " = ", "5", prompt=30, completion=4),
    )
    agent = ReActAgent(model, Toolkit([add]), system_prompt="Use the tools.")

    events = await to_list(agent.stream_events("What is 2 + 3?"))

    result = check_event_order(events)
    assert result.reason == "MODEL_STOP"
    assert result.text == "2 + 3 = 5"
    assert result.iterations == 2
    assert (result.usage.input_tokens, result.usage.output_tokens) == (11 + 30, 7 + 4)
    assert (result.usage.total_tokens, result.usage.model_calls) == (52, 2)
    fragments = [e.fragment for e in events if isinstance(e, ToolCallArgumentsDelta)]
    assert fragments == ['{"a"', ": 2, ", '"b": ', "3}"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["2 + 3", " = ", "5"]
    [tool_result] = [e.result for e in events if isinstance(e, ToolResult)]
    assert (tool_result.tool_use_id, tool_result.name, tool_result.text, tool_result.status) == (
        "call_add_1",
        "add",
        "5",
        "ok",
    )

    first, second = (request.body for request in server.requests)
    assert first["stream"] is True
    assert [t["function"]["name"] for t in first["tools"]] == ["add"]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "tool"]
    assistant, tool_message = second["messages"][2:]
    [call] = assistant["tool_calls"]
    assert (call["id"], call["type"], call["function"]["name"]) == ("call_add_1", "function", "add")
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 3}
    assert tool_message == {"role": "tool", "tool_call_id": "call_add_1", "content": "5"}


async def test_an_http_500_is_retried_and_the_run_completes(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    server.script(Reply.error(500, "upstream overloaded"), answer_reply("Fine", " now."))
    agent = ReActAgent(model)

    events = await to_list(agent.stream_events("Hello?"))

    result = check_event_order(events)
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "Fine now.", 1)
    assert result.usage.model_calls == 1
    [retry] = [e for e in events if isinstance(e, RetryScheduled)]
    assert (retry.retry_number, retry.delay_s) == (1, pytest.approx(0.01))
    assert "500" in retry.error
    assert retry.budget_remaining == AgentOptions().retry_budget - 1
    # The retry surfaces inside the model call: after it started, before anything was streamed.
    kinds = [type(e) for e in events]
    assert kinds.index(ModelCallStarted) < kinds.index(RetryScheduled) < kinds.index(TextDelta)
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(
            [
                tool_chunk(0, "call_first", "lookup", '{"key": '),
                tool_chunk(0, None, None, '"alpha"}'),
                tool_chunk(0, "call_second", "lookup", '{"key": '),
                tool_chunk(0, None, None, '"beta"}'),
            ],
            id="one-after-the-other",
        ),
        pytest.param(
            [
                tool_chunk(0, "call_first", "lookup", ""),
                tool_chunk(0, "call_second", "lookup", ""),
                tool_chunk(0, "call_second", None, '{"key": '),
                tool_chunk(0, "call_first", None, '{"key": "alpha"}'),
                tool_chunk(0, "call_second", None, '"beta"}'),
            ],
            id="interleaved",
        ),
    ],
)
async def test_two_parallel_calls_at_the_same_index_both_run_and_report_in_call_order(
    server: OpenAIServer, model: OpenAIChatModel, frames: list[bytes]
) -> None:
    second_done = asyncio.Event()
    finished: list[str] = []

    @tool(concurrency_safe=True)
    async def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: what to look up.
        """
        if key == "alpha":
            # Finish after the second call: only the executor's ordering can put this result first.
            # (A bound, not a pause: this returns as soon as the parallel call is done.)
            await asyncio.wait_for(second_done.wait(), timeout=5)
        finished.append(key)
        if key == "beta":
            second_done.set()
        return f"value of {key}"

    server.script(
        Reply.sse(*frames, finish_chunk("tool_calls"), usage_chunk(20, 9), DONE),
        answer_reply("alpha and beta found"),
    )
    agent = ReActAgent(model, Toolkit([lookup]))

    events = await to_list(agent.stream_events("Look up alpha and beta."))

    result = check_event_order(events)
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "alpha and beta found", 2)
    [calling, _] = assistant_messages(events)
    assert [(c.id, c.name, c.input) for c in calling.tool_calls] == [
        ("call_first", "lookup", {"key": "alpha"}),
        ("call_second", "lookup", {"key": "beta"}),
    ]
    assert finished == ["beta", "alpha"]  # they ran together, and the first call finished last
    started = [i for i, e in enumerate(events) if isinstance(e, ToolExecutionStarted)]
    reported = [i for i, e in enumerate(events) if isinstance(e, ToolResult)]
    assert len(started) == 2
    assert max(started) < min(reported)  # both were running before either result was reported
    assert [(e.result.tool_use_id, e.result.text) for e in events if isinstance(e, ToolResult)] == [
        ("call_first", "value of alpha"),
        ("call_second", "value of beta"),
    ]
    sent = server.requests[1].body["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == ["call_first", "call_second"]
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:]] == [
        ("call_first", "value of alpha"),
        ("call_second", "value of beta"),
    ]


# ---- long runs: constant depth ----------------------------------------------------------------------
#
# Regression tests. The loop used to be assembled recursively (each iteration subscribed its successor
# inside the previous iteration's concat/defer chain), so an event of iteration k travelled through about
# 5·k more stack frames than one of iteration 1: CPU per delta grew with the iteration number, and near
# 190 iterations a delivery exceeded the recursion limit inside an event-loop callback, so the run hung
# (neither error nor result). The steps are now subscribed from one place (``run_steps``).


def _tool_round(round_number: int) -> Reply:
    return Reply.sse(
        tool_chunk(0, f"call_{round_number}", "add", '{"a": 1, '),
        tool_chunk(0, None, None, f'"b": {round_number}}}'),
        finish_chunk("tool_calls"),
        usage_chunk(3, 2),
        DONE,
    )


def _delivery_depth() -> int:
    depth = 0
    frame = sys._getframe(1)
    while frame is not None:
        depth += 1
        frame = frame.f_back
    return depth


async def test_event_delivery_depth_stays_constant_across_iterations(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    rounds = 30
    server.script(*(_tool_round(n) for n in range(rounds)), answer_reply("done"))
    agent = ReActAgent(model, Toolkit([add]), options=AgentOptions(max_iters=rounds + 5, repeat_guard=0))
    depth_by_iteration: dict[int, int] = {}  # of each iteration's first argument fragment
    iteration = 0
    ended: asyncio.Future[AgentResult] = asyncio.get_running_loop().create_future()

    def on_next(event: AgentEvent) -> None:
        nonlocal iteration
        if isinstance(event, ModelCallStarted):
            iteration = event.iteration
        elif isinstance(event, ToolCallArgumentsDelta):
            depth_by_iteration.setdefault(iteration, _delivery_depth())
        elif isinstance(event, AgentResult):
            ended.set_result(event)

    subscription = agent.stream_events("Add a lot.").subscribe(on_next, ended.set_exception)
    try:
        result = await ended
    finally:
        subscription.dispose()

    assert (result.reason, result.iterations) == ("MODEL_STOP", rounds + 1)
    assert sorted(depth_by_iteration) == list(range(1, rounds + 1))
    # Iterations 2 and 30 are both in the steady state of the loop: the same path, so the same depth.
    early, late = depth_by_iteration[2], depth_by_iteration[rounds]
    assert late == early, (
        f"a fragment of iteration {rounds} is delivered {late - early} stack frames deeper than one of "
        f"iteration 2 ({early} frames)"
    )


async def test_a_300_round_run_completes_instead_of_hanging_on_a_recursion_error(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    rounds = 300
    server.script(*(_tool_round(n) for n in range(rounds)), answer_reply("done"))
    agent = ReActAgent(model, Toolkit([add]), options=AgentOptions(max_iters=rounds + 5, repeat_guard=0))
    loop = asyncio.get_running_loop()
    escaped: asyncio.Future[dict[str, Any]] = loop.create_future()

    def on_loop_error(_: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not escaped.done():
            escaped.set_result(context)

    previous = loop.get_exception_handler()
    loop.set_exception_handler(on_loop_error)
    run = asyncio.ensure_future(agent.call("Add a lot."))
    try:
        # Whichever comes first: the run's end, or an error escaping into the loop (after which the run
        # never ends). The timeout is only a safety net for an unforeseen hang.
        async with asyncio.timeout(20):
            await asyncio.wait({run, escaped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.set_exception_handler(previous)
        run.cancel()
    assert not escaped.done(), f"the run hung: {escaped.result().get('exception')!r} escaped into the loop"
    result = run.result()
    assert (result.reason, result.iterations) == ("MODEL_STOP", rounds + 1)
