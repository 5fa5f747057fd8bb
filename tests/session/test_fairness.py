"""Fair turns: runs on one session start in the order they were submitted, whichever agent object submitted
them, and the line never stalls on a run that is gone.

Every test runs on each store of the conformance suite (the ``store`` fixture: memory, SQLite, PostgreSQL,
and a :class:`~rxagent.session.DelegatingStore`), with two agent objects sharing the store as a web app
that builds an agent per request does. The agents wait on a :class:`~rxagent.clock.VirtualClock` and the
leases and tickets expire on the store's :class:`~tests.session.conftest.FakeNow`, so nothing here waits
for real time: a test that fails does so by its ``wait_for`` guard.

The processes' side (two processes on SQLite and on PostgreSQL) is in test_two_process.py.

On PostgreSQL, a run waiting for another process's run is woken by the database's notification, with its
clock standing still.

Bad inputs tried: a run cancelled between its ticket being taken and the answer reaching it, one cancelled
between being granted the lease and receiving it, one cancelled while it waits, and a waiter that crashed
and left its ticket behind.
"""

from __future__ import annotations

import asyncio
import random
from typing import Literal

import pytest

from rxagent.agent import ReActAgent, RunControl, RunHandle
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import DelegatingStore, Lease, SessionStore, Ticket, Waiting
from rxagent.session.postgres import PostgresStore
from rxagent.state import SessionKey

from .conftest import FakeNow

ADA = RuntimeContext(user_id="ada", session_id="s1")
KEY: SessionKey = ("ada", "s1")
WAIT = 20.0
"""Seconds a test waits for a run at most (a guard: nothing here takes real time when it works)."""


class Joined(DelegatingStore):
    """Tells the test where each run joined the session's line: the store's answer to its enqueue."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.answers: asyncio.Queue[Lease | Waiting] = asyncio.Queue()

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        answer = await super().enqueue(key, owner, ttl)
        self.answers.put_nowait(answer)
        return answer

    async def joined(self) -> int:
        """The place the next run to join took (``0``: it got the session at once)."""
        answer = await asyncio.wait_for(self.answers.get(), WAIT)
        return 0 if isinstance(answer, Lease) else answer.ahead + 1


class HeldAnswer(Joined):
    """Holds back the answer of the first ``call`` that gives a run something (a ticket from ``enqueue``,
    the lease from ``take_turn``) once the store made it, until :attr:`answer` is set: its caller is
    cancelled meanwhile."""

    def __init__(self, inner: SessionStore, call: Literal["enqueue", "take_turn"]) -> None:
        super().__init__(inner)
        self.call = call
        self.made = asyncio.Event()
        """Set when the held call has been made in the store."""
        self.answer = asyncio.Event()
        """Set by the test: the held answer goes back to its caller (who is gone by then)."""

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        answer = await super().enqueue(key, owner, ttl)
        if self.call == "enqueue" and isinstance(answer, Waiting):
            await self._hold()
        return answer

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        answer = await super().take_turn(ticket, ttl)
        if self.call == "take_turn" and isinstance(answer, Lease):
            await self._hold()
        return answer

    async def _hold(self) -> None:
        if not self.made.is_set():
            self.made.set()
            await self.answer.wait()


class Model:
    """The agents' model: answers ``re: <text>`` and notes the order the runs reached it in; the run
    whose text is :attr:`held` waits at its model call until :attr:`gate` is set."""

    def __init__(self, held: str) -> None:
        self.held = held
        self.gate = asyncio.Event()
        self.started: list[str] = []
        self.reached = {held: asyncio.Event()}

    async def respond(self, request: ChatRequest) -> str:
        text = request.messages[-1].text
        self.started.append(text)
        self.reached.setdefault(text, asyncio.Event()).set()
        if text == self.held:
            await self.gate.wait()
        return f"re: {text}"

    async def holding(self) -> None:
        """Return once the held run has the session (it reached its model)."""
        await asyncio.wait_for(self.reached[self.held].wait(), WAIT)


def two_agents(store: SessionStore, model: Model, clock: VirtualClock) -> tuple[ReActAgent, ReActAgent]:
    """Two agent objects on one store, as two requests of a web app would build them."""
    return (
        ReActAgent(FunctionModel(model.respond), store=store, clock=clock, name="A"),
        ReActAgent(FunctionModel(model.respond), store=store, clock=clock, name="B"),
    )


async def run_inputs(store: SessionStore) -> list[str]:
    """The input of each run, in the order the runs started (their ``run_started`` facts)."""
    inputs: list[str] = []
    for fact in await store.read(KEY):
        if fact.kind == "run_started":
            data = fact.data()
            assert isinstance(data, dict)
            messages = data["input"]
            assert isinstance(messages, list)
            inputs.append("".join(str(b["text"]) for m in messages for b in m["content"]))  # type: ignore[index,union-attr]
    return inputs


async def nothing_held(store: SessionStore) -> bool:
    """Whether the session's line is empty and its lease free: a newcomer gets the lease at once."""
    probe = await store.enqueue(KEY, "probe", 30)
    if isinstance(probe, Lease):
        await store.release(probe)
        return True
    await store.drop_ticket(probe.ticket)
    return False


