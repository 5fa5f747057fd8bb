"""Agents on session stores: sessions outlive agents, runs serialise through the lease, uncertain calls
are refused until reconciled, and the log reads back as turns.

Every test runs on each store of the conformance suite (the ``store`` fixture). Bad inputs tried: an
append that fails right after a tool ran (a crash in all but name), reconciling an id that is not
uncertain or the same id twice, forking onto a session that exists, letting go of a session whose run is
going or whose feed is watched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import PendingToolCallsError, ReActAgent, ToolDecision
from rxagent.agent.sessions import session_key
from rxagent.context import RuntimeContext
from rxagent.messages import mend_surrogates
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import (
    Batch,
    Fact,
    Lease,
    Reconcile,
    ReconcileError,
    SessionExistsError,
    SessionStore,
    UncertainToolCallsError,
)
from rxagent.tools import Permissions, Toolkit, tool

ADA = RuntimeContext(user_id="ada", session_id="s1")

REFUNDS: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order (a side effect that must not happen twice)."""
    REFUNDS.append(order)
    return f"refunded {order}"


@tool(idempotent=True)
def set_status(order: str, status: str) -> str:
    """Set an order's status (doing it twice does no more than once)."""
    REFUNDS.append(f"{order}:{status}")
    return f"{order} is {status}"


def refund_call(order: str = "A-1", id: str = "r1", name: str = "refund") -> ScriptedResponse:
    arguments: dict[str, Any] = {"order": order} if name == "refund" else {"order": order, "status": "done"}
    return ScriptedResponse(tool_calls=[ScriptedToolCall(name, arguments, id=id)])


