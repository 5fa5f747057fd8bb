"""Cancels, closes and crashes around a session's lease and its appends.

- An append of unknown outcome (it failed, or its caller was cancelled, after the store committed it) is
  found by its batch id and never made twice; a foreign append under the run's lease is told apart.
- A cancel that lands while a lease is taken leaves no lease behind: what the store granted is released.
- ``aclose()`` right after a cancel waits for the run to record its end and release its lease (a run that
  goes on, at most ``close_timeout`` seconds).
- A lease left by a process of this machine that was killed is taken over at once, not after its TTL; one
  of a live process is not.

Bad inputs tried: an append that fails after committing, a fact appended under the run's lease by someone
else, a cancel at every turn of the loop while the lease is being taken (real SQLite and PostgreSQL), a
cancel while the store's answer to a granted lease is on its way, ``aclose()`` while a run goes on (it
waits ``close_timeout``, no longer), a negative ``close_timeout``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.agent.inputs import SessionBusyError
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.model.scripted import FunctionModel, ScriptedModel
from rxagent.model.types import ChatRequest
from rxagent.session import (
    Batch,
    DelegatingStore,
    Fact,
    Lease,
    LeaseLostError,
    MemoryStore,
    Projection,
    SessionKeeper,
    SessionStore,
    SQLiteStore,
    Ticket,
    UncertainToolCallsError,
    Waiting,
    open_store,
)
from rxagent.session.owner import ProcessOwner
from rxagent.state import SessionKey

from .child_process import ChildProcess

CTX = RuntimeContext(user_id="ada", session_id="s1")
KEY: SessionKey = ("ada", "s1")
WAIT = 10


def kinds(facts: Sequence[object]) -> list[str]:
    return [str(getattr(f, "kind")) for f in facts]  # noqa: B009 - StoredFact or Fact alike


async def replayed(store: SessionStore, key: SessionKey = KEY) -> Projection:
    return Projection.replay(None, await store.read(key))


# ---- appends of unknown outcome -------------------------------------------------------------------------


class FailsAfterCommitting(DelegatingStore):
    """Commits the append that records a run's end, then fails once as a lost connection would: the
    caller cannot tell that it committed."""

    failed = False

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        seq = await super().append(lease, facts, batch=batch)
        if not self.failed and any(f.kind == "run_finished" for f in facts):
            self.failed = True
            raise ConnectionResetError("connection lost while the commit was acknowledged")
        return seq


async def test_an_append_that_failed_after_committing_counts_as_made(store: SessionStore) -> None:
    failing = FailsAfterCommitting(store)
    agent = ReActAgent(ScriptedModel(["first answer", "second answer"]), store=failing)
    # The save failed after the store committed it: the recorder asks the store, which has it.
    assert (await agent.call("one", CTX)).text == "first answer"
    assert failing.failed
    facts = await store.read(KEY)
    assert kinds(facts) == [
        "turn_started",
        "run_started",
        "message",
        "message",
        "run_finished",
        "turn_finished",
    ]
    assert (await agent.call("two", CTX)).text == "second answer"
    facts = await store.read(KEY)
    assert [f.seq for f in facts] == list(range(1, len(facts) + 1))
    assert kinds(facts).count("run_finished") == 2  # once per run
    texts = [m.text for m in (await replayed(store)).state.messages]
    assert texts == ["one", "first answer", "two", "second answer"]
    assert (await agent.sessions.state(CTX)).messages == (await replayed(store)).state.messages
    assert await store.lease(KEY) is None


class Intruder(DelegatingStore):
    """Before the run's first flush after its start, appends a fact of its own under the run's lease: a
    second writer that ignored the lease."""

    intruded = False

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        if not self.intruded and any(f.kind == "run_finished" for f in facts):
            self.intruded = True
            await super().append(lease, [Fact("decision", '{"call_id":"x","allow":true}')])
        return await super().append(lease, facts, batch=batch)


async def test_a_foreign_append_under_the_runs_lease_fails_the_run_and_leaves_the_log_whole(
    store: SessionStore,
) -> None:
    agent = ReActAgent(ScriptedModel(["answer", "later"]), store=Intruder(store))
    with pytest.raises(LeaseLostError, match="someone appended without the run's lease"):
        await agent.call("hi", CTX)
    facts = await store.read(KEY)
    assert [f.seq for f in facts] == list(range(1, len(facts) + 1))
    assert kinds(facts).count("decision") == 1
    assert "run_finished" not in kinds(facts)  # refused, not written after the intruder's fact
    # The session goes on from the log (the run's projection, ahead of it, was dropped).
    assert (await agent.call("again", CTX)).text == "later"
    assert (await agent.sessions.state(CTX)).messages == (await replayed(store)).state.messages


# ---- leases under cancel ---------------------------------------------------------------------------------


class SlowLeases(DelegatingStore):
    """Grants a run its turn (the lease), then holds the answer back until ``reply`` is set (an answer on
    its way)."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.granted = asyncio.Event()
        self.reply = asyncio.Event()

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        return await self.held_back(await super().enqueue(key, owner, ttl))

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        return await self.held_back(await super().take_turn(ticket, ttl))

    async def held_back(self, outcome: Lease | Waiting) -> Lease | Waiting:
        if isinstance(outcome, Lease):
            self.granted.set()
            await self.reply.wait()
        return outcome


