"""AnthropicModel.stream against a loopback server speaking the Messages SSE format as Anthropic documents it.

Text, thinking with its signature, withheld thinking, one and several tool uses, tool input in 1-character
deltas, stop reasons, cache usage, and hostile framings (events split mid-line and mid-JSON across
writes, ``ping`` events between any two, CRLF line ends, a last event without its blank line).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import reactivex

from rxagent.clock import VirtualClock
from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolUseBlock
from rxagent.model import ChatChunk, ChatModel, ToolCallDelta, Usage, provider_of
from rxagent.operators import fold_message
from tests.model.anthropic_server import (
    API_KEY,
    AnthropicServer,
    ask,
    event,
    make_model,
    message_delta,
    message_start,
    message_stop,
    ping,
    redacted_block,
    reply,
    text_block,
    thinking_block,
    tool_block,
)
from tests.model.openai_server import Pause, Reply, Stall
from tests.streams import expect


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicServer]:
    """The loopback Messages server."""
    async with AnthropicServer() as running:
        yield running


async def folded(chunks: list[ChatChunk]) -> Msg:
    """The message the chunks a subscriber saw fold into."""
    return await reactivex.from_iterable(chunks).pipe(fold_message())


async def answer(server: AnthropicServer, *replies: Reply) -> Msg:
    """The folded answer to one call; the server's pauses and the retry waits on a virtual clock."""
    clock = VirtualClock()
    server.clock = clock
    server.script(*replies)
    async with make_model(server, clock=clock) as model:
        return await clock.run(model.stream(ask()).pipe(fold_message()))


async def test_streams_text_then_the_stop_reason_then_the_usage(anthropic: AnthropicServer) -> None:
    anthropic.script(reply(text_block(0, "Hel", "lo", "!"), input_tokens=12, output_tokens=3))
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert seen.completed
    assert [c.text for c in seen.items] == ["Hel", "lo", "!", "", ""]
    assert seen.items[3].finish_reason == "stop"
    assert seen.items[4].usage == Usage(input_tokens=12, output_tokens=3)
    raw = seen.items[0].raw
    assert raw is not None
    assert dict(raw) == {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": "Hel"},
    }
    [request] = anthropic.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == API_KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "Authorization" not in request.headers
    assert request.headers["Accept"] == "text/event-stream"
    assert request.body == {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "model": "claude-test",
        "max_tokens": 4096,
        "stream": True,
    }


