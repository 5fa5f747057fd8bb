"""Whole agent runs cancelled at 1 000 random points leak nothing.

An :class:`~rxagent.agent.Agent` over :class:`~rxagent.model.openai.OpenAIChatModel` talks to the loopback
OpenAI-compatible server (tests/model/openai_server.py), runs async tools, and keeps its sessions in a real
SQLite file. Each run is one tool round (none, one or two calls run together) and a streamed answer; the
server writes the stream a frame per loop turn, so a cancel can land in the middle of it. Each run is
cancelled at a point drawn from a seeded random on a clock the test controls, never on wall time:

- ``events``: the consumer of ``stream_events`` (``async for`` over ``to_async_iterator``) is cancelled
  ``turns`` loop iterations after it received its ``k``-th event;
- ``turns (stream)`` and ``turns (call)``: the task consuming ``stream_events``, or awaiting ``call``, is
  cancelled ``k`` loop iterations after it was started (the model call, the tools, the saves and the
  release all take loop turns, so the points spread over the whole run).

A loop iteration is counted with ``loop.call_soon`` chains, so the same seed draws the same points. Where
a point lands inside the run also depends on when the SQLite threads and the loopback socket answer, so a
failing seed usually, not always, fails again: the failure names the seed and the point, and
``RXAGENT_CANCEL_FUZZ_SEED`` replays another seed.

After every cancel (and after every run the cancel missed, which must then have ended well):

- every tool call that entered its body ran its ``finally``;
- the model's connection pool has no connection acquired (each is back in the pool or closed);
- no asyncio task is left but the test's own and the loopback server's, and no timer of rxagent's is
  left on the loop (a lease renewal, a background flush);
- no lock is held: the session keeper holds nothing (no claim, so no recorder's flush lock; no place in a
  line, so no line's joining lock; no lease work under way), the store's lease on the session is free, the
  SQLite file's write lock is free (another connection takes it at once), and rxagent's process-wide
  guards (a run control's, the lazy reactivex locks') are free; the next run on the session, with
  ``session_wait=0``, starts at once (each session serves 20 runs in a row, then a run the test lets
  finish);
- the session's log reads back: numbered ``1..head``; every run it started has its end (``run_finished``;
  ``run_cancelled`` for a run a cancel cut short, after ``run_finished`` when the cancel came while that
  was being written; never ``run_failed``); no run,
  turn, message, dispatched call or call result recorded twice; no call left uncertain, none pending; its
  replay equals what the process keeps in memory and what the checkpoint plus the facts after it give;
  every call in the history has exactly one result right after it;
- every request the model server received carries a whole transcript (each assistant tool call answered
  by exactly one tool message, in order).

Bad inputs tried: cancels before the run took its session, while it waits for the SQLite store, in the
middle of the streamed tool calls and answer, inside the tools (together and alone), while a tool's call
is being recorded, while the run's end is saved, and while the session is being given back.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import pytest

from rxagent.agent import Agent, AgentOptions
from rxagent.agent.control import _GUARD as CONTROL_GUARD  # pyright: ignore[reportPrivateUsage]
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult
from rxagent.model.openai import OpenAIChatModel
from rxagent.operators import to_async_iterator
from rxagent.operators._source import _MAKING_LOCKS  # pyright: ignore[reportPrivateUsage]
from rxagent.session import (
    DelegatingStore,
    Fact,
    Lease,
    MemoryStore,
    Projection,
    SessionStore,
    SQLiteStore,
    StoredFact,
    Waiting,
)
from rxagent.session.store import Batch
from rxagent.state import SessionKey
from rxagent.tools import FunctionTool, Toolkit, tool
from tests.model.openai_server import (
    DONE,
    Frame,
    OpenAIServer,
    Pause,
    Reply,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)

SEED = int(os.environ.get("RXAGENT_CANCEL_FUZZ_SEED", "230001"))
"""The seed of the points (another one: ``RXAGENT_CANCEL_FUZZ_SEED=… pytest …``). This one found the leak
that :func:`test_a_cancel_at_every_loop_turn_of_a_run_leaks_nothing` holds, at its 4th point, and stays
as its regression case."""
POINTS = 1_000
"""Cancels that must land in a run (a point the run finished before does not count)."""
MAX_RUNS = 3 * POINTS
"""Runs at most, landed or not: a bound, so a run that always finishes first fails instead of looping."""
RUNS_PER_SESSION = 20
"""Runs in a row on one session (its history and log grow, its checkpoint is written) before the next."""
TOOL_TURNS = 40
"""Loop turns a tool call takes at most (drawn per call)."""
CALIBRATION_RUNS = 3
"""Whole runs of each shape and consumer that measure how long a run is, in events and loop turns."""
SETTLE_TURNS = 200
"""Loop turns the test lets pass at most, after the keeper is quiet, for cancelled tasks to finish."""
ANSWER = "The answer is 42."
ENDS = ("run_finished", "run_cancelled", "run_failed")
Ending = tuple[str, ...]
"""A run's end facts, in order."""
ENDINGS: tuple[Ending, ...] = (("run_finished",), ("run_cancelled",), ("run_finished", "run_cancelled"))
"""How a run may end here: finished; cancelled; or finished, and then cancelled because its consumer left
while the end was being written, before the result came (as tests/session/test_agent_sessions.py says).
Never failed: nothing here fails."""

