"""Every outcome is an event: a call's result is told by one ``ToolResult`` event whether a tool ran it or
not — a human's denial, an external result, a reviewer's rejection, a call the user moved on from, a call an
interrupt cut short — always before the tool message that carries it, and (within a batch the run called,
once its tools started) in the order of the calls; a reviewer's rejection is told when the reviewer
decides, before the approved calls run. The events the session's log records hold each result once, so
the feed (and the dashboard and AG-UI built on it) tells each result once.

Bad inputs tried: new text while a call waits (with ``recover_pending``), an interrupt in the middle of a
batch, a reviewer rejecting the first call of a batch and approving the second (and the other way round).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ExternalResult, ReActAgent, RunControl, ToolDecision
from rxagent.agent.loop import RunState
from rxagent.agent.recipes import Review, Verdict, function_reviewer, reviewing
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, MessageCompleted, StepNote, ToolExecutionStarted, ToolResult
from rxagent.operators import to_list
from rxagent.tools import Permissions, Toolkit, tool

from .helpers import check_invariants, run

CTX = RuntimeContext(session_id="outcomes")
ran: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order."""
    ran.append(order)
    return f"refunded {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs it elsewhere."""
    raise AssertionError("external tools do not run here")


@pytest.fixture(autouse=True)
def nothing_ran() -> None:
    ran.clear()


def results_told(events: Sequence[AgentEvent]) -> list[tuple[str, str]]:
    return [(e.result.tool_use_id, e.result.status) for e in events if isinstance(e, ToolResult)]


def told_before_its_message(events: Sequence[AgentEvent]) -> None:
    """Each result a tool message carries was told by a ToolResult event before it, once."""
    told: list[str] = []
    for event in events:
        if isinstance(event, ToolResult):
            assert event.result.tool_use_id not in told, "a result told twice"
            told.append(event.result.tool_use_id)
        elif isinstance(event, MessageCompleted) and event.message.role == "tool":
            for result in event.message.tool_results:
                assert result.tool_use_id in told, f"{result.tool_use_id} only in the tool message"


def call_of(event: AgentEvent) -> tuple[str, str]:
    """An event's type and the id of the call it is about (a reviewer's note carries it in its data)."""
    if isinstance(event, StepNote):
        assert isinstance(event.data, dict)
        return event.type, str(event.data["call_id"])
    if isinstance(event, ToolExecutionStarted):
        return event.type, event.call.id
    assert isinstance(event, ToolResult)
    return event.type, event.result.tool_use_id


def both_calls() -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
        ]
    )


async def test_a_denial_and_an_external_result_are_told_as_tool_results() -> None:
    agent = ReActAgent(
        ScriptedModel([both_calls(), "Not refunded, but signed."]),
        Toolkit([refund, sign]),
        permissions=Permissions().ask("refund"),
        options=AgentOptions(record_events=True),
    )
    first, _ = await run(agent, "refund and sign", CTX)
    assert first.reason == "PERMISSION_ASKING"
    answers = [ToolDecision("r1", False, "not today"), ExternalResult("e1", "signed by Ada")]
    result, events = await run(agent, answers, CTX)
    assert result.text == "Not refunded, but signed."
    assert results_told(events) == [("r1", "denied"), ("e1", "ok")]
    told = {e.result.tool_use_id: e for e in events if isinstance(e, ToolResult)}
    assert told["r1"].result.text == "The user denied this call: not today."
    assert told["e1"].result.text == "signed by Ada"
    assert (told["r1"].duration_s, told["e1"].duration_s) == (0.0, 0.0)  # nothing ran here
    assert not [e for e in events if isinstance(e, ToolExecutionStarted)]
    told_before_its_message(events)
    assert ran == []
    # The log's recorded events hold each result once: what a feed, the dashboard and AG-UI read.
    recorded = [f.data() for f in await agent.sessions.facts(CTX) if f.kind == "event"]
    recorded_results = [e["result"]["tool_use_id"] for e in recorded if e["type"] == "tool_result"]  # type: ignore[index,call-overload]
    assert recorded_results == ["r1", "e1"]


async def test_moving_on_from_a_waiting_call_tells_its_interrupted_result() -> None:
    agent = ReActAgent(
        ScriptedModel([both_calls(), "Fine, something else."]),
        Toolkit([refund, sign]),
        permissions=Permissions().ask("refund"),
        options=AgentOptions(recover_pending=True),
    )
    await run(agent, "refund and sign", CTX)
    result, events = await run(agent, "never mind", CTX)
    assert result.text == "Fine, something else."
    assert results_told(events) == [("r1", "interrupted"), ("e1", "interrupted")]
    told_before_its_message(events)


@pytest.mark.parametrize("rejected", ["r1", "r2"])
async def test_a_reviewers_rejection_is_told_when_the_reviewer_decides(rejected: str) -> None:
    async def reviewer(review: Review, run: RunState) -> dict[str, Verdict]:
        return {c.id: Verdict(approve=c.id != rejected, reason="not this one") for c in review.calls}

    batch = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("refund", {"order": "A-2"}, id="r2"),
        ]
    )
    agent = ReActAgent(
        ScriptedModel([batch, "One refunded."]),
        Toolkit([refund]),
        steps=reviewing(function_reviewer(reviewer)),
    )
    result, events = await run(agent, "refund both", CTX)
    assert result.text == "One refunded."
    approved = "r2" if rejected == "r1" else "r1"
    # The decision first: each call's note, the rejection right after its own; then the approved call runs.
    told = [call_of(e) for e in events if isinstance(e, StepNote | ToolExecutionStarted | ToolResult)]
    notes = [("step_note", "r1"), ("step_note", "r2")]
    notes.insert(notes.index(("step_note", rejected)) + 1, ("tool_result", rejected))
    assert told == [*notes, ("tool_execution_started", approved), ("tool_result", approved)]
    assert results_told(events) == [(rejected, "denied"), (approved, "ok")]
    told_before_its_message(events)
    assert ran == (["A-2"] if rejected == "r1" else ["A-1"])
    # the tool message the model reads holds the results in the order of the calls
    [message] = [e.message for e in events if isinstance(e, MessageCompleted) and e.message.role == "tool"]
    assert [r.tool_use_id for r in message.tool_results] == ["r1", "r2"]


async def test_an_interrupt_mid_batch_tells_the_finished_and_the_cut_short_results() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @tool
    async def slow(order: str) -> str:
        """A refund that takes its time."""
        started.set()
        await release.wait()
        return "never"

    batch = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("slow", {"order": "A-2"}, id="s1"),
        ]
    )
    agent = ReActAgent(ScriptedModel([batch]), Toolkit([refund, slow]))
    control = RunControl()
    events_task = asyncio.ensure_future(to_list(agent.stream_events("refund", CTX, control=control)))
    await asyncio.wait_for(started.wait(), 10)
    assert control.interrupt()
    events = await asyncio.wait_for(events_task, 10)
    check_invariants(events)
    assert results_told(events) == [("r1", "ok"), ("s1", "interrupted")]
    told_before_its_message(events)
    assert ran == ["A-1"]
