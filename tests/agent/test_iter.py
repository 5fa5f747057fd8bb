"""``agent.iter``: a run driven node by node, with the guarantees of ``call``; and the ``StepStarted`` events
that show the same path to stream consumers.

Bad inputs tried: ``next`` with something that is not a node, or with another node than a ``Start`` for
the first step (both refused, the run still waits); ``next`` before ``async with``, after the run ended,
after it was cancelled, and while another ``next`` runs a step; a node type the assembly has no step for
(the run's usual failure); entering a run twice; a second run on a session a first one holds.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, AgentRun, ReActAgent, SessionBusyError
from rxagent.agent.inputs import RunInput
from rxagent.agent.loop import (
    Act,
    Finish,
    Interrupt,
    Node,
    Reason,
    RunState,
    Start,
    new_run,
    react_steps,
    run_loop,
)
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, StepStarted, event_from_json, event_to_json
from rxagent.messages import Msg
from rxagent.model.openai import OpenAIChatModel
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.operators import to_list
from rxagent.state import AgentState
from rxagent.tools import Toolkit, tool
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)

ADA = RuntimeContext(user_id="ada", session_id="s1")
WAIT = 10.0
PATH = ["Start", "Reason", "Act", "Reason", "Finish"]

looked_up: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    looked_up.append(city)
    return f"{city}: 14 °C"


@pytest.fixture(autouse=True)
def nothing_looked_up() -> None:
    looked_up.clear()


def weather_model() -> ScriptedModel:
    """A tool round (``lookup`` of Oslo), then the answer."""
    return ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"city": "Oslo"}, id="c1")]),
            ScriptedResponse(text="It is 14 °C in Oslo.", chunk_size=5),
        ]
    )


def weather_agent(store: str | None = None, **options: Any) -> ReActAgent:
    return ReActAgent(
        weather_model(), Toolkit([lookup]), store=store, options=AgentOptions(session_wait=0.0, **options)
    )


def names(nodes: Sequence[Node]) -> list[str]:
    return [type(n).__name__ for n in nodes]


def transcript(state: AgentState) -> list[tuple[str, str, list[tuple[str, str]]]]:
    """The conversation without ids: role, text, and each tool result's status and text."""
    return [(m.role, m.text, [(r.status, r.text) for r in m.tool_results]) for m in state.messages]


def outcome(result: AgentResult[Any] | None) -> tuple[Any, ...]:
    assert result is not None
    usage = result.usage
    return (
        result.reason,
        result.text,
        result.iterations,
        result.detail,
        (usage.model_calls, usage.input_tokens, usage.output_tokens),
        [c.id for c in result.pending],
    )