async def test_a_cancel_while_the_granted_lease_is_on_its_way_leaves_no_lease(store: SessionStore) -> None:
    slow = SlowLeases(store)
    agent = ReActAgent(ScriptedModel(["not reached"]), store=slow)
    running = asyncio.ensure_future(agent.call("hi", CTX))
    await asyncio.wait_for(slow.granted.wait(), WAIT)
    assert await store.lease(KEY) is not None  # granted, and its answer is on its way
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    slow.reply.set()
    await agent.aclose()  # waits for the lease to be given back
    assert await store.lease(KEY) is None
    assert await store.head(KEY) == 0  # the run never started
    other = ReActAgent(ScriptedModel(["at once"]), store=store, options=AgentOptions(session_wait=0.5))
    assert (await other.call("hi", CTX)).text == "at once"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_cancel_at_any_turn_while_taking_the_lease_leaves_no_lease(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    where = str(tmp_path / "s.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    store = open_store(where)
    try:
        cancelled = 0
        for turns in range(16):
            agent = ReActAgent(ScriptedModel(["done"]), store=store)
            running = asyncio.ensure_future(agent.call("hi", RuntimeContext(session_id=f"s{turns}")))
            for _ in range(turns):
                await asyncio.sleep(0)  # one turn of the loop (the lease is being taken), not a wait
            running.cancel()
            try:
                await running
            except asyncio.CancelledError:
                cancelled += 1
            await agent.aclose()
            assert await store.lease((None, f"s{turns}")) is None, f"cancelled after {turns} turns"
        assert cancelled >= 8  # most landed before the run ended
    finally:
        await store.aclose()


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store's path or URL, for an agent that opens (and so closes) its store itself."""
    return str(tmp_path / "s.db") if request.param == "sqlite" else request.getfixturevalue("postgres_url")


async def test_aclose_right_after_a_cancel_records_the_runs_end_and_holds_no_lease(where: str) -> None:
    asked = asyncio.Event()

    async def never_answers(request: ChatRequest) -> str:
        asked.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable: the run is cancelled")

    agent = ReActAgent(FunctionModel(never_answers), store=where)
    running = asyncio.ensure_future(agent.call("hi", CTX))
    await asyncio.wait_for(asked.wait(), WAIT)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await agent.aclose()  # at once: the run's release has not started yet, and the store is the agent's
    store = open_store(where)
    try:
        facts = await store.read(KEY)
        assert kinds(facts)[:2] == ["turn_started", "run_started"]
        assert "run_cancelled" in kinds(facts)  # the run's end is recorded
        assert await store.lease(KEY) is None
    finally:
        await store.aclose()


async def test_aclose_waits_for_a_run_that_goes_on_at_most_close_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = VirtualClock()
    asked = asyncio.Event()
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def slow(request: ChatRequest) -> str:
        asked.set()
        return await answer

    store = MemoryStore()
    agent = ReActAgent(FunctionModel(slow), store=store, clock=clock)
    running = asyncio.ensure_future(agent.call("hi", CTX))
    await asyncio.wait_for(asked.wait(), WAIT)
    closing = asyncio.ensure_future(agent.aclose())
    await clock.advance(agent.keeper.close_timeout - 0.5)
    assert not closing.done()  # the run holds its session: aclose waits for it
    await clock.advance(1.0)
    await asyncio.wait_for(closing, WAIT)  # bounded: it gave up waiting
    assert "sessions still held after 10 s: 's1'" in caplog.text
    answer.set_result("late")
    assert (await asyncio.wait_for(running, WAIT)).text == "late"  # the store was not the agent's to close
    assert await store.lease(KEY) is None


def test_a_keeper_refuses_a_negative_close_timeout() -> None:
    with pytest.raises(ValueError, match="close_timeout"):
        SessionKeeper(MemoryStore(), close_timeout=-1)


# ---- a holder that is gone -------------------------------------------------------------------------------

CRASH_PROCESS = Path(__file__).with_name("crash_process.py")
CHILD_CTX = RuntimeContext(user_id="ada", session_id="orders")
CHILD_KEY: SessionKey = ("ada", "orders")


@pytest.fixture
async def children() -> AsyncIterator[list[ChildProcess]]:
    """Children to kill at the end whatever happens (a failing test leaves none running)."""
    started: list[ChildProcess] = []
    yield started
    await asyncio.gather(*(child.close() for child in started))


async def child_in_its_tool(tmp_path: Path, children: list[ChildProcess], call_id: str) -> ChildProcess:
    """A child process (crash_process.py) running an agent on CHILD_KEY in ``tmp_path/sessions.db`` with
    a lease of 300 s, stopped inside its side-effecting tool (its ``tool_dispatched`` is in the log)."""
    statuses = tmp_path / "statuses"
    statuses.mkdir(exist_ok=True)
    config = {
        "db": str(tmp_path / "sessions.db"),
        "user": CHILD_KEY[0],
        "session": CHILD_KEY[1],
        "ledger": str(tmp_path / "ledger.txt"),
        "statuses": str(statuses),
        "tool": "append_line",
        "arguments": {"line": f"{call_id} done"},
        "call_id": call_id,
        "lease_ttl": 300.0,
    }
    child = await ChildProcess.start(CRASH_PROCESS, json.dumps(config))
    children.append(child)
    assert await child.answer(within=60) == {"ready": True}
    child.send(input="Refund A-1.")
    started = await child.answer()
    assert started["started"] is True
    return child


async def test_after_a_crash_on_this_host_the_next_run_learns_of_the_unreconciled_call_at_once(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    child = await child_in_its_tool(tmp_path, children, "refund-1")
    async with SQLiteStore(tmp_path / "sessions.db") as store:
        held = await store.lease(CHILD_KEY)
        assert held is not None
        owner = ProcessOwner.parse(held.owner)
        assert owner is not None
        assert owner.pid == child.pid
        await child.kill()
        assert await store.lease(CHILD_KEY) == held  # its lease has minutes left: waiting would take them
        options = AgentOptions(session_wait=1.0, lease_ttl=300.0)
        agent = ReActAgent(ScriptedModel([]), store=store, options=options)
        with pytest.raises(UncertainToolCallsError, match="refund-1"):
            await agent.call(None, CHILD_CTX)  # within session_wait (1 s), else SessionBusyError
        assert await store.lease(CHILD_KEY) is None  # refused, and given back
        await agent.aclose()


async def test_a_lease_held_by_a_live_process_on_this_host_is_not_taken(
    tmp_path: Path, children: list[ChildProcess]
) -> None:
    child = await child_in_its_tool(tmp_path, children, "refund-2")  # alive, inside its tool
    async with SQLiteStore(tmp_path / "sessions.db") as store:
        agent = ReActAgent(ScriptedModel([]), store=store, options=AgentOptions(session_wait=0.2))
        with pytest.raises(SessionBusyError) as busy:
            await agent.call(None, CHILD_CTX)
        assert busy.value.holder is not None
        assert f":{child.pid}:" in busy.value.holder
        held = await store.lease(CHILD_KEY)
        assert held is not None
        assert held.owner == busy.value.holder
        await agent.aclose()
