"""A hook's error that ``rolls_back``: the run ends ``ERROR`` and the session keeps nothing it did that its
log did not have yet; an ordinary error keeps the run's input, as before.

Tried against a real SQLite file, with a virtual clock on the agent so that no background flush writes
anything behind the test's back: what the log has is what the run recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import reactivex
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import Middleware, ReActAgent
from rxagent.agent.middleware import rolls_back
from rxagent.clock import VirtualClock
from rxagent.context import RunContext
from rxagent.events import AgentEvent, AgentResult, ErrorEvent
from rxagent.model import ChatRequest
from rxagent.operators import to_list
from rxagent.tools import Toolkit, tool


class Refused(Exception):
    """An error that keeps nothing half-done."""

    rolls_back = True


class Refusing(Middleware):
    """Fails the ``n``-th request of every run with ``error()``."""

    def __init__(self, error: Callable[[], Exception], n: int = 1) -> None:
        self.error = error
        self.n = n
        self.seen = 0

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        self.seen += 1
        if self.seen == self.n:
            ctx.state.extras["half"] = "done" if ctx.state is not None else None  # type: ignore[union-attr]
            return reactivex.throw(self.error())
        return next(request)


@tool(read_only=True)
def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


def test_the_marker_is_an_attribute_that_is_true() -> None:
    assert rolls_back(Refused())
    assert not rolls_back(ValueError("x"))
    error = ValueError("x")
    error.rolls_back = "yes"  # type: ignore[attr-defined] - only True counts
    assert not rolls_back(error)


async def test_an_error_that_rolls_back_leaves_the_conversation_as_the_log_had_it(
    tmp_path: Path, clock: VirtualClock
) -> None:
    db = str(tmp_path / "sessions.db")
    agent = ReActAgent(ScriptedModel(["Hello."]), store=db, clock=clock)
    await agent.call("Hi.")
    before_state = await agent.sessions.state()
    before = await agent.sessions.facts()
    await agent.aclose()

    failing = ReActAgent(ScriptedModel([]), middleware=[Refusing(Refused)], store=db, clock=clock)
    with pytest.raises(Refused):
        await failing.call("Do something big.")
    after = await failing.sessions.facts()
    assert [(f.seq, f.payload) for f in after[: len(before)]] == [(f.seq, f.payload) for f in before]
    assert [f.kind for f in after[len(before) :]] == [
        "turn_started",
        "run_started",
        "run_failed",
        "turn_finished",
    ]
    assert await failing.sessions.state() == before_state  # no input, no extras
    await failing.aclose()


async def test_an_ordinary_error_keeps_the_runs_input(tmp_path: Path, clock: VirtualClock) -> None:
    agent = ReActAgent(
        ScriptedModel([]),
        middleware=[Refusing(lambda: RuntimeError("boom"))],
        store=str(tmp_path / "s.db"),
        clock=clock,
    )
    with pytest.raises(RuntimeError, match="boom"):
        await agent.call("Keep me.")
    state = await agent.sessions.state()
    assert [m.text for m in state.messages] == ["Keep me."]
    assert state.extras == {"half": "done"}
    await agent.aclose()


async def test_what_a_tool_recorded_stays_after_a_roll_back(tmp_path: Path, clock: VirtualClock) -> None:
    model = ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"q": "x"}, id="c1")])])
    agent = ReActAgent(
        model,
        Toolkit([lookup]),
        middleware=[Refusing(Refused, n=2)],
        store=str(tmp_path / "s.db"),
        clock=clock,
    )
    events: list[AgentEvent] = []
    with pytest.raises(Refused):
        await to_list(agent.stream_events("Look x up.").pipe(ops.do_action(events.append)))
    assert [e.error_type for e in events if isinstance(e, ErrorEvent)] == ["Refused"]
    assert isinstance(events[-1], AgentResult)
    assert events[-1].reason == "ERROR"
    state = await agent.sessions.state()
    assert state.messages[0].text == "Look x up."  # recorded with the call, before the tool ran
    assert [c.id for c in state.messages[1].tool_calls] == ["c1"]
    assert "found x" in [r.text for m in state.messages for r in m.tool_results] + [
        r.text for r in state.partial_results
    ]
    assert "half" not in state.extras
    await agent.aclose()
