"""The ReAct agent over AnthropicModel against the loopback Messages server: tool rounds, approvals, and
the thinking blocks sent back unchanged on the next turn (checked on the bodies the server received).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from rxagent.agent import PendingToolCallsError, ReActAgent, ToolDecision
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentResult,
    MessageCompleted,
    RetryScheduled,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    ToolPermissionAsked,
    ToolResult,
)
from rxagent.messages import ThinkingBlock
from rxagent.model import PromptCache
from rxagent.model.anthropic import AnthropicModel
from rxagent.operators import to_list
from rxagent.telemetry import Telemetry
from rxagent.tools import Permissions, Toolkit, tool
from tests.model.anthropic_server import (
    AnthropicServer,
    error_body,
    make_model,
    message_delta,
    message_start,
    message_stop,
    redacted_block,
    reply,
    text_block,
    thinking_block,
    tool_block,
)
from tests.model.openai_server import Reply
from tests.streams import expect

ADA = RuntimeContext(user_id="ada", session_id="refunds")
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds+0uLJ8wMbE/xFu3O8i9k0fB1Xb9Ks="
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB8URj2pLmN"
)

refunded: list[tuple[str, float]] = []


@tool
def refund(order: str, amount: float) -> str:
    """Refund an order.

    Args:
        order: the order number.
        amount: how much to give back.
    """
    refunded.append((order, amount))
    return f"refunded {amount} on {order}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as running:
        yield running


@pytest.fixture
async def model(anthropic: AnthropicServer) -> AsyncIterator[AnthropicModel]:
    async with make_model(anthropic, cache=PromptCache()) as client:
        yield client


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    yield found
    found.clear()


def assistant_turns(body: dict[str, Any]) -> list[list[dict[str, Any]]]:
    return [turn["content"] for turn in body["messages"] if turn["role"] == "assistant"]


async def test_a_thinking_tool_round_sends_the_thinking_back_unchanged(
    anthropic: AnthropicServer, model: AnthropicModel, exporter: InMemorySpanExporter
) -> None:
    arguments = '{"a": 2, "b": 3}'
    anthropic.script(
        Reply.sse(
            message_start(40, cache_write=1200, cache_read=0),
            *thinking_block(0, "I should ", "use the tool.", signature=SIGNATURE),
            *text_block(1, "Adding."),
            *tool_block(2, "toolu_01", "add", *arguments),  # one character per delta
            message_delta("tool_use", 30),
            message_stop(),
        ),
        Reply.sse(
            message_start(12, cache_write=60, cache_read=1200),
            *text_block(0, "2 + 3 = ", "5."),
            message_delta("end_turn", 6),
            message_stop(),
        ),
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    agent = ReActAgent(
        model, Toolkit([add]), system_prompt="Use the tools.", middleware=[Telemetry(provider)]
    )

    events = await to_list(agent.stream_events("What is 2 + 3?"))
    provider.shutdown()

    result = events[-1]
    assert isinstance(result, AgentResult)
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "2 + 3 = 5.", 2)
    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "I should use the tool."
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Adding.", "2 + 3 = ", "5."]
    assert [(e.call_id, e.name) for e in events if isinstance(e, ToolCallStarted)] == [("toolu_01", "add")]
    assert [e.fragment for e in events if isinstance(e, ToolCallArgumentsDelta)] == list(arguments)
    assert [e.result.text for e in events if isinstance(e, ToolResult)] == ["5"]
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens) == (40 + 1200 + 12 + 60 + 1200, 36)
    assert (usage.cache_read_tokens, usage.cache_write_tokens, usage.model_calls) == (1200, 1260, 2)

    first, second = (request.body for request in anthropic.requests)
    assert first["system"] == [
        {"type": "text", "text": "Use the tools.", "cache_control": {"type": "ephemeral"}}
    ]
    assert [t["name"] for t in first["tools"]] == ["add"]
    [calling] = assistant_turns(second)
    assert calling == [
        {"type": "thinking", "thinking": "I should use the tool.", "signature": SIGNATURE},
        {"type": "text", "text": "Adding."},
        {"type": "tool_use", "id": "toolu_01", "name": "add", "input": {"a": 2, "b": 3}},
    ]
    assert second["messages"][-1] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_01",
                "content": "5",
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }
    chats = [s for s in exporter.get_finished_spans() if s.name == "chat claude-test"]
    assert [dict(s.attributes or {}).get("gen_ai.provider.name") for s in chats] == ["anthropic", "anthropic"]
    assert [dict(s.attributes or {}).get("gen_ai.usage.cache_creation.input_tokens") for s in chats] == [
        1200,
        60,
    ]
    assert [dict(s.attributes or {}).get("gen_ai.usage.cache_read.input_tokens") for s in chats] == [
        None,
        1200,
    ]


async def test_approvals_over_the_messages_api_keep_the_thinking_for_the_turn_after(
    anthropic: AnthropicServer, model: AnthropicModel
) -> None:
    refunded.clear()
    anthropic.script(
        reply(
            thinking_block(0, "Two refunds; ", "both need approval.", signature=SIGNATURE),
            redacted_block(1, REDACTED),
            tool_block(2, "toolu_r1", "refund", '{"order": "A-1", ', '"amount": 5}'),
            tool_block(3, "toolu_r2", "refund", '{"order": "B-2", "amount": 700}'),
            stop="tool_use",
        ),
        reply(text_block(0, "Refunded A-1; B-2 was declined.")),
    )
    agent = ReActAgent(
        model, Toolkit([refund]), permissions=Permissions().ask("refund", reason="money leaves")
    )

    asking = await to_list(agent.stream_events("Refund A-1 and B-2.", ADA))

    paused = asking[-1]
    assert isinstance(paused, AgentResult)
    assert paused.reason == "PERMISSION_ASKING"
    assert [c.id for c in paused.pending] == ["toolu_r1", "toolu_r2"]
    assert [e.call.id for e in asking if isinstance(e, ToolPermissionAsked)] == ["toolu_r1", "toolu_r2"]
    assert refunded == []
    assert len(anthropic.requests) == 1
    state = await agent.sessions.state(ADA)
    [calling] = [m for m in state.messages if m.role == "assistant"]
    assert calling.content[:2] == (
        ThinkingBlock(thinking="Two refunds; both need approval.", signature=SIGNATURE),
        ThinkingBlock(thinking="", redacted_data=REDACTED),
    )

    # A bad answer changes nothing and reaches no model.
    refused = await expect(agent.stream_events([ToolDecision("toolu_r1", allow=True)] * 2, ADA))
    assert isinstance(refused.error, PendingToolCallsError)
    assert len(anthropic.requests) == 1

    done = await agent.call(
        [ToolDecision("toolu_r1", allow=True), ToolDecision("toolu_r2", allow=False, reason="too much")], ADA
    )

    assert (done.reason, done.text) == ("MODEL_STOP", "Refunded A-1; B-2 was declined.")
    assert refunded == [("A-1", 5.0)]
    second = anthropic.requests[1].body
    [sent_back] = assistant_turns(second)
    assert sent_back == [
        {"type": "thinking", "thinking": "Two refunds; both need approval.", "signature": SIGNATURE},
        {"type": "redacted_thinking", "data": REDACTED},
        {"type": "tool_use", "id": "toolu_r1", "name": "refund", "input": {"order": "A-1", "amount": 5}},
        {"type": "tool_use", "id": "toolu_r2", "name": "refund", "input": {"order": "B-2", "amount": 700}},
    ]
    results = second["messages"][-1]["content"]
    assert [(r["tool_use_id"], r.get("is_error", False)) for r in results] == [
        ("toolu_r1", False),
        ("toolu_r2", True),
    ]
    assert results[0]["content"] == "refunded 5.0 on A-1"
    assert "too much" in results[1]["content"]
    assert [turn["role"] for turn in second["messages"]] == ["user", "assistant", "user"]


async def test_an_overloaded_api_is_retried_inside_the_run(
    anthropic: AnthropicServer, model: AnthropicModel
) -> None:
    anthropic.script(
        Reply.json(error_body("overloaded_error", "Overloaded"), 529, {"retry-after": "0.01"}),
        reply(text_block(0, "Fine now.")),
    )
    agent = ReActAgent(model)

    events = await to_list(agent.stream_events("Hello?"))

    result = events[-1]
    assert isinstance(result, AgentResult)
    assert (result.reason, result.text) == ("MODEL_STOP", "Fine now.")
    [retry] = [e for e in events if isinstance(e, RetryScheduled)]
    assert retry.delay_s == pytest.approx(0.01)
    assert "529" in retry.error
    assert anthropic.requests[0].body == anthropic.requests[1].body
    [final] = [e.message for e in events if isinstance(e, MessageCompleted) and e.message.role == "assistant"]
    assert final.text == "Fine now."
