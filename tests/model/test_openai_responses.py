"""OpenAIResponsesModel.stream against a real loopback server speaking the Responses API's event stream.

The server writes the events as OpenAI documents them (tests/model/responses_server.py) and the tests make
it hostile: writes split anywhere, keep-alive comments, CRLF, an ``error`` event mid-stream, 429 and 503
with ``Retry-After``. Bad inputs tried: malformed JSON in a data line, an event of the wrong shape, a
stream that ends without ``response.completed`` (cleanly, cut mid-event, or after ``[DONE]``), an empty
body, a plain-text ``error`` event, an ``{"error": …}`` object instead of an event, invalid function-call
JSON, a response that failed or is incomplete, and a request with stop sequences or a seed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import reactivex

from rxagent.clock import VirtualClock
from rxagent.messages import Msg, TextBlock, ThinkingBlock
from rxagent.model import (
    MalformedStreamError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelStreamInterrupted,
)
from rxagent.model.openai_responses import OpenAIResponsesModel
from rxagent.model.types import ChatChunk, ChatRequest, Usage
from rxagent.operators import fold_message
from rxagent.retry import RetryBudget, RetryPolicy
from tests.model.openai_server import API_KEY, Cut, Frame, OpenAIServer, Pause, Reply, ask
from tests.model.responses_server import ResponseStream, encrypted, error_event, make_responses_model
from tests.streams import expect


async def answer(server: OpenAIServer, *replies: Reply, **options: Any) -> Msg:
    """The folded answer to one call, its retry waits and the server's pauses on a virtual clock."""
    clock = VirtualClock()
    server.clock = clock
    server.script(*replies)
    async with make_responses_model(server, clock=clock, **options) as model:
        return await clock.run(model.stream(ask()).pipe(fold_message()))


async def chunks_of(server: OpenAIServer, *replies: Reply) -> list[ChatChunk]:
    server.script(*replies)
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert seen.completed, seen.error
    return seen.items


# ---- text, reasoning, function calls, usage --------------------------------------------------------


async def test_text_streams_as_deltas_then_the_finish_reason_then_the_usage(server: OpenAIServer) -> None:
    items = await chunks_of(server, ResponseStream().text("Hel", "lo", ", world").completed(21, 3))
    assert [c.text for c in items] == ["Hel", "lo", ", world", "", ""]
    assert items[3].finish_reason == "stop"
    usage = items[4].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (21, 3)
    assert items[0].raw is not None
    assert (items[0].raw["type"], items[0].raw["item_id"]) == ("response.output_text.delta", "msg_0")
    [request] = server.requests
    assert request.path == "/v1/responses"
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["Accept"] == "text/event-stream"


async def test_usage_counts_cached_input_and_reasoning_tokens(server: OpenAIServer) -> None:
    message = await answer(
        server, ResponseStream().reasoning(["ok"]).text("fine").completed(1200, 80, cached=1024, reasoning=64)
    )
    assert message.metadata["usage"] == {
        "input_tokens": 1200,
        "output_tokens": 80,
        "cache_read_tokens": 1024,
        "reasoning_tokens": 64,
    }


async def test_a_reasoning_summary_is_thinking_and_its_encrypted_item_is_the_signature(
    server: OpenAIServer,
) -> None:
    stream = ResponseStream().reasoning(
        ["**Plan**", " add the numbers"], ["**Check**", " 2 + 3 is 5"], encrypted_content=encrypted("one")
    )
    message = await answer(server, stream.text("5").completed())
    thinking, text = message.content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == "**Plan** add the numbers\n\n**Check** 2 + 3 is 5"
    assert thinking.signature is not None
    # The item exactly as `response.output_item.done` sent it: what goes back on the next turn.
    assert json.loads(thinking.signature) == stream.output[0]
    assert text == TextBlock(text="5")
    assert message.metadata["finish_reason"] == "stop"


async def test_each_reasoning_item_is_a_thinking_block_of_its_own(server: OpenAIServer) -> None:
    stream = (
        ResponseStream()
        .reasoning(["first"], encrypted_content=encrypted("a"))
        .reasoning(["second"], encrypted_content=encrypted("b"))
        .text("done")
    )
    message = await answer(server, stream.completed())
    first, second, _ = message.content
    assert isinstance(first, ThinkingBlock)
    assert isinstance(second, ThinkingBlock)
    assert (first.thinking, second.thinking) == ("first", "second")
    assert [json.loads(b.signature or "")["id"] for b in (first, second)] == ["rs_0", "rs_1"]


