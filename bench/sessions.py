"""Sessions under load, through the agent: many concurrent sessions on one store, and one long session.

**Load.** ``--sessions`` sessions (default 200) each run ``--turns`` turns (default 5), all at once on one
event loop, through one :class:`~rxagent.agent.ReActAgent`. A turn is a scripted 3-tool loop: the model (a
:class:`~rxagent.model.scripted.FunctionModel`, no network) calls three tools in one batch, then answers;
that is 17 facts in 7 appends (each call's dispatch and result are appended as they happen; the other
sessions' appends share their commits). Prints facts/s (facts appended ÷ wall time of the whole load),
p50/p99 append latency (wall time of each ``store.append``, taken by a proxy store in this script), write
transactions (SQLite: with group commit, fewer than the appends), and the database's size.

**Growth.** A long session is grown to ``--long`` - 20 turns (default 1 000) and a short one to 5, with the
same loop (tools one at a time); then the two take turns in alternation, 20 each, so that turns 6-25 of
one and the last 20 of the other are measured under the same load on the machine. The session layer's CPU
for a turn is ``time.process_time`` summed over what the session layer does for it:
:meth:`SessionKeeper.claim` (turn, lease, load or cached projection), the recorder's work (every
:meth:`Recorder.flush`, its journal of the tool calls, the facts it notes as they happen) and
:meth:`SessionKeeper.release` (lease, cache, checkpoint scheduling), each wrapped here (overlapping
calls counted once; the library is not changed).
``turn_cost_growth`` is the median over the long session's last 20 turns ÷ the median over turns 6-25 of
the short one (medians, so that a turn that a background checkpoint thread happened to share does not
decide; the checkpoints' own CPU, taken around ``Projection.checkpoint`` on their thread, is printed
too, spread over the turns: a checkpoint's cost grows with the history, and so does their spacing).
Goal: <= 1.2 (appends, not snapshots). On PostgreSQL the database server's CPU is in its own process:
the figure is this process's share.

Stores: SQLite (a temporary file, ``synchronous=FULL``, the default), and PostgreSQL when ``--postgres
URL`` is given (the same two parts; needs ``rxagent[postgres]``; an unreachable URL is a clear error).
Last line ``sqlite_facts_per_s: X`` (goal >= 2 000 on 2 cores). Facts per CPU-second (the process's
CPU, agent included) is printed beside it: what the wall-clock figure comes to when the process has a
core to itself on a machine shared with other work.

Run: ``.venv/bin/python bench/sessions.py [--sessions N] [--turns N] [--long N] [--postgres URL]``.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from _session_agent import agent_on, question

from rxagent.context import RuntimeContext
from rxagent.session import (
    Batch,
    Checkpoint,
    DelegatingStore,
    Fact,
    Lease,
    Projection,
    Recorder,
    SessionKeeper,
    SessionStore,
    SQLiteStore,
)

__all__ = ["main"]

P = ParamSpec("P")
T = TypeVar("T")

# ---- measuring -------------------------------------------------------------------------------------------


class TimedStore(DelegatingStore):
    """A store that times every append (wall clock) and passes everything to ``inner``."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.latencies: list[float] = []

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        start = time.perf_counter()
        try:
            return await super().append(lease, facts, batch=batch)
        finally:
            self.latencies.append(time.perf_counter() - start)


