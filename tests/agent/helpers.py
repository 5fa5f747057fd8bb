"""Shared helpers for agent tests: run an agent and check the invariants every run must satisfy."""

from __future__ import annotations

from collections.abc import Sequence

from rxagent.agent import AgentInput, ReActAgent, RunControl
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    MessageCompleted,
    RunStarted,
    TextDelta,
    ToolExecutionStarted,
    ToolResult,
)
from rxagent.operators import to_list


def check_invariants(events: Sequence[AgentEvent], *, deltas_match: bool = True) -> AgentResult:
    """Assert the event-order invariants of a finished run, and of every run nested in it (agents used as
    tools), and return the run's result."""
    top = events[0].run_id
    runs: dict[str, list[AgentEvent]] = {}
    for event in events:
        runs.setdefault(event.run_id, []).append(event)
    own = runs.pop(top)
    result = _check_run(own, deltas_match=deltas_match)
    assert result is not None, "a run ends with an AgentResult"
    assert events[-1] is result
    assert len({e.trace_id for e in events}) == 1  # nested runs share their parent's trace
    assert len({e.parent_run_id for e in own}) == 1
    known = {top}
    for run_id, nested in runs.items():  # in the order the runs appeared
        parent = nested[0].parent_run_id
        assert parent in known, f"run {run_id} is nested in {parent}, which did not appear before it"
        assert all(e.parent_run_id == parent for e in nested)
        _check_run(nested, deltas_match=deltas_match)  # one its parent cancelled has no result
        known.add(run_id)
    return result


def _check_run(events: Sequence[AgentEvent], *, deltas_match: bool) -> AgentResult | None:
    assert isinstance(events[0], RunStarted), events[0]
    results = [e for e in events if isinstance(e, AgentResult)]
    assert len(results) <= 1
    if results:
        assert events[-1] is results[0]
    assert [e.seq for e in events] == list(range(len(events)))
    # deltas come before the folded message that holds them
    pending_text = ""
    for event in events:
        if isinstance(event, TextDelta):
            pending_text += event.text
        elif isinstance(event, MessageCompleted) and event.message.role == "assistant":
            assert event.message.text == pending_text or not deltas_match
            pending_text = ""
    assert pending_text == "" or not deltas_match or not results
    # Tool results per batch (a resumed run's first batch was called in an earlier run): each answers a
    # call of the batch, once; once a tool of the batch started, the results come in call order. A result
    # decided before any tool started (a reviewer's rejection) is told when it is decided.
    calls: list[str] | None = None
    told: set[str] = set()
    started = False
    last = -1
    for event in events:
        if isinstance(event, MessageCompleted) and event.message.role == "assistant":
            calls, told, started, last = [c.id for c in event.message.tool_calls], set(), False, -1
        elif isinstance(event, ToolExecutionStarted) and calls is not None and event.call.id in calls:
            started = True
        elif isinstance(event, ToolResult) and calls is not None:
            call_id = event.result.tool_use_id
            assert call_id in calls, f"{call_id}: not a call of the batch"
            assert call_id not in told, f"{call_id}: told twice"
            told.add(call_id)
            if started:
                assert calls.index(call_id) > last, f"{call_id}: told out of call order"
                last = calls.index(call_id)
    return results[0] if results else None


async def run(
    agent: ReActAgent,
    input: AgentInput,
    ctx: RuntimeContext | None = None,
    control: RunControl | None = None,
    *,
    deltas_match: bool = True,
) -> tuple[AgentResult, list[AgentEvent]]:
    """Run to completion; return the result and every event (invariants checked).

    ``deltas_match=False`` for runs whose subscriber-side middleware rewrites deltas on purpose.
    """
    events = await to_list(agent.stream_events(input, ctx, control=control))
    return check_invariants(events, deltas_match=deltas_match), events


def of_type(events: Sequence[AgentEvent], kind: type) -> list[AgentEvent]:
    return [e for e in events if isinstance(e, kind)]
