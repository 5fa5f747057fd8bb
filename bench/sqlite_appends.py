"""SQLite session store under load: many sessions appending at once, as agent turns do.

Each of ``--sessions`` sessions (default 200) takes its lease and runs ``--turns`` turns; a turn appends
about 12 facts in 4 appends (turn start + input + assistant message; tool dispatched ×3; tool result ×3;
assistant message + turn end + extras), each fact a realistic message-sized JSON payload. Every session
runs concurrently on one event loop, so the store's group commit gathers their appends.

Prints, for ``synchronous`` FULL and NORMAL with every session appending as fast as it can, and for FULL
paced to offer about 2 000 facts/s (each session waits between its appends, as a model or tool would):
facts/s, p50/p99 append latency, write transactions and
facts per transaction, process CPU per fact, database size. Last line ``sqlite_facts_per_s: X`` (FULL,
the default; goal >= 2 000 on 2 cores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from rxagent.messages import Msg
from rxagent.session import Fact, SQLiteStore
from rxagent.session.sqlite import Synchronous
from rxagent.state import SessionKey

# One turn: the facts of each append (kinds only; payloads below).
TURN: list[list[str]] = [
    ["turn_started", "run_started", "message"],
    ["message", "tool_dispatched", "tool_dispatched", "tool_dispatched"],
    ["tool_result", "tool_result", "tool_result"],
    ["message", "run_finished"],
]
FACTS_PER_TURN = sum(len(append) for append in TURN)


def payload(turn: int, n: int) -> str:
    text = f"turn {turn} fact {n}: " + "the quick brown fox jumps over the lazy dog " * 6
    return json.dumps({"message": Msg.user(text).model_dump(mode="json")})


async def session(
    store: SQLiteStore, key: SessionKey, turns: int, pace: float, latencies: list[float]
) -> None:
    lease = await store.acquire(key, "bench", 600)
    assert lease is not None
    for turn in range(turns):
        for kinds in TURN:
            facts = [Fact(kind, payload(turn, n), "run") for n, kind in enumerate(kinds)]  # type: ignore[arg-type]
            if pace:  # the model or the tools at work between two appends
                await asyncio.sleep(pace * (0.5 + random.random()))
            start = time.perf_counter()
            await store.append(lease, facts)
            latencies.append(time.perf_counter() - start)
    await store.release(lease)


async def run(folder: Path, sessions: int, turns: int, synchronous: Synchronous, pace: float = 0.0) -> float:
    path = folder / f"bench-{synchronous.lower()}-{pace}.db"
    latencies: list[float] = []
    async with SQLiteStore(path, synchronous=synchronous) as store:
        wall, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(
            *(session(store, ("bench", f"s{i}"), turns, pace, latencies) for i in range(sessions))
        )
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        transactions = store.write_transactions
        facts = sessions * turns * FACTS_PER_TURN
        assert sum([await store.head(("bench", f"s{i}")) for i in range(sessions)]) == facts
    size = await asyncio.to_thread(os.path.getsize, path)  # closed: the WAL is checkpointed into it
    quantiles = statistics.quantiles(latencies, n=100)
    per_s = facts / wall
    label = f", paced {pace * 1e3:.0f} ms between appends" if pace else ", unpaced"
    print(
        f"synchronous={synchronous}{label}: {facts} facts in {wall:.2f} s: facts_per_s: {per_s:.0f}, "
        f"append p50: {quantiles[49] * 1e3:.1f} ms, p99: {quantiles[98] * 1e3:.1f} ms, "
        f"{transactions} write transactions ({len(latencies) / transactions:.1f} appends each), "
        f"CPU {cpu / facts * 1e6:.0f} µs/fact, database {size / 1e6:.1f} MB"
    )
    return per_s


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()
    print(f"{args.sessions} sessions x {args.turns} turns x {FACTS_PER_TURN} facts in {len(TURN)} appends")
    with tempfile.TemporaryDirectory() as folder:
        await run(Path(folder), args.sessions, args.turns, "NORMAL")
        full = await run(Path(folder), args.sessions, args.turns, "FULL")
        # Paced so that about 2 000 facts/s are offered: latency at the goal's load, not at saturation.
        pace = args.sessions * FACTS_PER_TURN / len(TURN) / 2000
        await run(Path(folder), args.sessions, args.turns, "FULL", pace)
    print(f"cores: {os.cpu_count()}")
    print(f"sqlite_facts_per_s: {full:.0f}")


if __name__ == "__main__":
    asyncio.run(main())
