"""Run semantics under interrupt, cancel, failure and bad decisions (issue 10), through the public API.

Each behaviour is checked with the scripted model and, where the issue asks for it, through
``stream_events`` with ``OpenAIChatModel`` against the loopback server. Bad inputs tried: two decisions
for one call, an unknown call id, a decision of the wrong kind, a denial carrying arguments, edited
arguments of the wrong type or missing a required field, edited arguments a deny rule refuses, a model
stream cut mid-answer, an interrupt from another thread, before the run and after it, and a consumer too
slow for the total deadline.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import (
    AgentOptions,
    ExternalResult,
    PendingToolCallsError,
    ReActAgent,
    RunControl,
    SessionBusyError,
    ToolDecision,
)
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext, ToolScope
from rxagent.events import AgentEvent, AgentResult, ErrorEvent, MessageCompleted, PhaseChanged, TextDelta
from rxagent.messages import Msg
from rxagent.model import ModelStreamInterrupted, ModelTimeoutError
from rxagent.model.openai import OpenAIChatModel, Timeouts
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.operators import to_async_iterator
from rxagent.state import AgentState
from rxagent.tools import Permissions, Toolkit, tool
from tests.model.openai_server import (
    DONE,
    Cut,
    OpenAIServer,
    Pause,
    Reply,
    Stall,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)
from tests.streams import expect

from .helpers import check_invariants, run

ADA = RuntimeContext(user_id="ada", session_id="s1")
WAIT = 10.0


class Shop:
    """A charge that finishes at once and a mail that takes 5 s, recording what really happened."""

    def __init__(self) -> None:
        self.charges: list[int] = []
        self.charged = asyncio.Event()
        self.mailing = asyncio.Event()

        @tool(concurrency_safe=True)
        async def fast_charge(amount: int) -> str:
            """Charge the card."""
            self.charges.append(amount)
            self.charged.set()
            return f"charged {amount}"

        @tool(concurrency_safe=True)
        async def slow_mail(to: str) -> str:
            """Send the receipt."""
            self.mailing.set()
            await asyncio.sleep(5)
            return f"mailed {to}"

        self.toolkit = Toolkit([fast_charge, slow_mail])

    async def both_under_way(self) -> None:
        await asyncio.wait_for(asyncio.gather(self.charged.wait(), self.mailing.wait()), 5)


def charge_and_mail() -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("fast_charge", {"amount": 30}, id="c1"),
            ScriptedToolCall("slow_mail", {"to": "ada@example.com"}, id="m1"),
        ]
    )


def charge_and_mail_reply() -> Reply:
    return Reply.sse(
        tool_chunk(0, "c1", "fast_charge", '{"amount": 30}'),
        tool_chunk(1, "m1", "slow_mail", '{"to": "ada@example.com"}'),
        finish_chunk("tool_calls"),
        DONE,
    )


def answer_reply(*pieces: str) -> Reply:
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}),
        *(text_chunk(p) for p in pieces),
        finish_chunk(),
        usage_chunk(),
        DONE,
    )


@pytest.fixture
async def model(server: OpenAIServer) -> AsyncIterator[OpenAIChatModel]:
    async with make_model(server) as client:
        yield client


def failure_ending(events: Sequence[AgentEvent]) -> tuple[ErrorEvent, AgentResult]:
    """The closing events of a failed run: its ErrorEvent, then (after the ERROR phase) its result, last."""
    *_, report, phase, result = events
    assert isinstance(report, ErrorEvent)
    assert isinstance(phase, PhaseChanged)
    assert phase.phase == "ERROR"
    assert isinstance(result, AgentResult)
    return report, result


def results_by_call(state: AgentState) -> dict[str, tuple[str, str]]:
    return {r.tool_use_id: (r.status, r.text) for m in state.messages for r in m.tool_results}


# ---- 2. an interrupt (or a cancel) keeps what already happened ------------------------------------------


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
@pytest.mark.parametrize("backend", ["scripted", "openai"])
async def test_an_interrupt_keeps_the_results_of_calls_that_finished(
    parallel: bool, backend: str, server: OpenAIServer, model: OpenAIChatModel
) -> None:
    shop = Shop()
    if backend == "scripted":
        chat: Any = ScriptedModel([charge_and_mail()])
    else:
        server.script(charge_and_mail_reply())
        chat = model
    agent = ReActAgent(chat, shop.toolkit, options=AgentOptions(parallel_tools=parallel))
    control = RunControl()

    async def interrupt_when_under_way() -> None:
        await shop.both_under_way()
        assert control.interrupt()

    helper = asyncio.ensure_future(interrupt_when_under_way())
    result, events = await run(agent, "charge and mail", ADA, control)
    await helper
    assert result.reason == "INTERRUPTED"
    assert shop.charges == [30]
    expected = {
        "c1": ("ok", "charged 30"),
        "m1": ("interrupted", "Interrupted by the user before it finished."),
    }
    assert results_by_call(await agent.sessions.state(ADA)) == expected
    tool_messages = [
        e.message for e in events if isinstance(e, MessageCompleted) and e.message.role == "tool"
    ]
    assert [(r.tool_use_id, r.status) for r in tool_messages[-1].tool_results] == [
        ("c1", "ok"),
        ("m1", "interrupted"),
    ]


@pytest.mark.parametrize("parallel", [True, False], ids=["parallel", "sequential"])
async def test_a_cancel_saves_the_finished_results_and_marks_only_unfinished_calls(parallel: bool) -> None:
    shop = Shop()
    agent = ReActAgent(
        ScriptedModel([charge_and_mail(), "Done."]),
        shop.toolkit,
        options=AgentOptions(parallel_tools=parallel),
    )
    seen = expect(agent.stream_events("charge and mail", ADA))
    await shop.both_under_way()
    seen.dispose()
    # The next run on the session waits for the cancelled run's save, then sees what happened.
    await asyncio.wait_for(agent.call("and now?", ADA), 5)
    assert seen.outcome is None  # a cancel emits nothing more, not even a terminal signal
    state = await agent.sessions.state(ADA)
    assert results_by_call(state) == {
        "c1": ("ok", "charged 30"),
        "m1": ("interrupted", "The run was cancelled before this call finished."),
    }
    assert shop.charges == [30]
    assert [m.role for m in state.messages] == ["user", "assistant", "tool", "user", "assistant"]


# ---- 3. a refused input changes nothing ----------------------------------------------------------------


@tool
def refund(order: str, amount: float) -> str:
    """Refund an order."""
    REFUNDS.append((order, amount))
    return f"refunded {amount} on {order}"


REFUNDS: list[tuple[str, float]] = []


@tool(external=True)
def sign(document: str) -> str:
    """A human signs the document in the caller's app."""
    raise AssertionError("external tools never run here")


