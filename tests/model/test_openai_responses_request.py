"""What OpenAIResponsesModel sends: the request body the loopback server received, field by field.

Bad inputs tried: stop sequences and a seed (which the API does not take: refused before any request), a
thinking block signed by another provider, a reasoning item that nothing follows, and arguments that
never parsed (sent back as the model wrote them).
"""

from __future__ import annotations

import gc
import json
from typing import Any

import pytest

import rxagent.model.openai_responses as responses_module
from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.types import ChatRequest, ForceTool, JsonSchemaFormat, ToolSchema
from rxagent.operators import fold_message
from tests.model.openai_server import OpenAIServer
from tests.model.responses_server import ResponseStream, encrypted, make_responses_model
from tests.streams import expect

ADD = ToolSchema(
    "add",
    "Add two integers.",
    {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
)
STRICT = ToolSchema(
    "lookup",
    "Look a key up.",
    {
        "type": "object",
        "properties": {"key": {"type": "string"}},
        "required": ["key"],
        "additionalProperties": False,
    },
    strict=True,
)


async def sent(server: OpenAIServer, request: ChatRequest, **options: Any) -> dict[str, Any]:
    """The body the server received for ``request``."""
    server.script(ResponseStream().text("ok").completed())
    async with make_responses_model(server, **options) as model:
        await model.stream(request).pipe(fold_message())
    return server.requests[-1].body


def signed(item: dict[str, Any], thinking: str = "") -> ThinkingBlock:
    return ThinkingBlock(thinking=thinking, signature=json.dumps(item))


REASONING = {
    "id": "rs_abc",
    "type": "reasoning",
    "summary": [{"type": "summary_text", "text": "**Add** them"}],
    "encrypted_content": encrypted("abc"),
}


async def test_the_body_names_model_input_and_what_a_stateless_call_needs(server: OpenAIServer) -> None:
    body = await sent(server, ChatRequest((Msg.user("hi"),)))
    assert body == {
        "model": "test-model",
        "input": [{"role": "user", "content": "hi"}],
        "stream": True,
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }


async def test_leading_system_messages_are_the_instructions_and_later_ones_stay_in_place(
    server: OpenAIServer,
) -> None:
    request = ChatRequest(
        (
            Msg.system("You are terse."),
            Msg.system("Answer in French."),
            Msg.user("hi"),
            Msg.assistant("salut"),
            Msg.system("Now answer in English."),
            Msg.user("again"),
        )
    )
    body = await sent(server, request)
    assert body["instructions"] == "You are terse.\n\nAnswer in French."
    assert body["input"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "salut"},
        {"role": "system", "content": "Now answer in English."},
        {"role": "user", "content": "again"},
    ]


async def test_a_tool_round_is_function_call_and_function_call_output_items(server: OpenAIServer) -> None:
    calls = Msg(
        role="assistant",
        content=(
            signed(REASONING, "**Add** them"),
            TextBlock(text="Adding."),
            ToolUseBlock(id="call_1", name="add", input={"a": 2, "b": 3}, raw_arguments='{"a": 2, "b": 3}'),
            ToolUseBlock(id="call_2", name="add", raw_arguments="{'a': 1", state="invalid", error="bad JSON"),
        ),
    )
    results = Msg.from_tool_results(
        ToolResultBlock(tool_use_id="call_1", name="add", output=(TextBlock(text="5"),)),
        ToolResultBlock(tool_use_id="call_2", name="add", status="error"),
    )
    body = await sent(server, ChatRequest((Msg.user("2 + 3?"), calls, results)))
    assert body["input"] == [
        {"role": "user", "content": "2 + 3?"},
        REASONING,  # exactly as the server sent it, so it can continue from it
        {"role": "assistant", "content": "Adding."},
        {"type": "function_call", "call_id": "call_1", "name": "add", "arguments": '{"a":2,"b":3}'},
        {"type": "function_call", "call_id": "call_2", "name": "add", "arguments": "{'a': 1"},
        {"type": "function_call_output", "call_id": "call_1", "output": "5"},
        {"type": "function_call_output", "call_id": "call_2", "output": "(tool call error)"},
    ]


async def test_thinking_that_is_not_this_apis_reasoning_item_is_not_sent(server: OpenAIServer) -> None:
    without_encryption = {key: value for key, value in REASONING.items() if key != "encrypted_content"}
    assistant = Msg(
        role="assistant",
        content=(
            ThinkingBlock(thinking="plain reasoning_content of a chat-completions server"),
            ThinkingBlock(thinking="Anthropic's", signature="EqQBCkgIARABGAIiQL2x/base64signature=="),
            ThinkingBlock(thinking="not an item", signature='{"type": "thinking"}'),
            signed(without_encryption, "stored items cannot be found when nothing is stored"),
            TextBlock(text="Hello."),
        ),
    )
    body = await sent(server, ChatRequest((Msg.user("hi"), assistant, Msg.user("and?"))))
    assert body["input"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "and?"},
    ]


