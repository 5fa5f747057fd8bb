"""Scale-out: two real ``rxagent serve`` processes on one PostgreSQL database serve the same session.

The database is the test set-up's own server (``postgres_url``: pgserver, a new database per test); the
model is the loopback OpenAI-compatible server, whose replies hold their deltas at a ``Hold`` frame until
the test opens it, so "live" is asserted without a clock: a delta reaches the other process's feed while
the run that streams it cannot have ended yet. Every wait has a timeout; only a server's status, which
nothing signals, is asked for again and again until it says what the test waits for.

What must hold:

- a run submitted to server A is followed through server B's feed live, numbered as in the log, with
  no gap and no repeat, and the text is the model's;
- a run submitted to B while A's run holds the session waits for the lease (queued, ``held_elsewhere``)
  and runs once A's has ended: it does not fail, and the two never overlap;
- A SIGKILLed mid-run leaves its lease behind; B, on the same host, finds A's process gone and takes the
  session over at once, without waiting for that lease to expire (``--lease-ttl``), records that A's run
  ended without a record (``run_failed``), and keeps every fact A had appended, unchanged.

Bad inputs tried: a server killed with SIGKILL mid-stream (its lease held, its model reply open, its
listening connection to the database cut without a goodbye).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
import psycopg
import pytest

from rxagent.session import StoredFact
from rxagent.session.postgres import PostgresStore
from tests.model.openai_server import Hold, OpenAIServer, Reply, finish_chunk, text_chunk, usage_chunk
from tests.serve.conftest import WAIT, SSEReader
from tests.test_cli import finish, on, start, text_reply

SID = "shared"
KEY = (None, SID)
LEASE_TTL = 3.0
"""The servers' ``--lease-ttl``: long enough that a killed server's lease is still unexpired when the other
server, on the same host, takes the session over (it does at once: the killed process is gone)."""


@dataclass
class Serve:
    """One ``rxagent serve`` process and a client of it."""

    process: asyncio.subprocess.Process
    http: aiohttp.ClientSession

    async def submit(self, text: str) -> str:
        async with self.http.post(f"/api/sessions/{SID}/runs", json={"input": text}) as response:
            assert response.status == 202, await response.text()
            return str((await response.json())["run_id"])

    async def status(self) -> dict[str, Any]:
        async with self.http.get(f"/api/sessions/{SID}") as response:
            assert response.status == 200, await response.text()
            return (await response.json())["status"]

    async def until_known(self) -> None:
        """Wait until this server knows the session (another has appended to it), asking every 20 ms
        within :data:`WAIT`: its feed is there from then on."""
        deadline = time.monotonic() + WAIT
        while True:
            async with self.http.get(f"/api/sessions/{SID}") as response:
                if response.status == 200:
                    return
                assert response.status == 404, await response.text()
            assert time.monotonic() < deadline, "the session never showed up"
            await asyncio.sleep(0.02)

    async def until_status(self, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The session's status once ``check`` accepts it (nothing signals a status: it is asked for every
        20 ms, within :data:`WAIT`)."""
        deadline = time.monotonic() + WAIT
        while not check(status := await self.status()):
            assert time.monotonic() < deadline, f"the status never came: {status}"
            await asyncio.sleep(0.02)
        return status

    @asynccontextmanager
    async def feed(self) -> AsyncIterator[Feed]:
        async with self.http.get(f"/api/sessions/{SID}/feed") as response:
            assert response.status == 200, await response.text()
            try:
                yield Feed(SSEReader(response))
            finally:
                response.close()