Place = Literal[
    "nowhere: the run ended first",
    "taking the session",
    "in a model call",
    "in a tool",
    "between steps",
    "saving the end or giving the session back",
]
"""Where a cancel landed, as the test can tell: before the run's start was recorded, while the server was
streaming a reply, in a tool's body, elsewhere before the run's end was noted, or after."""
PLACES: tuple[Place, ...] = get_args(Place)[1:]

Consumer = Literal["events", "turns (stream)", "turns (call)"]
CONSUMERS: tuple[Consumer, ...] = ("events", "turns (stream)", "turns (call)")


@dataclass(frozen=True)
class Shape:
    """What a run does: ``calls`` tool calls in one round (0: none), then an answer in ``deltas`` pieces."""

    calls: int
    deltas: int


SHAPES = (Shape(0, 1), Shape(0, 4), Shape(1, 1), Shape(1, 3), Shape(2, 2), Shape(2, 4))


@dataclass(frozen=True)
class Point:
    """Where one run is cancelled: ``k``-th event then ``turns`` loop turns (``events``), or ``k`` loop
    turns from its start (the other consumers; ``turns`` is then 0)."""

    index: int
    session: str
    shape: Shape
    consumer: Consumer
    k: int
    turns: int
    tool_turns: tuple[int, ...]
    """Loop turns each tool call takes."""


@dataclass
class Ledger:
    """Which tool calls entered their body and which ran their ``finally``."""

    entered: list[str] = field(default_factory=lambda: [])
    finished: list[str] = field(default_factory=lambda: [])
    cancelled: list[str] = field(default_factory=lambda: [])
    """Calls whose body a cancel cut short."""


def lookup_tool(ledger: Ledger) -> FunctionTool:
    @tool(concurrency_safe=True)
    async def lookup(key: str, turns: int) -> str:
        """Look a key up.

        Args:
            key: what to look up.
            turns: loop turns the lookup takes.
        """
        ledger.entered.append(key)
        try:
            for _ in range(turns):
                await asyncio.sleep(0)  # one loop turn: the script says how long the tool works, not a clock
            return f"{key} = 42"
        except asyncio.CancelledError:
            ledger.cancelled.append(key)
            raise
        finally:
            ledger.finished.append(key)

    return lookup


def spread(*frames: Frame) -> Reply:
    """An SSE reply written a frame per loop turn (the client reads the frames apart, and a cancel may
    land between any two)."""
    paced: list[Frame] = []
    for frame in frames:
        paced += [frame, Pause(0)]
    return Reply.sse(*paced[:-1])


def replies(point: Point) -> list[Reply]:
    """The model's replies for the run at ``point``: a round of tool calls (if any), then the answer."""
    scripted: list[Reply] = []
    if point.shape.calls:
        frames: list[Frame] = [chunk({"role": "assistant", "content": None})]
        for index, turns in enumerate(point.tool_turns):
            key = f"k{point.index}_{index}"
            arguments = json.dumps({"key": key, "turns": turns})
            half = len(arguments) // 2
            frames.append(tool_chunk(index, f"call_{key}", "lookup", arguments[:half]))
            frames.append(tool_chunk(index, None, None, arguments[half:]))
        scripted.append(spread(*frames, finish_chunk("tool_calls"), usage_chunk(), DONE))
    cuts = sorted(random.Random(point.index).sample(range(1, len(ANSWER)), point.shape.deltas - 1))
    pieces = [ANSWER[a:b] for a, b in zip([0, *cuts], [*cuts, len(ANSWER)], strict=True)]
    scripted.append(spread(*(text_chunk(p) for p in pieces), finish_chunk("stop"), usage_chunk(), DONE))
    return scripted


