"""Agents compose (issue 12, item 3): an agent as a tool of another agent, an agent as an operator.

Agent as a tool: the child's events nest in the parent's stream (own run id and numbering, the parent's
run id as ``parent_run_id``), its usage rolls up into the parent's result (quiet parent too), its answer
(or structured JSON) is the tool result; cancelling or interrupting the parent cancels the child (its
model call or its tool sees the cancellation, its session is saved and released, no task is left).
Checked with the scripted model and with ``OpenAIChatModel`` on the loopback server (the child's HTTP
request is closed when the parent is cancelled).

Fan-out: ``map_runs`` over 50 inputs with a limit of 4 never has more than 4 runs in their model call
(a counter inside the model, which holds each call until the test releases it: no timing), gives all 50
outcomes in input order or as the runs finish, keeps each run's events on request, and cancels every
run in flight when disposed. Its progress bar counts runs done, failed and running (never more running
than the limit) and ends with the batch's final counts, drawn by tqdm in a terminal.

Bad inputs tried: a child whose model raises, a child that ends waiting for approval, a child with no
valid structured answer, a task over the length limit, a call without a task, an invalid tool name, a
task limit below 1, an unknown ``sessions`` mode; a fan-out input of the wrong type, a context factory
that raises, a failing run among good ones, a failing input stream, ``max_concurrent`` below 1, a
progress bar asked for without tqdm installed, a progress option of the wrong type.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import reactivex
from pydantic import BaseModel
from reactivex import Observable
from reactivex.subject import Subject

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall, Usage
from rxagent.agent import AgentInput, AgentOptions, Middleware, ReActAgent, RunControl, RunOutcome
from rxagent.agent.compose import map_runs
from rxagent.context import RunContext, RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    RunStarted,
    TextDelta,
    ToolExecutionStarted,
    ToolResult,
    event_from_json,
    event_to_json,
)
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatChunk, ChatRequest
from rxagent.operators import ProgressCounts, to_list
from rxagent.session import Batch, Fact, Lease, MemoryStore
from rxagent.state import SessionKey
from rxagent.tools import Permissions, Toolkit, tool
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    Stall,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)
from tests.streams import ProgressLog, expect

from .helpers import check_invariants, run

ADA = RuntimeContext(user_id="ada", session_id="s1")
WAIT = 5.0
"""Seconds any wait in these tests may take before it counts as a hang."""


def delegate(task: str, call_id: str = "t1", tool_name: str = "researcher") -> ScriptedToolCall:
    return ScriptedToolCall(tool_name, {"task": task}, id=call_id)


def parent_agent(child_tool: Any, *script: ScriptedResponse | str, **options: Any) -> ReActAgent:
    return ReActAgent(ScriptedModel(list(script)), Toolkit([child_tool]), name="lead", **options)


def nested(events: Sequence[AgentEvent], parent: AgentResult) -> list[AgentEvent]:
    return [e for e in events if e.run_id != parent.run_id]


def tool_results(events: Sequence[AgentEvent]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


async def no_task_left(before: set[asyncio.Task[Any]]) -> None:
    """Every task started since ``before`` ends (none hangs on a cancelled child)."""
    leftover = asyncio.all_tasks() - before - {asyncio.current_task()}
    if leftover:
        _, pending = await asyncio.wait(leftover, timeout=WAIT)
        assert not pending, pending


# ---- an agent as a tool ------------------------------------------------------------------------------


async def test_a_child_agent_as_a_tool_nests_its_events_and_rolls_up_its_usage() -> None:
    child_model = ScriptedModel([ScriptedResponse(text="Paris is the capital.", usage=Usage(11, 5))])
    child_store = MemoryStore()
    child = ReActAgent(child_model, name="researcher", store=child_store)
    parent = parent_agent(
        child.as_tool(description="Finds facts."),
        ScriptedResponse(tool_calls=[delegate("Capital of France?")], usage=Usage(20, 3)),
        ScriptedResponse(text="It is Paris.", usage=Usage(30, 4)),
    )
    result, events = await run(parent, "What is the capital of France?", ADA)  # invariants per run

    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "It is Paris.", 2)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (20 + 30 + 11, 3 + 4 + 5)
    assert result.usage.model_calls == 3  # the child's call counts too
    (answer,) = tool_results(events)
    assert (answer.result.status, answer.result.text) == ("ok", "Paris is the capital.")
    assert child_model.requests[0].messages[-1].text == "Capital of France?"  # the task, nothing else
    assert [m.role for m in child_model.requests[0].messages] == ["user"]

    inner = nested(events, result)
    assert inner
    assert {e.parent_run_id for e in inner} == {result.run_id}
    assert isinstance(inner[0], RunStarted)
    assert inner[0].agent == "researcher"
    assert len({e.run_id for e in inner}) == 1
    child_result = inner[-1]
    assert isinstance(child_result, AgentResult)
    assert child_result.text == "Paris is the capital."
    assert {e.trace_id for e in events} == {result.trace_id}
    session = f"s1/researcher/{result.run_id}/t1"
    assert {e.session_id for e in inner} == {session}
    assert await stored_keys(child_store) == [
        ("ada", session)
    ]  # the child's session was saved, for the same user
    # the child's events come while its call runs: after the call started, before its result
    position = {id(e): i for i, e in enumerate(events)}
    started = next(e for e in events if isinstance(e, ToolExecutionStarted))
    assert position[id(started)] < position[id(inner[0])] < position[id(inner[-1])] < position[id(answer)]
    # the parent numbers only its own events; a nested event keeps its parent in JSON
    own = [e for e in events if e.run_id == result.run_id]
    assert [e.seq for e in own] == list(range(len(own)))
    assert result.seq == len(own) - 1
    assert all(e.parent_run_id is None for e in own)
    copy = event_from_json(event_to_json(child_result))
    assert isinstance(copy, AgentResult)
    assert copy.parent_run_id == result.run_id


class DetailSeen(Middleware):
    """Records how much of its run the caller watches, as the child's ``model_call`` hook sees it."""

    def __init__(self) -> None:
        self.details: list[str] = []

    def model_call(
        self, request: ChatRequest, ctx: RunContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        self.details.append(ctx.event_detail)
        return next(request)


class Watching(Middleware):
    """An ``agent`` hook that only watches: the run is no longer quiet."""

    def agent(
        self, run: Any, ctx: RunContext, next: Callable[[Any], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        return next(run)


async def test_a_quiet_parent_runs_the_child_quietly_and_still_counts_its_usage() -> None:
    seen = DetailSeen()
    child = ReActAgent(ScriptedModel(["Paris.", "Lyon."]), name="researcher", middleware=[seen])
    parent = parent_agent(
        child.as_tool(),
        ScriptedResponse(tool_calls=[delegate("Capital?")], usage=Usage(20, 3)),
        ScriptedResponse(text="Paris.", usage=Usage(30, 4)),
    )
    result = await parent.call("Capital of France?", ADA)
    assert result.text == "Paris."
    assert result.usage.model_calls == 3
    assert seen.details == ["result"]  # nobody watched the parent's events: the child built none either

    # A watched parent (an agent hook): the child's events flow, but call_observable still gives one result.
    watched = parent_agent(
        child.as_tool(),
        ScriptedResponse(tool_calls=[delegate("Second city?")]),
        "Lyon.",
        middleware=[Watching()],
    )
    results = await to_list(watched.call_observable("Second city of France?", ADA))
    assert [r.text for r in results] == ["Lyon."]
    assert results[0].usage.model_calls == 3
    assert seen.details == ["result", "all"]


async def test_without_deltas_the_child_leaves_them_out_too() -> None:
    child = ReActAgent(ScriptedModel(["Paris is the capital."]), name="researcher")
    parent = parent_agent(child.as_tool(), ScriptedResponse(tool_calls=[delegate("Capital?")]), "Paris.")
    events = await to_list(parent.stream_events("Capital of France?", ADA, deltas=False))
    result = check_invariants(events, deltas_match=False)
    inner = nested(events, result)
    assert inner
    assert not any(isinstance(e, TextDelta) for e in events)
    assert isinstance(inner[-1], AgentResult)
    assert inner[-1].text == "Paris is the capital."


class Capital(BaseModel):
    city: str
    country: str


async def test_a_structured_child_answers_with_json_and_a_child_without_one_is_an_error() -> None:
    child = ReActAgent(
        ScriptedModel(['{"city": "Paris", "country": "France"}', "no idea", "still no idea"]),
        name="researcher",
        output_type=Capital,
        options=AgentOptions(structured_retries=1),
    )
    parent = parent_agent(
        child.as_tool(),
        ScriptedResponse(tool_calls=[delegate("Capital of France?")]),
        ScriptedResponse(tool_calls=[delegate("Capital of Atlantis?", "t2")]),
        "Done.",
    )
    result, events = await run(parent, "Two capitals, please.", ADA)
    first, second = tool_results(events)
    assert first.result.status == "ok"
    assert Capital.model_validate(json.loads(first.result.text)) == Capital(city="Paris", country="France")
    assert second.result.status == "error"
    assert "gave no valid structured answer" in second.result.text
    assert result.text == "Done."


async def test_a_failing_child_gives_an_error_result_and_the_parent_goes_on() -> None:
    child = ReActAgent(ScriptedModel([RuntimeError("model exploded")]), name="researcher")
    parent = parent_agent(
        child.as_tool(),
        ScriptedResponse(tool_calls=[delegate("Capital?")]),
        "I could not find out.",
    )
    result, events = await run(parent, "Capital of France?", ADA)
    (failed,) = tool_results(events)
    assert failed.result.status == "error"
    assert failed.result.text == "Error: the agent 'researcher' failed: RuntimeError: model exploded"
    assert (result.reason, result.text) == ("MODEL_STOP", "I could not find out.")
    inner = nested(events, result)
    assert any(isinstance(e, ErrorEvent) and e.message == "model exploded" for e in inner)
    assert isinstance(inner[-1], AgentResult)
    assert inner[-1].reason == "ERROR"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    raise AssertionError("a refund waiting for approval never runs")


async def test_a_child_waiting_for_approval_gives_an_error_result_and_keeps_its_pending_call() -> None:
    child_store = MemoryStore()
    child = ReActAgent(
        ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")])]),
        Toolkit([refund]),
        name="clerk",
        permissions=Permissions().ask("refund", reason="money leaves"),
        store=child_store,
    )
    parent = parent_agent(
        child.as_tool(),
        ScriptedResponse(tool_calls=[delegate("Refund A-1.", tool_name="clerk")]),
        "A human must approve the refund.",
    )
    result, events = await run(parent, "Refund order A-1.", ADA)
    (waiting,) = tool_results(events)
    assert waiting.result.status == "error"
    assert "stopped waiting for a human to approve its call(s) to refund" in waiting.result.text
    assert result.reason == "MODEL_STOP"
    ((user, session),) = await stored_keys(child_store)
    assert waiting.result.text.count(session) == 1  # says where the decision can be given
    state = await child.sessions.state(RuntimeContext(user_id=user, session_id=session))
    assert [(p.call.id, p.kind) for p in state.pending] == [("r1", "ask")]


@dataclass
class Parked:
    """A child model whose calls wait until released; it records when they start and are cancelled."""

    calls: int = 0
    cancelled: int = 0
    started: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_seen: asyncio.Event = field(default_factory=asyncio.Event)
    gates: list[asyncio.Future[str]] = field(default_factory=lambda: [])

    async def respond(self, request: ChatRequest) -> str:
        self.calls += 1
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.gates.append(gate)
        self.started.set()
        try:
            return await gate
        except asyncio.CancelledError:
            self.cancelled += 1
            self.cancel_seen.set()
            raise


async def stored_keys(store: MemoryStore) -> list[SessionKey]:
    return [info.key for info in await store.sessions()]


class SavingStore(MemoryStore):
    """An in-memory store that says when a run's ending was recorded (a cancelled run records it on the
    loop, after the cancel)."""

    def __init__(self) -> None:
        super().__init__()
        self.saved = asyncio.Event()

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        seq = await super().append(lease, facts, batch=batch)
        if any(f.kind in ("run_finished", "run_failed", "run_cancelled") for f in facts):
            self.saved.set()
        return seq

    async def first_key(self) -> SessionKey:
        await asyncio.wait_for(self.saved.wait(), WAIT)
        (key,) = await stored_keys(self)
        return key


async def test_cancelling_the_parent_cancels_the_childs_model_call_and_releases_its_session() -> None:
    before = asyncio.all_tasks()
    parked = Parked()
    child_store = SavingStore()
    child = ReActAgent(FunctionModel(parked.respond), name="researcher", store=child_store)
    parent = parent_agent(child.as_tool(), ScriptedResponse(tool_calls=[delegate("Capital?")]))
    running = asyncio.create_task(parent.call("Capital of France?", ADA))
    await asyncio.wait_for(parked.started.wait(), WAIT)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.wait_for(parked.cancel_seen.wait(), WAIT)
    user, session = await child_store.first_key()
    child_ctx = RuntimeContext(user_id=user, session_id=session)
    parked.gates.clear()
    parked.started.clear()  # set by the first call: wait for the second's
    again = asyncio.create_task(child.call("Again?", child_ctx))  # the session was released
    await asyncio.wait_for(parked.started.wait(), WAIT)
    parked.gates[-1].set_result("Paris.")
    assert (await asyncio.wait_for(again, WAIT)).text == "Paris."
    assert (parked.calls, parked.cancelled) == (2, 1)
    state = await child.sessions.state(child_ctx)
    assert [m.text for m in state.messages] == ["Capital?", "Again?", "Paris."]  # the task was kept
    await no_task_left(before)


async def test_cancelling_the_parent_cancels_the_childs_running_tool() -> None:
    before = asyncio.all_tasks()
    tool_started, tool_cancelled = asyncio.Event(), asyncio.Event()

    @tool
    async def lookup(city: str) -> str:
        """Look a city up."""
        tool_started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            tool_cancelled.set()
            raise
        return city

    child_store = SavingStore()
    child = ReActAgent(
        ScriptedModel(
            [ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"city": "Paris"}, id="l1")])]
        ),
        Toolkit([lookup]),
        name="researcher",
        store=child_store,
    )
    parent = parent_agent(child.as_tool(), ScriptedResponse(tool_calls=[delegate("Capital?")]))
    seen = expect(parent.stream_events("Capital of France?", ADA))
    await asyncio.wait_for(tool_started.wait(), WAIT)
    seen.dispose()
    await asyncio.wait_for(tool_cancelled.wait(), WAIT)
    user, session = await child_store.first_key()
    state = await child.sessions.state(RuntimeContext(user_id=user, session_id=session))
    (results,) = [m.tool_results for m in state.messages if m.role == "tool"]
    assert [(r.tool_use_id, r.status) for r in results] == [("l1", "interrupted")]
    assert seen.outcome is None  # the parent emitted nothing more
    await no_task_left(before)


