"""The context window inside an agent: a long tool loop under a small budget, reuse across runs, events."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from rxagent import Msg, ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import (
    ContextCompressed,
    ModelCallStarted,
    ToolResult,
    ToolResultsEvicted,
    event_from_json,
    event_to_json,
)
from rxagent.memory import ContextBudgetExceeded, ContextWindow, TiktokenCounter, TruncatingSummariser
from rxagent.memory.window import STATE_KEY
from rxagent.model.scripted import FunctionModel
from rxagent.operators import to_list
from rxagent.requests import ChatRequest
from rxagent.session import MemoryStore, seed_session
from rxagent.state import AgentState
from rxagent.tools import Toolkit, tool

from ..agent.helpers import check_invariants, run
from .conversations import assert_pairs_intact, filler, turn


def page_text(page: int) -> str:
    return f"Page {page}. " + filler(2_000)


@tool(concurrency_safe=True)
def fetch(page: int) -> str:
    """Fetch one page of the report (about 2 000 tokens)."""
    return page_text(page)


def loop_script(rounds: int) -> list[ScriptedResponse | str]:
    calls: list[ScriptedResponse | str] = [
        ScriptedResponse(tool_calls=[ScriptedToolCall("fetch", {"page": page})]) for page in range(rounds)
    ]
    return [*calls, "All pages read."]


async def test_a_40_round_tool_loop_with_2000_token_results_stays_under_a_4000_token_budget() -> None:
    counter = TiktokenCounter()
    assert 1_950 < counter.count_text(page_text(1)) < 2_050
    model = ScriptedModel(loop_script(40))
    window = ContextWindow(counter=counter, max_context_tokens=4_000, reply_reserve=500)
    agent = ReActAgent(
        model,
        Toolkit([fetch]),
        system_prompt="Read every page of the report, then answer.",
        options=AgentOptions(max_iters=50),
        middleware=[window],
    )
    result, events = await run(agent, "Read the report.")
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "All pages read.", 41)
    model.assert_complete()
    assert len(model.requests) == 41
    fresh = TiktokenCounter()
    for request in model.requests:
        assert fresh.count_request(request) <= 4_000 - 500
        assert request.messages[0].text == "Read every page of the report, then answer."
        assert_pairs_intact(request.messages)
    # The latest result is always sent whole; older ones were evicted, then compressed.
    last = model.requests[-1]
    assert last.messages[-1].tool_results[0].text == page_text(39)
    assert any(isinstance(e, ToolResultsEvicted) for e in events)
    assert any(isinstance(e, ContextCompressed) for e in events)
    # The session keeps every result in full: the window changed only the requests.
    state = await agent.sessions.state()
    results = [m.tool_results[0].text for m in state.messages if m.role == "tool"]
    assert results == [page_text(p) for p in range(40)]
    assert len([e for e in events if isinstance(e, ToolResult)]) == 40


async def test_window_events_come_before_the_model_call_and_round_trip_through_json() -> None:
    model = ScriptedModel(loop_script(6))
    window = ContextWindow(max_context_tokens=4_000, reply_reserve=500)
    agent = ReActAgent(model, Toolkit([fetch]), options=AgentOptions(max_iters=10), middleware=[window])
    _, events = await run(agent, "Read.")
    changes = [e for e in events if isinstance(e, ToolResultsEvicted | ContextCompressed)]
    assert changes
    for change in changes:
        following = events[events.index(change) + 1 :]
        assert any(isinstance(e, ModelCallStarted) for e in following)
        assert event_from_json(event_to_json(change)) == change
        assert change.run_id == events[0].run_id


class RecordingSummariser(TruncatingSummariser):
    def __init__(self) -> None:
        super().__init__(max_summary_tokens=150)
        self.spans: list[list[str]] = []

    async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
        self.spans.append([m.id for m in messages])
        return await super().summarise(previous, messages)


async def test_the_summary_is_computed_once_per_span_across_turns_and_runs() -> None:
    def answer(request: ChatRequest) -> ScriptedResponse | str:
        last = request.messages[-1]
        if last.role == "user":
            return ScriptedResponse(tool_calls=[ScriptedToolCall("fetch", {"page": len(request.messages)})])
        return "Noted: " + filler(100, "fact")

    summariser = RecordingSummariser()
    window = ContextWindow(max_context_tokens=3_000, reply_reserve=300, recent_turns=2, summariser=summariser)
    model = FunctionModel(answer)
    agent = ReActAgent(model, Toolkit([fetch]), system_prompt="Be brief.", middleware=[window])
    ctx = RuntimeContext(user_id="ada", session_id="long")
    compressions = 0
    for number in range(12):
        _, events = await run(agent, f"Question {number}: " + filler(300, "why"), ctx)
        compressions += sum(isinstance(e, ContextCompressed) for e in events)
    requests = len(model.requests)
    assert requests == 24
    assert 1 <= compressions == len(summariser.spans) < 12
    ids = [i for span in summariser.spans for i in span]
    assert len(ids) == len(set(ids))  # no message summarised twice
    state = await agent.sessions.state(ctx)
    assert ids == [m.id for m in state.messages[: len(ids)]]
    stored = state.extras[STATE_KEY]
    assert isinstance(stored, dict)
    assert stored["covered"] == len(ids)
    # A fresh window (another process) on the same store reuses the stored summary.
    again = ReActAgent(
        model,
        Toolkit([fetch]),
        system_prompt="Be brief.",
        middleware=[
            ContextWindow(max_context_tokens=3_000, reply_reserve=300, recent_turns=2, summariser=summariser)
        ],
        store=agent.store,
    )
    spans_before = len(summariser.spans)
    await run(again, "One more?", ctx)
    assert len(summariser.spans) == spans_before
    assert model.requests[-1].messages[1].metadata == {"rxagent": "context_summary"}
    for request in model.requests:
        assert TiktokenCounter().count_request(request) <= 2_700


async def test_a_request_that_cannot_fit_fails_the_run_with_the_budget_error() -> None:
    model = ScriptedModel(["never sent"])
    agent = ReActAgent(
        model,
        system_prompt=filler(600, "rule"),
        middleware=[ContextWindow(max_context_tokens=500, reply_reserve=100)],
    )
    with pytest.raises(ContextBudgetExceeded) as caught:
        await to_list(agent.stream_events("Hi"))
    assert caught.value.breakdown["system"] > 600
    assert model.requests == []
    state = await agent.sessions.state()
    assert [m.text for m in state.messages] == ["Hi"]  # the run's input is kept; nothing else happened


async def test_events_of_a_run_with_the_window_keep_the_run_invariants() -> None:
    model = ScriptedModel(loop_script(8))
    agent = ReActAgent(
        model,
        Toolkit([fetch]),
        options=AgentOptions(max_iters=10),
        middleware=[ContextWindow(max_context_tokens=4_000, reply_reserve=500)],
    )
    events = await to_list(agent.stream_events("Read."))
    result = check_invariants(events)
    assert result.reason == "MODEL_STOP"


async def test_cancelling_the_run_cancels_a_summary_in_flight() -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    class Stuck:
        name = "stuck"
        max_summary_tokens = 50

        async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
            entered.set()
            try:
                await asyncio.Event().wait()  # a model call that never answers
            except asyncio.CancelledError:
                cancelled.set()
                raise
            return "never"

    store = MemoryStore()
    history = [t for i in range(8) for t in turn(i, size=400, user_words=300)]
    await seed_session(store, (None, "default"), AgentState(messages=history))
    model = ScriptedModel(["never sent"])
    window = ContextWindow(max_context_tokens=2_000, reply_reserve=200, recent_turns=1, summariser=Stuck())
    agent = ReActAgent(model, middleware=[window], store=store)
    task = asyncio.ensure_future(agent.call("And now?"))
    await asyncio.wait_for(entered.wait(), timeout=10)  # a bound, not a sleep: fails rather than hangs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(cancelled.wait(), timeout=5)
    assert model.requests == []
