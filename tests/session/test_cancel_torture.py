"""The cancel torture test: a thousand runs on a handful of sessions, cancelled at random awaits, per store.

On each store (memory, SQLite, PostgreSQL), :data:`RUNS` runs on :data:`SESSIONS` sessions, by two agents
(two lease owners) over one store. An :class:`Adversary` (a :class:`~rxagent.session.DelegatingStore`)
stands between them and the store: at some of its calls (appends, joining the line for the lease and taking
it, leaving the line, releases, reads of the head and of the log, questions about batches) it cancels the
run whose session the call serves, either before passing the call on or after the store did the work (a
reply on its way), and lets the loop turn a few times. Most runs are doomed at a random store call of
theirs; most others are cancelled by their caller after a random number of turns of the loop; a run that
ends first is spared. The model is the scripted one (two tool calls, then an answer), the tool returns at
once.

Runs come in waves: each session gets one to three runs of one agent, all sessions at once; then both
agents are closed (``aclose()`` waits for the runs' releases) and every session is checked:

- its sequence numbers go on from the last check without a gap;
- no message id is appended twice, no call is dispatched twice, and no call gets two results (a fact
  appended twice, or a run resumed from a projection ahead of the log, shows as one of these);
- no run is started twice;
- the log replayed equals the projection each agent keeps in memory, wherever that one is at the log's
  head;
- nobody holds its lease;

and over the whole test no run fails other than by its cancel, and nothing is logged at ``WARNING`` or
above (a ``LeaseLostError`` with one writer per lease, a release that failed, a close that timed out).
The seed (``RXAGENT_CANCEL_SEED`` to choose one) and the counts are printed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar

import pytest

from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import AgentResult
from rxagent.messages import Msg
from rxagent.model.scripted import FunctionModel, ScriptedResponse, ScriptedToolCall
from rxagent.model.types import ChatRequest
from rxagent.session import (
    Batch,
    Checkpoint,
    DelegatingStore,
    Fact,
    Lease,
    MemoryStore,
    Projection,
    SessionStore,
    SQLiteStore,
    StoredFact,
    Ticket,
    Waiting,
)
from rxagent.session.postgres import PostgresStore
from rxagent.state import SessionKey
from rxagent.tools import Toolkit, tool

_T = TypeVar("_T")

RUNS = 1000
SESSIONS = 4
SEED = int(os.environ.get("RXAGENT_CANCEL_SEED", "21"))
TURNS = 100
"""A run's caller cancels it after 0 to this many turns of the loop (about as many as a run takes)."""


class Adversary(DelegatingStore):
    """Cancels the run a store call serves, before the call or after the store did its work.

    Each run is given a number of its session's store calls (:meth:`doom`); at that call the run is
    cancelled, before the call is passed on or once the store answered (a reply on its way), and the loop
    turns a few times, so that the cancel reaches the run wherever it awaits. A run that ends first is
    spared."""

    def __init__(self, inner: SessionStore, rng: random.Random, counts: Counter[str]) -> None:
        super().__init__(inner)
        self.rng = rng
        self.counts = counts
        self.runs: dict[SessionKey, list[asyncio.Task[AgentResult]]] = {}
        """Each session's runs of the current wave, in the order they were submitted (the one holding the
        session is the first that has not ended: turns are first come, first served)."""
        self._calls_left: dict[asyncio.Task[AgentResult], int] = {}

    def doom(self, run: asyncio.Task[AgentResult], calls: int) -> None:
        """Cancel ``run`` at the ``calls``-th store call of its session while it holds it."""
        self._calls_left[run] = calls

    async def around(self, what: str, key: SessionKey, call: Callable[[], Awaitable[_T]]) -> _T:
        running = next((t for t in self.runs.get(key, ()) if not t.done()), None)
        when: str | None = None
        if running is not None and running in self._calls_left:
            self._calls_left[running] -= 1
            if self._calls_left[running] == 0:
                del self._calls_left[running]
                when = self.rng.choice(["before", "after"])
        if running is not None and when == "before":
            running.cancel()
            self.counts[f"{what}: before the store call"] += 1
            await self.turns()
        answer = await call()
        if running is not None and when == "after" and not running.done():
            running.cancel()
            granted = " with a lease" if isinstance(answer, Lease) else ""
            self.counts[f"{what}: after the store answered{granted}"] += 1
            await self.turns()
        return answer

    async def turns(self) -> None:
        for _ in range(self.rng.randint(1, 4)):
            await asyncio.sleep(0)  # one turn of the loop: the cancel travels to wherever the run awaits

    async def acquire(self, key: SessionKey, owner: str, ttl: float) -> Lease | None:
        return await self.around("acquire", key, partial(super().acquire, key, owner, ttl))

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        return await self.around("enqueue", key, partial(super().enqueue, key, owner, ttl))

    async def take_turn(self, ticket: Ticket, ttl: float) -> Lease | Waiting:
        return await self.around("take_turn", ticket.key, partial(super().take_turn, ticket, ttl))

    async def drop_ticket(self, ticket: Ticket) -> None:
        await self.around("drop_ticket", ticket.key, partial(super().drop_ticket, ticket))

    async def release(self, lease: Lease) -> None:
        await self.around("release", lease.key, partial(super().release, lease))

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        return await self.around("append", lease.key, partial(super().append, lease, facts, batch=batch))

    async def appended(self, key: SessionKey, batch_id: str) -> int | None:
        return await self.around("appended", key, partial(super().appended, key, batch_id))

    async def head(self, key: SessionKey) -> int:
        return await self.around("head", key, partial(super().head, key))

    async def load(self, key: SessionKey) -> tuple[Checkpoint | None, list[StoredFact]]:
        return await self.around("load", key, partial(super().load, key))


