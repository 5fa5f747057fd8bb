"""The scripted and function-backed test models stream like real ones and keep a record."""

from __future__ import annotations

import asyncio

import pytest
from reactivex import operators as ops

from rxagent.clock import VirtualClock
from rxagent.messages import Msg
from rxagent.model import (
    ChatChunk,
    ChatModel,
    ChatRequest,
    FunctionModel,
    ModelHTTPError,
    ScriptedModel,
    ScriptedResponse,
    ScriptedToolCall,
    Usage,
)
from rxagent.model.scripted import ScriptExhaustedError
from rxagent.operators import fold_message


def request(text: str = "hi") -> ChatRequest:
    return ChatRequest(messages=(Msg.system("be brief"), Msg.user(text)))


async def test_scripted_model_streams_text_in_deltas_then_finish_and_usage() -> None:
    model = ScriptedModel([ScriptedResponse(text="Hello there", chunk_size=5, usage=Usage(3, 2))])
    chunks: list[ChatChunk] = await model.stream(request()).pipe(ops.to_list())
    assert [c.text for c in chunks if c.text] == ["Hello", " ther", "e"]
    assert chunks[-2].finish_reason == "stop"
    assert chunks[-1].usage == Usage(3, 2)
    assert isinstance(model, ChatModel)


def two_calls() -> ScriptedResponse:
    return ScriptedResponse(
        thinking="need both",
        tool_calls=[
            ScriptedToolCall("add", {"a": 2, "b": 3}, fragments=4),
            ScriptedToolCall("now", id="my_id"),
        ],
    )


async def test_scripted_model_streams_tool_calls_in_fragments_that_fold_back() -> None:
    model = ScriptedModel([two_calls()])
    chunks: list[ChatChunk] = await model.stream(request()).pipe(ops.to_list())
    fragments = [d for c in chunks for d in c.tool_calls if d.index == 0]
    assert len(fragments) == 4
    assert fragments[0].id == "call_1"
    assert fragments[0].name == "add"
    assert all(d.id is None and d.name is None for d in fragments[1:])
    folded = await ScriptedModel([two_calls()]).stream(request()).pipe(fold_message())
    assert [(c.id, c.name, c.input) for c in folded.tool_calls] == [
        ("call_1", "add", {"a": 2, "b": 3}),
        ("my_id", "now", {}),
    ]
    assert folded.thinking == "need both"
    assert folded.metadata["finish_reason"] == "tool_calls"


async def test_scripted_model_can_send_broken_arguments() -> None:
    model = ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("add", '{"a": 2, "b"')])])
    msg = await model.stream(request()).pipe(fold_message())
    assert msg.tool_calls[0].state == "invalid"


async def test_scripted_model_records_requests_at_subscription_not_before() -> None:
    model = ScriptedModel(["one", "two"])
    first = model.stream(request("a"))
    assert model.requests == []
    await first
    await model.stream(request("b"))
    assert [r.messages[-1].text for r in model.requests] == ["a", "b"]
    model.assert_complete()


async def test_scripted_model_assert_complete_fails_when_steps_are_left() -> None:
    model = ScriptedModel(["one", "two"])
    await model.stream(request())
    with pytest.raises(AssertionError, match="1 scripted response"):
        model.assert_complete()


async def test_scripted_model_running_out_of_script_is_a_clear_error() -> None:
    model = ScriptedModel(["only"])
    await model.stream(request())
    with pytest.raises(ScriptExhaustedError, match="no response left for call #2"):
        await model.stream(request("again"))


async def test_scripted_model_errors_before_and_after_chunks() -> None:
    model = ScriptedModel(
        [
            ModelHTTPError(503, "busy"),
            ScriptedResponse(text="abcdefgh", chunk_size=2, error=ConnectionResetError("cut"), error_after=2),
        ]
    )
    with pytest.raises(ModelHTTPError):
        await model.stream(request())
    seen: list[ChatChunk] = []
    with pytest.raises(ConnectionResetError):
        await model.stream(request()).pipe(ops.do_action(seen.append))
    assert [c.text for c in seen] == ["ab", "cd"]


async def test_scripted_model_delays_pass_on_its_clock(clock: VirtualClock) -> None:
    model = ScriptedModel([ScriptedResponse(text="abc", chunk_size=1, delay=2)], clock=clock)
    arrivals: list[tuple[str, float]] = []
    await clock.run(
        model.stream(request()).pipe(ops.do_action(lambda c: arrivals.append((c.text, clock.now()))))
    )
    # a delay before each chunk: three text deltas, the finish reason, the usage
    assert arrivals == [("a", 2.0), ("b", 4.0), ("c", 6.0), ("", 8.0), ("", 10.0)]


async def test_scripted_model_delay_is_cancelled_on_dispose(clock: VirtualClock) -> None:
    model = ScriptedModel([ScriptedResponse(text="slow answer", chunk_size=1, delay=30)], clock=clock)
    task = asyncio.ensure_future(model.stream(request()).pipe(ops.to_list()))
    await clock.advance(45)  # one chunk out, the second one's delay under way
    assert clock.pending() == (60.0,)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clock.advance(0)
    assert clock.pending() == ()  # the delay's timer went with the stream
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_scripted_model_default_usage_is_an_estimate() -> None:
    model = ScriptedModel(["x" * 40])
    msg = await model.stream(request()).pipe(fold_message())
    usage = msg.metadata["usage"]
    assert isinstance(usage, dict)
    assert usage["output_tokens"] == 10
    assert isinstance(usage["input_tokens"], int)
    assert usage["input_tokens"] > 0


async def test_function_model_computes_answers_sync_and_async() -> None:
    echo = FunctionModel(lambda r: "You said: " + r.messages[-1].text)
    assert (await echo.stream(request("ping")).pipe(fold_message())).text == "You said: ping"

    async def slow(r: ChatRequest) -> ScriptedResponse:
        await asyncio.sleep(0)
        return ScriptedResponse(text=str(len(r.messages)))

    counter = FunctionModel(slow)
    assert (await counter.stream(request()).pipe(fold_message())).text == "2"
    assert len(counter.requests) == 1