def two_refunds() -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1", "amount": 5}, id="r1"),
            ScriptedToolCall("refund", {"order": "B-2", "amount": 7}, id="r2"),
        ]
    )


async def asking_agent(*script: ScriptedResponse | str, permissions: Permissions | None = None) -> ReActAgent:
    REFUNDS.clear()
    agent = ReActAgent(
        ScriptedModel(list(script)),
        Toolkit([refund, sign]),
        permissions=permissions or Permissions().ask("refund", reason="money leaves"),
    )
    first = await agent.call("refund both", ADA)
    assert first.reason == "PERMISSION_ASKING"
    return agent


@pytest.mark.parametrize(
    ("decisions", "why"),
    [
        ([ToolDecision("r1", allow=False), ToolDecision("r1", allow=True)], "two answers for tool call 'r1'"),
        ([ToolDecision("r1", allow=True), ToolDecision("nope", allow=True)], "no pending tool call with id"),
        ([ToolDecision("r1", allow=True), ExternalResult("r2", "done")], "asks for permission, not a result"),
        ([ToolDecision("r1", allow=False, arguments={"order": "A-1", "amount": 1})], "not a denial"),
        ([ToolDecision("r1", allow=True, arguments={"order": "A-1", "amount": "lots"})], "refused"),
        ([ToolDecision("r1", allow=True, arguments={"amount": 1})], "refused"),
    ],
    ids=["duplicate", "unknown", "wrong-kind", "denial-with-arguments", "wrong-type", "missing-field"],
)
async def test_a_refused_input_changes_nothing(decisions: list[Any], why: str) -> None:
    agent = await asking_agent(two_refunds(), "Both refunded.")
    before = (await agent.sessions.state(ADA)).model_dump_json()
    with pytest.raises(PendingToolCallsError, match=why):
        await agent.call(decisions, ADA)
    assert (await agent.sessions.state(ADA)).model_dump_json() == before
    assert REFUNDS == []
    # A valid answer afterwards runs each call once and sends exactly one result per id.
    done = await agent.call([ToolDecision("r1", allow=True), ToolDecision("r2", allow=True)], ADA)
    assert (done.reason, done.text) == ("MODEL_STOP", "Both refunded.")
    assert sorted(REFUNDS) == [("A-1", 5.0), ("B-2", 7.0)]
    state = await agent.sessions.state(ADA)
    ids = [r.tool_use_id for m in state.messages for r in m.tool_results]
    assert sorted(ids) == ["r1", "r2"]


