"""AG-UI on a real server on 127.0.0.1: every event parses back into ``ag_ui.core`` models, AG-UI's ordering
rules hold, and interrupts round-trip through ``resume``.

Bad inputs tried: a body that is not JSON, one that is not a ``RunAgentInput`` (no ``threadId``, wrong
types), an invalid thread id, an input with nothing new to run (its user message already in the thread, no
resume), new text while interrupts are open, a resume payload of the wrong shape for an approval and for an
external result, a resume entry naming no open interrupt, a non-text content part, the same resume sent
twice.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    Event,
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StepStartedEvent,
    ToolCallResultEvent,
)
from pydantic import TypeAdapter

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.agent.grants import SESSION_RULES
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import WAIT, Live, ValveModel, is_result_of, serving

EVENTS: TypeAdapter[Event] = TypeAdapter(Event)

ran: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    ran.append(f"lookup {city}")
    return f"{city}: big"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    ran.append(f"refund {order}")
    return f"refunded {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs it elsewhere."""
    raise AssertionError("external tools do not run here")


@pytest.fixture(autouse=True)
def nothing_ran() -> None:
    ran.clear()


def run_input(thread: str, run: str, *messages: tuple[str, str], resume: Any = None) -> dict[str, Any]:
    """A ``RunAgentInput`` as an AG-UI client sends it (camelCase), with ``(id, text)`` user messages."""
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": i, "role": "user", "content": text} for i, text in messages],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    if resume is not None:
        body["resume"] = resume
    return body


async def agui(live: Live, body: dict[str, Any]) -> list[BaseEvent]:
    """POST /ag-ui and read the whole stream, each event parsed back with ag-ui-protocol's models."""
    async with live.sse("/ag-ui", json=body) as stream:
        raw = await stream.rest()
    events = [EVENTS.validate_json(e.data) for e in raw]
    assert all(e.event == "message" and e.id is None for e in raw)  # EventEncoder's plain data events
    check_ordering(events)
    return events


def check_ordering(events: list[BaseEvent]) -> None:
    """AG-UI's rules for one run's stream (lifecycle, streaming pattern, steps)."""
    assert events, "an empty stream"
    first, last = events[0], events[-1]
    terminal = [e for e in events if e.type in (EventType.RUN_FINISHED, EventType.RUN_ERROR)]
    assert len(terminal) == 1, "exactly one RUN_FINISHED or RUN_ERROR"
    assert terminal[0] is last, "RUN_FINISHED or RUN_ERROR comes last"
    if first.type == EventType.RUN_ERROR:
        assert len(events) == 1  # a run that failed before it began
        return
    assert first.type == EventType.RUN_STARTED
    assert sum(e.type == EventType.RUN_STARTED for e in events) == 1
    open_: dict[str, set[str]] = {
        "text": set(),
        "reasoning": set(),
        "span": set(),
        "call": set(),
        "step": set(),
    }
    closed: dict[str, set[str]] = {kind: set() for kind in open_}
    triads = {
        EventType.TEXT_MESSAGE_START: ("text", "open", "message_id"),
        EventType.TEXT_MESSAGE_CONTENT: ("text", "inside", "message_id"),
        EventType.TEXT_MESSAGE_END: ("text", "close", "message_id"),
        EventType.REASONING_MESSAGE_START: ("reasoning", "open", "message_id"),
        EventType.REASONING_MESSAGE_CONTENT: ("reasoning", "inside", "message_id"),
        EventType.REASONING_MESSAGE_END: ("reasoning", "close", "message_id"),
        EventType.REASONING_START: ("span", "open", "message_id"),
        EventType.REASONING_END: ("span", "close", "message_id"),
        EventType.TOOL_CALL_START: ("call", "open", "tool_call_id"),
        EventType.TOOL_CALL_ARGS: ("call", "inside", "tool_call_id"),
        EventType.TOOL_CALL_END: ("call", "close", "tool_call_id"),
        EventType.STEP_STARTED: ("step", "open", "step_name"),
        EventType.STEP_FINISHED: ("step", "close", "step_name"),
    }
    for event in events[1:-1]:
        rule = triads.get(event.type)
        if rule is None:
            if (
                isinstance(event, ToolCallResultEvent)
                and event.tool_call_id in closed["call"] | open_["call"]
            ):
                assert event.tool_call_id in closed["call"], "a result after its call's end"
            continue
        kind, action, key = rule
        name = getattr(event, key)
        if action == "open":
            assert name not in open_[kind], f"{event.type} reopens {name!r} while it is open"
            open_[kind].add(name)
        elif action == "inside":
            assert name in open_[kind], f"{event.type} for {name!r}, which is not open"
        else:
            assert name in open_[kind], f"{event.type} closes {name!r}, which is not open"
            open_[kind].discard(name)
            closed[kind].add(name)
    if last.type == EventType.RUN_FINISHED:
        assert not any(open_.values()), f"still open at RUN_FINISHED: {open_}"


