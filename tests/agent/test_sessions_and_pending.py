"""Lifecycle: per-session serialisation, saving on every outcome, and runs that wait for people or callers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from rxagent import Msg, ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ExternalResult, PendingToolCallsError, ReActAgent, ToolDecision
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, ToolPermissionAsked, ToolResult, ToolSuspended
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.operators import to_list
from rxagent.session import Batch, Fact, Lease, MemoryStore
from rxagent.tools import Permissions, Toolkit, tool

from .helpers import of_type, run

ADA = RuntimeContext(user_id="ada", session_id="s1")
BOB = RuntimeContext(user_id="bob", session_id="s1")


@tool
def refund(order: str, amount: float) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs the document in the caller's app."""
    raise AssertionError("external tools never run here")


def refund_call(order: str = "A-1", amount: float = 500, id: str = "r1") -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[ScriptedToolCall("refund", {"order": order, "amount": amount}, id=id)]
    )


async def test_runs_on_the_same_session_wait_for_each_other_and_other_sessions_do_not() -> None:
    order: list[str] = []
    gate = asyncio.Event()

    async def respond(request: ChatRequest) -> str:
        text = request.messages[-1].text
        order.append(f"start {text}")
        if text == "first":
            await gate.wait()
        order.append(f"end {text}")
        return f"re: {text}"

    agent = ReActAgent(FunctionModel(respond))
    first = asyncio.ensure_future(agent.call("first", ADA))
    second = asyncio.ensure_future(agent.call("second", ADA))
    other = asyncio.ensure_future(agent.call("other", BOB))
    assert (await other).text == "re: other"
    assert order == ["start first", "start other", "end other"]
    gate.set()
    assert (await first).text == "re: first"
    assert (await second).text == "re: second"
    assert order[3:] == ["end first", "start second", "end second"]


class RecordingStore(MemoryStore):
    """Records how each run's ending reached the log (and can fail every append, like a full disk)."""

    def __init__(self, fail_save: bool = False) -> None:
        super().__init__()
        self.saves: list[str] = []
        self.fail_save = fail_save

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        if self.fail_save:
            raise OSError("disk full")
        seq = await super().append(lease, facts, batch=batch)
        self.saves.extend(f.kind for f in facts if f.kind in ("run_finished", "run_failed", "run_cancelled"))
        return seq


async def test_state_is_saved_on_completion_and_on_failure_and_the_error_is_kept() -> None:
    store = RecordingStore()
    model = ScriptedModel(["ok", RuntimeError("model exploded")])
    agent = ReActAgent(model, store=store)
    await agent.call("one", ADA)
    assert store.saves == ["run_finished"]
    with pytest.raises(RuntimeError, match="model exploded"):
        await agent.call("two", ADA)
    assert store.saves == ["run_finished", "run_failed"]
    state = await agent.sessions.state(ADA)
    assert [m.text for m in state.messages] == ["one", "ok", "two"]


async def test_a_failing_save_is_attached_to_the_original_error_never_replacing_it() -> None:
    agent = ReActAgent(ScriptedModel([RuntimeError("model exploded")]), store=RecordingStore(fail_save=True))
    with pytest.raises(RuntimeError, match="model exploded") as caught:
        await agent.call("x", ADA)
    assert any("disk full" in note for note in getattr(caught.value, "__notes__", []))


async def test_cancel_releases_the_session_saves_what_happened_and_emits_nothing_more(
    clock: VirtualClock,
) -> None:
    store = RecordingStore()
    model = ScriptedModel(
        [ScriptedResponse(text="slow " * 50, chunk_size=1, delay=1), "next run"], clock=clock
    )
    agent = ReActAgent(model, store=store)
    seen: list[AgentEvent] = []
    streaming = asyncio.Event()

    def on_event(event: AgentEvent) -> None:
        seen.append(event)
        if event.type == "text_delta":
            streaming.set()

    subscription = agent.stream_events("go", ADA).subscribe(on_event)
    await clock.run(asyncio.wait_for(streaming.wait(), 2))
    subscription.dispose()
    count = len(seen)
    await clock.advance(300)  # the rest of the answer's delays: nothing arrives
    assert clock.pending() == ()
    assert len(seen) == count
    result = await asyncio.wait_for(agent.call("again", ADA), 2)  # the session lock was released
    assert result.text == "next run"
    # The cancelled run's input is recorded (saved before the next run got the session); its half-streamed
    # answer is not: a cancel keeps facts, not fragments.
    assert store.saves == ["run_cancelled", "run_finished"]
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["go", "again", "next run"]


