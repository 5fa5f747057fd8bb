"""What OpenAIChatModel sends: the JSON body as the server received it, headers, and the wire cache."""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rxagent.model._openai_wire as wire
from rxagent.messages import MessageMemo, Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.types import ChatRequest, ForceTool, JsonSchemaFormat, ToolSchema
from rxagent.operators import fold_message
from tests.model.openai_server import API_KEY, DONE, OpenAIServer, Reply, finish_chunk, make_model, text_chunk

OK = Reply.sse(text_chunk("ok"), finish_chunk(), DONE)

WEATHER = ToolSchema(
    "weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    strict=True,
)
CLOCK = ToolSchema("clock", "The time.")


def conversation() -> tuple[Msg, ...]:
    call_ok = ToolUseBlock(
        id="call_1", name="weather", input={"city": "Oslo"}, raw_arguments='{"city": "Oslo"}'
    )
    call_bad = ToolUseBlock(
        id="call_2", name="weather", raw_arguments='{"city": "Ro', state="invalid", error="not JSON"
    )
    return (
        Msg.system("Be brief."),
        Msg.user("Weather in Oslo and Rome?", name="ann"),
        Msg(
            role="assistant",
            content=(ThinkingBlock(thinking="Two cities."), TextBlock(text="Checking."), call_ok, call_bad),
        ),
        Msg.from_tool_results(
            ToolResultBlock(tool_use_id="call_1", name="weather", output=(TextBlock(text="rain"),)),
            ToolResultBlock(
                tool_use_id="call_2",
                name="weather",
                output=(TextBlock(text="bad arguments"),),
                status="error",
            ),
        ),
        Msg(role="assistant", content=(call_ok,)),
        Msg.from_tool_results(ToolResultBlock(tool_use_id="call_1", name="weather", status="denied")),
    )


async def sent(server: OpenAIServer, request: ChatRequest, **options: Any) -> dict[str, Any]:
    server.script(OK if request.stream else Reply.json(completion()))
    async with make_model(server, **options) as model:
        await model.stream(request).pipe(fold_message())
    return server.requests[-1].body


def completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }


async def test_messages_are_sent_in_openai_form(server: OpenAIServer) -> None:
    body = await sent(server, ChatRequest(conversation()))
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo and Rome?", "name": "ann"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                },
                # Arguments that never parsed go back verbatim.
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Ro'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
        {"role": "tool", "tool_call_id": "call_2", "content": "bad arguments"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "(tool call denied)"},
    ]


async def test_thinking_is_sent_back_only_when_the_provider_accepts_it(server: OpenAIServer) -> None:
    default = await sent(server, ChatRequest(conversation()))
    accepting = await sent(server, ChatRequest(conversation()), send_reasoning=True)
    assert "reasoning_content" not in default["messages"][2]
    assert accepting["messages"][2]["reasoning_content"] == "Two cities."


async def test_streaming_options_tools_and_choices(server: OpenAIServer) -> None:
    request = ChatRequest(
        (Msg.user("hi"),),
        tools=(WEATHER, CLOCK),
        temperature=0.2,
        top_p=0.9,
        max_tokens=100,
        stop=("END",),
        seed=7,
        tool_choice=ForceTool("weather"),
        parallel_tool_calls=False,
        response_format=JsonSchemaFormat("answer", {"type": "object"}),
    )
    body = await sent(server, request)
    assert body == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Weather for a city.",
                    "parameters": dict(WEATHER.parameters),
                    "strict": True,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "clock",
                    "description": "The time.",
                    "parameters": dict(CLOCK.parameters),
                },
            },
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.2,
        "top_p": 0.9,
        "max_tokens": 100,
        "stop": ["END"],
        "seed": 7,
        "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": True},
        },
    }


@pytest.mark.parametrize("choice", ["auto", "none", "required"])
async def test_tool_choice_words(server: OpenAIServer, choice: Any) -> None:
    body = await sent(server, ChatRequest((Msg.user("hi"),), tools=(CLOCK,), tool_choice=choice))
    assert body["tool_choice"] == choice


@pytest.mark.parametrize("response_format", ["text", "json_object"])
async def test_response_format_words(server: OpenAIServer, response_format: Any) -> None:
    body = await sent(server, ChatRequest((Msg.user("hi"),), response_format=response_format))
    assert body["response_format"] == {"type": response_format}


