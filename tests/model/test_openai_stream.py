"""OpenAIChatModel.stream against a real loopback server: SSE framing, stream ends, malformed streams."""

from __future__ import annotations

import json

import pytest

from rxagent.clock import VirtualClock
from rxagent.messages import Msg
from rxagent.model import (
    MalformedStreamError,
    ModelConnectionError,
    ModelError,
    ModelStreamInterrupted,
)
from rxagent.operators import fold_message
from rxagent.retry import RetryExhausted
from tests.model.openai_server import (
    DONE,
    Cut,
    OpenAIServer,
    Pause,
    Reply,
    ask,
    chunk,
    event,
    finish_chunk,
    make_model,
    text_chunk,
    usage_chunk,
)
from tests.streams import expect


async def answer(server: OpenAIServer, *replies: Reply) -> Msg:
    """The folded answer to one call, its retry waits and the server's pauses on a virtual clock."""
    clock = VirtualClock()
    server.clock = clock
    server.script(*replies)
    async with make_model(server, clock=clock) as model:
        return await clock.run(model.stream(ask()).pipe(fold_message()))


def payload(text: str, finish: str | None = None) -> str:
    return json.dumps({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


async def test_streams_text_then_finish_then_usage(server: OpenAIServer) -> None:
    server.script(
        Reply.sse(
            chunk({"role": "assistant", "content": ""}),
            text_chunk("Hel"),
            text_chunk("lo"),
            finish_chunk(),
            usage_chunk(11, 2),
            DONE,
        )
    )
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert seen.completed
    assert [c.text for c in seen.items] == ["Hel", "lo", "", ""]  # the role-only delta emits nothing
    assert seen.items[2].finish_reason == "stop"
    usage = seen.items[3].usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (11, 2)
    assert seen.items[0].raw is not None
    assert seen.items[0].raw["id"] == "chatcmpl-1"


UNESCAPED = (
    "data: " + json.dumps(json.loads(payload("wörld", "stop")), ensure_ascii=False) + "\n\n"
).encode()
"""An event whose JSON holds "ö" as two raw UTF-8 bytes (json.dumps escapes it by default)."""

FRAMINGS: dict[str, list[bytes | Pause]] = {
    "crlf": [
        f"data: {payload('Hello, ')}\r\n\r\n".encode(),
        f"data: {payload('wörld', 'stop')}\r\n\r\n".encode(),
        b"data: [DONE]\r\n\r\n",
    ],
    "lone_cr": [
        f"data: {payload('Hello, ')}\r\rdata: {payload('wörld', 'stop')}\r\rdata: [DONE]\r\r".encode()
    ],
    "no_space_after_colon": [
        f"data:{payload('Hello, ')}\n\ndata:{payload('wörld', 'stop')}\n\ndata:[DONE]\n\n".encode()
    ],
    "json_over_two_data_lines": [
        b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "Hello, "}}]}\n\n',
        event(payload("wörld", "stop")),
        DONE,
    ],
    "comments_ids_and_event_fields": [
        b": keep-alive\n\n",
        b"id: 1\nevent: message\n" + event(payload("Hello, ")),
        b": ping\n",
        b"retry: 3000\n" + event(payload("wörld", "stop")),
        DONE,
    ],
    "cr_at_end_of_one_read_lf_at_start_of_the_next": [
        f"data: {payload('Hello, ')}\r".encode(),
        Pause(),
        f"\n\r\ndata: {payload('wörld', 'stop')}\r".encode(),
        Pause(),
        b"\n\r",
        Pause(),
        b"\ndata: [DONE]\r\n\r\n",
    ],
    "utf8_character_split_across_reads": [
        event(payload("Hello, ")),
        UNESCAPED[: UNESCAPED.index("ö".encode()) + 1],
        Pause(),
        UNESCAPED[UNESCAPED.index("ö".encode()) + 1 :],
        DONE,
    ],
    "event_split_mid_line_and_mid_json": [
        event(payload("Hello, "))[:9],
        Pause(),
        event(payload("Hello, "))[9:30],
        Pause(),
        event(payload("Hello, "))[30:] + event(payload("wörld", "stop"))[:3],
        Pause(),
        event(payload("wörld", "stop"))[3:],
        DONE,
    ],
    "done_without_its_blank_line": [
        event(payload("Hello, ")),
        event(payload("wörld", "stop")),
        b"data: [DONE]\n",
    ],
    "finish_reason_but_no_done": [event(payload("Hello, ")), event(payload("wörld", "stop"))],
    "last_event_without_its_blank_line": [
        event(payload("Hello, ")),
        f"data: {payload('wörld', 'stop')}".encode(),
    ],
}