async def test_reasoning_without_encrypted_content_is_thinking_with_no_signature(
    server: OpenAIServer,
) -> None:
    message = await answer(
        server, ResponseStream().reasoning(["a"], ["b"]).reasoning(["c"]).text("x").completed()
    )
    assert message.content[0] == ThinkingBlock(thinking="a\n\nb\n\nc")
    assert message.text == "x"


async def test_reasoning_with_encrypted_content_and_no_summary_is_a_signed_empty_block(
    server: OpenAIServer,
) -> None:
    message = await answer(
        server, ResponseStream().reasoning(encrypted_content=encrypted("quiet")).text("hi").completed()
    )
    [thinking, _] = message.content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == ""
    assert json.loads(thinking.signature or "")["encrypted_content"] == encrypted("quiet")


async def test_one_function_call(server: OpenAIServer) -> None:
    stream = ResponseStream().call("call_add", "add", '{"a": ', "2, ", '"b": 3}')
    server.script(stream.completed())
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    deltas = [d for c in seen.items for d in c.tool_calls]
    assert [(d.index, d.id, d.name) for d in deltas[:1]] == [(0, "call_add", "add")]
    assert [d.arguments for d in deltas] == ["", '{"a": ', "2, ", '"b": 3}']
    assert all(d.id == "call_add" for d in deltas)
    message = await _fold(seen.items)
    [call] = message.tool_calls
    assert (call.id, call.name, call.input, call.state) == ("call_add", "add", {"a": 2, "b": 3}, "complete")
    assert message.metadata["finish_reason"] == "tool_calls"


async def test_several_function_calls_after_reasoning_and_a_preamble(server: OpenAIServer) -> None:
    stream = (
        ResponseStream()
        .reasoning(["two lookups"], encrypted_content=encrypted("r"))
        .text("Looking both up.")
        .call("call_a", "lookup", '{"key": "alpha"}')
        .call("call_b", "lookup", '{"key": ', '"beta"}')
        .call("call_c", "clock", "")
    )
    message = await answer(server, stream.completed())
    assert message.text == "Looking both up."
    assert [(c.id, c.name, c.input) for c in message.tool_calls] == [
        ("call_a", "lookup", {"key": "alpha"}),
        ("call_b", "lookup", {"key": "beta"}),
        ("call_c", "clock", {}),
    ]
    assert [type(b).__name__ for b in message.content] == [
        "ThinkingBlock",
        "TextBlock",
        "ToolUseBlock",
        "ToolUseBlock",
        "ToolUseBlock",
    ]


async def test_arguments_in_one_character_deltas(server: OpenAIServer) -> None:
    arguments = json.dumps({"text": "héllo, wörld 😀", "n": [1, 2, 3], "nested": {"ok": True}})
    server.script(ResponseStream().call("call_1", "store", *arguments).completed())
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    fragments = [d.arguments for c in seen.items for d in c.tool_calls][1:]
    assert fragments == list(arguments)
    [call] = (await _fold(seen.items)).tool_calls
    assert call.input == json.loads(arguments)
    assert call.raw_arguments == arguments


async def test_a_refusal_is_text(server: OpenAIServer) -> None:
    stream = ResponseStream()
    stream.emit(
        "response.output_item.added",
        output_index=0,
        item={"id": "msg_r", "type": "message", "role": "assistant", "content": []},
    )
    stream.emit("response.refusal.delta", item_id="msg_r", output_index=0, content_index=0, delta="I can't ")
    stream.emit("response.refusal.delta", item_id="msg_r", output_index=0, content_index=0, delta="help.")
    item = {
        "id": "msg_r",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I can't help."}],
    }
    stream.emit("response.output_item.done", output_index=0, item=item)
    stream.output.append(item)
    message = await answer(server, stream.completed())
    assert message.text == "I can't help."


# ---- whole items, whole responses ---------------------------------------------------------------------


