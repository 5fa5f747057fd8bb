"""A recorded result is never lost, a dispatched call never counts as unstarted, a crashed run always ends
recorded: each case on a real SQLite file, deterministic.

- While the second call of a batch runs, the log already projects the first call's result (its result is
  in the state the run writes, so no later write of the run records a result list without it).
- A process that dies before its batch's closing write (sequential calls, and ``concurrency_safe`` calls
  run together) leaves both results in the log: the next run runs neither again and asks nobody.
- A log written before this rule (a ``partial_results`` fact without a result a ``tool_result`` fact
  recorded) still projects the result, and a dispatched call is never taken for one that never started.
- A checkpoint keeps the open run, so a run a crash left open is recorded as failed by whoever next takes
  the session (here: a message injected without a run), even after another process wrote a checkpoint.
- The feed gives a watcher only facts the log has: a run whose appends fail publishes facts that never
  become durable, and the watcher never gets their numbers, which the log gives to the next run's facts.

(tests/session/test_crash.py and tests/serve/test_crash_serve.py kill real processes at random moments.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from rxagent import Msg, ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.messages import TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import Batch, DelegatingStore, Fact, FeedGap, Lease, Projection, SQLiteStore
from rxagent.session.recorder import LOST_RUN, fact, message_fact
from rxagent.tools import Toolkit, tool

CTX = RuntimeContext(user_id="ada", session_id="orders")
KEY = ("ada", "orders")


def charges(ran: list[str], *, safe: bool, during: dict[str, object] | None = None) -> Toolkit:
    """``charge``: a side effect per call (counted in ``ran``); ``during[order]`` is awaited inside it."""

    @tool(concurrency_safe=safe)
    async def charge(order: str) -> str:
        """Charge an order.

        Args:
            order: the order.
        """
        ran.append(order)
        check = (during or {}).get(order)
        if check is not None:
            await check()  # type: ignore[operator]
        return f"charged {order}"

    return Toolkit([charge])


def batch_of_two() -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("charge", {"order": "A"}, id="a"),
            ScriptedToolCall("charge", {"order": "B"}, id="b"),
        ]
    )


async def test_while_the_second_call_runs_the_log_already_holds_the_first_calls_result(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    seen: list[Projection] = []

    async def read_the_log() -> None:
        seen.append(Projection.replay(None, await store.read(KEY)))

    ran: list[str] = []
    agent = ReActAgent(
        ScriptedModel([batch_of_two(), "Both charged."]),
        charges(ran, safe=False, during={"B": read_the_log}),
        store=store,
    )
    assert (await agent.call("Charge A and B.", CTX)).text == "Both charged."
    (during_b,) = seen
    assert [r.tool_use_id for r in during_b.state.partial_results] == ["a"]
    assert list(during_b.uncertain) == ["b"]
    assert during_b.dispatched == {"a", "b"}
    await agent.aclose()
    await store.aclose()


class DiesBeforeTheBatchCloses(DelegatingStore):
    """The process dies right before the write that sends the batch's results on as one tool message:
    that append and every one after it never reach the log, and the lease is never given back."""

    dead = False

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        if self.dead or any(f.kind == "message" and '"role":"tool"' in f.payload for f in facts):
            self.dead = True
            raise ConnectionError("the process is gone")
        return await super().append(lease, facts, batch=batch)

    async def release(self, lease: Lease) -> None:
        if not self.dead:
            await super().release(lease)


@pytest.mark.parametrize("safe", [False, True], ids=["sequential", "concurrency_safe"])
async def test_a_death_before_the_batch_closes_leaves_every_result_and_nothing_runs_again(
    tmp_path: Path, safe: bool
) -> None:
    path = tmp_path / "sessions.db"
    dying = DiesBeforeTheBatchCloses(SQLiteStore(path))
    ran: list[str] = []
    options = AgentOptions(lease_ttl=0.3, parallel_tools=safe)
    first = ReActAgent(
        ScriptedModel([batch_of_two(), "never recorded"]),
        charges(ran, safe=safe),
        store=dying,
        options=options,
    )
    with pytest.raises(ConnectionError):
        await first.call("Charge A and B.", CTX)
    assert sorted(ran) == ["A", "B"]
    assert dying.dead

    store = SQLiteStore(path)
    model = ScriptedModel(["Both charged."])
    second = ReActAgent(model, charges(ran, safe=safe), store=store, options=options)
    assert await second.sessions.uncertain(CTX) == []
    async with asyncio.timeout(10):  # the dead process's lease expires first
        result = await second.call(None, CTX)

    assert result.text == "Both charged."
    assert sorted(ran) == ["A", "B"]  # neither ran again, and nobody was asked
    (tool_message,) = [m for m in (await second.sessions.state(CTX)).messages if m.role == "tool"]
    assert [(r.tool_use_id, r.text) for r in tool_message.tool_results] == [
        ("a", "charged A"),
        ("b", "charged B"),
    ]
    kinds = [f.kind for f in await store.read(KEY)]
    assert "reconciled" not in kinds
    assert kinds.count("run_failed") == 1  # the dead run, ended by the next one
    await second.aclose()
    await first.aclose()
    await dying.aclose()
    await store.aclose()


def result(call_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, name="charge", output=(TextBlock(text=text),))


async def test_a_result_list_written_without_a_recorded_result_does_not_erase_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    a = ToolUseBlock(id="a", name="charge", input={"order": "A"}, raw_arguments='{"order": "A"}')
    b = ToolUseBlock(id="b", name="charge", input={"order": "B"}, raw_arguments='{"order": "B"}')
    lease = await store.acquire(KEY, "a process of an older rxagent that died", 60)
    assert lease is not None
    await store.append(
        lease,
        [
            fact("turn_started", {"turn_id": "turn_1"}, "run_1"),
            fact("run_started", {"run_id": "run_1", "turn_id": "turn_1"}, "run_1"),
            message_fact("message", Msg.user("Charge A and B."), "run_1"),
            message_fact("message", Msg.model_validate({"role": "assistant", "content": [a, b]}), "run_1"),
            fact("tool_dispatched", {"call": a.model_dump(mode="json")}, "run_1"),
            fact("tool_result", {"result": result("a", "charged A").model_dump(mode="json")}, "run_1"),
            fact("partial_results", {"results": []}, "run_1"),  # what the older recorder wrote next
            fact("tool_dispatched", {"call": b.model_dump(mode="json")}, "run_1"),
        ],  # killed while B ran
    )
    await store.release(lease)
    projection = Projection.replay(None, await store.read(KEY))
    assert [r.tool_use_id for r in projection.state.partial_results] == ["a"]
    twin = Projection.replay(projection.checkpoint(), [])  # and through a checkpoint
    assert [r.tool_use_id for r in twin.state.partial_results] == ["a"]
    assert (twin.dispatched, list(twin.uncertain), twin.open_run) == ({"a", "b"}, ["b"], "run_1")

    ran: list[str] = []
    agent = ReActAgent(ScriptedModel(["Both charged."]), charges(ran, safe=False), store=store)
    assert [c.id for c in await agent.sessions.uncertain(CTX)] == ["b"]
    from rxagent.session import Reconcile

    await agent.sessions.reconcile(CTX, [Reconcile("b", "retry")])
    assert (await agent.call(None, CTX)).text == "Both charged."
    assert ran == ["B"]  # A, whose result the log holds, never ran again
    await agent.aclose()
    await store.aclose()


async def test_a_run_a_crash_left_open_is_ended_by_whoever_takes_the_session_after_a_checkpoint(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    lease = await store.acquire(KEY, "the process that died", 60)
    assert lease is not None
    await store.append(
        lease,
        [
            fact("turn_started", {"turn_id": "turn_1"}, "run_1"),
            fact("run_started", {"run_id": "run_1", "turn_id": "turn_1"}, "run_1"),
            message_fact("message", Msg.user("Hello?"), "run_1"),
        ],  # killed in the model call
    )
    await store.release(lease)
    # Another process (an older one, say) wrote a checkpoint of the log as it stands.
    await store.save_checkpoint(KEY, Projection.replay(None, await store.read(KEY)).checkpoint())

    agent = ReActAgent(ScriptedModel([]), store=store)
    await agent.sessions.add_messages(CTX, [Msg.user("A note for later.")])  # an inject, with no run

    facts = await store.read(KEY)
    assert [(f.kind, f.data()) for f in facts[3:4]] == [
        ("run_failed", {"run_id": "run_1", "error": LOST_RUN})
    ]
    assert [f.kind for f in facts[4:]] == ["message"]
    await agent.sessions.add_messages(CTX, [Msg.user("Another.")])
    assert [f.kind for f in (await store.read(KEY))[5:]] == ["message"]  # ended once
    await agent.aclose()
    await store.aclose()


class FailsWhenTold(DelegatingStore):
    """Appends fail while ``failing`` is set (a writer that lost its store, or was fenced)."""

    failing = False

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        if self.failing:
            raise ConnectionError("the store is out of reach")
        return await super().append(lease, facts, batch=batch)


async def test_a_watcher_gets_only_facts_the_log_has_so_a_failed_writers_numbers_never_reach_it(
    tmp_path: Path,
) -> None:
    store = FailsWhenTold(SQLiteStore(tmp_path / "sessions.db"))
    entered, release = asyncio.Event(), asyncio.Event()

    async def respond(request: ChatRequest) -> str:
        asked = request.messages[-1].text
        if asked == "two":  # the run whose appends fail waits here, its first facts published
            entered.set()
            await release.wait()
        return {"one": "first answer", "two": "lost answer"}.get(asked, "third answer")

    agent = ReActAgent(FunctionModel(respond), store=store)
    session = agent.session(CTX)
    feed = await session.open_feed()
    feed.interval = 0.0  # watchers wake on the next loop turn: no clock in the way of what they are given
    seen: list[tuple[int, str, str]] = []
    third: list[str] = []

    async def watch() -> None:
        async for item in session.watch(0):
            assert not isinstance(item, FeedGap)
            seen.append((item.seq, item.kind, item.payload))
            if (
                item.kind == "event"
                and third
                and item.run_id == third[0]
                and '"agent_result"' in item.payload
            ):
                return

    watcher = asyncio.ensure_future(watch())
    assert (await session.submit("one")).text == "first answer"
    store.failing = True
    lost = session.submit("two")
    await asyncio.wait_for(entered.wait(), 10)
    assert feed.head > feed.durable_head  # its first facts are numbered in the feed, not in the log
    for _ in range(20):  # turns of the loop in which a watcher given them would have taken them
        await asyncio.sleep(0)
    release.set()
    with pytest.raises(ConnectionError):  # they were never appended
        await lost
    store.failing = False
    run = session.submit("three")
    third.append(run.id)
    assert (await run).text == "third answer"
    await asyncio.wait_for(watcher, 10)

    facts = await store.read(KEY)
    assert seen == [(f.seq, f.kind, f.payload) for f in facts]  # every number the log's, each once
    assert "lost answer" not in "".join(p for _, _, p in seen)
    await agent.aclose()
    await store.aclose()
