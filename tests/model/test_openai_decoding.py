"""The typed chunk decoder against a real loopback server: bad input gets a clear error naming its place,
fields rxagent does not read are skipped, absent ones take their defaults, and ``raw`` keeps everything."""

from __future__ import annotations

import dataclasses
import gc
import json
from collections.abc import Mapping
from typing import Any

import pytest

from rxagent.model import MalformedStreamError, ModelError
from rxagent.model._json import call_fragment, delta_chunk
from rxagent.model.types import ChatChunk, ToolCallDelta, Usage
from rxagent.operators import fold_message
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    ask,
    event,
    finish_chunk,
    make_model,
    text_chunk,
)
from tests.streams import Recording, expect


def choice(delta: object = None, **fields: object) -> bytes:
    """A chunk event with one choice holding exactly ``delta`` and ``fields`` (nothing else added)."""
    body: dict[str, Any] = {"choices": [{"delta": delta, **fields}]}
    return event(json.dumps(body))


async def stream(server: OpenAIServer, *frames: bytes) -> Recording[ChatChunk]:
    server.script(Reply.sse(*frames))
    async with make_model(server) as model:
        return await expect(model.stream(ask()))


# ---- bad input: a clear error, with where it is ------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json at all", "malformed JSON in the event stream (Expecting value: line 1 column 1"),
        (b'{"choices": [', "malformed JSON in the event stream"),
        (b'"just a string"', "stream data is not a JSON object"),
        (b"null", "stream data is not a JSON object"),
        (
            b'{"choices": [{"delta": {"content": 42}}]}',
            "Expected `str | array | null`, got `int` - at `$.choices[0].delta.content`",
        ),
        (
            b'{"choices": [{"delta": {"tool_calls": {"index": 0}}}]}',
            "Expected `array | null`, got `object` - at `$.choices[0].delta.tool_calls`",
        ),
        (
            b'{"choices": [{"delta": {"tool_calls": [{"function": "f"}]}}]}',
            "Expected `object | null`, got `str` - at `$.choices[0].delta.tool_calls[0].function`",
        ),
        (
            b'{"choices": [{"delta": "hello"}]}',
            "Expected `object | null`, got `str` - at `$.choices[0].delta`",
        ),
        (b'{"choices": [7]}', "Expected `object`, got `int` - at `$.choices[0]`"),
        (b'{"choices": [], "usage": [1, 2]}', "Expected `object | null`, got `array` - at `$.usage`"),
        (
            b'{"choices": [{"delta": {"content": [{"type": "text", "text": 3}]}}]}',
            "TypeError: a text part of `content` has no string `text`",
        ),
    ],
)
async def test_a_bad_chunk_is_malformed_with_what_and_where(
    server: OpenAIServer, data: bytes, message: str
) -> None:
    seen = await stream(server, text_chunk("before"), b"data: " + data + b"\n\n", DONE)
    assert [c.text for c in seen.items] == ["before"]  # what came before the bad chunk is kept
    assert isinstance(seen.error, MalformedStreamError)
    assert message in str(seen.error)
    assert seen.error.line == 3
    assert seen.error.data == data.decode()
    assert seen.error.__context__ is None  # the decoder's own exception does not ride along
    assert len(server.requests) == 1  # never retried


async def test_the_first_chunk_bad_is_a_malformed_stream_error_itself(server: OpenAIServer) -> None:
    seen = await stream(server, event('{"choices": [{"delta": {"content": false}}]}'), DONE)
    assert seen.items == []
    assert isinstance(seen.error, MalformedStreamError)
    assert "unexpected chunk shape (Expected `str | array | null`, got `bool`" in str(seen.error)
    assert seen.error.line == 1


async def test_chunks_before_a_bad_one_in_the_same_read_still_come_first(server: OpenAIServer) -> None:
    # One write, so one read: the chunks of a read are decoded together, and the error must not take
    # the good ones with it.
    read = text_chunk("one") + text_chunk("two") + b"data: {broken\n\n" + text_chunk("never")
    seen = await stream(server, read, DONE)
    assert [c.text for c in seen.items] == ["one", "two"]
    assert isinstance(seen.error, MalformedStreamError)
    assert seen.error.line == 5


@pytest.mark.parametrize(
    ("error", "text"),
    [
        ({"message": "the model crashed", "type": "server_error"}, "the model crashed"),
        ("overloaded", "overloaded"),
        ({"code": 503}, '{"code": 503}'),
    ],
)
async def test_a_provider_error_object_mid_stream_is_a_model_error(
    server: OpenAIServer, error: object, text: str
) -> None:
    seen = await stream(server, text_chunk("partial"), event(json.dumps({"error": error})), DONE)
    assert [c.text for c in seen.items] == ["partial"]
    assert type(seen.error) is ModelError
    assert str(seen.error) == f"the model server reported an error: {text}"


