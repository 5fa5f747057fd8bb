"""Live sessions: a handle drives a session from outside its runs, and its feed serves any number of watchers.

Bad inputs tried: a malformed ``traceparent`` on submit, a steer when no run is going, a steer that
arrives after the run's last boundary, a cancel before the run got to the loop, a watcher stalled for
10 000 items under each lag policy, a watcher that leaves mid-run, an interrupt from another thread.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
import tracemalloc
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ExternalResult, PendingToolCallsError, ReActAgent, SessionActivity, ToolDecision
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, TextDelta
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import FeedGap, FeedItem, FeedLagError, MemoryStore, SessionFeed
from rxagent.tools import Permissions, Toolkit, tool

CTX = RuntimeContext(user_id="u", session_id="live")
WAIT = 10.0


class Gate:
    """A model whose every call waits until the test opens it; it records what each request carried."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.requests: list[ChatRequest] = []
        self.entered = asyncio.Event()
        self.opened = asyncio.Event()

    async def respond(self, request: ChatRequest) -> str:
        self.requests.append(request)
        self.entered.set()
        await self.opened.wait()
        self.opened.clear()
        self.entered.clear()
        return self.answers.pop(0)

    async def next_call(self) -> None:
        await asyncio.wait_for(self.entered.wait(), WAIT)

    def open(self) -> None:
        self.opened.set()


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    return f"{city}: big"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs it elsewhere."""
    raise AssertionError("external")


async def collect_until_result(source: AsyncIterator[FeedItem | FeedGap], run_id: str) -> list[Any]:
    seen: list[Any] = []
    async with asyncio.timeout(WAIT):
        async for item in source:
            seen.append(item)
            if (
                isinstance(item, FeedItem)
                and isinstance(item.event, AgentResult)
                and item.event.run_id == run_id
            ):
                return seen
    raise AssertionError("the feed ended")


# ---- driving --------------------------------------------------------------------------------------------


async def test_a_submitted_run_is_awaited_and_the_queue_moves() -> None:
    gate = Gate("first", "second")
    session = ReActAgent(FunctionModel(gate.respond)).session(CTX)
    first = session.submit("one")
    second = session.submit("two")
    await gate.next_call()
    assert (first.status, first.position) == ("running", 0)
    assert (second.status, second.position) == ("queued", 1)
    assert session.status().state == "running"
    assert session.status().queued == 1
    gate.open()
    assert (await asyncio.wait_for(first, WAIT)).text == "first"
    await gate.next_call()
    assert (second.status, second.position) == ("running", 0)
    gate.open()
    assert (await asyncio.wait_for(second, WAIT)).text == "second"
    await asyncio.wait_for(session.wait(), WAIT)
    assert session.status().state == "idle"
    assert second.position is None


async def test_a_run_submitted_with_a_traceparent_joins_that_trace() -> None:
    agent = ReActAgent(ScriptedModel(["first", "second"]))
    session = agent.session(RuntimeContext(user_id="u", session_id="traced"))
    header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    joined = session.submit("one", traceparent=header)
    assert (joined.ctx.trace_id, joined.ctx.parent_span_id) == (
        "4bf92f3577b34da6a3ce929d0e0e4736",
        "00f067aa0ba902b7",
    )
    assert (await asyncio.wait_for(joined, WAIT)).trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    plain = session.submit("two")
    assert (await asyncio.wait_for(plain, WAIT)).trace_id == session.ctx.trace_id
    # A bad header is refused before anything is queued (a server ignores it and submits without it).
    with pytest.raises(ValueError, match="not a W3C traceparent"):
        session.submit("three", traceparent="00-nonsense")
    assert session.status().queued == 0
    assert session.last_run is plain


async def test_steer_lands_at_the_next_reasoning_boundary() -> None:
    gate = Gate()
    calls = [
        ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"city": "Oslo"})]),
        "Oslo is big and cold.",
    ]

    async def respond(request: ChatRequest) -> ScriptedResponse | str:
        gate.requests.append(request)
        gate.entered.set()
        await gate.opened.wait()
        gate.opened.clear()
        gate.entered.clear()
        return calls.pop(0)

    model = FunctionModel(respond)
    agent = ReActAgent(model, Toolkit([lookup]))
    session = agent.session(CTX)
    run = session.submit("Tell me about Oslo.")
    await gate.next_call()
    session.steer("Also mention the weather.")  # while the model thinks: not mid-stream
    gate.open()
    await gate.next_call()
    gate.open()
    result = await asyncio.wait_for(run, WAIT)
    assert result.text == "Oslo is big and cold."
    first, second = gate.requests
    assert "Also mention the weather." not in [m.text for m in first.messages]
    roles = [(m.role, m.text) for m in second.messages]
    assert roles[-1] == ("user", "Also mention the weather.")  # after the tool results, before the turn
    assert roles[-2][0] == "tool"
    facts = await agent.sessions.facts(CTX)
    assert sum(f.kind == "steer" for f in facts) == 1


async def test_a_steer_the_run_had_no_boundary_for_starts_the_next_run() -> None:
    gate = Gate("Hello.", "The weather is fine.")
    agent = ReActAgent(FunctionModel(gate.respond))
    session = agent.session(CTX)
    run = session.submit("Hi.")
    await gate.next_call()  # the only turn of this run is under way
    session.steer("And the weather?")
    gate.open()
    assert (await asyncio.wait_for(run, WAIT)).text == "Hello."
    await gate.next_call()  # the steered message started the next run
    gate.open()
    follow_up = session.last_run
    assert follow_up is not None
    assert follow_up is not run
    assert (await asyncio.wait_for(follow_up, WAIT)).text == "The weather is fine."
    assert [m.text for m in gate.requests[1].messages] == ["Hi.", "Hello.", "And the weather?"]


async def test_steer_with_no_run_going_starts_one() -> None:
    model = ScriptedModel(["Started by a steer."])
    session = ReActAgent(model).session(CTX)
    session.steer("Hello?")
    await asyncio.wait_for(session.wait(), WAIT)
    assert session.last_run is not None
    assert (await session.last_run).text == "Started by a steer."


async def test_inject_adds_context_without_a_model_call() -> None:
    model = ScriptedModel(["Noted: you like tea."])
    agent = ReActAgent(model)
    session = agent.session(CTX)
    session.inject("The user likes tea.")
    await asyncio.wait_for(session.wait(), WAIT)
    assert model.requests == []
    assert [m.text for m in (await agent.sessions.state(CTX)).messages] == ["The user likes tea."]
    await asyncio.wait_for(session.submit("What do I like?"), WAIT)
    assert [m.text for m in model.requests[0].messages] == ["The user likes tea.", "What do I like?"]


async def test_respond_answers_approvals_and_external_results_together() -> None:
    both = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
        ]
    )
    model = ScriptedModel([both, "Refunded and signed."])
    agent = ReActAgent(model, Toolkit([refund, sign]), permissions=Permissions().ask("refund"))
    session = agent.session(CTX)
    waiting = await asyncio.wait_for(session.submit("refund and sign"), WAIT)
    assert waiting.reason == "PERMISSION_ASKING"
    assert session.status().state == "waiting_for_approval"
    assert {p.call.id for p in session.status().pending} == {"r1", "e1"}
    done = await asyncio.wait_for(
        session.respond([ToolDecision("r1", allow=True), ExternalResult("e1", "signed by Ada")]), WAIT
    )
    assert done.text == "Refunded and signed."
    results = {r.tool_use_id: r.text for r in model.requests[1].messages[-1].tool_results}
    assert results == {"r1": "refunded A-1", "e1": "signed by Ada"}
    assert session.status().state == "idle"


async def test_interrupt_from_another_thread() -> None:
    gate = Gate("never")
    session = ReActAgent(FunctionModel(gate.respond)).session(CTX)
    run = session.submit("hi")
    await gate.next_call()
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(session.interrupt()))
    thread.start()
    await asyncio.to_thread(thread.join, WAIT)
    result = await asyncio.wait_for(run, WAIT)
    assert result.reason == "INTERRUPTED"
    assert answers == [True]
    assert session.interrupt() is False  # nothing is going now


async def test_submit_from_another_thread_and_wait_there() -> None:
    session = ReActAgent(ScriptedModel(["from a thread"])).session(CTX)

    def elsewhere() -> str:
        return session.submit("hi").result(timeout=WAIT).text

    assert await asyncio.to_thread(elsewhere) == "from a thread"


async def test_a_cancelled_run_handle_is_cancelled_and_the_session_moves_on() -> None:
    gate = Gate("first", "second")
    session = ReActAgent(FunctionModel(gate.respond)).session(CTX)
    first = session.submit("one")
    second = session.submit("two")
    await gate.next_call()
    second.cancel()  # still queued
    first.cancel()  # running
    with pytest.raises(asyncio.CancelledError):
        await first
    with pytest.raises(asyncio.CancelledError):
        await second
    third = session.submit("three")
    await gate.next_call()
    gate.open()
    assert (await asyncio.wait_for(third, WAIT)).text == "first"  # the gate's next answer


# ---- the feed ----------------------------------------------------------------------------------------------


def long_answer(deltas: int) -> ScriptedResponse:
    return ScriptedResponse(text="x" * deltas, chunk_size=1)


async def test_a_watcher_joining_mid_run_from_zero_sees_exactly_the_runs_items() -> None:
    gate = Gate("answer")
    agent = ReActAgent(FunctionModel(gate.respond))
    session = agent.session(CTX)
    early_items: list[Any] = []

    async def early() -> None:
        early_items.extend(await collect_until_result(session.watch(0), run.id))

    run = session.submit("hi")
    early_task = asyncio.ensure_future(early())
    await gate.next_call()  # mid-run: a late watcher starts from 0
    late = asyncio.ensure_future(collect_until_result(session.watch(0), run.id))
    gate.open()
    result = await asyncio.wait_for(run, WAIT)
    late_items = await asyncio.wait_for(late, WAIT)
    await asyncio.wait_for(early_task, WAIT)
    seqs = [i.seq for i in late_items]
    assert seqs == list(range(1, len(seqs) + 1))  # no gap, no duplicate
    assert [(i.seq, i.kind, i.payload) for i in late_items] == [
        (i.seq, i.kind, i.payload) for i in early_items
    ]
    events = [i.event for i in late_items if i.event is not None]
    assert events[0].type == "run_started"
    assert events[-1] == result
    stored = [(f.seq, f.kind, f.payload) for f in await agent.sessions.facts(CTX)]
    assert [(i.seq, i.kind, i.payload) for i in late_items] == stored[: len(late_items)]


async def test_the_first_watcher_of_a_run_nobody_watched_gets_what_is_not_in_the_log_yet() -> None:
    # No feed exists while nobody watches: the first watcher's feed gets the run's facts that are still
    # queued (the in-memory store appends them when the run ends), numbered as the log will number them.
    gate = Gate("answer")
    agent = ReActAgent(FunctionModel(gate.respond))
    session = agent.session(CTX)
    run = session.submit("hi")
    await gate.next_call()
    assert await agent.store.head(("u", "live")) < 2  # what the run did so far is queued, not appended
    late = asyncio.ensure_future(collect_until_result(session.watch(0), run.id))
    gate.open()
    await asyncio.wait_for(run, WAIT)
    items = await asyncio.wait_for(late, WAIT)
    stored = [(f.seq, f.kind, f.payload) for f in await agent.sessions.facts(CTX)]
    assert [(i.seq, i.kind, i.payload) for i in items] == stored[: len(items)]
    assert [i.kind for i in items][:2] == ["turn_started", "run_started"]


async def test_a_session_nobody_watches_keeps_no_feed() -> None:
    # Idle sessions hold no ring of items: a feed lives while a watcher or a running run holds it.
    agent = ReActAgent(ScriptedModel(["one", "two"]))
    session = agent.session(CTX)
    unheld = weakref.ref(agent.keeper.feed(("u", "live")))
    assert unheld() is None  # nothing held it
    first = session.submit("a")
    watcher = session.watch(0)
    seen = await collect_until_result(watcher, first.id)
    await watcher.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(first, WAIT)
    watched = weakref.ref(agent.keeper.feed(("u", "live")))
    assert watched() is None  # the watcher left and the run ended: the feed and its ring are gone
    second = session.submit("b")
    await asyncio.wait_for(second, WAIT)
    fresh = agent.keeper.feed(("u", "live"))
    assert fresh.held == 0  # the run nobody watched published nowhere
    replay = await collect_until_result(fresh.watch(0), second.id)  # the log has it all
    assert [(i.seq, i.payload) for i in replay[: len(seen)]] == [(i.seq, i.payload) for i in seen]
    stored = [(f.seq, f.payload) for f in await agent.sessions.facts(CTX)]
    assert [(i.seq, i.payload) for i in replay] == stored[: len(replay)]


async def test_a_late_watcher_catches_up_from_the_log_through_a_small_ring() -> None:
    agent = ReActAgent(ScriptedModel([long_answer(500)]))
    session = agent.session(CTX)
    feed = agent.keeper.feed(("u", "live"))
    feed.resize(16)  # a tiny ring: most of what a late watcher wants is only in the log
    run = session.submit("long")
    await asyncio.wait_for(run, WAIT)
    items = await collect_until_result(session.watch(0), run.id)
    assert [i.seq for i in items] == list(range(1, len(items) + 1))
    text = "".join(i.event.text for i in items if isinstance(i.event, TextDelta))
    assert text == "x" * 500


@pytest.mark.parametrize("policy", ["catch_up", "drop", "disconnect"])
async def test_a_watcher_stalled_for_10000_items_keeps_memory_bounded(policy: Any) -> None:
    store = MemoryStore()
    feed = SessionFeed(store, CTX_KEY, capacity=256)
    watcher = feed.watch(0, policy=policy)
    lease = await store.acquire(CTX_KEY, "writer", 60)
    assert lease is not None
    first = await publish(feed, store, lease, 1, 1)
    assert (await anext(watcher)).seq == first  # caught up, then it stalls
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for start in range(2, 10_002, 500):
            await publish(feed, store, lease, start, 500)
        held = tracemalloc.get_traced_memory()[0] - baseline
    finally:
        tracemalloc.stop()
    assert len(list(feed._ring)) <= 256
    assert held < 2_000_000  # items the stalled watcher missed are not kept for it
    if policy == "disconnect":
        with pytest.raises(FeedLagError, match=r"fell \d+ items behind"):
            await anext(watcher)
        return
    nxt = await anext(watcher)
    if policy == "drop":
        assert isinstance(nxt, FeedGap)
        assert (nxt.first, nxt.missed) == (2, 10_000 - 256)  # told exactly what it missed
        following = await anext(watcher)
        assert isinstance(following, FeedItem)
        assert following.seq == nxt.last + 1
    else:
        seqs = [nxt.seq] if isinstance(nxt, FeedItem) else []
        while len(seqs) < 10_000:
            item = await anext(watcher)
            assert isinstance(item, FeedItem)
            seqs.append(item.seq)
        assert seqs == list(range(2, 10_002))  # all of it, from the log and then the ring
    await watcher.aclose()


CTX_KEY = ("u", "feed")


async def publish(feed: SessionFeed, store: MemoryStore, lease: Any, first: int, count: int) -> int:
    from rxagent.session import Fact

    facts = [Fact("event", f'{{"n":{n}}}', "run") for n in range(first, first + count)]
    feed.publish([FeedItem(first + i, f) for i, f in enumerate(facts)])
    await store.append(lease, facts)
    feed.durable(first + count - 1)
    await asyncio.sleep(0)
    return first


async def test_a_watcher_leaving_never_stops_the_run() -> None:
    agent = ReActAgent(ScriptedModel([ScriptedResponse(text="y" * 200, chunk_size=1, delay=0.001)]))
    session = agent.session(CTX)
    run = session.submit("go")
    seen: list[FeedItem | FeedGap] = []
    enough = asyncio.Event()

    def on_item(item: FeedItem | FeedGap) -> None:
        seen.append(item)
        if len(seen) >= 20:
            enough.set()

    subscription = session.feed(0).subscribe(on_item)
    await asyncio.wait_for(enough.wait(), WAIT)
    subscription.dispose()
    result = await asyncio.wait_for(run, WAIT)
    assert (result.reason, result.text) == ("MODEL_STOP", "y" * 200)
    assert agent.keeper.feed(("u", "live")).watchers == 0


async def test_a_waiter_that_is_cancelled_stops_waiting_not_the_run() -> None:
    # An AG-UI stream whose client went away cancels its wait for the run: the run goes on, and its result
    # stays for every other waiter (before, the cancel reached the handle's future: the run read as
    # cancelled and its result was lost).
    gate = Gate("done")
    agent = ReActAgent(FunctionModel(gate.respond))
    run = agent.session(CTX).submit("go")
    await gate.next_call()
    waiting = asyncio.Event()

    async def wait() -> AgentResult:
        waiting.set()
        return await run  # in the same step as set(): the task is inside this await when the test resumes

    waiter = asyncio.ensure_future(wait())
    await waiting.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    gate.open()

    result = await asyncio.wait_for(run, WAIT)
    assert (result.reason, result.text) == ("MODEL_STOP", "done")
    assert run.result() is result


async def test_events_of_the_feed_are_the_runs_events() -> None:
    agent = ReActAgent(ScriptedModel(["hello"]))
    session = agent.session(CTX)
    seen: list[AgentEvent | FeedGap] = []
    finished = asyncio.Event()

    def on_event(event: AgentEvent | FeedGap) -> None:
        seen.append(event)
        if isinstance(event, AgentResult):
            finished.set()

    subscription = session.events(0).subscribe(on_event)
    result = await asyncio.wait_for(session.submit("hi"), WAIT)
    await asyncio.wait_for(finished.wait(), WAIT)
    subscription.dispose()
    assert seen[-1] == result
    assert all(not isinstance(e, FeedGap) for e in seen)
    types: Sequence[str] = [e.type for e in seen if not isinstance(e, FeedGap)]
    assert types[0] == "run_started"


# ---- status from the log, checking answers, stopping -------------------------------------------------------


async def test_status_is_never_idle_while_a_submitted_run_takes_its_session(tmp_path: Any) -> None:
    agent = ReActAgent(ScriptedModel(["done"]), store=str(tmp_path / "s.db"))  # taking a lease takes a while
    session = agent.session(CTX)
    run = session.submit("hi")
    states = set()
    while run.status != "done":  # done once its result is out (it then gives the session back)
        states.add(session.status().state)
        await asyncio.sleep(0)  # one loop turn: the run moves from its turn to its lease to running
    assert "idle" not in states
    assert states <= {"queued", "running"}
    assert (await run).text == "done"
    await agent.aclose()


async def test_a_session_this_process_never_ran_reads_its_status_and_feed_from_the_log(tmp_path: Any) -> None:
    path = str(tmp_path / "s.db")
    asking = ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")])
    first = ReActAgent(
        ScriptedModel([asking]), Toolkit([refund]), permissions=Permissions().ask("refund"), store=path
    )
    assert (await first.session(CTX).submit("refund")).reason == "PERMISSION_ASKING"
    stored = [(f.seq, f.kind, f.payload) for f in await first.sessions.facts(CTX)]
    await first.aclose()

    later = ReActAgent(
        ScriptedModel([]), Toolkit([refund]), permissions=Permissions().ask("refund"), store=path
    )
    session = later.session(CTX)
    assert session.status().state == "idle"  # this process holds nothing of the session
    status = await session.read_status()
    assert status.state == "waiting_for_approval"
    assert [(p.call.id, p.kind) for p in status.pending] == [("r1", "ask")]
    seen: list[tuple[int, str, str]] = []
    async with asyncio.timeout(WAIT):
        async for item in session.watch(0):
            assert isinstance(item, FeedItem)
            seen.append((item.seq, item.kind, item.payload))
            if item.seq == stored[-1][0]:
                break
    assert seen == stored  # the whole log, replayed
    await later.aclose()


async def test_check_refuses_answers_that_do_not_fit_and_changes_nothing() -> None:
    both = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
        ]
    )
    agent = ReActAgent(
        ScriptedModel([both]), Toolkit([refund, sign]), permissions=Permissions().ask("refund")
    )
    session = agent.session(CTX)
    await session.submit("refund and sign")
    before = len(await agent.sessions.facts(CTX))
    refused = [
        ([ToolDecision("nope", allow=True)], "no pending tool call with id 'nope'"),
        ([ExternalResult("r1", "done")], "asks for permission"),
        ([ToolDecision("e1", allow=True)], "is external"),
        ([ToolDecision("r1", allow=True), ToolDecision("r1", allow=False)], "two answers"),
        (
            [ToolDecision("r1", allow=True, arguments={"order": 5, "x": 1})],
            "the edited arguments were refused",
        ),
    ]
    for answers, message in refused:
        with pytest.raises(PendingToolCallsError, match=message):
            await session.check(answers)
    await session.check([ToolDecision("r1", allow=True), ExternalResult("e1", "signed")])  # these fit
    assert len(await agent.sessions.facts(CTX)) == before


async def test_stop_cancels_queued_runs_interrupts_the_running_one_and_keeps_late_steers() -> None:
    gate = Gate("first", "second", "third")
    agent = ReActAgent(FunctionModel(gate.respond))
    session = agent.session(CTX)
    running = session.submit("one")
    queued = session.submit("two")
    await gate.next_call()
    session.steer("too late for this run")  # waits in the run's inbox for a boundary that never comes
    await asyncio.wait_for(session.stop(grace=WAIT), WAIT)
    assert (await running).reason == "INTERRUPTED"
    with pytest.raises(asyncio.CancelledError):
        await queued
    assert session.last_run is queued  # the late steer started no run: it joined the history
    await asyncio.wait_for(session.wait(), WAIT)
    assert (await agent.sessions.state(CTX)).messages[-1].text == "too late for this run"
    assert len(gate.requests) == 1
    again = session.submit("after the stop")  # the handle takes work again
    await gate.next_call()
    gate.open()
    assert (await asyncio.wait_for(again, WAIT)).text == "first"


@pytest.mark.parametrize("module", ["rxagent.agent", "rxagent.agent.live"])
def test_session_state_is_a_deprecated_alias_of_session_activity(module: str) -> None:
    imported = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match="SessionState is renamed SessionActivity"):
        old = imported.SessionState
    assert old is SessionActivity
    with pytest.raises(AttributeError, match="SessionStat"):
        _ = imported.SessionStat