async def test_interrupting_the_parent_cancels_the_child_and_ends_the_parent_interrupted() -> None:
    before = asyncio.all_tasks()
    parked = Parked()
    child = ReActAgent(FunctionModel(parked.respond), name="researcher")
    parent = parent_agent(child.as_tool(), ScriptedResponse(tool_calls=[delegate("Capital?")]))
    control = RunControl()
    seen = expect(parent.stream_events("Capital of France?", ADA, control=control))
    await asyncio.wait_for(parked.started.wait(), WAIT)
    assert control.interrupt()
    await asyncio.wait_for(seen, WAIT)
    await asyncio.wait_for(parked.cancel_seen.wait(), WAIT)
    result = check_invariants(seen.items)  # the child's run, cut short, has no result
    assert result.reason == "INTERRUPTED"
    assert (parked.calls, parked.cancelled) == (1, 1)
    inner = nested(seen.items, result)
    assert inner
    assert not any(isinstance(e, AgentResult) for e in inner)
    assert result.usage.model_calls == 1  # a cancelled child reports no usage
    state = await parent.sessions.state(ADA)
    assert [(r.tool_use_id, r.status) for r in state.messages[-1].tool_results] == [("t1", "interrupted")]
    await no_task_left(before)


async def test_parallel_calls_run_in_their_own_sessions_at_once_and_shared_ones_take_turns() -> None:
    both_in = asyncio.Event()
    active = 0

    async def respond(request: ChatRequest) -> str:
        nonlocal active
        active += 1
        if active == 2:
            both_in.set()
        await both_in.wait()  # only two calls running at the same time get past this
        return f"about {request.messages[-1].text}"

    child_store = MemoryStore()
    child = ReActAgent(FunctionModel(respond), name="researcher", store=child_store)
    two = ScriptedResponse(tool_calls=[delegate("Paris", "t1"), delegate("Lyon", "t2")])
    parent = parent_agent(child.as_tool(), two, "Both done.")
    result = await asyncio.wait_for(parent.call("Two cities.", ADA), WAIT)
    assert result.text == "Both done."
    stored = await stored_keys(child_store)
    assert sorted(session for _, session in stored) == [
        f"s1/researcher/{result.run_id}/t1",
        f"s1/researcher/{result.run_id}/t2",
    ]

    # sessions="shared": one session per parent session, so the child remembers the earlier task
    shared_model = ScriptedModel(["Paris is big.", "Lyon is smaller than Paris."])
    shared_store = MemoryStore()
    shared = ReActAgent(shared_model, name="researcher", store=shared_store)
    parent = parent_agent(shared.as_tool(sessions="shared"), two, "Both done.")
    assert (await asyncio.wait_for(parent.call("Two cities.", ADA), WAIT)).text == "Both done."
    assert await stored_keys(shared_store) == [("ada", "s1/researcher")]
    assert [m.text for m in shared_model.requests[1].messages] == ["Paris", "Paris is big.", "Lyon"]