async def test_a_provider_error_object_as_the_first_event(server: OpenAIServer) -> None:
    seen = await stream(server, event(json.dumps({"error": {"message": "no such model"}, "choices": None})))
    assert type(seen.error) is ModelError
    assert str(seen.error) == "the model server reported an error: no such model"


# ---- good input: unknown fields skipped, absent ones defaulted -----------------------------------------


async def test_fields_rxagent_does_not_read_are_skipped_and_kept_in_raw(server: OpenAIServer) -> None:
    body = {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
        "system_fingerprint": "fp_1",
        "service_tier": {"nested": [1, {"deep": None}]},
        "choices": [
            {
                "index": 0,
                "delta": {
                    "role": "assistant",
                    "content": "hi",
                    "refusal": None,
                    "audio": {"id": "a"},
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}", "extra": True},
                            "unknown": [1, 2, 3],
                        }
                    ],
                },
                "logprobs": {"content": [{"token": "hi", "logprob": -0.1, "bytes": [104, 105]}]},
                "finish_reason": None,
            }
        ],
    }
    seen = await stream(server, event(json.dumps(body)), finish_chunk(), DONE)
    assert seen.completed
    first = seen.items[0]
    assert first.text == "hi"
    assert first.tool_calls == (ToolCallDelta(0, "call_1", "f", "{}"),)
    raw = first.raw
    assert isinstance(raw, Mapping)
    assert dict(raw) == body
    assert raw["service_tier"] == {"nested": [1, {"deep": None}]}
    assert len(raw) == len(body)
    assert list(raw) == list(body)
    assert "logprobs" not in raw  # it sits in the choice, not at the top
    assert "choices" in raw
    # Every Mapping method, as a subclass of Mapping would have them; equal to the same dict either way.
    assert raw == body
    assert body == raw
    assert raw != {**body, "extra": 1}
    assert raw.get("id") == body["id"]
    assert raw.get("absent", "default") == "default"
    assert list(raw.keys()) == list(body.keys())
    assert list(raw.values()) == list(body.values())
    assert list(raw.items()) == list(body.items())
    assert repr(raw) == repr(body)
    # One per streamed token: nothing the cyclic garbage collector has to track.
    assert not gc.is_tracked(raw)


@pytest.mark.parametrize(
    ("delta", "fields", "expected"),
    [
        ({"content": "no index"}, {}, ChatChunk(text="no index")),
        ({"content": "null index"}, {"index": None}, ChatChunk(text="null index")),
        ({"reasoning_content": "thinking"}, {}, ChatChunk(thinking="thinking")),
        ({"reasoning": "also thinking", "reasoning_content": None}, {}, ChatChunk(thinking="also thinking")),
        ({"reasoning_content": {"not": "text"}, "content": "t"}, {}, ChatChunk(text="t")),
        (None, {"finish_reason": "length"}, ChatChunk(finish_reason="length")),
        ({}, {"finish_reason": 7}, ChatChunk(finish_reason="stop")),
        ({"content": [{"type": "text", "text": "a"}, {"type": "image_url"}]}, {}, ChatChunk(text="a")),
        ({"tool_calls": [{"function": None}]}, {}, ChatChunk(tool_calls=(ToolCallDelta(0, None, None, ""),))),
        (
            {"tool_calls": [{"index": "x", "id": 5, "function": {"name": "f", "arguments": {"a": 1}}}]},
            {},
            ChatChunk(tool_calls=(ToolCallDelta(0, None, "f", '{"a": 1}'),)),
        ),
    ],
)
async def test_absent_null_and_loosely_typed_fields_give_the_right_chunk(
    server: OpenAIServer, delta: object, fields: dict[str, object], expected: ChatChunk
) -> None:
    seen = await stream(server, choice(delta, **fields), finish_chunk(), DONE)
    assert seen.completed
    got = seen.items[0]
    assert (got.text, got.thinking, got.tool_calls, got.finish_reason) == (
        expected.text,
        expected.thinking,
        expected.tool_calls,
        expected.finish_reason,
    )


async def test_chunks_that_carry_nothing_emit_nothing(server: OpenAIServer) -> None:
    seen = await stream(
        server,
        choice({"role": "assistant"}),
        choice(None),
        event("{}"),
        event('{"choices": null}'),
        b"data:\n\n",
        text_chunk("only this"),
        finish_chunk(),
        DONE,
    )
    assert seen.completed
    assert [(c.text, c.finish_reason) for c in seen.items] == [("only this", None), ("", "stop")]