async def test_a_refused_input_ends_the_event_stream_with_an_error_result_then_the_error() -> None:
    agent = await asking_agent(two_refunds())
    seen = await expect(agent.stream_events([ToolDecision("r1", allow=True)] * 2, ADA))
    assert isinstance(seen.error, PendingToolCallsError)
    error_event, result = failure_ending(seen.items)
    assert error_event.error_type == "PendingToolCallsError"
    assert isinstance(result, AgentResult)
    assert result.reason == "ERROR"
    assert [c.id for c in result.pending] == ["r1", "r2"]  # still waiting: nothing was decided


# ---- 7. approvals may edit the arguments ----------------------------------------------------------------


async def test_an_approval_with_edited_arguments_runs_and_records_the_edited_call() -> None:
    agent = await asking_agent(two_refunds(), "Refunded.")
    done = await agent.call(
        [
            ToolDecision("r1", allow=True, arguments={"order": "A-1", "amount": 2.5}),
            ToolDecision("r2", allow=False, reason="not this one"),
        ],
        ADA,
    )
    assert done.reason == "MODEL_STOP"
    assert REFUNDS == [("A-1", 2.5)]
    state = await agent.sessions.state(ADA)
    assistant = next(m for m in state.messages if m.role == "assistant" and m.tool_calls)
    first = assistant.tool_calls[0]
    assert (first.id, first.input) == ("r1", {"order": "A-1", "amount": 2.5})
    assert assistant.metadata["rxagent_edited_calls"] == {"r1": '{"order": "A-1", "amount": 5}'}
    assert results_by_call(state) == {
        "r1": ("ok", "refunded 2.5 on A-1"),
        "r2": ("denied", "The user denied this call: not this one."),
    }


async def test_edited_arguments_pass_the_permission_gate_again() -> None:
    gate = (
        Permissions()
        .deny("refund", when=lambda args, _ctx: float(args.get("amount", 0)) > 100, reason="over the limit")
        .ask("refund", reason="money leaves")
    )
    agent = await asking_agent(two_refunds(), "Tried.", permissions=gate)
    await agent.call(
        [
            ToolDecision("r1", allow=True, arguments={"order": "A-1", "amount": 5000}),
            ToolDecision("r2", allow=True),
        ],
        ADA,
    )
    assert REFUNDS == [("B-2", 7.0)]
    status, text = results_by_call(await agent.sessions.state(ADA))["r1"]
    assert status == "denied"
    assert "over the limit" in text


# ---- 4. interrupt from any thread ---------------------------------------------------------------------


