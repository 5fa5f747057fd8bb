"""The ReAct agent over OpenAIResponsesModel against the loopback server: approvals, and encrypted reasoning
carried from one turn to the next through a real SQLite session store (checked on the request body the
server received)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from rxagent.agent import ReActAgent, ToolDecision
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    MessageCompleted,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    ToolResult,
)
from rxagent.messages import ThinkingBlock
from rxagent.operators import to_list
from rxagent.tools import Permissions, Toolkit, tool
from tests.model.openai_server import OpenAIServer
from tests.model.responses_server import ResponseStream, encrypted, make_responses_model

ADA = RuntimeContext(user_id="ada", session_id="refunds")

REFUNDS: list[tuple[str, float]] = []


@tool
def refund(order: str, amount: float) -> str:
    """Refund an order.

    Args:
        order: the order id.
        amount: how much to give back.
    """
    REFUNDS.append((order, amount))
    return f"refunded {amount} on {order}"


def result_of(events: Sequence[AgentEvent]) -> AgentResult:
    results = [e for e in events if isinstance(e, AgentResult)]
    assert len(results) == 1
    assert events[-1] is results[0]
    return results[0]


async def test_approved_calls_run_and_the_encrypted_reasoning_goes_back_with_them(
    server: OpenAIServer, tmp_path: Path
) -> None:
    REFUNDS.clear()
    first_arguments = '{"order": "A-1", "amount": 5}'
    asking = (
        ResponseStream("resp_1")
        .reasoning(["**Refunds**", " both orders qualify"], encrypted_content=encrypted("turn-1"))
        .text("Refunding both.")
        .call("r1", "refund", *first_arguments)  # arguments in 1-character deltas
        .call("r2", "refund", '{"order": "B-2", ', '"amount": 7}')
    )
    answering = (
        ResponseStream("resp_2")
        .reasoning(["Done."], encrypted_content=encrypted("turn-2"))
        .text("Both ", "refunded.")
    )
    server.script(asking.completed(40, 30, reasoning=12), answering.completed(90, 8, cached=64))
    store = str(tmp_path / "sessions.db")

    async with make_responses_model(server) as model:
        agent = ReActAgent(
            model,
            Toolkit([refund]),
            system_prompt="You refund orders.",
            permissions=Permissions().ask("refund"),
            store=store,
        )
        events = await to_list(agent.stream_events("Refund A-1 and B-2.", ADA))
        await agent.aclose()

        first = result_of(events)
        assert first.reason == "PERMISSION_ASKING"
        assert [c.id for c in first.pending] == ["r1", "r2"]
        assert REFUNDS == []
        assert (
            "".join(e.text for e in events if isinstance(e, ThinkingDelta))
            == "**Refunds** both orders qualify"
        )
        assert [(e.call_id, e.name) for e in events if isinstance(e, ToolCallStarted)] == [
            ("r1", "refund"),
            ("r2", "refund"),
        ]
        fragments = [
            e.fragment for e in events if isinstance(e, ToolCallArgumentsDelta) and e.call_id == "r1"
        ]
        assert fragments == list(first_arguments)
        [asked] = [
            e.message for e in events if isinstance(e, MessageCompleted) and e.message.role == "assistant"
        ]
        thinking = asked.content[0]
        assert isinstance(thinking, ThinkingBlock)
        assert json.loads(thinking.signature or "") == asking.output[0]

        # Another agent on the same SQLite file: the reasoning comes back from the store, not from memory.
        again = ReActAgent(
            model,
            Toolkit([refund]),
            system_prompt="You refund orders.",
            permissions=Permissions().ask("refund"),
            store=store,
        )
        events = await to_list(
            again.stream_events([ToolDecision("r1", allow=True), ToolDecision("r2", allow=True)], ADA)
        )
        await again.aclose()

    done = result_of(events)
    assert (done.reason, done.text) == ("MODEL_STOP", "Both refunded.")
    assert sorted(REFUNDS) == [("A-1", 5.0), ("B-2", 7.0)]
    assert [e.result.tool_use_id for e in events if isinstance(e, ToolResult)] == ["r1", "r2"]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Both refunded."
    assert (done.usage.input_tokens, done.usage.output_tokens, done.usage.cache_read_tokens) == (90, 8, 64)

    first_body, second_body = (request.body for request in server.requests)
    assert first_body["instructions"] == second_body["instructions"] == "You refund orders."
    assert first_body["input"] == [{"role": "user", "content": "Refund A-1 and B-2."}]
    assert [t["name"] for t in first_body["tools"]] == ["refund"]
    assert (first_body["store"], first_body["include"]) == (False, ["reasoning.encrypted_content"])
    assert second_body["input"] == [
        {"role": "user", "content": "Refund A-1 and B-2."},
        asking.output[0],  # the reasoning item, unmodified: id, summary and encrypted content
        {"role": "assistant", "content": "Refunding both."},
        {
            "type": "function_call",
            "call_id": "r1",
            "name": "refund",
            "arguments": '{"order":"A-1","amount":5}',
        },
        {
            "type": "function_call",
            "call_id": "r2",
            "name": "refund",
            "arguments": '{"order":"B-2","amount":7}',
        },
        {"type": "function_call_output", "call_id": "r1", "output": "refunded 5.0 on A-1"},
        {"type": "function_call_output", "call_id": "r2", "output": "refunded 7.0 on B-2"},
    ]
    assert second_body["input"][1]["encrypted_content"] == encrypted("turn-1")


async def test_a_denied_call_goes_back_as_its_output_and_the_reasoning_of_each_turn_is_kept(
    server: OpenAIServer,
) -> None:
    REFUNDS.clear()
    asking = (
        ResponseStream()
        .reasoning(["r"], encrypted_content=encrypted("a"))
        .call("r1", "refund", '{"order": "A-1", "amount": 500}')
    )
    retrying = (
        ResponseStream()
        .reasoning(["smaller"], encrypted_content=encrypted("b"))
        .call("r2", "refund", '{"order": "A-1", "amount": 50}')
    )
    answering = ResponseStream().text("Refunded 50.")
    server.script(asking.completed(), retrying.completed(), answering.completed())
    async with make_responses_model(server) as model:
        agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
        assert (await agent.call("Refund A-1.", ADA)).reason == "PERMISSION_ASKING"
        second = await agent.call([ToolDecision("r1", allow=False, reason="too much")], ADA)
        assert second.reason == "PERMISSION_ASKING"
        done = await agent.call([ToolDecision("r2", allow=True)], ADA)
        await agent.aclose()
    assert (done.reason, done.text) == ("MODEL_STOP", "Refunded 50.")
    assert REFUNDS == [("A-1", 50.0)]
    last = server.requests[2].body["input"]
    assert [item.get("type") or item["role"] for item in last] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert [item["encrypted_content"] for item in last if item.get("type") == "reasoning"] == [
        encrypted("a"),
        encrypted("b"),
    ]
    denied = last[3]
    assert denied["call_id"] == "r1"
    assert "too much" in denied["output"]