@dataclass
class Feed:
    """A client of a feed, keeping every fact it got."""

    reader: SSEReader

    def __post_init__(self) -> None:
        self.facts: list[dict[str, Any]] = []

    async def until(self, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Read on until a fact ``check`` accepts (each read within :data:`WAIT`); that fact."""
        while True:
            event = await self.reader.next()
            assert event is not None, f"the feed ended after {len(self.facts)} facts"
            assert event.event == "fact", f"not a fact: {event}"
            fact = event.json()
            assert event.id == str(fact["seq"])
            self.facts.append(fact)
            if check(fact):
                return fact


@asynccontextmanager
async def serving(model: OpenAIServer, db: str) -> AsyncIterator[Serve]:
    """``rxagent serve`` on ``db`` with a free port and ``--lease-ttl`` :data:`LEASE_TTL`; stopped with
    SIGTERM after (unless the test killed it), and then it must exit cleanly."""
    process = await start(
        *on(model, "serve", "--port", "0", "--db", db, "--tools", "none", "--lease-ttl", str(LEASE_TTL))
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode()
    if not line.startswith("listening on http://127.0.0.1:"):
        process.kill()
        pytest.fail(f"the server did not start: {line!r} {(await finish(process)).stderr}")
    killed = False
    try:
        async with aiohttp.ClientSession(line.split()[-1], timeout=aiohttp.ClientTimeout(total=None)) as http:
            yield Serve(process, http)
    finally:
        killed = process.returncode is not None
        if not killed:
            process.send_signal(signal.SIGTERM)
        done = await finish(process)
    if not killed:
        assert done.code == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr


def delta(fact: dict[str, Any]) -> str | None:
    """The text of a fact that is a text delta event, else ``None``."""
    data = fact["data"]
    if fact["kind"] == "event" and data["type"] == "text_delta":
        return str(data["text"])
    return None


def is_result_of(run_id: str) -> Callable[[dict[str, Any]], bool]:
    def check(fact: dict[str, Any]) -> bool:
        data = fact["data"]
        return fact["kind"] == "event" and data["type"] == "agent_result" and data["run_id"] == run_id

    return check


def text_of(facts: list[dict[str, Any]], run_id: str) -> str:
    return "".join(d for f in facts if f["run_id"] == run_id and (d := delta(f)) is not None)


def same_as_log(facts: list[dict[str, Any]], log: list[StoredFact]) -> None:
    """A feed's facts are the log's: numbered 1..N, each once, in order, with the log's kinds, runs and
    payloads."""
    assert [f["seq"] for f in facts] == list(range(1, len(facts) + 1))
    assert [(f["seq"], f["kind"], f["run_id"], f["data"]) for f in facts] == [
        (s.seq, s.kind, s.run_id, json.loads(s.payload)) for s in log
    ]


def kinds(log: list[StoredFact], kind: str) -> list[StoredFact]:
    return [f for f in log if f.kind == kind]


def run_of(fact: StoredFact) -> str:
    """The run a run fact (started, finished, failed) is about."""
    data = fact.data()
    assert isinstance(data, dict)
    return str(data["run_id"])


async def read_log(url: str) -> list[StoredFact]:
    async with PostgresStore(url) as store:
        return await store.read(KEY)


async def lease_row(url: str) -> tuple[str | None, float | None]:
    """Who holds the session's lease, and until when (straight from the table)."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT lease_owner, lease_expires_at FROM rxagent_sessions WHERE session_id = %s", (SID,)
        )
        row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