@dataclass
class Checked:
    """What the checks know of one session's log: the facts up to ``projection.seq``, applied once."""

    projection: Projection = field(default_factory=Projection)
    messages: set[str] = field(default_factory=lambda: set())
    dispatched: set[str] = field(default_factory=lambda: set())
    results: set[str] = field(default_factory=lambda: set())
    answered: set[str] = field(default_factory=lambda: set())
    runs: set[str] = field(default_factory=lambda: set())

    def take(self, facts: list[StoredFact]) -> None:
        for fact in facts:
            assert fact.seq == self.projection.seq + 1, f"fact {fact.seq} after {self.projection.seq}: a gap"
            data = fact.data()
            assert isinstance(data, dict)
            if fact.kind == "message":
                message = Msg.model_validate(data["message"])
                assert message.id not in self.messages, f"message {message.id} appended twice"
                self.messages.add(message.id)
                for result in message.tool_results:
                    assert result.tool_use_id not in self.answered, (
                        f"call {result.tool_use_id} answered twice"
                    )
                    self.answered.add(result.tool_use_id)
            elif fact.kind == "tool_dispatched":
                call_id = str(data["call"]["id"])  # type: ignore[index,call-overload]
                assert call_id not in self.dispatched, f"call {call_id} dispatched twice"
                self.dispatched.add(call_id)
            elif fact.kind == "tool_result":
                call_id = str(data["result"]["tool_use_id"])  # type: ignore[index,call-overload]
                assert call_id not in self.results, f"call {call_id} got two results"
                self.results.add(call_id)
            elif fact.kind == "run_started":
                run_id = str(data["run_id"])
                assert run_id not in self.runs, f"run {run_id} started twice"
                self.runs.add(run_id)
            self.projection.apply(fact)


def same_projection(held: Projection, replayed: Projection, *, whole: bool) -> None:
    """``held`` (an agent's projection in memory) says what the log says (``whole``: every message compared;
    else the ids, and the last few whole)."""
    state, log = held.state, replayed.state
    assert held.seq == replayed.seq
    assert [m.id for m in state.messages] == [m.id for m in log.messages]
    assert state.messages[-8:] == log.messages[-8:]
    if whole:
        assert state.messages == log.messages
    assert (state.pending, state.partial_results, state.extras) == (
        log.pending,
        log.partial_results,
        log.extras,
    )
    assert list(held.uncertain) == list(replayed.uncertain)
    assert (held.turn_id, held.open_run) == (replayed.turn_id, replayed.open_run)


@tool
async def note(text: str) -> str:
    """Note a text (returns it)."""
    await asyncio.sleep(0)  # one more await for a cancel to land on
    return text


