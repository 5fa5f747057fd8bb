"""One of the two processes of the two-process lease test (tests/session/test_postgres.py), run as
``python -m tests.session.lease_worker ROLE URL TTL``; it reports on stdout, one JSON object a line.

- ``holder`` takes the lease on :data:`KEY` for ``TTL`` seconds, appends ``holder-1`` and reports its lease,
  then waits for a line on stdin (the test pauses it with SIGSTOP meanwhile, past the lease's expiry), and
  then tries to append ``holder-late`` and reports whether the store wrote it or fenced it off.
- ``taker`` opens the store, reports that it is ready and waits for a line on stdin; then it tries to take
  the lease until it gets it (every 20 ms, for at most 30 s), appends ``taker-1`` and ``taker-2``, and
  reports when it got the lease and how often it was refused before.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from rxagent.session import Fact, LeaseLostError
from rxagent.session.postgres import PostgresStore
from rxagent.state import SessionKey

KEY: SessionKey = ("ada", "shared")


def _fact(text: str) -> Fact:
    return Fact("steer", json.dumps({"text": text}), run_id=None)


def _report(**data: object) -> None:
    print(json.dumps(data), flush=True)


async def _holder(store: PostgresStore, ttl: float) -> None:
    lease = await store.acquire(KEY, "holder", ttl)
    assert lease is not None, "the session's lease should be free"
    await store.append(lease, [_fact("holder-1")])
    _report(event="holding", token=lease.token, expires_at=lease.expires_at)
    await asyncio.to_thread(sys.stdin.readline)
    try:
        await store.append(lease, [_fact("holder-late")])
    except LeaseLostError as exc:
        _report(event="fenced", error=str(exc))
    else:
        _report(event="written")


async def _taker(store: PostgresStore, ttl: float) -> None:
    await store.open()
    _report(event="ready")
    await asyncio.to_thread(sys.stdin.readline)
    refused = 0
    deadline = time.monotonic() + 30
    while (lease := await store.acquire(KEY, "taker", ttl)) is None:
        refused += 1
        if time.monotonic() > deadline:
            _report(event="gave up", refused=refused)
            return
        await asyncio.sleep(0.02)  # polling is how a contender waits for a lease to expire
    taken_at = time.time()
    await store.append(lease, [_fact("taker-1"), _fact("taker-2")])
    await store.release(lease)
    _report(event="took over", token=lease.token, taken_at=taken_at, refused=refused)


async def main(role: str, url: str, ttl: float) -> None:
    async with PostgresStore(url, min_connections=1, max_connections=1) as store:
        await (_holder if role == "holder" else _taker)(store, ttl)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
