"""Two processes run the same agent on the same session (agent_process.py), on SQLite and on PostgreSQL.

What the log must show afterwards: runs never overlap (each run's facts are one unbroken stretch, and a
run starts only once the one before it ended), and every turn of both processes is there. Runs submitted
to the two processes start in the order they were submitted, each placed behind exactly the runs submitted
before it; the place of a process killed (SIGKILL) while its run waits stops holding up the line once its
ticket expires. A process
paused (SIGSTOP) past its lease while it holds the session is overtaken by the other, which completes a
run; when it wakes up, its next append is refused by fencing (the run fails with ``LeaseLostError``) and
nothing it did after the takeover reaches the log.

The stores under test are :data:`PROCESS_STORE_KINDS`: each needs a path or URL here (``shared_store``),
which both processes open with :func:`~rxagent.session.open_store`.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from rxagent.session import StoredFact, open_store

from .child_process import ChildProcess

SCRIPT = Path(__file__).with_name("agent_process.py")
USER, SESSION = "ada", "shared"
LEASE_TTL = 1.0

PROCESS_STORE_KINDS = ["sqlite", "postgres"]
"""The stores two processes share in these tests."""


@pytest.fixture(params=PROCESS_STORE_KINDS)
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The path or URL of a new, empty store."""
    kind = str(request.param)
    if kind == "sqlite":
        return str(tmp_path / "sessions.db")
    if kind == "postgres":  # a new database on the real server the tests start
        return str(request.getfixturevalue("postgres_url"))
    raise AssertionError(f"no store for kind {kind!r}")  # pragma: no cover - each kind adds its own


@asynccontextmanager
async def two_processes(
    shared_store: str, lease_ttl: float
) -> AsyncIterator[tuple[ChildProcess, ChildProcess]]:
    """Processes ``A`` and ``B`` on the shared store, ready; both ended afterwards."""

    async def start(name: str) -> ChildProcess:
        config = {"store": shared_store, "user": USER, "session": SESSION}
        child = await ChildProcess.start(SCRIPT, json.dumps({**config, "name": name, "lease_ttl": lease_ttl}))
        started.append(child)
        assert await child.answer(within=60) == {"ready": True}
        return child

    started: list[ChildProcess] = []
    try:
        a, b = await asyncio.gather(start("A"), start("B"))
        yield a, b
    finally:
        for child in started:
            if child.process.returncode is None:
                os.kill(child.pid, signal.SIGCONT)  # a process stopped by a failed test ends too
        await asyncio.gather(*(child.close() for child in started))


@pytest.fixture
async def processes(shared_store: str) -> AsyncIterator[tuple[ChildProcess, ChildProcess]]:
    """Processes ``A`` and ``B`` on the shared store, with a short lease (a paused one loses it soon)."""
    async with two_processes(shared_store, LEASE_TTL) as both:
        yield both


@pytest.fixture
async def patient_processes(shared_store: str) -> AsyncIterator[tuple[ChildProcess, ChildProcess]]:
    """Processes ``A`` and ``B`` on the shared store, with leases (and places in line) that outlast any
    stall of a loaded machine: what these tests watch must not depend on one expiring."""
    async with two_processes(shared_store, 30.0) as both:
        yield both


async def session_log(shared_store: str) -> list[StoredFact]:
    store = open_store(shared_store)
    try:
        return await store.read((USER, SESSION))
    finally:
        await store.aclose()


def check_runs_never_overlap(facts: list[StoredFact]) -> list[tuple[str, str, str]]:
    """Assert that runs took the session one at a time; return each run's ``(id, input text, ending)``."""
    writers: list[str] = []  # the runs that wrote, in the order their stretches of facts come
    for fact in facts:
        assert fact.run_id is not None, fact
        if not writers or writers[-1] != fact.run_id:
            assert fact.run_id not in writers, (
                f"run {fact.run_id} wrote again at {fact.seq} after another run"
            )
            writers.append(fact.run_id)
    runs: list[tuple[str, str, str]] = []
    running: tuple[str, str] | None = None
    for fact in facts:
        data = fact.data()
        assert isinstance(data, dict)
        if fact.kind == "run_started":
            assert running is None, f"run {data['run_id']} started at {fact.seq} while {running} ran"
            inputs = data["input"]
            assert isinstance(inputs, list)
            texts = [block["text"] for message in inputs for block in message["content"]]  # type: ignore[index,union-attr]
            running = (str(data["run_id"]), "".join(str(t) for t in texts))
        elif fact.kind in ("run_finished", "run_failed", "run_cancelled"):
            assert running is not None, f"{fact.kind} at {fact.seq} with no run started"
            assert data["run_id"] == running[0], f"{fact.kind} at {fact.seq} ends a run that is not running"
            runs.append((*running, str(data.get("reason") or fact.kind)))
            running = None
    assert running is None, f"run {running} never ended"
    return runs


def answers(facts: list[StoredFact]) -> list[str]:
    """The assistant's text answers, in log order."""
    found: list[str] = []
    for fact in facts:
        if fact.kind == "message":
            message = fact.data()["message"]  # type: ignore[index,call-overload]
            text = "".join(b.get("text", "") for b in message["content"] if b["type"] == "text")  # type: ignore[index,union-attr]
            if message["role"] == "assistant" and text:  # type: ignore[index]
                found.append(text)
    return found