async def test_items_sent_only_whole_lose_nothing(server: OpenAIServer) -> None:
    # A server that sends each item only in `output_item.done`, with no deltas.
    stream = ResponseStream()
    items = [
        {"id": "rs_w", "type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"id": "msg_w", "type": "message", "content": [{"type": "output_text", "text": "Answer"}]},
        {"id": "fc_w", "type": "function_call", "call_id": "call_w", "name": "f", "arguments": '{"x": 1}'},
    ]
    for index, item in enumerate(items):
        stream.emit("response.output_item.done", output_index=index, item=item)
    stream.output.extend(items)
    message = await answer(server, stream.completed())
    assert (message.thinking, message.text) == ("think", "Answer")
    [call] = message.tool_calls
    assert (call.id, call.name, call.input) == ("call_w", "f", {"x": 1})


async def test_a_stream_of_only_the_completed_response_loses_nothing(server: OpenAIServer) -> None:
    full = (
        ResponseStream()
        .reasoning(["r"], encrypted_content=encrypted("z"))
        .text("whole")
        .call("c1", "f", "{}")
    )
    only_end = ResponseStream()
    only_end.output = full.output
    message = await answer(server, only_end.completed())
    assert (message.thinking, message.text, [c.id for c in message.tool_calls]) == ("r", "whole", ["c1"])
    thinking = message.content[0]
    assert isinstance(thinking, ThinkingBlock)
    assert json.loads(thinking.signature or "") == full.output[0]


async def test_deltas_that_stop_short_are_completed_from_the_whole_item(server: OpenAIServer) -> None:
    stream = ResponseStream()
    stream.emit(
        "response.output_item.added", output_index=0, item={"id": "m", "type": "message", "content": []}
    )
    stream.emit("response.output_text.delta", item_id="m", output_index=0, content_index=0, delta="Hel")
    item = {"id": "m", "type": "message", "content": [{"type": "output_text", "text": "Hello"}]}
    stream.emit("response.output_item.done", output_index=0, item=item)
    stream.output.append(item)
    message = await answer(server, stream.completed())
    assert message.text == "Hello"


async def test_non_streaming_gives_the_same_chunks(server: OpenAIServer) -> None:
    whole = (
        ResponseStream().reasoning(["mull"], encrypted_content=encrypted("w")).text("Hi").call("c", "f", "{}")
    )
    server.script(Reply.json(whole.whole(5, 2)))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask(stream=False)))
    assert seen.completed
    message = await _fold(seen.items)
    assert (message.thinking, message.text, [c.id for c in message.tool_calls]) == ("mull", "Hi", ["c"])
    assert message.metadata["finish_reason"] == "tool_calls"
    usage = Usage.from_json(message.metadata["usage"])
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (5, 2)
    assert server.requests[0].body["stream"] is False
    assert server.requests[0].headers["Accept"] == "application/json"


# ---- the end of the response ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "finish"), [("max_output_tokens", "length"), ("content_filter", "content_filter")]
)
async def test_an_incomplete_response_says_why(server: OpenAIServer, reason: str, finish: str) -> None:
    message = await answer(server, ResponseStream().text("Once upon").incomplete(reason))
    assert (message.text, message.metadata["finish_reason"]) == ("Once upon", finish)


async def test_arguments_cut_off_by_the_token_limit_are_an_invalid_call_that_keeps_them(
    server: OpenAIServer,
) -> None:
    message = await answer(
        server, ResponseStream().call("c1", "f", '{"text": "ab').incomplete("max_output_tokens")
    )
    [call] = message.tool_calls
    assert (call.state, call.input, call.raw_arguments) == ("invalid", None, '{"text": "ab')
    assert call.error is not None
    assert "cut off by the output token limit" in call.error


async def test_invalid_function_call_json_is_an_invalid_call_with_its_text_kept(server: OpenAIServer) -> None:
    message = await answer(server, ResponseStream().call("c1", "f", "{'a': ", "1}").completed())
    [call] = message.tool_calls
    assert (call.state, call.input, call.raw_arguments) == ("invalid", None, "{'a': 1}")
    assert call.error is not None
    assert "not valid JSON" in call.error


async def test_a_failed_response_is_a_model_error_not_retried(server: OpenAIServer) -> None:
    server.script(ResponseStream().failed("invalid_prompt", "The prompt was flagged."))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert type(seen.error) is ModelStreamError
    assert (
        str(seen.error) == "the model server reported invalid_prompt in the stream: The prompt was flagged."
    )
    assert seen.error.status == 400  # the request's fault: not retried
    assert not seen.error.retryable
    assert len(server.requests) == 1


async def test_a_failed_response_with_a_server_error_before_any_output_is_retried(
    server: OpenAIServer,
) -> None:
    message = await answer(
        server, ResponseStream().failed("server_error", "try again"), ResponseStream().text("ok").completed()
    )
    assert message.text == "ok"
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


# ---- hostile framing -----------------------------------------------------------------------------------