def cancel_after(task: asyncio.Task[Any], turns: int) -> None:
    """Cancel ``task`` ``turns`` loop iterations from now (a callback per iteration: a clock in turns)."""
    loop = asyncio.get_running_loop()

    def tick(left: int) -> None:
        if left:
            loop.call_soon(tick, left - 1)
        else:
            task.cancel()

    loop.call_soon(tick, turns - 1) if turns else task.cancel()


@dataclass
class Outcome:
    """How one run ended for the test."""

    landed: bool
    """The cancel cut the run short (its task ended cancelled)."""
    result: AgentResult | None
    """The result the consumer got, if it got one."""
    events: int
    turns: int
    """Loop turns from the start until its task was done."""


class Fixture:
    """The agent, its model, store and tools, and the checks made after every run."""

    def __init__(self, server: OpenAIServer, model: OpenAIChatModel, store: SessionStore) -> None:
        self.server = server
        self.model = model
        self.store = store
        self.ledger = Ledger()
        options = AgentOptions(session_wait=0)  # a session left held fails the next run at once
        self.agent: Agent = Agent(model, Toolkit([lookup_tool(self.ledger)]), store=store, options=options)
        self.requests_checked = 0
        self.disconnects = 0

    async def run(self, point: Point, *, cancel: bool = True) -> Outcome:
        """Run the agent once as ``point`` says (``cancel=False``: to its end), counting loop turns."""
        self.server.replies.clear()  # a reply a cancelled run did not ask for is not the next run's
        self.server.script(*replies(point))
        ctx = RuntimeContext(user_id="fuzz", session_id=point.session)
        seen: list[AgentEvent] = []
        loop = asyncio.get_running_loop()
        task: asyncio.Task[AgentResult | None]

        def on_event(count: int) -> None:
            if cancel and point.consumer == "events" and count == point.k:
                cancel_after(task, point.turns)

        if point.consumer == "turns (call)":
            task = loop.create_task(self.agent.call("What is it?", ctx))
        else:
            task = loop.create_task(self.stream(ctx, f"run_{point.index}", seen, on_event))
        if cancel and point.consumer != "events":
            cancel_after(task, point.k)
        turns = 0
        counted: asyncio.Future[None] = loop.create_future()

        def count() -> None:  # one call per loop iteration until the run's task is done
            nonlocal turns
            turns += 1
            if task.done():
                counted.set_result(None)
            else:
                loop.call_soon(count)

        loop.call_soon(count)
        await counted
        if task.cancelled():
            return Outcome(True, None, len(seen), turns)
        result = task.result()  # a run the cancel missed must have ended well: else this raises
        return Outcome(False, result, len(seen), turns)

    async def stream(
        self, ctx: RuntimeContext, run_id: str, seen: list[AgentEvent], on_event: Callable[[int], None]
    ) -> AgentResult | None:
        result: AgentResult | None = None
        source = to_async_iterator(self.agent.stream_events("What is it?", ctx, run_id=run_id))
        async with contextlib.aclosing(source) as events:
            async for event in events:
                seen.append(event)
                if isinstance(event, AgentResult) and event.parent_run_id is None:
                    result = event
                on_event(len(seen))
        return result

    async def check(self, point: Point, outcome: Outcome, head: int) -> Place:
        """Everything the module promises after a run (``head``: the log's head before it); where the
        cancel landed."""
        if not outcome.landed:
            assert outcome.result is not None
            assert (outcome.result.reason, outcome.result.text) == ("MODEL_STOP", ANSWER)
        await self.settle()
        ledger = self.ledger
        assert Counter(ledger.entered) == Counter(ledger.finished), "a tool skipped its finally"
        in_tool = bool(ledger.cancelled)
        ledger.entered.clear()
        ledger.finished.clear()
        ledger.cancelled.clear()
        in_model_call = self.server.disconnects > self.disconnects  # it saw its client go mid-reply
        self.disconnects = self.server.disconnects
        session = self.model._session
        assert session is not None
        assert session.connector is not None
        assert not session.connector._acquired, "a connection is still acquired"
        assert strays() == [], "tasks left behind"
        assert rxagent_timers() == [], "timers left behind"
        keeper = self.agent.keeper
        assert not keeper._busy(), "the keeper still holds or takes a session"
        assert not keeper._lines, "a place left in a session's line"
        key: SessionKey = ("fuzz", point.session)
        ctx = RuntimeContext(user_id="fuzz", session_id=point.session)
        assert self.agent.sessions.active_run(ctx) is None
        assert await self.store.lease(key) is None, "the session's lease is still held"
        assert not CONTROL_GUARD.locked(), "a run control's guard is still held"
        assert not _MAKING_LOCKS.locked(), "the guard of reactivex's lazy locks is still held"
        if isinstance(self.store, SQLiteStore):
            assert write_lock_free(self.store.path), "the SQLite file's write lock is still held"
        facts = await self.store.read(key)
        end = check_log(facts, head, outcome, point)
        replayed = Projection.replay(None, facts)
        checkpoint, rest = await self.store.load(key)
        from_checkpoint = Projection.replay(checkpoint, rest)
        assert from_checkpoint.state.messages == replayed.state.messages
        assert (await self.agent.sessions.state(ctx)).messages == replayed.state.messages
        cached = keeper.cached(key)
        if cached is not None:  # what the process keeps for the next run is what the log says
            assert cached.seq == replayed.seq
            assert cached.state.messages == replayed.state.messages
        check_history(replayed)
        for request in self.server.requests[self.requests_checked :]:
            check_transcript(request.body["messages"])
        self.requests_checked = len(self.server.requests)
        if not outcome.landed:
            return "nowhere: the run ended first"
        if not end:
            return "taking the session"
        if in_tool:
            return "in a tool"
        if in_model_call:
            return "in a model call"
        return "saving the end or giving the session back" if end[0] == "run_finished" else "between steps"

    async def settle(self) -> None:
        """Wait until the keeper is quiet (a cancelled run records its end and gives its session back on
        the loop's next turns), then let at most ``SETTLE_TURNS`` loop turns pass for cancelled tasks to
        finish. The keeper's wait is bounded by its ``close_timeout``."""
        await self.agent.keeper.aclose()
        for _ in range(SETTLE_TURNS):
            if not strays():
                return
            await asyncio.sleep(0)  # a loop turn, not a wait for time to pass