async def test_bad_tasks_and_bad_settings_are_refused() -> None:
    child_model = ScriptedModel()
    child = ReActAgent(child_model, name="researcher")
    parent = parent_agent(
        child.as_tool(max_task_chars=20),
        ScriptedResponse(
            tool_calls=[
                delegate("x" * 21, "long"),
                ScriptedToolCall("researcher", {"question": "no task"}, id="none"),
            ]
        ),
        "Gave up.",
    )
    result, events = await run(parent, "Go.", ADA)
    long, missing = tool_results(events)
    assert long.result.status == missing.result.status == "error"
    assert "task" in long.result.text
    assert "too long" in long.result.text
    assert "task" in missing.result.text
    assert child_model.requests == []  # the child never ran
    assert result.text == "Gave up."
    with pytest.raises(ValueError, match="tool name"):
        child.as_tool("bad name!")
    with pytest.raises(ValueError, match="max_task_chars"):
        child.as_tool(max_task_chars=0)
    with pytest.raises(ValueError, match="sessions"):
        child.as_tool(sessions="sometimes")  # type: ignore[arg-type]


# ---- an agent as a tool, over HTTP ---------------------------------------------------------------------


def answer(text: str, prompt: int, completion: int) -> Reply:
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}),
        text_chunk(text),
        finish_chunk("stop"),
        usage_chunk(prompt, completion),
        DONE,
    )