async def test_two_processes_take_turns_on_one_session_and_their_runs_never_overlap(
    shared_store: str, processes: tuple[ChildProcess, ChildProcess]
) -> None:
    a, b = processes
    turns = 4
    a.send(op="turns", count=turns)
    b.send(op="turns", count=turns)
    done = await asyncio.gather(a.answer(within=60), b.answer(within=60))
    assert done == [{"reasons": ["MODEL_STOP"] * turns}] * 2

    facts = await session_log(shared_store)
    runs = check_runs_never_overlap(facts)
    expected = {f"{name} turn {k}" for name in "AB" for k in range(1, turns + 1)}
    assert sorted(text for _, text, _ in runs) == sorted(expected)
    assert {ending for _, _, ending in runs} == {"MODEL_STOP"}
    assert sorted(answers(facts)) == sorted(f"{text[0]} noted {text}" for text in expected)
    # Each process's turns in its own order (the other's may come in between).
    for name in "AB":
        mine = [text for _, text, _ in runs if text.startswith(name)]
        assert mine == [f"{name} turn {k}" for k in range(1, turns + 1)]


async def test_a_process_paused_past_its_lease_is_overtaken_and_its_next_append_is_fenced_off(
    shared_store: str, processes: tuple[ChildProcess, ChildProcess]
) -> None:
    a, b = processes
    a.send(op="hold", text="A holds")
    assert await a.answer() == {"holding": True}  # A's run holds the session, in its second model call
    b.send(op="turns", count=1)  # B waits for the session
    os.kill(a.pid, signal.SIGSTOP)
    try:
        # A cannot renew while stopped: B takes the session once A's lease expired, and finishes a run.
        assert await b.answer(within=30) == {"reasons": ["MODEL_STOP"]}
        before_wake = await session_log(shared_store)
    finally:
        os.kill(a.pid, signal.SIGCONT)
    a.send(op="release")
    held = await a.answer()
    assert held["error"] == "LeaseLostError", held
    assert held["reasons"] == ["ERROR"]  # the failed run still ended with one AgentResult

    facts = await session_log(shared_store)
    assert facts == before_wake  # nothing A did after the takeover reached the log
    runs = check_runs_never_overlap(facts)
    assert [(text, ending) for _, text, ending in runs] == [
        ("A holds", "run_failed"),
        ("B turn 1", "MODEL_STOP"),
    ]
    lost = next(f.data() for f in facts if f.kind == "run_failed")
    assert lost["error"] == "the run ended with no record of how (its process stopped)"  # type: ignore[index,call-overload]
    assert lost["run_id"] == runs[0][0]  # type: ignore[index,call-overload]
    # The result A's tool got before the pause was kept, and B sent it on before its own input.
    first = next(f for f in facts if f.run_id == runs[1][0] and f.kind == "message").data()["message"]  # type: ignore[index,call-overload]
    assert first["role"] == "tool"  # type: ignore[index]
    assert [(r["tool_use_id"], r["output"][0]["text"]) for r in first["content"]] == [
        ("A-1", "noted A holds")
    ]  # type: ignore[index,union-attr]
    assert answers(facts) == ["B noted B turn 1"]

    # A lost the session, not its ability to run: its next run loads what B wrote and goes on.
    assert await a.ask(op="turns", count=1) == {"reasons": ["MODEL_STOP"]}
    runs = check_runs_never_overlap(await session_log(shared_store))
    assert [text for _, text, _ in runs] == ["A holds", "B turn 1", "A turn 1"]


async def test_runs_submitted_to_two_processes_start_in_the_order_they_were_submitted(
    shared_store: str, patient_processes: tuple[ChildProcess, ChildProcess]
) -> None:
    a, b = patient_processes
    by_name = {"A": a, "B": b}
    choose = random.Random(21)  # A first, B second, then a fixed mix with back-to-back runs of each
    order = ["A", "B", *(choose.choice("AB") for _ in range(29))]
    texts = [f"{name} run {n}" for n, name in enumerate(order)]
    for n, (name, text) in enumerate(zip(order, texts, strict=True)):
        # The first holds the session (at its model) while the others join the line.
        placed = await by_name[name].ask(op="submit", text=text, hold=n == 0)
        assert placed == {"position": n}, text  # behind every run submitted before it, in either process
    assert await a.ask(op="open") == {"opened": True}
    done = await asyncio.gather(a.ask(op="wait", within=120), b.ask(op="wait", within=120))
    assert done == [{"reasons": ["MODEL_STOP"] * order.count(name)} for name in "AB"]

    facts = await session_log(shared_store)
    runs = check_runs_never_overlap(facts)
    assert [text for _, text, _ in runs] == texts  # the run submitted second (to B) started second
    assert sorted(answers(facts)) == sorted(f"{text[0]} noted {text}" for text in texts)


async def test_the_place_of_a_process_killed_while_it_waits_stops_holding_up_the_line(
    shared_store: str, processes: tuple[ChildProcess, ChildProcess]
) -> None:
    a, b = processes
    assert await a.ask(op="submit", text="A run 0", hold=True) == {"position": 0}
    assert await b.ask(op="submit", text="B run 1") == {"position": 1}
    assert await a.ask(op="submit", text="A run 2") == {"position": 2}
    await b.kill()  # its run waits in line; nobody renews its ticket from now on
    assert await a.ask(op="open") == {"opened": True}
    # A's second run starts once the dead waiter's ticket expired (a lease's TTL, 1 s, after it was renewed).
    assert await a.ask(op="wait", within=60) == {"reasons": ["MODEL_STOP", "MODEL_STOP"]}
    runs = check_runs_never_overlap(await session_log(shared_store))
    assert [text for _, text, _ in runs] == ["A run 0", "A run 2"]