def _split_everywhere(frames: list[Frame], size: int) -> list[Frame]:
    """The same bytes written ``size`` bytes at a time, each write read on its own."""
    data = b"".join(f for f in frames if isinstance(f, bytes))
    pieces: list[Frame] = []
    for start in range(0, len(data), size):
        pieces += [data[start : start + size], Pause()]
    return pieces


def _full_stream() -> ResponseStream:
    return (
        ResponseStream()
        .reasoning(["Think ", "hard."], encrypted_content=encrypted("f"))
        .text("Héllo, ", "wörld")
        .call("call_f", "f", '{"k": ', '"v"}')
    )


def _keep_alive(frames: list[Frame]) -> list[Frame]:
    out: list[Frame] = [b": keep-alive\n\n"]
    for frame in frames:
        out += [frame, b": ping\n\n"]
    return out


def _crlf(frames: list[Frame]) -> list[Frame]:
    return [f.replace(b"\n", b"\r\n") if isinstance(f, bytes) else f for f in frames]


def _data_only(frames: list[Frame]) -> list[Frame]:
    # No `event:` lines: the type is in the data alone, as some compatible servers send it.
    return [
        b"".join(line + b"\n" for line in f.split(b"\n")[1:]) if isinstance(f, bytes) else f for f in frames
    ]


FRAMINGS = {
    "as_documented": lambda frames: frames,
    "split_every_7_bytes": lambda frames: _split_everywhere(frames, 7),
    "split_every_100_bytes": lambda frames: _split_everywhere(frames, 100),
    "one_write": lambda frames: [b"".join(f for f in frames if isinstance(f, bytes))],
    "keep_alive_comments": _keep_alive,
    "crlf": _crlf,
    "data_lines_only": _data_only,
}


@pytest.mark.parametrize("framing", FRAMINGS.values(), ids=FRAMINGS.keys())
async def test_framings_all_give_the_same_message(server: OpenAIServer, framing: Any) -> None:
    reply = _full_stream().completed(30, 9, reasoning=4)
    expected = await answer(server, Reply.sse(*reply.frames))
    message = await answer(server, Reply.sse(*framing(reply.frames)))
    assert message.content == expected.content
    assert (message.text, message.thinking) == ("Héllo, wörld", "Think hard.")
    assert message.tool_calls[0].input == {"k": "v"}
    assert message.metadata == expected.metadata


async def test_an_error_event_mid_stream_ends_it_after_what_came_before(server: OpenAIServer) -> None:
    stream = ResponseStream().text("partial ", "answer")
    stream.raw(error_event(stream.next_sequence, "The server had an error.", "server_error"))
    server.script(Reply.sse(*stream.frames), ResponseStream().text("never asked").completed())
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["partial ", "answer"]
    assert type(seen.error) is ModelStreamError
    assert str(seen.error) == "the model server reported server_error in the stream: The server had an error."
    assert seen.error.status == 500
    assert len(server.requests) == 1  # never retried once deltas went out


async def test_an_error_event_before_any_output_is_retried_when_the_server_failed(
    server: OpenAIServer,
) -> None:
    first = ResponseStream()
    first.raw(error_event(first.next_sequence, "Rate limit reached.", "rate_limit_exceeded"))
    message = await answer(server, Reply.sse(*first.frames), ResponseStream().text("ok").completed())
    assert message.text == "ok"
    assert len(server.requests) == 2


async def test_an_error_event_of_the_request_is_not_retried(server: OpenAIServer) -> None:
    first = ResponseStream()
    first.raw(error_event(first.next_sequence, "Unknown parameter: 'x'.", "invalid_request_error"))
    server.script(Reply.sse(*first.frames))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelError)
    assert not seen.error.retryable
    assert "Unknown parameter: 'x'." in str(seen.error)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (
            b"event: error\ndata: upstream exploded\n\n",
            "the model server reported an error in the stream: upstream exploded",
        ),
        (
            b'data: {"error": {"type": "server_error", "message": "boom"}}\n\n',
            "the model server reported server_error in the stream: boom",
        ),
        (
            b'event: error\ndata: {"type": "error", "error": {"code": "quota", "message": "no credit"}}\n\n',
            "the model server reported quota in the stream: no credit",
        ),
    ],
    ids=["plain_text_error_event", "error_object", "nested_error_event"],
)
async def test_other_shapes_of_errors_are_model_errors(server: OpenAIServer, frame: bytes, says: str) -> None:
    stream = ResponseStream().text("a")
    server.script(Reply.sse(*stream.frames, frame))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["a"]
    assert isinstance(seen.error, ModelError)
    assert str(seen.error) == says