def delegation(task: str, prompt: int = 20, completion: int = 3) -> Reply:
    return Reply.sse(
        tool_chunk(0, "t1", "researcher", json.dumps({"task": task})),
        finish_chunk("tool_calls"),
        usage_chunk(prompt, completion),
        DONE,
    )


@pytest.fixture
async def models(server: OpenAIServer) -> AsyncIterator[tuple[Any, Any]]:
    async with make_model(server) as lead, make_model(server) as researcher:
        yield lead, researcher


async def test_over_http_the_child_nests_and_rolls_up_and_a_cancel_closes_its_request(
    server: OpenAIServer, models: tuple[Any, Any]
) -> None:
    lead_model, researcher_model = models
    child = ReActAgent(researcher_model, name="researcher")
    parent = ReActAgent(lead_model, Toolkit([child.as_tool()]), name="lead")
    server.script(delegation("Capital of France?"), answer("Paris.", 11, 5), answer("It is Paris.", 30, 4))
    result, events = await run(parent, "What is the capital of France?", ADA)
    assert result.text == "It is Paris."
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.model_calls) == (61, 12, 3)
    inner = nested(events, result)
    assert isinstance(inner[-1], AgentResult)
    assert inner[-1].parent_run_id == result.run_id
    child_body, last_body = server.requests[1].body, server.requests[2].body
    assert [m["content"] for m in child_body["messages"]] == ["Capital of France?"]
    assert last_body["messages"][-1] == {"role": "tool", "tool_call_id": "t1", "content": "Paris."}

    # cancel the parent while the child's response stalls: the child's HTTP request is closed
    before = asyncio.all_tasks()
    server.script(delegation("Capital of Spain?"), Reply.sse(text_chunk("Mad"), Stall()))
    running = asyncio.create_task(parent.call("And Spain?", RuntimeContext(user_id="ada", session_id="s2")))
    await asyncio.wait_for(server.stalled.wait(), WAIT)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await asyncio.wait_for(server.disconnected.wait(), WAIT)
    await no_task_left(before)