def write_lock_free(path: Path) -> bool:
    """Whether another connection takes the SQLite file's write lock at once (no transaction of the store's
    is left open: a cancelled append that kept its ``BEGIN IMMEDIATE`` would hold it)."""
    connection = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        return False
    else:
        connection.execute("ROLLBACK")
        return True
    finally:
        connection.close()


def strays() -> list[str]:
    """The tasks that are not done, other than this test's and the loopback server's."""
    current = asyncio.current_task()
    return sorted(
        repr(task)
        for task in asyncio.all_tasks()
        if task is not current and not task.done() and not server_side(task)
    )


def server_side(task: asyncio.Task[Any]) -> bool:
    """A task of the loopback server (accepting a connection, aiohttp's request handlers), which ends when
    its client goes."""
    code = getattr(task.get_coro(), "cr_code", None)
    return code is not None and ("aiohttp/web_" in code.co_filename or code.co_name == "_accept_connection2")


def rxagent_timers() -> list[str]:
    """The loop's pending timers that call back into rxagent (a lease renewal, a flush, a deadline)."""
    loop = asyncio.get_running_loop()
    scheduled: list[asyncio.TimerHandle] = getattr(loop, "_scheduled", [])  # asyncio's timer heap
    found: list[str] = []
    for handle in scheduled:
        callback: Any = getattr(handle, "_callback", None)
        target = getattr(callback, "func", callback)  # a functools.partial
        module = getattr(target, "__module__", None) or ""
        if not handle.cancelled() and module.startswith("rxagent"):
            found.append(repr(handle))
    return found