async def test_an_error_quoting_the_key_does_not_show_it(server: OpenAIServer) -> None:
    stream = ResponseStream()
    stream.raw(error_event(0, f"bad key {API_KEY}", "invalid_api_key"))
    server.script(Reply.sse(*stream.frames))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelError)
    assert API_KEY not in str(seen.error)
    assert "bad key **********" in str(seen.error)


async def test_429_with_retry_after_waits_then_succeeds(server: OpenAIServer, clock: VirtualClock) -> None:
    server.clock = clock
    server.script(
        Reply.error(429, '{"error": {"code": "rate_limit_exceeded"}}', {"Retry-After": "7"}),
        ResponseStream().text("ok").completed(),
    )
    async with make_responses_model(server, clock=clock) as model:
        message = await clock.run(model.stream(ask()).pipe(fold_message()))
    assert message.text == "ok"
    assert [r.received_at for r in server.requests] == [0.0, 7.0]


async def test_503_with_retry_after_then_the_budget_runs_out(
    server: OpenAIServer, clock: VirtualClock
) -> None:
    server.clock = clock
    busy = Reply.error(503, "overloaded", {"Retry-After": "2"})
    server.script(busy, busy, busy)
    policy = RetryPolicy(max_attempts=5, base_delay=0.5, jitter=0)
    async with make_responses_model(server, clock=clock, retry=policy) as model:
        seen = await clock.run(expect(model.stream(ask(retry_budget=RetryBudget(max_retries=2)))))
    assert seen.error is not None
    assert "retry budget is exhausted" in str(seen.error)
    assert isinstance(seen.error.__cause__, ModelHTTPError)
    assert seen.error.__cause__.status == 503
    assert [r.received_at for r in server.requests] == [0.0, 2.0, 4.0]


# ---- bad streams ------------------------------------------------------------------------------------------


async def test_malformed_json_in_a_data_line_names_the_line_keeps_what_came_and_is_not_retried(
    server: OpenAIServer,
) -> None:
    stream = ResponseStream().text("fine")
    stream.raw(b"event: response.output_text.delta\ndata: {'delta': nope}\n\n")
    server.script(Reply.sse(*stream.frames))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["fine"]
    assert isinstance(seen.error, MalformedStreamError)
    assert "malformed JSON in the event stream" in str(seen.error)
    assert seen.error.data == "{'delta': nope}"
    assert seen.error.line == 3 * (len(stream.frames) - 1) + 2  # the data line of the last event
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"type": "response.output_text.delta", "item_id": "m", "delta": 5}', "`delta` is not a string"),
        (
            b'{"type": "response.output_item.done", "item": {"type": "message", "content": "x"}}',
            "$.item.content",
        ),
        (b"[1, 2]", "stream data is not a JSON object"),
        (
            b'{"type": "response.function_call_arguments.delta", "item_id": "nobody", "delta": "{"}',
            "never announced",
        ),
    ],
    ids=["delta_not_a_string", "content_not_a_list", "not_an_object", "arguments_of_an_unknown_call"],
)
async def test_an_event_of_the_wrong_shape_is_malformed(server: OpenAIServer, data: bytes, says: str) -> None:
    server.script(Reply.sse(*ResponseStream().frames, b"data: " + data + b"\n\n"))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, MalformedStreamError)
    assert says in str(seen.error)


