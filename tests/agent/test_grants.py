""" "Always allow this tool for this session": a permission rule a person adds with an approval, kept in
the session's log, that answers the tool's later asks in that session only (and never overrides a deny).

Bad inputs tried: ``always`` with a denial (refused, nothing changes), a deny rule on a tool the session
allows (it still refuses), extras a middleware wrote wrong (skipped).
"""

from __future__ import annotations

import json

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import PendingToolCallsError, ReActAgent, ToolDecision
from rxagent.agent.grants import SESSION_RULES, allowed_tools
from rxagent.context import RuntimeContext
from rxagent.state import AgentState
from rxagent.tools import Permissions, Toolkit, tool

S1 = RuntimeContext(session_id="s1")
S2 = RuntimeContext(session_id="s2")

ran: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order."""
    ran.append(order)
    return f"refunded {order}"


def asks(*orders: str) -> ScriptedResponse:
    calls = [ScriptedToolCall("refund", {"order": o}, id=f"r-{o}") for o in orders]
    return ScriptedResponse(tool_calls=calls)


@pytest.fixture(autouse=True)
def clean() -> None:
    ran.clear()


async def facts_of(agent: ReActAgent, ctx: RuntimeContext) -> list[tuple[str, dict[str, object]]]:
    return [(f.kind, json.loads(f.payload)) for f in await agent.sessions.facts(ctx)]


async def test_always_allow_runs_the_tool_s_next_call_without_asking_and_the_rule_is_in_the_log() -> None:
    model = ScriptedModel([asks("A"), "Refunded A.", asks("B"), "Refunded B.", asks("C")])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    first = await agent.call("refund A", S1)
    assert first.reason == "PERMISSION_ASKING"
    answered = await agent.call(ToolDecision("r-A", allow=True, reason="fine by me", always=True), S1)
    assert (answered.reason, answered.text, ran) == ("MODEL_STOP", "Refunded A.", ["A"])

    second = await agent.call("refund B", S1)  # no question this time
    assert (second.reason, second.text, ran) == ("MODEL_STOP", "Refunded B.", ["A", "B"])

    facts = await facts_of(agent, S1)
    (decision,) = [d for k, d in facts if k == "decision"]
    assert decision == {
        "call_id": "r-A",
        "kind": "approval",
        "reason": "fine by me",
        "arguments": None,
        "always": True,
    }
    rules = [d["extras"] for k, d in facts if k == "extras"]
    assert rules[-1] == {
        SESSION_RULES: [{"decision": "allow", "tool": "refund", "call_id": "r-A", "reason": "fine by me"}]
    }
    state = await agent.sessions.state(S1)
    assert allowed_tools(state) == {"refund"}

    # Another session is not concerned: it asks as before.
    other = await agent.call("refund C", S2)
    assert other.reason == "PERMISSION_ASKING"
    assert ran == ["A", "B"]
    await agent.aclose()


async def test_calls_of_the_tool_waiting_in_the_same_batch_are_approved_by_the_new_rule() -> None:
    model = ScriptedModel([asks("A", "B", "C"), "All three."])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    assert (await agent.call("refund three", S1)).reason == "PERMISSION_ASKING"
    result = await agent.call(ToolDecision("r-B", allow=True, always=True), S1)
    assert (result.reason, result.text) == ("MODEL_STOP", "All three.")
    assert sorted(ran) == ["A", "B", "C"]
    decisions = [d for k, d in await facts_of(agent, S1) if k == "decision"]
    assert [(d["call_id"], d.get("by"), d.get("always")) for d in decisions] == [
        ("r-B", None, True),
        ("r-A", "rule", None),
        ("r-C", "rule", None),
    ]
    assert all(d["kind"] == "approval" for d in decisions)
    assert "a rule of this session allows refund" in str(decisions[1]["reason"])
    await agent.aclose()


async def test_a_deny_rule_still_refuses_a_tool_the_session_allows() -> None:
    model = ScriptedModel([asks("A"), "ok", asks("B"), "Could not."])
    gate = Permissions().ask("refund").deny("refund", order="B", reason="B is frozen")
    agent = ReActAgent(model, Toolkit([refund]), permissions=gate)
    await agent.call("refund A", S1)
    await agent.call(ToolDecision("r-A", allow=True, always=True), S1)
    result = await agent.call("refund B", S1)
    assert result.text == "Could not."
    assert ran == ["A"]
    state = await agent.sessions.state(S1)
    (denied,) = [r for m in state.messages for r in m.tool_results if r.tool_use_id == "r-B"]
    assert (denied.status, "B is frozen" in denied.text) == ("denied", True)
    await agent.aclose()


async def test_always_with_a_denial_is_refused_and_changes_nothing() -> None:
    agent = ReActAgent(ScriptedModel([asks("A")]), Toolkit([refund]), permissions=Permissions().ask("refund"))
    await agent.call("refund A", S1)
    before = await facts_of(agent, S1)
    with pytest.raises(PendingToolCallsError, match="'always' comes with an approval"):
        await agent.call(ToolDecision("r-A", allow=False, always=True), S1)
    after = await facts_of(agent, S1)
    assert [k for k, _ in after if k in ("decision", "extras", "tool_result")] == []
    assert len(after) >= len(before)  # the refused run is recorded as failed; nothing was decided
    state = await agent.sessions.state(S1)
    assert [p.call.id for p in state.pending] == ["r-A"]
    assert ran == []
    await agent.aclose()


def test_malformed_rules_in_the_extras_are_skipped() -> None:
    state = AgentState(
        extras={
            SESSION_RULES: [
                {"decision": "allow", "tool": "refund"},
                {"decision": "deny", "tool": "delete"},
                {"decision": "allow", "tool": 3},
                "refund everything",
            ]
        }
    )
    assert allowed_tools(state) == {"refund"}
    assert allowed_tools(AgentState(extras={SESSION_RULES: "all"})) == frozenset()
