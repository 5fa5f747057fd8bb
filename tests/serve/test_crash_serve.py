"""The crash torture test over HTTP: a real server process (the one ``rxagent serve`` runs) SIGKILLed at
random moments of rounds of side-effecting batches, on SQLite and on PostgreSQL, and another started.

Each round posts a batch of two or three calls (one by one, or ``concurrency_safe`` together) to the
server, kills it at a random moment (seeded: ``RXAGENT_CRASH_SEED`` picks another seed; the seed and the
counts are printed), and goes on with the next server (started while the round ran; several servers may
share one store). Each call appends its id to a ledger file (fsync) outside the store. After each kill
(tests/session/crash_checks.py): every call's side effect happened 0 or 1 times, and one that happened
has its recorded result or is reported uncertain. Then the next server finishes the round the way a
client would: the session's status names the uncertain calls, ``POST …/reconcile`` settles them from the
ledger, or a run carries on; the round ends with every call done exactly once and the killed run
recorded as failed.

One feed client follows the session all along, reconnecting to the next server with ``Last-Event-ID``
after each kill: it sees every fact of the log exactly once, in order, each as the log has it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rxagent.session import SessionStore, open_store
from tests.serve.conftest import WAIT, SSEReader
from tests.session.child_process import ChildProcess
from tests.session.crash_checks import Kills, Landed, check_killed, check_recovered, kill_at_random
from tests.session.crash_process import call_ids, ledger_counts, round_text

SCRIPT = Path(__file__).with_name("crash_serve.py")
SESSION = "orders"
KEY = (None, SESSION)
LEASE_TTL = 30.0
"""A server's hold on the session. A killed server's is taken over at once, whatever its TTL: the next
server, on this host, finds its process gone (rxagent.session.owner). A long one keeps a live server's
lease from expiring while the machine is busy."""
ROUNDS = 10
SEED = int(os.environ.get("RXAGENT_CRASH_SEED", "2112"))


async def start_server(where: str, ledger: Path, seed: int) -> tuple[ChildProcess, str]:
    config = {"store": where, "ledger": str(ledger), "seed": seed, "lease_ttl": LEASE_TTL}
    child = await ChildProcess.start(SCRIPT, json.dumps(config))
    try:
        url = (await child.answer(within=60))["listening"]
    except BaseException:
        await child.close()
        raise
    return child, str(url)


class FeedClient:
    """One client of the session's feed, across servers: each connection resumes with ``Last-Event-ID``
    after the last fact it got, and every fact must come right after that one (no gap, no repeat)."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self.http = http
        self.facts: list[dict[str, Any]] = []
        self.connections = 0

    @property
    def last(self) -> int:
        return int(self.facts[-1]["seq"]) if self.facts else 0

    async def follow(self, url: str, until: Callable[[dict[str, Any]], bool] | None = None) -> None:
        """Read the feed from ``url`` until the connection breaks (the server was killed) or ``until``
        accepts a fact."""
        headers = {"Last-Event-ID": str(self.last)} if self.facts else {}
        self.connections += 1
        timeout = aiohttp.ClientTimeout(total=None)
        try:
            async with self.http.get(
                f"{url}/api/sessions/{SESSION}/feed", headers=headers, timeout=timeout
            ) as r:
                assert r.status == 200, await r.text()
                reader = SSEReader(r)
                while (event := await reader.next()) is not None:
                    assert event.event == "fact", event  # a gap would be one
                    fact = event.json()
                    assert fact["seq"] == self.last + 1, (fact["seq"], self.last)
                    self.facts.append(fact)
                    if until is not None and until(fact):
                        return
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
            return  # the server is gone mid-stream


def result_of(run_id: str) -> Callable[[dict[str, Any]], bool]:
    def check(fact: dict[str, Any]) -> bool:
        data = fact["data"]
        return fact["kind"] == "event" and data["type"] == "agent_result" and data["run_id"] == run_id

    return check


@pytest.fixture
async def servers() -> AsyncIterator[list[ChildProcess]]:
    """Servers to end whatever happens (a failing test leaves none running)."""
    started: list[ChildProcess] = []
    yield started
    await asyncio.gather(*(child.close() for child in started))