def check_log(facts: Sequence[StoredFact], head: int, outcome: Outcome, point: Point) -> Ending:
    """The session's log is whole and has nothing twice, every run it started ended, and the run's own
    facts (after ``head``) end as it ended; returns how they end (``()``: the run did not start)."""
    assert [f.seq for f in facts] == list(range(1, len(facts) + 1)), "the log has a gap or a repeat"
    once: Counter[tuple[str, str]] = Counter()
    ends: dict[str, Ending] = {}
    for f in facts:
        data: Any = f.data()
        if f.kind == "run_started":
            once[f.kind, str(data["run_id"])] += 1
            ends[str(data["run_id"])] = ()
        elif f.kind in ENDS:
            ends[str(data["run_id"])] += (f.kind,)
        elif f.kind in ("turn_started", "turn_finished"):
            once[f.kind, str(data["turn_id"])] += 1
        elif f.kind == "message":
            once["message", str(data["message"]["id"])] += 1
        elif f.kind == "tool_dispatched":
            once["dispatched", str(data["call"]["id"])] += 1
        elif f.kind == "tool_result":
            once["result", str(data["result"]["tool_use_id"])] += 1
    twice = [what for what, count in once.items() if count > 1]
    assert twice == [], "recorded twice"
    wrong = {run: ending for run, ending in ends.items() if ending not in ENDINGS}
    assert wrong == {}, "a run without one end (or failed)"
    runs = [str(f.data()["run_id"]) for f in facts if f.kind == "run_started" and f.seq > head]
    assert len(runs) <= 1
    if not outcome.landed:
        assert [ends[r] for r in runs] == [("run_finished",)]
    elif runs and point.consumer != "turns (call)":
        assert runs == [f"run_{point.index}"]
    return ends[runs[0]] if runs else ()


def check_history(projection: Projection) -> None:
    """Nothing uncertain, pending or half-done; each call has one result, in the message right after."""
    state = projection.state
    assert (projection.open_run, dict(projection.uncertain)) == (None, {})
    assert (state.pending, state.partial_results) == ([], [])
    messages = state.messages
    for at, message in enumerate(messages):
        if message.role == "assistant" and message.tool_calls:
            answered = messages[at + 1].tool_results if at + 1 < len(messages) else []
            assert [r.tool_use_id for r in answered] == [c.id for c in message.tool_calls]
        elif message.role == "assistant":
            assert message.text == ANSWER, "a half-streamed answer was kept"


def check_transcript(messages: Sequence[dict[str, Any]]) -> None:
    """An OpenAI transcript as a server wants it: the tool messages answer the calls just before them."""
    waiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            assert waiting, "a tool message answers no call"
            assert message["tool_call_id"] == waiting.pop(0), "a tool message out of order"
            continue
        assert waiting == [], "calls left unanswered"
        if message["role"] == "assistant":
            waiting = [call["id"] for call in message.get("tool_calls") or []]
    assert waiting == [], "calls left unanswered"


def draw(rng: random.Random, index: int, calibrated: dict[tuple[Shape, Consumer], Outcome]) -> Point:
    """The point of run ``index``: its shape, its consumer, and where to cancel it, in range of what a
    whole run of that shape and consumer took (``calibrated``)."""
    shape = rng.choice(SHAPES)
    consumer = rng.choice(CONSUMERS)
    whole = calibrated[shape, consumer]
    tool_turns = tuple(rng.randint(0, TOOL_TURNS) for _ in range(shape.calls))
    session = f"s{index // RUNS_PER_SESSION}"
    if consumer == "events":
        return Point(
            index, session, shape, consumer, rng.randint(1, whole.events), rng.randint(0, 4), tool_turns
        )
    return Point(index, session, shape, consumer, rng.randint(1, whole.turns), 0, tool_turns)


@pytest.fixture
async def fuzz(server: OpenAIServer, tmp_path: Path) -> AsyncIterator[Fixture]:
    async with (
        make_model(server) as model,
        # NORMAL: commits survive the process, not a power loss (WAL); FULL's fsyncs would cost the
        # machine's disk speed per run, and durability is not what this test is about.
        SQLiteStore(tmp_path / "sessions.db", synchronous="NORMAL") as store,
    ):
        fixture = Fixture(server, model, store)
        try:
            yield fixture
        finally:
            await fixture.agent.aclose()