async def test_a_reasoning_item_that_nothing_follows_is_not_sent(server: OpenAIServer) -> None:
    # An answer cut off after its reasoning: the API refuses a reasoning item without what it led to.
    cut_off = Msg(role="assistant", content=(signed(REASONING),), metadata={"finish_reason": "length"})
    body = await sent(server, ChatRequest((Msg.user("hi"), cut_off, Msg.user("go on"))))
    assert body["input"] == [{"role": "user", "content": "hi"}, {"role": "user", "content": "go on"}]


async def test_tools_and_tool_choice(server: OpenAIServer) -> None:
    body = await sent(
        server, ChatRequest((Msg.user("hi"),), tools=(ADD, STRICT), tool_choice=ForceTool("add"))
    )
    assert body["tools"] == [
        {
            "type": "function",
            "name": "add",
            "description": ADD.description,
            "parameters": ADD.parameters,
            "strict": False,
        },
        {
            "type": "function",
            "name": "lookup",
            "description": STRICT.description,
            "parameters": STRICT.parameters,
            "strict": True,
        },
    ]
    assert body["tool_choice"] == {"type": "function", "name": "add"}
    for choice in ("auto", "none", "required"):
        assert (await sent(server, ChatRequest((Msg.user("hi"),), tools=(ADD,), tool_choice=choice)))[
            "tool_choice"
        ] == choice


async def test_sampling_options_output_format_and_extra(server: OpenAIServer) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    request = ChatRequest(
        (Msg.user("hi"),),
        temperature=0.2,
        top_p=0.9,
        max_tokens=300,
        parallel_tool_calls=False,
        response_format=JsonSchemaFormat("place", schema),
        extra={"metadata": {"run": "r1"}, "service_tier": "flex", "store": True},
    )
    body = await sent(server, request, reasoning_effort="high", reasoning_summary="detailed")
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.9
    assert body["max_output_tokens"] == 300
    assert body["parallel_tool_calls"] is False
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    }
    assert body["reasoning"] == {"effort": "high", "summary": "detailed"}
    assert (body["metadata"], body["service_tier"], body["store"]) == (
        {"run": "r1"},
        "flex",
        True,
    )  # extra wins
    plain = await sent(server, ChatRequest((Msg.user("hi"),), response_format="json_object"))
    assert plain["text"] == {"format": {"type": "json_object"}}
    assert "reasoning" not in plain  # a model that does not reason refuses the field


async def test_extra_may_replace_the_input(server: OpenAIServer) -> None:
    replaced = [{"role": "user", "content": "instead"}]
    body = await sent(server, ChatRequest((Msg.user("hi"),), extra={"input": replaced, "model": "other"}))
    assert (body["input"], body["model"]) == (replaced, "other")


@pytest.mark.parametrize(
    ("options", "says"),
    [({"stop": ("END",)}, "takes no stop sequences"), ({"seed": 7}, "takes no seed")],
    ids=["stop", "seed"],
)
async def test_what_the_api_does_not_take_is_refused_before_any_request(
    server: OpenAIServer, options: dict[str, Any], says: str
) -> None:
    async with make_responses_model(server) as model:
        seen = await expect(model.stream(ChatRequest((Msg.user("hi"),), **options)))
    assert isinstance(seen.error, ValueError)
    assert says in str(seen.error)
    assert server.requests == []


async def test_each_messages_items_are_encoded_once_across_requests(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    encoded: list[str] = []
    original = responses_module.message_to_items

    def counting(msg: Msg) -> Any:
        encoded.append(msg.id)
        return original(msg)

    monkeypatch.setattr(responses_module, "message_to_items", counting)
    history = [Msg.system("sys"), Msg.user("first")]
    server.script(*(ResponseStream().text("ok").completed() for _ in range(3)))
    async with make_responses_model(server) as model:
        # The model takes the encoder when it is made, so the counting one is the one it uses.
        for turn in range(3):
            await model.stream(ChatRequest(tuple(history))).pipe(fold_message())
            history += [Msg.assistant(f"answer {turn}"), Msg.user(f"next {turn}")]
        assert len(model._wire) == len(history) - 3  # pyright: ignore[reportPrivateUsage]
        del history
        gc.collect()
        assert len(model._wire) == 0  # pyright: ignore[reportPrivateUsage]
    # The user message, then two new messages per request: each encoded once, the system one never.
    assert len(encoded) == len(set(encoded)) == 1 + 2 + 2
    assert [r.body["input"][-1] for r in server.requests] == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "next 0"},
        {"role": "user", "content": "next 1"},
    ]