async def test_a_run_on_one_server_is_followed_live_through_the_others_feed(
    server: OpenAIServer, postgres_url: str
) -> None:
    start, first, second = Hold(asyncio.Event()), Hold(asyncio.Event()), Hold(asyncio.Event())
    server.script(
        Reply.sse(
            start,
            text_chunk("Once"),
            first,
            text_chunk(" upon"),
            second,
            text_chunk(" a time"),
            finish_chunk("stop"),
            usage_chunk(),
        ),
        text_reply("The", " end."),
    )
    async with serving(server, postgres_url) as a, serving(server, postgres_url) as b:
        story = await a.submit("a story")
        await asyncio.wait_for(start.reached.wait(), WAIT)
        await b.until_known()  # A's run started: B watches before the model sent anything
        async with b.feed() as feed:
            start.gate.set()
            # Live: each delta reaches B's feed while the model holds the rest of A's answer back.
            await feed.until(lambda f: delta(f) == "Once")
            assert first.reached.is_set()
            assert not first.gate.is_set()
            assert (await a.status())["running"] == story
            assert (await b.status())["running"] is None  # B runs nothing: it follows

            # Submitted to the busy session through B: it waits for A's lease, it does not fail.
            sequel = await b.submit("and then?")
            status = await b.until_status(lambda s: s["held_elsewhere"])
            assert (status["state"], status["queued"], status["running"]) == ("queued", 1, None)
            assert status["position"] == 1  # next in the line both servers share

            first.gate.set()
            await feed.until(lambda f: delta(f) == " upon")
            assert not second.gate.is_set()
            assert not any(is_result_of(story)(f) for f in feed.facts)
            second.gate.set()
            await feed.until(is_result_of(story))
            await feed.until(is_result_of(sequel))  # B's own run, published by B from its claim on
            status = await b.until_status(lambda s: s["running"] is None and s["queued"] == 0)
            assert not status["held_elsewhere"]

    log = await read_log(postgres_url)
    same_as_log(feed.facts, log)
    assert text_of(feed.facts, story) == "Once upon a time"
    assert text_of(feed.facts, sequel) == "The end."
    # The runs did not overlap: B's started after A's ended, and each ended once, as it should.
    assert [run_of(f) for f in kinds(log, "run_started")] == [story, sequel]
    ended = [f for f in log if f.kind in ("run_finished", "run_cancelled", "run_failed")]
    assert [(f.kind, run_of(f)) for f in ended] == [("run_finished", story), ("run_finished", sequel)]
    assert ended[0].seq < kinds(log, "run_started")[1].seq


async def test_killing_the_executing_server_lets_the_other_on_its_host_take_the_session_over_at_once(
    server: OpenAIServer, postgres_url: str
) -> None:
    hold = Hold(asyncio.Event())
    server.script(
        Reply.sse(text_chunk("Half a"), hold, text_chunk(" story")),  # A's run: streams, then hangs
        text_reply("Taken", " over."),
    )
    async with serving(server, postgres_url) as a, serving(server, postgres_url) as b:
        story = await a.submit("a story")
        await b.until_known()
        async with b.feed() as feed:
            await feed.until(lambda f: delta(f) == "Half a")
            await asyncio.wait_for(hold.reached.wait(), WAIT)

            a.process.kill()
            await asyncio.wait_for(a.process.wait(), WAIT)
            hold.gate.set()  # the rest of A's answer goes nowhere: A is gone
            killed_at = time.time()
            appended = await read_log(postgres_url)  # everything A appended before it died
            owner, expires_at = await lease_row(postgres_url)
            assert owner is not None
            assert f":{a.process.pid}:" in owner
            assert expires_at is not None
            assert expires_at > killed_at

            sequel = await b.submit("go on")  # A's process is gone: B does not wait for its lease
            await feed.until(is_result_of(sequel))
            status = await b.until_status(lambda s: s["running"] is None and s["queued"] == 0)
            assert not status["held_elsewhere"]

    log = await read_log(postgres_url)
    same_as_log(feed.facts, log)
    # Nothing A appended is lost or changed: the log goes on from where A left it.
    assert [(f.seq, f.kind, f.run_id, f.payload) for f in log[: len(appended)]] == [
        (f.seq, f.kind, f.run_id, f.payload) for f in appended
    ]
    assert text_of(feed.facts, story) == "Half a"
    # B took over before A's lease expired, and said how A's run ended (it has no end of its own).
    (lost,) = [f for f in kinds(log, "run_failed") if run_of(f) == story]
    assert "process stopped" in json.loads(lost.payload)["error"]
    started = kinds(log, "run_started")
    assert [run_of(f) for f in started] == [story, sequel]
    assert lost.seq > appended[-1].seq
    assert started[1].seq > lost.seq
    assert started[1].at < expires_at
    assert not any(is_result_of(story)(f) for f in feed.facts)
    assert text_of(feed.facts, sequel) == "Taken over."
    assert (await lease_row(postgres_url))[0] is None  # B gave the session back