async def test_usage_fields_are_read_loosely_and_an_empty_usage_counts_nothing(server: OpenAIServer) -> None:
    usage = {
        "input_tokens": 9,
        "output_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 2, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 1.5},
    }
    seen = await stream(
        server,
        text_chunk("x"),
        finish_chunk(),
        event(json.dumps({"choices": [], "usage": usage})),
        event(json.dumps({"choices": [], "usage": {}})),  # an empty object later does not reset it
        DONE,
    )
    assert seen.completed
    assert seen.items[-1].usage == Usage(input_tokens=9, output_tokens=4, cache_read_tokens=2)


async def test_an_empty_usage_alone_gives_no_usage_chunk(server: OpenAIServer) -> None:
    seen = await stream(server, text_chunk("x"), finish_chunk(), event('{"choices": [], "usage": {}}'), DONE)
    assert seen.completed
    assert all(c.usage is None for c in seen.items)


async def test_bytes_that_are_not_utf8_are_replaced_not_fatal(server: OpenAIServer) -> None:
    bad = b'data: {"choices": [{"delta": {"content": "caf\xe9"}}]}\n\n'
    seen = await stream(server, bad, finish_chunk(), DONE)
    assert seen.completed
    assert seen.items[0].text == "caf\ufffd"


async def test_raw_of_a_chunk_read_the_slow_way_is_the_same_object(server: OpenAIServer) -> None:
    # A lone surrogate escape is refused by msgspec and read by the standard library instead.
    lone = b'data: {"choices": [{"delta": {"content": "a\\ud83d"}}], "x": [1]}\n\n'
    seen = await stream(server, lone, finish_chunk(), DONE)
    assert seen.items[0].text == "a\ud83d"
    raw = seen.items[0].raw
    assert raw is not None
    assert dict(raw) == {"choices": [{"delta": {"content": "a\ud83d"}}], "x": [1]}


# ---- whole completions (non-streamed) go through the same shapes ---------------------------------------


async def test_a_completion_is_read_through_the_same_shapes(server: OpenAIServer) -> None:
    completion = {
        "id": "c",
        "choices": [
            {
                "message": {
                    "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}],
                    "reasoning_content": "hmm",
                    "tool_calls": [{"id": "call_a", "function": {"name": "f", "arguments": {"x": 1}}}],
                    "annotations": [],
                },
                "finish_reason": "tool_calls",
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "prompt_tokens_details": None},
    }
    server.script(Reply.json(completion))
    async with make_model(server) as model:
        message = await model.stream(ask(stream=False)).pipe(fold_message())
    assert message.text == "Hello"
    assert message.thinking == "hmm"
    assert [(c.id, c.name, c.input) for c in message.tool_calls] == [("call_a", "f", {"x": 1})]
    assert message.metadata["usage"] == {
        "input_tokens": 3,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "reasoning_tokens": 0,
    }


async def test_a_completion_of_the_wrong_shape_names_the_place(server: OpenAIServer) -> None:
    server.script(Reply.json({"choices": [{"message": {"tool_calls": "call it"}}]}))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask(stream=False)))
    assert isinstance(seen.error, MalformedStreamError)
    assert "unexpected completion shape (Expected `array | null`, got `str` - at " in str(seen.error)
    assert "$.choices[0].message.tool_calls" in str(seen.error)


def test_a_token_s_chunk_made_without_init_has_every_field_the_constructor_sets() -> None:
    # delta_chunk sets the slots itself (once per token): a field added to ChatChunk must be set there too.
    source = '{"choices": [{"delta": {"content": "a"}}]}'
    fast = delta_chunk("a", "b", (ToolCallDelta(0, "c", "f", "{}"),), "stop", source)
    slow = ChatChunk("a", "b", (ToolCallDelta(0, "c", "f", "{}"),), None, "stop", json.loads(source))
    for field in dataclasses.fields(ChatChunk):
        assert getattr(fast, field.name) == getattr(slow, field.name), field.name
    assert fast == slow


def test_a_tool_call_fragment_made_without_init_has_every_field_the_constructor_sets() -> None:
    # call_fragment sets the slots itself (once per fragment): a field added to ToolCallDelta must be too.
    fast = call_fragment(2, "c", "f", '{"a"')
    slow = ToolCallDelta(2, "c", "f", '{"a"')
    for field in dataclasses.fields(ToolCallDelta):
        assert getattr(fast, field.name) == getattr(slow, field.name), field.name
    assert fast == slow
    assert call_fragment(0, None, None, "") == ToolCallDelta(0)