async def test_thinking_streams_as_thinking_and_the_message_keeps_its_signature(
    anthropic: AnthropicServer,
) -> None:
    message = await answer(
        anthropic,
        reply(
            thinking_block(0, "The user greets; ", "greet back.", signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3h"),
            text_block(1, "Hello!"),
        ),
    )
    assert message.content == (
        ThinkingBlock(thinking="The user greets; greet back.", signature="EqQBCgIYAhIM1gbcDa9GJwZA2b3h"),
        TextBlock(text="Hello!"),
    )
    assert message.metadata["finish_reason"] == "stop"


async def test_the_signature_closes_its_block_and_a_withheld_block_keeps_its_place(
    anthropic: AnthropicServer,
) -> None:
    anthropic.script(
        reply(
            thinking_block(0, "first", signature="sig-A"),
            redacted_block(1, "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
            thinking_block(2, "third", signature="sig-C"),
            text_block(3, "Done."),
        )
    )
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    closing = [(c.thinking, c.thinking_signature, c.redacted_thinking) for c in seen.items if not c.text]
    assert closing[:5] == [
        ("first", None, None),
        ("", "sig-A", None),
        ("", None, "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"),
        ("third", None, None),
        ("", "sig-C", None),
    ]
    assert (await folded(seen.items)).content == (
        ThinkingBlock(thinking="first", signature="sig-A"),
        ThinkingBlock(
            thinking="", redacted_data="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"
        ),
        ThinkingBlock(thinking="third", signature="sig-C"),
        TextBlock(text="Done."),
    )


async def test_one_tool_use_streams_its_input_as_json_deltas(anthropic: AnthropicServer) -> None:
    anthropic.script(
        reply(
            text_block(0, "Let me add those."),
            tool_block(1, "toolu_01A", "add", '{"a": 2', ', "b": 3}'),
            stop="tool_use",
        )
    )
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    deltas = [d for c in seen.items for d in c.tool_calls]
    assert deltas == [
        ToolCallDelta(0, "toolu_01A", "add", ""),
        ToolCallDelta(0, None, None, '{"a": 2'),
        ToolCallDelta(0, None, None, ', "b": 3}'),
    ]  # the API's empty first fragment is not passed on
    message = await folded(seen.items)
    assert message.text == "Let me add those."
    assert message.tool_calls == (
        ToolUseBlock(id="toolu_01A", name="add", input={"a": 2, "b": 3}, raw_arguments='{"a": 2, "b": 3}'),
    )
    assert message.metadata["finish_reason"] == "tool_calls"


async def fold_script(server: AnthropicServer, *blocks: list[bytes], stop: str = "tool_use") -> Msg:
    server.script(reply(*blocks, stop=stop))
    async with make_model(server) as model:
        return await model.stream(ask()).pipe(fold_message())


async def test_several_tool_uses_are_numbered_in_order_whatever_their_block_index(
    anthropic: AnthropicServer,
) -> None:
    message = await fold_script(
        anthropic,
        thinking_block(0, "Both at once.", signature="sig"),
        tool_block(1, "toolu_A", "lookup", '{"key": "alpha"}'),
        tool_block(2, "toolu_B", "lookup", '{"key": "beta"}'),
        tool_block(3, "toolu_C", "clock"),  # no input at all: only the empty fragment
    )
    assert [(c.id, c.name, c.input) for c in message.tool_calls] == [
        ("toolu_A", "lookup", {"key": "alpha"}),
        ("toolu_B", "lookup", {"key": "beta"}),
        ("toolu_C", "clock", {}),
    ]
    assert message.content[0] == ThinkingBlock(thinking="Both at once.", signature="sig")


async def test_tool_input_arriving_one_character_per_delta_is_assembled_exactly(
    anthropic: AnthropicServer,
) -> None:
    arguments = json.dumps(
        {"query": 'naïve café ☕ — "quoted"', "limit": 10, "tags": ["a", "b"]}, ensure_ascii=False
    )
    message = await fold_script(anthropic, tool_block(0, "toolu_1", "search", *arguments))
    [call] = message.tool_calls
    assert call.raw_arguments == arguments
    assert call.input == json.loads(arguments)
    assert call.state == "complete"
    assert len(arguments) > 50  # as many deltas as characters


async def test_cache_usage_counts_the_cached_tokens_inside_the_input(anthropic: AnthropicServer) -> None:
    anthropic.script(
        Reply.sse(
            message_start(21, cache_write=1800, cache_read=0),
            *text_block(0, "ok"),
            message_delta("end_turn", 9),
            message_stop(),
        ),
        Reply.sse(
            message_start(8, cache_write=0, cache_read=1800),
            *text_block(0, "ok"),
            # The cumulative counts in message_delta replace the start's.
            message_delta("end_turn", 5, input_tokens=8, cache_read_input_tokens=1800),
            message_stop(),
        ),
    )
    async with make_model(anthropic) as model:
        first = await model.stream(ask()).pipe(fold_message())
        second = await model.stream(ask()).pipe(fold_message())
    assert Usage.from_json(first.metadata["usage"]) == Usage(
        input_tokens=21 + 1800, output_tokens=9, cache_read_tokens=0, cache_write_tokens=1800
    )
    assert Usage.from_json(second.metadata["usage"]) == Usage(
        input_tokens=8 + 1800, output_tokens=5, cache_read_tokens=1800, cache_write_tokens=0
    )


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("tool_use", "tool_calls"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("refusal", "content_filter"),
        ("a_reason_added_later", "stop"),
    ],
)
async def test_stop_reasons_map_to_finish_reasons(
    anthropic: AnthropicServer, stop_reason: str, finish: str
) -> None:
    message = await answer(anthropic, reply(text_block(0, "x"), stop=stop_reason))
    assert message.metadata["finish_reason"] == finish


def _split_everywhere(frames: list[bytes]) -> list[bytes | Pause]:
    """The stream's bytes cut into 7-byte writes with a pause between each: every event arrives split
    mid-line, mid-field name and mid-JSON, over many reads."""
    data = b"".join(frames)
    pieces: list[bytes | Pause] = []
    for start in range(0, len(data), 7):
        pieces += [data[start : start + 7], Pause()]
    return pieces


_STREAM = [
    message_start(10),
    *thinking_block(0, "Plan: ", "say hi.", signature="sig-ŝ"),
    ping(),
    *text_block(1, "Grüß ", "dich 👋"),
    *tool_block(2, "toolu_9", "note", '{"text": ', '"hé"}'),
    ping(),
    message_delta("tool_use", 7),
    message_stop(),
]

FRAMINGS: dict[str, list[bytes | Pause]] = {
    "one_write_per_event": list(_STREAM),
    "everything_in_one_write": [b"".join(_STREAM)],
    "split_mid_event_everywhere": _split_everywhere(_STREAM),
    "crlf_line_ends": [frame.replace(b"\n", b"\r\n") for frame in _STREAM],
    "pings_between_every_event": [piece for frame in _STREAM for piece in (frame, ping())],
    "comments_between_events": [piece for frame in _STREAM for piece in (frame, b": keep-alive\n\n")],
    "last_event_without_its_blank_line": [*_STREAM[:-1], _STREAM[-1][:-1]],
    "data_before_the_event_line": [
        b"\n".join(reversed(frame.rstrip(b"\n").split(b"\n"))) + b"\n\n" for frame in _STREAM
    ],
}


@pytest.mark.parametrize("frames", FRAMINGS.values(), ids=FRAMINGS.keys())
async def test_framings_all_give_the_same_message(
    anthropic: AnthropicServer, frames: list[bytes | Pause]
) -> None:
    message = await answer(anthropic, Reply.sse(*frames))
    assert message.content == (
        ThinkingBlock(thinking="Plan: say hi.", signature="sig-ŝ"),
        TextBlock(text="Grüß dich 👋"),
        ToolUseBlock(id="toolu_9", name="note", input={"text": "hé"}, raw_arguments='{"text": "hé"}'),
    )
    assert message.metadata == {
        "finish_reason": "tool_calls",
        "usage": {"input_tokens": 10, "output_tokens": 7, "cache_read_tokens": 0, "reasoning_tokens": 0},
    }
    assert len(anthropic.requests) == 1


async def test_events_the_client_does_not_know_are_skipped(anthropic: AnthropicServer) -> None:
    message = await answer(
        anthropic,
        reply(
            event("a_new_event_type", {"anything": [1, 2]}),
            # A server tool's block: its input deltas are not a tool call of ours.
            event(
                "content_block_start",
                {
                    "index": 0,
                    "content_block": {
                        "type": "server_tool_use",
                        "id": "srvtoolu_1",
                        "name": "web_search",
                        "input": {},
                    },
                },
            ),
            event(
                "content_block_delta",
                {"index": 0, "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'}},
            ),
            event("content_block_stop", {"index": 0}),
            event(
                "content_block_start",
                {
                    "index": 1,
                    "content_block": {
                        "type": "web_search_tool_result",
                        "tool_use_id": "srvtoolu_1",
                        "content": [],
                    },
                },
            ),
            event("content_block_stop", {"index": 1}),
            *text_block(2, "Found it."),
            event(
                "content_block_delta",
                {"index": 2, "delta": {"type": "citations_delta", "citation": {"type": "char_location"}}},
            ),
        ),
    )
    assert message.content == (TextBlock(text="Found it."),)


async def test_a_whole_message_is_read_when_streaming_is_off(anthropic: AnthropicServer) -> None:
    anthropic.script(
        Reply.json(
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-test",
                "content": [
                    {"type": "thinking", "thinking": "Add them.", "signature": "sig-whole"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Calling add."},
                    {"type": "tool_use", "id": "toolu_w", "name": "add", "input": {"a": 1, "b": 2}},
                ],
                "stop_reason": "tool_use",
                "usage": {
                    "input_tokens": 30,
                    "output_tokens": 12,
                    "cache_read_input_tokens": 100,
                    "cache_creation_input_tokens": 0,
                },
            }
        )
    )
    async with make_model(anthropic) as model:
        message = await model.stream(ask(stream=False)).pipe(fold_message())
    assert "stream" not in anthropic.requests[0].body
    assert anthropic.requests[0].headers["Accept"] == "application/json"
    assert message.content == (
        ThinkingBlock(thinking="Add them.", signature="sig-whole"),
        ThinkingBlock(thinking="", redacted_data="opaque"),
        TextBlock(text="Calling add."),
        ToolUseBlock(id="toolu_w", name="add", input={"a": 1, "b": 2}, raw_arguments='{"a": 1, "b": 2}'),
    )
    assert Usage.from_json(message.metadata["usage"]) == Usage(130, 12, 100, 0, 0)
    assert message.metadata["finish_reason"] == "tool_calls"


# ---- lifecycle ---------------------------------------------------------------------------------------


async def test_the_model_is_a_chat_model_and_the_stream_is_cold(anthropic: AnthropicServer) -> None:
    anthropic.script(reply(text_block(0, "one")), reply(text_block(0, "two")))
    async with make_model(anthropic) as model:
        assert isinstance(model, ChatModel)
        assert (model.model_name, provider_of(model)) == ("claude-test", "anthropic")
        answer = model.stream(ask()).pipe(fold_message())
        await asyncio.sleep(0)
        assert anthropic.requests == []  # nothing is sent before a subscription
        first: Msg = await answer
        second: Msg = await answer
    assert (first.text, second.text) == ("one", "two")
    assert anthropic.requests[0].body == anthropic.requests[1].body  # the body is encoded once, reused


async def test_dispose_mid_stream_closes_the_response(anthropic: AnthropicServer) -> None:
    anthropic.script(Reply.sse(message_start(), *text_block(0, "a")[:2], Stall()))
    async with make_model(anthropic) as model:
        seen = expect(model.stream(ask()))
        await asyncio.wait_for(anthropic.stalled.wait(), 5)
        seen.dispose()
        await asyncio.wait_for(anthropic.disconnected.wait(), 5)
    assert [c.text for c in seen.items] == ["a"]
    assert seen.outcome is None  # a cancel ends the stream silently