async def test_extra_is_merged_last(server: OpenAIServer) -> None:
    request = ChatRequest(
        (Msg.user("hi"),),
        temperature=0.2,
        extra={"temperature": 1.0, "top_k": 40, "chat_template_kwargs": {}},
    )
    body = await sent(server, request)
    assert body["temperature"] == 1.0
    assert body["top_k"] == 40
    assert body["chat_template_kwargs"] == {}
    assert list(body)[-1] == "chat_template_kwargs"


async def test_extra_may_replace_the_model_and_the_tools(server: OpenAIServer) -> None:
    request = ChatRequest((Msg.user("hi"),), tools=(CLOCK,), extra={"model": "other-model", "tools": []})
    body = await sent(server, request)
    assert body["model"] == "other-model"
    assert body["tools"] == []
    assert body["messages"] == [{"role": "user", "content": "hi"}]


async def test_non_streaming_request_body(server: OpenAIServer) -> None:
    body = await sent(server, ChatRequest((Msg.user("hi"),), stream=False))
    assert body["stream"] is False
    assert "stream_options" not in body


async def test_headers_carry_the_key_and_extra_headers(server: OpenAIServer) -> None:
    await sent(server, ChatRequest((Msg.user("hi"),)), headers={"X-Team": "rx"})
    headers = server.requests[-1].headers
    assert headers["Authorization"] == f"Bearer {API_KEY}"
    assert headers["X-Team"] == "rx"
    assert headers["Content-Type"] == "application/json"
    assert headers["Accept"] == "text/event-stream"


async def test_the_key_comes_from_the_named_environment_variable(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RXAGENT_TEST_KEY", "sk-from-env")
    await sent(server, ChatRequest((Msg.user("hi"),)), api_key=None, api_key_env="RXAGENT_TEST_KEY")
    assert server.requests[-1].headers["Authorization"] == "Bearer sk-from-env"


async def test_no_key_sends_no_authorization(server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    await sent(server, ChatRequest((Msg.user("hi"),)), api_key=None)
    assert "Authorization" not in server.requests[-1].headers


# ---- cost in proportion to what is new ---------------------------------------------------------------


async def test_a_message_wire_form_is_computed_once_across_requests(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[str] = []
    original = wire.message_to_wire

    def counting(msg: Msg, *, send_reasoning: bool = False) -> list[dict[str, Any]]:
        encoded.append(msg.id)
        return original(msg, send_reasoning=send_reasoning)

    monkeypatch.setattr(wire, "message_to_wire", counting)
    history = list(conversation())
    server.script(OK, OK, OK)
    async with make_model(server) as model:
        for turn in range(3):
            request = ChatRequest(tuple(history), tools=(WEATHER,))
            await model.stream(request).pipe(fold_message())
            history.append(Msg.user(f"and now {turn}?"))
    # Six messages, then one new message per request: each encoded exactly once.
    assert len(encoded) == len(set(encoded)) == 6 + 2
    assert len(server.requests[2].body["messages"]) == 7 + 2  # the tool message expands to two
    assert server.requests[2].body["messages"][-1] == {"role": "user", "content": "and now 1?"}


async def test_the_cache_forgets_messages_that_are_gone(server: OpenAIServer) -> None:
    server.script(OK)
    async with make_model(server) as model:
        cache = model._wire
        request = ChatRequest((Msg.system("sys"), Msg.user("hi")))
        await model.stream(request).pipe(fold_message())
        assert len(cache) == 2
        del request
        gc.collect()
        assert len(cache) == 0


def test_equal_messages_are_not_confused_by_the_cache() -> None:
    cache = wire.MessageWireCache()
    first = Msg.user("same", id="m1")
    second = Msg.user("other", id="m1")
    assert json.loads(cache.encoded(first))["content"] == "same"
    assert json.loads(cache.encoded(second))["content"] == "other"
    assert first != second
    assert Msg.model_validate_json(first.model_dump_json()) == first  # nothing stored on the message


def test_a_continued_conversation_is_encoded_from_what_it_appends(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = wire.MessageWireCache()
    history = list(conversation())
    lookups: list[int] = []
    get_all = MessageMemo.get_all

    def counting(memo: MessageMemo[bytes], messages: Any, compute: Any) -> Any:
        lookups.append(len(messages))
        return get_all(memo, messages, compute)

    monkeypatch.setattr(MessageMemo, "get_all", counting)
    for turn in range(10):
        history.append(Msg.user(f"and now {turn}?"))
        request = (*history, Msg.system("Answer in one line."))  # a closing message, new each time
        parts = cache.encoded_messages(request)
        assert parts == tuple(wire.MessageWireCache().encoded(m) for m in request)
        if turn:
            assert lookups[-1] == 2  # the new user message and the closing one
    assert cache.encoded_messages(request) is cache.encoded_messages(request)  # the same request again


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "edit", "copy", "truncate", "close"]), st.integers(0, 40)),
        max_size=30,
    )
)
def test_the_body_is_what_a_fresh_client_sends_whatever_the_history_does(
    operations: list[tuple[str, int]],
) -> None:
    cache = wire.MessageWireCache()
    history = list(conversation())
    for kind, number in operations:
        closing: tuple[Msg, ...] = ()
        if kind == "append":
            history.append(Msg.assistant(f"answer {number}"))
        elif kind == "edit":  # an edited message inside the history (a call edited on approval, say)
            history[1 + number % (len(history) - 1)] = Msg.user(f"edited {number}")
        elif kind == "copy":  # an equal copy, as a reloaded session has
            index = number % len(history)
            history[index] = history[index].model_copy()
        elif kind == "truncate":
            del history[2 + number % (len(history) - 1) :]
        else:
            closing = (Msg.system(f"closing {number}"),)
        request = ChatRequest((*history, *closing))
        fresh = [wire.MessageWireCache().encoded(m) for m in request.messages]
        body = wire.encode_body("m", request, cache.encoded_messages(request.messages), None)
        assert body == wire.encode_body("m", request, fresh, None)
        assert json.loads(body)["messages"] == [w for m in request.messages for w in wire.message_to_wire(m)]