async def test_interrupt_from_another_thread_ends_the_run_interrupted(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    server.script(Reply.sse(chunk({"role": "assistant", "content": ""}), text_chunk("Thinking"), Stall()))
    agent = ReActAgent(model)
    control = RunControl()
    answers: list[bool] = []
    threads: list[threading.Thread] = []

    def on_event(event: AgentEvent) -> None:
        if isinstance(event, TextDelta):  # from a UI thread, while the stream is stalled
            threads.append(threading.Thread(target=lambda: answers.append(control.interrupt())))
            threads[-1].start()

    events: list[AgentEvent] = []
    async with asyncio.timeout(5):
        async for event in to_async_iterator(agent.stream_events("hi", ADA, control=control)):
            events.append(event)
            on_event(event)
    result = check_invariants(events)
    assert (result.reason, result.text) == ("INTERRUPTED", "Thinking")
    threads[0].join(5)
    assert answers == [True]
    await asyncio.wait_for(server.disconnected.wait(), 5)  # the stalled response was closed


async def test_an_interrupt_before_the_run_or_after_it_is_a_no_op() -> None:
    agent = ReActAgent(ScriptedModel(["one", "two"]))
    control = RunControl()
    assert control.interrupt() is False
    assert control.status == "idle"
    first = await agent.call("a", ADA, control=control)
    assert first.reason == "MODEL_STOP"
    assert control.interrupt() is False
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(control.interrupt()))
    thread.start()
    thread.join(5)
    assert result == [False]
    second = await agent.call("b", ADA, control=control)  # the control is reusable
    assert (second.reason, second.text) == ("MODEL_STOP", "two")


async def test_one_control_cannot_drive_two_runs_at_once() -> None:
    gate = asyncio.Event()

    async def slow(_: Any) -> str:
        await gate.wait()
        return "done"

    agent = ReActAgent(FunctionModel(slow))
    control = RunControl()
    first = asyncio.ensure_future(agent.call("a", ADA, control=control))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="already bound"):
        await agent.call("b", RuntimeContext(session_id="other"), control=control)
    gate.set()
    assert (await first).text == "done"


# ---- 5. every run ends with exactly one AgentResult, failed runs too -------------------------------------


async def test_a_model_error_mid_stream_ends_with_an_error_event_and_an_error_result(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    server.script(Reply.sse(chunk({"role": "assistant", "content": ""}), text_chunk("Half an ans"), Cut()))
    agent = ReActAgent(model)
    seen = await asyncio.wait_for(expect(agent.stream_events("hi", ADA)), 5)
    assert isinstance(seen.error, ModelStreamInterrupted)
    error_event, result = failure_ending(seen.items)
    assert error_event.error_type == "ModelStreamInterrupted"
    assert "sk-" not in error_event.message
    assert isinstance(result, AgentResult)
    assert (result.reason, result.message) == ("ERROR", None)
    assert "ModelStreamInterrupted" in (result.detail or "")
    assert sum(isinstance(e, AgentResult) for e in seen.items) == 1
    assert [e.seq for e in seen.items] == list(range(len(seen.items)))
    # The run was saved before the result: the input is kept, the half answer is not.
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["hi"]


async def test_call_still_raises_the_original_error(server: OpenAIServer, model: OpenAIChatModel) -> None:
    server.script(Reply.sse(text_chunk("x"), Cut()))
    with pytest.raises(ModelStreamInterrupted):
        await asyncio.wait_for(ReActAgent(model).call("hi", ADA), 5)


async def test_a_consumer_that_stops_at_the_error_result_loses_nothing() -> None:
    agent = ReActAgent(ScriptedModel([RuntimeError("model exploded"), "fine"]))
    seen: list[AgentEvent] = []
    async for event in to_async_iterator(agent.stream_events("one", ADA)):
        seen.append(event)
        if isinstance(event, AgentResult):
            break
    assert isinstance(seen[-1], AgentResult)
    assert seen[-1].reason == "ERROR"
    assert (await agent.call("two", ADA)).text == "fine"
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["one", "two", "fine"]


# ---- 8. a per-run tool view through the runtime context ----------------------------------------------------


async def test_each_caller_gets_its_own_tools_and_preset_values_on_one_agent() -> None:
    seen: list[tuple[str, str]] = []

    @tool
    def lookup(query: str, tenant: str) -> str:
        """Look something up for a tenant."""
        seen.append((tenant, query))
        return f"{tenant}: {query}"

    @tool
    def admin_reset() -> str:
        """Reset everything."""
        raise AssertionError("never allowed here")

    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"query": "q", "tenant": "evil"})]),
            "ok",
            ScriptedResponse(tool_calls=[ScriptedToolCall("admin_reset", {})]),
            "refused",
        ]
    )
    agent = ReActAgent(model, Toolkit([lookup, admin_reset]))
    acme = RuntimeContext(
        user_id="u1",
        session_id="a",
        tools=ToolScope(allow={"lookup"}, presets={"lookup": {"tenant": "acme"}}),
    )
    await agent.call("find q", acme)
    assert seen == [("acme", "q")]  # the preset won over what the model sent
    [schema] = model.requests[0].tools
    assert schema.name == "lookup"
    assert "tenant" not in str(schema.parameters)  # hidden from the model
    result = await agent.call("reset", acme)
    assert result.text == "refused"
    state = await agent.sessions.state(acme)
    refused = [r for m in state.messages for r in m.tool_results][-1]
    assert (refused.name, refused.status) == ("admin_reset", "error")
    assert "admin_reset" in refused.text
    assert [s.name for s in model.requests[2].tools] == ["lookup"]


