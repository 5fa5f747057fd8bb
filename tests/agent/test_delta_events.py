"""The per-token events a run streams (text, thinking, tool-call starts and argument fragments) are built
without a keyword call each: they must be the very values the event classes' constructors build, field for
field, slotted, with the same JSON form, in a top-level run and in a run nested as a tool."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallStarted,
    event_from_json,
    event_to_json,
)
from rxagent.operators import to_list
from rxagent.tools import Toolkit, tool

from .helpers import check_invariants

DELTAS = (TextDelta, ThinkingDelta, ToolCallStarted, ToolCallArgumentsDelta)


@tool
async def lookup(city: str) -> str:
    """Look a city up.

    Args:
        city: the city.
    """
    return f"{city} is large."


def rebuilt(event: AgentEvent) -> AgentEvent:
    """``event`` built again by its class's own constructor, from every field it has."""
    fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event) if f.name != "type"}
    return type(event)(**fields)


def deltas_of(events: Sequence[AgentEvent]) -> list[AgentEvent]:
    return [e for e in events if isinstance(e, DELTAS)]


def assert_built_as_the_constructor_builds(deltas: Sequence[AgentEvent]) -> None:
    for event in deltas:
        again = rebuilt(event)  # reading every field: a field the fast path missed fails here
        assert event == again
        assert event.type == again.type
        assert not hasattr(event, "__dict__")  # slotted: no per-event dictionary
        assert event_from_json(event_to_json(event)) == event
        assert event_to_json(event) == event_to_json(again)


async def test_the_delta_events_of_a_run_are_what_the_constructors_build() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                thinking="Let me look it up.",
                text="Looking.",
                tool_calls=[ScriptedToolCall("lookup", {"city": "Lyon"}, id="c1", fragments=4)],
            ),
            ScriptedResponse(text="Lyon is large.", chunk_size=3),
        ]
    )
    agent = ReActAgent(model, Toolkit([lookup]))
    events = await to_list(agent.stream_events("How big is Lyon?", RuntimeContext(session_id="s")))
    result = check_invariants(events)
    assert result.text == "Lyon is large."
    deltas = deltas_of(events)
    assert {type(e) for e in deltas} == set(DELTAS)
    assert "".join(e.text for e in deltas if isinstance(e, ThinkingDelta)) == "Let me look it up."
    assert "".join(e.text for e in deltas if isinstance(e, TextDelta)) == "Looking.Lyon is large."
    started = [e for e in deltas if isinstance(e, ToolCallStarted)]
    assert [(e.index, e.call_id, e.name) for e in started] == [(0, "c1", "lookup")]
    fragments = [e for e in deltas if isinstance(e, ToolCallArgumentsDelta)]
    assert "".join(e.fragment for e in fragments) == '{"city": "Lyon"}'
    assert {(e.index, e.call_id) for e in fragments} == {(0, "c1")}
    assert {e.run_id for e in deltas} == {result.run_id}
    assert {e.session_id for e in deltas} == {"s"}
    assert {e.parent_run_id for e in deltas} == {None}
    assert all(isinstance(e.time, float) and e.time > 0 for e in deltas)  # each stamped when built
    assert_built_as_the_constructor_builds(deltas)


async def test_the_delta_events_of_a_nested_run_carry_its_parent() -> None:
    child = ReActAgent(ScriptedModel([ScriptedResponse(thinking="hm", text="Paris.")]), name="researcher")
    parent = ReActAgent(
        ScriptedModel(
            [
                ScriptedResponse(tool_calls=[ScriptedToolCall("researcher", {"task": "Capital?"}, id="t1")]),
                "Paris.",
            ]
        ),
        Toolkit([child.as_tool()]),
        name="lead",
    )
    events = await to_list(parent.stream_events("Capital of France?", RuntimeContext(session_id="p")))
    result = events[-1]
    assert isinstance(result, AgentResult)
    inner = [e for e in deltas_of(events) if e.run_id != result.run_id]
    assert {type(e) for e in inner} == {TextDelta, ThinkingDelta}
    assert {e.parent_run_id for e in inner} == {result.run_id}
    assert len({e.session_id for e in inner}) == 1
    assert {e.trace_id for e in inner} == {result.trace_id}
    assert_built_as_the_constructor_builds(deltas_of(events))