async def fuzz_cancels(fixture: Fixture, seed: int, points: int) -> Counter[tuple[Consumer, Place]]:
    """Cancel runs at ``points`` random points drawn from ``seed`` (see the module); how each cancelled
    and where it landed."""
    calibrated: dict[tuple[Shape, Consumer], Outcome] = {}
    runs = 0
    for shape in SHAPES:  # how many events and loop turns a whole run of each kind takes
        for consumer in CONSUMERS:
            for _ in range(CALIBRATION_RUNS):  # the quickest: a run the SQLite threads held up is longer
                runs += 1
                point = Point(-runs, "calibration", shape, consumer, 0, 0, (TOOL_TURNS // 2,) * shape.calls)
                head = await fixture.store.head(("fuzz", point.session))
                outcome = await fixture.run(point, cancel=False)
                await fixture.check(point, outcome, head)
                known = calibrated.get((shape, consumer))
                if known is None or outcome.turns < known.turns:
                    calibrated[shape, consumer] = outcome
    rng = random.Random(seed)
    landed: Counter[tuple[Consumer, Place]] = Counter()
    index = 0
    while landed.total() < points:
        assert index < MAX_RUNS, f"only {landed.total()} of {index} cancels landed in a run"
        point = draw(rng, index, calibrated)
        await cancel_and_check(fixture, point, landed)
        if index % RUNS_PER_SESSION == RUNS_PER_SESSION - 1:  # the session's last cancel: run it again
            again = index + MAX_RUNS  # its own call ids
            whole = Point(again, point.session, point.shape, "turns (call)", 0, 0, point.tool_turns)
            await cancel_and_check(fixture, whole, landed, cancel=False)
        index += 1
    return landed


async def cancel_and_check(
    fixture: Fixture,
    point: Point,
    landed: Counter[tuple[Consumer, Place]],
    *,
    cancel: bool = True,
    drawn_by: str = f"seed {SEED}",
) -> None:
    """Run the agent once, cancelled at ``point``, check everything, and count where the cancel landed.
    A failure says which point failed, and what drew it (the seed)."""
    try:
        head = await fixture.store.head(("fuzz", point.session))
        outcome = await fixture.run(point, cancel=cancel)
        place = await fixture.check(point, outcome, head)
    except BaseException as error:
        error.add_note(f"cancel fuzz: {drawn_by}, {point}")
        raise
    if outcome.landed:
        landed[point.consumer, place] += 1


def report(landed: Counter[tuple[Consumer, Place]]) -> str:
    """How many cancels landed where, most first."""
    places: Counter[Place] = Counter()
    for (_, place), count in landed.items():
        places[place] += count
    return ", ".join(f"{count} {place}" for place, count in places.most_common())


@pytest.mark.slow
async def test_cancelling_whole_runs_at_1000_random_points_leaks_nothing(fuzz: Fixture) -> None:
    landed = await fuzz_cancels(fuzz, SEED, POINTS)
    print(f"cancel fuzz, seed {SEED}: {report(landed)}")
    assert landed.total() == POINTS
    assert {consumer for consumer, _ in landed} == set(CONSUMERS)  # every way of cancelling was tried
    assert {place for _, place in landed} == set(PLACES), report(landed)  # and every part of a run was hit


class OneTurnStore(DelegatingStore):
    """Answers the lease and append calls a loop turn after making them, as a store across a thread or a
    socket does, so that a cancel can land between a call's effect and its answer; over the memory store,
    whose turns are deterministic."""

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        outcome = await super().enqueue(key, owner, ttl)
        await asyncio.sleep(0)  # the answer on its way: one loop turn, not a wait
        return outcome

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        seq = await super().append(lease, facts, batch=batch)
        await asyncio.sleep(0)
        return seq

    async def release(self, lease: Lease) -> None:
        await super().release(lease)
        await asyncio.sleep(0)


@pytest.mark.parametrize("consumer", CONSUMERS)
async def test_a_cancel_at_every_loop_turn_of_a_run_leaks_nothing(
    server: OpenAIServer, consumer: Consumer
) -> None:
    # Every loop turn of a run, on a store whose answers take a turn: deterministic, so it holds the
    # regression case of the leak the fuzz found, a loop turn wide. A cancel that came after the store
    # granted the run its lease, and before the run heard of it, left the keeper looking quiet for a turn
    # before it started the release: aclose() returned in between (and a store closed then would have
    # kept the lease until it expired).
    async with make_model(server) as model:
        fixture = Fixture(server, model, OneTurnStore(MemoryStore()))
        shape = Shape(2, 2)
        whole = Point(-1, "calibration", shape, consumer, 0, 0, (2, 2))
        outcome = await fixture.run(whole, cancel=False)
        await fixture.check(whole, outcome, 0)
        landed: Counter[tuple[Consumer, Place]] = Counter()
        every = range(1, outcome.events + 1) if consumer == "events" else range(1, outcome.turns + 1)
        for index, k in enumerate(every):
            session = f"s{index // RUNS_PER_SESSION}"
            point = Point(index, session, shape, consumer, k, 0, (2, 2))
            await cancel_and_check(fixture, point, landed, drawn_by="every loop turn")
        await fixture.agent.aclose()
    # A run on a session whose projection is in memory is a few turns shorter than the first one.
    assert landed.total() >= len(every) * 9 // 10, report(landed)