def submission_order(count: int) -> list[Literal["A", "B"]]:
    """Which agent submits each run: A first, B second, then a fixed mix with back-to-back runs of each."""
    choose = random.Random(21)
    return ["A", "B", *(choose.choice(("A", "B")) for _ in range(count - 2))]


async def test_runs_of_two_agents_on_one_store_start_in_the_order_they_were_submitted(
    store: SessionStore, clock: VirtualClock
) -> None:
    line = Joined(store)
    order = submission_order(31)
    texts = [f"{name}{n}" for n, name in enumerate(order)]
    model = Model(held=texts[0])
    agents = dict(zip("AB", two_agents(line, model, clock), strict=True))
    sessions = {name: agent.session(ADA) for name, agent in agents.items()}
    runs: list[RunHandle] = []
    for n, (name, text) in enumerate(zip(order, texts, strict=True)):
        runs.append(sessions[name].submit(text))
        # Its place is behind every run submitted before it, of either agent, and no other.
        assert await line.joined() == n
        if n == 0:
            await model.holding()

    await clock.advance(0)  # the places the store gave reach the runs
    assert [run.position for run in runs] == list(range(31))
    assert [run.status for run in runs] == ["running"] + ["queued"] * 30
    a, b = sessions["A"].status(), sessions["B"].status()
    assert (a.state, a.queued, a.held_elsewhere) == ("running", order.count("A") - 1, False)
    assert (b.state, b.queued, b.held_elsewhere) == ("queued", order.count("B"), True)  # behind A's run
    assert (a.position, b.position) == (order.index("A", 1), 1)  # where each agent's next run stands

    model.gate.set()
    results = await asyncio.wait_for(asyncio.gather(*runs), WAIT)
    assert [r.text for r in results] == [f"re: {text}" for text in texts]
    assert model.started == texts  # the run submitted second (B's) started second, and so on
    assert await run_inputs(store) == texts
    assert await nothing_held(store)


async def test_one_agents_back_to_back_runs_do_not_starve_another_agents_run(
    store: SessionStore, clock: VirtualClock
) -> None:
    # The case: B's single run, submitted second, ran 31st of 31.
    line = Joined(store)
    model = Model(held="A0")
    a, b = two_agents(line, model, clock)

    async def back_to_back() -> None:
        for k in range(30):
            await a.call(f"A{k}", ADA)

    looping = asyncio.ensure_future(back_to_back())
    assert await line.joined() == 0
    await model.holding()
    single = asyncio.ensure_future(b.call("B", ADA))
    assert await line.joined() == 1
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(looping, single), WAIT)
    assert model.started == ["A0", "B", *(f"A{k}" for k in range(1, 30))]
    assert await run_inputs(store) == model.started


async def test_a_run_cancelled_after_its_ticket_was_taken_but_before_it_heard_leaves_no_ticket(
    store: SessionStore, clock: VirtualClock
) -> None:
    line = HeldAnswer(store, "enqueue")
    model = Model(held="first")
    a, b = two_agents(line, model, clock)
    first = asyncio.ensure_future(a.call("first", ADA))
    await model.holding()
    cancelled = asyncio.ensure_future(b.call("cancelled", ADA))
    await asyncio.wait_for(line.made.wait(), WAIT)  # its ticket is in the store; the answer is held back
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    after = asyncio.ensure_future(b.call("after", ADA))
    model.gate.set()
    assert (await asyncio.wait_for(first, WAIT)).text == "re: first"
    assert not after.done()  # the cancelled run's ticket is still ahead of it: its answer is held back
    line.answer.set()  # the answer reaches nobody: the keeper drops the ticket it names
    assert (await asyncio.wait_for(after, WAIT)).text == "re: after"
    assert model.started == ["first", "after"]
    await b.keeper.aclose()
    assert await nothing_held(store)