# ---- an agent as an operator over inputs -----------------------------------------------------------------


class Gauge:
    """A model that holds every call until the test releases it, counting the calls in flight."""

    def __init__(self, failing: str | None = None) -> None:
        self.active = 0
        self.peak = 0
        self.calls = 0
        self.cancelled = 0
        self.failing = failing
        self.parked: list[tuple[str, asyncio.Future[str]]] = []
        self.answered: list[str] = []
        self.changed = asyncio.Event()
        self.cancel_seen = asyncio.Event()

    async def respond(self, request: ChatRequest) -> str:
        question = request.messages[-1].text
        if question == self.failing:
            raise RuntimeError(f"cannot answer {question}")
        self.active += 1
        self.calls += 1
        self.peak = max(self.peak, self.active)
        gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.parked.append((question, gate))
        self.changed.set()
        try:
            return await gate
        except asyncio.CancelledError:
            self.cancelled += 1
            self.cancel_seen.set()
            raise
        finally:
            self.active -= 1

    async def wait_parked(self, count: int) -> None:
        async with asyncio.timeout(WAIT):
            while len(self.parked) < count:
                self.changed.clear()
                await self.changed.wait()

    def release_all(self) -> int:
        """Answer every parked call, newest first (so later inputs finish first)."""
        parked, self.parked = self.parked, []
        for question, gate in reversed(parked):
            gate.set_result(f"answer to {question}")
            self.answered.append(question)
        return len(parked)