async def finish_round(
    http: aiohttp.ClientSession,
    url: str,
    feed: FeedClient,
    store: SessionStore,
    ledger: Path,
    text: str,
    landed: Landed,
) -> str:
    """Finish the round through the server at ``url``, as a client would; how (for the counts)."""
    async with http.get(f"{url}/api/sessions/{SESSION}") as response:
        assert response.status in (200, 404)  # 404: killed before the session's first fact
        status = (await response.json())["status"] if response.status == 200 else {"state": "idle"}
    facts = await store.read(KEY)
    messages = [json.loads(f.payload)["message"] for f in facts if f.kind == "message"]
    ids = call_ids_of(text)
    asked = any(block.get("id") in ids for m in messages for block in m["content"])
    if status["state"] == "uncertain":
        counts = ledger_counts(ledger)
        outcomes = [
            {"call_id": c["id"], "outcome": "succeeded", "output": f"did {c['id']}"}
            if counts[c["id"]]
            else {"call_id": c["id"], "outcome": "retry"}
            for c in status["uncertain"]
        ]
        how = "reconciled: " + ",".join(sorted(o["outcome"] for o in outcomes))
        async with http.post(
            f"{url}/api/sessions/{SESSION}/reconcile", json={"outcomes": outcomes}
        ) as response:
            assert response.status == 202, await response.text()
            run_id = (await response.json())["run_id"]
    elif not landed.open_runs and asked and messages[-1]["content"][0]["type"] == "text":
        return "nothing to do: the run had ended"
    else:
        # The batch was never asked for: ask again. Or it was: a run carries on from what is recorded
        # (calls that never started run first).
        how, body = ("asked again", text) if not asked else ("carried on", "go on")
        async with http.post(f"{url}/api/sessions/{SESSION}/runs", json={"input": body}) as response:
            assert response.status == 202, await response.text()
            run_id = (await response.json())["run_id"]
    async with asyncio.timeout(30):  # the killed server's lease is taken over at once
        await feed.follow(url, until=result_of(run_id))
    return how


def call_ids_of(text: str) -> list[str]:
    number, calls = int(text.split()[1].rstrip(":")), int(text.split()[2])
    return call_ids(number, calls)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_random_kills_of_a_server_never_do_a_side_effect_twice_and_the_feed_stays_exact(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, servers: list[ChildProcess]
) -> None:
    where = str(tmp_path / "sessions.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    ledger = tmp_path / "ledger.txt"
    seed = SEED + 10 + (kind == "postgres")
    rng = random.Random(seed)
    kills = Kills.new()

    async def start(number: int) -> tuple[ChildProcess, str]:
        child, url = await start_server(where, ledger, seed * 1000 + number)
        servers.append(child)
        return child, url

    store = open_store(where)
    upcoming = asyncio.ensure_future(start(0))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT * 3)) as http:
            feed = FeedClient(http)
            server, url = await upcoming
            upcoming = asyncio.ensure_future(start(1))
            for number in range(ROUNDS):
                together, calls = bool(number % 2), 2 + (number // 2) % 2
                ids, text = call_ids(number, calls), round_text(number, calls, together)
                async with http.post(f"{url}/api/sessions/{SESSION}/runs", json={"input": text}) as response:
                    assert response.status == 202, await response.text()
                following = asyncio.ensure_future(feed.follow(url))  # from its last fact: it misses none
                await kill_at_random(server, rng, ids)
                async with asyncio.timeout(WAIT):
                    await following  # the connection broke with the server

                landed = await check_killed(store, KEY, ledger, ids)
                kills.add(landed)
                server, url = await upcoming
                if number + 1 < ROUNDS:
                    upcoming = asyncio.ensure_future(start(number + 2))  # imports while this round ends
                kills.outcomes[await finish_round(http, url, feed, store, ledger, text, landed)] += 1
                await check_recovered(store, KEY, ledger, ids, landed.open_runs)

            # The client that followed the session across every kill saw the log, each fact once.
            facts = await store.read(KEY)
            if feed.last < len(facts):
                async with asyncio.timeout(WAIT):
                    await feed.follow(url, until=lambda fact: fact["seq"] == len(facts))
            seen = [(f["seq"], f["kind"], f["run_id"], f["data"]) for f in feed.facts]
            assert seen == [(f.seq, f.kind, f.run_id, json.loads(f.payload)) for f in facts]
    finally:
        await store.aclose()
    print(f"serve crash torture on {kind}, seed {seed}: {kills}; feed: {feed.connections} connections")
    assert kills.total == ROUNDS
    assert kills.where["inside the batch"] >= ROUNDS // 4