@dataclass
class SessionCPU:
    """CPU the session layer used: calls in flight are counted once, from the first start to the last end."""

    total: float = 0.0
    checkpoints: list[float] = field(default_factory=lambda: [])
    _active: int = 0
    _since: float = 0.0

    def timed(self, method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
        @functools.wraps(method)
        async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            if self._active == 0:
                self._since = time.process_time()
            self._active += 1
            try:
                return await method(*args, **kwargs)
            finally:
                self._active -= 1
                if self._active == 0:
                    self.total += time.process_time() - self._since

        return wrapper

    def timed_sync(self, method: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(method)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            if self._active:  # inside a timed call: already counted
                return method(*args, **kwargs)
            start = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.total += time.process_time() - start

        return wrapper

    def timed_checkpoint(
        self, method: Callable[[Projection], Checkpoint]
    ) -> Callable[[Projection], Checkpoint]:
        @functools.wraps(method)
        def wrapper(projection: Projection) -> Checkpoint:
            start = time.thread_time()  # it runs on a worker thread, beside the loop
            try:
                return method(projection)
            finally:
                self.checkpoints.append(time.thread_time() - start)

        return wrapper


def watch_session_layer(keeper: SessionKeeper, cpu: SessionCPU) -> Callable[[], None]:
    """Time the keeper's claim and release and every recorder's work (its flushes, its journal, the facts
    it notes as they happen); returns what undoes it."""
    keeper.claim = cpu.timed(keeper.claim)  # type: ignore[method-assign]
    keeper.release = cpu.timed(keeper.release)  # type: ignore[method-assign]
    originals = {
        (Recorder, name): getattr(Recorder, name)
        for name in ("flush", "dispatched", "finished", "note", "event")
    }
    originals[Projection, "checkpoint"] = Projection.checkpoint
    for name in ("flush", "dispatched", "finished"):
        setattr(Recorder, name, cpu.timed(originals[Recorder, name]))
    for name in ("note", "event"):
        setattr(Recorder, name, cpu.timed_sync(originals[Recorder, name]))
    Projection.checkpoint = cpu.timed_checkpoint(Projection.checkpoint)  # type: ignore[method-assign]

    def undo() -> None:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)

    return undo


# ---- the two parts -------------------------------------------------------------------------------------


@dataclass
class Load:
    facts: int
    wall: float
    cpu: float
    latencies: list[float]


async def load(store: SessionStore, sessions: int, turns: int) -> Load:
    """Every session at once, each its turns in order."""
    timed = TimedStore(store)
    agent = agent_on(timed, parallel=True)

    async def session(i: int) -> None:
        ctx = RuntimeContext(user_id="bench", session_id=f"load-{i}")
        for turn in range(1, turns + 1):
            result = await agent.call(question(turn), ctx)
            assert result.reason == "MODEL_STOP", result

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(session(i) for i in range(sessions)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await agent.aclose()
    facts = sum([await store.head(("bench", f"load-{i}")) for i in range(sessions)])
    return Load(facts, wall, cpu, timed.latencies)


PAIRS = 20
"""Turns measured at each end: turns 6-25 of the short session, the last 20 of the long one."""


@dataclass
class Growth:
    turns: int  # the long session's length
    early: list[float]  # the session layer's CPU of turns 6-25 of the short session, in seconds
    late: list[float]  # ... and of the long session's last turns
    grown: list[float]  # ... of every turn that grew the long session (checkpoints included)
    checkpoints: list[float]


async def growth(store: SessionStore, turns: int) -> Growth:
    """A long session grown to ``turns - PAIRS`` turns and a short one of 5, then turns of each in
    alternation (so both ends are measured under the same load on the machine): the session layer's CPU
    of each turn."""
    agent = agent_on(store, parallel=False)
    cpu = SessionCPU()
    undo = watch_session_layer(agent.keeper, cpu)
    short = RuntimeContext(user_id="bench", session_id="short")
    long = RuntimeContext(user_id="bench", session_id="long")

    async def turn(ctx: RuntimeContext, number: int) -> float:
        before = cpu.total
        result = await agent.call(question(number), ctx)
        assert result.reason == "MODEL_STOP", result
        return cpu.total - before

    try:
        for number in range(1, 6):
            await turn(short, number)
        grown = [await turn(long, number) for number in range(1, turns - PAIRS + 1)]
        early: list[float] = []
        late: list[float] = []
        for i in range(PAIRS):
            early.append(await turn(short, 6 + i))
            late.append(await turn(long, turns - PAIRS + 1 + i))
        await agent.aclose()
    finally:
        undo()
    return Growth(turns, early, late, grown, cpu.checkpoints)


# ---- stores ----------------------------------------------------------------------------------------------


@asynccontextmanager
async def sqlite_store(folder: Path, name: str) -> AsyncIterator[SQLiteStore]:
    async with SQLiteStore(folder / name) as store:
        yield store


@asynccontextmanager
async def postgres_store(url: str) -> AsyncIterator[SessionStore]:
    """The PostgreSQL store on ``url``: a clear exit if the store is missing or the database unreachable."""
    try:
        from rxagent.session.postgres import PostgresStore  # the store of the rxagent[postgres] extra
    except ImportError as error:
        raise SystemExit(f"--postgres: this rxagent has no PostgreSQL store ({error})") from None
    store: Any = PostgresStore(url)
    try:
        await store.open()
    except Exception as error:
        await store.aclose()
        raise SystemExit(f"--postgres: cannot use the PostgreSQL database: {error}") from None
    try:
        yield store
    finally:
        await store.aclose()


async def postgres_size(url: str) -> int:
    """Bytes used by the tables of the session store (with their indexes and TOAST)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND c.relname LIKE 'rxagent%' AND n.nspname = current_schema()"
        )
        row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def postgres_reset(url: str) -> None:
    """Delete the bench's sessions left by an earlier run (the bench writes only user ``bench``)."""
    async with postgres_store(url) as store:
        for info in await store.sessions():
            if info.key[0] == "bench":
                await store.delete(info.key)


# ---- reporting -------------------------------------------------------------------------------------------


def report_load(label: str, result: Load, sessions: int, turns: int, size: int, extra: str = "") -> float:
    quantiles = statistics.quantiles(result.latencies, n=100)
    per_s = result.facts / result.wall
    print(
        f"{label}: {sessions} sessions x {turns} turns, {result.facts} facts in {result.wall:.2f} s: "
        f"facts_per_s: {per_s:.0f}, append p50: {quantiles[49] * 1e3:.1f} ms, "
        f"p99: {quantiles[98] * 1e3:.1f} ms, "
        f"{len(result.latencies)} appends{extra}, CPU {result.cpu / result.facts * 1e6:.0f} µs/fact "
        f"(agent included: {result.facts / result.cpu:.0f} facts per CPU-second), "
        f"database {size / 1e6:.1f} MB"
    )
    return per_s


def report_growth(label: str, result: Growth) -> float:
    early, late = statistics.median(result.early), statistics.median(result.late)
    spread = sum(result.checkpoints) / (len(result.grown) + 2 * PAIRS + 5)
    print(
        f"{label}: session layer CPU per turn (claim + recorder + release), median: turns 6-{5 + PAIRS}: "
        f"{early * 1e6:.0f} µs, turns {result.turns - PAIRS + 1}-{result.turns}: {late * 1e6:.0f} µs "
        f"(mean while growing the long session: {statistics.fmean(result.grown) * 1e6:.0f} µs); "
        f"{len(result.checkpoints)} checkpoints ({sum(result.checkpoints) * 1e3:.0f} ms CPU on their thread, "
        f"{spread * 1e6:.0f} µs per turn spread over the turns)"
    )
    return late / early


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--long", type=int, default=1000, help="turns of the long session (>= 50)")
    parser.add_argument("--postgres", metavar="URL", help="also run on this PostgreSQL database")
    args = parser.parse_args()
    if args.long < 50:
        parser.error("--long must be at least 50")
    if args.postgres:
        await postgres_reset(args.postgres)  # fails clearly, before anything else runs, when unreachable

    with tempfile.TemporaryDirectory() as folder:
        async with sqlite_store(Path(folder), "load.db") as store:
            sqlite_load = await load(store, args.sessions, args.turns)
            transactions = store.write_transactions
        size = await asyncio.to_thread(os.path.getsize, Path(folder) / "load.db")  # closed: WAL merged in
        per_turn = (
            f", {transactions} write transactions ({len(sqlite_load.latencies) / transactions:.1f} each)"
        )
        facts_per_s = report_load("sqlite", sqlite_load, args.sessions, args.turns, size, per_turn)
        async with sqlite_store(Path(folder), "long.db") as store:
            sqlite_growth = report_growth("sqlite", await growth(store, args.long))

    if args.postgres:
        async with postgres_store(args.postgres) as store:
            pg_load = await load(store, args.sessions, args.turns)
        report_load("postgres", pg_load, args.sessions, args.turns, await postgres_size(args.postgres))
        async with postgres_store(args.postgres) as store:
            pg_growth = report_growth("postgres", await growth(store, args.long))
        print(f"postgres turn_cost_growth: {pg_growth:.2f}")
        await postgres_reset(args.postgres)

    print(f"cores: {os.cpu_count()}")
    print(f"turn_cost_growth: {sqlite_growth:.2f}")
    print(f"sqlite_facts_per_s: {facts_per_s:.0f}")


if __name__ == "__main__":
    asyncio.run(main())