QUESTIONS = [f"q{i}" for i in range(50)]


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "as_they_finish"])
async def test_fan_out_over_50_inputs_never_runs_more_than_4_at_once(ordered: bool) -> None:
    gauge = Gauge()
    store = MemoryStore()
    agent = ReActAgent(FunctionModel(gauge.respond), store=store)
    outcomes = asyncio.create_task(
        to_list(reactivex.from_iterable(QUESTIONS).pipe(agent.map_runs(max_concurrent=4, ordered=ordered)))
    )
    released = 0
    while released < len(QUESTIONS):
        await gauge.wait_parked(min(4, len(QUESTIONS) - released))
        assert gauge.active <= 4
        released += gauge.release_all()
    results = await asyncio.wait_for(outcomes, WAIT)

    assert gauge.peak == 4  # never more than 4 runs in flight, and the limit was used
    assert gauge.calls == 50
    assert len(results) == 50
    assert all(o.ok and o.text == f"answer to {o.input}" for o in results)
    assert sorted(o.index for o in results) == list(range(50))
    assert all(o.input == QUESTIONS[o.index] for o in results)
    indices = [o.index for o in results]
    if ordered:
        assert indices == list(range(50))
    else:  # as they finish: the test answers each group of parked calls newest first
        assert indices == [QUESTIONS.index(question) for question in gauge.answered]
        assert indices[:4] == [3, 2, 1, 0]
    stored = await stored_keys(store)
    assert len({session for _, session in stored}) == 50  # a session per input
    assert all(o.events == () for o in results)  # events only on request