async def test_permission_asking_then_allow_executes_the_same_call() -> None:
    model = ScriptedModel([refund_call(), "Refunded."])
    agent = ReActAgent(
        model, Toolkit([refund]), permissions=Permissions().ask("refund", reason="money leaves")
    )
    result, events = await run(agent, "refund A-1", ADA)
    assert result.reason == "PERMISSION_ASKING"
    assert [c.id for c in result.pending] == ["r1"]
    (asked,) = of_type(events, ToolPermissionAsked)
    assert asked.reason == "money leaves"  # type: ignore[attr-defined]
    assert len(model.requests) == 1

    resumed, events = await run(agent, ToolDecision("r1", allow=True), ADA)
    assert (resumed.reason, resumed.text) == ("MODEL_STOP", "Refunded.")
    (done,) = of_type(events, ToolResult)
    assert done.result.text == "refunded 500.0 on A-1"  # type: ignore[attr-defined]
    sent = model.requests[1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool"]
    assert sent[2].tool_results[0].tool_use_id == "r1"


async def test_permission_denied_gives_a_denied_result_to_the_model() -> None:
    model = ScriptedModel([refund_call(), "Understood, no refund."])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    await run(agent, "refund", ADA)
    result, _ = await run(agent, ToolDecision("r1", allow=False, reason="too much"), ADA)
    assert result.text == "Understood, no refund."
    denied = model.requests[1].messages[-1].tool_results[0]
    assert (denied.status, denied.text) == ("denied", "The user denied this call: too much.")


async def test_external_tools_suspend_and_resume_with_the_callers_result() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("sign", {"document": "NDA"}, id="e1")]), "Signed."]
    )
    agent = ReActAgent(model, Toolkit([sign]))
    result, events = await run(agent, "get the NDA signed", ADA)
    assert result.reason == "TOOL_SUSPENDED"
    assert of_type(events, ToolSuspended)
    with pytest.raises(PendingToolCallsError, match="is external"):
        await agent.call(ToolDecision("e1", allow=True), ADA)
    resumed, _ = await run(agent, ExternalResult("e1", "signed by Ada at 10:02"), ADA)
    assert resumed.text == "Signed."
    assert model.requests[1].messages[-1].tool_results[0].text == "signed by Ada at 10:02"


async def test_mixed_batch_waits_until_every_call_has_a_result() -> None:
    both = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A", "amount": 5}, id="r1"),
            ScriptedToolCall("sign", {"document": "D"}, id="e1"),
        ]
    )
    model = ScriptedModel([both, "All done."])
    agent = ReActAgent(model, Toolkit([refund, sign]), permissions=Permissions().ask("refund"))
    first, _ = await run(agent, "go", ADA)
    assert first.reason == "PERMISSION_ASKING"
    assert {c.id for c in first.pending} == {"r1", "e1"}
    halfway, _ = await run(agent, ExternalResult("e1", "signed"), ADA)
    assert halfway.reason == "PERMISSION_ASKING"
    assert len(model.requests) == 1
    done, _ = await run(agent, ToolDecision("r1", allow=True), ADA)
    assert done.text == "All done."
    results = model.requests[1].messages[-1].tool_results
    assert [r.tool_use_id for r in results] == ["r1", "e1"]


async def test_plain_text_while_calls_are_pending_is_an_error_unless_recovery_is_on() -> None:
    model = ScriptedModel([refund_call(), "Moving on."])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    await run(agent, "refund", ADA)
    with pytest.raises(PendingToolCallsError, match="waiting for a decision"):
        await agent.call("never mind", ADA)
    with pytest.raises(PendingToolCallsError, match="no pending tool call"):
        await agent.call(ToolDecision("nope", allow=True), ADA)

    recovering = ReActAgent(
        model,
        Toolkit([refund]),
        permissions=Permissions().ask("refund"),
        options=AgentOptions(recover_pending=True),
        store=agent.store,
    )
    result, _ = await run(recovering, "never mind", ADA)
    assert result.text == "Moving on."
    sent = model.requests[-1].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2].tool_results[0].status == "interrupted"  # recovery never runs the asking call


async def test_decisions_without_pending_calls_are_refused() -> None:
    agent = ReActAgent(ScriptedModel([]))
    with pytest.raises(PendingToolCallsError, match="nothing to decide"):
        await agent.call(ToolDecision("x", allow=True), ADA)


async def test_call_observable_is_the_same_pipeline_filtered_to_the_result() -> None:
    agent = ReActAgent(ScriptedModel(["one"]))
    results: list[Any] = await to_list(agent.call_observable("hi", ADA))
    assert [r.type for r in results] == ["agent_result"]
    assert results[0].text == "one"
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["hi", "one"]


async def test_messages_as_input() -> None:
    agent = ReActAgent(ScriptedModel(["seen both"]))
    result = await agent.call([Msg.user("first"), Msg.user("second")], ADA)
    assert result.text == "seen both"


async def test_a_comment_sent_with_a_decision_follows_the_tool_results() -> None:
    model = ScriptedModel([refund_call(), "Refunded, and noted."])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    await run(agent, "refund", ADA)
    result, _ = await run(agent, [ToolDecision("r1", allow=True), Msg.user("and email me")], ADA)
    assert result.text == "Refunded, and noted."
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool", "user"]
    assert model.requests[1].messages[-1].text == "and email me"


async def test_the_state_is_saved_before_the_result_so_a_consumer_may_stop_there() -> None:
    from rxagent.events import AgentResult
    from rxagent.operators import to_async_iterator

    store = RecordingStore()
    agent = ReActAgent(ScriptedModel(["kept"]), store=store)
    async for event in to_async_iterator(agent.stream_events("remember me", ADA)):
        if isinstance(event, AgentResult):
            assert store.saves == ["run_finished"]
            break
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["remember me", "kept"]
    agent.model.extend("next")  # type: ignore[attr-defined]
    assert (await asyncio.wait_for(agent.call("and now?", ADA), 2)).text == "next"  # the lease was released