def others(before: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Tasks started since ``before`` that are still pending (the current one aside)."""
    return {t for t in asyncio.all_tasks() - before if t is not asyncio.current_task() and not t.done()}


async def stored_state(path: str) -> AgentState:
    """The session's state as the SQLite file has it, read by another agent object (another keeper)."""
    reader = ReActAgent(ScriptedModel([]), store=path)
    try:
        return await reader.sessions.state(ADA)
    finally:
        await reader.aclose()


# ---- iterating -------------------------------------------------------------------------------------------


async def test_async_for_yields_each_node_before_its_step_and_ends_as_call_does() -> None:
    agent = weather_agent()
    async with agent.iter("Weather in Oslo?", ADA) as run:
        assert isinstance(run, AgentRun)
        assert isinstance(run.next_node, Start)
        assert run.result is None
        seen: list[Node] = []
        async for node in run:
            seen.append(node)
            assert run.next_node is node  # its step has not run yet
            if isinstance(node, Act):
                assert looked_up == []
                assert [c.name for c in node.calls] == ["lookup"]
            if isinstance(node, Finish):
                assert run.result is None  # the finish step saves, then emits the result
    assert names(seen) == PATH
    assert run.done
    assert run.next_node is None
    assert looked_up == ["Oslo"]
    state = run.run_state
    assert state is not None
    assert state.iteration == 2

    twin = weather_agent()  # the same script through call()
    called = await twin.call("Weather in Oslo?", ADA)
    assert outcome(run.result) == outcome(called)
    assert transcript(await agent.sessions.state(ADA)) == transcript(await twin.sessions.state(ADA))
    assert run.events[-1] is run.result
    started = [e for e in run.events if isinstance(e, StepStarted)]
    assert [e.node for e in started] == PATH


async def test_next_drives_by_hand_and_may_run_another_node_instead() -> None:
    agent = weather_agent()
    async with agent.iter("Weather in Oslo?", ADA) as run:
        node = run.next_node
        assert isinstance(node, Start)
        reason = await run.next(node)
        assert isinstance(reason, Reason)
        act = await run.next(reason)
        assert isinstance(act, Act)
        again = await run.next(act)
        assert isinstance(again, Reason)
        assert looked_up == ["Oslo"]
        stop = Finish("STOPPED", None, detail="the driver had enough")
        last = await run.next(stop)  # instead of a second model turn
        assert last is stop
        assert run.done
    assert run.result is not None
    assert (run.result.reason, run.result.detail, run.result.iterations) == (
        "STOPPED",
        "the driver had enough",
        1,
    )
    state = await agent.sessions.state(ADA)
    assert [m.role for m in state.messages] == ["user", "assistant", "tool"]  # saved, no second answer
    started = [e for e in run.events if isinstance(e, StepStarted)]
    assert [(e.node, e.detail) for e in started][-1] == (
        "Finish",
        {"reason": "STOPPED", "detail": "the driver had enough"},
    )


async def test_a_substituted_reason_steers_the_turn_a_summarising_one_sends_no_tools() -> None:
    model = weather_model()
    agent = ReActAgent(model, Toolkit([lookup]))
    async with agent.iter("Weather in Oslo?") as run:
        nodes: list[Node] = []
        node = run.next_node
        while not run.done:
            assert node is not None
            if isinstance(node, Reason) and nodes and isinstance(nodes[-1], Act):
                node = Reason(summarising=True)
            nodes.append(node)
            node = await run.next(node)
    assert names(nodes) == PATH
    first, second = model.requests
    assert [t.name for t in first.tools] == ["lookup"]
    assert not second.tools
    assert run.result is not None
    assert run.result.text == "It is 14 °C in Oslo."
    started = [e for e in run.events if isinstance(e, StepStarted)]
    assert started[3].detail == {"summarising": True, "reprompted": False, "attempts": 0}


async def test_iterating_through_the_openai_client_on_loopback(server: OpenAIServer) -> None:
    server.script(
        Reply.sse(tool_chunk(0, "c1", "lookup", '{"city": "Oslo"}'), finish_chunk("tool_calls"), DONE),
        Reply.sse(text_chunk("Mild, "), text_chunk("14 °C."), finish_chunk(), usage_chunk(20, 4), DONE),
    )
    async with make_model(server) as model:
        assert isinstance(model, OpenAIChatModel)
        agent = ReActAgent(model, Toolkit([lookup]))
        async with agent.iter("Weather in Oslo?", ADA, deltas=False) as run:
            path = [type(node).__name__ async for node in run]
    assert path == PATH
    assert run.result is not None
    assert (run.result.reason, run.result.text) == ("MODEL_STOP", "Mild, 14 °C.")
    assert [m["role"] for m in server.requests[-1].body["messages"]][-2:] == ["assistant", "tool"]
    assert not [e for e in run.events if e.type == "text_delta"]  # deltas=False


# ---- interrupt, leaving early, cancel --------------------------------------------------------------------


async def test_an_interrupt_between_steps_ends_the_run_interrupted_and_saved(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    agent = weather_agent(path)
    try:
        async with agent.iter("Weather in Oslo?", ADA) as run:
            seen: list[Node] = []
            async for node in run:
                seen.append(node)
                if isinstance(node, Act):
                    assert run.interrupt()
                    # the driver's choice does not matter any more: the run goes to Interrupt
        assert names(seen) == ["Start", "Reason", "Act", "Interrupt", "Finish"]
        finish = seen[-1]
        assert isinstance(finish, Finish)
        assert finish.reason == "INTERRUPTED"
        assert run.result is not None
        assert run.result.reason == "INTERRUPTED"
        assert looked_up == []  # the batch never ran
        stored = await stored_state(path)
        assert transcript(stored) == [
            ("user", "Weather in Oslo?", []),
            ("assistant", "", []),
            ("tool", "", [("interrupted", "Interrupted by the user before it finished.")]),
        ]
        after = await agent.call("And now?", ADA)  # session_wait=0: a held session would refuse at once
        assert after.text == "It is 14 °C in Oslo."  # the script's answer the interrupt left unasked
    finally:
        await agent.aclose()


async def test_an_interrupt_during_a_step_cuts_it_and_the_driver_sees_interrupt(tmp_path: Path) -> None:
    started = asyncio.Event()

    async def park(request: ChatRequest) -> str:
        started.set()
        await asyncio.Event().wait()  # never answers: only the interrupt ends this turn
        raise AssertionError("unreachable")

    path = str(tmp_path / "s.db")
    agent = ReActAgent(FunctionModel(park), store=path, options=AgentOptions(session_wait=0.0))
    try:
        async with agent.iter("Hello?", ADA) as run:
            reason = await run.next(run.next_node or Start(RunInput(())))
            assert isinstance(reason, Reason)
            running = asyncio.ensure_future(run.next(reason))
            await asyncio.wait_for(started.wait(), WAIT)
            with pytest.raises(RuntimeError, match="a step is running"):
                await run.next(reason)
            assert run.interrupt()
            interrupt = await asyncio.wait_for(running, WAIT)
            assert isinstance(interrupt, Interrupt)
            finish = await run.next(interrupt)
            assert isinstance(finish, Finish)
            assert finish.reason == "INTERRUPTED"
            assert await run.next(finish) is finish
        assert run.result is not None
        assert run.result.reason == "INTERRUPTED"
        # the turn cut short keeps what it streamed (nothing here)
        assert transcript(await stored_state(path)) == [("user", "Hello?", []), ("assistant", "", [])]
    finally:
        await agent.aclose()


async def test_leaving_the_block_early_cancels_the_run_saves_it_and_frees_the_session(
    tmp_path: Path,
) -> None:
    before = asyncio.all_tasks()
    path = str(tmp_path / "s.db")
    agent = weather_agent(path)
    try:
        async with agent.iter("Weather in Oslo?", ADA) as run:
            async for node in run:
                if isinstance(node, Reason) and looked_up:  # after the tool ran, before the answer
                    break
        assert others(before) == set()  # nothing left running: the run gave its session back on exit
        assert run.done
        assert run.result is None  # cancelled: no result, as a disposed stream_events
        with pytest.raises(RuntimeError, match="was cancelled"):
            await run.next(Reason())
        stored = await stored_state(path)
        assert transcript(stored) == [
            ("user", "Weather in Oslo?", []),
            ("assistant", "", []),
            ("tool", "", [("ok", "Oslo: 14 °C")]),  # the finished call keeps its result
        ]
        kinds = [f.kind for f in await agent.sessions.facts(ADA)]
        assert "run_cancelled" in kinds
        after = await agent.call("So?", ADA)  # the script's answer is still due; the session is free
        assert after.text == "It is 14 °C in Oslo."
    finally:
        await agent.aclose()


async def test_cancelling_the_task_awaiting_next_cancels_the_run_and_frees_the_session(
    tmp_path: Path,
) -> None:
    started = asyncio.Event()

    async def park(request: ChatRequest) -> str:
        if len(request.messages) > 1:  # the run after the cancelled one
            return "Back."
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    before = asyncio.all_tasks()
    path = str(tmp_path / "s.db")
    agent = ReActAgent(FunctionModel(park), store=path, options=AgentOptions(session_wait=0.0))
    try:

        async def drive() -> None:
            async with agent.iter("Hello?", ADA) as run:
                async for _ in run:
                    pass

        driving = asyncio.ensure_future(drive())
        await asyncio.wait_for(started.wait(), WAIT)
        driving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await driving
        assert others(before) == set()
        assert transcript(await stored_state(path)) == [("user", "Hello?", [])]
        assert "run_cancelled" in [f.kind for f in await agent.sessions.facts(ADA)]
        assert (await agent.call("Again?", ADA)).text == "Back."
    finally:
        await agent.aclose()


# ---- bad input and errors ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Detour(Node):
    """A node the ReAct assembly has no step for."""

    why: str
    notes: tuple[str, ...] = ()


async def test_next_with_a_node_the_assembly_has_no_step_for_ends_the_run_with_an_error(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.db")
    agent = weather_agent(path)
    try:
        async with agent.iter("Weather in Oslo?", ADA) as run:
            reason = await run.next(run.next_node or Start(RunInput(())))
            with pytest.raises(KeyError, match="no step for node Detour"):
                await run.next(Detour("sightseeing"))
            assert run.done
            with pytest.raises(RuntimeError, match=r"ended \(reason ERROR\)"):
                await run.next(reason)
        assert run.result is not None
        assert run.result.reason == "ERROR"
        assert "no step for node Detour" in (run.result.detail or "")
        assert [e.type for e in run.events][-3:] == ["error", "phase_changed", "agent_result"]
        assert transcript(await stored_state(path)) == [("user", "Weather in Oslo?", [])]
        assert "run_failed" in [f.kind for f in await agent.sessions.facts(ADA)]
        agent.model.extend("Fine.")  # type: ignore[attr-defined]
        assert (await agent.call("Again?", ADA)).reason == "MODEL_STOP"  # the session is free
    finally:
        await agent.aclose()


async def test_misuse_is_refused_clearly_and_loses_nothing() -> None:
    agent = weather_agent()
    run = agent.iter("Weather in Oslo?", ADA)
    with pytest.raises(RuntimeError, match="enter the run first"):
        await run.next(Reason())
    with pytest.raises(RuntimeError, match="enter the run first"):
        await run.__anext__()
    async with run:
        start = run.next_node
        assert isinstance(start, Start)
        with pytest.raises(TypeError, match="takes a Node to run, got str"):
            await run.next("Reason")  # type: ignore[arg-type]
        assert run.next_node is start  # the run still waits there
        with pytest.raises(ValueError, match="first step is its Start"):
            await run.next(Finish("STOPPED"))  # the input would never be applied, nor RunStarted told
        assert run.next_node is start
        with pytest.raises(RuntimeError, match="runs once"):
            await run.__aenter__()
        path = [type(node).__name__ async for node in run]
    assert path == PATH
    with pytest.raises(RuntimeError, match=r"ended \(reason MODEL_STOP\)"):
        await run.next(Reason())
    assert [n async for n in run] == []  # the iteration is over


async def test_a_run_whose_session_stays_busy_fails_on_entering() -> None:
    agent = weather_agent()
    async with agent.iter("Weather in Oslo?", ADA) as holding:
        with pytest.raises(SessionBusyError):
            async with agent.iter("Me too?", ADA):
                raise AssertionError("the second run never starts")
        assert isinstance(holding.next_node, Start)  # the first run is untouched


# ---- the gate without an agent -------------------------------------------------------------------------


async def test_run_loop_asks_its_gate_before_each_step_with_no_agent() -> None:
    model = weather_model()
    run = new_run(model, Toolkit([lookup]), state=AgentState(messages=[]))
    asked: list[str] = []

    def gate(node: Node, state: RunState) -> asyncio.Future[Node]:
        assert state is run
        asked.append(type(node).__name__)
        chosen: asyncio.Future[Node] = asyncio.get_running_loop().create_future()
        # A Reason after the tool round becomes a Finish: the run stops before the second model call.
        chosen.set_result(Finish("STOPPED") if isinstance(node, Reason) and looked_up else node)
        return chosen

    events = await to_list(run_loop(react_steps(), Start(RunInput((Msg.user("Weather?"),))), run, gate=gate))
    assert asked == ["Start", "Reason", "Act", "Reason"]  # the Finish chosen instead ran as chosen
    assert [e.node for e in events if isinstance(e, StepStarted)] == ["Start", "Reason", "Act", "Finish"]
    result = events[-1]
    assert isinstance(result, AgentResult)
    assert result.reason == "STOPPED"
    assert len(model.requests) == 1


# ---- StepStarted ------------------------------------------------------------------------------------------


async def stream(agent: ReActAgent, text: str) -> list[AgentEvent]:
    return await to_list(agent.stream_events(text, ADA))


async def test_a_stream_tells_one_step_started_per_step_in_order_after_run_started() -> None:
    events = await stream(weather_agent(), "Weather in Oslo?")
    started = [e for e in events if isinstance(e, StepStarted)]
    assert [(e.node, e.iteration) for e in started] == [
        ("Start", 0),
        ("Reason", 0),
        ("Act", 1),
        ("Reason", 1),
        ("Finish", 2),
    ]
    assert events[0].type == "run_started"
    assert events[1] is started[0]  # the first step's right after the run's start
    assert events[0].time <= events[1].time <= events[2].time
    assert started[0].detail == {"messages": 1, "decisions": 0}
    assert started[2].detail == {"calls": [{"id": "c1", "name": "lookup"}]}
    assert started[4].detail == {"reason": "MODEL_STOP", "detail": None}
    assert [e.seq for e in events] == list(range(len(events)))
    # every step's events come after its StepStarted: the tool ran inside Act, the answer inside Reason
    types = [e.type for e in events]
    assert types.index("step_started", types.index("tool_result") - 5) < types.index("tool_result")
    assert events.index(started[2]) < types.index("tool_execution_started")
    assert events.index(started[3]) < types.index("text_delta") < events.index(started[4])


async def test_call_builds_no_step_started_a_recorded_stream_does() -> None:
    agent = weather_agent(record_events=True)
    await agent.call("Weather in Oslo?", ADA)
    called = [json.loads(f.payload)["type"] for f in await agent.sessions.facts(ADA) if f.kind == "event"]
    assert called == ["agent_result"]  # quiet: nobody watched, nothing else was built

    agent.model.extend(  # type: ignore[attr-defined]
        ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"city": "Bergen"}, id="c2")]), "Rainy."
    )
    events = await stream(agent, "And Bergen?")
    recorded = [json.loads(f.payload) for f in await agent.sessions.facts(ADA) if f.kind == "event"][1:]
    assert [e["node"] for e in recorded if e["type"] == "step_started"] == PATH
    assert len(recorded) == len(events)


def test_step_started_round_trips_through_json() -> None:
    event = StepStarted(
        run_id="r",
        session_id="s",
        trace_id="t",
        seq=4,
        node="Act",
        detail={"calls": [{"id": "c1", "name": "lookup"}], "approved": ["c1"]},
        iteration=2,
    )
    text = event_to_json(event)
    assert json.loads(text)["type"] == "step_started"
    back = event_from_json(text)
    assert back == event
    assert isinstance(back, StepStarted)


def test_a_nodes_description_is_its_plain_fields_unless_it_says_more() -> None:
    assert Detour("sightseeing", ("a", "b")).describe() == {"why": "sightseeing"}  # the tuple is left out
    assert Reason(attempts=2).describe() == {"summarising": False, "reprompted": False, "attempts": 2}
    assert Interrupt().describe() == {}
    assert Finish("MODEL_STOP", Msg.assistant("Hi."), structured={"a": 1}).describe() == {
        "reason": "MODEL_STOP",
        "detail": None,
    }

    class Bare(Node):  # not a dataclass
        __slots__ = ()

    assert Bare().describe() == {}