# ---- 9. waiting for a busy session has a limit, and the queue is visible ------------------------------


async def test_the_queue_position_moves_as_runs_ahead_finish(clock: VirtualClock) -> None:
    gates = {"first": asyncio.Event(), "second": asyncio.Event()}
    started = {text: asyncio.Event() for text in ("first", "second", "third")}

    async def respond(request: Any) -> str:
        text = request.messages[-1].text
        started[text].set()
        if text in gates:
            await gates[text].wait()
        return f"re: {text}"

    agent = ReActAgent(FunctionModel(respond), clock=clock)
    controls = [RunControl() for _ in range(3)]
    runs = [
        asyncio.ensure_future(agent.call(text, ADA, control=control))
        for text, control in zip(["first", "second", "third"], controls, strict=True)
    ]
    await asyncio.wait_for(started["first"].wait(), 5)
    await clock.advance(0)  # a run has a place once it joined the session's line: a call to the store
    assert [c.position for c in controls] == [0, 1, 2]
    assert [c.status for c in controls] == ["running", "queued", "queued"]
    gates["first"].set()
    assert (await asyncio.wait_for(runs[0], 5)).text == "re: first"
    await asyncio.wait_for(started["second"].wait(), 5)
    await clock.advance(0)
    assert [c.position for c in controls] == [None, 0, 1]
    gates["second"].set()
    texts = [r.text for r in await asyncio.wait_for(asyncio.gather(*runs[1:]), 5)]
    assert texts == ["re: second", "re: third"]
    assert [c.status for c in controls] == ["idle"] * 3


# ---- 10. a total timeout fires even while a slow consumer pauses the stream ----------------------------


def drip_reply(deltas: int = 40) -> Reply:
    """A streamed answer whose deltas arrive every 0.2 s (on the server's clock)."""
    frames: list[bytes | Pause] = [chunk({"role": "assistant", "content": ""})]
    for n in range(deltas):
        frames += [text_chunk(f"{n} "), Pause(0.2)]
    return Reply.sse(*frames, finish_chunk(), DONE)


async def test_the_total_deadline_ends_a_stream_paused_by_a_slow_consumer(clock: VirtualClock) -> None:
    # The case, on virtual time: max_buffer=2, a consumer that spends 1.2 s on an item, a 1 s
    # total, a server that drips a delta every 0.2 s. Before the fix the call neither failed nor ended.
    items = 0

    async def consume(model: OpenAIChatModel) -> None:
        nonlocal items
        async for _ in to_async_iterator(model.stream(ChatRequest((Msg.user("count"),))), max_buffer=2):
            items += 1
            await clock.sleep(1.2)  # the consumer is slower than the whole deadline

    async with OpenAIServer(clock) as server:
        server.script(drip_reply())
        async with make_model(server, timeouts=Timeouts(total=1.0), clock=clock) as model:
            with pytest.raises(ModelTimeoutError, match="the whole model call"):
                await clock.run(consume(model))
    assert 1 <= items < 40
    assert clock.now() < 10  # it ended on its deadline, not when the answer would have


