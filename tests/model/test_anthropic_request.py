"""The request AnthropicModel sends: the conversation in the Messages API's shape, options, and cache marks.

Checked on ``encode_request`` (the body ``stream`` sends, byte for byte) and, where it matters, on what
the loopback server received.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from rxagent.model import ChatRequest, ForceTool, PromptCache, ToolSchema
from rxagent.model.anthropic import AnthropicModel
from tests.model.anthropic_server import AnthropicServer, make_model, reply, text_block

ADD = ToolSchema(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
NOW = ToolSchema("now", "The time.")
EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as running:
        yield running


def body(request: ChatRequest, **options: Any) -> dict[str, Any]:
    model = AnthropicModel("claude-test", api_key_env=None, **options)
    return json.loads(model.encode_request(request))


def calling(*calls: ToolUseBlock, thinking: tuple[ThinkingBlock, ...] = (), text: str = "") -> Msg:
    content: list[Any] = [*thinking, *([TextBlock(text=text)] if text else []), *calls]
    return Msg(role="assistant", content=tuple(content))


def use(call_id: str, name: str = "add", **arguments: Any) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input=arguments, raw_arguments=json.dumps(arguments))


def result(call_id: str, text: str, status: Any = "ok", name: str = "add") -> ToolResultBlock:
    output = (TextBlock(text=text),) if text else ()
    return ToolResultBlock(tool_use_id=call_id, name=name, output=output, status=status)


def texts(*values: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": value} for value in values]


# ---- the conversation --------------------------------------------------------------------------------


def test_the_opening_system_messages_become_the_top_level_system() -> None:
    sent = body(ChatRequest((Msg.system("Be brief."), Msg.system("Answer in French."), Msg.user("Hi"))))
    assert sent["system"] == texts("Be brief.", "Answer in French.")
    assert sent["messages"] == [{"role": "user", "content": texts("Hi")}]


def test_a_later_system_message_is_user_text_in_its_place_merged_with_its_neighbours() -> None:
    sent = body(
        ChatRequest(
            (
                Msg.system("Be brief."),
                Msg.user("Add 2 and 3."),
                calling(use("t1", a=2, b=3)),
                Msg.from_tool_results(result("t1", "5")),
                Msg.system("You called the same tool twice; try another way."),
            )
        )
    )
    assert sent["system"] == texts("Be brief.")
    assert [turn["role"] for turn in sent["messages"]] == ["user", "assistant", "user"]
    assert sent["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "5"},
        {"type": "text", "text": "You called the same tool twice; try another way."},
    ]


def test_tool_results_are_user_turns_and_lead_a_merged_turn() -> None:
    sent = body(
        ChatRequest(
            (
                Msg.user("Add twice."),
                calling(use("t1", a=1, b=1), use("t2", a=2, b=2), text="Both."),
                Msg.user("Actually, also say hi."),  # arrived (steered in) before the results were recorded
                Msg.from_tool_results(result("t1", "2"), result("t2", "4")),
                Msg.user("Thanks."),
            )
        )
    )
    assert sent["messages"] == [
        {"role": "user", "content": texts("Add twice.")},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Both."},
                {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1, "b": 1}},
                {"type": "tool_use", "id": "t2", "name": "add", "input": {"a": 2, "b": 2}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "2"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "4"},
                *texts("Actually, also say hi.", "Thanks."),
            ],
        },
    ]


def test_consecutive_assistant_messages_are_one_turn() -> None:
    sent = body(ChatRequest((Msg.user("Hi"), Msg.assistant("Hello."), Msg.assistant("How can I help?"))))
    assert sent["messages"][1] == {"role": "assistant", "content": texts("Hello.", "How can I help?")}


def test_failed_denied_and_empty_results_say_so() -> None:
    sent = body(
        ChatRequest(
            (
                Msg.user("go"),
                calling(use("t1"), use("t2"), use("t3")),
                Msg.from_tool_results(
                    result("t1", "boom", "error"), result("t2", "", "denied"), result("t3", "")
                ),
            )
        )
    )
    assert sent["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "boom", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t2", "content": "(tool call denied)", "is_error": True},
        {"type": "tool_result", "tool_use_id": "t3"},
    ]


def test_thinking_goes_back_unchanged_and_unsigned_thinking_is_left_out() -> None:
    thinking = (
        ThinkingBlock(thinking="Signed reasoning.", signature="EqQBCgIYAhIM"),
        ThinkingBlock(thinking="", redacted_data="EmwKAhgBEgy3va3pzix"),
        ThinkingBlock(thinking="From another provider, unsigned."),
    )
    sent = body(ChatRequest((Msg.user("2+3?"), calling(use("t1", a=2, b=3), thinking=thinking))))
    assert sent["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Signed reasoning.", "signature": "EqQBCgIYAhIM"},
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 2, "b": 3}},
    ]


def test_a_call_whose_arguments_never_parsed_goes_back_with_its_text() -> None:
    broken = ToolUseBlock(id="t1", name="add", raw_arguments='{"a": 2, ', state="invalid", error="not JSON")
    sent = body(ChatRequest((Msg.user("go"), calling(broken))))
    assert sent["messages"][1]["content"] == [
        {"type": "tool_use", "id": "t1", "name": "add", "input": {"INVALID_JSON": '{"a": 2, '}}
    ]


def test_empty_text_and_messages_that_send_nothing_are_left_out() -> None:
    sent = body(
        ChatRequest(
            (
                Msg.user("Hi"),
                Msg(role="assistant", content=(ThinkingBlock(thinking="unsigned"), TextBlock(text=""))),
                Msg.user("Still there?"),
            )
        )
    )
    assert sent["messages"] == [{"role": "user", "content": texts("Hi", "Still there?")}]


# ---- options ---------------------------------------------------------------------------------------


def test_sampling_options_and_defaults() -> None:
    sent = body(
        ChatRequest((Msg.user("Hi"),), temperature=0.2, top_p=0.9, stop=("END",), seed=7, max_tokens=300),
        max_tokens=1000,
    )
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        "model": "claude-test",
        "max_tokens": 300,
        "stream": True,
        "temperature": 0.2,
        "top_p": 0.9,
        "stop_sequences": ["END"],
    }  # no seed: the API refuses fields it does not know
    assert body(ChatRequest((Msg.user("Hi"),), stream=False), max_tokens=1000)["max_tokens"] == 1000


def test_a_thinking_budget_turns_extended_thinking_on() -> None:
    sent = body(ChatRequest((Msg.user("Hi"),)), thinking_budget=2048, max_tokens=8000)
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    model = AnthropicModel("claude-test", api_key_env=None, thinking_budget=2048, max_tokens=8000)
    assert (model.capabilities.thinking, model.capabilities.forced_tool_choice) == (True, False)


@pytest.mark.parametrize(
    ("choice", "parallel", "wire"),
    [
        (None, None, None),
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        (ForceTool("add"), None, {"type": "tool", "name": "add"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        (None, True, None),
    ],
)
def test_tool_choice(choice: Any, parallel: bool | None, wire: dict[str, Any] | None) -> None:
    sent = body(
        ChatRequest((Msg.user("Hi"),), tools=(ADD,), tool_choice=choice, parallel_tool_calls=parallel)
    )
    assert sent.get("tool_choice") == wire
    assert sent["tools"] == [
        {"name": "add", "description": "Add two integers.", "input_schema": dict(ADD.parameters)}
    ]


def test_no_tool_choice_without_tools() -> None:
    assert "tool_choice" not in body(ChatRequest((Msg.user("Hi"),), tool_choice="none"))


def test_extra_fields_go_in_last_and_may_replace_what_was_spliced() -> None:
    request = ChatRequest(
        (Msg.system("S"), Msg.user("Hi")), extra={"top_k": 5, "metadata": {"user_id": "u1"}}
    )
    sent = body(request)
    assert (sent["top_k"], sent["metadata"], sent["system"]) == (5, {"user_id": "u1"}, texts("S"))
    replaced = body(
        ChatRequest((Msg.system("S"), Msg.user("Hi")), tools=(ADD,), extra={"system": "plain string"})
    )
    assert replaced["system"] == "plain string"
    assert replaced["messages"] == [{"role": "user", "content": texts("Hi")}]
    assert [t["name"] for t in replaced["tools"]] == ["add"]


# ---- prompt caching ----------------------------------------------------------------------------------


def _conversation() -> ChatRequest:
    return ChatRequest(
        (
            Msg.system("Policy text."),
            Msg.user("Add 2 and 3."),
            calling(use("t1", a=2, b=3)),
            Msg.from_tool_results(result("t1", "5")),
        ),
        tools=(NOW, ADD),
    )


def test_without_a_cache_option_nothing_is_marked() -> None:
    assert "cache_control" not in json.dumps(body(_conversation()))


def test_the_cache_marks_the_system_the_last_tool_and_the_last_message() -> None:
    sent = body(_conversation(), cache=PromptCache())
    assert sent["system"] == [{"type": "text", "text": "Policy text.", "cache_control": EPHEMERAL}]
    assert [("cache_control" in tool) for tool in sent["tools"]] == [False, True]
    assert sent["tools"][1]["cache_control"] == EPHEMERAL
    assert sent["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "5", "cache_control": EPHEMERAL}
    ]
    assert json.dumps(sent).count("cache_control") == 3  # the API allows four


@pytest.mark.parametrize(
    ("cache", "marked"),
    [
        (PromptCache(system=False), {"tools", "messages"}),
        (PromptCache(tools=False), {"system", "messages"}),
        (PromptCache(messages=False), {"system", "tools"}),
        (PromptCache(system=False, tools=False), {"messages"}),
    ],
)
def test_the_options_say_where(cache: PromptCache, marked: set[str]) -> None:
    sent = body(_conversation(), cache=cache)
    assert {
        part for part in ("system", "tools", "messages") if "cache_control" in json.dumps(sent[part])
    } == marked


def test_a_one_hour_entry() -> None:
    sent = body(_conversation(), cache=PromptCache(ttl="1h"))
    assert sent["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    with pytest.raises(ValueError, match='"5m" or "1h"'):
        PromptCache(ttl="1d")  # type: ignore[arg-type]


def test_the_mark_goes_on_the_last_block_that_may_carry_one() -> None:
    signed = ThinkingBlock(thinking="thought", signature="sig")
    merged_tail = ChatRequest(
        (Msg.user("Hi"), Msg.assistant("Partial answer"), Msg(role="assistant", content=(signed,)))
    )
    sent = body(merged_tail, cache=PromptCache())
    # The last turn ends in a thinking block, which may not carry a mark: the text before it does.
    assert sent["messages"][-1]["content"] == [
        {"type": "text", "text": "Partial answer", "cache_control": EPHEMERAL},
        {"type": "thinking", "thinking": "thought", "signature": "sig"},
    ]
    results_then_text = ChatRequest(
        (Msg.user("go"), calling(use("t1")), Msg.from_tool_results(result("t1", "ok")), Msg.user("and?"))
    )
    assert body(results_then_text, cache=PromptCache())["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
        {"type": "text", "text": "and?", "cache_control": EPHEMERAL},
    ]


def test_the_mark_moves_to_the_new_last_message_as_the_conversation_grows() -> None:
    model = AnthropicModel("claude-test", api_key_env=None, cache=PromptCache())
    history: tuple[Msg, ...] = (Msg.system("S"), Msg.user("one"))
    first = json.loads(model.encode_request(ChatRequest(history)))
    history += (Msg.assistant("two"), Msg.user("three"))
    second = json.loads(model.encode_request(ChatRequest(history)))
    assert first["messages"][-1]["content"] == [{"type": "text", "text": "one", "cache_control": EPHEMERAL}]
    assert second["messages"] == [
        {"role": "user", "content": texts("one")},  # the cached message's encoding carries no stale mark
        {"role": "assistant", "content": texts("two")},
        {"role": "user", "content": [{"type": "text", "text": "three", "cache_control": EPHEMERAL}]},
    ]
    fresh = AnthropicModel("claude-test", api_key_env=None, cache=PromptCache())
    assert model.encode_request(ChatRequest(history)) == fresh.encode_request(ChatRequest(history))


async def test_the_server_receives_the_marked_body(anthropic: AnthropicServer) -> None:
    anthropic.script(reply(text_block(0, "ok")))
    request = _conversation()
    async with make_model(anthropic, cache=PromptCache()) as model:
        await model.stream(request)
        expected = json.loads(model.encode_request(request))
    assert anthropic.requests[0].body == expected
    assert anthropic.requests[0].body["system"][0]["cache_control"] == EPHEMERAL