class Broken:
    """From the first append of a tool result on, every append fails until ``heal()``: to the log, the
    process died right after the tool ran."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self.dead = False
        self._append = store.append

        async def append(lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
            if self.dead or any(f.kind == "tool_result" for f in facts):
                self.dead = True
                raise OSError("the machine lost power")
            return await self._append(lease, facts, batch=batch)

        store.append = append  # type: ignore[method-assign]

    def heal(self) -> None:
        self.store.append = self._append  # type: ignore[method-assign]


async def test_a_session_outlives_its_agent(store: SessionStore) -> None:
    first = ReActAgent(ScriptedModel(["Nice to meet you, Ada."]), store=store)
    await first.call("My name is Ada.", ADA)
    model = ScriptedModel(["You are Ada."])
    second = ReActAgent(model, store=store)  # a new process, as far as the session knows
    assert (await second.call("Who am I?", ADA)).text == "You are Ada."
    sent = [m.text for m in model.requests[0].messages]
    assert sent == ["My name is Ada.", "Nice to meet you, Ada.", "Who am I?"]


async def test_two_agents_on_one_store_take_turns_and_both_runs_are_kept(store: SessionStore) -> None:
    inside = 0
    most = 0
    gate = asyncio.Event()

    async def respond(request: ChatRequest) -> str:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await gate.wait()
        inside -= 1
        return f"re: {request.messages[-1].text}"

    one = ReActAgent(FunctionModel(respond), store=store)
    two = ReActAgent(FunctionModel(respond), store=store)
    runs = [asyncio.ensure_future(one.call("first", ADA)), asyncio.ensure_future(two.call("second", ADA))]
    for _ in range(20):  # both runs get going; only one may reach its model
        await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(asyncio.gather(*runs), 10)
    assert most == 1
    texts = [m.text for m in (await one.sessions.state(ADA)).messages]
    assert sorted(texts) == sorted(["first", "re: first", "second", "re: second"])
    assert texts.index("re: first") == texts.index("first") + 1 or texts.index("re: second") == 1


async def crash_after_refund(store: SessionStore) -> ReActAgent:
    REFUNDS.clear()
    broken = Broken(store)
    agent = ReActAgent(ScriptedModel([refund_call()]), Toolkit([refund]), store=store)
    with pytest.raises(OSError, match="lost power"):
        await agent.call("refund A-1", ADA)
    broken.heal()  # the machine comes back
    assert REFUNDS == ["A-1"]  # the refund happened; the log does not know how it ended
    return agent


async def test_a_call_with_no_recorded_outcome_refuses_the_next_run_until_reconciled(
    durable_store: SessionStore,
) -> None:
    store = durable_store  # a crash leaves a trace only in a store that outlives the process
    await crash_after_refund(store)
    model = ScriptedModel(["Refund confirmed."])
    restarted = ReActAgent(model, Toolkit([refund]), store=store)
    [uncertain] = await restarted.sessions.uncertain(ADA)
    assert (uncertain.id, uncertain.name) == ("r1", "refund")
    with pytest.raises(UncertainToolCallsError, match=r"refund .*A-1.* \(id r1\)"):
        await restarted.call("did it work?", ADA)
    await restarted.sessions.reconcile(
        ADA, [Reconcile("r1", "succeeded", "refunded A-1 (checked with the bank)")]
    )
    assert await restarted.sessions.uncertain(ADA) == []
    result = await restarted.call("did it work?", ADA)
    assert result.text == "Refund confirmed."
    assert REFUNDS == ["A-1"]  # never twice
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "user"]
    assert sent[2].tool_results[0].text == "refunded A-1 (checked with the bank)"


async def test_a_call_reconciled_as_retry_runs_again_exactly_once(durable_store: SessionStore) -> None:
    store = durable_store  # a crash leaves a trace only in a store that outlives the process
    await crash_after_refund(store)
    REFUNDS.clear()  # say the bank shows no refund
    model = ScriptedModel(["Refunded now."])
    restarted = ReActAgent(model, Toolkit([refund]), store=store)
    await restarted.sessions.reconcile(ADA, [Reconcile("r1", "retry")])
    result = await restarted.call(None, ADA)
    assert result.text == "Refunded now."
    assert REFUNDS == ["A-1"]
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool"]
    assert sent[2].tool_results[0].text == "refunded A-1"


async def test_a_call_reconciled_as_failed_tells_the_model(durable_store: SessionStore) -> None:
    store = durable_store  # a crash leaves a trace only in a store that outlives the process
    await crash_after_refund(store)
    model = ScriptedModel(["I will try again later."])
    restarted = ReActAgent(model, Toolkit([refund]), store=store)
    await restarted.sessions.reconcile(ADA, [Reconcile("r1", "failed", "the bank rejected it")])
    await restarted.call("and?", ADA)
    result = model.requests[0].messages[2].tool_results[0]
    assert result.status == "error"
    assert "reconciled as failed: the bank rejected it" in result.text


async def test_reconciling_what_is_not_uncertain_is_refused_and_changes_nothing(
    durable_store: SessionStore,
) -> None:
    store = durable_store  # a crash leaves a trace only in a store that outlives the process
    agent = await crash_after_refund(store)
    before = await agent.sessions.facts(ADA)
    with pytest.raises(ReconcileError, match="no uncertain call with id 'nope'"):
        await agent.sessions.reconcile(ADA, [Reconcile("r1", "retry"), Reconcile("nope", "retry")])
    with pytest.raises(ReconcileError, match="twice"):
        await agent.sessions.reconcile(ADA, [Reconcile("r1", "retry"), Reconcile("r1", "failed")])
    assert await agent.sessions.facts(ADA) == before
    assert [c.id for c in await agent.sessions.uncertain(ADA)] == ["r1"]


async def test_an_idempotent_call_with_no_outcome_is_run_again_by_itself(durable_store: SessionStore) -> None:
    store = durable_store  # a crash leaves a trace only in a store that outlives the process
    REFUNDS.clear()
    broken = Broken(store)
    crashed = ReActAgent(
        ScriptedModel([refund_call(name="set_status", id="s1")]), Toolkit([set_status]), store=store
    )
    with pytest.raises(OSError, match="lost power"):
        await crashed.call("mark A-1 done", ADA)
    broken.heal()
    model = ScriptedModel(["Marked."])
    restarted = ReActAgent(model, Toolkit([set_status]), store=store)
    result = await restarted.call(None, ADA)
    assert result.text == "Marked."
    assert REFUNDS == ["A-1:done", "A-1:done"]  # safe to repeat, so it was
    facts = await restarted.sessions.facts(ADA)
    assert any(f.kind == "reconciled" and '"automatic":true' in f.payload for f in facts)


async def test_the_log_reads_back_as_turns_with_their_runs(store: SessionStore) -> None:
    REFUNDS.clear()
    agent = ReActAgent(
        ScriptedModel(["Hello.", refund_call(), "Refunded."]),
        Toolkit([refund]),
        permissions=Permissions().ask("refund"),
        store=store,
    )
    await agent.call("hi", ADA)
    waiting = await agent.call("refund A-1", ADA)
    assert waiting.reason == "PERMISSION_ASKING"
    with pytest.raises(PendingToolCallsError):
        await agent.call("never mind", ADA)
    await agent.call(ToolDecision("r1", allow=True), ADA)
    turns = await agent.sessions.turns(ADA)
    assert [(t.input, t.reason) for t in turns] == [(["hi"], "MODEL_STOP"), (["refund A-1"], "MODEL_STOP")]
    paused, refused, resumed = turns[1].runs
    assert (paused.outcome, paused.reason) == ("finished", "PERMISSION_ASKING")
    assert refused.outcome == "failed"
    assert "PendingToolCallsError" in (refused.error or "")
    assert (resumed.outcome, resumed.reason) == ("finished", "MODEL_STOP")
    assert any(f.kind == "decision" and '"approval"' in f.payload for f in await agent.sessions.facts(ADA))


async def test_a_cancelled_run_leaves_its_input_and_a_record(store: SessionStore) -> None:
    started = asyncio.Event()

    async def slow(request: ChatRequest) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = ReActAgent(FunctionModel(slow), store=store)
    running = asyncio.ensure_future(agent.call("remember this", ADA))
    await asyncio.wait_for(started.wait(), 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    # The cancel is recorded on the loop, after the cancel, before the session is free again: taking the
    # session (to add nothing) waits for it.
    await asyncio.wait_for(agent.sessions.add_messages(ADA, []), 5)
    kinds = [f.kind for f in await agent.sessions.facts(ADA)]
    assert kinds[:3] == ["turn_started", "run_started", "message"]
    assert kinds[-1] == "run_cancelled"
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["remember this"]


async def test_a_run_cancelled_while_its_save_is_appended_records_each_fact_once(store: SessionStore) -> None:
    # A store may commit an append whose caller was cancelled meanwhile (SQLite's writer thread and the
    # PostgreSQL server go on with it). The recorder must count it: before, the run's release appended the
    # same facts again, found the log's head past where it expected, and gave the session up as stolen.
    committed, reply = asyncio.Event(), asyncio.Event()
    append = store.append

    async def append_then_reply(lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        seq = await append(lease, facts, batch=batch)
        if any(f.kind == "run_finished" for f in facts) and not reply.is_set():
            committed.set()
            await reply.wait()  # committed; the reply is on its way when the caller is cancelled
        return seq

    store.append = append_then_reply  # type: ignore[method-assign]
    agent = ReActAgent(ScriptedModel(["done", "and again"]), store=store)
    running = asyncio.ensure_future(agent.call("hi", ADA))
    await asyncio.wait_for(committed.wait(), 5)
    running.cancel()
    reply.set()
    with pytest.raises(asyncio.CancelledError):
        await running
    # The session is free once the release is done.
    await asyncio.wait_for(agent.sessions.add_messages(ADA, []), 5)

    facts = await agent.sessions.facts(ADA)
    assert [f.seq for f in facts] == list(range(1, len(facts) + 1))
    kinds = [f.kind for f in facts]
    assert (kinds.count("run_started"), kinds.count("run_finished"), kinds.count("message")) == (1, 1, 2)
    assert kinds[-1] == "run_cancelled"  # the consumer left before the result: recorded too
    assert (await agent.call("again?", ADA)).text == "and again"
    texts = [m.text for m in (await agent.sessions.state(ADA)).messages]
    assert texts == ["hi", "done", "again?", "and again"]


async def test_fork_and_delete(store: SessionStore) -> None:
    agent = ReActAgent(ScriptedModel(["one", "two", "branch"]), store=store)
    await agent.call("first", ADA)
    after_first = len(await agent.sessions.facts(ADA))
    await agent.call("second", ADA)
    branch = RuntimeContext(user_id="ada", session_id="branch")
    await agent.sessions.fork(ADA, after_first, branch)
    assert [m.text for m in (await agent.sessions.state(branch)).messages] == ["first", "one"]
    assert (await agent.call("other way", branch)).text == "branch"
    with pytest.raises(SessionExistsError):
        await agent.sessions.fork(ADA, 1, branch)
    assert {info.key for info in await agent.sessions.list()} >= {("ada", "s1"), ("ada", "branch")}
    await agent.sessions.delete(branch)
    assert await agent.sessions.facts(branch) == []
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == ["first", "one", "second", "two"]


async def test_a_session_leaves_memory_only_when_nothing_uses_it_and_comes_back_whole(
    store: SessionStore,
) -> None:
    gate = asyncio.Event()

    async def respond(request: ChatRequest) -> str:
        await gate.wait()
        return f"answer {len(request.messages)}"

    agent = ReActAgent(FunctionModel(respond), store=store)
    handle = agent.session(ADA)
    run = handle.submit("first")
    assert not handle.idle
    assert not agent.sessions.evict(ADA)  # its run is queued or going: nothing changes
    assert agent.session(ADA) is handle
    gate.set()
    await run
    await handle.wait()
    feed = await handle.open_feed()
    watching = feed.watch_batches(0)
    await anext(watching)  # a watcher of its feed holds it too
    assert not agent.sessions.evict(ADA)
    await watching.aclose()
    assert handle.idle
    assert agent.keeper.cached(session_key(ADA)) is not None
    assert agent.sessions.evict(ADA)
    assert agent.keeper.cached(session_key(ADA)) is None  # its projection went with it
    again = agent.session(ADA)
    assert again is not handle  # a new handle, loaded from the log
    assert (await again.submit("second")).text == "answer 3"
    assert [m.text for m in (await agent.sessions.state(ADA)).messages] == [
        "first",
        "answer 1",
        "second",
        "answer 3",
    ]


async def test_a_turn_appends_only_its_own_facts(store: SessionStore) -> None:
    agent = ReActAgent(ScriptedModel([f"answer {n}" for n in range(30)]), store=store)
    counts = []
    for n in range(30):
        before = len(await agent.sessions.facts(ADA))
        await agent.call(f"question {n}", ADA)
        counts.append(len(await agent.sessions.facts(ADA)) - before)
    assert set(counts[1:]) == {counts[1]}  # the same facts per turn, however long the history


async def test_text_with_a_lone_surrogate_is_recorded_and_read_back(store: SessionStore) -> None:
    # A server may cut an emoji's surrogate pair across two deltas (and a broken one may never pair it):
    # neither may fail the run when it is written to the log.
    halves = ScriptedResponse(text="smile \ud83d\ude00 and a stray \udc00", chunk_size=7)
    agent = ReActAgent(ScriptedModel([halves]), store=store)
    session = agent.session(ADA)
    result = await asyncio.wait_for(session.submit("hi"), 10)
    assert result.text == "smile 😀 and a stray \udc00"  # the pair mended, the stray kept
    restarted = ReActAgent(ScriptedModel([]), store=store)
    assert (await restarted.sessions.state(ADA)).messages[-1].text == result.text
    deltas = "".join(
        e.text  # type: ignore[union-attr]
        for e in (item.event for item in [*(await _items(restarted))])
        if e is not None and e.type == "text_delta"
    )
    assert mend_surrogates(deltas) == result.text


async def _items(agent: ReActAgent) -> list[Any]:
    from rxagent.session import FeedItem

    return [FeedItem.of(f) for f in await agent.sessions.facts(ADA)]


@pytest.mark.parametrize("text", ["plain, with é and ✓", "a stray \udc00 half of a pair"])
def test_a_checkpoint_reads_back_as_the_projection_it_was_taken_of(text: str) -> None:
    from rxagent.messages import Msg
    from rxagent.session import Projection

    projection = Projection()
    projection.state.messages.extend([Msg.user(text), Msg.assistant("ok")])
    projection.state.extras["ratio"] = 1e-7
    projection.dispatched.add("call_1")
    projection.turn_id = "turn_1"
    twin = Projection.replay(projection.checkpoint(), [])
    assert twin.state == projection.state
    assert (twin.dispatched, twin.turn_id, twin.seq) == ({"call_1"}, "turn_1", projection.seq)