def of_type(events: list[BaseEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def run_states(events: list[BaseEvent]) -> list[dict[str, Any]]:
    """The values of the ``rxagent.run_state`` events (the run's pending calls and usage)."""
    return [e.value for e in of_type(events, CustomEvent) if e.name == "rxagent.run_state"]


# ---- a whole run -------------------------------------------------------------------------------------------


async def test_a_run_with_reasoning_text_and_a_tool_call_streams_valid_ordered_agui_events() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                thinking="I should look it up.",
                text="Let me check.",
                tool_calls=[ScriptedToolCall("lookup", {"city": "Oslo"}, id="c1")],
                chunk_size=3,
            ),
            ScriptedResponse(thinking="Now I know.", text="Oslo is big.", chunk_size=3),
        ]
    )
    async with serving(ReActAgent(model, Toolkit([lookup]))) as live:
        events = await agui(live, run_input("t1", "run-1", ("m1", "Tell me about Oslo.")))
    types = [e.type for e in events]
    for expected in (
        EventType.RUN_STARTED,
        EventType.STATE_SNAPSHOT,
        EventType.STEP_STARTED,
        EventType.REASONING_START,
        EventType.REASONING_MESSAGE_CONTENT,
        EventType.TEXT_MESSAGE_START,
        EventType.TEXT_MESSAGE_CONTENT,
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
        EventType.TOOL_CALL_RESULT,
        EventType.STEP_FINISHED,
        EventType.RUN_FINISHED,
    ):
        assert expected in types, expected
    started = events[0]
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id, started.protocol_version) == ("t1", "run-1", "1.0")
    # the loop's path as steps (each finished as the next starts), the model calls and tools inside them
    steps = [e.step_name for e in of_type(events, StepStartedEvent)]
    assert steps == [
        "Start",
        "Reason",
        "model call 1",
        "Act",
        "tool lookup c1",
        "Reason",
        "model call 2",
        "Finish",
    ]
    texts: dict[str, str] = {}
    for e in events:
        if e.type == EventType.TEXT_MESSAGE_CONTENT:
            texts[e.message_id] = texts.get(e.message_id, "") + e.delta  # type: ignore[attr-defined]
    assert list(texts.values()) == ["Let me check.", "Oslo is big."]
    reasoning = "".join(e.delta for e in events if e.type == EventType.REASONING_MESSAGE_CONTENT)  # type: ignore[attr-defined]
    assert reasoning == "I should look it up.Now I know."
    arguments = "".join(e.delta for e in events if e.type == EventType.TOOL_CALL_ARGS)  # type: ignore[attr-defined]
    assert json.loads(arguments) == {"city": "Oslo"}
    (result,) = of_type(events, ToolCallResultEvent)
    assert (result.tool_call_id, result.content) == ("c1", "Oslo: big")
    finished = events[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.outcome is not None
    assert finished.outcome.type == "success"
    assert finished.result == {"reason": "MODEL_STOP", "text": "Oslo is big.", "iterations": 2}
    assert finished.usage is not None
    assert finished.usage[0].model == model.model_name
    final_state = run_states(events)[-1]  # the run's own bookkeeping, apart from the shared state
    assert final_state["usage"]["model_calls"] == 2
    assert final_state["pending"] == []
    assert ran == ["lookup Oslo"]


async def test_the_same_input_twice_runs_once() -> None:
    async with serving(ReActAgent(ScriptedModel(["Hello.", "Again."]))) as live:
        await agui(live, run_input("t", "r1", ("m1", "hi")))
        status, error = await live.post("/ag-ui", run_input("t", "r2", ("m1", "hi")))
        assert status == 409
        assert "nothing to run" in error["error"]
        events = await agui(live, run_input("t", "r3", ("m1", "hi"), ("m2", "and again?")))
        assert isinstance(events[-1], RunFinishedEvent)
        assert events[-1].result["text"] == "Again."  # type: ignore[index]
        turns = (await live.get("/api/sessions/t/turns"))[1]["turns"]
        assert [t["input"] for t in turns] == [["hi"], ["and again?"]]


# ---- interrupts --------------------------------------------------------------------------------------------


async def test_an_approval_round_trip_through_interrupt_and_resume_runs_the_tool_once() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")]), "Refunded."]
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund", reason="money"))
    async with serving(agent) as live:
        first = await agui(live, run_input("t", "run-1", ("m1", "Refund order A-1.")))
        finished = first[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert finished.outcome is not None
        assert finished.outcome.type == "interrupt"
        (interrupt,) = finished.outcome.interrupts
        assert (interrupt.id, interrupt.reason, interrupt.tool_call_id) == ("r1", "tool_approval", "r1")
        assert interrupt.response_schema is not None
        assert "allow" in interrupt.response_schema["properties"]
        assert run_states(first)[-1]["pending"][0]["kind"] == "ask"
        assert ran == []

        resume = [{"interruptId": "r1", "status": "resolved", "payload": {"allow": True}}]
        second = await agui(live, run_input("t", "run-2", ("m1", "Refund order A-1."), resume=resume))
        (result,) = of_type(second, ToolCallResultEvent)
        assert (result.tool_call_id, result.content) == ("r1", "refunded A-1")
        finished = second[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert finished.outcome is not None
        assert finished.outcome.type == "success"
        assert ran == ["refund A-1"]

        status, error = await live.post(
            "/ag-ui", run_input("t", "run-3", ("m1", "Refund order A-1."), resume=resume)
        )
        assert status == 409  # the interrupt was answered: only the first answer counts
        assert (error["call_id"], error["taken"]) == ("r1", "approval")
        assert ran == ["refund A-1"]


async def test_always_in_an_approval_lets_the_tool_run_unasked_in_the_thread_and_the_log_keeps_it() -> None:
    def refunds(*orders: str) -> ScriptedResponse:
        return ScriptedResponse(
            tool_calls=[ScriptedToolCall("refund", {"order": o}, id=f"r-{o}") for o in orders]
        )

    model = ScriptedModel([refunds("A-1"), "Refunded A-1.", refunds("A-2"), "Refunded A-2."])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        first = await agui(live, run_input("t", "run-1", ("m1", "Refund A-1.")))
        asked = first[-1]
        assert isinstance(asked, RunFinishedEvent)
        assert asked.outcome is not None
        (interrupt,) = asked.outcome.interrupts
        assert interrupt.response_schema is not None
        assert interrupt.response_schema["properties"]["always"]["type"] == "boolean"
        always = [{"interruptId": "r-A-1", "status": "resolved", "payload": {"allow": True, "always": True}}]
        await agui(live, run_input("t", "run-2", ("m1", "Refund A-1."), resume=always))
        assert ran == ["refund A-1"]

        third = await agui(live, run_input("t", "run-3", ("m1", "Refund A-1."), ("m2", "And A-2.")))
        finished = third[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert finished.outcome is not None
        assert finished.outcome.type == "success"  # no interrupt: the thread's rule answered
        assert ran == ["refund A-1", "refund A-2"]
        facts = [(f.kind, f.data()) for f in await agent.sessions.facts(live.server.hub.handle("t").ctx)]
        decisions = [d for kind, d in facts if kind == "decision"]
        assert decisions == [  # the later call asked nothing, so nothing was decided for it
            {"call_id": "r-A-1", "kind": "approval", "reason": "", "arguments": None, "always": True}
        ]
        rule = {"decision": "allow", "tool": "refund", "call_id": "r-A-1", "reason": ""}
        assert [d for kind, d in facts if kind == "extras"][-1] == {"extras": {SESSION_RULES: [rule]}}


async def test_a_cancelled_approval_denies_the_call() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")]),
            "Not refunded.",
        ]
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        await agui(live, run_input("t", "run-1", ("m1", "Refund A-1.")))
        events = await agui(
            live, run_input("t", "run-2", resume=[{"interruptId": "r1", "status": "cancelled"}])
        )
        (result,) = of_type(events, ToolCallResultEvent)
        assert "denied" in result.content
        assert result.metadata == {"status": "denied"}
        assert ran == []


async def test_an_external_tool_is_an_interrupt_answered_with_its_result() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("sign", {"document": "NDA"}, id="e1")]), "Signed."]
    )
    async with serving(ReActAgent(model, Toolkit([sign]))) as live:
        first = await agui(live, run_input("t", "run-1", ("m1", "Get the NDA signed.")))
        finished = first[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert finished.outcome is not None
        assert finished.outcome.type == "interrupt"
        assert finished.outcome.interrupts[0].reason == "external_tool_result"
        resume = [{"interruptId": "e1", "status": "resolved", "payload": "signed by Ada"}]
        second = await agui(live, run_input("t", "run-2", resume=resume))
        assert isinstance(second[-1], RunFinishedEvent)
        assert second[-1].result["text"] == "Signed."  # type: ignore[index]
        (told,) = of_type(second, ToolCallResultEvent)  # the result's ToolResult and tool message: told once
        assert (told.tool_call_id, told.content) == ("e1", "signed by Ada")
        assert model.requests[1].messages[-1].tool_results[0].text == "signed by Ada"


# ---- ends other than success -------------------------------------------------------------------------------


async def test_a_failing_model_ends_the_stream_with_one_run_error() -> None:
    model = ScriptedModel([RuntimeError("the model fell over")])
    async with serving(ReActAgent(model, options=AgentOptions(retry_budget=0))) as live:
        events = await agui(live, run_input("t", "r", ("m1", "hi")))
    assert isinstance(events[0], RunStartedEvent)
    error = events[-1]
    assert isinstance(error, RunErrorEvent)
    assert "the model fell over" in error.message


async def test_an_interrupted_run_finishes_cancelled() -> None:
    model = ValveModel(ScriptedResponse(text="a long story", chunk_size=1))
    async with serving(ReActAgent(model)) as live:
        async with live.sse("/ag-ui", json=run_input("t", "r", ("m1", "tell me"))) as stream:
            await stream.until(lambda e: json.loads(e.data)["type"] == "RUN_STARTED")
            model.release(2)
            await stream.until(lambda e: json.loads(e.data)["type"] == "TEXT_MESSAGE_CONTENT")
            assert await live.post("/api/sessions/t/interrupt") == (200, {"interrupted": True})
            rest = await stream.rest()
        events = [EVENTS.validate_json(e.data) for e in rest]
        finished = events[-1]
        assert isinstance(finished, RunFinishedEvent)
        assert finished.outcome is not None
        assert finished.outcome.type == "cancelled"


async def test_a_run_that_never_starts_is_a_lone_run_error() -> None:
    model = ValveModel(ScriptedResponse(text="holding the session"))
    agent = ReActAgent(model, options=AgentOptions(session_wait=0.0))
    async with serving(agent) as live:
        _, first = await live.post("/api/sessions/t/runs", {"input": "hold it"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        events = await agui(live, run_input("t", "r", ("m1", "me too")))  # its session stays busy
        (error,) = events
        assert isinstance(error, RunErrorEvent)
        assert error.code == "SessionBusyError"
        model.open()
        async with live.sse("/api/sessions/t/feed") as feed:
            await feed.until(is_result_of(first["run_id"]))


async def test_a_client_that_disconnects_does_not_stop_the_run() -> None:
    model = ValveModel(ScriptedResponse(text="z" * 40, chunk_size=1))
    agent = ReActAgent(model)
    async with serving(agent) as live:
        async with live.sse("/ag-ui", json=run_input("t", "r", ("m1", "go"))) as stream:
            started = await stream.until(lambda e: json.loads(e.data)["type"] == "RUN_STARTED")
            (server_stream,) = live.server.hub.streams
        await asyncio.wait_for(server_stream.closed.wait(), WAIT)
        model.open()
        rx_run_id = json.loads(started[-1].data)["metadata"]["rxagent_run_id"]
        async with live.sse("/api/sessions/t/feed") as feed:  # it re-attaches through the session's feed
            facts = await feed.until(is_result_of(rx_run_id))
        assert json.loads(facts[-1].data)["data"]["reason"] == "MODEL_STOP"
        assert (await agent.sessions.state(live.server.hub.handle("t").ctx)).messages[-1].text == "z" * 40


# ---- bad input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ("{oops", 400, "not valid JSON"),
        ('{"runId": "r", "messages": []}', 400, "threadId"),
        ('{"threadId": "t", "runId": "r", "messages": "hi"}', 400, "messages"),
        ('{"threadId": "bad id", "runId": "r", "messages": []}', 400, "session id"),
        ('{"threadId": "t", "runId": "r", "messages": []}', 409, "nothing to run"),
        (
            '{"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "user", "content": '
            '[{"type": "image", "source": {"type": "url", "value": "http://x/y.png"}}]}]}',
            400,
            "only text parts",
        ),
        (
            '{"threadId": "t", "runId": "r", "messages": [{"id": "m", "role": "user", "content": " "}]}',
            400,
            "no text",
        ),
    ],
)
async def test_bad_inputs_are_refused_before_the_stream_opens(body: str, status: int, message: str) -> None:
    async with serving(ReActAgent(ScriptedModel(["never"]))) as live:
        async with live.http.post(
            "/ag-ui", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == status
            assert message in (await response.json())["error"]
        assert (await live.get("/api/sessions"))[1] == {"sessions": []}


@pytest.mark.parametrize(
    ("resume", "status", "message"),
    [
        (
            [{"interruptId": "r1", "status": "resolved", "payload": "yes"}],
            400,
            "the payload must be true, false",
        ),
        ([{"interruptId": "r1", "status": "resolved", "payload": {"allow": 1}}], 400, "the payload must be"),
        (
            [{"interruptId": "r1", "status": "resolved", "payload": {"allow": True, "arguments": [1]}}],
            400,
            "'arguments' an object",
        ),
        ([{"interruptId": "e1", "status": "resolved", "payload": {"text": "x"}}], 400, '{"output": str'),
        ([{"interruptId": "r1", "status": "maybe"}], 400, "not an AG-UI RunAgentInput"),
        (
            [{"interruptId": "r1", "status": "resolved", "payload": {"allow": True, "always": "yes"}}],
            400,
            "'always' must be true or false",
        ),
        (
            [{"interruptId": "r1", "status": "resolved", "payload": {"allow": False, "always": True}}],
            409,
            "'always' comes with an approval, not a denial",
        ),
        (
            [
                {
                    "interruptId": "r1",
                    "status": "resolved",
                    "payload": {"allow": True, "arguments": {"order": 7}},
                }
            ],
            409,
            "the edited arguments were refused",
        ),
    ],
)
async def test_bad_resumes_are_refused_and_change_nothing(resume: Any, status: int, message: str) -> None:
    both = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
        ]
    )
    agent = ReActAgent(
        ScriptedModel([both, "Done."]), Toolkit([refund, sign]), permissions=Permissions().ask("refund")
    )
    async with serving(agent) as live:
        await agui(live, run_input("t", "r0", ("m1", "refund and sign")))
        before = await live.get("/api/sessions/t")
        code, error = await live.post("/ag-ui", run_input("t", "r1", resume=resume))
        assert code == status, error
        assert message in error["error"]
        assert await live.get("/api/sessions/t") == before
        code, error = await live.post("/ag-ui", run_input("t", "r2", ("m2", "never mind, new question")))
        assert code == 409  # new text while interrupts are open
        assert "waits for answers" in error["error"]
        assert ran == []


async def test_an_entry_for_no_open_interrupt_is_ignored_with_a_warning() -> None:
    async with serving(ReActAgent(ScriptedModel(["Hello."]))) as live:
        resume = [{"interruptId": "ghost", "status": "resolved", "payload": True}]
        events = await agui(live, run_input("t", "r", ("m1", "hi"), resume=resume))
        warnings = [e for e in events if e.type == EventType.CUSTOM and e.name == "rxagent.warning"]  # type: ignore[attr-defined]
        assert len(warnings) == 1
        assert "ghost" in warnings[0].value  # type: ignore[attr-defined]
        assert events.index(warnings[0]) == 1  # right after RUN_STARTED
        assert isinstance(events[-1], RunFinishedEvent)