@pytest.mark.parametrize("frames", FRAMINGS.values(), ids=FRAMINGS.keys())
async def test_framings_all_give_the_same_message(server: OpenAIServer, frames: list[bytes | Pause]) -> None:
    message = await answer(server, Reply.sse(*frames))  # a pause ends after the client read what preceded it
    assert message.text == "Hello, wörld"
    assert message.metadata["finish_reason"] == "stop"
    assert len(server.requests) == 1


def test_the_utf8_framing_really_splits_a_character() -> None:
    frames = FRAMINGS["utf8_character_split_across_reads"]
    first = frames[1]
    assert isinstance(first, bytes)
    with pytest.raises(UnicodeDecodeError):
        first.decode()


async def test_a_stream_cut_mid_json_is_an_error_naming_the_line(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("Hel"), text_chunk("lo"), b'data: {"choices": [{"index": 0, "del'))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["Hel", "lo"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert seen.error.chunks_emitted == 2
    assert (
        'without [DONE] or a finish reason in the middle of line 5: \'{"choices": [{"index": 0, "del\''
        in str(seen.error)
    )
    assert len(server.requests) == 1  # never retried after chunks went out


async def test_a_connection_cut_mid_json_is_an_interruption(
    server: OpenAIServer, clock: VirtualClock
) -> None:
    server.clock = clock
    server.script(Reply.sse(text_chunk("Hel"), Pause(), b'data: {"choices": [{"ind', Pause(), Cut()))
    async with make_model(server, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert [c.text for c in seen.items] == ["Hel"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert isinstance(seen.error.__cause__, ModelConnectionError)
    assert "ClientPayloadError" in str(seen.error)
    assert len(server.requests) == 1


async def test_a_stream_ending_cleanly_without_done_or_finish_is_not_a_short_answer(
    server: OpenAIServer,
) -> None:
    server.script(Reply.sse(text_chunk("The answer is"), b": bye\n\n"))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert "without [DONE] or a finish reason after line 4" in str(seen.error)


async def test_an_empty_body_is_a_retryable_connection_error(server: OpenAIServer) -> None:
    server.script(Reply.sse(), Reply.sse(), Reply.sse(text_chunk("ok"), finish_chunk(), DONE))
    message = await answer(server)
    assert message.text == "ok"
    assert len(server.requests) == 3


async def test_an_empty_body_every_time_exhausts_the_attempts(
    server: OpenAIServer, clock: VirtualClock
) -> None:
    server.script(Reply.sse(), Reply.sse(), Reply.sse())
    async with make_model(server, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, RetryExhausted)
    assert isinstance(seen.error.last_error, ModelConnectionError)
    assert "without [DONE]" in str(seen.error)


async def test_malformed_json_names_the_line_and_the_text_and_is_not_retried(server: OpenAIServer) -> None:
    server.script(Reply.sse(b": hello\n\n", text_chunk("fine"), b"data: {'choices': nope}\n\n", DONE))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, MalformedStreamError)
    assert seen.error.line == 5
    assert seen.error.data == "{'choices': nope}"
    assert "malformed JSON in the event stream" in str(seen.error)
    assert "at stream line 5: \"{'choices': nope}\"" in str(seen.error)
    assert len(server.requests) == 1


async def test_what_the_standard_json_module_accepts_still_parses(server: OpenAIServer) -> None:
    # Chunks are parsed by pydantic-core, which rejects a lone surrogate escape (a Python server's
    # json.dumps of a token cut inside an emoji sends one); the standard library's parser takes it.
    lone = b'data: {"choices": [{"index": 0, "delta": {"content": "a\\ud83d"}}]}\n\n'
    pair = b'data: {"choices": [{"index": 0, "delta": {"content": "\\ud83d\\ude00 \\u00e9"}}]}\n\n'
    big = b'data: {"choices": [{"index": 0, "delta": {"content": "n"}}], "n": 12345678901234567890123}\n\n'
    server.script(Reply.sse(lone, pair, big, finish_chunk(), DONE))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert seen.completed
    assert [c.text for c in seen.items[:3]] == ["a\ud83d", "\U0001f600 \u00e9", "n"]
    raw = seen.items[2].raw
    assert raw is not None
    assert raw["n"] == 12345678901234567890123


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"[1, 2]", "stream data is not a JSON object"),
        (b'{"choices": "oops"}', "unexpected chunk shape"),
        (b'{"choices": [{"index": 0, "delta": {"tool_calls": [7]}}]}', "unexpected chunk shape"),
        (b'{"choices": [{"index": 0, "delta": {"content": [{"type": "text"}]}}]}', "unexpected chunk shape"),
        (b'{"choices": [], "usage": {"prompt_tokens_details": 3}}', "unexpected chunk shape"),
    ],
)
async def test_json_of_the_wrong_shape_is_malformed(server: OpenAIServer, data: bytes, message: str) -> None:
    server.script(Reply.sse(b"data: " + data + b"\n\n", DONE))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, MalformedStreamError)
    assert message in str(seen.error)
    assert seen.error.line == 1