def scripted_model(ids: Iterator[int]) -> FunctionModel:
    """Two calls of ``note`` after each user message, then an answer; call ids from ``ids``."""

    def respond(request: ChatRequest) -> ScriptedResponse | str:
        last = request.messages[-1]
        if last.role == "user" and not last.tool_results:
            return ScriptedResponse(
                tool_calls=[
                    ScriptedToolCall("note", {"text": f"n{n}"}, id=f"c{n}") for n in (next(ids), next(ids))
                ]
            )
        return "noted"

    return FunctionModel(respond)


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def torture(kind: str, inner: SessionStore) -> None:
    rng = random.Random(f"{SEED}-{kind}")
    counts: Counter[str] = Counter()
    store = Adversary(inner, rng, counts)
    ids = itertools.count(1)  # call ids unique over both agents' models
    agents = [ReActAgent(scripted_model(ids), Toolkit([note]), store=store) for _ in range(2)]
    keys: list[SessionKey] = [("torture", f"s{n}") for n in range(SESSIONS)]
    checked = {key: Checked() for key in keys}
    warnings = Warnings()
    logging.getLogger("rxagent").addHandler(warnings)
    started = time.monotonic()
    runs = waves = 0
    try:
        while runs < RUNS:
            waves += 1
            tasks: list[asyncio.Task[AgentResult]] = []
            cancellers: list[asyncio.Task[None]] = []
            for key in keys:
                agent = rng.choice(agents)  # one agent per session per wave: no polling for a busy lease
                ctx = RuntimeContext(user_id=key[0], session_id=key[1])
                store.runs[key] = []
                for _ in range(min(rng.randint(1, 3), RUNS - runs)):
                    runs += 1
                    task = asyncio.ensure_future(agent.call(f"run {runs}", ctx))
                    store.runs[key].append(task)
                    tasks.append(task)
                    if rng.random() < 0.7:
                        store.doom(task, rng.randint(1, 6))
                    elif rng.random() < 0.8:  # cancelled by its caller at a random turn of the loop
                        later = cancel_later(task, rng.randint(0, TURNS), counts)
                        cancellers.append(asyncio.ensure_future(later))
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.gather(*cancellers)
            for outcome in outcomes:
                if isinstance(outcome, asyncio.CancelledError):
                    counts["runs cancelled"] += 1
                elif isinstance(outcome, AgentResult):
                    counts["runs completed"] += 1
                else:
                    raise AssertionError(f"wave {waves}: a run failed: {outcome!r}") from outcome
            for agent in agents:
                await agent.aclose()  # waits for the releases of the runs cancelled a moment ago
            for key in keys:
                session = checked[key]
                session.take(await inner.read(key, after=session.projection.seq))
                assert await inner.lease(key) is None, f"wave {waves}: {key[1]}'s lease is held"
                for agent in agents:
                    held = agent.keeper.cached(key)
                    if held is not None and held.seq == session.projection.seq:
                        same_projection(held, session.projection, whole=False)
            assert not warnings.records, [r.getMessage() for r in warnings.records]
        for key in keys:
            replayed = Projection.replay(None, await inner.read(key))
            same_projection(checked[key].projection, replayed, whole=True)
            for agent in agents:
                held = agent.keeper.cached(key)
                if held is not None and held.seq == replayed.seq:
                    same_projection(held, replayed, whole=True)
    finally:
        logging.getLogger("rxagent").removeHandler(warnings)
    elapsed = time.monotonic() - started
    facts = sum(c.projection.seq for c in checked.values())
    print(
        f"\ncancel torture on {kind} (seed {SEED}): {runs} runs in {waves} waves on {SESSIONS} sessions, "
        f"{facts} facts, {elapsed:.1f} s"
    )
    for name, count in sorted(counts.items()):
        print(f"  {name}: {count}")
    assert counts["runs completed"] + counts["runs cancelled"] == RUNS
    assert counts["runs cancelled"] >= RUNS // 2
    assert counts["append: after the store answered"] > 0  # the cancel that duplicated facts before
    granted = counts["enqueue: after the store answered with a lease"]
    assert granted + counts["take_turn: after the store answered with a lease"] > 0  # it stranded leases


async def cancel_later(task: asyncio.Task[AgentResult], turns: int, counts: Counter[str]) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)  # one turn of the loop: the run goes on meanwhile
    if not task.done():
        task.cancel()
        counts["caller's cancel"] += 1


async def test_cancel_torture_on_memory() -> None:
    await torture("memory", MemoryStore())


async def test_cancel_torture_on_sqlite(tmp_path: Path) -> None:
    # NORMAL: commits survive the process (nothing here kills it); FULL's fsyncs would only cost time.
    async with SQLiteStore(tmp_path / "torture.db", synchronous="NORMAL") as store:
        await torture("sqlite", store)


@pytest.mark.usefixtures("postgres")
async def test_cancel_torture_on_postgres(postgres_url: str) -> None:
    async with PostgresStore(postgres_url) as store:
        await torture("postgres", store)