async def test_fan_out_keeps_each_runs_events_on_request() -> None:
    agent = ReActAgent(FunctionModel(lambda request: f"answer to {request.messages[-1].text}"))
    fan_out = agent.map_runs(max_concurrent=2, events=True)
    results = await to_list(reactivex.from_iterable(["a", "b", "c"]).pipe(fan_out))
    assert [o.text for o in results] == ["answer to a", "answer to b", "answer to c"]
    for outcome in results:
        assert check_invariants(outcome.events, deltas_match=False) is outcome.result
        assert not any(isinstance(e, TextDelta) for e in outcome.events)
    with_deltas = await to_list(reactivex.of("d").pipe(agent.map_runs(events=True, deltas=True)))
    assert any(isinstance(e, TextDelta) for e in with_deltas[0].events)
    # re-subscribing runs every input again, in new sessions
    stream = reactivex.of("e").pipe(fan_out)
    first, second = await to_list(stream), await to_list(stream)
    assert first[0].result is not None
    assert second[0].result is not None
    assert first[0].result.session_id != second[0].result.session_id


async def test_fan_out_failures_are_outcomes_and_the_batch_goes_on() -> None:
    inputs: list[Any] = ["a", 42, "boom", "b"]

    def respond(request: ChatRequest) -> str:
        question = request.messages[-1].text
        if question == "boom":
            raise RuntimeError("model exploded")
        return f"answer to {question}"

    agent = ReActAgent(FunctionModel(respond))
    results = await to_list(reactivex.from_iterable(inputs).pipe(agent.map_runs(max_concurrent=2)))
    assert [o.index for o in results] == [0, 1, 2, 3]
    good_a, wrong_type, failed, good_b = results
    assert good_a.text == "answer to a"
    assert good_b.text == "answer to b"
    assert isinstance(wrong_type.error, TypeError)
    assert wrong_type.result is None
    assert wrong_type.input == 42
    assert isinstance(failed.error, RuntimeError)
    assert str(failed.error) == "model exploded"
    assert failed.result is not None
    assert failed.result.reason == "ERROR"
    assert not failed.ok
    assert not wrong_type.ok

    # a context factory that fails fails its input only; a good one gives each run its context
    def contexts(index: int, item: AgentInput) -> RuntimeContext:
        if item == "b":
            raise LookupError("no user for b")
        return RuntimeContext(user_id=f"user{index}", session_id=f"job-{item}")

    results = await to_list(reactivex.of("a", "b").pipe(agent.map_runs(context=contexts)))
    assert results[0].result is not None
    assert results[0].result.session_id == "job-a"
    assert (await agent.sessions.state(RuntimeContext(user_id="user0", session_id="job-a"))).messages
    assert isinstance(results[1].error, LookupError)


async def test_disposing_the_fan_out_cancels_every_run_in_flight() -> None:
    before = asyncio.all_tasks()
    gauge = Gauge()
    agent = ReActAgent(FunctionModel(gauge.respond))

    def contexts(index: int, item: AgentInput) -> RuntimeContext:
        return RuntimeContext(session_id=f"job-{index}")

    seen = expect(reactivex.from_iterable(QUESTIONS).pipe(agent.map_runs(max_concurrent=4, context=contexts)))
    await gauge.wait_parked(4)
    seen.dispose()
    assert seen.outcome is None
    assert seen.items == []
    # every run in flight was cancelled and released its session (which runs again); no other input ran
    gauge.parked.clear()
    again = asyncio.gather(*(agent.call(f"again {i}", contexts(i, None)) for i in range(4)))
    await gauge.wait_parked(4)
    gauge.release_all()
    assert [r.text for r in await asyncio.wait_for(again, WAIT)] == [f"answer to again {i}" for i in range(4)]
    assert gauge.cancelled == 4
    assert gauge.calls == 8
    await no_task_left(before)