async def test_a_run_cancelled_after_it_was_granted_the_lease_but_before_it_heard_releases_it(
    store: SessionStore, clock: VirtualClock
) -> None:
    line = HeldAnswer(store, "take_turn")
    model = Model(held="first")
    a, b = two_agents(line, model, clock)
    first = asyncio.ensure_future(a.call("first", ADA))
    assert await line.joined() == 0
    await model.holding()
    cancelled = asyncio.ensure_future(b.call("cancelled", ADA))
    assert await line.joined() == 1
    after = asyncio.ensure_future(b.call("after", ADA))
    assert await line.joined() == 2
    model.gate.set()  # first ends: the lease goes to the cancelled run's ticket
    await asyncio.wait_for(line.made.wait(), WAIT)  # granted in the store; the answer is held back
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert not after.done()  # the lease is held for the cancelled run
    line.answer.set()  # the answer reaches nobody: the keeper releases the lease it carries
    assert (await asyncio.wait_for(after, WAIT)).text == "re: after"
    assert model.started == ["first", "after"]
    assert (await asyncio.wait_for(first, WAIT)).text == "re: first"
    await b.keeper.aclose()
    assert await nothing_held(store)


async def test_a_run_cancelled_while_it_waits_leaves_the_line(
    store: SessionStore, clock: VirtualClock
) -> None:
    line = Joined(store)
    model = Model(held="first")
    a, b = two_agents(line, model, clock)
    first = asyncio.ensure_future(a.call("first", ADA))
    assert await line.joined() == 0
    await model.holding()
    control = RunControl()
    cancelled = asyncio.ensure_future(b.call("cancelled", ADA, control=control))
    assert await line.joined() == 1
    after = asyncio.ensure_future(a.call("after", ADA))
    assert await line.joined() == 2
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert control.position is None
    model.gate.set()
    assert (await asyncio.wait_for(after, WAIT)).text == "re: after"
    assert model.started == ["first", "after"]
    assert (await asyncio.wait_for(first, WAIT)).text == "re: first"
    await b.keeper.aclose()
    assert await nothing_held(store)


async def test_the_ticket_of_a_waiter_that_crashed_expires_and_the_line_moves_on(
    store: SessionStore, clock: VirtualClock, now: FakeNow
) -> None:
    line = Joined(store)
    model = Model(held="first")
    a, b = two_agents(line, model, clock)
    first = asyncio.ensure_future(a.call("first", ADA))
    assert await line.joined() == 0
    await model.holding()
    # A process joined the line, then died: nobody renews its ticket, which lives 5 s.
    crashed = await store.enqueue(KEY, "a process that died", 5)
    assert isinstance(crashed, Waiting)
    control = RunControl()
    after = asyncio.ensure_future(b.call("after", ADA, control=control))
    assert await line.joined() == 2
    model.gate.set()
    assert (await asyncio.wait_for(first, WAIT)).text == "re: first"
    await clock.advance(0)
    assert not after.done()  # the dead waiter's ticket is ahead of it while it lives
    assert control.position == 2
    now.advance(6)  # the ticket expired; nobody says so: the waiter asks again when it may have
    assert (await asyncio.wait_for(clock.run(after), WAIT)).text == "re: after"
    assert model.started == ["first", "after"]
    assert await nothing_held(store)


async def test_a_run_waiting_for_another_processes_run_is_woken_by_postgres_not_by_a_timer(
    postgres_url: str, clock: VirtualClock
) -> None:
    # Two store objects on one database: to each other they are two processes.
    async with PostgresStore(postgres_url) as elsewhere, PostgresStore(postgres_url) as here:
        holding = await elsewhere.enqueue(KEY, "another server", 30)
        assert isinstance(holding, Lease)
        heard = asyncio.Event()
        listening = here.listen_turns(KEY, heard.set)
        try:
            await asyncio.wait_for(heard.wait(), WAIT)  # woken once it listens: notices arrive from now on
            assert listening.live
            line = Joined(here)
            agent = ReActAgent(FunctionModel(Model(held="").respond), store=line, clock=clock)
            control = RunControl()
            run = asyncio.ensure_future(agent.call("mine", ADA, control=control))
            assert await line.joined() == 1
            await elsewhere.release(holding)  # NOTIFY: the run takes its turn; its clock never moves
            assert (await asyncio.wait_for(run, WAIT)).text == "re: mine"
        finally:
            listening.close()
    assert clock.now() == 0