async def test_a_conversation_record_goes_with_the_conversation(server: OpenAIServer) -> None:
    server.script(OK, OK)
    async with make_model(server) as model:
        history = [Msg.system("sys"), Msg.user("hi")]
        await model.stream(ChatRequest(tuple(history))).pipe(fold_message())
        history.append(Msg.user("more"))
        await model.stream(ChatRequest(tuple(history))).pipe(fold_message())
        assert len(model._wire) == 3  # pyright: ignore[reportPrivateUsage]
        assert server.requests[1].body["messages"][-1] == {"role": "user", "content": "more"}
        del history
        gc.collect()
        assert len(model._wire) == 0  # pyright: ignore[reportPrivateUsage]


@pytest.mark.parametrize("count", [0, 1, 2])
def test_a_body_of_none_one_or_two_messages_is_whole(count: int) -> None:
    # The head and the tail of the body ride on the first and last message: check the edges of that.
    messages = tuple(Msg.user(f"m{n}") for n in range(count))
    empty = Msg.from_tool_results()  # a message that sends nothing, first and last
    request = ChatRequest((empty, *messages, empty), tools=(CLOCK,), max_tokens=5)
    cache = wire.MessageWireCache()
    body = json.loads(wire.encode_body("m", request, cache.encoded_messages(request.messages), b"[]"))
    assert body["messages"] == [{"role": "user", "content": f"m{n}"} for n in range(count)]
    assert (body["model"], body["tools"], body["max_tokens"]) == ("m", [], 5)


def _strict_json(body: bytes) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(body, parse_constant=refuse)


def test_the_body_is_strict_json_whatever_the_values() -> None:
    from rxagent.model.openai import OpenAIChatModel

    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    # The model may write NaN (Python's json reads it): sent back, it is null, not the NaN a server refuses.
    call = fold_call('{"x": NaN, "y": 1e-7, "big": 123456789012345678901234567890, "t": "é✓\\u2028"}')
    request = ChatRequest(
        (Msg.user("naïve ✓"), Msg(role="assistant", content=(call,))),
        extra={"logit_bias": {50256: -100}, "flags": {True: 1}},  # keys msgspec does not take: the fallback
    )
    body = _strict_json(model.encode_request(request))
    assert body["messages"][0]["content"] == "naïve ✓"
    arguments = json.loads(body["messages"][1]["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"x": None, "y": 1e-7, "big": 123456789012345678901234567890, "t": "é✓\u2028"}
    assert body["logit_bias"] == {"50256": -100}
    assert body["flags"] == {"true": 1}
    assert "é✓".encode() in model.encode_request(request)  # UTF-8 as it is, not \\u escapes


def fold_call(arguments: str) -> ToolUseBlock:
    """A call as the fold makes it from the model's argument text (parsed by the standard library)."""
    return ToolUseBlock(id="c", name="f", input=json.loads(arguments), raw_arguments=arguments)