async def test_a_failing_input_stream_fails_the_fan_out_and_cancels_its_runs() -> None:
    gauge = Gauge()
    agent = ReActAgent(FunctionModel(gauge.respond))
    inputs: Subject[AgentInput] = Subject()
    seen = expect(inputs.pipe(agent.map_runs(max_concurrent=2)))
    inputs.on_next("a")
    await gauge.wait_parked(1)
    inputs.on_error(OSError("the queue went away"))
    await asyncio.wait_for(seen, WAIT)
    assert isinstance(seen.error, OSError)
    await asyncio.wait_for(gauge.cancel_seen.wait(), WAIT)  # the run in flight was cancelled
    assert (gauge.calls, gauge.cancelled) == (1, 1)


def twenty_questions(request: ChatRequest) -> str:
    question = request.messages[-1].text
    if question == "q7":
        raise RuntimeError("the model fell over")
    return f"answer to {question}"


async def test_fan_out_progress_counts_runs_done_failed_and_running() -> None:
    gauge = Gauge()
    log = ProgressLog()
    agent = ReActAgent(FunctionModel(gauge.respond))
    questions = [f"q{i}" for i in range(20)]
    fan_out = agent.map_runs(max_concurrent=4, progress=log)
    seen = expect(reactivex.from_iterable(questions).pipe(fan_out))
    released = 0
    while released < 20:
        await gauge.wait_parked(min(4, 20 - released))
        released += gauge.release_all()
    await asyncio.wait_for(seen, WAIT)
    display = log.only
    assert display.counts[0].total == 20  # the list was counted before the first drawing
    assert max(c.running for c in display.counts) == 4
    assert display.last == ProgressCounts(total=20, running=0, done=20, failed=0, inputs_done=True)
    assert display.closes == 1

    # failed runs are counted as failed, and tqdm draws the final counts
    failing = ReActAgent(FunctionModel(twenty_questions))
    log = ProgressLog()
    outcomes = await to_list(reactivex.from_iterable(questions).pipe(failing.map_runs(progress=log)))
    assert [o.index for o in outcomes if not o.ok] == [7]
    assert log.only.last == ProgressCounts(total=20, running=0, done=19, failed=1, inputs_done=True)


async def test_fan_out_progress_bar_shows_the_final_counts_in_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    agent = ReActAgent(FunctionModel(twenty_questions))
    questions = reactivex.from_iterable([f"q{i}" for i in range(20)])
    outcomes = await to_list(questions.pipe(agent.map_runs(max_concurrent=4, progress="questions")))
    assert sum(o.ok for o in outcomes) == 19
    bar = capsys.readouterr().err.split("\r")[-1]
    assert bar.startswith("questions: 100%")
    assert "20/20" in bar
    assert "run/s" in bar or "s/run" in bar
    assert "done=19, failed=1, running=0" in bar


def test_fan_out_progress_without_tqdm_or_with_a_bad_option_is_refused_when_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent = ReActAgent(ScriptedModel())
    with pytest.raises(TypeError, match="progress must be"):
        agent.map_runs(progress=4)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ImportError, match=r"tqdm, which is not installed: pip install 'rxagent\[notebook\]'"):
        agent.map_runs(progress=True)
    with pytest.raises(ImportError, match="tqdm"):
        map_runs(agent, progress="label")
    agent.map_runs(progress=ProgressLog())  # a display of your own needs no tqdm


def test_fan_out_refuses_a_limit_below_one() -> None:
    agent = ReActAgent(ScriptedModel())
    for bad in (0, -1):
        with pytest.raises(ValueError, match="max_concurrent must be at least 1"):
            agent.map_runs(max_concurrent=bad)
        with pytest.raises(ValueError, match="max_concurrent must be at least 1"):
            map_runs(agent, max_concurrent=bad)


def test_run_outcome_says_whether_the_run_went_well() -> None:
    failed = RunOutcome(3, "q", None, RuntimeError("x"))
    assert (failed.ok, failed.text, failed.events) == (False, "", ())
