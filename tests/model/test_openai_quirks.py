"""Provider quirks, through the real server: what compatible servers send that OpenAI does not."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from rxagent.messages import Msg
from rxagent.model._openai_wire import StreamParser
from rxagent.model.sse import SSEDecoder
from rxagent.model.types import ChatChunk
from rxagent.operators import fold_message
from rxagent.operators._fold_message import MessageFold
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    ask,
    chunk,
    event,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)
from tests.streams import expect


async def answer(server: OpenAIServer, *frames: bytes) -> Msg:
    server.script(Reply.sse(*frames))
    async with make_model(server) as model:
        return await model.stream(ask()).pipe(fold_message())


async def chunks(server: OpenAIServer, *frames: bytes) -> list[ChatChunk]:
    server.script(Reply.sse(*frames))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert seen.completed, seen.error
    return seen.items


async def test_reasoning_content_and_reasoning_become_thinking(server: OpenAIServer) -> None:
    message = await answer(
        server,
        chunk({"reasoning_content": "First, "}),
        chunk({"reasoning": "think. "}),
        chunk({"content": "Answer.", "reasoning_content": None}),
        finish_chunk(),
        DONE,
    )
    assert message.thinking == "First, think. "
    assert message.text == "Answer."


async def test_tool_calls_without_index_use_their_position(server: OpenAIServer) -> None:
    calls = [
        {"id": "call_a", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
        {"id": "call_b", "type": "function", "function": {"name": "mul", "arguments": '{"b": 2}'}},
    ]
    received = await chunks(server, chunk({"tool_calls": calls}), finish_chunk("tool_calls"), DONE)
    assert [(d.index, d.id, d.name) for d in received[0].tool_calls] == [
        (0, "call_a", "add"),
        (1, "call_b", "mul"),
    ]


async def test_tool_call_fragments_without_index_fold_into_their_calls(server: OpenAIServer) -> None:
    message = await answer(
        server,
        tool_chunk(None, "call_a", "add", ""),
        tool_chunk(None, arguments='{"a": '),
        tool_chunk(None, arguments="1}"),
        finish_chunk("tool_calls"),
        DONE,
    )
    assert [(c.id, c.name, c.input) for c in message.tool_calls] == [("call_a", "add", {"a": 1})]


async def test_an_empty_id_on_later_fragments_means_no_id(server: OpenAIServer) -> None:
    received = await chunks(
        server,
        tool_chunk(0, "call_1", "lookup", '{"q":'),
        tool_chunk(0, "", None, ' "rx"}'),
        finish_chunk("tool_calls"),
        DONE,
    )
    assert received[1].tool_calls[0].id is None
    message = MessageFold()
    for item in received:
        message.add(item)
    assert [(c.id, c.input) for c in message.message().tool_calls] == [("call_1", {"q": "rx"})]


async def test_id_and_name_repeated_on_every_fragment(server: OpenAIServer) -> None:
    received = await chunks(
        server,
        tool_chunk(0, "call_1", "get_weather", '{"city"'),
        tool_chunk(0, "call_1", "get_weather", ': "Oslo"'),
        tool_chunk(0, "call_1", "get_weather", "}"),
        finish_chunk("tool_calls"),
        DONE,
    )
    assert [d.name for c in received for d in c.tool_calls] == ["get_weather", None, None]
    message = MessageFold()
    for item in received:
        message.add(item)
    calls = message.message().tool_calls
    assert [(c.id, c.name, c.input) for c in calls] == [("call_1", "get_weather", {"city": "Oslo"})]


async def test_arguments_sent_as_a_json_object(server: OpenAIServer) -> None:
    message = await answer(
        server,
        tool_chunk(0, "call_1", "search", {"query": "rx", "limit": 3}),
        finish_chunk("tool_calls"),
        DONE,
    )
    (call,) = message.tool_calls
    assert call.input == {"query": "rx", "limit": 3}
    assert call.state == "complete"


async def test_usage_on_a_final_chunk_with_empty_choices(server: OpenAIServer) -> None:
    message = await answer(server, text_chunk("hi"), finish_chunk(), usage_chunk(9, 4), DONE)
    assert message.metadata["usage"] == {
        "input_tokens": 9,
        "output_tokens": 4,
        "cache_read_tokens": 0,
        "reasoning_tokens": 0,
    }


async def test_usage_on_a_chunk_that_also_has_choices_with_details(server: OpenAIServer) -> None:
    usage = {
        "prompt_tokens": 20,
        "completion_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 16},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    received = await chunks(
        server, text_chunk("hi"), chunk({"content": "!"}, finish_reason="stop", usage=usage), DONE
    )
    assert [c.text for c in received] == ["hi", "!", ""]
    assert received[1].finish_reason == "stop"
    final_usage = received[-1].usage
    assert final_usage is not None
    assert (final_usage.input_tokens, final_usage.output_tokens) == (20, 6)
    assert (final_usage.cache_read_tokens, final_usage.reasoning_tokens) == (16, 3)


async def test_running_usage_on_every_chunk_is_reported_once_not_summed(server: OpenAIServer) -> None:
    frames = [
        chunk({"content": "a"}, usage={"prompt_tokens": 10, "completion_tokens": 1}),
        chunk({"content": "b"}, usage={"prompt_tokens": 10, "completion_tokens": 2}),
        chunk({}, finish_reason="stop", usage={"prompt_tokens": 10, "completion_tokens": 3}),
        DONE,
    ]
    received = await chunks(server, *frames)
    assert [c.usage for c in received[:-1]] == [None, None, None]
    assert received[-1].usage is not None
    assert received[-1].usage.output_tokens == 3


@pytest.mark.parametrize(
    ("sent", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "tool_calls"),
        ("function_call", "tool_calls"),
        ("content_filter", "content_filter"),
        ("end_turn", "stop"),
        ("something_new", "stop"),
    ],
)
async def test_finish_reasons_map_to_ours_and_the_raw_value_is_kept(
    server: OpenAIServer, sent: str, expected: str
) -> None:
    received = await chunks(server, text_chunk("x"), finish_chunk(sent), DONE)
    assert received[1].finish_reason == expected
    raw = received[1].raw
    assert raw is not None
    assert raw["choices"][0]["finish_reason"] == sent


async def test_two_parallel_calls_interleaved_at_the_same_index_fold_into_two_calls(
    server: OpenAIServer,
) -> None:
    message = await answer(
        server,
        tool_chunk(0, "call_paris", "weather", ""),
        tool_chunk(0, "call_rome", "weather", ""),
        tool_chunk(0, "call_paris", None, '{"city": '),
        tool_chunk(0, "call_rome", None, '{"city": '),
        tool_chunk(0, "call_rome", None, '"Rome"}'),
        tool_chunk(0, "call_paris", None, '"Paris"}'),
        finish_chunk("tool_calls"),
        DONE,
    )
    calls = [(c.id, c.name, c.input) for c in message.tool_calls]
    assert calls == [("call_paris", "weather", {"city": "Paris"}), ("call_rome", "weather", {"city": "Rome"})]
    assert message.metadata["finish_reason"] == "tool_calls"


async def test_a_200_000_character_argument_in_one_character_fragments(server: OpenAIServer) -> None:
    text = "".join(chr(ord("a") + i % 26) for i in range(200_000))
    argument = json.dumps({"text": text})
    frames = [tool_chunk(0, "call_big", "store", argument[0])]
    frames += [tool_chunk(0, None, None, piece) for piece in argument[1:]]
    frames += [finish_chunk("tool_calls"), DONE]
    message = await answer(server, b"".join(frames))
    (call,) = message.tool_calls
    assert call.input == {"text": text}
    assert call.raw_arguments == argument


def _decode_fragments(stream: bytes) -> Msg:
    """The client's decode path without the network: SSE bytes → events → chunks → folded message."""
    decoder = SSEDecoder()
    parser = StreamParser()
    fold = MessageFold()
    for start in range(0, len(stream), 16384):
        for sse_event in decoder.feed(stream[start : start + 16384]):
            item = parser.feed(sse_event)
            if item is not None:
                fold.add(item)
    return fold.message()


def _fragments(count: int) -> bytes:
    frames = [tool_chunk(0, "call_big", "store", '{"text": "')]
    body: dict[str, Any] = {
        "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {}}]}}]
    }
    for i in range(count):
        body["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"] = chr(ord("a") + i % 26)
        frames.append(event(json.dumps(body)))
    frames += [tool_chunk(0, None, None, '"}'), finish_chunk("tool_calls"), DONE]
    return b"".join(frames)


def test_decoding_and_folding_fragments_takes_linear_time() -> None:
    small, large = _fragments(10_000), _fragments(40_000)
    assert len(_decode_fragments(large).tool_calls[0].raw_arguments) == 40_000 + 12

    def best_of_five(stream: bytes) -> float:
        # CPU time, the best of five: other processes on a busy machine barely move it (wall time would).
        times: list[float] = []
        for _ in range(5):
            start = time.process_time()
            _decode_fragments(stream)
            times.append(time.process_time() - start)
        return min(times)

    ratio = best_of_five(large) / best_of_five(small)
    assert ratio < 8, f"4x the fragments cost {ratio:.1f}x the time: not linear"