async def test_an_error_object_inside_the_stream_is_a_model_error(server: OpenAIServer) -> None:
    error = {"error": {"message": "the model crashed", "type": "server_error", "code": 500}}
    server.script(Reply.sse(text_chunk("partial"), event(json.dumps(error))))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["partial"]
    assert type(seen.error) is ModelError
    assert str(seen.error) == "the model server reported an error: the model crashed"


async def test_an_error_event_is_a_model_error(server: OpenAIServer) -> None:
    server.script(Reply.sse(b"event: error\ndata: overloaded, try later\n\n"))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert type(seen.error) is ModelError
    assert "overloaded, try later" in str(seen.error)


async def test_events_of_other_types_are_ignored(server: OpenAIServer) -> None:
    message = await answer(
        server, Reply.sse(b"event: ping\ndata: {}\n\n", text_chunk("ok"), finish_chunk(), DONE)
    )
    assert message.text == "ok"


async def test_only_the_first_choice_is_followed(server: OpenAIServer) -> None:
    other = {"choices": [{"index": 1, "delta": {"content": "OTHER"}, "finish_reason": None}]}
    message = await answer(
        server, Reply.sse(text_chunk("mine"), event(json.dumps(other)), finish_chunk(), DONE)
    )
    assert message.text == "mine"


async def test_bytes_after_done_are_not_read(server: OpenAIServer) -> None:
    message = await answer(server, Reply.sse(text_chunk("ok"), finish_chunk(), DONE, b"data: {not json\n\n"))
    assert message.text == "ok"


# ---- non-streaming mode ------------------------------------------------------------------------------


async def test_non_streaming_gives_the_same_observable_shape(server: OpenAIServer) -> None:
    completion = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Calling two tools.",
                    "reasoning_content": "Need both.",
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "add", "arguments": '{"a": 1}'},
                        },
                        {
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "neg", "arguments": {"x": 2}},
                        },
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 30, "completion_tokens": 12},
    }
    server.script(Reply.json(completion))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask(stream=False)))
        assert seen.completed
        assert len(seen.items) == 2
        server.script(Reply.json(completion))
        message = await model.stream(ask(stream=False)).pipe(fold_message())
    assert message.text == "Calling two tools."
    assert message.thinking == "Need both."
    assert [(c.id, c.name, c.input) for c in message.tool_calls] == [
        ("call_a", "add", {"a": 1}),
        ("call_b", "neg", {"x": 2}),
    ]
    assert message.metadata["finish_reason"] == "tool_calls"
    assert message.metadata["usage"] == {
        "input_tokens": 30,
        "output_tokens": 12,
        "cache_read_tokens": 0,
        "reasoning_tokens": 0,
    }
    assert server.requests[0].headers["Accept"] == "application/json"


async def test_non_streaming_content_given_as_parts(server: OpenAIServer) -> None:
    content = [{"type": "text", "text": "Hello, "}, {"type": "image_url"}, {"type": "text", "text": "parts"}]
    completion = {"choices": [{"index": 0, "message": {"content": content}, "finish_reason": "stop"}]}
    server.script(Reply.json(completion))
    async with make_model(server) as model:
        message = await model.stream(ask(stream=False)).pipe(fold_message())
    assert message.text == "Hello, parts"


@pytest.mark.parametrize(
    ("reply", "error_type", "text"),
    [
        (Reply.json({"error": {"message": "quota exceeded"}}), ModelError, "quota exceeded"),
        (Reply.json({"object": "chat.completion", "choices": []}), MalformedStreamError, "has no choices"),
        (Reply.json({"choices": [{"message": "text"}]}), MalformedStreamError, "unexpected completion shape"),
        (Reply.json([1, 2]), MalformedStreamError, "not a JSON object"),
        (Reply([b"<html>oops</html>"], content_type="application/json"), MalformedStreamError, "not JSON"),
    ],
)
async def test_non_streaming_bad_bodies(
    server: OpenAIServer, reply: Reply, error_type: type[Exception], text: str
) -> None:
    server.script(reply)
    async with make_model(server) as model:
        seen = await expect(model.stream(ask(stream=False)))
    assert type(seen.error) is error_type
    assert text in str(seen.error)
    assert len(server.requests) == 1


async def test_a_whole_completion_sent_to_a_streaming_request_is_read_as_one(server: OpenAIServer) -> None:
    completion = {"choices": [{"index": 0, "message": {"content": "whole"}, "finish_reason": "stop"}]}
    message = await answer(server, Reply.json(completion))
    assert message.text == "whole"


async def test_a_json_error_with_status_200_to_a_streaming_request(server: OpenAIServer) -> None:
    server.script(Reply.json({"error": {"message": "model not loaded"}}))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert type(seen.error) is ModelError
    assert "model not loaded" in str(seen.error)
    assert len(server.requests) == 1