async def test_a_stream_that_ends_without_completed_is_not_a_short_answer(server: OpenAIServer) -> None:
    stream = ResponseStream().text("The answer is")
    server.script(Reply.sse(*stream.frames, b": bye\n\n"))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["The answer is"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert "the server ended the stream without response.completed" in str(seen.error)
    assert len(server.requests) == 1


async def test_done_without_completed_is_cut_short_too(server: OpenAIServer) -> None:
    server.script(Reply.sse(*ResponseStream().text("x").frames, b"data: [DONE]\n\n"))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert "without response.completed" in str(seen.error)


async def test_a_stream_cut_mid_event_is_an_interruption_naming_the_line(server: OpenAIServer) -> None:
    stream = ResponseStream().text("Hel")
    server.script(Reply.sse(*stream.frames, b'event: response.output_text.delta\ndata: {"type": "respo'))
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert seen.error.chunks_emitted == 1
    assert "in the middle of line" in str(seen.error)
    assert '{"type": "respo' in str(seen.error)


async def test_a_connection_cut_mid_stream_is_an_interruption(
    server: OpenAIServer, clock: VirtualClock
) -> None:
    server.clock = clock
    stream = ResponseStream().text("Hel")
    server.script(Reply.sse(*stream.frames, Pause(), b"event: response.output_te", Pause(), Cut()))
    async with make_responses_model(server, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert [c.text for c in seen.items] == ["Hel"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert isinstance(seen.error.__cause__, ModelConnectionError)


async def test_an_empty_body_is_retried_as_a_connection_error(server: OpenAIServer) -> None:
    message = await answer(
        server, Reply.sse(), Reply.sse(*ResponseStream().frames), ResponseStream().text("ok").completed()
    )
    assert message.text == "ok"
    assert len(server.requests) == 3  # nothing streamed in the first two: each is safe to retry


async def test_bytes_after_completed_are_not_read(server: OpenAIServer) -> None:
    reply = ResponseStream().text("done").completed()
    message = await answer(server, Reply.sse(*reply.frames, b"data: {broken"))
    assert message.text == "done"


async def _fold(chunks: list[ChatChunk]) -> Msg:
    return await reactivex.from_iterable(chunks).pipe(fold_message())


def test_a_request_is_the_documented_body() -> None:
    model = OpenAIResponsesModel(
        "o4-mini",
        base_url="http://127.0.0.1:1/v1",
        api_key_env=None,
        reasoning_effort="low",
        reasoning_summary="auto",
    )
    body = json.loads(
        model.encode_request(ChatRequest((Msg.system("Be brief."), Msg.user("hi")), max_tokens=50))
    )
    assert body == {
        "model": "o4-mini",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hi"}],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
        "max_output_tokens": 50,
    }


@pytest.mark.parametrize("ending", [b"\n", b""], ids=["one_line_break", "none"])
async def test_a_completed_event_without_its_blank_line_still_ends_the_answer(
    server: OpenAIServer, ending: bytes
) -> None:
    reply = ResponseStream().reasoning(["r"], encrypted_content=encrypted("t")).text("fine").completed(3, 2)
    last = reply.frames[-1]
    assert isinstance(last, bytes)
    message = await answer(server, Reply.sse(*reply.frames[:-1], last.removesuffix(b"\n\n") + ending))
    assert (message.thinking, message.text, message.metadata["finish_reason"]) == ("r", "fine", "stop")
    usage = Usage.from_json(message.metadata["usage"])
    assert usage is not None
    assert usage.output_tokens == 2


async def test_a_whole_answer_in_a_last_event_without_its_blank_line_loses_nothing(
    server: OpenAIServer,
) -> None:
    full = (
        ResponseStream()
        .reasoning(["r"], encrypted_content=encrypted("z"))
        .text("whole")
        .call("c1", "f", '{"a": 1}')
    )
    only_end = ResponseStream()
    only_end.output = full.output
    reply = only_end.completed()
    last = reply.frames[-1]
    assert isinstance(last, bytes)
    message = await answer(server, Reply.sse(*reply.frames[:-1], last.removesuffix(b"\n")))
    assert (message.thinking, message.text) == ("r", "whole")
    assert [(c.id, c.input) for c in message.tool_calls] == [("c1", {"a": 1})]
    assert message.metadata["finish_reason"] == "tool_calls"
    thinking = message.content[0]
    assert isinstance(thinking, ThinkingBlock)
    assert json.loads(thinking.signature or "") == full.output[0]


async def test_argument_fragments_before_their_call_is_announced_join_it(server: OpenAIServer) -> None:
    stream = ResponseStream()
    stream.emit("response.function_call_arguments.delta", item_id="fc_early", output_index=0, delta='{"a"')
    stream.emit(
        "response.output_item.added",
        output_index=0,
        item={"id": "fc_early", "type": "function_call", "call_id": "call_e", "name": "f", "arguments": ""},
    )
    stream.emit("response.function_call_arguments.delta", item_id="fc_early", output_index=0, delta=": 1}")
    item = {
        "id": "fc_early",
        "type": "function_call",
        "call_id": "call_e",
        "name": "f",
        "arguments": '{"a": 1}',
    }
    stream.emit("response.output_item.done", output_index=0, item=item)
    stream.output.append(item)
    message = await answer(server, stream.completed())
    [call] = message.tool_calls
    assert (call.id, call.name, call.input) == ("call_e", "f", {"a": 1})