async def test_an_agent_stream_paused_by_a_slow_consumer_ends_with_the_timeout(clock: VirtualClock) -> None:
    events: list[AgentEvent] = []

    async def consume(agent: ReActAgent) -> None:
        async for event in to_async_iterator(agent.stream_events("count", ADA), max_buffer=2):
            events.append(event)
            if isinstance(event, TextDelta):
                await clock.sleep(1.2)

    async with OpenAIServer(clock) as server:
        server.script(drip_reply())
        async with make_model(server, timeouts=Timeouts(total=1.0), clock=clock) as model:
            with pytest.raises(ModelTimeoutError):
                await clock.run(consume(ReActAgent(model, clock=clock)))
    _, result = failure_ending(events)
    assert result.reason == "ERROR"
    assert clock.now() < 10


# ---- 9. the wait for a busy session has a limit ------------------------------------------------------


async def test_a_run_waits_for_a_busy_session_no_longer_than_asked(clock: VirtualClock) -> None:
    release = asyncio.Event()

    async def hold(request: ChatRequest) -> str:
        await release.wait()
        return "done"

    agent = ReActAgent(FunctionModel(hold), options=AgentOptions(session_wait=5.0), clock=clock)
    first = asyncio.ensure_future(agent.call("first", ADA))
    waiting = RunControl()
    second = asyncio.ensure_future(agent.call("second", ADA, control=waiting))
    await clock.advance(4.9)
    assert (waiting.status, waiting.position) == ("queued", 1)
    assert not second.done()
    await clock.advance(0.2)
    with pytest.raises(SessionBusyError, match=r"session 's1' .*stayed busy for 5 s"):
        await asyncio.wait_for(second, WAIT)
    assert waiting.status == "idle"  # it left the line
    release.set()
    assert (await asyncio.wait_for(first, WAIT)).text == "done"
    release.clear()
    third = asyncio.ensure_future(agent.call("third", ADA))
    await clock.advance(100)  # no limit hit while nobody else holds the session
    release.set()
    assert (await asyncio.wait_for(third, WAIT)).text == "done"


# ---- 11. an empty `data:` line is not an error -----------------------------------------------------------


async def test_an_event_with_empty_data_is_skipped(server: OpenAIServer, model: OpenAIChatModel) -> None:
    server.script(
        Reply.sse(text_chunk("Hel"), b"data:\n\n", b"data: \n\n", text_chunk("lo"), finish_chunk(), DONE)
    )
    result = await ReActAgent(model).call("hi", ADA)
    assert result.text == "Hello"


# ---- 12. the result is the newest event -----------------------------------------------------------------


async def test_the_result_is_stamped_after_every_event_before_it() -> None:
    agent = ReActAgent(ScriptedModel(["fine"]))
    _, events = await run(agent, "hi", ADA)
    times: Sequence[float] = [e.time for e in events]
    assert list(times) == sorted(times)


async def test_a_refused_input_changes_nothing_through_the_openai_client(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    REFUNDS.clear()
    server.script(
        Reply.sse(
            tool_chunk(0, "r1", "refund", '{"order": "A-1", "amount": 5}'),
            tool_chunk(1, "r2", "refund", '{"order": "B-2", "amount": 7}'),
            finish_chunk("tool_calls"),
            DONE,
        ),
        answer_reply("Both refunded."),
    )
    agent = ReActAgent(model, Toolkit([refund, sign]), permissions=Permissions().ask("refund"))
    first = await agent.call("refund both", ADA)
    assert first.reason == "PERMISSION_ASKING"
    before = (await agent.sessions.state(ADA)).model_dump_json()
    seen = await expect(
        agent.stream_events([ToolDecision("r1", allow=False), ToolDecision("r1", allow=True)], ADA)
    )
    assert isinstance(seen.error, PendingToolCallsError)
    _, result = failure_ending(seen.items)
    assert [c.id for c in result.pending] == ["r1", "r2"]
    assert (await agent.sessions.state(ADA)).model_dump_json() == before
    assert len(server.requests) == 1  # the refused input reached no model
    done = await agent.call([ToolDecision("r1", allow=True), ToolDecision("r2", allow=True)], ADA)
    assert done.text == "Both refunded."
    assert sorted(REFUNDS) == [("A-1", 5.0), ("B-2", 7.0)]
    sent = server.requests[1].body["messages"]
    tool_ids = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert sorted(tool_ids) == ["r1", "r2"]  # one result per id
